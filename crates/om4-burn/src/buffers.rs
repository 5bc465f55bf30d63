//! Reusable host staging buffers: a pool that hands out a free buffer of sufficient capacity and
//! keeps at most the three largest free ones.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Free buffers kept for reuse.
const KEEP_FREE: usize = 3;

#[derive(Debug, Default)]
struct Shared {
    free: Mutex<Vec<Vec<f32>>>,
    leased: AtomicUsize,
    allocations: AtomicUsize,
}

/// A pool of host buffers shared by the threads of a loader. Cloning shares the pool.
#[derive(Debug, Clone, Default)]
pub struct BufferPool {
    shared: Arc<Shared>,
}

impl BufferPool {
    /// An empty pool.
    pub fn new() -> Self {
        Self::default()
    }

    /// A buffer of exactly `len` values (contents unspecified), reusing the smallest free buffer
    /// whose capacity suffices.
    pub fn acquire(&self, len: usize) -> PooledBuf {
        let reused = {
            let mut free = self.shared.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let best = free
                .iter()
                .enumerate()
                .filter(|(_, b)| b.capacity() >= len)
                .min_by_key(|(_, b)| b.capacity())
                .map(|(i, _)| i);
            best.map(|i| free.swap_remove(i))
        };
        let mut buf = reused.unwrap_or_else(|| {
            self.shared.allocations.fetch_add(1, Ordering::Relaxed);
            Vec::with_capacity(len)
        });
        // Only the length changes when the capacity suffices: no allocation.
        buf.resize(len, 0.0);
        buf.truncate(len);
        self.shared.leased.fetch_add(1, Ordering::Relaxed);
        PooledBuf { buf, pool: Arc::clone(&self.shared) }
    }

    /// Buffers handed out and not yet returned.
    pub fn leased(&self) -> usize {
        self.shared.leased.load(Ordering::Relaxed)
    }

    /// Free buffers held for reuse (at most three).
    pub fn free(&self) -> usize {
        self.shared.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    /// Buffers allocated so far (a reuse does not count).
    pub fn allocations(&self) -> usize {
        self.shared.allocations.load(Ordering::Relaxed)
    }
}

/// A leased buffer; dropping it returns it to its pool (or frees it when the pool keeps enough).
#[derive(Debug)]
pub struct PooledBuf {
    buf: Vec<f32>,
    pool: Arc<Shared>,
}

impl Deref for PooledBuf {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.buf
    }
}

impl DerefMut for PooledBuf {
    fn deref_mut(&mut self) -> &mut [f32] {
        &mut self.buf
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        self.pool.leased.fetch_sub(1, Ordering::Relaxed);
        let mut free = self.pool.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        free.push(buf);
        if free.len() > KEEP_FREE {
            let smallest =
                free.iter().enumerate().min_by_key(|(_, b)| b.capacity()).map(|(i, _)| i).expect("non-empty");
            free.swap_remove(smallest);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_and_keeps_three_largest() {
        let pool = BufferPool::new();
        let bufs: Vec<PooledBuf> = [10, 40, 20, 30].iter().map(|&n| pool.acquire(n)).collect();
        assert_eq!((pool.leased(), pool.allocations()), (4, 4));
        drop(bufs);
        assert_eq!((pool.leased(), pool.free()), (0, 3));
        let b = pool.acquire(15); // reuses the 20, the smallest that fits; the 10 was freed
        assert_eq!(b.len(), 15);
        assert_eq!(pool.allocations(), 4);
        let c = pool.acquire(35); // the 40
        let d = pool.acquire(50); // nothing fits
        assert_eq!(pool.allocations(), 5);
        drop((b, c, d));
        assert_eq!(pool.free(), 3);
    }
}
