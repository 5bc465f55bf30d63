//! Reusable float32 buffers for the convolutions' intermediate matrices, handed out without
//! zeroing.
//!
//! Winograd's transformed tiles and products are several times the size of a layer's input (83 MB
//! each for 320 channels at 2°), and every element of them is written before it is read. A fresh
//! `vec![0.0; n]` zeroes them first: with the training command's malloc settings (no `mmap`, so
//! no lazily zeroed pages) that memset took about 9 ms per 83 MB buffer on one core, about half of
//! a transform's time. A [`Scratch`] instead reuses a buffer of an earlier call on the same thread
//! as it is (its values stale), so callers must write every element before reading it; the tests
//! hand out buffers full of NaN to hold them to that.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

/// Buffers kept per thread for the next [`Scratch::take`]; more are dropped, the smallest first.
const KEPT: usize = 4;

thread_local! {
    static POOL: RefCell<Vec<Vec<f32>>> = const { RefCell::new(Vec::new()) };
}

/// `n` float32 values of unspecified contents (stale values of an earlier use, or zeros), given
/// back to this thread's pool when dropped.
pub(crate) struct Scratch {
    buf: Vec<f32>,
    len: usize,
}

impl Scratch {
    /// A buffer of `n` values: the smallest kept one that holds them, else the largest kept one
    /// grown (only its growth zeroed), else a new one.
    pub(crate) fn take(n: usize) -> Scratch {
        let mut buf = POOL.with_borrow_mut(|pool| {
            let fits = (0..pool.len()).filter(|&i| pool[i].len() >= n).min_by_key(|&i| pool[i].len());
            let pick = fits.or_else(|| (0..pool.len()).max_by_key(|&i| pool[i].len()));
            pick.map(|i| pool.swap_remove(i)).unwrap_or_default()
        });
        if buf.len() < n {
            buf.resize(n, 0.0);
        }
        Scratch { buf, len: n }
    }
}

impl Deref for Scratch {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        &self.buf[..self.len]
    }
}

impl DerefMut for Scratch {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.buf[..self.len]
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        // A thread being torn down has no pool left to return to: the buffer is just freed.
        let _ = POOL.try_with(|pool| {
            let mut pool = pool.borrow_mut();
            pool.push(buf);
            if pool.len() > KEPT {
                let smallest = (0..pool.len()).min_by_key(|&i| pool[i].len()).expect("a full pool");
                pool.swap_remove(smallest);
            }
        });
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Fills the pools of this thread and of every thread of rayon's global pool (where the
    /// kernels' parallel tasks take their buffers) with `KEPT` buffers of `n` NaNs each, so that
    /// whatever the next calls take and fail to overwrite shows in their results.
    pub(crate) fn poison(n: usize) {
        let fill = || {
            let held: Vec<Scratch> = (0..KEPT).map(|_| Scratch::take(n)).collect();
            for mut s in held {
                s.fill(f32::NAN);
            }
        };
        fill();
        rayon::broadcast(|_| fill());
    }

    #[test]
    fn a_buffer_is_reused_as_it_was_left() {
        let mut a = Scratch::take(10);
        a.fill(3.0);
        let ptr = a.as_ptr();
        drop(a);
        let b = Scratch::take(6);
        assert_eq!((b.len(), b.as_ptr()), (6, ptr), "the same buffer, shortened");
        assert!(b.iter().all(|&v| v == 3.0), "with its values left as they were");
        drop(b);
        let c = Scratch::take(12);
        assert_eq!(c.len(), 12);
        assert_eq!(&c[10..], &[0.0, 0.0], "growth is zeroed");
    }

    #[test]
    fn the_pool_keeps_the_largest_buffers() {
        let held: Vec<Scratch> = (1..=KEPT + 2).map(|n| Scratch::take(n * 100)).collect();
        drop(held);
        let lens = POOL.with_borrow(|pool| {
            let mut l: Vec<usize> = pool.iter().map(Vec::len).collect();
            l.sort();
            l
        });
        assert_eq!(lens, (3..=KEPT + 2).map(|n| n * 100).collect::<Vec<_>>());
    }
}
