//! Direct chunk decoding for the common OM4 case: one plane per chunk, stored as raw
//! little-endian float32 or as one blosc or zstd frame. A local chunk file is read into a reused
//! scratch buffer (or, raw, straight into place); a remote chunk's bytes are the fetched answer
//! (feature `s3`: the same requests zarrs would make, so prefetching, the shard-index cache and
//! range coalescing apply unchanged). Blosc and zstd decode straight into the caller's plane, which
//! saves zarrs' per-chunk allocation and copy. Everything else goes through zarrs; tests check that
//! both paths give the same bits, locally and on S3.

use std::cell::RefCell;
use std::io::Read;
use std::ops::Range;
use std::path::PathBuf;

use crate::error::BoxError;
use crate::meta::{PlainChunks, PlainCodec, ShardLayout};
use crate::zarr::Axes;

/// An array whose chunks are single planes of plain float32.
#[derive(Debug, Clone)]
pub(crate) struct DirectArray {
    chunks_at: ChunksAt,
    chunks: PlainChunks,
    axes: Axes,
}

/// Where an array's chunks are.
#[derive(Debug, Clone)]
pub(crate) enum ChunksAt {
    /// Files under the array's directory.
    Dir(PathBuf),
    /// Objects of a remote store under the array's key (`thetao`).
    #[cfg(feature = "s3")]
    Remote(std::sync::Arc<crate::remote::Remote>, String),
}

