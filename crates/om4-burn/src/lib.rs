//! Burn adapter for om4: batches from om4-pipeline's loader as tensors on a Burn device.
//!
//! om4-pipeline does everything that needs no framework (sources, pooled buffers, the
//! prefetching loader, host preparation); this crate holds only what needs Burn:
//!
//! - [`OnDevice`]: the last stage of om4-pipeline's one loader ([`loader`] builds one; [`Loader`]
//!   names its type), which makes each batch a [`ModelBatch`] on the device, on an upload thread
//!   with `prefetch_to_device`. Pooled host buffers become the
//!   tensors' own bytes (no host copy); on the CPU backend batches are
//!   normalized, masked and gathered on the host, elsewhere each group buffer is uploaded once and
//!   prepared with tensor ops ([`DeviceNormalization`]).
//! - `Om4Dataset` and `Om4Batcher` (feature `dataset`): Burn `Dataset`/`Batcher` adapters for
//!   `DataLoaderBuilder`.
//!
//! ```
//! use std::sync::Arc;
//! use burn::tensor::Device;
//! use om4_batch::{SampleSpace, Schedule, WindowSpec};
//! use om4_burn::{BatchSource, LoaderConfig, loader};
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
//! let loader = loader(source, space, Schedule::training(2, 15, None)?, LoaderConfig::default(), Device::flex());
//! for batch in loader.epoch(1)? {
//!     let batch = batch?;
//!     assert_eq!(batch.batch.steps[0].input.dims(), [2, 2 * (9 + 3), 8, 16]);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Host staging buffers are handed to Burn as the tensors' own bytes; each returns to its
//! [`BufferPool`] when the backend has finished with it (on CUDA, after the copy's fence), so a
//! steady run faults in no new memory per batch.
//!
//! Crate features (all off by default; everything builds and tests on the CPU `flex` backend):
//! - `pinned`: page-locked staging buffers (`BufferPool::pinned`, from om4-pipeline), which cubecl
//!   DMAs without restaging. The driver is loaded at run time, so this builds without a toolkit.
//! - `cuda`: Burn's CUDA backend, with `pinned`. `vulkan`: Burn's Vulkan backend (SPIR-V).
//!   `wgpu`: Burn's WebGPU backend (WGSL). Each with fusion, autotune and cubecl's on-disk caches;
//!   [`TrainingDevice::open`] opens any of them by name with the staging pool that suits it, and
//!   [`configure_cubecl`] applies `cubecl.toml` and the autotune level before the first use.

#![warn(missing_docs)]

#[cfg(feature = "dataset")]
mod dataset;
mod device;
mod error;
mod kernels;
mod loader;
mod resident;
mod select;
mod staging;

#[cfg(feature = "dataset")]
pub use dataset::{Om4Batcher, Om4Dataset, SampleItem};
pub use device::{DeviceNormalization, ModelBatch, StepTensors, label_mask, prepare_batch, to_model_batch};
pub use error::{Error, Result};
pub use kernels::{KernelSeconds, KernelWork, kernel_work};
pub use loader::{EpochIter, LoadedBatch, Loader, OnDevice, loader};
pub use select::{AutotuneLevel, CubeclSettings, CubeclSummary, DeviceName, TrainingDevice, configure_cubecl};

// The pipeline's vocabulary, so that a Burn user needs one import path.
pub use om4_pipeline::{
    BatchSource, BatchTelemetry, BufferPool, EpochSummary, LoaderConfig, MemorySource, Percentiles, PrepareOn,
};
