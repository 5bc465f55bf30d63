//! The prefetching loader: producer threads (one per batch read in flight, see
//! [`LoaderConfig::reads_in_flight`]) read batch N+1.. into pooled host buffers while the model
//! computes batch N; a second stage (on a thread of its own with `prefetch_to_device`, else
//! on the consumer's) prepares each batch on the host when asked to and hands it to a framework
//! adapter's `finish` function. Batches come out in schedule order; exhaustion, early drop,
//! errors and panics end cleanly, with every buffer back in its pool.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::bounded;
use om4_batch::{BatchPlan, Normalization, ReadGroup, SampleSpace, Schedule};

use crate::buffers::{BufferPool, PooledBuf};
use crate::config::{LoaderConfig, PrepareOn};
use crate::epoch::{Epoch, Feed, InOrder, Stage, panic_message};
use crate::error::{Error, Result};
use crate::prepare::PreparedBatch;
use crate::resident::{FreshPlanes, Residency};
use crate::source::{BatchSource, read_listed};
use crate::telemetry::BatchTelemetry;

/// A boxed error: a source's own error inside [`Error::Source`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A framework's last stage: what each host batch becomes (tensors on a device, say), on the
/// loader's second stage. The Burn and candle adapters implement it; [`Host`] keeps host batches.
pub trait Finish: Send + Sync + 'static {
    /// What the consumer receives.
    type Output: Send + 'static;

    /// The framework's error: what its epochs yield, the loader's own errors converted into it.
    type Error: std::error::Error + From<Error> + Send + 'static;

    /// Whether batches are normalized, masked and gathered on the host before
    /// [`finish`](Self::finish) sees them (else it gets their raw planes, [`HostBatch::Raw`]),
    /// given the configuration's `prepare_on`: the one place a framework decides it for its device.
    fn prepares_on_host(&self, prepare_on: PrepareOn) -> bool;

    /// Turns a host batch into the output.
    ///
    /// # Errors
    /// Whatever the framework refuses.
    fn finish(&self, batch: HostBatch) -> std::result::Result<Self::Output, Self::Error>;
}

/// A [`Finish`] as the second stage calls it.
pub(crate) type FinishFn<T, E> = Arc<dyn Fn(HostBatch) -> std::result::Result<T, E> + Send + Sync>;

/// Host batches as they are: prepared on the host unless `prepare_on` is [`PrepareOn::Device`].
#[derive(Debug, Clone, Copy, Default)]
pub struct Host;

impl Finish for Host {
    type Output = HostBatch;
    type Error = Error;

    fn prepares_on_host(&self, prepare_on: PrepareOn) -> bool {
        prepare_on != PrepareOn::Device
    }

    fn finish(&self, batch: HostBatch) -> Result<HostBatch> {
        Ok(batch)
    }
}

/// A batch as the consumer receives it: the sample indices, the batch in the form the adapter
/// made of it, and what it cost.
#[derive(Debug)]
pub struct Loaded<B> {
    /// Sample indices, in schedule order.
    pub samples: Vec<usize>,
    /// The batch: what the loader's [`Finish`] made of it ([`HostBatch`] with [`Host`]).
    pub batch: B,
    /// Timings and sizes.
    pub telemetry: BatchTelemetry,
}

/// A batch in host memory, before a framework sees it.
#[derive(Debug)]
pub enum HostBatch {
    /// The raw planes, one pooled buffer per read group of the plan (laid out
    /// `(group.times, channels, y, x)`), for preparation on the device.
    Raw {
        /// The batch's plan.
        plan: BatchPlan,
        /// One buffer per group of `plan`.
        groups: Vec<PooledBuf>,
    },
    /// Normalized, masked and gathered on the host, ready to become the model's tensors.
    Prepared(PreparedBatch),
    /// With a split resident on the device ([`Loader::resident`]): only the planes this batch is
    /// the first to need and the device copy lacks, one entry per read group of the plan; the
    /// rest are gathered from the device copy. The consumer writes them into its copy and then
    /// marks them in `residency`.
    Resident {
        /// The batch's plan (its rows index each group's `times`, which are split positions).
        plan: BatchPlan,
        /// One entry per group of `plan`.
        fresh: Vec<FreshPlanes>,
        /// The loader's record of what the device copy holds.
        residency: Arc<Residency>,
    },
}

