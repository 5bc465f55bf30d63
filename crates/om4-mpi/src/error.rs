//! The one error type of om4-mpi.

/// Everything a collective or a sharded store can report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The MPI library was initialized below `MPI_THREAD_SERIALIZED`, but the loader reads from
    /// its own thread.
    #[error(
        "MPI was initialized with thread support {provided}; the sharded store needs at least \
         Serialized (mpi::initialize_with_threading(Threading::Multiple) or Serialized)"
    )]
    Threading {
        /// What the library provides.
        provided: String,
    },
    /// An option or the ranks' sources do not fit together.
    #[error("sharded store: {reason}")]
    Config {
        /// Why.
        reason: String,
    },
    /// The shares of the ranks on this node do not fit in its available memory.
    #[error(
        "the sharded store needs {needed} bytes on this node ({ranks} ranks), but only {available} \
         bytes are available (MemAvailable); use more nodes, fewer replicas (a larger width) or \
         a shorter time selection"
    )]
    OutOfMemory {
        /// Bytes the ranks on this node would allocate together.
        needed: u64,
        /// Bytes available on this node (`MemAvailable` of /proc/meminfo, or the override).
        available: u64,
        /// Ranks on this node.
        ranks: usize,
    },
    /// /proc/meminfo could not be read or understood.
    #[error("cannot read the available memory from /proc/meminfo: {reason}")]
    MemInfo {
        /// Why.
        reason: String,
    },
    /// Reading this rank's share from its source failed.
    #[error("reading this rank's share failed: {0}")]
    Source(#[from] om4_pipeline::Error),
    /// An MPI call returned an error.
    #[error("{call} failed (MPI error {code}): {message}")]
    Mpi {
        /// The MPI function.
        call: &'static str,
        /// Its error code.
        code: i32,
        /// `MPI_Error_string` of the code.
        message: String,
    },
    /// A reduction across ranks failed.
    #[error("{call} across ranks failed: {reason}")]
    Collective {
        /// The operation.
        call: &'static str,
        /// Why.
        reason: String,
    },
    /// A group of ranks was asked for with no rank in it.
    #[error("invalid world_size {size}: at least one rank is needed")]
    WorldSize {
        /// The size asked for.
        size: usize,
    },
    /// Another rank failed at a collective step, so this one stops too.
    #[error("rank {rank} failed while {stage}; stopping with it")]
    Peer {
        /// The lowest failing rank.
        rank: i32,
        /// The step.
        stage: &'static str,
    },
}

/// `Result` with om4-mpi's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
