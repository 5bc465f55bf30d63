//! Reading planes into caller buffers: one task per (time, run of channels in one array),
//! fanned out over the read pool, each decoding straight into its part of the output.

use std::ops::Range;

use rayon::prelude::*;

use crate::channels::{ChannelSet, OpenArray, RunSpec};
use crate::error::{BoxError, Error, Result};
use crate::store::{Om4Store, Selection};
use crate::zarr::{self, Axes};
use om4_batch::ReadPool;

/// Waves of a remote read whose requests are in flight while one decodes.
#[cfg(feature = "s3")]
const WAVES_AHEAD: usize = 3;

/// Splits `out` into consecutive slices of the given lengths (one per task), so that parallel
/// tasks each own their part.
pub(crate) fn carve(out: &mut [f32], lens: impl Iterator<Item = usize>) -> Vec<&mut [f32]> {
    let mut rest = out;
    lens.map(|n| {
        let (head, tail) = std::mem::take(&mut rest).split_at_mut(n);
        rest = tail;
        head
    })
    .collect()
}

/// Reads one channel set's planes at positions of a time selection, on a read pool: made once by
/// [`Om4Store::reader`], used for every read.
#[derive(Debug, Clone, Copy)]
pub struct Reader<'a> {
    store: &'a Om4Store,
    pool: &'a ReadPool,
    set: &'a ChannelSet,
    selection: &'a Selection,
}

impl Reader<'_> {
    /// The channels read.
    pub fn set(&self) -> &ChannelSet {
        self.set
    }

    /// The time selection positions count in.
    pub fn selection(&self) -> &Selection {
        self.selection
    }

    /// Values `positions` planes of every channel fill: what `out` must hold.
    pub fn len_of(&self, positions: usize) -> usize {
        positions * self.set.len() * self.set.grid().plane()
    }

    /// Reads planes: for each time position (in the selection) and each channel, one plane,
    /// into `out` laid out `(positions, channels, y, x)`. Reads fan out over the pool.
    ///
    /// # Errors
    /// [`Error::Request`] (before anything is read) when `out` has the wrong length, a position is
    /// outside the selection or the selection outside the arrays; [`Error::Read`] naming the array
    /// and time row of a plane that failed to decode. On error `out` is partly written, and no
    /// thread writes it after this returns.
    pub fn read(&self, positions: &[usize], out: &mut [f32]) -> Result<()> {
        self.store.read_planes(self.pool, self.set, self.selection, positions, out)
    }
}

impl Om4Store {
    /// A reader of `set`'s planes at positions of `selection`, fanned out over `pool`.
    pub fn reader<'a>(&'a self, pool: &'a ReadPool, set: &'a ChannelSet, selection: &'a Selection) -> Reader<'a> {
        Reader { store: self, pool, set, selection }
    }

    /// Reads planes: for each time position (in `selection`) and each channel of `set`, one plane,
    /// into `out` laid out `(positions, channels, y, x)`. Reads fan out over `pool`.
    ///
    /// # Errors
    /// [`Error::Request`] (before anything is read) when `out` has the wrong length, a position is
    /// outside the selection or the selection outside the arrays; [`Error::Read`] naming the array
    /// and time row of a plane that failed to decode. On error `out` is partly written, and no
    /// thread writes it after this returns.
    pub(crate) fn read_planes(
        &self,
        pool: &ReadPool,
        set: &ChannelSet,
        selection: &Selection,
        positions: &[usize],
        out: &mut [f32],
    ) -> Result<()> {
        let plane = set.grid.plane();
        let expected = positions.len().checked_mul(set.len() * plane);
        if expected != Some(out.len()) {
            let expected = expected.map_or_else(|| "more than a usize counts".to_string(), |n| n.to_string());
            return Err(Error::Request {
                reason: format!(
                    "output holds {} values, but {} positions × {} channels × {}×{} planes need {expected}",
                    out.len(),
                    positions.len(),
                    set.len(),
                    set.grid.y,
                    set.grid.x
                ),
            });
        }
        if selection.rows.end > set.time_len {
            return Err(Error::Request {
                reason: format!(
                    "selection rows {:?} exceed the {} time steps of the arrays",
                    selection.rows, set.time_len
                ),
            });
        }
        if let Some((i, &p)) = positions.iter().enumerate().find(|(_, p)| **p >= selection.len()) {
            return Err(Error::Request {
                reason: format!("position {p} (entry {i}) is outside the selection of {} time steps", selection.len()),
            });
        }
        // One task per (position, run): a contiguous block of output planes. Carving `out` in
        // task order gives each task its own slice, so the parallel loop needs no shared view.
        let mut tasks: Vec<(u64, &RunSpec)> = Vec::with_capacity(positions.len() * set.runs.len());
        for &p in positions {
            for r in &set.runs {
                tasks.push(((selection.rows.start + p) as u64, r));
            }
        }
        let slices = carve(out, tasks.iter().map(|&(_, r)| r.planes() * plane));
        let (ny, nx) = (set.grid.y as u64, set.grid.x as u64);
        let _span =
            tracing::debug_span!("om4_read", planes = positions.len() * set.len(), tasks = tasks.len()).entered();
        let decode = |&(row, r): &(u64, &RunSpec), dest: &mut [f32]| {
            let a = &set.arrays[r.array];
            let levels = r.levels.clone();
            let result = match &a.direct {
                Some(direct) => direct.read_planes(row, levels.clone(), dest),
                None => zarr::read_planes_into(&a.array, a.axes, row, levels.clone(), dest, ny, nx),
            };
            result.map_err(|source| self.read_error(a, row, &levels, source))
        };
        #[cfg(feature = "s3")]
        if let Some(remote) = self.fs.remote() {
            return self.read_prefetched(remote, pool, set, &tasks, slices, decode);
        }
        pool.install(|| tasks.par_iter().zip(slices.into_par_iter()).try_for_each(|(t, dest)| decode(t, dest)))
    }

