//! The composed read + decode reference `om4 bench read --reference` measures reads against
//! (feature `bench-reference`; not part of the default API).

use rayon::prelude::*;

use crate::channels::{ChannelSet, RunSpec};
use crate::direct::DirectArray;
use crate::error::{Error, Result};
use crate::read::carve;
use crate::store::{Om4Store, Selection};
use om4_batch::ReadPool;

/// What [`Om4Store::read_decode_reference`] measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadDecodeTimes {
    /// Reading every chunk file whole into memory.
    pub read: std::time::Duration,
    /// Decoding them into the output.
    pub decode: std::time::Duration,
    /// Bytes of the chunk files.
    pub compressed_bytes: u64,
}

impl Om4Store {
    /// The composed read + decode reference for [`Reader::read`](crate::Reader::read): the same planes' chunk
    /// files are first read whole into memory (all of them, in parallel on `pool`), then decoded
    /// into `out` (in parallel), each phase timed on its own. The sum of the two times is what the
    /// same file reads and the same decoder cost with nothing else around them; `Reader::read` does
    /// the same work interleaved per plane. Needs every array on the direct path, unsharded.
    /// `frames` holds the chunk files between the phases; pass the same one to every call so that
    /// the read phase reuses its buffers instead of allocating.
    ///
    /// # Errors
    /// As [`Reader::read`](crate::Reader::read), and [`Error::Request`] for arrays the reference cannot measure.
    pub fn read_decode_reference(
        &self,
        pool: &ReadPool,
        set: &ChannelSet,
        selection: &Selection,
        positions: &[usize],
        out: &mut [f32],
        frames: &mut Vec<Vec<Vec<u8>>>,
    ) -> Result<ReadDecodeTimes> {
        // Validates the request (and warms the page cache) exactly as a read does, then poisons
        // `out` with a NaN payload no decoder writes, so that a plane the decode phase missed shows.
        self.read_planes(pool, set, selection, positions, out)?;
        out.fill(f32::from_bits(0x7fc0_dead));
        let plane = set.grid.plane();
        let mut tasks: Vec<(u64, &RunSpec, &DirectArray)> = Vec::with_capacity(positions.len() * set.runs.len());
        for &p in positions {
            for r in &set.runs {
                let a = &set.arrays[r.array];
                let direct = a.direct.as_ref().ok_or_else(|| Error::Request {
                    reason: format!("array {} is not read on the direct path; no read + decode reference", a.name),
                })?;
                tasks.push(((selection.rows.start + p) as u64, r, direct));
            }
        }
        frames.resize_with(tasks.len(), Vec::new);
        for (f, (_, r, _)) in frames.iter_mut().zip(&tasks) {
            f.resize_with(r.planes(), Vec::new);
        }
        let failed = |source| Error::Request { reason: format!("read + decode reference: {source}") };
        let t0 = std::time::Instant::now();
        pool.install(|| {
            tasks
                .par_iter()
                .zip(frames.par_iter_mut())
                .try_for_each(|(&(row, r, d), f)| d.fetch_planes(row, r.levels.clone(), f))
        })
        .map_err(failed)?;
        let read = t0.elapsed();
        let slices = carve(out, tasks.iter().map(|&(_, r, _)| r.planes() * plane));
        let t1 = std::time::Instant::now();
        pool.install(|| {
            tasks
                .par_iter()
                .zip(frames.par_iter())
                .zip(slices.into_par_iter())
                .try_for_each(|((&(_, _, d), f), dest)| d.decode_planes(f, dest))
        })
        .map_err(failed)?;
        let compressed = frames.iter().flatten().map(Vec::len).sum::<usize>() as u64;
        Ok(ReadDecodeTimes { read, decode: t1.elapsed(), compressed_bytes: compressed })
    }
}
