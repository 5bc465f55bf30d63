//! Normalization statistics computed from a store the way Samudra's are made: per channel, the
//! mean and population standard deviation (ddof 0) over every ocean cell (the channel's land mask
//! applied, NaN skipped) of every time step of a selection, and the statistics stores written from them.

use std::path::{Path, PathBuf};

use om4_batch::Precision;
use rayon::prelude::*;

use crate::channels::{Channel, ChannelSet};
use crate::error::{Error, Result};
use crate::location::StoreLocation;
use crate::meta::ZarrFormat;
use crate::store::{Om4Store, Selection};
use crate::store_writer::Codec;
use crate::store_writer::{StatEntry, WriteOptions, write_stat_store};
use crate::synth::SynthPaths;
use om4_batch::ReadPool;

/// One channel's statistics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChannelStats {
    /// Mean over the counted cells (NaN when none).
    pub mean: f64,
    /// Population standard deviation (ddof 0) over the counted cells (NaN when none).
    pub std: f64,
    /// Ocean cells counted, over all time steps.
    pub count: u64,
}

/// Sums of `x − shift` and `(x − shift)²` (the shift, the channel's first counted value, keeps
/// the variance free of cancellation for fields far from zero, such as salinity).
#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    shift: Option<f64>,
    n: u64,
    sum: f64,
    sum_sq: f64,
}

impl Sums {
    fn add(&mut self, x: f32) {
        let x = f64::from(x);
        let k = *self.shift.get_or_insert(x);
        let d = x - k;
        self.n += 1;
        self.sum += d;
        self.sum_sq += d * d;
    }

    fn finish(&self) -> ChannelStats {
        let Some(k) = self.shift else { return ChannelStats { mean: f64::NAN, std: f64::NAN, count: 0 } };
        let n = self.n as f64;
        let mean_d = self.sum / n;
        let var = (self.sum_sq / n - mean_d * mean_d).max(0.0);
        ChannelStats { mean: k + mean_d, std: var.sqrt(), count: self.n }
    }
}

/// Values of one read block: at most this many, so a block's buffer stays near 64 MB.
const BLOCK_VALUES: usize = 16 << 20;

/// The statistics of every channel of `set` over the time positions of `selection`, reading
/// blocks of time steps on `pool` and calling `progress(done, total)` with time steps done.
/// Each channel's sums run over times and cells in order, so the result does not depend on the
/// pool's size.
///
/// # Errors
/// Whatever loading the masks or reading a plane returns.
pub fn compute_statistics(
    store: &Om4Store,
    pool: &ReadPool,
    set: &ChannelSet,
    selection: &Selection,
    mut progress: impl FnMut(usize, usize),
) -> Result<Vec<ChannelStats>> {
    let masks = store.masks(set)?;
    let (channels, plane, total) = (set.len(), set.grid().plane(), selection.len());
    let block = (BLOCK_VALUES / (channels * plane).max(1)).clamp(1, total.max(1));
    let mut sums = vec![Sums::default(); channels];
    let mut buf = Vec::new();
    let mut t0 = 0;
    while t0 < total {
        let t1 = (t0 + block).min(total);
        let positions: Vec<usize> = (t0..t1).collect();
        buf.resize(positions.len() * channels * plane, 0.0);
        store.reader(pool, set, selection).read(&positions, &mut buf)?;
        let data = &buf;
        pool.install(|| {
            sums.par_iter_mut().enumerate().for_each(|(c, acc)| {
                let wet = masks.channel(c);
                for t in 0..positions.len() {
                    let values = &data[(t * channels + c) * plane..][..plane];
                    for (&x, &w) in values.iter().zip(wet) {
                        if w && !x.is_nan() {
                            acc.add(x);
                        }
                    }
                }
            });
        });
        progress(t1, total);
        t0 = t1;
    }
    Ok(sums.iter().map(Sums::finish).collect())
}

/// Writes `OM4_means.zarr` and `OM4_stds.zarr` under `dir` (replacing them) in the published
/// stores' form (Zarr v2, consolidated, uncompressed, float32), mirroring the data store's layout
/// as Samudra expects: a 0-d array per channel, except that a compact variable whose levels are
/// all given, in order, gets one `lev` vector named after the variable. `stats[i]` is
/// `(mean, std)` of `set`'s channel `i`. Returns the two stores' paths.
///
/// # Errors
/// [`Error::Request`] for a length mismatch or a non-finite statistic; [`Error::Write`] when a
/// file cannot be written.
pub fn write_statistics(dir: &Path, set: &ChannelSet, stats: &[(f32, f32)]) -> Result<(PathBuf, PathBuf)> {
    let bad = |reason: String| Error::Request { reason };
    let channels = set.channels();
    if channels.len() != stats.len() {
        return Err(bad(format!("{} channels but {} statistics", channels.len(), stats.len())));
    }
    if let Some((c, (m, s))) = channels.iter().zip(stats).find(|(_, (m, s))| !m.is_finite() || !s.is_finite()) {
        return Err(bad(format!("{}: mean {m}, std {s}: statistics must be finite", c.name)));
    }
    // Whole compact variables (levels 0..n in order, n = the array's level count) become vectors.
    let mut groups: Vec<(String, Vec<usize>, bool)> = Vec::new();
    let mut i = 0;
    while i < channels.len() {
        let c = &channels[i];
        let run = channels[i..].iter().take_while(|d| d.compact && d.array == c.array).count();
        let whole = c.compact
            && channels[i..i + run].iter().enumerate().all(|(k, d)| d.level == Some(k))
            && set.levels_of(&c.array) == Some(run);
        if whole {
            groups.push((c.array.clone(), (i..i + run).collect(), true));
            i += run;
        } else {
            groups.push((c.name.clone(), vec![i], false));
            i += 1;
        }
    }
    let paths = SynthPaths::under(dir);
    let cfg = WriteOptions { format: ZarrFormat::V2, codec: Codec::None, shard: None, consolidated: true };
    for (path, pick) in [(&paths.means, 0usize), (&paths.stds, 1usize)] {
        let value = |i: usize| if pick == 0 { stats[i].0 } else { stats[i].1 };
        let entries: Vec<StatEntry> = groups
            .iter()
            .map(|(name, idx, per_level)| StatEntry {
                name: name.clone(),
                values: idx.iter().map(|&i| value(i)).collect(),
                per_level: *per_level,
            })
            .collect();
        write_stat_store(path, cfg, &entries)?;
    }
    Ok((paths.means, paths.stds))
}

