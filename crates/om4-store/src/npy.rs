//! NumPy `.npy` files (format 1.0 and 2.0, C order, little-endian): the one reader and writer
//! the CLI, the examples and the tests use for arrays going to or coming from NumPy.

use std::io::Write;
use std::path::Path;

/// A `.npy` array: dtype descriptor, shape, raw bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Npy {
    /// The dtype descriptor, e.g. `<f4`.
    pub descr: String,
    /// The shape.
    pub shape: Vec<usize>,
    /// The values' little-endian bytes.
    pub data: Vec<u8>,
}

fn invalid(path: &Path, what: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {what}", path.display()))
}

impl Npy {
    /// Reads `path`.
    ///
    /// # Errors
    /// An error naming the file: unreadable, not `.npy`, Fortran order, a bad or truncated
    /// header, or data shorter than the shape.
    pub fn read(path: &Path) -> std::io::Result<Self> {
        let bytes =
            std::fs::read(path).map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
            return Err(invalid(path, "not a .npy file"));
        }
        let (len, start) = match bytes[6] {
            1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
            2 | 3 if bytes.len() >= 12 => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
            v => return Err(invalid(path, format!("format version {v}"))),
        };
        let header = bytes.get(start..start + len).ok_or_else(|| invalid(path, "truncated header"))?;
        let header = std::str::from_utf8(header).map_err(|e| invalid(path, e))?;
        if !header.contains("'fortran_order': False") {
            return Err(invalid(path, "only C-ordered arrays are read"));
        }
        let after = |key: &str| header.find(key).map(|i| &header[i + key.len()..]).ok_or_else(|| invalid(path, key));
        let descr = after("'descr': '")?.split('\'').next().unwrap_or_default().to_string();
        let shape_text = after("'shape': (")?;
        let shape = shape_text[..shape_text.find(')').ok_or_else(|| invalid(path, "shape"))?]
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| s.trim().parse::<usize>().map_err(|e| invalid(path, format!("shape: {e}"))))
            .collect::<Result<Vec<_>, _>>()?;
        let npy = Self { descr, shape, data: bytes[start + len..].to_vec() };
        let want = npy.shape.iter().product::<usize>() * npy.item_size().unwrap_or(0);
        if npy.data.len() < want {
            return Err(invalid(
                path,
                format!("{} bytes of data for shape {:?} of {}", npy.data.len(), npy.shape, npy.descr),
            ));
        }
        Ok(npy)
    }

    fn item_size(&self) -> Option<usize> {
        match self.descr.as_str() {
            "<f4" | "<i4" => Some(4),
            "<f8" | "<i8" => Some(8),
            "|b1" | "|u1" => Some(1),
            _ => None,
        }
    }

    /// Values in the array.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// True for an array of no values.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The values as `f64` (from `<f4`, `<f8`, `|b1`, `|u1`, `<i4` or `<i8`).
    ///
    /// # Errors
    /// Another dtype.
    pub fn to_f64(&self) -> std::io::Result<Vec<f64>> {
        let n = self.len();
        let words = |k: usize| self.data.chunks_exact(k).take(n);
        Ok(match self.descr.as_str() {
            "<f4" => words(4).map(|c| f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
            "<f8" => words(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect(),
            "|b1" | "|u1" => self.data[..n].iter().map(|&b| f64::from(b)).collect(),
            "<i4" => words(4).map(|c| f64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]]))).collect(),
            "<i8" => words(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")) as f64).collect(),
            other => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("dtype {other} is not numeric"),
                ));
            }
        })
    }

    /// The values as `f32` (`<f4` as stored; other numeric dtypes rounded).
    ///
    /// # Errors
    /// Another dtype.
    pub fn to_f32(&self) -> std::io::Result<Vec<f32>> {
        if self.descr == "<f4" {
            return Ok(self
                .data
                .chunks_exact(4)
                .take(self.len())
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect());
        }
        Ok(self.to_f64()?.into_iter().map(|v| v as f32).collect())
    }
}

/// Writes `values` with `shape` as a C-order `<f4` array.
///
/// # Errors
/// A shape that does not hold `values.len()` values, or the file's own error.
pub fn write_f32(path: &Path, shape: &[usize], values: &[f32]) -> std::io::Result<()> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    write(path, "<f4", shape, values.len(), &bytes)
}

/// Writes `values` with `shape` as a C-order `|u1` array.
///
/// # Errors
/// As [`write_f32`].
pub fn write_u8(path: &Path, shape: &[usize], values: &[u8]) -> std::io::Result<()> {
    write(path, "|u1", shape, values.len(), values)
}

fn write(path: &Path, descr: &str, shape: &[usize], len: usize, bytes: &[u8]) -> std::io::Result<()> {
    if shape.iter().product::<usize>() != len {
        return Err(invalid(path, format!("shape {shape:?} does not hold {len} values")));
    }
    let dims: Vec<String> = shape.iter().map(ToString::to_string).collect();
    let shape_text = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}");
    // magic (6) + version (2) + header length (2) + header + '\n' is a multiple of 64
    header.push_str(&" ".repeat((64 - (10 + header.len() + 1) % 64) % 64));
    header.push('\n');
    let header_len =
        u16::try_from(header.len()).map_err(|_| invalid(path, "a shape too long for a version 1.0 header"))?;
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    file.write_all(b"\x93NUMPY\x01\x00")?;
    file.write_all(&header_len.to_le_bytes())?;
    file.write_all(header.as_bytes())?;
    file.write_all(bytes)?;
    file.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_arrays_read_back_and_bad_files_are_errors() {
        let dir = std::env::temp_dir().join(format!("om4-npy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let values = [1.5f32, -0.0, f32::NAN, 3.0e38, 7.0, 8.0];
        let path = dir.join("a.npy");
        write_f32(&path, &[2, 3], &values).unwrap();
        let npy = Npy::read(&path).unwrap();
        assert_eq!((npy.descr.as_str(), npy.shape.as_slice()), ("<f4", &[2, 3][..]));
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&npy.to_f32().unwrap()), bits(&values));
        assert_eq!(std::fs::read(&path).unwrap().len(), 128 + 6 * 4, "the header pads to 64 bytes");
        write_u8(&dir.join("m.npy"), &[4], &[0, 1, 1, 0]).unwrap();
        assert_eq!(Npy::read(&dir.join("m.npy")).unwrap().to_f64().unwrap(), [0.0, 1.0, 1.0, 0.0]);
        assert!(write_f32(&dir.join("b.npy"), &[4], &values).unwrap_err().to_string().contains("does not hold 6"));
        std::fs::write(dir.join("c.npy"), b"not numpy").unwrap();
        assert!(Npy::read(&dir.join("c.npy")).unwrap_err().to_string().contains("not a .npy file"));
        let mut short = std::fs::read(&path).unwrap();
        short.truncate(short.len() - 4);
        std::fs::write(dir.join("d.npy"), short).unwrap();
        assert!(Npy::read(&dir.join("d.npy")).unwrap_err().to_string().contains("bytes of data"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
