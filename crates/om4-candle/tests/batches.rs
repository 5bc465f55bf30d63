//! candle batches equal om4-batch's naive reference bit for bit, through every loader path, and
//! the pooled buffers are handed to candle without being left leased.

use std::sync::Arc;

use candle_core::{Device, Tensor};
use om4_batch::{Normalization, SampleSpace, Schedule, WindowSpec, reference_batch};
use om4_candle::{Error, loader, to_model_batch};
use om4_pipeline::{BatchSource, HostBatch, LoaderConfig, MemorySource, PrepareOn};
use om4_store::{DataConfig, SynthConfig, synthesize};

fn bits(t: &Tensor) -> Vec<u32> {
    om4_testkit::bits(&t.flatten_all().unwrap().to_vec1::<f32>().unwrap())
}

#[test]
fn candle_batches_equal_the_naive_reference_bit_for_bit() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig { ny: 6, nx: 10, times: 16, levels: 2, ..SynthConfig::default() };
    let paths = synthesize(dir.path(), &cfg, |_, _| {}).unwrap();
    for normalize_before_mask in [true, false] {
        let mut config = DataConfig { normalize_before_mask, ..DataConfig::at(paths.data.clone()) };
        config.read_threads = 2;
        let store = config.open().unwrap().train; // every time
        // The planes, once, in memory: the reference fetches from them plane by plane.
        let truth = MemorySource::load(&store).unwrap();
        let source = Arc::new(store);
        let norms: Vec<&Normalization> = truth.normalizations().iter().collect();
        for (history, steps) in [(0, 1), (1, 2)] {
            let space = SampleSpace::single(WindowSpec::new(history, steps, 1).unwrap(), source.time_len()).unwrap();
            for (prefetch_batches, prefetch_to_device) in [(0, false), (2, false), (2, true)] {
                let config = LoaderConfig { prefetch_batches, prefetch_to_device, ..LoaderConfig::default() };
                let schedule = Schedule::training(3, 7, None).unwrap();
                let loader = loader(Arc::clone(&source), space.clone(), schedule, config, Device::Cpu);
                let mut n = 0;
                for batch in loader.epoch(2).unwrap() {
                    let batch = batch.unwrap();
                    let samples = space.samples(&batch.samples).unwrap();
                    let grid = truth.grid();
                    let want = reference_batch(&samples, &truth.roles(), &norms, grid, |s, t, c, out: &mut [f32]| {
                        let all_c = norms[s].channels();
                        let mut all = vec![0.0; all_c * grid.plane()];
                        let group = om4_batch::ReadGroup { source: s, times: vec![t], channels: all_c };
                        truth.read_group(&group, &mut all).unwrap();
                        out.copy_from_slice(&all[c * grid.plane()..(c + 1) * grid.plane()]);
                        Ok::<(), om4_batch::Error>(())
                    })
                    .unwrap();
                    assert_eq!(batch.batch.steps.len(), steps);
                    let want_channels = want.input_channels;
                    for (got, want) in batch.batch.steps.iter().zip(&want.steps) {
                        let bits_of = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(&got.input), bits_of(&want.input));
                        assert_eq!(bits(&got.label), bits_of(&want.label));
                        assert_eq!(got.input.dims(), &[3, want_channels, 6, 10]);
                    }
                    n += 1;
                }
                assert_eq!(n, loader.len());
                assert_eq!(loader.buffers().leased(), 0);
                assert_eq!(loader.output_buffers().leased(), 0, "handed over, not left leased");
            }
        }
    }
}

#[test]
fn raw_batches_are_refused_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = SynthConfig { ny: 4, nx: 8, times: 8, levels: 1, ..SynthConfig::default() };
    let paths = synthesize(dir.path(), &cfg, |_, _| {}).unwrap();
    let mut config = DataConfig::at(paths.data);
    config.read_threads = 1;
    let source = Arc::new(config.open().unwrap().train);
    let space = SampleSpace::single(WindowSpec::new(0, 1, 1).unwrap(), source.time_len()).unwrap();
    let config = LoaderConfig { prepare_on: PrepareOn::Device, ..LoaderConfig::default() };
    let pipeline = om4_pipeline::Loader::new(source, space, Schedule::validation(2, 1, None).unwrap(), config);
    let raw = pipeline.epoch(1).unwrap().next().unwrap().unwrap().batch;
    assert!(matches!(raw, HostBatch::Raw { .. }));
    assert!(matches!(to_model_batch(raw, &Device::Cpu), Err(Error::Unprepared)));
}
