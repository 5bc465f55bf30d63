//! Little-endian float32 and uint8 `.npy` writers (NumPy format 1.0).

use std::io::Write;
use std::path::Path;

/// Writes `values` with `shape` as a C-order `<f4` array.
pub(crate) fn write_f32(path: &Path, shape: &[usize], values: &[f32]) -> std::io::Result<()> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    write(path, "<f4", shape, values.len(), &bytes)
}

/// Writes `values` with `shape` as a C-order `|u1` array.
pub(crate) fn write_u8(path: &Path, shape: &[usize], values: &[u8]) -> std::io::Result<()> {
    write(path, "|u1", shape, values.len(), values)
}

fn write(path: &Path, descr: &str, shape: &[usize], len: usize, bytes: &[u8]) -> std::io::Result<()> {
    assert_eq!(shape.iter().product::<usize>(), len, "npy shape does not match the data");
    let dims: Vec<String> = shape.iter().map(ToString::to_string).collect();
    let shape_text = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}");
    // magic (6) + version (2) + header length (2) + header + '\n' must be a multiple of 64
    let pad = 64 - (10 + header.len() + 1) % 64;
    header.push_str(&" ".repeat(pad % 64));
    header.push('\n');
    let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
    file.write_all(b"\x93NUMPY\x01\x00")?;
    file.write_all(&u16::try_from(header.len()).expect("short header").to_le_bytes())?;
    file.write_all(header.as_bytes())?;
    file.write_all(bytes)?;
    file.flush()
}
