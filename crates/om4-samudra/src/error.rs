//! The one error type of om4-samudra.

use std::path::PathBuf;

/// Errors of training.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Data loading failed.
    #[error(transparent)]
    Data(#[from] om4_burn::Error),
    /// Planning failed.
    #[error(transparent)]
    Plan(#[from] om4_batch::Error),
    /// The loss or the gradient norm is NaN or infinite.
    #[error("non-finite {what} ({value}) at epoch {epoch}, batch {batch}: training stopped")]
    NonFinite {
        /// `loss` or `gradient norm`.
        what: &'static str,
        /// Epoch.
        epoch: usize,
        /// Batch in the epoch.
        batch: usize,
        /// The offending value.
        value: f32,
    },
    /// Reading or writing a checkpoint failed.
    #[error("checkpoint {path}: {reason}")]
    Checkpoint {
        /// File.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Upstream weights could not be loaded or saved.
    #[error("weights {path}: {reason}")]
    Weights {
        /// File.
        path: PathBuf,
        /// What went wrong, naming the keys.
        reason: String,
    },
    /// A configuration value is out of range.
    #[error("invalid {field}: {reason}")]
    Config {
        /// Field.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// Exchanging gradients or sums with the other ranks of a data-parallel run failed.
    #[error("data-parallel exchange failed: {reason}")]
    Parallel {
        /// Why.
        reason: String,
    },
    /// The device failed while computing a value the trainer reads back (a kernel the backend
    /// lacks, an out-of-memory, a lost device).
    #[error("the device failed computing the {what}: {reason}")]
    Device {
        /// What was being read back (`loss`, `gradient norm`, ...).
        what: &'static str,
        /// The backend's error.
        reason: String,
    },
    /// Another rank of a data-parallel run stopped on a non-finite loss or gradient norm, so this
    /// one stops at the same optimizer step.
    #[error("a rank reported a non-finite loss or gradient norm at epoch {epoch}, batch {batch}: training stopped")]
    PeerNonFinite {
        /// Epoch.
        epoch: usize,
        /// Batch in the epoch (of this rank's slice).
        batch: usize,
    },
}

/// `Result` of training.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<om4_pipeline::Error> for Error {
    fn from(e: om4_pipeline::Error) -> Self {
        Self::Data(e.into())
    }
}

impl From<om4_store::Error> for Error {
    fn from(e: om4_store::Error) -> Self {
        Self::Data(om4_pipeline::Error::from(e).into())
    }
}
