//! Reusable host staging buffers: a pool that hands out a free buffer of sufficient capacity and
//! keeps the largest free ones (three by default); pageable memory, or CUDA pinned memory with
//! the `pinned` feature.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Free buffers a pool keeps for reuse unless told otherwise.
const KEEP_FREE: usize = 3;

#[derive(Debug)]
struct Shared {
    free: Mutex<Vec<HostMem>>,
    /// Free buffers kept; a returned buffer beyond these frees the smallest.
    keep_free: AtomicUsize,
    leased: AtomicUsize,
    allocations: AtomicUsize,
    /// Bytes of every buffer the pool owns (leased or free), and their high-water mark.
    held: AtomicUsize,
    peak: AtomicUsize,
    #[cfg(feature = "pinned")]
    pinned: Option<crate::pinned::PinnedAllocator>,
}

impl Shared {
    fn new(keep_free: usize) -> Self {
        Self {
            free: Mutex::default(),
            keep_free: AtomicUsize::new(keep_free),
            leased: AtomicUsize::new(0),
            allocations: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            #[cfg(feature = "pinned")]
            pinned: None,
        }
    }
}

/// A pool of host buffers shared by the threads of a loader. Cloning shares the pool.
#[derive(Debug, Clone)]
pub struct BufferPool {
    shared: Arc<Shared>,
}

impl Default for BufferPool {
    fn default() -> Self {
        Self::new()
    }
}

impl BufferPool {
    /// An empty pool of pageable buffers.
    pub fn new() -> Self {
        Self { shared: Arc::new(Shared::new(KEEP_FREE)) }
    }

    /// A new, empty pool of the same kind of memory (pinned or pageable) that keeps up to
    /// `keep_free` free buffers. It never owns more buffers than were ever leased at once.
    pub fn sibling(&self, keep_free: usize) -> Self {
        let shared = Shared {
            #[cfg(feature = "pinned")]
            pinned: self.shared.pinned.clone(),
            ..Shared::new(keep_free)
        };
        Self { shared: Arc::new(shared) }
    }

    /// Whether the pool allocates page-locked (CUDA pinned) memory.
    pub fn is_pinned(&self) -> bool {
        #[cfg(feature = "pinned")]
        return self.shared.pinned.is_some();
        #[cfg(not(feature = "pinned"))]
        false
    }

    /// An empty pool of page-locked buffers from CUDA device `ordinal`'s driver context
    /// (feature `pinned`): uploads from them are DMA'd without a staging copy. When the driver
    /// later refuses an allocation, that buffer falls back to pageable memory (with a warning).
    ///
    /// # Errors
    /// [`Error::Cuda`] when no CUDA driver or device is available.
    #[cfg(feature = "pinned")]
    pub fn pinned(ordinal: usize) -> crate::Result<Self> {
        let allocator = crate::pinned::PinnedAllocator::new(ordinal)?;
        Ok(Self { shared: Arc::new(Shared { pinned: Some(allocator), ..Shared::new(KEEP_FREE) }) })
    }

    /// [`BufferPool::pinned`] on the device of the calling thread's current CUDA context (what
    /// `torch.cuda.set_device` selects, so each DDP rank pins on its own GPU), or device 0 when
    /// the thread has none. Returns the pool and the device it pins on.
    ///
    /// # Errors
    /// [`Error::Cuda`] when no CUDA driver or device is available.
    #[cfg(feature = "pinned")]
    pub fn pinned_current() -> crate::Result<(Self, usize)> {
        let ordinal = crate::pinned::current_device()?.unwrap_or(0);
        Ok((Self::pinned(ordinal)?, ordinal))
    }

    fn allocate(&self, len: usize) -> HostMem {
        let mem = self.allocate_mem(len);
        self.shared.allocations.fetch_add(1, Ordering::Relaxed);
        self.account(0, mem.capacity());
        mem
    }

