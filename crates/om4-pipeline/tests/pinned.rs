//! Pinned staging buffers (feature `pinned`) and the CUDA staging checks `scripts/gpu-check.sh`
//! runs on a machine with a GPU: pinned allocation, asynchronous copies on a stream, reuse of a
//! pinned buffer only after its copy has completed (cudarc records an event after each copy and
//! waits on it before handing the host memory back), pinned vs pageable host-to-device bandwidth
//! and copy/compute overlap. Without a CUDA driver these tests check that the pool reports an
//! error instead of panicking; `OM4_REQUIRE_GPU=1` makes a missing driver a failure.
#![cfg(feature = "pinned")]

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DriverError, PinnedHostSlice};
use om4_pipeline::{BufferPool, Error};

/// The pinned pool, or `None` (after checking the error) on a machine without a driver.
fn pinned_pool() -> Option<BufferPool> {
    om4_testkit::or_skip_without_gpu(BufferPool::pinned(0), |e| matches!(e, Error::Cuda { .. }))
}

fn cuda_err(what: &'static str) -> impl FnOnce(DriverError) -> String {
    move |e| format!("cannot {what}: {e}")
}

fn context(ordinal: usize) -> Result<Arc<CudaContext>, String> {
    // SAFETY: tries to dlopen the CUDA driver library by its usual names, nothing else.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("libcuda not found".into());
    }
    CudaContext::new(ordinal).map_err(cuda_err("open the CUDA device"))
}

fn alloc_pinned(ctx: &Arc<CudaContext>, len: usize) -> Result<PinnedHostSlice<f32>, String> {
    // SAFETY: the memory is uninitialized on return; the checks write all of it before reading.
    unsafe { ctx.alloc_pinned_with_flags::<f32>(len, cudarc::driver::sys::CU_MEMHOSTALLOC_PORTABLE) }
        .map_err(cuda_err("allocate pinned host memory"))
}

/// What [`staging_check`] measured.
#[derive(Debug, Clone, PartialEq)]
struct StagingReport {
    /// Bytes per copy.
    bytes: usize,
    /// Host-to-device GB/s from pinned memory (best of the repeats).
    pinned_gb_s: f64,
    /// Host-to-device GB/s from pageable memory (best of the repeats).
    pageable_gb_s: f64,
    /// Seconds of the pinned copies alone, of the device work alone, and of both on two streams.
    copy_s: f64,
    /// See `copy_s`.
    compute_s: f64,
    /// See `copy_s`.
    together_s: f64,
    /// `(copy + compute − together) / min(copy, compute)`: 1 is full overlap, 0 none.
    overlap: f64,
}

fn upload(stream: &Arc<CudaStream>, src: &PinnedHostSlice<f32>, dst: &mut CudaSlice<f32>) -> Result<(), String> {
    stream.memcpy_htod(src, dst).map_err(cuda_err("copy host to device"))
}

