//! The loader's device batches equal om4-batch's naive host reference bit for bit, come out in
//! schedule order, and end cleanly on exhaustion, early drop, read errors and producer panics.

mod common;

use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::Dataset;
use burn::tensor::Device;
use common::{Fixture, bits, faulty, fixture, source, tensor_values};
use om4_batch::{Normalization, SampleSpace, Schedule, WindowSpec, reference_batch};
use om4_burn::Error as BurnError;
use om4_burn::{BatchSource, LoaderConfig, Om4Batcher, Om4Dataset, PrepareOn, loader};
use om4_pipeline::Error;
use om4_pipeline::conformance::Intercept;
use om4_store::Om4Source;
use om4_store::{Om4Store, ReadPool, Selection};

/// The naive host path for a batch, reading every plane on its own from the store.
fn reference(src: &Om4Source, space: &SampleSpace, indices: &[usize]) -> om4_batch::GatheredBatch {
    let store: &Om4Store = src.store();
    let cfg_names: Vec<Vec<String>> = vec![
        (0..9).map(|c| om4_store::channel_names(2)[c].clone()).collect(),
        (9..12).map(|c| om4_store::channel_names(2)[c].clone()).collect(),
    ];
    let sets: Vec<_> = cfg_names.iter().map(|n| store.channels(n).unwrap()).collect();
    let pool = ReadPool::new(1).unwrap();
    let sel: Selection = src.selection().clone();
    let preps: Vec<&Normalization> = src.normalizations().iter().collect();
    let samples = space.samples(indices).unwrap();
    reference_batch(
        &samples,
        &src.roles(),
        &preps,
        src.grid(),
        |s, t, c, out: &mut [f32]| -> Result<(), om4_batch::Error> {
            let one = store.channels(&[&sets[s].channels()[c].name]).unwrap();
            store.reader(&pool, &one, &sel).read(&[t], out).unwrap();
            Ok(())
        },
    )
    .unwrap()
}

