//! Helpers om4's tests and examples share: float bits, GPU presence, a store
//! source's naive truth (feature `store`) and the data-parallel reference case (feature `ddp`).
//! A dev-dependency only (`publish = false`).

use std::fmt::Display;

#[cfg(feature = "ddp")]
pub mod ddp;
#[cfg(feature = "store")]
mod store;
#[cfg(feature = "store")]
pub use store::naive_store_truth;

/// Each value's bits: what "bit for bit" compares.
pub fn bits(values: &[f32]) -> Vec<u32> {
    values.iter().map(|x| x.to_bits()).collect()
}

/// True when `OM4_REQUIRE_GPU=1`: a missing CUDA driver or device is then a failure, not a skip.
pub fn gpu_required() -> bool {
    std::env::var_os("OM4_REQUIRE_GPU").is_some_and(|v| v == "1")
}

/// `made`, or `None` on a machine without a CUDA driver or device (said on stderr). The error
/// must be the driver's (`is_cuda`), and under `OM4_REQUIRE_GPU=1` it fails the test.
///
/// # Panics
/// When the error is not the driver's, or a GPU is required.
pub fn or_skip_without_gpu<T, E: Display>(made: Result<T, E>, is_cuda: impl FnOnce(&E) -> bool) -> Option<T> {
    match made {
        Ok(value) => Some(value),
        Err(e) => {
            assert!(is_cuda(&e), "unexpected error: {e}");
            assert!(!gpu_required(), "OM4_REQUIRE_GPU=1 but no CUDA device: {e}");
            eprintln!("no CUDA driver or device ({e}); GPU checks skipped");
            None
        }
    }
}
