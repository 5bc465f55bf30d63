//! Pinned staging (feature `pinned`). Without a CUDA driver these tests check that every entry
//! point reports an error instead of panicking; with one (`OM4_REQUIRE_GPU=1`, as
//! `scripts/gpu-check.sh` sets it, makes a missing driver a failure) they run the staging checks.
#![cfg(feature = "pinned")]

mod common;

use std::sync::Arc;

use burn::tensor::Device;
use common::{bits, fixture, source, tensor_values};
use om4_batch::{SampleSpace, Schedule, WindowSpec};
use om4_burn::{BatchSource, BufferPool, Error, Loader, LoaderConfig, cuda};

fn gpu_required() -> bool {
    std::env::var_os("OM4_REQUIRE_GPU").is_some_and(|v| v == "1")
}

/// The pinned pool, or `None` (after checking the error) on a machine without a driver.
fn pinned_pool() -> Option<BufferPool> {
    match BufferPool::pinned(0) {
        Ok(pool) => Some(pool),
        Err(e) => {
            assert!(matches!(e, Error::Cuda { .. }), "unexpected error: {e}");
            assert!(!gpu_required(), "OM4_REQUIRE_GPU=1 but no CUDA device: {e}");
            eprintln!("no CUDA driver or device ({e}); pinned checks skipped");
            None
        }
    }
}

#[test]
fn missing_driver_is_an_error_not_a_panic() {
    if let Err(e) = cuda::staging_check(0, 1 << 20, 1) {
        assert!(matches!(e, Error::Cuda { .. }), "unexpected error: {e}");
        assert!(!gpu_required(), "staging check failed: {e}");
    }
}

#[test]
fn pinned_buffers_are_reused() {
    let Some(pool) = pinned_pool() else { return };
    let mut buf = pool.acquire(1000);
    assert!(buf.is_pinned());
    for (i, v) in buf.iter_mut().enumerate() {
        *v = if i % 7 == 0 { f32::NAN } else { i as f32 * -0.5 };
    }
    let written = bits(&buf[..900]);
    drop(buf);
    let again = pool.acquire(900);
    assert!(again.is_pinned());
    assert_eq!(pool.allocations(), 1, "the freed pinned buffer is reused");
    assert_eq!(bits(&again), written, "the same memory comes back");
    drop(again);
    assert_eq!(pool.leased(), 0);
}

#[test]
fn loader_batches_from_pinned_buffers_equal_pageable_ones_bit_for_bit() {
    let Some(pinned) = pinned_pool() else { return };
    let f = fixture(true);
    let src = source(&f);
    let space = SampleSpace::single(WindowSpec::new(1, 2, 1).unwrap(), src.time_len()).unwrap();
    let schedule = Schedule::training(2, 3, None).unwrap();
    let epoch = |pool: BufferPool| -> Vec<Vec<u32>> {
        let loader = Loader::new(Arc::clone(&src), space.clone(), schedule, LoaderConfig::default(), Device::flex())
            .with_buffers(pool.clone());
        let out = loader
            .epoch(1)
            .unwrap()
            .flat_map(|b| b.unwrap().batch.steps)
            .flat_map(|s| [bits(&tensor_values(s.input)), bits(&tensor_values(s.label))])
            .collect();
        assert_eq!(pool.leased(), 0, "every staging buffer is back in its pool");
        out
    };
    let from_pinned = epoch(pinned.clone());
    assert!(pinned.allocations() > 0);
    assert_eq!(from_pinned, epoch(BufferPool::new()));
}

#[test]
fn staging_check_reports_bandwidth_and_overlap() {
    if pinned_pool().is_none() {
        return;
    }
    let mib: usize = std::env::var("OM4_GPU_CHECK_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    let report = cuda::staging_check(0, mib << 20, 5).expect("staging check");
    println!(
        "pinned vs pageable host-to-device, {mib} MiB: {:.2} vs {:.2} GB/s; copies {:.1} ms, device work {:.1} ms, \
         both on two streams {:.1} ms -> overlap {:.2}",
        report.pinned_gb_s,
        report.pageable_gb_s,
        report.copy_s * 1e3,
        report.compute_s * 1e3,
        report.together_s * 1e3,
        report.overlap
    );
    assert!(report.pinned_gb_s > 0.0 && report.pageable_gb_s > 0.0);
}
