//! The crate's only `unsafe` code: an MPI-3 RMA window of `f32`s over `mpi::ffi`, because rsmpi
//! has no safe one-sided API.
//!
//! What this module promises, and how:
//! - [`Window::allocate`] (collective) allocates `len` floats per rank with `MPI_Win_allocate`,
//!   zeroes them (MPI hands out uninitialized memory, and Rust may not read it) and learns every
//!   rank's length, so that every get is bounds-checked against its target before MPI sees it.
//!   Window errors are returned (`MPI_ERRORS_RETURN`), not fatal.
//! - [`Window::fill`] gives `&mut` access to this rank's memory inside a `lock_all` epoch and makes
//!   the stores visible to the other ranks (`MPI_Win_sync`) before it returns.
//! - [`Window::get_many`] takes all of one read's requests at once: `lock_all`, one `MPI_Get` per
//!   request (split below `i32::MAX` elements), `unlock_all`, which completes every get. The
//!   destination buffers stay mutably borrowed for the whole call, so nothing reads them before
//!   MPI has written them, and a leaked guard cannot outlive them (there is no guard).
//!   Calls are serialized by a mutex, so the window is `Sync` under `MPI_THREAD_SERIALIZED`.
//! - No rank ever writes into another rank's window (there is no `MPI_Put` here), so a rank's own
//!   memory changes only through [`Window::fill`], which needs `&mut self`; [`Window::local`]
//!   hands out shared slices only.
//! - [`Drop`] frees the window with `MPI_Win_free` (collective: every rank drops its window at the
//!   same point of the program), unless MPI is already finalized, in which case the memory leaks
//!   rather than calling into a finalized library.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Mutex;

use mpi::environment::{Threading, is_finalized, threading_support};
use mpi::ffi;
use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use crate::error::{Error, Result};

/// One request of [`Window::get_many`]: fill `out` from `target`'s window, starting at float
/// `offset` of that window.
#[derive(Debug)]
pub(crate) struct Get<'a> {
    pub(crate) out: &'a mut [f32],
    pub(crate) target: usize,
    pub(crate) offset: usize,
}

/// An RMA window of `f32`s, `lens[r]` of them on rank `r`.
#[derive(Debug)]
pub(crate) struct Window {
    win: ffi::MPI_Win,
    base: *mut f32,
    len: usize,
    lens: Vec<usize>,
    epoch: Mutex<()>,
}

// SAFETY: the handle and the base pointer are plain values that any thread may use; every MPI call
// through `&self` (`get_many`) holds `epoch`, so calls on one window never run concurrently
// (`allocate` refuses a library below `MPI_THREAD_SERIALIZED`), and `local` only reads memory that
// changes through `&mut self` alone (no rank puts into another's window).
unsafe impl Send for Window {}
// SAFETY: as for `Send`.
unsafe impl Sync for Window {}

