//! The one error type of om4-burn.

/// Everything the Burn adapter can report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The pipeline underneath failed (store, configuration, threads, reads).
    #[error(transparent)]
    Pipeline(om4_pipeline::Error),
    /// Buffers or normalizations do not match a batch's plan.
    #[error(transparent)]
    Plan(#[from] om4_batch::Error),
    /// A device that cannot be opened: a bad name, a backend this build lacks, or one whose driver
    /// or adapter is missing.
    #[error("device {name:?}: {reason}")]
    Device {
        /// The name asked for.
        name: String,
        /// Why it cannot be used.
        reason: String,
    },
    /// A setting that cannot take effect.
    #[error("{0}")]
    Config(String),
}

impl From<om4_pipeline::Error> for Error {
    /// A plan that does not match its buffers is [`Error::Plan`] wherever the batch was prepared
    /// (on the host by the pipeline, or on the device here).
    fn from(e: om4_pipeline::Error) -> Self {
        match e {
            om4_pipeline::Error::Plan(e) => Self::Plan(e),
            e => Self::Pipeline(e),
        }
    }
}

/// `Result` with om4-burn's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
