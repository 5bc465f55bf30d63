//! Batch reads in flight at once (`LoaderConfig::reads_in_flight`): they overlap, batches still
//! come out in schedule order with the bits one read at a time gives, and a failing read ends the
//! epoch at its own batch, with every buffer back in its pool.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use om4_batch::{Grid, LandMask, NormOrder, Normalization, Roles, SampleSpace, Schedule, WindowSpec};
use om4_pipeline::conformance::{self, Intercept};
use om4_pipeline::{BatchSource, Error, Loader, LoaderConfig, MemorySource, PrepareOn};

fn memory() -> Arc<MemorySource> {
    let grid = Grid { y: 3, x: 4 };
    let (times, channels) = (40, [2, 1]);
    let sets = channels
        .iter()
        .enumerate()
        .map(|(s, &c)| {
            let planes: Vec<f32> = (0..times * c * grid.plane()).map(|i| (s * 100_000 + i) as f32 * 0.5).collect();
            let mask = LandMask::all_wet(c, grid.plane());
            let norm = Normalization::new(vec![1.0; c], vec![2.0; c], mask, NormOrder::default(), 0.0).unwrap();
            (planes, norm)
        })
        .collect();
    Arc::new(MemorySource::new(grid, times, Roles::samudra(), sets).unwrap())
}

fn space(source: &impl BatchSource) -> SampleSpace {
    SampleSpace::single(WindowSpec::new(1, 2, 1).unwrap(), source.time_len()).unwrap()
}

fn schedule() -> Schedule {
    Schedule::training(2, 9, None).unwrap()
}

fn config(prefetch_batches: usize, reads_in_flight: usize, prefetch_to_device: bool) -> LoaderConfig {
    LoaderConfig {
        prefetch_batches,
        reads_in_flight: Some(reads_in_flight),
        prefetch_to_device,
        prepare_on: PrepareOn::Host,
        kind: None,
    }
}

fn epoch_bits<S: BatchSource>(loader: &Loader<S>) -> Vec<conformance::BatchBits> {
    conformance::epoch_bits(loader).unwrap()
}

fn failure(reason: String) -> Error {
    Error::Config { field: "test source", reason }
}

#[test]
fn two_batch_reads_are_in_flight_at_once() {
    // Batch 0's reads wait until a read of batch 1 has begun: read one batch at a time, they
    // would give up after the timeout.
    let inner = memory();
    let space = space(&*inner);
    let source = Arc::new(Intercept::overlapping(inner, &space, schedule(), 0, 1).unwrap());
    for to_device in [true, false] {
        let loader = Loader::new(Arc::clone(&source), space.clone(), schedule(), config(2, 2, to_device));
        let got = epoch_bits(&loader);
        let one_at_a_time = Loader::new(memory(), space.clone(), schedule(), config(2, 1, to_device));
        assert_eq!(got, epoch_bits(&one_at_a_time), "reads in flight change no bit and no order");
        assert_eq!(loader.buffers().leased(), 0);
    }
}

#[test]
fn batches_come_out_in_schedule_order_whatever_order_reads_finish_in() {
    // Each read sleeps a pseudo-random 0–3 ms, so lanes overtake one another.
    let state = AtomicU64::new(0x9e37_79b9_7f4a_7c15);
    let source = Arc::new(Intercept::new(memory(), move |inner, group, out| {
        let mut x = state.fetch_add(0x6a09_e667_f3bc_c909, Ordering::Relaxed);
        x ^= x >> 29;
        std::thread::sleep(Duration::from_micros(x % 3000));
        inner.read_group(group, out)
    }));
    let reference = epoch_bits(&Loader::new(memory(), space(&*source), schedule(), config(0, 1, false)));
    assert!(reference.len() >= 8, "{} batches", reference.len());
    assert_eq!(
        reference.iter().map(|(s, _)| s.clone()).collect::<Vec<_>>(),
        schedule().epoch(&space(&*source).groups(), 1)
    );
    for (prefetch, reads, to_device) in
        [(2, 2, true), (2, 2, false), (3, 2, true), (5, 3, false), (8, 4, true), (1, 4, true)]
    {
        let loader = Loader::new(Arc::clone(&source), space(&*source), schedule(), config(prefetch, reads, to_device));
        assert_eq!(epoch_bits(&loader), reference, "prefetch {prefetch}, {reads} reads in flight");
        assert_eq!(loader.buffers().leased(), 0);
        assert_eq!(loader.output_buffers().leased(), 0);
    }
}

