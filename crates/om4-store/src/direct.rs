//! Direct chunk decoding for the common OM4 case: one plane per chunk, stored as raw
//! little-endian float32 or as one blosc or zstd frame. The chunk file is read into a reused scratch
//! buffer (or, raw, straight into place) and blosc decodes straight into the caller's plane, which
//! saves zarrs' per-chunk allocation and copy. Everything else goes through zarrs; a test checks
//! that both paths give the same bits.

use std::cell::RefCell;
use std::io::Read;
use std::ops::Range;
use std::path::PathBuf;

use crate::error::BoxError;
use crate::meta::{PlainChunks, PlainCodec};
use crate::zarr::Axes;

/// An array whose chunks are single planes of plain float32.
#[derive(Debug, Clone)]
pub(crate) struct DirectArray {
    dir: PathBuf,
    chunks: PlainChunks,
    axes: Axes,
}

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl DirectArray {
    pub(crate) fn new(dir: PathBuf, chunks: PlainChunks, axes: Axes) -> Self {
        Self { dir, chunks, axes }
    }

    fn chunk_path(&self, row: u64, level: u64) -> PathBuf {
        let idx: Vec<String> = match self.axes {
            Axes::TimeYX => vec![row.to_string(), "0".into(), "0".into()],
            Axes::TimeLevYX => vec![row.to_string(), level.to_string(), "0".into(), "0".into()],
            Axes::LevTimeYX => vec![level.to_string(), row.to_string(), "0".into(), "0".into()],
        };
        let key = format!("{}{}", self.chunks.prefix, idx.join(&self.chunks.separator));
        self.dir.join(key)
    }

    /// Decodes the planes of `levels` at time `row` (one plane for a `(time, y, x)` array) into `out`.
    pub(crate) fn read_planes(&self, row: u64, levels: Range<u64>, out: &mut [f32]) -> Result<(), BoxError> {
        let n = match self.axes {
            Axes::TimeYX => 1,
            _ => (levels.end - levels.start) as usize,
        };
        let plane = out.len() / n.max(1);
        for (k, dest) in out.chunks_exact_mut(plane).enumerate() {
            let path = self.chunk_path(row, levels.start + k as u64);
            self.read_plane(&path, dest).map_err(|e| format!("chunk {}: {e}", path.display()))?;
        }
        Ok(())
    }

    fn read_plane(&self, path: &std::path::Path, dest: &mut [f32]) -> Result<(), BoxError> {
        let mut file = match std::fs::File::open(path) {
            Ok(f) => f,
            // A missing chunk holds the fill value, NaN.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                dest.fill(f32::NAN);
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        let want = std::mem::size_of_val(dest);
        let len = file.metadata()?.len() as usize;
        if self.chunks.codec == PlainCodec::Raw {
            if len != want {
                return Err(format!("holds {len} bytes, a plane needs {want}").into());
            }
            file.read_exact(bytemuck::cast_slice_mut::<f32, u8>(dest))?;
            from_little_endian(dest);
            return Ok(());
        }
        SCRATCH.with_borrow_mut(|scratch| {
            scratch.clear();
            scratch.reserve(len);
            file.read_to_end(scratch)?;
            let bytes = bytemuck::cast_slice_mut::<f32, u8>(dest);
            match self.chunks.codec {
                PlainCodec::Blosc => blosc::decompress_into(scratch, bytes)?,
                _ => {
                    let n = zstd::bulk::decompress_to_buffer(scratch, bytes)?;
                    if n != bytes.len() {
                        return Err(format!("zstd frame decodes to {n} bytes, a plane needs {}", bytes.len()).into());
                    }
                }
            }
            from_little_endian(dest);
            Ok(())
        })
    }
}

/// Chunks hold little-endian floats; a no-op on little-endian machines.
fn from_little_endian(values: &mut [f32]) {
    if cfg!(target_endian = "big") {
        values.iter_mut().for_each(|v| *v = f32::from_bits(u32::from_le(v.to_bits())));
    }
}

/// The two blosc calls, behind a safe interface.
mod blosc {
    use crate::error::BoxError;

    /// Decodes one blosc frame into `dest`, which must be exactly the frame's decoded size.
    pub(super) fn decompress_into(frame: &[u8], dest: &mut [u8]) -> Result<(), BoxError> {
        let mut nbytes = 0usize;
        // SAFETY: `frame` is a live slice of `frame.len()` readable bytes, and `nbytes` is a valid
        // out-pointer; blosc_cbuffer_validate reads at most `frame.len()` bytes of the header.
        let valid = unsafe { blosc_src::blosc_cbuffer_validate(frame.as_ptr().cast(), frame.len(), &raw mut nbytes) };
        if valid != 0 {
            return Err("not a valid blosc frame (corrupt or truncated)".into());
        }
        if nbytes != dest.len() {
            return Err(format!("blosc frame decodes to {nbytes} bytes, a plane needs {}", dest.len()).into());
        }
        // SAFETY: the frame was validated above (its compressed size fits in `frame`), `dest` is a
        // live, exclusively borrowed buffer of exactly `nbytes` bytes and blosc writes at most
        // `dest.len()` bytes; one internal thread, so no blosc thread outlives the call.
        let written =
            unsafe { blosc_src::blosc_decompress_ctx(frame.as_ptr().cast(), dest.as_mut_ptr().cast(), dest.len(), 1) };
        if usize::try_from(written).ok() != Some(dest.len()) {
            return Err(format!("blosc decompression failed ({written})").into());
        }
        Ok(())
    }
}
