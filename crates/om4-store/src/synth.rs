//! Synthetic OM4-like stores: real variable names, 19 levels with the OM4 `lev` and `dz`, a noleap
//! five-day `time` axis from 1958-01-03 12:00, smooth plausible fields with NaN land that grows with
//! depth, land masks, and matching means/stds stores. Deterministic from a seed.

// Region lists name one range per dimension; a 1-D array's list has one range.
#![allow(clippy::single_range_in_vec_init)]

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::{Error, Result};
use crate::meta::ZarrFormat;
use crate::samudra::{DEPTH_VARS, DZ, LEV, SURFACE_VARS};
use crate::store_writer::{Codec, Spec, StatEntry, WriteOptions, Writer, write_stat_store};
use crate::zarr::Values;

/// Flat (`thetao_4`) or compact (`thetao(time, lev, y, x)`) arrays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SynthLayout {
    /// One array per channel.
    #[default]
    Flat,
    /// One array per variable, `(time, lev, y, x)`.
    Compact,
}

/// What to synthesize.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SynthConfig {
    /// Latitude rows (90 for 2°, 180 for 1°, 720 for 0.25°).
    pub ny: usize,
    /// Longitude columns.
    pub nx: usize,
    /// Time steps (five days apart).
    pub times: usize,
    /// Levels, at most 19 (fewer makes small test stores).
    pub levels: usize,
    /// Flat or compact.
    pub layout: SynthLayout,
    /// Zarr v2 or v3.
    pub format: ZarrFormat,
    /// Compression.
    pub codec: Codec,
    /// Time steps per chunk.
    pub time_chunk: usize,
    /// Time steps per shard (v3 only): chunks are then inner chunks of shards.
    pub shard: Option<usize>,
    /// Consolidated metadata: v2 `.zmetadata`, v3 `consolidated_metadata` in the root `zarr.json`
    /// (as zarr-python writes them).
    pub consolidated: bool,
    /// Seed of the small noise added to the smooth fields.
    pub seed: u64,
}

impl SynthConfig {
    /// How its arrays are written: format, codec, shards, consolidation.
    pub(crate) fn write_options(&self) -> WriteOptions {
        WriteOptions { format: self.format, codec: self.codec, shard: self.shard, consolidated: self.consolidated }
    }
}

impl Default for SynthConfig {
    fn default() -> Self {
        Self {
            ny: 90,
            nx: 180,
            times: 73,
            levels: 19,
            layout: SynthLayout::Flat,
            format: ZarrFormat::V2,
            codec: Codec::None,
            time_chunk: 1,
            shard: None,
            consolidated: true,
            seed: 0,
        }
    }
}

/// Paths of a synthesized dataset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SynthPaths {
    /// `OM4.zarr`.
    pub data: PathBuf,
    /// `OM4_means.zarr`.
    pub means: PathBuf,
    /// `OM4_stds.zarr`.
    pub stds: PathBuf,
}

impl SynthPaths {
    /// The paths `synthesize` writes under `dir`.
    pub fn under(dir: &Path) -> Self {
        Self { data: dir.join("OM4.zarr"), means: dir.join("OM4_means.zarr"), stds: dir.join("OM4_stds.zarr") }
    }
}

/// The small synthetic store the examples and `om4-train` train on when given none (the README's
/// first command): 3 levels (13 prognostic + 3 boundary channels), 32 × 64 cells, 146 five-day
/// steps, seed 1, written once under `dir` and reused after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DemoStore {
    /// The directory holding the three stores.
    pub dir: PathBuf,
}

impl DemoStore {
    /// The demo store in `$OM4_DEMO_DIR`, else in `target/om4-demo` under the current directory
    /// (found at run time, so a binary carried to another machine writes it there).
    pub fn locate() -> Self {
        let dir = std::env::var_os("OM4_DEMO_DIR").map_or_else(|| Path::new("target").join("om4-demo"), PathBuf::from);
        Self { dir }
    }