#[test]
fn a_failing_read_ends_the_epoch_at_its_own_batch() {
    let inner = memory();
    let times = conformance::prognostic_times(&*inner, &space(&*inner), schedule()).unwrap();
    // Batch 3's prognostic times, unless a batch before it reads the same times.
    let k = 3;
    assert!(!times[..k].contains(&times[k]));
    let bad = times[k].clone();
    let source = Arc::new(Intercept::new(inner, move |inner, group, out| {
        inner.read_group(group, out)?;
        if group.source == 0 && group.times == bad {
            return Err(failure("injected failure".into()));
        }
        Ok(())
    }));
    let order = schedule().epoch(&space(&*source).groups(), 1);
    for (prefetch, reads, to_device) in [(2, 2, true), (2, 2, false), (4, 3, true), (4, 4, false)] {
        let loader = Loader::new(Arc::clone(&source), space(&*source), schedule(), config(prefetch, reads, to_device));
        let mut it = loader.epoch(1).unwrap();
        for want in &order[..k] {
            assert_eq!(&it.next().unwrap().unwrap().samples, want);
        }
        match it.next() {
            Some(Err(Error::Config { reason, .. })) => assert!(reason.contains("injected failure"), "{reason}"),
            other => panic!("expected batch {k}'s error, got {other:?}"),
        }
        assert!(it.next().is_none());
        drop(it);
        assert_eq!(loader.buffers().leased(), 0, "every buffer of the batches read ahead went back");
        assert_eq!(loader.output_buffers().leased(), 0);
    }
}

#[test]
fn reads_in_flight_is_resolved_and_checked() {
    let source = memory();
    let resolved = |config: LoaderConfig| {
        Loader::new(Arc::clone(&source), space(&*source), schedule(), config).reads_in_flight().unwrap()
    };
    assert_eq!(resolved(config(4, 3, true)), 3);
    assert_eq!(resolved(config(2, 4, true)), 2, "at most prefetch_batches");
    assert_eq!(resolved(config(0, 3, true)), 1, "read on demand: one at a time");
    assert_eq!(resolved(LoaderConfig::default()), 1, "the default follows the source: memory waits on no round trip");
    for reads in [0, LoaderConfig::MAX_PREFETCH + 1] {
        let loader = Loader::new(Arc::clone(&source), space(&*source), schedule(), config(2, reads, true));
        match loader.epoch(1) {
            Err(Error::Config { field, .. }) => assert_eq!(field, "reads_in_flight"),
            other => panic!("expected a config error for {reads} reads in flight, got {other:?}"),
        }
    }
}

#[test]
fn an_epoch_says_when_its_next_batch_is_ready() {
    // Reads of batch 2 and later wait until the test lets them go: batch 1 must then be ready
    // (read ahead) and batch 2 not, whatever the lanes.
    let gate = Arc::new(std::sync::Barrier::new(2));
    let inner = memory();
    let space = space(&*inner);
    let times = conformance::prognostic_times(&*inner, &space, schedule()).unwrap();
    let held = times[2].clone();
    assert_eq!(times.iter().filter(|t| **t == held).count(), 1, "batch 2's times are its own");
    let wait = Arc::clone(&gate);
    let source = Arc::new(Intercept::new(inner, move |inner, group, out| {
        if group.source == 0 && group.times == held {
            wait.wait();
        }
        inner.read_group(group, out)
    }));
    for (prefetch, reads, to_device) in [(3, 1, false), (3, 1, true), (4, 2, false)] {
        let loader = Loader::new(Arc::clone(&source), space.clone(), schedule(), config(prefetch, reads, to_device));
        let mut epoch = loader.epoch(1).unwrap();
        epoch.next().unwrap().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !epoch.is_ready() {
            assert!(std::time::Instant::now() < deadline, "batch 1 was never read ahead");
            std::thread::sleep(Duration::from_millis(1));
        }
        epoch.next().unwrap().unwrap();
        std::thread::sleep(Duration::from_millis(20));
        assert!(!epoch.is_ready(), "batch 2's read is held back");
        gate.wait();
        assert_eq!(epoch.count(), loader.len() - 2);
    }
    let inline = Loader::new(memory(), space.clone(), schedule(), config(0, 1, false));
    let mut epoch = inline.epoch(1).unwrap();
    assert!(!epoch.is_ready(), "nothing is read ahead with prefetch 0");
    assert!(epoch.by_ref().all(|b| b.is_ok()));
    assert!(epoch.is_ready(), "an ended epoch returns at once");
}

