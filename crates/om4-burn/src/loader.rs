//! The prefetching loader: a producer thread reads batch N+1.. into pooled host buffers while the
//! model computes batch N; with `prefetch_to_device` an upload thread prepares them on the device
//! too. Batches come out in schedule order; exhaustion, early drop, errors and panics end cleanly.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use burn::tensor::Device;
use crossbeam_channel::{Receiver, bounded};
use om4_batch::{BatchPlan, SampleSpace, Schedule};
use serde::{Deserialize, Serialize};

use crate::buffers::{BufferPool, PooledBuf};
use crate::error::{Error, Result};
use crate::prepare::{DevicePreparation, ModelBatch, Preparers};
use crate::source::{BatchSource, read_groups};
use crate::telemetry::BatchTelemetry;

/// Loader settings, with Samudra's `data.loading` words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LoaderConfig {
    /// Batches read ahead of the consumer (0: read on demand; at most
    /// [`LoaderConfig::MAX_PREFETCH`]).
    pub prefetch_batches: usize,
    /// Threads of the shared read pool (Samudra's default, 32: reads from disk wait on I/O, and
    /// on page-cache reads more threads than cores cost nothing measurable).
    pub max_concurrent_reads: usize,
    /// Prepare read-ahead batches on the device too (from an upload thread).
    pub prefetch_to_device: bool,
    /// Where normalization, masking and the gather run (om4's own setting; default `auto`).
    pub prepare_on: PrepareOn,
}

impl LoaderConfig {
    /// The most batches a loader reads ahead: each holds a batch's planes in host memory.
    pub const MAX_PREFETCH: usize = 64;
}

impl Default for LoaderConfig {
    fn default() -> Self {
        Self { prefetch_batches: 2, max_concurrent_reads: 32, prefetch_to_device: true, prepare_on: PrepareOn::Auto }
    }
}

/// Where a batch is normalized, masked and gathered. Both give the same bits.
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

/// A batch as the consumer receives it.
#[derive(Debug)]
pub struct LoadedBatch {
    /// Sample indices, in schedule order.
    pub samples: Vec<usize>,
    /// Model tensors on the loader's device.
    pub batch: ModelBatch,
    /// Timings and sizes.
    pub telemetry: BatchTelemetry,
}

/// Host planes of one batch, read by the producer.
struct HostBatch {
    samples: Vec<usize>,
    plan: BatchPlan,
    groups: Vec<PooledBuf>,
    telemetry: BatchTelemetry,
}

#[allow(clippy::large_enum_variant)]
enum Ready {
    Host(HostBatch),
    Device(LoadedBatch),
}

/// Loads the batches of a schedule from a source onto a device.
pub struct Loader<S: BatchSource> {
    source: Arc<S>,
    space: SampleSpace,
    schedule: Schedule,
    config: LoaderConfig,
    device: Device,
    preparers: Preparers,
    buffers: BufferPool,
}

impl<S: BatchSource> std::fmt::Debug for Loader<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("samples", &self.space.len())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<S: BatchSource> Loader<S> {
    /// A loader of `space`'s samples (built over `source.time_len()` positions) in `schedule`'s order.
    pub fn new(source: Arc<S>, space: SampleSpace, schedule: Schedule, config: LoaderConfig, device: Device) -> Self {
        let grid = source.grid();
        let preparations = source.preparations().iter().map(|p| DevicePreparation::new(p, grid, &device)).collect();
        let on_host = match config.prepare_on {
            PrepareOn::Host => true,
            PrepareOn::Device => false,
            PrepareOn::Auto => device.clone().without_autodiff() == Device::flex(),
        };
        let host = on_host.then(|| Arc::new(source.preparations().to_vec()));
        let buffers = BufferPool::new();
        let preparers = Preparers {
            device: Arc::new(preparations),
            host,
            pool: source.read_pool().cloned(),
            outputs: Self::output_pool(&buffers),
        };
        Self { source, space, schedule, config, device, preparers, buffers }
    }

    /// The host path's output pool, of the staging pool's kind of memory. It keeps every buffer
    /// returned, so it holds at most as many as were ever in use at once (the outputs of the
    /// batches in flight), and a steady run allocates none.
    fn output_pool(buffers: &BufferPool) -> BufferPool {
        buffers.sibling(usize::MAX)
    }

    /// Uses `buffers` for host staging, e.g. a `BufferPool::pinned` one (feature `pinned`), or
    /// one pool shared with another loader.
    #[must_use]
    pub fn with_buffers(mut self, buffers: BufferPool) -> Self {
        self.preparers.outputs = Self::output_pool(&buffers);
        self.buffers = buffers;
        self
    }

