//! The one error type of om4-burn.

/// Everything the loader can report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Opening, validating or reading a store failed.
    #[error(transparent)]
    Store(#[from] om4_store::Error),
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
    /// The producer thread panicked while reading batch `batch` of the epoch.
    #[error("the loader's producer thread panicked at batch {batch}: {message}")]
    ProducerPanic {
        /// Batch number in the epoch.
        batch: usize,
        /// Panic payload.
        message: String,
    },
}

/// `Result` with om4-burn's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