/// A host stand-in for a device copy of the split: per variable set, every time's raw planes
/// (None until written). Writes a resident batch's fresh planes, marks them, and returns each
/// group's planes at the plan's times, as a consumer gathers them.
struct Copy {
    planes: Vec<Vec<Option<Vec<f32>>>>,
    plane: usize,
}

impl Copy {
    fn new(source: &impl BatchSource) -> Self {
        let planes = source.channels().iter().map(|_| vec![None; source.time_len()]).collect();
        Self { planes, plane: source.grid().plane() }
    }

    fn take(&mut self, batch: om4_pipeline::HostBatch) -> Vec<Vec<f32>> {
        let om4_pipeline::HostBatch::Resident { plan, fresh, residency } = batch else { panic!("a resident batch") };
        for (g, f) in plan.groups().iter().zip(&fresh) {
            let block = g.channels * self.plane;
            assert_eq!(f.planes.len(), f.times.len() * block);
            for (i, &t) in f.times.iter().enumerate() {
                assert!(self.planes[g.source][t].is_none(), "time {t} of set {} handed over twice", g.source);
                self.planes[g.source][t] = Some(f.planes[i * block..(i + 1) * block].to_vec());
            }
            residency.mark(g.source, &f.times);
        }
        plan.groups()
            .iter()
            .map(|g| {
                g.times
                    .iter()
                    .flat_map(|&t| self.planes[g.source][t].clone().expect("a plane the copy lacks"))
                    .collect()
            })
            .collect()
    }
}

fn raw_groups(loader: &Loader<MemorySource>, epoch: u64) -> Vec<Vec<Vec<f32>>> {
    loader
        .epoch(epoch)
        .unwrap()
        .map(|b| match b.unwrap().batch {
            om4_pipeline::HostBatch::Raw { groups, .. } => groups.iter().map(|g| g.to_vec()).collect(),
            _ => panic!("a raw batch"),
        })
        .collect()
}

#[test]
fn a_resident_split_reads_each_plane_once_and_gives_the_same_planes() {
    let source = memory();
    let device = |prefetch, reads| LoaderConfig { prepare_on: PrepareOn::Device, ..config(prefetch, reads, true) };
    let plain = Loader::new(Arc::clone(&source), space(&*source), schedule(), device(2, 1));
    for (prefetch, reads) in [(0, 1), (2, 1), (4, 2)] {
        let resident = Loader::new(Arc::clone(&source), space(&*source), schedule(), device(prefetch, reads))
            .resident(u64::MAX)
            .unwrap();
        let residency = Arc::clone(resident.residency().unwrap());
        let mut copy = Copy::new(&*source);
        let mut read = Vec::new();
        for epoch in 1..=3 {
            let (mut bytes, mut hits, mut unique) = (0, 0, 0);
            let want = raw_groups(&plain, epoch);
            let mut n = 0;
            for (k, b) in resident.epoch(epoch).unwrap().enumerate() {
                let b = b.unwrap();
                (bytes, hits, unique) =
                    (bytes + b.telemetry.bytes, hits + b.telemetry.resident_planes, unique + b.telemetry.planes.unique);
                assert_eq!(copy.take(b.batch), want[k], "epoch {epoch} batch {k}: the same planes");
                n += 1;
            }
            assert_eq!(n, want.len());
            read.push(bytes);
            if epoch > 1 {
                assert_eq!((bytes, hits), (0, unique), "epoch {epoch} reads nothing: every plane is resident");
            }
        }
        assert!(read[0] > 0);
        // The first epoch read exactly the planes it touched, once each.
        let touched = residency.held_bytes();
        assert_eq!(read[0], touched, "prefetch {prefetch}, {reads} reads");
        assert!(touched <= residency.split_bytes());
        assert_eq!(resident.buffers().leased(), 0);
    }
}

