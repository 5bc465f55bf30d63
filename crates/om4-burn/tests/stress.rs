//! 1,000 random early drops: no loader thread and no leased buffer survives.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::tensor::Device;
use common::{fixture, source};
use om4_batch::{SampleSpace, Schedule, WindowSpec};
use om4_burn::{BatchSource, LoaderConfig, PrepareOn, loader};

/// Threads of this process whose name starts with `om4-` (loader, upload; read pools excluded).
fn loader_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|name| name.starts_with("om4-loader") || name.starts_with("om4-upload"))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn thousand_random_early_drops() {
    let f = fixture(true);
    let src = source(&f);
    let space = SampleSpace::single(WindowSpec::new(1, 2, 1).unwrap(), src.time_len()).unwrap();
    let loaders: Vec<om4_burn::Loader<_>> = [
        (2, true, PrepareOn::Device, 1),
        (2, false, PrepareOn::Host, 2),
        (1, true, PrepareOn::Host, 1),
        (0, false, PrepareOn::Device, 1),
        (3, true, PrepareOn::Host, 2),
    ]
    .into_iter()
    .map(|(p, d, on, r)| {
        let config = LoaderConfig {
            prefetch_batches: p,
            prefetch_to_device: d,
            prepare_on: on,
            reads_in_flight: Some(r),
            kind: None,
        };
        loader(Arc::clone(&src), space.clone(), Schedule::training(1, 5, None).unwrap(), config, Device::flex())
    })
    .collect();
    let before = loader_threads();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for i in 0..1000u64 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let loader = &loaders[(state % loaders.len() as u64) as usize];
        let take = (state >> 8) as usize % (loader.len() + 1);
        let mut it = loader.epoch(i + 1).unwrap();
        for _ in 0..take {
            it.next().expect("batch").expect("ok");
        }
        drop(it);
    }
    // A joined thread can still be listed in /proc/self/task for a moment after `join` returns
    // (seen once in six runs here), so give the count a bounded while to settle; a thread that
    // outlives its iterator stays listed and fails the test.
    let deadline = Instant::now() + Duration::from_secs(5);
    while loader_threads() != before && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(loader_threads(), before, "a loader thread outlived its iterator");
    for l in &loaders {
        assert_eq!(l.buffers().leased(), 0);
        assert_eq!(l.buffers().free(), l.buffers().allocations(), "every staging buffer back and kept");
    }
}
