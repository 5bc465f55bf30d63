//! om4's native Python module, `om4._native`.
//!
//! The wheel built from this crate (`maturin build`, pyproject.toml beside it) installs two
//! packages over this one module:
//! - `samudra_rust_loader`: a drop-in for upstream Samudra's Rust extension
//!   (`FlatOm4ReadPool`, `FlatOm4Reader`, `CompactOm4Reader`), reading through om4's store;
//! - `om4`: the same classes under om4's name.
//!
//! Arrays go out as NumPy arrays; the GIL is released for every read. Tests are Python
//! (`crates/om4-python/tests`, run by `scripts/python-check.sh`).

mod arrays;
mod drop_in;
mod error;
mod loader;
mod raw;

use pyo3::prelude::*;

/// The native module: the reader classes and the version.
#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<drop_in::FlatOm4ReadPool>()?;
    module.add_class::<drop_in::FlatOm4Reader>()?;
    module.add_class::<drop_in::CompactOm4Reader>()?;
    module.add_class::<loader::Loader>()?;
    module.add_class::<loader::EpochIter>()?;
    module.add_class::<loader::Batch>()?;
    module.add_class::<loader::Step>()?;
    module.add_class::<raw::RawBatch>()?;
    module.add_class::<raw::Normalization>()?;
    module.add_class::<arrays::PooledMemory>()?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