    /// Batches per epoch (the same on every DDP rank).
    pub fn len(&self) -> usize {
        self.schedule.len(&self.space.groups())
    }

    /// True when an epoch yields nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The host buffer pool (for telemetry and tests).
    pub fn buffers(&self) -> &BufferPool {
        &self.buffers
    }

    /// The pool of the host path's model-batch buffers (see [`PrepareOn`]; for telemetry and tests).
    pub fn output_buffers(&self) -> &BufferPool {
        &self.preparers.outputs
    }

    /// The device preparations (statistics and masks on the device).
    pub fn preparations(&self) -> &[DevicePreparation] {
        &self.preparers.device
    }

    /// True when batches are normalized, masked and gathered on the host (see [`PrepareOn`]).
    pub fn prepares_on_host(&self) -> bool {
        self.preparers.host.is_some()
    }

    /// Starts reading epoch `epoch` (1-based, as Samudra counts).
    ///
    /// # Errors
    /// As [`epoch_from`](Self::epoch_from).
    pub fn epoch(&self, epoch: u64) -> Result<EpochIter> {
        self.epoch_from(epoch, 0)
    }

    /// Starts epoch `epoch` at batch `first_batch` (0-based), as a run resumed mid-epoch needs:
    /// the batches before it are skipped without being read, and the rest are exactly the ones
    /// [`epoch`](Self::epoch) yields after them.
    ///
    /// # Errors
    /// [`Error::Config`] when `first_batch` is past the end of the epoch ([`len`](Self::len)
    /// itself gives an empty epoch) or `prefetch_batches` is over [`LoaderConfig::MAX_PREFETCH`];
    /// [`Error::Spawn`] when a loader thread cannot be started.
    pub fn epoch_from(&self, epoch: u64, first_batch: usize) -> Result<EpochIter> {
        if self.config.prefetch_batches > LoaderConfig::MAX_PREFETCH {
            return Err(Error::Config {
                field: "prefetch_batches",
                reason: format!("{} batches; at most {}", self.config.prefetch_batches, LoaderConfig::MAX_PREFETCH),
            });
        }
        let batches = self.schedule.epoch(&self.space.groups(), epoch);
        if first_batch > batches.len() {
            return Err(Error::Config {
                field: "first_batch",
                reason: format!("batch {first_batch} is past the end of an epoch of {}", batches.len()),
            });
        }
        let total = batches.len() - first_batch;
        let depth = self.config.prefetch_batches;
        let grid = self.source.grid();
        let source = Arc::clone(&self.source);
        let space = self.space.clone();
        let buffers = self.buffers.clone();
        let mut batches = batches.into_iter().enumerate().skip(first_batch);
        // Reads the next batch of the schedule; a panic becomes an error naming the batch.
        let mut produce = move || -> Option<Result<Ready>> {
            let (k, indices) = batches.next()?;
            let result = catch_unwind(AssertUnwindSafe(|| read_batch(&*source, &space, &buffers, indices)));
            Some(match result {
                Ok(r) => r.map(Ready::Host),
                Err(panic) => Err(Error::ProducerPanic { batch: k, message: panic_message(&*panic) }),
            })
        };
        let mut iter = EpochIter {
            feed: Feed::Closed,
            threads: Vec::new(),
            first: first_batch,
            total,
            remaining: total,
            finished: false,
            device: self.device.clone(),
            preparers: self.preparers.clone(),
            grid,
        };
        if depth == 0 {
            iter.feed = Feed::Inline(Box::new(produce));
            return Ok(iter);
        }
        let (host_tx, host_rx) = bounded::<Result<Ready>>(depth);
        let reader = std::thread::Builder::new()
            .name("om4-loader".into())
            .spawn(move || {
                while let Some(item) = produce() {
                    let failed = item.is_err();
                    if host_tx.send(item).is_err() || failed {
                        return;
                    }
                }
            })
            .map_err(|source| Error::Spawn { thread: "loader", source })?;
        iter.threads.push(reader);
        iter.feed = Feed::Channel(if self.config.prefetch_to_device {
            let (dev_tx, dev_rx) = bounded::<Result<Ready>>(1);
            let device = self.device.clone();
            let preps = self.preparers.clone();
            let uploader = std::thread::Builder::new()
                .name("om4-upload".into())
                .spawn(move || {
                    for (k, item) in host_rx.into_iter().enumerate() {
                        let batch = first_batch + k;
                        let item = item.and_then(|r| match r {
                            Ready::Host(h) => catch_unwind(AssertUnwindSafe(|| to_device(h, &preps, grid, &device)))
                                .map_err(|panic| Error::ProducerPanic { batch, message: panic_message(&*panic) })
                                .flatten()
                                .map(Ready::Device),
                            device_ready => Ok(device_ready),
                        });
                        let failed = item.is_err();
                        if dev_tx.send(item).is_err() || failed {
                            return;
                        }
                    }
                })
                .map_err(|source| Error::Spawn { thread: "upload", source })?;
            iter.threads.push(uploader);
            dev_rx
        } else {
            host_rx
        });
        Ok(iter)
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

fn read_batch<S: BatchSource + ?Sized>(
    source: &S,
    space: &SampleSpace,
    buffers: &BufferPool,
    indices: Vec<usize>,
) -> Result<HostBatch> {
    let _span = tracing::debug_span!("om4_batch_read", samples = indices.len()).entered();
    let t0 = Instant::now();
    let samples = space.samples(&indices)?;
    let plan = BatchPlan::new(&samples, &source.roles(), &source.channels())?;
    let plane = source.grid().plane();
    let groups = read_groups(source, &plan, |len| buffers.acquire(len))?;
    let planes = plan.planes();
    let telemetry = BatchTelemetry {
        read: t0.elapsed(),
        bytes: (planes.unique * plane * 4) as u64,
        planes,
        ..BatchTelemetry::default()
    };
    Ok(HostBatch { samples: indices, plan, groups, telemetry })
}

fn to_device(host: HostBatch, preps: &Preparers, grid: om4_batch::Grid, device: &Device) -> Result<LoadedBatch> {
    let _span = tracing::debug_span!("om4_batch_prepare", on_host = preps.host.is_some()).entered();
    let t0 = Instant::now();
    let batch = preps.prepare(&host.plan, host.groups, grid, device)?;
    Ok(LoadedBatch {
        samples: host.samples,
        batch,
        telemetry: BatchTelemetry { prepare: t0.elapsed(), ..host.telemetry },
    })
}

/// Where an epoch's batches come from: the prefetch threads, or (prefetch 0) the consumer's own thread.
enum Feed {
    Channel(Receiver<Result<Ready>>),
    Inline(Box<dyn FnMut() -> Option<Result<Ready>> + Send>),
    Closed,
}

/// The batches of one epoch, in schedule order. Dropping it stops the threads and returns every
/// buffer to the pool.
pub struct EpochIter {
    feed: Feed,
    threads: Vec<JoinHandle<()>>,
    /// Batch number (in the epoch) of the first batch yielded.
    first: usize,
    total: usize,
    remaining: usize,
    finished: bool,
    device: Device,
    preparers: Preparers,
    grid: om4_batch::Grid,
}

impl std::fmt::Debug for EpochIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EpochIter").field("remaining", &self.remaining).finish_non_exhaustive()
    }
}