/// Normalization statistics (`OM4_means.zarr` or `OM4_stds.zarr`): a 0-d array per flat channel or
/// a `lev` vector per compact variable.
#[derive(Debug)]
pub struct StatsStore {
    store: Om4Store,
}

impl StatsStore {
    /// Opens a statistics store.
    ///
    /// # Errors
    /// As [`Om4Store::open`].
    pub fn open(root: impl AsRef<Path>) -> Result<Self> {
        Ok(Self { store: Om4Store::open(root)? })
    }

    /// Opens a statistics store at `location`, local or remote.
    ///
    /// # Errors
    /// As [`Om4Store::open_location`].
    pub fn open_location(location: &StoreLocation) -> Result<Self> {
        Ok(Self { store: Om4Store::open_location(location)? })
    }

    /// One value per channel of `set`, in order.
    ///
    /// # Errors
    /// [`Error::UnknownChannel`] when the statistics do not cover a channel; [`Error::Invalid`] for
    /// a statistic that is not a finite scalar.
    pub fn values(&self, set: &ChannelSet) -> Result<Vec<f32>> {
        Ok(self.values_with_precision(set)?.0.into_iter().map(|v| v as f32).collect())
    }

    /// One value per channel of `set`, as stored, and the precision Samudra normalizes with them:
    /// [`Precision::F64`] when any of them is stored as float64 (torch promotes float32 data to
    /// the statistics' dtype), else [`Precision::F32`].
    ///
    /// # Errors
    /// As [`values`](Self::values).
    pub fn values_with_precision(&self, set: &ChannelSet) -> Result<(Vec<f64>, Precision)> {
        let s = &self.store;
        let sources = set.channels.iter().map(|ch| self.source(ch)).collect::<Result<Vec<_>>>()?;
        // Each array is read once (a compact variable's `lev` vector serves all its levels), all
        // of them together: one round trip from a remote store.
        let mut names: Vec<&str> = sources.iter().map(|(name, _)| name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        let arrays = s.read_coords(&names)?;
        let mut wide = false;
        let mut values = Vec::with_capacity(sources.len());
        for (ch, (name, index)) in set.channels.iter().zip(&sources) {
            let v = arrays[name][*index];
            if !v.is_finite() {
                return Err(s.invalid(name, format!("statistic for {:?} is {v}", ch.name)));
            }
            wide |= s.arrays[name].dtype == "float64";
            values.push(v);
        }
        Ok((values, if wide { Precision::F64 } else { Precision::F32 }))
    }

    /// The array holding `ch`'s statistic, and the value's index in it.
    fn source(&self, ch: &Channel) -> Result<(String, usize)> {
        let s = &self.store;
        // A scalar under the channel's name (`thetao_4`), or under its array's legacy flat name
        // (`thetao_lev_40_0`, as Samudra's statistics of such stores are named), or a level vector.
        let mut candidates: Vec<(String, usize)> = vec![(ch.name.clone(), 0)];
        if !ch.compact && ch.array != ch.name {
            candidates.push((ch.array.clone(), 0));
        }
        if let Some(k) = ch.level {
            candidates.push((ch.var().to_string(), k));
        }
        for (name, index) in candidates {
            if let Some(e) = s.broken_error(&name) {
                return Err(e);
            }
            let Some(info) = s.arrays.get(&name) else {
                continue;
            };
            let n: u64 = info.shape.iter().product();
            let scalar = n == 1 && (name == ch.name || name == ch.array);
            let vector = info.shape.len() == 1 && !scalar && name == ch.var() && (index as u64) < info.shape[0];
            if scalar || vector {
                return Ok((name, if scalar { 0 } else { index }));
            }
        }
        Err(Error::UnknownChannel {
            store: s.root.clone(),
            channel: ch.name.clone(),
            reason: format!("no statistic (looked for a scalar {:?} or a level vector {:?})", ch.name, ch.var()),
        })
    }
}
