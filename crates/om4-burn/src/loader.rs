//! The pipeline's loader with batches on a Burn device: om4-pipeline reads and (on the host)
//! prepares each batch ahead of the model; this adds the last stage, which turns host batches
//! into tensors on the loader's device, on the upload thread with `prefetch_to_device`.

use std::sync::Arc;

use burn::tensor::Device;
use om4_batch::{SampleSpace, Schedule};
use om4_pipeline::{BatchSource, BoxError, BufferPool, Epoch, Loaded, LoaderConfig, PrepareOn};

use crate::device::{DeviceNormalization, ModelBatch, to_model_batch};
use crate::error::Error;

/// A batch as the consumer receives it: samples, tensors on the loader's device, telemetry.
pub type LoadedBatch = Loaded<ModelBatch>;

/// The batches of one epoch on a Burn device, in schedule order.
pub type EpochIter = Epoch<ModelBatch>;

/// Loads the batches of a schedule from a source onto a Burn device.
pub struct Loader<S: BatchSource> {
    pipeline: om4_pipeline::Loader<S>,
    device: Device,
    normalizations: Arc<Vec<DeviceNormalization>>,
}

impl<S: BatchSource> std::fmt::Debug for Loader<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader").field("pipeline", &self.pipeline).field("device", &self.device).finish_non_exhaustive()
    }
}

impl<S: BatchSource> std::ops::Deref for Loader<S> {
    type Target = om4_pipeline::Loader<S>;
    fn deref(&self) -> &Self::Target {
        &self.pipeline
    }
}

impl<S: BatchSource> Loader<S> {
    /// A loader of `space`'s samples (built over `source.time_len()` positions) in `schedule`'s
    /// order onto `device`. [`PrepareOn::Auto`] prepares on the host for the CPU (`flex`)
    /// backend, where om4-batch's parallel host path is several times faster than tensor ops,
    /// and on the device otherwise.
    pub fn new(source: Arc<S>, space: SampleSpace, schedule: Schedule, config: LoaderConfig, device: Device) -> Self {
        let on_host = match config.prepare_on {
            PrepareOn::Host => true,
            PrepareOn::Device => false,
            PrepareOn::Auto => device.clone().without_autodiff() == Device::flex(),
        };
        let grid = source.grid();
        let normalizations =
            source.normalizations().iter().map(|n| DeviceNormalization::new(n, grid, &device)).collect();
        let pipeline = om4_pipeline::Loader::new(source, space, schedule, config).prepare_on_host(on_host);
        Self { pipeline, device, normalizations: Arc::new(normalizations) }
    }

    /// Uses `buffers` for host staging, e.g. a `BufferPool::pinned` one (feature `pinned`), or
    /// one pool shared with another loader.
    #[must_use]
    pub fn with_buffers(mut self, buffers: BufferPool) -> Self {
        self.pipeline = self.pipeline.with_buffers(buffers);
        self
    }

    /// The framework-free loader underneath (also reached through `Deref`: `len`, `buffers`,
    /// `output_buffers`, `prepares_on_host`, …).
    pub fn pipeline(&self) -> &om4_pipeline::Loader<S> {
        &self.pipeline
    }

    /// The normalizations (statistics and masks) on the device.
    pub fn normalizations(&self) -> &[DeviceNormalization] {
        &self.normalizations
    }

    /// Starts reading epoch `epoch` (1-based, as Samudra counts).
    ///
    /// # Errors
    /// As [`epoch_from`](Self::epoch_from).
    pub fn epoch(&self, epoch: u64) -> om4_pipeline::Result<EpochIter> {
        self.epoch_from(epoch, 0)
    }

    /// Starts epoch `epoch` at batch `first_batch` (0-based), as a run resumed mid-epoch needs:
    /// the batches before it are skipped without being read.
    ///
    /// # Errors
    /// As [`om4_pipeline::Loader::epoch_with`].
    pub fn epoch_from(&self, epoch: u64, first_batch: usize) -> om4_pipeline::Result<EpochIter> {
        let (normalizations, device) = (Arc::clone(&self.normalizations), self.device.clone());
        let grid = self.pipeline.source().grid();
        let finish = Arc::new(move |host| {
            to_model_batch(host, &normalizations, grid, &device).map_err(|e| -> BoxError {
                match e {
                    Error::Plan(e) => Box::new(om4_pipeline::Error::Plan(e)),
                    Error::Pipeline(e) => Box::new(e),
                }
            })
        });
        self.pipeline.epoch_with(epoch, first_batch, finish)
    }
}
