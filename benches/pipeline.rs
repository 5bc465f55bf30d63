//! End-to-end loader: batches/s and exposed data wait with prefetch 0 against prefetch 2, for a
//! consumer whose step time is about the load time (2° grid, 77 + 3 channels, hist 1, steps 4,
//! batch 1, CPU backend; 24 batches per epoch), preparing on the device (tensor ops) and on the
//! host. The wait percentiles are printed after each configuration; the first batch of each epoch
//! waits for the pipeline to fill.

use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::tensor::Device;
use criterion::{Criterion, criterion_group, criterion_main};
use om4_batch::{SampleSpace, Schedule, WindowSpec};
use om4_burn::{BatchSource, EpochSummary, LoaderConfig, PrepareOn, loader};
use om4_store::{Codec, DataConfig, SynthConfig, synthesize};

fn pipeline(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = SynthConfig { times: 33, codec: Codec::BloscLz4, ..SynthConfig::default() };
    let paths = synthesize(dir.path(), &cfg, |_, _| {}).expect("synthesize");
    let mut data = DataConfig::at(paths.data);
    data.read_threads = 2;
    let source = Arc::new(data.open().expect("source").train);
    let space = SampleSpace::single(WindowSpec::new(1, 4, 1).expect("spec"), source.time_len()).expect("space");
    let schedule = Schedule::training(1, 15, None).expect("schedule");
    let loader = |prefetch: usize, prepare_on: PrepareOn| {
        let lc = LoaderConfig { prefetch_batches: prefetch, prepare_on, ..LoaderConfig::default() };
        loader(Arc::clone(&source), space.clone(), schedule, lc, Device::flex())
    };
    let mut group = c.benchmark_group("pipeline");
    group.sample_size(10);
    // Device: preparation with tensor ops (what a GPU run does, here on the CPU backend);
    // host: om4-batch's parallel host path (the CPU backend's default).
    for (name, prepare_on) in [("device", PrepareOn::Device), ("host", PrepareOn::Host)] {
        // Load time per batch, measured with no consumer work and no prefetch.
        let probe = loader(0, prepare_on);
        let t0 = Instant::now();
        let mut n = 0u32;
        for batch in probe.epoch(1).expect("epoch").take(8) {
            batch.expect("batch");
            n += 1;
        }
        let load = t0.elapsed() / n;
        eprintln!(
            "prepare on {name}: load time per batch (prefetch 0, no consumer work): {:.1} ms",
            load.as_secs_f64() * 1e3
        );
        for prefetch in [0usize, 2] {
            let l = loader(prefetch, prepare_on);
            let mut telemetry = Vec::new();
            group.bench_function(format!("{name}_prefetch_{prefetch}"), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for i in 0..iters {
                        let t = Instant::now();
                        for batch in l.epoch(i + 1).expect("epoch") {
                            let batch = batch.expect("batch");
                            telemetry.push(batch.telemetry);
                            std::thread::sleep(load); // the "model step"
                        }
                        total += t.elapsed();
                    }
                    total
                });
            });
            let s = EpochSummary::of(&telemetry);
            eprintln!(
                "prepare on {name}, prefetch {prefetch}: {} batches, data wait p50 {:.2} ms, p95 {:.2} ms ({:.1}% of a {:.1} ms step)",
                s.batches,
                s.wait.p50.as_secs_f64() * 1e3,
                s.wait.p95.as_secs_f64() * 1e3,
                100.0 * s.wait.p95.as_secs_f64() / load.as_secs_f64(),
                load.as_secs_f64() * 1e3
            );
        }
    }
    group.finish();
}

criterion_group!(benches, pipeline);
criterion_main!(benches);
