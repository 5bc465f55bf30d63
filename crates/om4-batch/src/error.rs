//! The one error type of om4-batch.

/// Everything that can go wrong while planning: every variant names the offending values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A configuration value is out of its allowed range.
    #[error("invalid {field}: {reason}")]
    InvalidConfig {
        /// The field, as spelled in the configuration.
        field: &'static str,
        /// Why the value is rejected.
        reason: String,
    },
    /// The time selection holds no complete window.
    #[error(
        "time selection of {len} steps is too short for history {history}, {steps} rollout steps and stride {stride}: \
         at least {needed} steps are needed"
    )]
    TooShort {
        /// Time positions available.
        len: usize,
        /// History length (`hist`).
        history: usize,
        /// Rollout steps.
        steps: usize,
        /// Stride between consecutive states.
        stride: usize,
        /// The smallest selection with one window.
        needed: usize,
    },
    /// A sample index is outside the sample space.
    #[error("sample {index} is out of range: the sample space holds {len} samples")]
    SampleOutOfRange {
        /// The requested index.
        index: usize,
        /// Number of samples.
        len: usize,
    },
    /// Samples of one batch must share history and rollout length.
    #[error("samples of one batch disagree: {reason}")]
    MixedBatch {
        /// What differs.
        reason: String,
    },
    /// A buffer handed in has the wrong length.
    #[error("{what} holds {found} values, expected {expected}")]
    BufferLength {
        /// Which buffer.
        what: String,
        /// Values expected.
        expected: usize,
        /// Values found.
        found: usize,
    },
    /// The read pool cannot be built.
    #[error("cannot build a read pool of {threads} threads: {reason}")]
    Pool {
        /// Threads asked for.
        threads: usize,
        /// Why.
        reason: String,
    },
}

/// `Result` with om4-batch's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