#[test]
fn device_batches_equal_host_reference_bit_for_bit() {
    for normalize_first in [true, false] {
        let f = fixture(normalize_first);
        let src = source(&f);
        for history in [0, 1] {
            for steps in [1, 2] {
                for stride in [1, 2] {
                    let spec = WindowSpec::new(history, steps, stride).unwrap();
                    let space = SampleSpace::single(spec, src.time_len()).unwrap();
                    let schedule = Schedule::training(3, 7, None).unwrap();
                    for (prefetch, to_device, prepare_on, reads_in_flight) in [
                        (2, true, PrepareOn::Device, 1),
                        (2, true, PrepareOn::Host, 1),
                        (2, false, PrepareOn::Device, 1),
                        (0, false, PrepareOn::Auto, 1),
                        (2, true, PrepareOn::Host, 2),
                        (2, true, PrepareOn::Device, 2),
                    ] {
                        let config = LoaderConfig {
                            prefetch_batches: prefetch,
                            prefetch_to_device: to_device,
                            prepare_on,
                            reads_in_flight: Some(reads_in_flight),
                            kind: None,
                        };
                        let loader = loader(Arc::clone(&src), space.clone(), schedule, config, Device::flex());
                        assert_eq!(loader.prepares_on_host(), prepare_on != PrepareOn::Device, "auto: host on flex");
                        let expected_order = schedule.epoch(&space.groups(), 1);
                        let mut n = 0;
                        for (k, batch) in loader.epoch(1).unwrap().enumerate() {
                            let batch = batch.unwrap();
                            assert_eq!(batch.samples, expected_order[k], "schedule order");
                            let host = reference(&src, &space, &batch.samples);
                            for (dev, hst) in batch.batch.steps.iter().zip(&host.steps) {
                                assert_eq!(
                                    bits(&tensor_values(dev.input.clone())),
                                    bits(&hst.input),
                                    "input h{history} k{steps} s{stride} norm-first {normalize_first}"
                                );
                                assert_eq!(bits(&tensor_values(dev.label.clone())), bits(&hst.label), "label");
                            }
                            assert!(batch.telemetry.planes.unique <= batch.telemetry.planes.requested);
                            n += 1;
                        }
                        assert_eq!(n, loader.len());
                        assert_eq!(loader.buffers().leased(), 0);
                        // Every staging buffer allocated is back and kept: none was let go only
                        // to be allocated again.
                        assert_eq!(loader.buffers().free(), loader.buffers().allocations());
                        // The host path's model-batch buffers come back and are reused: the
                        // sets of the six batches reserved before the epoch serve every batch of
                        // this epoch and the next.
                        let outputs = loader.output_buffers();
                        assert_eq!(outputs.leased(), 0, "every model-batch buffer came back");
                        if loader.prepares_on_host() {
                            assert_eq!(outputs.allocations(), 2 * steps * 6, "{n} batches of {steps} steps");
                            assert_eq!(loader.epoch(2).unwrap().filter(Result::is_ok).count(), n);
                            assert_eq!(outputs.allocations(), 2 * steps * 6, "none allocated in a second epoch");
                        } else {
                            assert_eq!(outputs.allocations(), 0, "the device path uses no host outputs");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn burn_dataset_and_batcher_give_the_same_batches() {
    let f = fixture(true);
    let src = source(&f);
    let spec = WindowSpec::new(1, 2, 1).unwrap();
    let space = SampleSpace::single(spec, src.time_len()).unwrap();
    let dataset = Om4Dataset::new(Arc::clone(&src), space.clone());
    assert_eq!(dataset.len(), space.len());
    let batcher = Om4Batcher::new(&*src);
    let items = dataset.get_many(vec![4, 0, 5]).unwrap();
    let batch = batcher.batch(items, &Device::flex());
    let host = reference(&src, &space, &[4, 0, 5]);
    for (dev, hst) in batch.steps.iter().zip(&host.steps) {
        assert_eq!(bits(&tensor_values(dev.input.clone())), bits(&hst.input));
        assert_eq!(bits(&tensor_values(dev.label.clone())), bits(&hst.label));
    }
    assert!(dataset.get(0).is_ok());
}

/// A loader whose source fails on the second read of batch `at_batch` (`None`: never). The
/// fixture is returned too, to keep the store on disk while the loader lives.
fn faulty_loader(
    at_batch: Option<usize>,
    panic: bool,
    prefetch: usize,
    to_device: bool,
) -> (om4_burn::Loader<Intercept<Om4Source>>, Fixture) {
    let f = fixture(true);
    let src = source(&f);
    let spec = WindowSpec::new(1, 1, 1).unwrap();
    let space = SampleSpace::single(spec, src.time_len()).unwrap();
    let groups = src.channels().len(); // one read per source (prognostic, boundary) per batch
    let at = at_batch.map_or(usize::MAX, |k| k * groups + 1);
    let faulty = Arc::new(faulty(src, at, panic));
    let config = LoaderConfig { prefetch_batches: prefetch, prefetch_to_device: to_device, ..LoaderConfig::default() };
    (loader(faulty, space, Schedule::validation(2, 3, None).unwrap(), config, Device::flex()), f)
}

#[test]
fn read_error_at_batch_k_yields_earlier_batches_then_error_then_end() {
    for (prefetch, to_device) in [(2, true), (2, false), (0, false)] {
        for panic in [false, true] {
            let k = 3;
            let (loader, _fixture) = faulty_loader(Some(k), panic, prefetch, to_device);
            let mut it = loader.epoch(1).unwrap();
            for _ in 0..k {
                assert!(it.next().unwrap().is_ok());
            }
            match it.next() {
                Some(Err(BurnError::Pipeline(Error::ProducerPanic { batch, message }))) => {
                    assert!(panic);
                    assert_eq!(batch, k);
                    assert!(message.contains("injected panic"));
                }
                Some(Err(BurnError::Pipeline(Error::Config { reason, .. }))) => {
                    assert!(!panic);
                    assert!(reason.contains("injected failure"));
                }
                other => panic!("expected an error at batch {k}, got {other:?}"),
            }
            assert!(it.next().is_none());
            assert!(it.next().is_none());
            drop(it);
            assert_eq!(loader.buffers().leased(), 0, "the failed batch's buffers went back");
        }
    }
}

#[test]
fn early_drop_and_exhaustion_release_everything() {
    let (loader, _fixture) = faulty_loader(None, false, 2, true);
    let total = loader.len();
    assert!(total >= 5);
    // exhaustion
    assert_eq!(loader.epoch(1).unwrap().filter(Result::is_ok).count(), total);
    // drop mid-epoch, with batches queued and a read in flight
    let mut it = loader.epoch(2).unwrap();
    let first = it.next().unwrap().unwrap();
    drop(it);
    drop(first);
    assert_eq!(loader.buffers().leased(), 0);
    assert_eq!(loader.output_buffers().leased(), 0);
    // drop before the first batch is taken
    drop(loader.epoch(3).unwrap());
    assert_eq!(loader.buffers().leased(), 0);
    assert_eq!(loader.output_buffers().leased(), 0);
    assert_eq!(loader.buffers().free(), loader.buffers().allocations());
}

#[test]
fn epochs_follow_the_schedule_and_differ() {
    let f = fixture(true);
    let src = source(&f);
    let space = SampleSpace::single(WindowSpec::new(1, 1, 1).unwrap(), src.time_len()).unwrap();
    let schedule = Schedule::training(2, 11, None).unwrap();
    let loader = loader(src, space.clone(), schedule, LoaderConfig::default(), Device::flex());
    let e1: Vec<Vec<usize>> = loader.epoch(1).unwrap().map(|b| b.unwrap().samples).collect();
    let e2: Vec<Vec<usize>> = loader.epoch(2).unwrap().map(|b| b.unwrap().samples).collect();
    assert_eq!(e1, schedule.epoch(&space.groups(), 1));
    assert_eq!(e2, schedule.epoch(&space.groups(), 2));
    assert_ne!(e1, e2);
}

/// Hands the loader statistics for the wrong channels, so preparing a batch fails.
#[derive(Debug)]
struct WrongStats {
    inner: Arc<Om4Source>,
    preps: Vec<Normalization>,
}

impl BatchSource for WrongStats {
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
    fn normalizations(&self) -> &[Normalization] {
        &self.preps
    }
    fn read_group(&self, group: &om4_batch::ReadGroup, out: &mut [f32]) -> om4_pipeline::Result<()> {
        self.inner.read_group(group, out)
    }
}

#[test]
fn mismatched_statistics_are_an_error_not_a_panic_or_a_short_epoch() {
    let f = fixture(true);
    let src = source(&f);
    let prog = src.normalizations()[0].clone();
    let wrong = Arc::new(WrongStats { inner: Arc::clone(&src), preps: vec![prog.clone(), prog] });
    let space = SampleSpace::single(WindowSpec::new(1, 1, 1).unwrap(), src.time_len()).unwrap();
    // Upload thread, consumer thread after host prefetch, and no prefetch at all; both preparations.
    for (prefetch_batches, prefetch_to_device, prepare_on) in [
        (2, true, PrepareOn::Device),
        (2, true, PrepareOn::Host),
        (2, false, PrepareOn::Device),
        (0, false, PrepareOn::Host),
    ] {
        let config = LoaderConfig { prefetch_batches, prefetch_to_device, prepare_on, ..LoaderConfig::default() };
        let schedule = Schedule::validation(2, 1, None).unwrap();
        let loader = loader(Arc::clone(&wrong), space.clone(), schedule, config, Device::flex());
        let mut it = loader.epoch(1).unwrap();
        match it.next() {
            // The boundary group (3 channels) meets the 9-channel prognostic statistics.
            Some(Err(BurnError::Plan(om4_batch::Error::BufferLength { what, expected: 3, found: 9 }))) => {
                assert!(what.contains("channels of the preparation"), "{what}");
            }
            other => panic!("expected a preparation mismatch at batch 0, got {other:?}"),
        }
        assert!(it.next().is_none());
        drop(it);
        assert_eq!(loader.buffers().leased(), 0);
    }
}

#[test]
fn resuming_mid_epoch_yields_the_rest_exactly() {
    let f = fixture(false);
    let src = source(&f);
    let space = SampleSpace::single(WindowSpec::new(1, 2, 1).unwrap(), src.time_len()).unwrap();
    let schedule = Schedule::training(2, 5, None).unwrap();
    for prefetch in [0, 2] {
        let config = LoaderConfig { prefetch_batches: prefetch, ..LoaderConfig::default() };
        let loader = loader(Arc::clone(&src), space.clone(), schedule, config, Device::flex());
        let n = loader.len();
        assert!(n >= 3);
        let whole: Vec<_> = loader.epoch(4).unwrap().map(Result::unwrap).collect();
        for first in [1, n - 1, n] {
            let rest: Vec<_> = loader.epoch_from(4, first).unwrap().map(Result::unwrap).collect();
            assert_eq!(rest.len(), n - first);
            for (a, b) in whole[first..].iter().zip(&rest) {
                assert_eq!(a.samples, b.samples);
                for (sa, sb) in a.batch.steps.iter().zip(&b.batch.steps) {
                    assert_eq!(bits(&tensor_values(sa.input.clone())), bits(&tensor_values(sb.input.clone())));
                    assert_eq!(bits(&tensor_values(sa.label.clone())), bits(&tensor_values(sb.label.clone())));
                }
            }
        }
        match loader.epoch_from(4, n + 1) {
            Err(Error::Config { field, .. }) => assert_eq!(field, "first_batch"),
            other => panic!("expected a config error, got {other:?}"),
        }
        let greedy = LoaderConfig { prefetch_batches: usize::MAX, ..config };
        let greedy = om4_burn::loader(Arc::clone(&src), space.clone(), schedule, greedy, Device::flex());
        assert!(matches!(greedy.epoch(1), Err(Error::Config { field: "prefetch_batches", .. })));
    }
    // Errors name the batch's number in the whole epoch.
    let (loader, _fixture) = faulty_loader(Some(1), true, 2, true);
    let mut it = loader.epoch_from(1, 2).unwrap();
    assert!(it.next().unwrap().is_ok());
    assert!(matches!(it.next(), Some(Err(BurnError::Pipeline(Error::ProducerPanic { batch: 3, .. })))));
}

/// A split resident on the device gives the batches of the plain device path bit for bit, in
/// every epoch, while the loader reads each plane once: from the second epoch on nothing.
#[test]
fn a_resident_split_equals_the_device_path_and_reads_each_plane_once() {
    for normalize_first in [true, false] {
        let f = fixture(normalize_first);
        let src = source(&f);
        let space = SampleSpace::single(WindowSpec::new(1, 2, 1).unwrap(), src.time_len()).unwrap();
        let schedule = Schedule::training(3, 7, None).unwrap();
        for (prefetch_batches, prefetch_to_device) in [(2, true), (2, false), (0, false)] {
            let config = LoaderConfig {
                prefetch_batches,
                prefetch_to_device,
                prepare_on: PrepareOn::Device,
                ..LoaderConfig::default()
            };
            let plain = loader(Arc::clone(&src), space.clone(), schedule, config, Device::flex());
            let resident =
                loader(Arc::clone(&src), space.clone(), schedule, config, Device::flex()).resident(u64::MAX).unwrap();
            for epoch in 1..=2 {
                let want: Vec<_> = plain.epoch(epoch).unwrap().map(Result::unwrap).collect();
                let mut read = 0;
                let mut n = 0;
                for (k, got) in resident.epoch(epoch).unwrap().enumerate() {
                    let got = got.unwrap();
                    read += got.telemetry.bytes;
                    if epoch > 1 {
                        assert_eq!(got.telemetry.resident_planes, got.telemetry.planes.unique);
                    }
                    for (g, w) in got.batch.steps.iter().zip(&want[k].batch.steps) {
                        let same = |a: &burn::tensor::Tensor<4>, b: &burn::tensor::Tensor<4>| {
                            bits(&tensor_values(a.clone())) == bits(&tensor_values(b.clone()))
                        };
                        assert!(same(&g.input, &w.input) && same(&g.label, &w.label), "epoch {epoch} batch {k}");
                    }
                    n += 1;
                }
                assert_eq!(n, want.len());
                let held = resident.residency().unwrap().held_bytes();
                if epoch == 1 {
                    assert_eq!(read, held, "the first epoch reads the planes it uses, once each");
                } else {
                    assert_eq!(read, 0, "epoch {epoch} reads nothing");
                }
            }
        }
    }
}
