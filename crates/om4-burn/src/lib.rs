//! Burn integration for om4: a prefetching loader that keeps a model fed from OM4 stores.
//!
//! - [`Loader`]: one producer thread reads batch N+1.. (each unique plane once, fanned out over a
//!   shared [`om4_store::ReadPool`]) into pooled host buffers while the model computes batch N;
//!   with `prefetch_to_device` an upload thread moves each group buffer to the device once,
//!   normalizes and masks each plane once with tensor ops and gathers the model batch with `select`
//!   (on the CPU backend, om4-batch's parallel host path does this instead: [`PrepareOn`]).
//!   Batches come out in schedule order; exhaustion, early drop, read errors and producer panics
//!   end cleanly, with every buffer back in the [`BufferPool`].
//! - [`Om4Source`]: a validated store split (channels, statistics, masks, time range), behind the
//!   [`BatchSource`] trait.
//! - [`Om4Dataset`] and [`Om4Batcher`]: Burn `Dataset`/`Batcher` adapters for `DataLoaderBuilder`.
//!
//! ```
//! use std::sync::Arc;
//! use burn::tensor::Device;
//! use om4_batch::{SampleSpace, Schedule, WindowSpec};
//! use om4_burn::{BatchSource, Loader, LoaderConfig, Om4Source, SourceConfig};
//! use om4_store::{ReadPool, SynthConfig, synthesize};
//!
//! # let dir = tempfile::tempdir()?;
//! let cfg = SynthConfig { ny: 8, nx: 16, times: 12, levels: 2, ..SynthConfig::default() };
//! let paths = synthesize(dir.path(), &cfg, |_, _| {})?;
//! // prognostic uo_0, uo_1, vo_*, thetao_*, so_*, zos (9); boundary tauuo, tauvo, hfds (3)
//! let config = SourceConfig::samudra(paths.data, paths.means, paths.stds, 2);
//! let source = Arc::new(Om4Source::open(&config, None, None, ReadPool::new(2)?)?);
//! let space = SampleSpace::single(WindowSpec::new(1, 2, 1)?, source.time_len())?;
//! let loader = Loader::new(source, space, Schedule::training(2, 15, None)?, LoaderConfig::default(), Device::flex());
//! for batch in loader.epoch(1)? {
//!     let batch = batch?;
//!     assert_eq!(batch.batch.steps[0].input.dims(), [2, 2 * (9 + 3), 8, 16]);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Host staging buffers are handed to Burn as the tensors' own bytes (no host copy); each returns
//! to the [`BufferPool`] when the backend has finished with it (on CUDA, after the copy's fence).
//! The host path gathers model batches into buffers of a second pool of the same kind
//! ([`Loader::output_buffers`]), handed over the same way, so a steady run faults in no new
//! memory per batch.
//!
//! Crate features (all off by default; everything builds and tests on the CPU `flex` backend):
//! - `pinned`: page-locked staging buffers through cudarc (`BufferPool::pinned`), which cubecl
//!   DMAs without restaging, and `cuda::staging_check` (run by `scripts/gpu-check.sh`). The
//!   driver is loaded at run time, so this builds without a CUDA toolkit.
//! - `cuda`: Burn's CUDA backend, with `pinned`. `vulkan`: Burn's wgpu/Vulkan backend.

mod buffers;
#[cfg(feature = "pinned")]
pub mod cuda;
mod dataset;
mod error;
mod loader;
mod prepare;
mod source;
mod staging;
mod telemetry;

pub use buffers::{BufferPool, PooledBuf};
pub use dataset::{Om4Batcher, Om4Dataset, SampleItem};
pub use error::{Error, Result};
pub use loader::{EpochIter, LoadedBatch, Loader, LoaderConfig, PrepareOn};
pub use prepare::{DevicePreparation, ModelBatch, StepTensors, label_mask, prepare_batch};
pub use source::{BatchSource, Om4Source, SourceConfig};
pub use telemetry::{BatchTelemetry, EpochSummary, Percentiles};
