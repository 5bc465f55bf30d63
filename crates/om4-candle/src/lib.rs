//! candle adapter for om4: batches from om4-pipeline's loader as `candle_core::Tensor`s.
//!
//! The pipeline reads each batch's unique planes ahead of the model, normalizes, masks and
//! gathers them on the host (on the source's read pool); this crate only hands the gathered
//! buffers to candle. On candle's CPU device that is without a copy: a pooled buffer becomes
//! the tensor's `Vec` (candle storage cannot hand memory back to a pool, so such a buffer leaves
//! the pool and the next batch allocates its own; see [`to_model_batch`]). On another device the
//! tensor is created on the CPU and moved there with `to_device`.
//!
//! ```
//! use std::sync::Arc;
//! use candle_core::Device;
//! use om4_batch::{SampleSpace, Schedule, WindowSpec};
//! use om4_candle::loader;
//! use om4_pipeline::{BatchSource, LoaderConfig};
//! use om4_store::{DataConfig, SynthConfig, synthesize};
//!
//! # let dir = tempfile::tempdir()?;
//! let cfg = SynthConfig { ny: 8, nx: 16, times: 12, levels: 2, ..SynthConfig::default() };
//! let paths = synthesize(dir.path(), &cfg, |_, _| {})?;
//! // Samudra's defaults over the store (statistics beside it; no split given: every time), opened
//! // once: prognostic uo_0, uo_1, vo_*, thetao_*, so_*, zos (9); boundary tauuo, tauvo, hfds (3)
//! let mut data = DataConfig::at(paths.data);
//! data.read_threads = 2;
//! let source = Arc::new(data.open()?.train);
//! let space = SampleSpace::single(WindowSpec::new(1, 2, 1)?, source.time_len())?;
//! let loader = loader(source, space, Schedule::training(2, 15, None)?, LoaderConfig::default(), Device::Cpu);
//! for batch in loader.epoch(1)? {
//!     let batch = batch?;
//!     assert_eq!(batch.batch.steps[0].input.dims(), &[2, 2 * (9 + 3), 8, 16]);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![warn(missing_docs)]

use std::sync::Arc;

use candle_core::{Device, Tensor};
use om4_batch::{Grid, Normalization, SampleSpace, Schedule};
use om4_pipeline::{BatchSource, Epoch, Finish, HostBatch, Loaded, LoaderConfig, PooledBuf, PrepareOn};

/// Everything the candle adapter can report.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The pipeline underneath failed (store, plan, configuration, threads, reads).
    #[error(transparent)]
    Pipeline(#[from] om4_pipeline::Error),
    /// candle refused a tensor.
    #[error("candle: {0}")]
    Candle(#[from] candle_core::Error),
    /// The batch was not prepared on the host (this adapter prepares every batch there).
    #[error("the candle adapter takes host-prepared batches only")]
    Unprepared,
}

/// `Result` with om4-candle's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One rollout step of a model batch.
#[derive(Debug, Clone)]
pub struct StepTensors {
    /// `(B, (h+1)·(C_prog + C_bound), Y, X)`, time-major: `[prog(t0) | prog(t1) | … | bound(t0) | …]`.
    pub input: Tensor,
    /// `(B, (h+1)·C_prog, Y, X)`.
    pub label: Tensor,
}

/// A model batch on a candle device: every rollout step.
#[derive(Debug, Clone)]
pub struct ModelBatch {
    /// Samples.
    pub samples: usize,
    /// One entry per rollout step.
    pub steps: Vec<StepTensors>,
}

/// A batch as the consumer receives it.
pub type LoadedBatch = Loaded<ModelBatch>;

/// The batches of one epoch on a candle device, in schedule order.
pub type EpochIter = Epoch<ModelBatch, Error>;

/// The tensors of a host batch on `device`. Each pooled step buffer becomes a CPU tensor's
/// storage without a copy (it leaves its pool: candle cannot give it back); on another device the
/// tensor is then copied there.
///
/// # Errors
/// [`Error::Unprepared`] for raw planes; [`Error::Candle`] when candle refuses the tensor.
pub fn to_model_batch(host: HostBatch, device: &Device) -> Result<ModelBatch> {
    let HostBatch::Prepared(prepared) = host else { return Err(Error::Unprepared) };
    let tensor = |buf: PooledBuf, shape: [usize; 4]| -> Result<Tensor> {
        let cpu = Tensor::from_vec(buf.into_vec(), &shape, &Device::Cpu)?;
        Ok(if device.is_cpu() { cpu } else { cpu.to_device(device)? })
    };
    let (input_shape, label_shape) = (prepared.input_shape, prepared.label_shape);
    let steps = prepared
        .steps
        .into_iter()
        .map(|s| Ok(StepTensors { input: tensor(s.input, input_shape)?, label: tensor(s.label, label_shape)? }))
        .collect::<Result<Vec<_>>>()?;
    Ok(ModelBatch { samples: prepared.batch, steps })
}

/// The label mask `(1, states·C_prog, Y, X)` (the prognostic mask repeated per state), 1 on ocean.
///
/// # Errors
/// [`Error::Candle`] when candle refuses the tensor.
pub fn label_mask(prognostic: &Normalization, states: usize, grid: Grid, device: &Device) -> Result<Tensor> {
    let wet: Vec<f32> = prognostic.mask().repeat(states).as_slice().iter().map(|&w| f32::from(u8::from(w))).collect();
    Ok(Tensor::from_vec(wet, (1, states * prognostic.channels(), grid.y, grid.x), device)?)
}

/// The pipeline's loader with batches as tensors on a candle device.
pub type Loader<S> = om4_pipeline::Loader<S, OnDevice>;

/// A loader of `space`'s samples in `schedule`'s order onto `device`.
pub fn loader<S: BatchSource>(
    source: Arc<S>,
    space: SampleSpace,
    schedule: Schedule,
    config: LoaderConfig,
    device: Device,
) -> Loader<S> {
    om4_pipeline::Loader::with_finish(source, space, schedule, config, OnDevice(device))
}

/// candle's last stage of the loader: host-prepared batches as [`ModelBatch`]es on a device.
/// Batches are always prepared on the host (`config.prepare_on` is not consulted).
#[derive(Debug, Clone)]
pub struct OnDevice(pub Device);

impl Finish for OnDevice {
    type Output = ModelBatch;
    type Error = Error;

    fn prepares_on_host(&self, _: PrepareOn) -> bool {
        true
    }

    fn finish(&self, host: HostBatch) -> Result<ModelBatch> {
        to_model_batch(host, &self.0)
    }
}