/// Loads the batches of a schedule from a source ahead of the consumer: read into host memory,
/// prepared there or not, and finished by a framework's [`Finish`] (host batches with [`Host`],
/// Burn tensors with om4-burn's, candle tensors with om4-candle's).
pub struct Loader<S: BatchSource, F: Finish = Host> {
    source: Arc<S>,
    finish: Arc<F>,
    space: SampleSpace,
    schedule: Schedule,
    config: LoaderConfig,
    /// The source's normalizations when batches are prepared on the host.
    on_host: Option<Arc<Vec<Normalization>>>,
    buffers: BufferPool,
    outputs: BufferPool,
    /// What a device copy of the split holds, when it is kept resident.
    residency: Option<Arc<Residency>>,
}

impl<S: BatchSource, F: Finish> std::fmt::Debug for Loader<S, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loader")
            .field("samples", &self.space.len())
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<S: BatchSource> Loader<S, Host> {
    /// A loader of host batches: `space`'s samples (built over `source.time_len()` positions) in
    /// `schedule`'s order, prepared on the host unless `config.prepare_on` is [`PrepareOn::Device`].
    pub fn new(source: Arc<S>, space: SampleSpace, schedule: Schedule, config: LoaderConfig) -> Self {
        Self::with_finish(source, space, schedule, config, Host)
    }
}

impl<S: BatchSource, F: Finish> Loader<S, F> {
    /// A loader whose batches `finish` turns into its framework's form; where batches are
    /// prepared is `finish`'s choice ([`Finish::prepares_on_host`]).
    pub fn with_finish(
        source: Arc<S>,
        space: SampleSpace,
        schedule: Schedule,
        config: LoaderConfig,
        finish: F,
    ) -> Self {
        let buffers = BufferPool::new();
        let outputs = Self::output_pool(&buffers);
        // Prepared on the host: normalized, masked and gathered on the source's read pool.
        let on_host = finish.prepares_on_host(config.prepare_on).then(|| Arc::new(source.normalizations().to_vec()));
        Self { source, finish: Arc::new(finish), space, schedule, config, on_host, buffers, outputs, residency: None }
    }

    /// Keeps the split resident on the consumer's device: each plane is read and handed over
    /// once, the first time a batch needs it ([`HostBatch::Resident`]); later batches and epochs
    /// gather it from the device copy. `budget_bytes` bounds the device copy, which holds every
    /// time of every variable set in float32.
    ///
    /// # Errors
    /// [`Error::Config`] when batches are prepared on the host (a resident split is prepared on
    /// the device), or when the split does not fit the budget (the message gives both sizes).
    pub fn resident(mut self, budget_bytes: u64) -> Result<Self> {
        if self.on_host.is_some() {
            return Err(Error::Config {
                field: "resident",
                reason: "a resident split is prepared on the device, but this loader prepares batches on the host \
                         (prepare_on: device)"
                    .into(),
            });
        }
        let grid = self.source.grid();
        let residency = Residency::new(self.source.channels(), self.source.time_len(), grid.plane());
        let need = residency.split_bytes();
        if need > budget_bytes {
            return Err(Error::Config {
                field: "resident",
                reason: format!(
                    "the split needs {:.3} GB on the device ({} times × {} channels × {}×{} float32), over the \
                     budget of {:.3} GB",
                    need as f64 / 1e9,
                    residency.times(),
                    residency.channels().iter().sum::<usize>(),
                    grid.y,
                    grid.x,
                    budget_bytes as f64 / 1e9
                ),
            });
        }
        self.residency = Some(Arc::new(residency));
        Ok(self)
    }

    /// What the device copy holds, when the split is resident ([`resident`](Self::resident)).
    pub fn residency(&self) -> Option<&Arc<Residency>> {
        self.residency.as_ref()
    }

    /// The framework's last stage.
    pub fn finisher(&self) -> &F {
        &self.finish
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
        self.outputs = Self::output_pool(&buffers);
        self.buffers = buffers;
        self
    }

    /// The source.
    pub fn source(&self) -> &Arc<S> {
        &self.source
    }

    /// The settings.
    pub fn config(&self) -> &LoaderConfig {
        &self.config
    }

