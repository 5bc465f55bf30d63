//! The one error type of om4-burn.

/// Everything the Burn adapter can report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The pipeline underneath failed (store, plan, configuration, threads, reads).
    #[error(transparent)]
    Pipeline(#[from] om4_pipeline::Error),
    /// Buffers or normalizations do not match a batch's plan.
    #[error(transparent)]
    Plan(#[from] om4_batch::Error),
}

/// `Result` with om4-burn's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