    fn read_error(&self, a: &OpenArray, row: u64, levels: &Range<u64>, source: BoxError) -> Error {
        Error::Read {
            store: self.root.clone(),
            array: a.name.clone(),
            row,
            level: if a.axes == Axes::TimeYX { String::new() } else { format!(", levels {levels:?}") },
            source,
        }
    }

    /// The remote read, in waves of `concurrency / 2` tasks taken in (array, level, time) order, so
    /// that the inner chunks of one shard fall in one wave and merge into one request. In a wave
    /// every waiting task tries to decode on the pool, then the requests they lacked are fetched
    /// together, until all are decoded (see `remote`'s module docs). The requests of the next
    /// [`WAVES_AHEAD`] waves are in flight while a wave decodes, so decoding overlaps fetching
    /// within one read; at most `WAVES_AHEAD + 1` waves' compressed chunks are held at once.
    #[cfg(feature = "s3")]
    fn read_prefetched(
        &self,
        remote: &std::sync::Arc<crate::remote::Remote>,
        pool: &ReadPool,
        set: &ChannelSet,
        tasks: &[(u64, &RunSpec)],
        slices: Vec<&mut [f32]>,
        decode: impl Fn(&(u64, &RunSpec), &mut [f32]) -> Result<()> + Sync,
    ) -> Result<()> {
        use crate::remote::{MAX_ROUNDS, Prefetch};
        use std::collections::VecDeque;
        use std::sync::Arc;

        struct Wave<'t, 'o> {
            tasks: Vec<(u64, &'t RunSpec)>,
            slices: Vec<&'o mut [f32]>,
            done: Vec<bool>,
            prefetch: Arc<Prefetch>,
        }
        // One attempt of every waiting task of `wave`.
        let attempt = |wave: &mut Wave<'_, '_>| -> Result<()> {
            let prefetch = &wave.prefetch;
            pool.install(|| {
                wave.tasks
                    .par_iter()
                    .zip(wave.slices.par_iter_mut())
                    .zip(wave.done.par_iter_mut())
                    .enumerate()
                    .try_for_each(|(i, ((task, dest), done))| {
                        if *done {
                            return Ok(());
                        }
                        let (result, waited) = prefetch.attempt(i, || decode(task, dest));
                        if !waited {
                            result?;
                            *done = true;
                        }
                        Ok(())
                    })
            })
        };
        let failed = |wave: &Wave<'_, '_>, tag: usize, e: BoxError| {
            let (row, r) = wave.tasks[tag.min(wave.tasks.len() - 1)];
            self.read_error(&set.arrays[r.array], row, &r.levels, e)
        };
        let mut order: Vec<usize> = (0..tasks.len()).collect();
        order.sort_by_key(|&i| (tasks[i].1.array, tasks[i].1.levels.start, tasks[i].0));
        let mut slots: Vec<Option<&mut [f32]>> = slices.into_iter().map(Some).collect();
        let size = (remote.concurrency() / 2).max(1);
        let mut waves: Vec<Wave<'_, '_>> = order
            .chunks(size)
            .map(|chunk| Wave {
                tasks: chunk.iter().map(|&i| tasks[i]).collect(),
                slices: chunk.iter().map(|&i| slots[i].take().expect("each task once")).collect(),
                done: vec![false; chunk.len()],
                prefetch: remote.prefetch(),
            })
            .collect();
        // Waves' first requests go out in wave order, WAVES_AHEAD ahead of the wave decoding.
        let mut ahead = VecDeque::with_capacity(WAVES_AHEAD);
        for wave in waves.iter_mut().take(WAVES_AHEAD) {
            attempt(wave)?;
            ahead.push_back(remote.start_fetch(&wave.prefetch));
        }
        for k in 0..waves.len() {
            if let Some(fetching) = ahead.pop_front() {
                let _fetch = tracing::debug_span!("om4_fetch_wait", wave = k).entered();
                fetching.wait().map_err(|(tag, e)| failed(&waves[k], tag, e.into()))?;
            }
            if let Some(next) = waves.get_mut(k + WAVES_AHEAD) {
                attempt(next)?;
                ahead.push_back(remote.start_fetch(&next.prefetch));
            }
            let current = &mut waves[k];
            for round in 0.. {
                attempt(current)?;
                if current.prefetch.pending() == 0 {
                    break;
                }
                if round == MAX_ROUNDS {
                    let tag = current.done.iter().position(|d| !d).unwrap_or(0);
                    let reason = format!("still waiting for requests after {MAX_ROUNDS} rounds of fetches");
                    return Err(failed(current, tag, reason.into()));
                }
                let _fetch = tracing::debug_span!("om4_fetch", wave = k, round).entered();
                remote.fetch_pending(&current.prefetch).map_err(|(tag, e)| failed(current, tag, e.into()))?;
            }
            debug_assert!(current.done.iter().all(|d| *d));
            current.prefetch = remote.prefetch(); // this wave's chunks are decoded: let them go
        }
        Ok(())
    }
}
