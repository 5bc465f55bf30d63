//! CUDA pinned host memory (feature `pinned`): the crate's one module that talks to the CUDA
//! driver, through cudarc with the driver loaded at run time (it builds with no toolkit and fails
//! with [`Error::Cuda`], never a panic, where there is no driver).
//!
//! [`staging_check`] is what `scripts/gpu-check.sh` runs on a machine with a GPU: pinned
//! allocation, asynchronous copies on a stream, reuse of a pinned buffer only after its copy has
//! completed (cudarc records an event after each copy and waits on it before handing the host
//! memory back), and pinned vs pageable host-to-device bandwidth and copy/compute overlap.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaContext, CudaSlice, CudaStream, DriverError, PinnedHostSlice};

use crate::error::{Error, Result};

fn cuda_err(what: &'static str) -> impl FnOnce(DriverError) -> Error {
    move |e| Error::Cuda { what, message: e.to_string() }
}

/// The driver context of device `ordinal`.
///
/// # Errors
/// [`Error::Cuda`] when there is no driver or no such device.
pub fn context(ordinal: usize) -> Result<Arc<CudaContext>> {
    // SAFETY: tries to dlopen the CUDA driver library by its usual names, nothing else; the
    // library's initializers are the driver's own. Checking first turns a missing driver into an
    // error instead of cudarc's panic on first use.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(Error::Cuda { what: "load the CUDA driver", message: "libcuda not found".into() });
    }
    CudaContext::new(ordinal).map_err(cuda_err("open the CUDA device"))
}

/// Allocates page-locked host memory in one device's context.
#[derive(Debug, Clone)]
pub(crate) struct PinnedAllocator {
    ctx: Arc<CudaContext>,
}

impl PinnedAllocator {
    pub(crate) fn new(ordinal: usize) -> Result<Self> {
        Ok(Self { ctx: context(ordinal)? })
    }

    /// `len` zeroed, page-locked values.
    pub(crate) fn alloc(&self, len: usize) -> Result<PinnedMem> {
        let mut slice = alloc_pinned(&self.ctx, len.max(1))?;
        let ptr = slice.as_mut_ptr().map_err(cuda_err("wait for a pinned buffer"))?;
        // SAFETY: `ptr` addresses `slice.len()` values of page-locked memory that `slice` owns
        // and nothing else references yet.
        unsafe { std::ptr::write_bytes(ptr, 0, slice.len()) };
        Ok(PinnedMem { ptr, slice })
    }
}

/// Cached (not write-combined) pinned memory: decoders read back what they wrote (LZ4 matches),
/// which is very slow from write-combined memory, so cudarc's default `alloc_pinned` is not used.
/// Portable, so that every CUDA context treats it as pinned (cubecl and cudarc both use the
/// device's primary context today; this keeps it so if one of them stops).
fn alloc_pinned(ctx: &Arc<CudaContext>, len: usize) -> Result<PinnedHostSlice<f32>> {
    let flags = cudarc::driver::sys::CU_MEMHOSTALLOC_PORTABLE;
    // SAFETY: the memory is uninitialized on return; every caller writes all of it (zeroes or a
    // pattern) before reading it.
    unsafe { ctx.alloc_pinned_with_flags::<f32>(len, flags) }.map_err(cuda_err("allocate pinned host memory"))
}

/// Page-locked values owned by the pool. Only cubecl's copies read them after a hand-over, and
/// those hold the buffer (through `Bytes`) until their fence, so host access is never concurrent
/// with a copy.
#[derive(Debug)]
pub(crate) struct PinnedMem {
    ptr: *mut f32,
    slice: PinnedHostSlice<f32>,
}

// SAFETY: `PinnedMem` owns its allocation (through `slice`, which is `Send + Sync`); the raw
// pointer is only dereferenced through `&self`/`&mut self`, so Rust's borrow rules apply to it.
unsafe impl Send for PinnedMem {}
// SAFETY: as above; shared access is read-only.
unsafe impl Sync for PinnedMem {}

impl PinnedMem {
    pub(crate) fn len(&self) -> usize {
        self.slice.len()
    }

    pub(crate) fn as_slice(&self) -> &[f32] {
        // SAFETY: `ptr` is valid for `slice.len()` initialized values while `slice` lives (as long
        // as `self`), and the shared borrow of `self` excludes writers.
        unsafe { std::slice::from_raw_parts(self.ptr, self.slice.len()) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [f32] {
        // SAFETY: as above, with the unique borrow of `self` excluding every other access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.slice.len()) }
    }
}

/// What [`staging_check`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct StagingReport {
    /// Bytes per copy.
    pub bytes: usize,
    /// Host-to-device GB/s from pinned memory (best of the repeats).
    pub pinned_gb_s: f64,
    /// Host-to-device GB/s from pageable memory (best of the repeats).
    pub pageable_gb_s: f64,
    /// Seconds of the pinned copies alone, of the device work alone, and of both on two streams.
    pub copy_s: f64,
    /// See `copy_s`.
    pub compute_s: f64,
    /// See `copy_s`.
    pub together_s: f64,
    /// `(copy + compute − together) / min(copy, compute)`: 1 is full overlap, 0 none.
    pub overlap: f64,
}

fn upload(stream: &Arc<CudaStream>, src: &PinnedHostSlice<f32>, dst: &mut CudaSlice<f32>) -> Result<()> {
    stream.memcpy_htod(src, dst).map_err(cuda_err("copy host to device"))
}

/// Runs the staging checks on device `ordinal` with buffers of `bytes` bytes, timing `repeats` copies.
///
/// # Errors
/// [`Error::Cuda`] when a check fails (wrong data after reuse) or the driver reports an error.
pub fn staging_check(ordinal: usize, bytes: usize, repeats: usize) -> Result<StagingReport> {
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
        return Err(Error::Cuda { what: "verify a reused pinned buffer", message: "device data differs".into() });
    }

    let sync = |s: &Arc<CudaStream>| s.synchronize().map_err(cuda_err("synchronize a stream"));
    let best_gb_s = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
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
    let mut compute = || -> Result<()> {
        for _ in 0..n {
            work.memcpy_dtod(&a, &mut b).map_err(cuda_err("copy device to device"))?;
            work.memset_zeros(&mut a).map_err(cuda_err("memset"))?;
        }
        Ok(())
    };
    let mut copy = || -> Result<()> {
        for _ in 0..n {
            upload(&copies, &pinned, &mut dev)?;
        }
        Ok(())
    };
    let timed = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
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
