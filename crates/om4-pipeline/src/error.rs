//! The one error type of om4-pipeline.

/// Everything the loader can report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The data source failed (a store's error, say: om4-store converts its own into this).
    #[error(transparent)]
    Source(crate::BoxError),
    /// Planning failed (bad window, schedule or buffer).
    #[error(transparent)]
    Plan(#[from] om4_batch::Error),
    /// A configuration value is out of range.
    #[error("invalid {field}: {reason}")]
    Config {
        /// The field, as spelled in the configuration.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// A loader thread could not be started.
    #[error("cannot start the loader's {thread} thread")]
    Spawn {
        /// Which thread.
        thread: &'static str,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The CUDA driver reported an error, or is missing (feature `pinned`).
    #[error("cannot {what}: {message}")]
    Cuda {
        /// What was attempted.
        what: &'static str,
        /// The driver's message.
        message: String,
    },
    /// A read asked for a time position past the source's selection.
    #[error("time position {time} is past the source's {len} positions")]
    TimeOutOfRange {
        /// The position asked for.
        time: usize,
        /// Positions the source holds.
        len: usize,
    },
    /// The producer thread panicked while reading batch `batch` of the epoch.
    #[error("the loader's producer thread panicked at batch {batch}: {message}")]
    ProducerPanic {
        /// Batch number in the epoch.
        batch: usize,
        /// Panic payload.
        message: String,
    },
}

/// `Result` with om4-pipeline's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
