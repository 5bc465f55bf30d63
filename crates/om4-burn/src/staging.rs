//! Host staging memory and its hand-over to Burn without a copy.
//!
//! A [`PooledBuf`] becomes the storage of a `TensorData` through Burn's `AllocationController`:
//! the backend reads the planes straight from the pooled buffer (on CUDA, a pinned one is DMA'd
//! without being restaged), and the buffer goes back to its pool only when the backend drops the
//! bytes, which cubecl does after the copy's fence. This is the crate's one `unsafe` module; the
//! pool and the CUDA allocation live in om4-pipeline.

use std::mem::MaybeUninit;

use burn::tensor::{AllocationProperty, Bytes, DType, TensorData};
use burn_std::{AccessError, AccessPolicy, AllocationController};

use om4_pipeline::PooledBuf;

/// The pooled buffer as a Burn allocation: its whole capacity, 4-byte aligned.
struct Staged(PooledBuf);

impl AllocationController for Staged {
    fn alloc_align(&self) -> usize {
        align_of::<f32>()
    }

    fn property(&self) -> AllocationProperty {
        if self.0.is_pinned() { AllocationProperty::Pinned } else { AllocationProperty::Other }
    }

    unsafe fn memory_mut(&mut self, _policy: AccessPolicy) -> Result<&mut [MaybeUninit<u8>], AccessError> {
        let values = self.0.whole_mut();
        // SAFETY: the pointer and length describe `values` exactly (4 bytes per f32), a unique
        // borrow of initialized memory that lives as long as `self`; `MaybeUninit<u8>` has no
        // validity requirement and alignment 1. The trait's contract obliges callers to write
        // only initialized bytes, so the f32 view stays valid.
        Ok(unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast(), size_of_val(values)) })
    }

    fn memory(&self, _policy: AccessPolicy) -> Result<&[MaybeUninit<u8>], AccessError> {
        let values = self.0.whole();
        // SAFETY: as above, for a shared borrow.
        Ok(unsafe { std::slice::from_raw_parts(values.as_ptr().cast(), size_of_val(values)) })
    }
}

/// A `(shape)` f32 tensor's data backed by `buf` itself: no copy, and `buf` returns to its pool
/// when the backend is done with the bytes.
///
/// # Panics
/// If the shape's element count differs from `buf.len()` (a bug in the caller: it is checked there).
pub(crate) fn tensor_data(buf: PooledBuf, shape: [usize; 4]) -> TensorData {
    let len = buf.len() * size_of::<f32>();
    // SAFETY: `Staged` reports the whole initialized allocation, which is at least `len` bytes
    // (a pooled buffer's length never exceeds its capacity), and stays alive and unmoved until
    // the `Bytes` is dropped, which also returns the buffer to its pool.
    let bytes = unsafe { Bytes::from_controller(Box::new(Staged(buf)), len) };
    TensorData::from_bytes(bytes, shape, DType::F32)
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Device, Tensor};

    use super::*;
    use om4_pipeline::BufferPool;

    #[test]
    fn handed_over_buffer_is_read_exactly_and_returns_to_its_pool() {
        let pool = BufferPool::new();
        // A larger buffer first, so the hand-over uses a prefix of a bigger allocation.
        drop(pool.acquire(64));
        let mut buf = pool.acquire(2 * 3 * 2 * 4);
        for (i, v) in buf.iter_mut().enumerate() {
            *v = match i % 5 {
                0 => f32::NAN,
                1 => -0.0,
                2 => f32::INFINITY,
                _ => i as f32 * 0.25,
            };
        }
        let expected: Vec<u32> = buf.iter().map(|v| v.to_bits()).collect();
        let t = Tensor::<4>::from_data(tensor_data(buf, [2, 3, 2, 4]), &Device::flex());
        let doubled = t.clone() * 2.0;
        let back: Vec<u32> = t.into_data().try_to_vec::<f32>().unwrap().iter().map(|v| v.to_bits()).collect();
        assert_eq!(back, expected);
        drop(doubled);
        assert_eq!(pool.leased(), 0, "the buffer is back once Burn has dropped its bytes");
        assert_eq!(pool.allocations(), 1);
    }
}
