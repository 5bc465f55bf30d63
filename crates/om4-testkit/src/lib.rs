//! Helpers om4's tests and examples share: float bits, `.npy` files, GPU presence, a store
//! source's naive truth (feature `store`) and the data-parallel reference case (feature `ddp`).
//! A dev-dependency only (`publish = false`).

use std::fmt::Display;
use std::path::Path;

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

/// A NumPy `.npy` array (format 1.0 or 2.0, C order): dtype descriptor, shape, raw bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Npy {
    /// The dtype descriptor, e.g. `<f4`.
    pub descr: String,
    /// The shape.
    pub shape: Vec<usize>,
    /// The values' little-endian bytes.
    pub data: Vec<u8>,
}

impl Npy {
    /// Reads `path`.
    ///
    /// # Errors
    /// A message naming the file: unreadable, not `.npy`, Fortran order, a bad header.
    pub fn read(path: &Path) -> Result<Self, String> {
        let bad = |what: &str| format!("{}: {what}", path.display());
        let bytes = std::fs::read(path).map_err(|e| bad(&e.to_string()))?;
        if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
            return Err(bad("not a .npy file"));
        }
        let (len, start) = match bytes[6] {
            1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
            _ => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
        };
        let header = bytes.get(start..start + len).ok_or_else(|| bad("truncated header"))?;
        let header = std::str::from_utf8(header).map_err(|e| bad(&e.to_string()))?;
        if !header.contains("'fortran_order': False") {
            return Err(bad("only C-ordered arrays are read"));
        }
        let after = |key: &str| header.find(key).map(|i| &header[i + key.len()..]).ok_or_else(|| bad(key));
        let descr = after("'descr': '")?.split('\'').next().unwrap_or_default().to_string();
        let shape_text = after("'shape': (")?;
        let shape = shape_text[..shape_text.find(')').ok_or_else(|| bad("shape"))?]
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| s.trim().parse::<usize>().map_err(|e| bad(&format!("shape: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { descr, shape, data: bytes[start + len..].to_vec() })
    }

    /// The values as `f32` (from `<f4`, `<f8`, `|b1`, `|u1` or `<i8`; wider types rounded).
    ///
    /// # Errors
    /// Another dtype, or a value count that does not fill the shape.
    pub fn to_f32(&self) -> Result<Vec<f32>, String> {
        let words = |n: usize| self.data.chunks_exact(n);
        let values: Vec<f32> = match self.descr.as_str() {
            "<f4" => words(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            "<f8" => words(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")) as f32).collect(),
            "|b1" | "|u1" => self.data.iter().map(|&b| f32::from(b)).collect(),
            "<i8" => words(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")) as f32).collect(),
            other => return Err(format!("dtype {other} is not read as float32")),
        };
        if values.len() != self.shape.iter().product::<usize>() {
            return Err(format!("{} values for shape {:?}", values.len(), self.shape));
        }
        Ok(values)
    }
}