    /// The demo store's configuration.
    pub fn config() -> SynthConfig {
        SynthConfig { ny: 32, nx: 64, times: 146, levels: 3, seed: 1, ..SynthConfig::default() }
    }

    /// Its paths, whether written yet or not.
    pub fn paths(&self) -> SynthPaths {
        SynthPaths::under(&self.dir)
    }

    /// Whether a whole demo store is there (its marker is written after the stores).
    pub fn is_written(&self) -> bool {
        self.dir.join("complete").is_file()
    }

    /// Writes the store unless a whole one is there, and returns its paths. A write cut short
    /// leaves no marker, so the next call writes it again.
    ///
    /// # Errors
    /// [`Error::Write`] when the store or its marker cannot be written.
    pub fn ensure(&self) -> Result<SynthPaths> {
        if self.is_written() {
            return Ok(self.paths());
        }
        let paths = synthesize(&self.dir, &Self::config(), |_, _| {})?;
        let marker = self.dir.join("complete");
        std::fs::write(&marker, "").map_err(|e| Error::Write { path: marker.clone(), reason: e.to_string() })?;
        Ok(paths)
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Noise in [-1, 1).
fn noise(seed: u64, a: u64, b: u64) -> f32 {
    let h = splitmix(seed ^ splitmix(a ^ splitmix(b)));
    (h >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

struct Field {
    ny: usize,
    nx: usize,
}

impl Field {
    fn lat(&self, y: usize) -> f64 {
        -90.0 + (y as f64 + 0.5) * 180.0 / self.ny as f64
    }
    fn lon(&self, x: usize) -> f64 {
        (x as f64 + 0.5) * 360.0 / self.nx as f64
    }

    /// Ocean at level `k`: continents grow with depth, polar caps are land.
    fn wet(&self, k: usize, y: usize, x: usize) -> bool {
        let (lat, lon) = (self.lat(y).to_radians(), self.lon(x).to_radians());
        let continents = (2.0 * lon).sin() * lat.cos() + 0.4 * (3.0 * lat).cos() + 0.3 * (lon + 1.0).cos();
        let threshold = 0.9 - 0.06 * k as f64;
        continents < threshold && self.lat(y).abs() < 84.0 - k as f64
    }

    /// Mean state and seasonal amplitude of a variable at a cell.
    fn base(&self, var: &str, k: usize, y: usize, x: usize) -> (f64, f64) {
        let (lat, lon) = (self.lat(y).to_radians(), self.lon(x).to_radians());
        let depth = LEV[k.min(18)];
        let decay = (-depth / 800.0).exp();
        match var {
            "thetao" => (2.0 + 26.0 * lat.cos().powi(2) * decay, 1.5 * decay * lat.sin()),
            "so" => (34.6 + 0.8 * lat.cos() * decay - 0.3 * (2.0 * lon).sin() * decay, 0.1 * decay),
            "uo" => (0.2 * (3.0 * lat).cos() * decay, 0.05 * decay),
            "vo" => (0.05 * (2.0 * lon).sin() * lat.cos() * decay, 0.02 * decay),
            "zos" => (0.6 * lat.cos() - 0.4, 0.1 * lat.sin()),
            "tauuo" => (0.1 * (3.0 * lat).cos(), 0.03),
            "tauvo" => (0.02 * (2.0 * lon).cos(), 0.01),
            _ => (40.0 * lat.cos() - 20.0, 120.0 * lat.sin()),
        }
    }
}

/// Running mean and standard deviation (population, ddof 0) over ocean cells.
#[derive(Default, Clone, Copy)]
struct Moments {
    n: f64,
    sum: f64,
    sum_sq: f64,
}

impl Moments {
    fn add(&mut self, other: Self) {
        self.n += other.n;
        self.sum += other.sum;
        self.sum_sq += other.sum_sq;
    }
    fn mean_std(&self) -> (f32, f32) {
        let mean = self.sum / self.n.max(1.0);
        let var = (self.sum_sq / self.n.max(1.0) - mean * mean).max(0.0);
        (mean as f32, var.sqrt().max(1e-6) as f32)
    }
}

/// Writes `OM4.zarr`, `OM4_means.zarr` and `OM4_stds.zarr` under `dir` (replacing them), calling
/// `progress(done, total)` after each array.
///
/// # Errors
/// [`Error::Request`] for an impossible configuration; [`Error::Write`] when a file cannot be written.
pub fn synthesize(dir: &Path, cfg: &SynthConfig, mut progress: impl FnMut(usize, usize)) -> Result<SynthPaths> {
    let bad = |reason: String| Error::Request { reason };
    if cfg.ny == 0 || cfg.nx == 0 || cfg.times == 0 || cfg.time_chunk == 0 {
        return Err(bad("grid, times and time_chunk must be positive".into()));
    }
    if cfg.levels == 0 || cfg.levels > 19 {
        return Err(bad(format!("levels must be 1..=19, not {}", cfg.levels)));
    }
    if let Some(shard) = cfg.shard
        && (cfg.format != ZarrFormat::V3 || shard == 0 || !shard.is_multiple_of(cfg.time_chunk))
    {
        return Err(bad("sharding needs Zarr v3 and a shard that is a multiple of time_chunk".into()));
    }
    let paths = SynthPaths::under(dir);
    let (ny, nx, nt, nl) = (cfg.ny as u64, cfg.nx as u64, cfg.times, cfg.levels);
    let plane = cfg.ny * cfg.nx;
    let field = Field { ny: cfg.ny, nx: cfg.nx };
    let wet: Vec<Vec<bool>> =
        (0..nl).map(|k| (0..plane).map(|i| field.wet(k, i / cfg.nx, i % cfg.nx)).collect()).collect();
    let mut w = Writer::new(paths.data.clone(), cfg.write_options())?;
    let total = DEPTH_VARS.len() * if cfg.layout == SynthLayout::Flat { nl } else { 1 } + SURFACE_VARS.len() + 4;
    let mut done = 0;
    let mut tick = |progress: &mut dyn FnMut(usize, usize)| {
        done += 1;
        progress(done, total);
    };

    // Coordinates.
    let hours: Vec<i64> = (0..nt as i64).map(|k| 60 + 120 * k).collect();
    w.write(
        Spec {
            name: "time".into(),
            shape: vec![nt as u64],
            chunks: vec![nt as u64],
            dtype: "int64",
            dims: vec!["time"],
            attrs: json!({"units": "hours since 1958-01-01 00:00:00", "calendar": "noleap", "standard_name": "time"}),
            compressed: false,
        },
        |a| a.write(&[0..nt as u64], Values::I64(&hours)),
    )?;
    for (name, values) in [("lev", &LEV[..nl]), ("dz", &DZ[..nl])] {
        w.write(
            Spec {
                name: name.into(),
                shape: vec![nl as u64],
                chunks: vec![nl as u64],
                dtype: "float64",
                dims: vec!["lev"],
                attrs: json!({"units": "m"}),
                compressed: false,
            },
            |a| a.write(&[0..nl as u64], Values::F64(values)),
        )?;
    }
    let ys: Vec<f64> = (0..cfg.ny).map(|y| field.lat(y)).collect();
    let xs: Vec<f64> = (0..cfg.nx).map(|x| field.lon(x)).collect();
    for (name, values) in [("y", &ys), ("x", &xs)] {
        w.write(
            Spec {
                name: name.into(),
                shape: vec![values.len() as u64],
                chunks: vec![values.len() as u64],
                dtype: "float64",
                dims: vec![if name == "y" { "y" } else { "x" }],
                attrs: json!({}),
                compressed: false,
            },
            |a| a.write(&[0..values.len() as u64], Values::F64(values)),
        )?;
    }
    tick(&mut progress);

    // Masks.
    match cfg.layout {
        SynthLayout::Flat => {
            for (k, m) in wet.iter().enumerate() {
                w.write(
                    Spec {
                        name: format!("mask_{k}"),
                        shape: vec![ny, nx],
                        chunks: vec![ny, nx],
                        dtype: "bool",
                        dims: vec!["y", "x"],
                        attrs: json!({"description": "0 if land, 1 if ocean"}),
                        compressed: false,
                    },
                    |a| a.write(&[0..ny, 0..nx], Values::Bool(m)),
                )?;
            }
        }
        SynthLayout::Compact => {
            let all: Vec<bool> = wet.concat();
            w.write(
                Spec {
                    name: "wetmask".into(),
                    shape: vec![nl as u64, ny, nx],
                    chunks: vec![nl as u64, ny, nx],
                    dtype: "bool",
                    dims: vec!["lev", "y", "x"],
                    attrs: json!({}),
                    compressed: false,
                },
                |a| a.write(&[0..nl as u64, 0..ny, 0..nx], Values::Bool(&all)),
            )?;
        }
    }
    tick(&mut progress);

    // Data. Blocks of whole chunks (or shards) along time, about 64 MB each.
    let step = cfg.shard.unwrap_or(cfg.time_chunk);
    let levels_per_array = if cfg.layout == SynthLayout::Compact { nl } else { 1 };
    let per_step = step * plane * levels_per_array * 4;
    let block = step * (64 << 20) / per_step.max(1);
    let block = block.max(step);
    let mut stats: Vec<(String, String, usize, Option<usize>, Moments)> = Vec::new(); // (channel, var, level index, level, moments)
    let gen_block = |var: &str, var_id: u64, levels: &[usize], t0: usize, t1: usize| -> (Vec<f32>, Vec<Moments>) {
        let bases: Vec<(Vec<f64>, Vec<f64>)> = levels
            .iter()
            .map(|&k| {
                let (m, a): (Vec<f64>, Vec<f64>) =
                    (0..plane).map(|i| field.base(var, k, i / cfg.nx, i % cfg.nx)).unzip();
                (m, a)
            })
            .collect();
        let nlv = levels.len();
        let mut out = vec![0f32; (t1 - t0) * nlv * plane];
        let moments: Vec<Vec<Moments>> = out
            .par_chunks_mut(nlv * plane)
            .enumerate()
            .map(|(dt, chunk)| {
                let t = t0 + dt;
                let season = (2.0 * std::f64::consts::PI * t as f64 / 73.0).sin();
                let mut m = vec![Moments::default(); nlv];
                for (li, (&k, plane_out)) in levels.iter().zip(chunk.chunks_exact_mut(plane)).enumerate() {
                    let (mean, amp) = &bases[li];
                    let mask_k = if DEPTH_VARS.contains(&var) { k } else { 0 };
                    for (i, v) in plane_out.iter_mut().enumerate() {
                        if !wet[mask_k][i] {
                            *v = f32::NAN;
                            continue;
                        }
                        let n = noise(cfg.seed, (var_id << 40) ^ ((k as u64) << 32) ^ t as u64, i as u64);
                        let x = (mean[i] + amp[i] * season) as f32 + n * (0.02 * amp[i].abs() as f32 + 1e-3);
                        *v = x;
                        m[li].n += 1.0;
                        m[li].sum += f64::from(x);
                        m[li].sum_sq += f64::from(x) * f64::from(x);
                    }
                }
                m
            })
            .collect();
        let mut total = vec![Moments::default(); nlv];
        for m in moments {
            for (a, b) in total.iter_mut().zip(m) {
                a.add(b);
            }
        }
        (out, total)
    };

    let data_attrs = |var: &str| json!({"long_name": var});
    let write_var =
        |w: &mut Writer, name: String, var: &str, levels: Vec<usize>, compact: bool| -> Result<Vec<Moments>> {
            // The noise depends on the variable, level, time and cell only, so every layout, format and
            // codec of one seed holds the same values.
            let id = DEPTH_VARS.iter().chain(&SURFACE_VARS).position(|v| *v == var).unwrap_or(0) as u64 + 1;
            let (shape, chunks, dims) = if compact {
                (
                    vec![nt as u64, nl as u64, ny, nx],
                    vec![cfg.time_chunk as u64, nl as u64, ny, nx],
                    vec!["time", "lev", "y", "x"],
                )
            } else {
                (vec![nt as u64, ny, nx], vec![cfg.time_chunk as u64, ny, nx], vec!["time", "y", "x"])
            };
            let mut moments = vec![Moments::default(); levels.len()];
            let spec = Spec { name, shape, chunks, dtype: "float32", dims, attrs: data_attrs(var), compressed: true };
            w.write(spec, |a| {
                let mut t0 = 0;
                while t0 < nt {
                    let t1 = (t0 + block).min(nt);
                    let (values, m) = gen_block(var, id, &levels, t0, t1);
                    for (acc, x) in moments.iter_mut().zip(m) {
                        acc.add(x);
                    }
                    let ranges: Vec<std::ops::Range<u64>> = if compact {
                        vec![t0 as u64..t1 as u64, 0..nl as u64, 0..ny, 0..nx]
                    } else {
                        vec![t0 as u64..t1 as u64, 0..ny, 0..nx]
                    };
                    a.write(&ranges, Values::F32(&values))?;
                    t0 = t1;
                }
                Ok(())
            })?;
            Ok(moments)
        };
    for var in DEPTH_VARS {
        match cfg.layout {
            SynthLayout::Flat => {
                for k in 0..nl {
                    let m = write_var(&mut w, format!("{var}_{k}"), var, vec![k], false)?;
                    stats.push((format!("{var}_{k}"), var.to_string(), k, Some(k), m[0]));
                    tick(&mut progress);
                }
            }
            SynthLayout::Compact => {
                let m = write_var(&mut w, var.to_string(), var, (0..nl).collect(), true)?;
                for (k, mk) in m.into_iter().enumerate() {
                    stats.push((format!("{var}_{k}"), var.to_string(), k, Some(k), mk));
                }
                tick(&mut progress);
            }
        }
    }
    for var in SURFACE_VARS {
        let m = write_var(&mut w, var.to_string(), var, vec![0], false)?;
        stats.push((var.to_string(), var.to_string(), 0, None, m[0]));
        tick(&mut progress);
    }
    w.finish()?;

    // Statistics stores: scalars per flat channel, `lev` vectors per compact variable.
    for (path, pick) in [(&paths.means, 0usize), (&paths.stds, 1usize)] {
        let value = |m: &Moments| if pick == 0 { m.mean_std().0 } else { m.mean_std().1 };
        let mut entries = Vec::new();
        for (channel, var, _, level, m) in &stats {
            // flat stores: a scalar per channel; compact stores: a scalar per level-free channel
            if cfg.layout == SynthLayout::Flat || level.is_none() {
                entries.push(StatEntry { name: channel.clone(), values: vec![value(m)], per_level: false });
            } else if *level == Some(0) {
                let values = stats.iter().filter(|s| s.1 == *var).map(|s| value(&s.4)).collect();
                entries.push(StatEntry { name: var.clone(), values, per_level: true });
            }
        }
        write_stat_store(path, cfg.write_options(), &entries)?;
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The demo store is written once; a store cut short (no marker) is written again whole.
    #[test]
    fn the_demo_store_is_written_once_and_a_partial_one_again() {
        let tmp = tempfile::tempdir().unwrap();
        let demo = DemoStore { dir: tmp.path().join("demo") };
        assert!(!demo.is_written());
        let paths = demo.ensure().unwrap();
        assert_eq!(paths, demo.paths());
        assert!(demo.is_written());
        let store = crate::Om4Store::open(&paths.data).unwrap();
        assert_eq!(store.time().unwrap().len(), DemoStore::config().times);

        // A second call reads nothing new: a file put beside the store survives it.
        let witness = paths.data.join("witness");
        std::fs::write(&witness, "").unwrap();
        demo.ensure().unwrap();
        assert!(witness.exists());

        // Without the marker (a write cut short) the store is written again, replacing it.
        std::fs::remove_file(demo.dir.join("complete")).unwrap();
        demo.ensure().unwrap();
        assert!(demo.is_written() && !witness.exists());
    }
}