impl ChunksAt {
    /// The directory of a local array.
    #[cfg(feature = "bench-reference")]
    fn dir(&self) -> Option<&std::path::Path> {
        match self {
            Self::Dir(dir) => Some(dir),
            #[cfg(feature = "s3")]
            Self::Remote(..) => None,
        }
    }
}

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl DirectArray {
    pub(crate) fn new(chunks_at: ChunksAt, chunks: PlainChunks, axes: Axes) -> Self {
        Self { chunks_at, chunks, axes }
    }

    /// Array indices of the plane's first element.
    fn plane_index(&self, row: u64, level: u64) -> Vec<u64> {
        match self.axes {
            Axes::TimeYX => vec![row, 0, 0],
            Axes::TimeLevYX => vec![row, level, 0, 0],
            Axes::LevTimeYX => vec![level, row, 0, 0],
        }
    }

    /// The key of the chunk (or shard) holding the plane, relative to the array, and (sharded)
    /// the inner chunk's number in it.
    fn locate(&self, row: u64, level: u64) -> (String, Option<u64>) {
        let index = self.plane_index(row, level);
        let (file_index, inner) = match &self.chunks.shard {
            None => (index, None),
            Some(s) => {
                let shard: Vec<u64> = index.iter().zip(&s.outer).map(|(i, o)| i / o).collect();
                // C-order number of the inner chunk within its shard
                let mut n = 0;
                for ((i, o), c) in index.iter().zip(&s.outer).zip(&s.inner) {
                    n = n * (o / c) + (i % o) / c;
                }
                (shard, Some(n))
            }
        };
        let key: Vec<String> = file_index.iter().map(u64::to_string).collect();
        (format!("{}{}", self.chunks.prefix, key.join(&self.chunks.separator)), inner)
    }

    /// Decodes the planes of `levels` at time `row` (one plane for a `(time, y, x)` array) into `out`.
    pub(crate) fn read_planes(&self, row: u64, levels: Range<u64>, out: &mut [f32]) -> Result<(), BoxError> {
        let n = match self.axes {
            Axes::TimeYX => 1,
            _ => (levels.end - levels.start) as usize,
        };
        let plane = out.len() / n.max(1);
        for (k, dest) in out.chunks_exact_mut(plane).enumerate() {
            let (key, inner) = self.locate(row, levels.start + k as u64);
            match &self.chunks_at {
                ChunksAt::Dir(dir) => {
                    let path = dir.join(&key);
                    self.read_plane(&path, inner, dest).map_err(|e| format!("chunk {}: {e}", path.display()))?;
                }
                #[cfg(feature = "s3")]
                ChunksAt::Remote(remote, array) => {
                    let key = format!("{array}/{key}");
                    self.read_remote_plane(remote, &key, inner, dest).map_err(|e| format!("chunk {key}: {e}"))?;
                }
            }
        }
        Ok(())
    }

    /// Reads one plane of a remote store: the chunk, or (sharded) the shard's index and then the
    /// inner chunk's byte range, each prefetched or fetched (see `remote`).
    #[cfg(feature = "s3")]
    fn read_remote_plane(
        &self,
        remote: &crate::remote::Remote,
        key: &str,
        inner: Option<u64>,
        dest: &mut [f32],
    ) -> Result<(), BoxError> {
        use crate::remote::Span;
        let frame = match (&self.chunks.shard, inner) {
            (Some(layout), Some(n)) => {
                let index_len = layout.index_len();
                let at = if layout.index_at_end { Span::Suffix(index_len) } else { Span::From(0, Some(index_len)) };
                let Some(index) = remote.get_range(key, at)? else {
                    dest.fill(f32::NAN); // a missing shard holds the fill value
                    return Ok(());
                };
                let Some((offset, size)) = inner_entry(&index, layout, n)? else {
                    dest.fill(f32::NAN);
                    return Ok(());
                };
                remote.get_range(key, Span::From(offset, Some(size)))?.ok_or("shard vanished between two reads")?
            }
            _ => match remote.get_whole(key)? {
                Some(bytes) => bytes,
                None => {
                    dest.fill(f32::NAN); // a missing chunk holds the fill value
                    return Ok(());
                }
            },
        };
        self.decode(&frame, dest)
    }

    fn read_plane(&self, path: &std::path::Path, inner: Option<u64>, dest: &mut [f32]) -> Result<(), BoxError> {
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
        if let (Some(layout), Some(n)) = (&self.chunks.shard, inner) {
            return self.read_inner(&file, layout, n, dest);
        }
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
            self.decode(scratch, dest)
        })
    }

    #[cfg(feature = "bench-reference")]
    /// Reads the chunk files of the planes of `levels` at time `row` whole into `frames` (one per
    /// plane, reusing their capacity), without decoding: the read half of the composed
    /// read + decode reference. Unsharded arrays only.
    pub(crate) fn fetch_planes(&self, row: u64, levels: Range<u64>, frames: &mut [Vec<u8>]) -> Result<(), BoxError> {
        if self.chunks.shard.is_some() {
            return Err("sharded arrays are not measured (unsharded one-plane chunks only)".into());
        }
        let Some(dir) = self.chunks_at.dir() else {
            return Err("only local stores are measured".into());
        };
        for (k, frame) in frames.iter_mut().enumerate() {
            let path = dir.join(self.locate(row, levels.start + k as u64).0);
            frame.clear();
            std::fs::File::open(&path)?.read_to_end(frame).map_err(|e| format!("chunk {}: {e}", path.display()))?;
        }
        Ok(())
    }

    #[cfg(feature = "bench-reference")]
    /// Decodes frames from [`DirectArray::fetch_planes`] into `out`, one plane each: the decode half.
    pub(crate) fn decode_planes(&self, frames: &[Vec<u8>], out: &mut [f32]) -> Result<(), BoxError> {
        let plane = out.len() / frames.len().max(1);
        for (frame, dest) in frames.iter().zip(out.chunks_exact_mut(plane)) {
            self.decode(frame, dest)?;
        }
        Ok(())
    }

    /// Reads inner chunk `n` of a shard through the shard's index.
    #[cfg(not(unix))]
    fn read_inner(&self, _: &std::fs::File, _: &ShardLayout, _: u64, _: &mut [f32]) -> Result<(), BoxError> {
        Err("direct shard reads need positioned reads (unix)".into())
    }

    /// Reads inner chunk `n` of a shard through the shard's index.
    #[cfg(unix)]
    fn read_inner(&self, file: &std::fs::File, layout: &ShardLayout, n: u64, dest: &mut [f32]) -> Result<(), BoxError> {
        use std::os::unix::fs::FileExt;
        let len = file.metadata()?.len();
        let index_len = layout.index_len();
        if len < index_len {
            return Err(format!("shard of {len} bytes is shorter than its {index_len}-byte index").into());
        }
        let index_at = if layout.index_at_end { len - index_len } else { 0 };
        let mut index = vec![0u8; index_len as usize];
        file.read_exact_at(&mut index, index_at)?;
        let Some((offset, size)) = inner_entry(&index, layout, n)? else {
            dest.fill(f32::NAN); // an empty inner chunk holds the fill value
            return Ok(());
        };
        if offset.checked_add(size).is_none_or(|end| end > len) {
            return Err(format!("inner chunk {n} at {offset}+{size} lies outside the {len}-byte shard").into());
        }
        if self.chunks.codec == PlainCodec::Raw {
            if size as usize != std::mem::size_of_val(dest) {
                return Err(format!(
                    "inner chunk {n} holds {size} bytes, a plane needs {}",
                    std::mem::size_of_val(dest)
                )
                .into());
            }
            file.read_exact_at(bytemuck::cast_slice_mut::<f32, u8>(dest), offset)?;
            from_little_endian(dest);
            return Ok(());
        }
        SCRATCH.with_borrow_mut(|scratch| {
            scratch.resize(size as usize, 0);
            file.read_exact_at(scratch, offset)?;
            self.decode(scratch, dest)
        })
    }

    /// Decodes one compressed chunk (blosc or zstd frame) into `dest`.
    fn decode(&self, frame: &[u8], dest: &mut [f32]) -> Result<(), BoxError> {
        let bytes = bytemuck::cast_slice_mut::<f32, u8>(dest);
        match self.chunks.codec {
            PlainCodec::Blosc => blosc::decompress_into(frame, bytes)?,
            PlainCodec::Zstd => {
                let n = zstd::bulk::decompress_to_buffer(frame, bytes)?;
                if n != bytes.len() {
                    return Err(format!("zstd frame decodes to {n} bytes, a plane needs {}", bytes.len()).into());
                }
            }
            PlainCodec::Raw => {
                if frame.len() != bytes.len() {
                    return Err(format!("holds {} bytes, a plane needs {}", frame.len(), bytes.len()).into());
                }
                bytes.copy_from_slice(frame);
            }
        }
        from_little_endian(dest);
        Ok(())
    }
}

/// Where inner chunk `n` lies in its shard, from the shard's index (checksum checked): `None` for
/// an empty inner chunk.
fn inner_entry(index: &[u8], layout: &ShardLayout, n: u64) -> Result<Option<(u64, u64)>, BoxError> {
    if index.len() as u64 != layout.index_len() {
        return Err(format!("shard index of {} bytes, {} expected", index.len(), layout.index_len()).into());
    }
    if layout.crc {
        let (body, sum) = index.split_at(index.len() - 4);
        let stored = u32::from_le_bytes(sum.try_into().expect("4 bytes"));
        if crc32c::crc32c(body) != stored {
            return Err("shard index checksum mismatch (corrupt shard)".into());
        }
    }
    let entry = &index[(n * 16) as usize..(n * 16 + 16) as usize];
    let offset = u64::from_le_bytes(entry[..8].try_into().expect("8 bytes"));
    let size = u64::from_le_bytes(entry[8..].try_into().expect("8 bytes"));
    Ok((offset != u64::MAX || size != u64::MAX).then_some((offset, size)))
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