#[test]
fn a_consumer_that_stops_early_costs_a_reread_never_a_missing_plane() {
    let source = memory();
    let cfg = LoaderConfig { prepare_on: PrepareOn::Device, ..config(3, 1, true) };
    let plain = Loader::new(Arc::clone(&source), space(&*source), schedule(), cfg);
    let resident = Loader::new(Arc::clone(&source), space(&*source), schedule(), cfg).resident(u64::MAX).unwrap();
    let mut copy = Copy::new(&*source);
    // Two batches taken and written; the loader has read further ahead, unmarked.
    let mut epoch = resident.epoch(1).unwrap();
    for _ in 0..2 {
        copy.take(epoch.next().unwrap().unwrap().batch);
    }
    drop(epoch);
    let want = raw_groups(&plain, 1);
    for (k, b) in resident.epoch(1).unwrap().enumerate() {
        assert_eq!(copy.take(b.unwrap().batch), want[k], "batch {k}");
    }
    // A new copy starts from nothing once the record is cleared.
    resident.residency().unwrap().clear();
    let mut fresh_copy = Copy::new(&*source);
    for (k, b) in resident.epoch(1).unwrap().enumerate() {
        assert_eq!(fresh_copy.take(b.unwrap().batch), want[k], "batch {k} after clear");
    }
}

#[test]
fn a_resident_split_is_refused_over_budget_or_prepared_on_the_host() {
    let source = memory();
    let need = (40 * (2 + 1) * 12 * 4) as u64; // times × channels × plane × float32
    let device = LoaderConfig { prepare_on: PrepareOn::Device, ..config(2, 1, true) };
    let loader = || Loader::new(Arc::clone(&source), space(&*source), schedule(), device);
    assert_eq!(loader().resident(need).unwrap().residency().unwrap().split_bytes(), need);
    let err = loader().resident(need - 1).unwrap_err().to_string();
    assert!(err.contains("40 times × 3 channels × 3×4") && err.contains("budget"), "{err}");
    let host = Loader::new(Arc::clone(&source), space(&*source), schedule(), config(2, 1, true));
    let err = host.resident(u64::MAX).unwrap_err().to_string();
    assert!(err.contains("prepared on the device"), "{err}");
}

#[test]
fn staging_buffers_are_allocated_in_an_epochs_first_batches_only() {
    let source = memory();
    for (prepare_on, prefetch, reads) in [(PrepareOn::Device, 2, 1), (PrepareOn::Host, 3, 2), (PrepareOn::Device, 4, 2)]
    {
        let loader = Loader::new(
            Arc::clone(&source),
            space(&*source),
            schedule(),
            LoaderConfig { prepare_on, ..config(prefetch, reads, true) },
        );
        let mut held = std::collections::VecDeque::new();
        let mut counts = Vec::new();
        for epoch in 1..=3 {
            for (k, b) in loader.epoch(epoch).unwrap().enumerate() {
                held.push_back(b.unwrap()); // a consumer holding its last two batches
                if held.len() > 2 {
                    held.pop_front();
                }
                if epoch == 1 && k == prefetch + 2 {
                    counts.push(loader.buffers().allocations());
                }
            }
            held.clear(); // the epoch is over: its batches are let go
            counts.push(loader.buffers().allocations());
        }
        assert!(counts.iter().all(|&c| c == counts[0]), "{prepare_on:?}: {counts:?}");
    }
}
