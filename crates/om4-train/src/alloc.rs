//! The allocator's settings for a training process: freed memory stays in the process.
//!
//! A training step allocates and frees the same large tensors every step (a 320-channel
//! activation of the tiny network at 2° is 20.7 MB). glibc's malloc serves such blocks with
//! `mmap` and unmaps them when they are freed, so the next step's block is fresh memory that
//! faults in page by page and is zeroed by the kernel: about 785,000 page faults over a
//! 5-step `om4-train step` at 2°, against about 235,000 with the settings below, and a step 5–7 %
//! faster (docs/benchmarks.md, "Freed memory kept"). Here, before any thread starts: no `mmap`
//! for allocations from the main heap, and up to 2 GiB of free memory kept at its top instead
//! of returned to the system (plus 256 MiB of headroom per heap growth), so the peak memory of
//! the run is unchanged and each step reuses the last one's pages.
//!
//! Only on Linux with glibc, and only when the user has not tuned malloc already (any of
//! `GLIBC_TUNABLES` or the `MALLOC_*_` variables set leaves it alone). This module holds the
//! crate's only `unsafe`: the `mallopt` calls.

/// Keep freed memory in the process (see the module documentation); a no-op elsewhere, and after
/// the first call (`om4-train train` reaches it through the command line and the job both).
pub(crate) fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(set);
    }
}

/// glibc's settings, unless the user tuned malloc.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set() {
    let tuned = std::env::vars_os().any(|(key, _)| {
        let key = key.to_string_lossy();
        key == "GLIBC_TUNABLES" || (key.starts_with("MALLOC_") && key.ends_with('_'))
    });
    if tuned {
        return;
    }
    for (param, value) in [(libc::M_MMAP_MAX, 0), (libc::M_TRIM_THRESHOLD, i32::MAX), (libc::M_TOP_PAD, 256 << 20)] {
        // SAFETY: `mallopt` takes two integers and changes only malloc's own parameters,
        // under malloc's lock; every value is in the range glibc documents for its
        // parameter. It returns 0 when it refuses a value, which leaves that setting as it
        // was (still a correct allocator), so the result needs no handling.
        unsafe {
            libc::mallopt(param, value);
        }
    }
}
