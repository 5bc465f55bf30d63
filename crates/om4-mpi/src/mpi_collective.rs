//! [`MpiCollective`]: the reductions of a data-parallel run (gradient buckets, loss sums) over
//! an MPI communicator, as a [`Collective`].
//!
//! The module's one piece of `unsafe` code makes the communicator handle `Send` and `Sync`
//! (rsmpi's handle is a raw pointer under Open MPI): every MPI call of this type holds `lock`, and
//! construction refuses a library initialized below `MPI_THREAD_SERIALIZED`.

use std::sync::Mutex;

use mpi::collective::SystemOperation;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use crate::collective::{Collective, ReduceOp};
use crate::error::{Error, Result};

/// Elements per `MPI_Allreduce` call: counts are C `int`s.
const MAX_COUNT: usize = 1 << 30;

/// The ranks of an MPI communicator as a [`Collective`].
///
/// With `Threading::Serialized` nothing else in the process may call MPI while a reduction runs;
/// a trainer whose loader reads a `ShardedSource` (MPI calls on the loader's thread) needs
/// `Threading::Multiple`.
pub struct MpiCollective {
    comm: Mutex<SimpleCommunicator>,
    rank: usize,
    size: usize,
}

impl std::fmt::Debug for MpiCollective {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiCollective").field("rank", &self.rank).field("size", &self.size).finish_non_exhaustive()
    }
}

// SAFETY: the communicator is a handle that any thread may pass to MPI; every call through it
// holds the mutex, so calls never overlap, and `new` refuses a library below
// MPI_THREAD_SERIALIZED, under which calls from different threads are allowed when they do not
// overlap.
unsafe impl Send for MpiCollective {}
// SAFETY: as for `Send`: shared access only reaches the communicator through the mutex.
unsafe impl Sync for MpiCollective {}

impl MpiCollective {
    /// A collective over a duplicate of `comm` (its messages never mix with the caller's).
    ///
    /// # Errors
    /// [`Error::Threading`] below `MPI_THREAD_SERIALIZED`.
    pub fn new(comm: &SimpleCommunicator) -> Result<Self> {
        let provided = mpi::environment::threading_support();
        if provided < mpi::environment::Threading::Serialized {
            return Err(Error::Threading { provided: format!("{provided:?}") });
        }
        let comm = comm.duplicate();
        let (rank, size) = (comm.rank() as usize, comm.size() as usize);
        Ok(Self { comm: Mutex::new(comm), rank, size })
    }

    /// Ends every rank of the job (`MPI_Abort`) after printing `message` on this one: what a rank
    /// that cannot go on calls so that the others, waiting in a reduction, stop instead of hanging.
    pub fn abort(&self, message: &str, code: i32) -> ! {
        eprintln!("rank {} of {}: {message}; aborting the job", self.rank, self.size);
        let comm = self.comm.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        comm.abort(code)
    }

    /// Waits until every rank has called it (`MPI_Barrier`).
    pub fn barrier(&self) {
        let comm = self.comm.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        comm.barrier();
    }

    fn reduce<T>(&self, values: &mut [T], op: ReduceOp) -> Result<()>
    where
        T: Copy + mpi::datatype::Equivalence,
    {
        let op = match op {
            ReduceOp::Sum => SystemOperation::sum(),
            ReduceOp::Max => SystemOperation::max(),
            ReduceOp::Min => SystemOperation::min(),
        };
        let comm = self.comm.lock().map_err(|_| Error::Collective {
            call: "MPI_Allreduce",
            reason: "a thread panicked during an earlier reduction".into(),
        })?;
        // Open MPI's default error handler aborts the job on a failed collective, so a failure
        // never returns here half-done.
        for chunk in values.chunks_mut(MAX_COUNT) {
            let send = chunk.to_vec();
            comm.all_reduce_into(&send[..], chunk, op);
        }
        Ok(())
    }
}

impl Collective for MpiCollective {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.size
    }
    fn all_reduce_f32(&self, values: &mut [f32], op: ReduceOp) -> Result<()> {
        self.reduce(values, op)
    }
    fn all_reduce_f64(&self, values: &mut [f64], op: ReduceOp) -> Result<()> {
        self.reduce(values, op)
    }
}
