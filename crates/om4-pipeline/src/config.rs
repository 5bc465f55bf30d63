//! The loader's settings, with Samudra's `data.loading` words, and where batches are prepared.

use serde::{Deserialize, Serialize};

/// Loader settings, with Samudra's `data.loading` words (its `max_concurrent_reads` sizes the
/// store's read pool, so it is the data configuration's: `om4_store::DataConfig::read_threads`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoaderConfig {
    /// Batches read ahead of the consumer (0: read on demand; at most
    /// [`LoaderConfig::MAX_PREFETCH`]).
    pub prefetch_batches: usize,
    /// Finish read-ahead batches too (prepare them and hand them to the framework's device) on a
    /// second thread, so that the consumer receives them ready.
    pub prefetch_to_device: bool,
    /// Where normalization, masking and the gather run (om4's own setting; default `auto`).
    pub prepare_on: PrepareOn,
    /// Batches read at once (om4's own setting; at most `prefetch_batches`; default: the
    /// source's [`BatchSource::batch_reads_in_flight`](crate::BatchSource::batch_reads_in_flight), 2 for a store on object storage, where
    /// one batch's round trips then overlap another's transfer and decoding, else 1). Each read
    /// runs on a producer thread of its own; batches still come out in schedule order. With
    /// `prefetch_batches` 0 batches are read one at a time, on demand.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reads_in_flight: Option<usize>,
    /// Samudra's `loading.type`, read so that its configurations parse: `rust` names the Rust
    /// loader whose settings these are, `cpu` and `gpu` Samudra's Python loaders. om4 loads the
    /// same way whichever is named.
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<LoaderKind>,
}

/// Samudra's loader types (`data.loading.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoaderKind {
    /// Samudra's Rust loader (`samudra_rust_loader`).
    Rust,
    /// Samudra's PyTorch `DataLoader` with CPU workers.
    Cpu,
    /// Samudra's GPU-direct (kvikio) reads.
    Gpu,
}

impl LoaderConfig {
    /// The most batches a loader reads ahead: each holds a batch's planes in host memory.
    pub const MAX_PREFETCH: usize = 64;
}

impl Default for LoaderConfig {
    fn default() -> Self {
        Self {
            prefetch_batches: 2,
            prefetch_to_device: true,
            prepare_on: PrepareOn::Auto,
            reads_in_flight: None,
            kind: None,
        }
    }
}

/// Where a batch is normalized, masked and gathered. Both give the same bits. A framework
/// adapter resolves `Auto` for its device (see [`Finish::prepares_on_host`](crate::Finish::prepares_on_host)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrepareOn {
    /// On the host for the CPU (`flex`) backend, on the device otherwise.
    #[default]
    Auto,
    /// With Burn tensor ops on the loader's device: each group uploaded once, `select` gathers.
    Device,
    /// With om4-batch's parallel host path; the gathered buffers become the tensors.
    Host,
}
