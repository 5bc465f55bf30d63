//! Batch arrays over the loader's pooled buffers: each NumPy array views a `PooledBuf` held by a
//! small Python object, its base. When the last array (or DLPack tensor) over a buffer is gone,
//! the buffer returns to the loader's pool, so the next batch reuses memory that is already
//! mapped instead of faulting in fresh pages. This module holds the crate's only `unsafe`.

use numpy::PyArray4;
use numpy::ndarray::ArrayView4;
use om4_pipeline::PooledBuf;
use pyo3::prelude::*;

use crate::error::runtime;

/// Owns a pooled buffer for the NumPy arrays that view it (their base object).
#[pyclass(module = "om4", frozen)]
#[derive(Debug)]
pub(crate) struct PooledMemory {
    buf: PooledBuf,
}

/// A float32 array of `shape` over `buf`, without a copy; writable, C-contiguous.
pub(crate) fn array(py: Python<'_>, buf: PooledBuf, shape: [usize; 4]) -> PyResult<Bound<'_, PyAny>> {
    if shape.iter().product::<usize>() != buf.len() {
        return Err(runtime(format!("internal: a buffer of {} values cannot be shaped {shape:?}", buf.len())));
    }
    let owner = Bound::new(py, PooledMemory { buf })?;
    let values: &[f32] = &owner.get().buf;
    let view = ArrayView4::from_shape(shape, values).map_err(runtime)?;
    // SAFETY: `view` points into the heap allocation `owner` holds. That allocation is neither
    // moved nor freed nor handed back to its pool while `owner` lives (a `PooledBuf` releases its
    // memory only when dropped), and `borrow_from_array` makes `owner` the new array's base, so
    // the array (and every view or DLPack capsule taken from it) keeps `owner` alive. Rust never
    // reads or writes the buffer again while `owner` lives (`PooledMemory` is frozen and exposes
    // nothing), so writes from Python cannot race Rust.
    let array = unsafe { PyArray4::borrow_from_array(&view, owner.clone().into_any()) };
    Ok(array.into_any())
}
