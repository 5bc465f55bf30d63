//! Batches on a Burn device: om4-pipeline's loader reads and (on the host) prepares each batch
//! ahead of the model; [`OnDevice`], its last stage, turns host batches into tensors on the
//! loader's device, on the upload thread with `prefetch_to_device`.

use std::sync::{Arc, Mutex, PoisonError};

use burn::tensor::Device;
use om4_batch::{Grid, SampleSpace, Schedule};
use om4_pipeline::{BatchSource, Epoch, Finish, HostBatch, Loaded, LoaderConfig, PrepareOn};

use crate::device::{DeviceNormalization, ModelBatch, to_model_batch};
use crate::error::{Error, Result};
use crate::resident::ResidentCopy;

/// The pipeline's loader with batches as tensors on a Burn device.
pub type Loader<S> = om4_pipeline::Loader<S, OnDevice>;

/// A batch as the consumer receives it: samples, tensors on the loader's device, telemetry.
pub type LoadedBatch = Loaded<ModelBatch>;

/// The batches of one epoch on a Burn device, in schedule order.
pub type EpochIter = Epoch<ModelBatch, Error>;

/// A loader of `space`'s samples (built over `source.time_len()` positions) in `schedule`'s
/// order onto `device` (see [`OnDevice`] for where batches are prepared).
pub fn loader<S: BatchSource>(
    source: Arc<S>,
    space: SampleSpace,
    schedule: Schedule,
    config: LoaderConfig,
    device: Device,
) -> Loader<S> {
    let finish = OnDevice::new(source.as_ref(), device);
    om4_pipeline::Loader::with_finish(source, space, schedule, config, finish)
}

/// Burn's last stage of the loader: host batches as [`ModelBatch`]es on a device, prepared on the
/// device from raw planes or taken over from the host path. [`PrepareOn::Auto`] prepares on the
/// host for the CPU (`flex`) backend, where om4-batch's parallel host path is several times
/// faster than tensor ops, and on the device otherwise. With a resident split
/// (`Loader::resident`) it keeps the device copy: batches write the planes they bring into it and
/// gather from it.
#[derive(Clone)]
pub struct OnDevice {
    device: Device,
    grid: Grid,
    normalizations: Arc<Vec<DeviceNormalization>>,
    resident: Arc<Mutex<ResidentCopy>>,
}

impl std::fmt::Debug for OnDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnDevice").field("device", &self.device).field("grid", &self.grid).finish_non_exhaustive()
    }
}

impl OnDevice {
    /// The last stage for `source`'s batches on `device` (its statistics and masks uploaded once).
    pub fn new<S: BatchSource + ?Sized>(source: &S, device: Device) -> Self {
        let grid = source.grid();
        let normalizations =
            source.normalizations().iter().map(|n| DeviceNormalization::new(n, grid, &device)).collect();
        Self { device, grid, normalizations: Arc::new(normalizations), resident: Arc::default() }
    }

    /// The device batches land on.
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The normalizations (statistics and masks) on the device.
    pub fn normalizations(&self) -> &[DeviceNormalization] {
        &self.normalizations
    }
}

impl Finish for OnDevice {
    type Output = ModelBatch;
    type Error = Error;

    fn prepares_on_host(&self, prepare_on: PrepareOn) -> bool {
        match prepare_on {
            PrepareOn::Host => true,
            PrepareOn::Device => false,
            PrepareOn::Auto => self.device.clone().without_autodiff() == Device::flex(),
        }
    }

    fn finish(&self, host: HostBatch) -> Result<ModelBatch> {
        match host {
            HostBatch::Resident { plan, fresh, residency } => {
                // Batches are finished one at a time, in order: the lock is never contended.
                let mut copy = self.resident.lock().unwrap_or_else(PoisonError::into_inner);
                copy.take(&plan, fresh, &residency, &self.normalizations, self.grid, &self.device)
            }
            host => to_model_batch(host, &self.normalizations, self.grid, &self.device),
        }
    }
}