    /// A free buffer too small for `len`, grown instead of kept beside a new one (pageable
    /// memory is reallocated; pinned memory is freed and allocated anew).
    fn regrow(&self, mem: HostMem, len: usize) -> HostMem {
        let old = mem.capacity();
        let mem = match mem {
            HostMem::Pageable(mut v) => {
                v.resize(len, 0.0);
                HostMem::Pageable(v)
            }
            #[cfg(feature = "pinned")]
            pinned @ HostMem::Pinned(_) => {
                drop(pinned);
                self.allocate_mem(len)
            }
        };
        self.shared.allocations.fetch_add(1, Ordering::Relaxed);
        self.account(old, mem.capacity());
        mem
    }

    /// Records a buffer of `old` values becoming one of `new` values.
    fn account(&self, old: usize, new: usize) {
        if new >= old {
            let grown = (new - old) * 4;
            let held = self.shared.held.fetch_add(grown, Ordering::Relaxed) + grown;
            self.shared.peak.fetch_max(held, Ordering::Relaxed);
        } else {
            self.shared.held.fetch_sub((old - new) * 4, Ordering::Relaxed);
        }
    }

    fn allocate_mem(&self, len: usize) -> HostMem {
        #[cfg(feature = "pinned")]
        if let Some(alloc) = &self.shared.pinned {
            match alloc.alloc(len) {
                Ok(mem) => return HostMem::Pinned(mem),
                Err(e) => tracing::warn!("pinned allocation of {len} floats failed, using pageable memory: {e}"),
            }
        }
        HostMem::pageable(len)
    }

    /// A buffer of exactly `len` values (contents unspecified), reusing the smallest free buffer
    /// whose capacity suffices. When none does, the largest free buffer is grown rather than
    /// kept beside a new allocation, so batches of slowly varying size do not pile up buffers.
    pub fn acquire(&self, len: usize) -> PooledBuf {
        if len == 0 {
            return self.empty();
        }
        let (fits, largest) = {
            let mut free = self.shared.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let best = free
                .iter()
                .enumerate()
                .filter(|(_, b)| b.capacity() >= len)
                .min_by_key(|(_, b)| b.capacity())
                .map(|(i, _)| i);
            match best {
                Some(i) => (Some(free.swap_remove(i)), None),
                None => {
                    let largest = free.iter().enumerate().max_by_key(|(_, b)| b.capacity()).map(|(i, _)| i);
                    (None, largest.map(|i| free.swap_remove(i)))
                }
            }
        };
        let mem = match (fits, largest) {
            (Some(mem), _) => mem,
            (None, Some(small)) => self.regrow(small, len),
            (None, None) => self.allocate(len),
        };
        self.lease(mem, len)
    }

    /// A buffer of `len` values from buffers of one kind, all of `capacity` values (at least
    /// `len`): a free buffer of `capacity` to twice that is reused, else one of `capacity` is
    /// allocated; none of another kind is taken or grown. A loader that knows the largest buffer
    /// of each kind its batches can ask for (planes of a variable set) asks this way, so that
    /// once as many buffers of each kind exist as its batches in flight hold, it allocates none.
    pub fn acquire_with_capacity(&self, len: usize, capacity: usize) -> PooledBuf {
        if len == 0 {
            return self.empty();
        }
        let capacity = capacity.max(len);
        let found = {
            let mut free = self.shared.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            free.iter()
                .enumerate()
                .filter(|(_, b)| (capacity..=capacity.saturating_mul(2)).contains(&b.capacity()))
                .min_by_key(|(_, b)| b.capacity())
                .map(|(i, _)| i)
                .map(|i| free.swap_remove(i))
        };
        let mem = found.unwrap_or_else(|| self.allocate(capacity));
        self.lease(mem, len)
    }

