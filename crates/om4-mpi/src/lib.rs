//! om4's data parallelism: the reductions ranks share, and over MPI a DDStore-style plane store
//! sharded over the ranks' memory.
//!
//! [`Collective`] is what a data-parallel trainer reduces through (gradient buckets, loss sums),
//! on host slices, so that any framework and any transport can take part: [`SingleProcess`] is
//! the world of one process, [`ThreadGroup`] hands out ranks that are threads of one process
//! (what the trainer's tests run), and `MpiCollective` (feature `mpi`) is the ranks of an MPI
//! job. This part builds without MPI.
//!
//! `ShardedSource` (feature `mpi`) is built collectively from any
//! [`om4_pipeline::BatchSource`] (om4-store's `Om4Source` over a Zarr store, say): each
//! rank reads only its share of the planes (every channel of every variable set at a contiguous
//! block of time positions, [`ShardLayout`]) into an MPI-3 window, and from then on it is a
//! `BatchSource` that serves every plane, fetching other ranks' blocks with one-sided `MPI_Get`s.
//! The loader, plan dedup and preparation work on it unchanged, and it passes
//! `om4_pipeline::conformance::check_source`. With a `width` below the number of ranks, every
//! group of `width` ranks holds a full copy, and reads stay inside the reader's group.
//!
//! ```no_run
//! # #[cfg(feature = "mpi")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use om4_mpi::{ShardOptions, ShardedSource};
//! use om4_store::DataConfig;
//!
//! let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Multiple).ok_or("MPI init failed")?;
//! let world = universe.world();
//! let store = DataConfig::at(std::path::PathBuf::from("OM4.zarr")).open()?.train; // every time
//! let sharded = Arc::new(ShardedSource::new(&world, &store, &ShardOptions::default())?);
//! // … a Loader over `sharded`; drop every Arc of it before `universe`.
//! # Ok(()) }
//! # #[cfg(not(feature = "mpi"))]
//! # fn main() {}
//! ```
//!
//! Without feature `mpi` (the default) only the collectives above, [`ShardLayout`] and [`Error`]
//! are built, so the workspace builds and tests without an MPI library. With it, the system MPI
//! (Open MPI or MPICH) and libclang (rsmpi's build runs bindgen) must be installed; on Debian
//! `openmpi-bin libopenmpi-dev libclang1-14 libclang-common-14-dev`. Run the loopback check with
//! `cargo build -p om4-mpi --features mpi --example sharded_check` then
//! `mpirun -n 4 --oversubscribe target/debug/examples/sharded_check`.
//!
//! `MpiCollective` (feature `mpi`) is the [`Collective`] of a data-parallel run
//! over MPI: `om4_samudra::Trainer::data_parallel` averages gradients in a few large buckets
//! through it (`examples/train_samudra --mpi` under `mpirun`).
//!
//! The crate's `unsafe` code is in two private modules: `rma` (the window over `mpi::ffi`,
//! because rsmpi has no safe one-sided API) and `mpi_collective` (`Send`/`Sync` for the communicator
//! handle, whose calls a mutex serializes).

#![warn(missing_docs)]
#![deny(unsafe_code)]

mod collective;
mod error;
mod layout;
#[cfg(feature = "mpi")]
#[allow(unsafe_code)]
mod mpi_collective;
#[cfg(feature = "mpi")]
#[allow(unsafe_code)]
mod rma;
#[cfg(feature = "mpi")]
mod sharded;

pub use collective::{Collective, ReduceOp, SingleProcess, ThreadGroup, ThreadRank};
pub use error::{Error, Result};
pub use layout::ShardLayout;
#[cfg(feature = "mpi")]
pub use mpi_collective::MpiCollective;
#[cfg(feature = "mpi")]
pub use sharded::{ShardOptions, ShardedSource, get_probe, mem_available};