    /// Batches per epoch (the same on every DDP rank).
    pub fn len(&self) -> usize {
        self.schedule.len(&self.space.groups())
    }

    /// True when an epoch yields nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The raw-plane buffer pool (for telemetry and tests).
    pub fn buffers(&self) -> &BufferPool {
        &self.buffers
    }

    /// The pool of the host path's model-batch buffers (see [`PrepareOn`]; for telemetry and tests).
    pub fn output_buffers(&self) -> &BufferPool {
        &self.outputs
    }

    /// True when batches are normalized, masked and gathered on the host (see [`PrepareOn`]).
    pub fn prepares_on_host(&self) -> bool {
        self.on_host.is_some()
    }

    /// Batch reads an epoch keeps in flight at once: `reads_in_flight`, else the source's
    /// [`BatchSource::batch_reads_in_flight`], at most `prefetch_batches` (1 with prefetch 0).
    ///
    /// # Errors
    /// [`Error::Config`] when `reads_in_flight` is 0 or over [`LoaderConfig::MAX_PREFETCH`].
    pub fn reads_in_flight(&self) -> Result<usize> {
        let reads = match self.config.reads_in_flight {
            Some(n @ 1..=LoaderConfig::MAX_PREFETCH) => n,
            Some(n) => {
                return Err(Error::Config {
                    field: "reads_in_flight",
                    reason: format!("{n} batches; at least 1, at most {}", LoaderConfig::MAX_PREFETCH),
                });
            }
            None => self.source.batch_reads_in_flight(),
        };
        Ok(reads.clamp(1, self.config.prefetch_batches.max(1)))
    }

    /// The batches of epoch `epoch` (1-based, as Samudra counts).
    ///
    /// # Errors
    /// As [`epoch_from`](Self::epoch_from).
    pub fn epoch(&self, epoch: u64) -> Result<Epoch<F::Output, F::Error>> {
        self.epoch_from(epoch, 0)
    }

