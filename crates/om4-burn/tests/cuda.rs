//! Pinned staging through Burn (feature `pinned`): loader batches from pinned buffers equal
//! pageable ones bit for bit. Without a CUDA driver this checks that the pinned pool reports an
//! error; `OM4_REQUIRE_GPU=1` (as `scripts/gpu-check.sh` sets it) makes that a failure. The
//! pool's own checks (allocation, reuse, bandwidth, overlap) are om4-pipeline's `tests/pinned.rs`.
#![cfg(feature = "pinned")]

mod common;

use std::sync::Arc;

use burn::tensor::Device;
use common::{bits, fixture, source, tensor_values};
use om4_batch::{SampleSpace, Schedule, WindowSpec};
use om4_burn::{BatchSource, BufferPool, LoaderConfig, loader};
use om4_pipeline::Error;

/// The pinned pool, or `None` (after checking the error) on a machine without a driver.
fn pinned_pool() -> Option<BufferPool> {
    om4_testkit::or_skip_without_gpu(BufferPool::pinned(0), |e| matches!(e, Error::Cuda { .. }))
}

#[test]
fn loader_batches_from_pinned_buffers_equal_pageable_ones_bit_for_bit() {
    let Some(pinned) = pinned_pool() else { return };
    let f = fixture(true);
    let src = source(&f);
    let space = SampleSpace::single(WindowSpec::new(1, 2, 1).unwrap(), src.time_len()).unwrap();
    let schedule = Schedule::training(2, 3, None).unwrap();
    let epoch = |pool: BufferPool| -> Vec<Vec<u32>> {
        let loader = loader(Arc::clone(&src), space.clone(), schedule, LoaderConfig::default(), Device::flex())
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