    /// Allocates buffers of `capacity` values until the pool holds `count` of that kind (see
    /// [`acquire_with_capacity`](Self::acquire_with_capacity)), counting the free ones and every
    /// leased one, and keeps them: a loader reserves what its batches in flight hold before an
    /// epoch's first read, so that no allocation (page-locked ones synchronize the device) falls
    /// inside the epoch, and buffers its consumer still holds from the last epoch count as held.
    pub fn reserve(&self, capacity: usize, count: usize) {
        if capacity == 0 {
            return;
        }
        let kind = capacity..=capacity.saturating_mul(2);
        let have = {
            let free = self.shared.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            free.iter().filter(|b| kind.contains(&b.capacity())).count() + self.leased()
        };
        let new: Vec<HostMem> = (have..count).map(|_| self.allocate(capacity)).collect();
        let mut free = self.shared.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let kept = free.len() + new.len();
        self.shared.keep_free.fetch_max(kept, Ordering::Relaxed);
        free.extend(new);
    }

    /// A buffer of no values (a group of a resident batch with no new plane): no memory taken
    /// from the pool, none given back, none allocated.
    fn empty(&self) -> PooledBuf {
        self.shared.leased.fetch_add(1, Ordering::Relaxed);
        PooledBuf { mem: None, len: 0, pool: Arc::clone(&self.shared) }
    }

    fn lease(&self, mem: HostMem, len: usize) -> PooledBuf {
        self.shared.leased.fetch_add(1, Ordering::Relaxed);
        PooledBuf { mem: Some(mem), len, pool: Arc::clone(&self.shared) }
    }

    /// Buffers handed out and not yet returned.
    pub fn leased(&self) -> usize {
        self.shared.leased.load(Ordering::Relaxed)
    }

    /// Free buffers held for reuse (at most three, for a pool made by [`BufferPool::new`]).
    pub fn free(&self) -> usize {
        self.shared.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()
    }

    /// Buffers allocated so far (a reuse does not count).
    pub fn allocations(&self) -> usize {
        self.shared.allocations.load(Ordering::Relaxed)
    }

    /// Bytes the pool owns now (leased and free buffers).
    pub fn held_bytes(&self) -> usize {
        self.shared.held.load(Ordering::Relaxed)
    }

    /// The most bytes the pool has owned at once: the host staging footprint.
    pub fn peak_bytes(&self) -> usize {
        self.shared.peak.load(Ordering::Relaxed)
    }
}

/// Host memory behind a pooled buffer: all of it initialized, `capacity` values long.
#[derive(Debug)]
enum HostMem {
    /// Ordinary (pageable) memory.
    Pageable(Vec<f32>),
    /// Page-locked memory from the CUDA driver.
    #[cfg(feature = "pinned")]
    Pinned(crate::pinned::PinnedMem),
}

impl HostMem {
    /// Zeroed pageable memory of `len` values.
    fn pageable(len: usize) -> Self {
        Self::Pageable(vec![0.0; len])
    }

    fn capacity(&self) -> usize {
        match self {
            Self::Pageable(v) => v.len(),
            #[cfg(feature = "pinned")]
            Self::Pinned(p) => p.len(),
        }
    }

    fn is_pinned(&self) -> bool {
        match self {
            Self::Pageable(_) => false,
            #[cfg(feature = "pinned")]
            Self::Pinned(_) => true,
        }
    }

    fn as_slice(&self) -> &[f32] {
        match self {
            Self::Pageable(v) => v,
            #[cfg(feature = "pinned")]
            Self::Pinned(p) => p.as_slice(),
        }
    }

    fn as_mut_slice(&mut self) -> &mut [f32] {
        match self {
            Self::Pageable(v) => v,
            #[cfg(feature = "pinned")]
            Self::Pinned(p) => p.as_mut_slice(),
        }
    }
}

/// A leased buffer; dropping it returns it to its pool (or frees it when the pool keeps enough).
#[derive(Debug)]
pub struct PooledBuf {
    /// `Some` until dropped.
    mem: Option<HostMem>,
    len: usize,
    pool: Arc<Shared>,
}

impl PooledBuf {
    /// Whether the buffer is page-locked (CUDA pinned) memory.
    pub fn is_pinned(&self) -> bool {
        self.mem.as_ref().is_some_and(HostMem::is_pinned)
    }

