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
//! use om4_candle::Loader;
//! use om4_pipeline::{BatchSource, LoaderConfig, Om4Source, SourceConfig};
//! use om4_store::{ReadPool, SynthConfig, synthesize};
//!
//! # let dir = tempfile::tempdir()?;
//! let cfg = SynthConfig { ny: 8, nx: 16, times: 12, levels: 2, ..SynthConfig::default() };
//! let paths = synthesize(dir.path(), &cfg, |_, _| {})?;
//! let config = SourceConfig::samudra(paths.data, paths.means, paths.stds, 2);
//! let source = Arc::new(Om4Source::open(&config, None, None, ReadPool::new(2)?)?);
//! let space = SampleSpace::single(WindowSpec::new(1, 2, 1)?, source.time_len())?;
//! let loader = Loader::new(source, space, Schedule::training(2, 15, None)?, LoaderConfig::default(), Device::Cpu);
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
use om4_pipeline::{BatchSource, BoxError, BufferPool, Epoch, HostBatch, Loaded, LoaderConfig, PooledBuf};

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
    pub batch: usize,
    /// One entry per rollout step.
    pub steps: Vec<StepTensors>,
}

/// A batch as the consumer receives it.
pub type LoadedBatch = Loaded<ModelBatch>;

/// The batches of one epoch on a candle device, in schedule order.
pub type EpochIter = Epoch<ModelBatch>;

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
    Ok(ModelBatch { batch: prepared.batch, steps })
}

/// The label mask `(1, states·C_prog, Y, X)` (the prognostic mask repeated per state), 1 on ocean.
///
/// # Errors
/// [`Error::Candle`] when candle refuses the tensor.
pub fn label_mask(prognostic: &Normalization, states: usize, grid: Grid, device: &Device) -> Result<Tensor> {
    let wet: Vec<f32> = prognostic.mask().repeat(states).as_slice().iter().map(|&w| f32::from(u8::from(w))).collect();
    Ok(Tensor::from_vec(wet, (1, states * prognostic.channels(), grid.y, grid.x), device)?)
}

/// Loads the batches of a schedule from a source onto a candle device.
pub struct Loader<S: BatchSource> {
    pipeline: om4_pipeline::Loader<S>,
    device: Device,
}

impl<S: BatchSource> std::fmt::Debug for Loader<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader").field("pipeline", &self.pipeline).finish_non_exhaustive()
    }
}

impl<S: BatchSource> std::ops::Deref for Loader<S> {
    type Target = om4_pipeline::Loader<S>;
    fn deref(&self) -> &Self::Target {
        &self.pipeline
    }
}

impl<S: BatchSource> Loader<S> {
    /// A loader of `space`'s samples in `schedule`'s order onto `device`. Batches are always
    /// prepared on the host (`config.prepare_on` is not consulted).
    pub fn new(source: Arc<S>, space: SampleSpace, schedule: Schedule, config: LoaderConfig, device: Device) -> Self {
        let pipeline = om4_pipeline::Loader::new(source, space, schedule, config).prepare_on_host(true);
        Self { pipeline, device }
    }

    /// Uses `buffers` for the raw planes (one pool shared with another loader, say).
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

    /// Starts reading epoch `epoch` (1-based, as Samudra counts).
    ///
    /// # Errors
    /// As [`epoch_from`](Self::epoch_from).
    pub fn epoch(&self, epoch: u64) -> om4_pipeline::Result<EpochIter> {
        self.epoch_from(epoch, 0)
    }

    /// Starts epoch `epoch` at batch `first_batch` (0-based), skipping the batches before it
    /// without reading them.
    ///
    /// # Errors
    /// As [`om4_pipeline::Loader::epoch_with`].
    pub fn epoch_from(&self, epoch: u64, first_batch: usize) -> om4_pipeline::Result<EpochIter> {
        let device = self.device.clone();
        let finish = Arc::new(move |host| to_model_batch(host, &device).map_err(|e| -> BoxError { Box::new(e) }));
        self.pipeline.epoch_with(epoch, first_batch, finish)
    }
}