    /// The batches of epoch `epoch` from batch `first_batch` (0-based), as a run resumed
    /// mid-epoch needs: the batches before it are skipped without being read, and the rest are
    /// exactly the ones [`epoch`](Self::epoch) yields after them. Each is finished ahead of the
    /// consumer when `prefetch_to_device` is set.
    ///
    /// # Errors
    /// [`Error::Config`] when `first_batch` is past the end of the epoch ([`len`](Self::len)
    /// itself gives an empty epoch), `prefetch_batches` is over [`LoaderConfig::MAX_PREFETCH`] or
    /// `reads_in_flight` is 0 or over it;
    /// [`Error::Spawn`] when a loader thread cannot be started.
    pub fn epoch_from(&self, epoch: u64, first_batch: usize) -> Result<Epoch<F::Output, F::Error>> {
        let finisher = Arc::clone(&self.finish);
        let finish: FinishFn<F::Output, F::Error> = Arc::new(move |batch| finisher.finish(batch));
        if self.config.prefetch_batches > LoaderConfig::MAX_PREFETCH {
            return Err(Error::Config {
                field: "prefetch_batches",
                reason: format!("{} batches; at most {}", self.config.prefetch_batches, LoaderConfig::MAX_PREFETCH),
            });
        }
        let lanes = self.reads_in_flight()?;
        let batches = self.schedule.epoch(&self.space.groups(), epoch);
        if first_batch > batches.len() {
            return Err(Error::Config {
                field: "first_batch",
                reason: format!("batch {first_batch} is past the end of an epoch of {}", batches.len()),
            });
        }
        let total = batches.len() - first_batch;
        let depth = self.config.prefetch_batches;
        let EpochPlan { plans, capacity, output_capacity, steps } = self.plan_epoch(&batches[first_batch..])?;
        // Staging buffers are sized to the largest a batch of their group can need, and as many of
        // each are allocated before the first read as the batches in flight can hold: per lane its
        // queue (`depth / lanes`, rounded up) and one being read or waiting to be queued, then one
        // being finished; raw batches keep theirs further, one more at the finishing stage and
        // its queue, and three with the consumer (the batch in use, the one before it, one being
        // copied). An epoch then allocates none unless its consumer keeps more.
        let read_ahead = lanes * (depth.div_ceil(lanes) + 1) + 1;
        let count = if self.on_host.is_some() { read_ahead } else { read_ahead + 5 };
        for &c in &capacity {
            self.buffers.reserve(c, count);
        }
        if self.on_host.is_some() {
            // Step buffers, two per rollout step, all of one size: with the batch being prepared,
            // two at the finishing stage and three with the consumer.
            self.outputs.reserve(output_capacity, 6 * 2 * steps);
        }
        let capacity = Arc::new(capacity);
        // Batch k (counted from `first_batch`) is read by lane k mod `lanes`, each lane on a
        // producer thread of its own; with prefetch 0, one lane on the consumer's thread.
        let mut work: Vec<Vec<Work>> = vec![Vec::new(); lanes];
        for (i, ((k, indices), (plan, fresh))) in
            batches.into_iter().enumerate().skip(first_batch).zip(plans).enumerate()
        {
            work[i % lanes].push(Work { k, indices, plan, fresh });
        }
        let stage = Stage {
            finish,
            on_host: self.on_host.clone(),
            grid: self.source.grid(),
            pool: self.source.read_pool().cloned(),
            outputs: self.outputs.clone(),
            output_capacity,
        };
        let mut iter = Epoch {
            feed: Feed::Closed,
            threads: Vec::new(),
            first: first_batch,
            total,
            remaining: total,
            finished: false,
        };
        if depth == 0 {
            let mut produce = self.producer(work.pop().unwrap_or_default(), Arc::clone(&capacity));
            iter.feed = Feed::Inline(Box::new(move || {
                let (k, read) = produce()?;
                Some(read.map_err(F::Error::from).and_then(|r| stage.run(k, r)))
            }));
            return Ok(iter);
        }
        let mut receivers = Vec::with_capacity(lanes);
        for lane in work {
            let (read_tx, read_rx) = bounded::<(usize, Result<ReadBatch>)>(depth.div_ceil(lanes));
            let mut produce = self.producer(lane, Arc::clone(&capacity));
            let reader = std::thread::Builder::new()
                .name("om4-loader".into())
                .spawn(move || {
                    while let Some(item) = produce() {
                        let failed = item.1.is_err();
                        if read_tx.send(item).is_err() || failed {
                            return;
                        }
                    }
                })
                .map_err(|source| Error::Spawn { thread: "loader", source })?;
            iter.threads.push(reader);
            receivers.push(read_rx);
        }
        let mut read_rx = InOrder { lanes: receivers, next: 0 };
        if !self.config.prefetch_to_device {
            iter.feed = Feed::Read(read_rx, stage);
            return Ok(iter);
        }
        let (done_tx, done_rx) = bounded::<Result<Loaded<F::Output>, F::Error>>(1);
        let finisher = std::thread::Builder::new()
            .name("om4-upload".into())
            .spawn(move || {
                while let Some((k, read)) = read_rx.recv() {
                    let item = read.map_err(F::Error::from).and_then(|r| stage.run(k, r));
                    let failed = item.is_err();
                    if done_tx.send(item).is_err() || failed {
                        return;
                    }
                }
            })
            .map_err(|source| Error::Spawn { thread: "upload", source })?;
        iter.threads.push(finisher);
        iter.feed = Feed::Finished(done_rx);
        Ok(iter)
    }

    /// Plans `batches` in order: each batch's plan and, with a resident split, per read group the
    /// times it is the first to need that the device copy lacks (as the copy stands when the
    /// epoch starts); and per group the largest buffer any batch of any epoch can need (a full
    /// batch of samples none of whose times overlap), so that buffers sized to it fit every later
    /// request.
    fn plan_epoch(&self, batches: &[Vec<usize>]) -> Result<EpochPlan> {
        let mut seen = self.residency.as_ref().map(|r| r.snapshot());
        let (roles, channels, plane) = (self.source.roles(), self.source.channels(), self.source.grid().plane());
        let batch = batches.iter().map(Vec::len).max().unwrap_or(0);
        let capacity: Vec<usize> = match batches.first().and_then(|b| b.first()) {
            Some(&one) => BatchPlan::new(&self.space.samples(&[one])?, &roles, &channels)?
                .groups()
                .iter()
                .map(|g| (g.times.len() * batch).min(self.source.time_len()) * g.channels * plane)
                .collect(),
            None => Vec::new(),
        };
        let mut plans = Vec::with_capacity(batches.len());
        let (mut output_capacity, mut steps) = (0, 0);
        for indices in batches {
            let plan = BatchPlan::new(&self.space.samples(indices)?, &roles, &channels)?;
            let (input, label) = om4_batch::step_lens(&plan, self.source.grid());
            output_capacity = output_capacity.max(input).max(label);
            steps = plan.steps();
            let fresh = seen.as_mut().map(|seen| {
                plan.groups()
                    .iter()
                    .map(|g| {
                        g.times.iter().copied().filter(|&t| !std::mem::replace(&mut seen[g.source][t], true)).collect()
                    })
                    .collect()
            });
            plans.push((plan, fresh));
        }
        Ok(EpochPlan { plans, capacity, output_capacity, steps })
    }