    /// The whole allocation (at least `len` values, all initialized): what a framework adapter
    /// hands to its tensors when they take the memory over without a copy.
    pub fn whole(&self) -> &[f32] {
        self.mem.as_ref().map_or(&[], HostMem::as_slice)
    }

    /// The whole allocation, writable.
    pub fn whole_mut(&mut self) -> &mut [f32] {
        self.mem.as_mut().map_or(&mut [], HostMem::as_mut_slice)
    }

    /// The values as an owned `Vec` without a copy, for frameworks that take ownership of a
    /// `Vec` (candle): pageable memory leaves the pool (which forgets it, so the pool allocates
    /// anew next time); pinned memory cannot become a `Vec` and is copied, returning to its pool.
    pub fn into_vec(mut self) -> Vec<f32> {
        let len = self.len;
        match self.mem.take() {
            Some(HostMem::Pageable(mut v)) => {
                self.pool.held.fetch_sub(v.len() * 4, Ordering::Relaxed);
                v.truncate(len);
                v
            }
            #[cfg(feature = "pinned")]
            Some(pinned @ HostMem::Pinned(_)) => {
                let v = pinned.as_slice()[..len].to_vec();
                self.mem = Some(pinned);
                v
            }
            None => Vec::new(),
        }
    }
}

impl Deref for PooledBuf {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        &self.whole()[..self.len]
    }
}

impl DerefMut for PooledBuf {
    fn deref_mut(&mut self) -> &mut [f32] {
        let len = self.len;
        &mut self.whole_mut()[..len]
    }
}

impl AsRef<[f32]> for PooledBuf {
    fn as_ref(&self) -> &[f32] {
        self
    }
}

impl AsMut<[f32]> for PooledBuf {
    fn as_mut(&mut self) -> &mut [f32] {
        self
    }
}

impl Drop for PooledBuf {
    fn drop(&mut self) {
        self.pool.leased.fetch_sub(1, Ordering::Relaxed);
        let Some(mem) = self.mem.take() else { return };
        let mut free = self.pool.free.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        free.push(mem);
        if free.len() > self.pool.keep_free.load(Ordering::Relaxed) {
            let smallest =
                free.iter().enumerate().min_by_key(|(_, b)| b.capacity()).map(|(i, _)| i).expect("non-empty");
            let evicted = free.swap_remove(smallest);
            self.pool.held.fetch_sub(evicted.capacity() * 4, Ordering::Relaxed);
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
        let d = pool.acquire(50); // nothing fits: the 30, the largest free one, grows to 50
        assert_eq!((d.len(), pool.allocations(), pool.free()), (50, 5, 0));
        assert_eq!(pool.peak_bytes(), (20 + 40 + 50) * 4);
        drop((b, c, d));
        assert_eq!(pool.free(), 3);
        assert_eq!(pool.held_bytes(), (20 + 40 + 50) * 4);
    }

    #[test]
    fn an_empty_buffer_takes_nothing_from_the_pool() {
        let pool = BufferPool::new();
        drop(pool.acquire(8));
        let empty = pool.acquire(0);
        assert!(empty.is_empty() && empty.whole().is_empty());
        assert_eq!((pool.leased(), pool.free(), pool.allocations()), (1, 1, 1));
        drop(empty);
        assert_eq!((pool.leased(), pool.free(), pool.allocations()), (0, 1, 1));
    }

    #[test]
    fn into_vec_hands_over_the_values_and_the_pool_forgets_them() {
        let pool = BufferPool::new();
        let mut buf = pool.acquire(6);
        buf.copy_from_slice(&[1.0, -0.0, f32::NAN, 4.0, 5.0, 6.0]);
        let bits: Vec<u32> = buf.iter().map(|v| v.to_bits()).collect();
        let v = buf.into_vec();
        assert_eq!(v.iter().map(|v| v.to_bits()).collect::<Vec<_>>(), bits);
        assert_eq!((pool.leased(), pool.free(), pool.held_bytes()), (0, 0, 0));
    }
}