/// Runs the staging checks on device `ordinal` with buffers of `bytes` bytes, timing `repeats` copies.
///
/// # Errors
/// An error when a check fails (wrong data after reuse) or the driver reports an error.
fn staging_check(ordinal: usize, bytes: usize, repeats: usize) -> Result<StagingReport, String> {
    let ctx = context(ordinal)?;
    let len = (bytes / 4).max(1);
    let (copies, work) = (ctx.new_stream().map_err(cuda_err("create a stream"))?, ctx.default_stream());
    let mut pinned = alloc_pinned(&ctx, len)?;
    let mut dev = copies.alloc_zeros::<f32>(len).map_err(cuda_err("allocate device memory"))?;

    // Reuse after completion: write pattern A, copy, overwrite with B (as_mut_slice waits on the
    // copy's event first), copy again, read back: the device must hold B exactly.
    for (round, fill) in [(0usize, 1.5f32), (1, -2.25)] {
        let host = pinned.as_mut_slice().map_err(cuda_err("wait for a pinned buffer"))?;
        for (i, v) in host.iter_mut().enumerate() {
            *v = fill * (i % 977) as f32 + round as f32;
        }
        upload(&copies, &pinned, &mut dev)?;
    }
    let back = copies.clone_dtoh(&dev).map_err(cuda_err("copy device to host"))?;
    let expected = pinned.as_slice().map_err(cuda_err("wait for a pinned buffer"))?;
    if back.iter().zip(expected).any(|(a, b)| a.to_bits() != b.to_bits()) {
        return Err("a reused pinned buffer reached the device with wrong data".into());
    }

    let sync = |s: &Arc<CudaStream>| s.synchronize().map_err(cuda_err("synchronize a stream"));
    let best_gb_s = |f: &mut dyn FnMut() -> Result<(), String>| -> Result<f64, String> {
        let mut best = f64::INFINITY;
        for _ in 0..repeats.max(1) {
            let t0 = Instant::now();
            f()?;
            best = best.min(t0.elapsed().as_secs_f64());
        }
        Ok(bytes as f64 / best / 1e9)
    };
    let pinned_gb_s = best_gb_s(&mut || {
        upload(&copies, &pinned, &mut dev)?;
        sync(&copies)
    })?;
    let pageable = vec![0.5f32; len];
    let pageable_gb_s = best_gb_s(&mut || {
        copies.memcpy_htod(&pageable, &mut dev).map_err(cuda_err("copy host to device"))?;
        sync(&copies)
    })?;

    // Copy/compute overlap: device-to-device copies and memsets on the default stream stand in
    // for model compute (they occupy the device, not the host link).
    let mut a = work.alloc_zeros::<f32>(len).map_err(cuda_err("allocate device memory"))?;
    let mut b = work.alloc_zeros::<f32>(len).map_err(cuda_err("allocate device memory"))?;
    let n = repeats.max(1) * 4;
    let mut compute = || -> Result<(), String> {
        for _ in 0..n {
            work.memcpy_dtod(&a, &mut b).map_err(cuda_err("copy device to device"))?;
            work.memset_zeros(&mut a).map_err(cuda_err("memset"))?;
        }
        Ok(())
    };
    let mut copy = || -> Result<(), String> {
        for _ in 0..n {
            upload(&copies, &pinned, &mut dev)?;
        }
        Ok(())
    };
    let timed = |f: &mut dyn FnMut() -> Result<(), String>| -> Result<f64, String> {
        let t0 = Instant::now();
        f()?;
        sync(&copies)?;
        sync(&work)?;
        Ok(t0.elapsed().as_secs_f64())
    };
    let copy_s = timed(&mut copy)?;
    let compute_s = timed(&mut compute)?;
    let together_s = timed(&mut || {
        compute()?;
        copy()
    })?;
    let overlap = (copy_s + compute_s - together_s) / copy_s.min(compute_s);
    Ok(StagingReport { bytes, pinned_gb_s, pageable_gb_s, copy_s, compute_s, together_s, overlap })
}

#[test]
fn missing_driver_is_an_error_not_a_panic() {
    if pinned_pool().is_none() {
        assert!(staging_check(0, 1 << 20, 1).is_err());
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
    let written: Vec<u32> = buf[..900].iter().map(|v| v.to_bits()).collect();
    drop(buf);
    let again = pool.acquire(900);
    assert!(again.is_pinned());
    assert_eq!(pool.allocations(), 1, "the freed pinned buffer is reused");
    assert_eq!(again.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), written, "the same memory comes back");
    drop(again);
    assert_eq!(pool.leased(), 0);
}

#[test]
fn staging_check_reports_bandwidth_and_overlap() {
    if pinned_pool().is_none() {
        return;
    }
    let mib: usize = std::env::var("OM4_GPU_CHECK_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(256);
    let report = staging_check(0, mib << 20, 5).expect("staging check");
    println!(
        "pinned vs pageable host-to-device, {mib} MiB ({} bytes): {:.2} vs {:.2} GB/s; copies {:.1} ms, device work \
         {:.1} ms, both on two streams {:.1} ms -> overlap {:.2}",
        report.bytes,
        report.pinned_gb_s,
        report.pageable_gb_s,
        report.copy_s * 1e3,
        report.compute_s * 1e3,
        report.together_s * 1e3,
        report.overlap
    );
    assert!(report.pinned_gb_s > 0.0 && report.pageable_gb_s > 0.0);
}
