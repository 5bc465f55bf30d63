//! CUDA pinned host memory (feature `pinned`): the crate's one module that talks to the CUDA
//! driver, through cudarc with the driver loaded at run time (it builds with no toolkit and fails
//! with [`Error::Cuda`], never a panic, where there is no driver).

use std::sync::Arc;

use cudarc::driver::{CudaContext, DriverError, PinnedHostSlice};

use crate::error::{Error, Result};

fn cuda_err(what: &'static str) -> impl FnOnce(DriverError) -> Error {
    move |e| Error::Cuda { what, message: e.to_string() }
}

/// The driver context of device `ordinal`.
///
/// # Errors
/// [`Error::Cuda`] when there is no driver or no such device.
pub(crate) fn context(ordinal: usize) -> Result<Arc<CudaContext>> {
    // SAFETY: tries to dlopen the CUDA driver library by its usual names, nothing else; the
    // library's initializers are the driver's own. Checking first turns a missing driver into an
    // error instead of cudarc's panic on first use.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(Error::Cuda { what: "load the CUDA driver", message: "libcuda not found".into() });
    }
    CudaContext::new(ordinal).map_err(cuda_err("open the CUDA device"))
}

/// The device of the calling thread's current CUDA context (the one `torch.cuda.set_device` or a
/// DDP launcher selected), or `None` when the thread has no current context.
///
/// # Errors
/// [`Error::Cuda`] when there is no driver or it cannot be initialized.
pub(crate) fn current_device() -> Result<Option<usize>> {
    // SAFETY: as in `context`: loads the driver library by its usual names, nothing else.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(Error::Cuda { what: "load the CUDA driver", message: "libcuda not found".into() });
    }
    cudarc::driver::result::init().map_err(cuda_err("initialize the CUDA driver"))?;
    if cudarc::driver::result::ctx::get_current().map_err(cuda_err("read the current CUDA context"))?.is_none() {
        return Ok(None);
    }
    let mut device = 0;
    // SAFETY: the thread has a current context (checked above) and `device` is a valid place for
    // the driver to write one `CUdevice` (an `i32`).
    unsafe { cudarc::driver::sys::cuCtxGetDevice(&mut device) }
        .result()
        .map_err(cuda_err("read the current CUDA device"))?;
    Ok(Some(usize::try_from(device).unwrap_or(0)))
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
