//! `om4 synth`: a synthetic OM4-like dataset.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, ValueEnum};
use om4_store::{Codec, SynthConfig, SynthLayout, SynthPaths, ZarrFormat, synthesize};
use serde_json::json;

#[derive(Copy, Clone, Debug, ValueEnum)]
enum GridArg {
    #[value(name = "2deg")]
    Two,
    #[value(name = "1deg")]
    One,
    #[value(name = "0.25deg")]
    Quarter,
}

/// Write a synthetic OM4-like dataset (OM4.zarr, OM4_means.zarr, OM4_stds.zarr) under DIR.
#[derive(Args, Debug)]
pub(crate) struct SynthArgs {
    /// Output directory.
    dir: PathBuf,
    /// Grid resolution (overridden by --ny/--nx).
    #[arg(long, value_enum, default_value = "2deg")]
    grid: GridArg,
    #[arg(long)]
    ny: Option<usize>,
    #[arg(long)]
    nx: Option<usize>,
    /// Time steps (five days apart).
    #[arg(long, default_value_t = 73)]
    times: usize,
    /// Levels (1..=19).
    #[arg(long, default_value_t = 19)]
    levels: usize,
    #[arg(long, value_enum, default_value = "flat")]
    layout: LayoutArg,
    #[arg(long, value_enum, default_value = "v2")]
    format: FormatArg,
    /// none, blosc-lz4, blosc-zstd, blosc-blosclz, blosc-zlib, zstd, gzip.
    #[arg(long, default_value = "none")]
    codec: String,
    /// Time steps per chunk.
    #[arg(long, default_value_t = 1)]
    time_chunk: usize,
    /// Time steps per shard (v3).
    #[arg(long)]
    shard: Option<usize>,
    /// Do not write consolidated metadata (v2 .zmetadata, v3 consolidated_metadata in zarr.json).
    #[arg(long)]
    no_consolidated: bool,
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum LayoutArg {
    Flat,
    Compact,
}
#[derive(Copy, Clone, Debug, ValueEnum)]
enum FormatArg {
    V2,
    V3,
}

pub(crate) fn run(a: &SynthArgs) -> Result<()> {
    let (ny, nx) = match a.grid {
        GridArg::Two => (90, 180),
        GridArg::One => (180, 360),
        GridArg::Quarter => (720, 1440),
    };
    let codec: Codec =
        serde_json::from_value(json!(a.codec)).with_context(|| format!("unknown codec {:?}", a.codec))?;
    let cfg = SynthConfig {
        ny: a.ny.unwrap_or(ny),
        nx: a.nx.unwrap_or(nx),
        times: a.times,
        levels: a.levels,
        layout: match a.layout {
            LayoutArg::Flat => SynthLayout::Flat,
            LayoutArg::Compact => SynthLayout::Compact,
        },
        format: match a.format {
            FormatArg::V2 => ZarrFormat::V2,
            FormatArg::V3 => ZarrFormat::V3,
        },
        codec,
        time_chunk: a.time_chunk,
        shard: a.shard,
        consolidated: !a.no_consolidated,
        seed: a.seed,
    };
    let bar = indicatif::ProgressBar::new(0).with_style(
        indicatif::ProgressStyle::with_template("{spinner} writing arrays [{bar:30}] {pos}/{len} {elapsed}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    let paths: SynthPaths = synthesize(&a.dir, &cfg, |done, total| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    })?;
    bar.finish_and_clear();
    println!("wrote {}, {}, {}", paths.data.display(), paths.means.display(), paths.stds.display());
    Ok(())
}