impl EpochIter {
    /// Batches not yet yielded.
    pub fn remaining(&self) -> usize {
        self.remaining
    }
}

impl Iterator for EpochIter {
    type Item = Result<LoadedBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.finished {
            return None;
        }
        let t0 = Instant::now();
        let received = match &mut self.feed {
            Feed::Channel(rx) => rx.recv().ok(),
            Feed::Inline(produce) => produce(),
            Feed::Closed => None,
        };
        let wait: Duration = t0.elapsed();
        match received {
            Some(Ok(Ready::Device(mut b))) => {
                self.remaining -= 1;
                b.telemetry.wait = wait;
                Some(Ok(b))
            }
            Some(Ok(Ready::Host(h))) => match to_device(h, &self.preparers, self.grid, &self.device) {
                Ok(mut b) => {
                    self.remaining -= 1;
                    // The consumer also waits while its own thread prepares the batch.
                    b.telemetry.wait = t0.elapsed();
                    Some(Ok(b))
                }
                Err(e) => {
                    self.finished = true;
                    Some(Err(e))
                }
            },
            Some(Err(e)) => {
                self.finished = true;
                Some(Err(e))
            }
            None => {
                self.finished = true;
                // A thread that ends before the schedule does, without an error, must not look
                // like a short epoch.
                (self.remaining > 0).then(|| {
                    Err(Error::ProducerPanic {
                        batch: self.first + self.total - self.remaining,
                        message: "a loader thread ended before the epoch did".into(),
                    })
                })
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (0, Some(self.remaining))
    }
}

impl Drop for EpochIter {
    fn drop(&mut self) {
        // Disconnect first so blocked senders return, then join: no thread outlives the iterator.
        self.feed = Feed::Closed;
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