fn check(call: &'static str, code: c_int) -> Result<()> {
    if code == ffi::MPI_SUCCESS as c_int {
        return Ok(());
    }
    let mut text = vec![0 as c_char; ffi::MPI_MAX_ERROR_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: `text` holds MPI_MAX_ERROR_STRING + 1 bytes, as MPI_Error_string requires, and
    // `len` is a valid out-parameter; MPI writes at most that many bytes.
    let ok = unsafe { ffi::MPI_Error_string(code, text.as_mut_ptr(), &mut len) };
    let message = if ok == ffi::MPI_SUCCESS as c_int {
        let bytes: Vec<u8> = text[..len.clamp(0, text.len() as c_int) as usize].iter().map(|&c| c as u8).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    } else {
        String::from("(no message)")
    };
    Err(Error::Mpi { call, code, message })
}

impl Window {
    /// Allocates `len` zeroed floats on this rank (collective over `comm`).
    pub(crate) fn allocate(comm: &SimpleCommunicator, len: usize) -> Result<Self> {
        let provided = threading_support();
        if provided < Threading::Serialized {
            return Err(Error::Threading { provided: format!("{provided:?}") });
        }
        let bytes = len
            .checked_mul(size_of::<f32>())
            .and_then(|b| ffi::MPI_Aint::try_from(b).ok())
            .ok_or_else(|| Error::Config { reason: format!("a window of {len} floats overflows MPI_Aint") })?;
        let mut lens = vec![0u64; comm.size() as usize];
        comm.all_gather_into(&(len as u64), &mut lens[..]);
        let lens = lens.into_iter().map(|l| l as usize).collect();
        let mut base: *mut f32 = std::ptr::null_mut();
        // SAFETY: null handle of the right type, overwritten by MPI_Win_allocate on success.
        let mut win: ffi::MPI_Win = unsafe { ffi::RSMPI_WIN_NULL };
        // SAFETY: `comm` is a live communicator (borrowed for the call); `base` is where MPI stores
        // the address of the new memory (baseptr is a `void*` that points to a pointer), `win`
        // where it stores the handle; RSMPI_INFO_NULL is an extern static MPI initialized.
        let code = unsafe {
            ffi::MPI_Win_allocate(
                bytes,
                size_of::<f32>() as c_int,
                ffi::RSMPI_INFO_NULL,
                comm.as_raw(),
                (&mut base as *mut *mut f32).cast::<c_void>(),
                &mut win,
            )
        };
        check("MPI_Win_allocate", code)?;
        let window = Self { win, base, len, lens, epoch: Mutex::new(()) };
        if len > 0 {
            // SAFETY: MPI_Win_allocate succeeded, so `base` points to `bytes` writable bytes owned
            // by the window, aligned for the 4-byte displacement unit; nobody reads them yet.
            unsafe { std::ptr::write_bytes(window.base, 0, len) };
        }
        // SAFETY: `win` is the live window just created; RSMPI_ERRORS_RETURN is an extern static.
        let code = unsafe { ffi::MPI_Win_set_errhandler(window.win, ffi::RSMPI_ERRORS_RETURN) };
        check("MPI_Win_set_errhandler", code)?;
        Ok(window)
    }

    /// This rank's floats.
    pub(crate) fn local(&self) -> &[f32] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `base` points to `len` floats owned by the window for its whole life, zeroed at
        // allocation; they change only through `fill(&mut self)`, never remotely (no puts).
        unsafe { std::slice::from_raw_parts(self.base, self.len) }
    }

    /// Runs `write` on this rank's floats inside a passive-target epoch, then publishes the stores
    /// to the other ranks (`MPI_Win_sync`). The caller still synchronizes with the ranks (a
    /// barrier or collective) before they read.
    pub(crate) fn fill<R>(&mut self, write: impl FnOnce(&mut [f32]) -> R) -> Result<R> {
        // SAFETY: live window; lock_all opens a shared epoch on every rank's window.
        check("MPI_Win_lock_all", unsafe { ffi::MPI_Win_lock_all(0, self.win) })?;
        let out = if self.len == 0 {
            write(&mut [])
        } else {
            // SAFETY: as in `local`, and `&mut self` excludes every other borrow of the memory in
            // this process.
            write(unsafe { std::slice::from_raw_parts_mut(self.base, self.len) })
        };
        // SAFETY: live window inside the epoch opened above.
        let synced = check("MPI_Win_sync", unsafe { ffi::MPI_Win_sync(self.win) });
        // SAFETY: closes the epoch opened above.
        let unlocked = check("MPI_Win_unlock_all", unsafe { ffi::MPI_Win_unlock_all(self.win) });
        synced.and(unlocked).map(|()| out)
    }

    /// Fills every request from its target's window: one `lock_all` epoch, one `MPI_Get` per
    /// request (or per `i32::MAX` floats), then `unlock_all`, which completes them all.
    pub(crate) fn get_many(&self, requests: &mut [Get<'_>]) -> Result<()> {
        for r in requests.iter() {
            let target_len = self.lens.get(r.target).copied();
            if target_len.is_none_or(|l| r.offset.checked_add(r.out.len()).is_none_or(|end| end > l)) {
                return Err(Error::Config {
                    reason: format!(
                        "get of {} floats at {} from rank {} is outside its window of {:?} floats",
                        r.out.len(),
                        r.offset,
                        r.target,
                        target_len
                    ),
                });
            }
        }
        let _serial = self.epoch.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // SAFETY: live window; a shared epoch on every rank (MPI_MODE_NOCHECK: nobody ever takes
        // an exclusive lock on these windows).
        check("MPI_Win_lock_all", unsafe { ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as c_int, self.win) })?;
        let mut result = Ok(());
        'requests: for r in requests.iter_mut() {
            let mut offset = r.offset;
            for chunk in r.out.chunks_mut(i32::MAX as usize) {
                let count = chunk.len() as c_int;
                // SAFETY: `chunk` is a live, exclusively borrowed destination of `count` floats
                // that stays borrowed until unlock_all below completes the get; the source range
                // `[offset, offset + count)` lies inside the target's window (checked above
                // against the lengths gathered at allocation; displacement unit 4 bytes);
                // RSMPI_FLOAT is an extern static MPI initialized.
                let code = unsafe {
                    ffi::MPI_Get(
                        chunk.as_mut_ptr().cast::<c_void>(),
                        count,
                        ffi::RSMPI_FLOAT,
                        r.target as c_int,
                        offset as ffi::MPI_Aint,
                        count,
                        ffi::RSMPI_FLOAT,
                        self.win,
                    )
                };
                if let Err(e) = check("MPI_Get", code) {
                    result = Err(e);
                    break 'requests;
                }
                offset += chunk.len();
            }
        }
        // SAFETY: closes the epoch opened above; this completes every get issued in it, so the
        // destinations are written before their borrows end.
        let unlocked = check("MPI_Win_unlock_all", unsafe { ffi::MPI_Win_unlock_all(self.win) });
        result.and(unlocked)
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        if is_finalized() {
            return;
        }
        // SAFETY: `win` is live (created in `allocate`, freed only here) and no epoch is open
        // (`fill` and `get_many` close theirs before returning); MPI_Win_free is collective, which
        // the crate documents: every rank drops its sharded source at the same point.
        let _ = unsafe { ffi::MPI_Win_free(&mut self.win) };
    }
}
