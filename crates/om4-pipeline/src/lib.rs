//! om4's framework-free batch pipeline: from a data source to model batches in host memory,
//! read ahead of the model. It names no ML framework and no storage: the Burn and candle adapters
//! (`om4-burn`, `om4-candle`) only turn its host batches into their tensors, and the sources
//! that read stores live beside them (om4-store's `Om4Source`), so that an adapter or the MPI
//! crate builds without a Zarr codec.
//!
//! - [`BatchSource`]: where planes come from. om4-store's `Om4Source` reads a validated split of
//!   an OM4 Zarr store; [`MemorySource`] holds planes in memory. **A new data source
//!   goes here**: implement [`BatchSource`] and add it to the conformance suite
//!   (`tests/conformance.rs`), which checks that it gives the naive path's bits, reports errors
//!   with context and never panics.
//! - [`Loader`]: one producer thread reads batch N+1.. (each unique plane once, fanned out over
//!   the source's read pool) into pooled host buffers ([`BufferPool`]; CUDA-pinned with feature
//!   `pinned`) while the model computes batch N; a second stage prepares each batch on the host
//!   ([`PreparedBatch`]) or leaves its raw planes to the device ([`HostBatch::Raw`]), then calls
//!   the adapter's [`Finish`]. Batches come out in schedule order; exhaustion, early drop, read
//!   errors and panics end cleanly, with every buffer back in its pool. **A new framework** gets
//!   its own adapter crate that supplies a [`Finish`] (see `om4-candle`, about 150 lines).
//! - [`BatchTelemetry`], [`EpochSummary`]: per-batch timings and epoch percentiles.
//!
//! ```
//! use std::sync::Arc;
//! use om4_batch::{SampleSpace, Schedule, WindowSpec};
//! use om4_pipeline::{BatchSource, HostBatch, Loader, LoaderConfig};
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
//! let loader = Loader::new(source, space, Schedule::training(2, 15, None)?, LoaderConfig::default());
//! for batch in loader.epoch(1)? {
//!     let HostBatch::Prepared(batch) = batch?.batch else { unreachable!("prepared on the host by default") };
//!     assert_eq!(batch.input_shape, [2, 2 * (9 + 3), 8, 16]);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Crate features (off by default):
//! - `pinned`: page-locked staging buffers through cudarc (`BufferPool::pinned`), which a CUDA
//!   backend DMAs without restaging. The driver is loaded at run time, so this builds without a
//!   CUDA toolkit or GPU.
//! - `conformance`: the `conformance` module, the suite every data source passes.

#![warn(missing_docs)]

mod buffers;
mod config;
#[cfg(feature = "conformance")]
pub mod conformance;
mod epoch;
mod error;
mod loader;
mod memory;
#[cfg(feature = "pinned")]
mod pinned;
mod prepare;
mod resident;
mod source;
mod telemetry;

pub use buffers::{BufferPool, PooledBuf};
pub use config::{LoaderConfig, LoaderKind, PrepareOn};
pub use epoch::Epoch;
pub use error::{Error, Result};
pub use loader::{BoxError, Finish, Host, HostBatch, Loaded, Loader};
pub use memory::MemorySource;
pub use prepare::{PreparedBatch, PreparedStep, prepare_on_host};
pub use resident::{FreshPlanes, Residency};
pub use source::{BatchSource, read_groups};
pub use telemetry::{BatchTelemetry, EpochSummary, Percentiles};
