//! Errors as Python sees them.

use pyo3::PyErr;
use pyo3::exceptions::PyRuntimeError;

/// A `RuntimeError` carrying `reason` (the drop-in's contract: every failure is one).
pub(crate) fn runtime(reason: impl std::fmt::Display) -> PyErr {
    PyRuntimeError::new_err(reason.to_string())
}