    /// Reads `lane`'s batches in turn, one per call; a panic becomes an error naming the batch.
    fn producer(
        &self,
        lane: Vec<Work>,
        capacity: Arc<Vec<usize>>,
    ) -> impl FnMut() -> Option<(usize, Result<ReadBatch>)> + Send + 'static {
        let source = Arc::clone(&self.source);
        let buffers = self.buffers.clone();
        let residency = self.residency.clone();
        let mut lane = lane.into_iter();
        move || {
            let Work { k, indices, plan, fresh } = lane.next()?;
            let fresh =
                fresh.map(|times| (times, Arc::clone(residency.as_ref().expect("fresh times come with a residency"))));
            let alloc =
                |g: usize, len: usize| buffers.acquire_with_capacity(len, capacity.get(g).copied().unwrap_or(0));
            let result = catch_unwind(AssertUnwindSafe(|| read_batch(&*source, alloc, indices, plan, fresh)));
            Some((
                k,
                result.unwrap_or_else(|panic| Err(Error::ProducerPanic { batch: k, message: panic_message(&*panic) })),
            ))
        }
    }
}

/// An epoch's read plan: per batch its plan (and, with a resident split, the times to read per
/// group), per group the largest buffer.
struct EpochPlan {
    plans: Vec<(BatchPlan, Option<Vec<Vec<usize>>>)>,
    capacity: Vec<usize>,
    /// The largest step buffer of the host path, and the rollout steps.
    output_capacity: usize,
    steps: usize,
}

/// One batch of a lane: its number in the epoch, its sample indices, its plan, and (with a
/// resident split) the times per read group to read.
#[derive(Debug, Clone)]
struct Work {
    k: usize,
    indices: Vec<usize>,
    plan: BatchPlan,
    fresh: Option<Vec<Vec<usize>>>,
}

/// Raw planes of one batch, as the producer read them.
pub(crate) struct ReadBatch {
    pub(crate) samples: Vec<usize>,
    pub(crate) plan: BatchPlan,
    pub(crate) groups: Vec<PooledBuf>,
    /// With a resident split: the times read per group (`groups` holds only those) and the record
    /// the consumer marks them in.
    pub(crate) fresh: Option<(Vec<Vec<usize>>, Arc<Residency>)>,
    pub(crate) telemetry: BatchTelemetry,
}

fn read_batch<S: BatchSource + ?Sized>(
    source: &S,
    alloc: impl FnMut(usize, usize) -> PooledBuf,
    indices: Vec<usize>,
    plan: BatchPlan,
    fresh: Option<(Vec<Vec<usize>>, Arc<Residency>)>,
) -> Result<ReadBatch> {
    let _span = tracing::debug_span!("om4_batch_read", samples = indices.len()).entered();
    let t0 = Instant::now();
    let plane = source.grid().plane();
    let listed: Vec<ReadGroup> = match &fresh {
        Some((times, _)) => {
            plan.groups().iter().zip(times).map(|(g, times)| ReadGroup { times: times.clone(), ..g.clone() }).collect()
        }
        None => plan.groups().to_vec(),
    };
    let groups = read_listed(source, &listed, alloc)?;
    let planes = plan.planes();
    let read: usize = listed.iter().map(ReadGroup::planes).sum();
    let telemetry = BatchTelemetry {
        read: t0.elapsed(),
        bytes: (read * plane * 4) as u64,
        planes,
        resident_planes: planes.unique - read,
        ..BatchTelemetry::default()
    };
    Ok(ReadBatch { samples: indices, plan, groups, fresh, telemetry })
}
