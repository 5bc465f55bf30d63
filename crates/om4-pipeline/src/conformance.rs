//! The conformance suite every [`BatchSource`] passes (feature `conformance`), in the manner of
//! object_store's shared backend tests: a new source's tests call [`check_source`] with the
//! source and the planes it should serve, and get one verdict for everything the loader relies on.
//!
//! What it checks, against `truth` (a [`MemorySource`] holding the planes the source should
//! serve, read by whatever naive path the source's test trusts; for a store, the test kit's
//! `naive_store_truth` reads them one plane at a time):
//! 1. the description matches: grid, time positions, channels, roles and normalizations (bits);
//! 2. grouped reads of scattered time positions equal the truth bit for bit;
//! 3. the loader's batches (prefetch 0, 2 and 3, one or two reads in flight) come in schedule
//!    order and equal om4-batch's naive reference batch built from the truth's planes one at a
//!    time, for several windows;
//! 4. a read past the selection, and a buffer of the wrong length, are errors that name the
//!    problem, not panics.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use om4_batch::{BatchPlan, ReadGroup, SampleSpace, Schedule, WindowSpec, reference_batch};

use crate::config::{LoaderConfig, PrepareOn};
use crate::loader::{HostBatch, Loader};
use crate::memory::MemorySource;
use crate::source::BatchSource;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Runs the whole suite on `source`.
///
/// # Errors
/// The first failed check, said in words.
pub fn check_source<S: BatchSource>(source: Arc<S>, truth: &MemorySource) -> Result<(), String> {
    let caught = catch_unwind(AssertUnwindSafe(|| {
        describe(&*source, truth)?;
        grouped_reads(&*source, truth)?;
        batches(&source, truth)?;
        errors(&*source)
    }));
    caught.unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(format!("the source panicked: {message}"))
    })
}

fn describe<S: BatchSource>(source: &S, truth: &MemorySource) -> Result<(), String> {
    let same = source.grid() == truth.grid()
        && source.time_len() == truth.time_len()
        && source.channels() == truth.channels()
        && source.roles() == truth.roles();
    if !same {
        return Err(format!(
            "description differs: grid {:?}/{:?}, times {}/{}, channels {:?}/{:?}, roles {:?}/{:?}",
            source.grid(),
            truth.grid(),
            source.time_len(),
            truth.time_len(),
            source.channels(),
            truth.channels(),
            source.roles(),
            truth.roles()
        ));
    }
    for (i, (a, b)) in source.normalizations().iter().zip(truth.normalizations()).enumerate() {
        let stat_bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let same = stat_bits(a.mean()) == stat_bits(b.mean())
            && stat_bits(a.std()) == stat_bits(b.std())
            && a.precision() == b.precision()
            && a.mask() == b.mask()
            && a.order() == b.order()
            && a.fill().to_bits() == b.fill().to_bits();
        if !same {
            return Err(format!("normalization of variable set {i} differs"));
        }
    }
    Ok(())
}

fn grouped_reads<S: BatchSource>(source: &S, truth: &MemorySource) -> Result<(), String> {
    let n = source.time_len();
    if n == 0 {
        return Ok(());
    }
    // Scattered, sorted positions: first, last, and a stride through the middle.
    let mut times: Vec<usize> = (0..n).step_by(3.max(n / 5)).chain([n - 1]).collect();
    times.dedup();
    for (set, channels) in source.channels().into_iter().enumerate() {
        let group = ReadGroup { source: set, times: times.clone(), channels };
        let len = times.len() * channels * source.grid().plane();
        let (mut got, mut want) = (vec![0.0; len], vec![0.0; len]);
        source.read_group(&group, &mut got).map_err(|e| format!("grouped read of set {set} failed: {e}"))?;
        truth.read_group(&group, &mut want).map_err(|e| format!("truth read of set {set} failed: {e}"))?;
        if bits(&got) != bits(&want) {
            return Err(format!("grouped read of set {set} at times {times:?} differs from the truth"));
        }
    }
    Ok(())
}

