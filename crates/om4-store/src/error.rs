//! The one error type of om4-store.

use std::path::PathBuf;

pub(crate) use om4_pipeline::BoxError;

/// Everything that can go wrong opening, validating or reading a store. Each variant names the
/// store and the array (or channel) it concerns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The store path cannot be listed or is not a Zarr store.
    #[error("cannot open store {store}: {reason}")]
    Store {
        /// Store root.
        store: PathBuf,
        /// Why.
        reason: String,
    },
    /// An array's metadata cannot be read or parsed.
    #[error("store {store}: array {array:?}: bad metadata: {reason}")]
    Metadata {
        /// Store root.
        store: PathBuf,
        /// Array name.
        array: String,
        /// Why.
        reason: String,
    },
    /// An array is not what om4 can read as a channel (dtype, packing, fill value, dimensions).
    #[error("store {store}: array {array:?}: {reason}")]
    Invalid {
        /// Store root.
        store: PathBuf,
        /// Array name.
        array: String,
        /// Why.
        reason: String,
    },
    /// A channel the store does not hold.
    #[error("store {store}: unknown channel {channel:?}: {reason}")]
    UnknownChannel {
        /// Store root.
        store: PathBuf,
        /// Requested channel.
        channel: String,
        /// What was looked for.
        reason: String,
    },
    /// A derived channel (computed by Samudra at load time) that the store does not hold.
    #[error(
        "store {store}: channel {channel:?} is derived ({reason}) and not stored; om4 reads stored channels only: \
         write it into the store or drop it from the channel list"
    )]
    DerivedChannel {
        /// Store root.
        store: PathBuf,
        /// Requested channel.
        channel: String,
        /// How it is derived.
        reason: String,
    },
    /// Channels that do not share one `(time, y, x)` grid.
    #[error("store {store}: array {array:?} has grid {found:?}, but {first:?} has {expected:?} (time, y, x)")]
    GridMismatch {
        /// Store root.
        store: PathBuf,
        /// The array that differs.
        array: String,
        /// Its (time, y, x).
        found: [u64; 3],
        /// The first channel's array.
        first: String,
        /// The first channel's (time, y, x).
        expected: [u64; 3],
    },
    /// A bad time axis or time selection.
    #[error("store {store}: time axis: {reason}")]
    Time {
        /// Store root.
        store: PathBuf,
        /// Why.
        reason: String,
    },
    /// A read request that does not fit the store or the buffer.
    #[error("bad read request: {reason}")]
    Request {
        /// Why.
        reason: String,
    },
    /// Decoding a plane failed (corrupt or truncated chunk, I/O error). The output buffer was
    /// partly written; no thread writes it any more.
    #[error("store {store}: array {array:?}: reading time row {row}{level} failed")]
    Read {
        /// Store root.
        store: PathBuf,
        /// Array name.
        array: String,
        /// Physical time row.
        row: u64,
        /// ", levels a..b" for compact arrays, else empty.
        level: String,
        /// The decoder's or store's error.
        #[source]
        source: BoxError,
    },
    /// A read pool, window or normalization was refused by om4-batch.
    #[error(transparent)]
    Plan(#[from] om4_batch::Error),
    /// A data configuration value is out of range ([`DataConfig`](crate::DataConfig),
    /// [`SourceConfig`](crate::SourceConfig)).
    #[error("invalid {field}: {reason}")]
    Config {
        /// The field, as spelled in the configuration.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// Writing a synthetic store failed.
    #[error("writing {path}: {reason}")]
    Write {
        /// What was being written.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}

/// A store error where the pipeline's is expected (a [`BatchSource`](om4_pipeline::BatchSource)
/// read, `?` in a function returning the pipeline's result): the store's error, boxed as the
/// source's.
impl From<Error> for om4_pipeline::Error {
    fn from(e: Error) -> Self {
        Self::Source(Box::new(e))
    }
}

/// `Result` with om4-store's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