fn batches<S: BatchSource>(source: &Arc<S>, truth: &MemorySource) -> Result<(), String> {
    let grid = source.grid();
    let norms: Vec<_> = truth.normalizations().iter().collect();
    let roles = truth.roles();
    for (history, steps, stride) in [(0, 1, 1), (1, 2, 1), (1, 1, 2)] {
        let spec = WindowSpec::new(history, steps, stride).map_err(|e| e.to_string())?;
        let Ok(space) = SampleSpace::single(spec, source.time_len()) else { continue };
        let schedule = Schedule::training(2, 3, None).map_err(|e| e.to_string())?;
        for (prefetch_batches, reads_in_flight) in [(0, Some(1)), (2, None), (3, Some(2))] {
            let config = LoaderConfig {
                prefetch_batches,
                reads_in_flight,
                prepare_on: PrepareOn::Host,
                ..LoaderConfig::default()
            };
            let loader = Loader::new(Arc::clone(source), space.clone(), schedule, config);
            let order = schedule.epoch(&space.groups(), 1);
            for (n, batch) in loader.epoch(1).map_err(|e| e.to_string())?.take(3).enumerate() {
                let batch = batch.map_err(|e| format!("loading a batch failed: {e}"))?;
                if batch.samples != order[n] {
                    return Err(format!("batch {n} holds samples {:?}, the schedule's {:?}", batch.samples, order[n]));
                }
                let HostBatch::Prepared(got) = batch.batch else { return Err("expected a prepared batch".into()) };
                let samples = space.samples(&batch.samples).map_err(|e| e.to_string())?;
                let want = reference_batch(&samples, &roles, &norms, grid, |s, t, c, out: &mut [f32]| {
                    let block = norms[s].channels() * grid.plane();
                    let mut all = vec![0.0; block];
                    truth
                        .read_group(&ReadGroup { source: s, times: vec![t], channels: norms[s].channels() }, &mut all)
                        .map_err(|e| om4_batch::Error::InvalidConfig { field: "truth", reason: e.to_string() })?;
                    out.copy_from_slice(&all[c * grid.plane()..(c + 1) * grid.plane()]);
                    Ok::<(), om4_batch::Error>(())
                })
                .map_err(|e| e.to_string())?;
                for (k, (g, w)) in got.steps.iter().zip(&want.steps).enumerate() {
                    if bits(&g.input) != bits(&w.input) || bits(&g.label) != bits(&w.label) {
                        return Err(format!(
                            "batch {:?} step {k} (hist {history}, steps {steps}, stride {stride}, prefetch \
                             {prefetch_batches}, reads in flight {reads_in_flight:?}) differs from the naive reference",
                            batch.samples
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

fn errors<S: BatchSource>(source: &S) -> Result<(), String> {
    let channels = source.channels()[0];
    let plane = source.grid().plane();
    let past = ReadGroup { source: 0, times: vec![source.time_len()], channels };
    let mut out = vec![0.0; channels * plane];
    match source.read_group(&past, &mut out) {
        Err(e) if !e.to_string().is_empty() => {}
        Err(_) => return Err("a read past the selection gave an error without a message".into()),
        Ok(()) => return Err("a read past the selection succeeded".into()),
    }
    let first = ReadGroup { source: 0, times: vec![0], channels };
    let mut short = vec![0.0; channels * plane - 1];
    if source.read_group(&first, &mut short).is_ok() {
        return Err("a read into a buffer of the wrong length succeeded".into());
    }
    Ok(())
}

/// The prognostic group's time positions of each batch of epoch 1 of `schedule` over `space`,
/// in schedule order: what a test source matches reads against to tell batches apart.
///
/// # Errors
/// A sample or plan error, said in words.
pub fn prognostic_times(
    source: &(impl BatchSource + ?Sized),
    space: &SampleSpace,
    schedule: Schedule,
) -> Result<Vec<Vec<usize>>, String> {
    schedule
        .epoch(&space.groups(), 1)
        .iter()
        .map(|indices| {
            let samples = space.samples(indices).map_err(|e| e.to_string())?;
            let plan = BatchPlan::new(&samples, &source.roles(), &source.channels()).map_err(|e| e.to_string())?;
            Ok(plan.groups()[0].times.clone())
        })
        .collect()
}

/// A batch's sample indices and the bits of its steps' inputs and labels, in order.
pub type BatchBits = (Vec<usize>, Vec<u32>);

/// Each batch of `loader`'s epoch 1, prepared on the host, as [`BatchBits`].
///
/// # Errors
/// A loading error, or a batch left raw ([`PrepareOn::Device`]), said in words.
pub fn epoch_bits<S: BatchSource>(loader: &Loader<S>) -> Result<Vec<BatchBits>, String> {
    loader
        .epoch(1)
        .map_err(|e| e.to_string())?
        .map(|b| {
            let b = b.map_err(|e| format!("loading a batch failed: {e}"))?;
            let HostBatch::Prepared(p) = b.batch else { return Err("expected a batch prepared on the host".into()) };
            let bits = p.steps.iter().flat_map(|s| s.input.iter().chain(s.label.iter())).map(|x| x.to_bits()).collect();
            Ok((b.samples, bits))
        })
        .collect()
}

/// How an [`Intercept`] reads: given the inner source, the group and the caller's buffer.
pub type ReadFn<S> = dyn Fn(&S, &ReadGroup, &mut [f32]) -> crate::Result<()> + Send + Sync;

/// A source that describes itself as `inner` does (grid, times, channels, roles, normalizations,
/// read pool, batch reads in flight) and reads through a function of the test's choosing:
/// failures on some reads, a delay, a rendezvous between reads. The wrapper tests of sources and
/// loaders build on.
pub struct Intercept<S: BatchSource> {
    inner: Arc<S>,
    read: Box<ReadFn<S>>,
}

impl<S: BatchSource> Intercept<S> {
    /// `inner`, read through `read`.
    pub fn new(
        inner: Arc<S>,
        read: impl Fn(&S, &ReadGroup, &mut [f32]) -> crate::Result<()> + Send + Sync + 'static,
    ) -> Self {
        Self { inner, read: Box::new(read) }
    }

    /// `inner`, whose read of batch `first`'s prognostic group (of epoch 1 of `schedule` over
    /// `space`) waits until a read of batch `second`'s has begun, and fails after 30 s without
    /// one: a loader that reads one batch at a time fails on it, one with the two reads in flight
    /// at once reads the same bits as `inner`.
    ///
    /// # Errors
    /// When the epoch has no such batches, or the two read the same prognostic times.
    pub fn overlapping(
        inner: Arc<S>,
        space: &SampleSpace,
        schedule: Schedule,
        first: usize,
        second: usize,
    ) -> Result<Self, String> {
        let times = prognostic_times(&*inner, space, schedule)?;
        let time = |k: usize| times.get(k).cloned().ok_or_else(|| format!("the epoch has no batch {k}"));
        let (waits, signals) = (time(first)?, time(second)?);
        if waits == signals {
            return Err(format!("batches {first} and {second} read the same prognostic times"));
        }
        let (started, begun) = std::sync::mpsc::channel();
        let begun = std::sync::Mutex::new(begun);
        Ok(Self::new(inner, move |inner, group, out| {
            if group.source == 0 && group.times == waits {
                let begun = begun.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if begun.recv_timeout(std::time::Duration::from_secs(30)).is_err() {
                    return Err(crate::Error::Config {
                        field: "test source",
                        reason: format!("batch {second} was not read while batch {first} was"),
                    });
                }
            } else if group.source == 0 && group.times == signals {
                let _ = started.send(());
            }
            inner.read_group(group, out)
        }))
    }
}

impl<S: BatchSource> std::fmt::Debug for Intercept<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Intercept").field("grid", &self.inner.grid()).finish_non_exhaustive()
    }
}

impl<S: BatchSource> BatchSource for Intercept<S> {
    fn grid(&self) -> om4_batch::Grid {
        self.inner.grid()
    }
    fn time_len(&self) -> usize {
        self.inner.time_len()
    }
    fn channels(&self) -> Vec<usize> {
        self.inner.channels()
    }
    fn roles(&self) -> om4_batch::Roles {
        self.inner.roles()
    }
    fn normalizations(&self) -> &[om4_batch::Normalization] {
        self.inner.normalizations()
    }
    fn read_group(&self, group: &ReadGroup, out: &mut [f32]) -> crate::Result<()> {
        (self.read)(&self.inner, group, out)
    }
    fn read_pool(&self) -> Option<&om4_batch::ReadPool> {
        self.inner.read_pool()
    }
    fn batch_reads_in_flight(&self) -> usize {
        self.inner.batch_reads_in_flight()
    }
}
