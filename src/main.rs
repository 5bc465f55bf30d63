//! `om4`: inspect, validate, dump, synthesize and benchmark OM4 Zarr stores, and print epoch schedules.

mod bench;
mod npy;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use om4_batch::{BatchPlan, Ddp, Roles, SampleSpace, Schedule, WindowSpec};
use om4_store::{Om4Store, ReadPool, SynthCodec, SynthConfig, SynthFormat, SynthLayout, SynthPaths, synthesize};
use serde_json::json;

#[derive(Parser, Debug)]
#[command(name = "om4", version, about = "Inspect, validate, dump, synthesize and benchmark OM4 Zarr stores")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Layout, format, grid, time range, channels, codecs, chunking, masks, statistics and problems.
    Inspect {
        /// Store root (e.g. OM4.zarr).
        store: PathBuf,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Exit 0 when the channels can be read by om4, else 1 with the reasons.
    Validate {
        /// Store root.
        store: PathBuf,
        /// Comma-separated channels (default: every channel the store offers).
        #[arg(long, value_delimiter = ',')]
        channels: Vec<String>,
    },
    /// Write planes to a little-endian float32 .npy of shape (times, channels, y, x).
    Dump {
        /// Store root.
        store: PathBuf,
        /// Comma-separated channels.
        #[arg(long, value_delimiter = ',', required = true)]
        channels: Vec<String>,
        /// Comma-separated physical time indices.
        #[arg(long, value_delimiter = ',', required = true)]
        times: Vec<usize>,
        /// Output file.
        #[arg(long)]
        out: PathBuf,
    },
    /// Write a synthetic OM4-like dataset (OM4.zarr, OM4_means.zarr, OM4_stds.zarr) under DIR.
    Synth(SynthArgs),
    /// Compute normalization statistics the way Samudra's are made (per channel: mean and
    /// population std over every ocean cell of every selected time step) and write
    /// OM4_means.zarr and OM4_stds.zarr under --out.
    Stats {
        /// Store root.
        store: PathBuf,
        /// Output directory for OM4_means.zarr and OM4_stds.zarr.
        #[arg(long)]
        out: PathBuf,
        /// Replace OM4_means.zarr and OM4_stds.zarr if --out already holds them.
        #[arg(long)]
        force: bool,
        /// Comma-separated channels (default: all).
        #[arg(long, value_delimiter = ',')]
        channels: Vec<String>,
        /// First date of the time range (inclusive), e.g. 1958-01-01.
        #[arg(long)]
        start: Option<String>,
        /// End date of the time range (exclusive).
        #[arg(long)]
        end: Option<String>,
        /// Read threads (default: available cores).
        #[arg(long)]
        threads: Option<usize>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        what: BenchCommand,
    },
    /// Print the batches of one epoch (sample indices and the time positions they read).
    Schedule(ScheduleArgs),
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Read random windows of consecutive steps × all channels into one reused buffer.
    Read(bench::ReadArgs),
    /// Build Samudra training batches on the host: deduplicated reads, normalization, masks, gather.
    Batch(bench::BatchArgs),
}

#[derive(Copy, Clone, Debug, ValueEnum)]
enum GridArg {
    #[value(name = "2deg")]
    Two,
    #[value(name = "1deg")]
    One,
    #[value(name = "0.25deg")]
    Quarter,
}

#[derive(Args, Debug)]
struct SynthArgs {
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
    /// Do not write .zmetadata (v2).
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

#[derive(Args, Debug)]
struct ScheduleArgs {
    /// Time positions in the selection.
    #[arg(long)]
    len: usize,
    #[arg(long, default_value_t = 1)]
    history: usize,
    #[arg(long, default_value_t = 4)]
    steps: usize,
    #[arg(long, default_value_t = 1)]
    stride: usize,
    #[arg(long, default_value_t = 4)]
    batch_size: usize,
    #[arg(long, default_value_t = 15)]
    seed: u64,
    /// Epoch (Samudra counts from 1).
    #[arg(long, default_value_t = 1)]
    epoch: u64,
    #[arg(long)]
    world_size: Option<usize>,
    #[arg(long, default_value_t = 0)]
    rank: usize,
    /// Validation sampler (steps = 1, nothing dropped).
    #[arg(long)]
    validation: bool,
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Inspect { store, json } => inspect(&store, json).map(|()| ExitCode::SUCCESS),
        Command::Validate { store, channels } => validate(&store, &channels),
        Command::Dump { store, channels, times, out } => {
            dump(&store, &channels, &times, &out).map(|()| ExitCode::SUCCESS)
        }
        Command::Synth(args) => synth(args).map(|()| ExitCode::SUCCESS),
        Command::Stats { store, out, force, channels, start, end, threads, json } => {
            stats(&store, &out, force, &channels, (start.as_deref(), end.as_deref()), threads, json)
                .map(|()| ExitCode::SUCCESS)
        }
        Command::Bench { what: BenchCommand::Read(args) } => bench::read(&args).map(|()| ExitCode::SUCCESS),
        Command::Bench { what: BenchCommand::Batch(args) } => bench::batch(&args).map(|()| ExitCode::SUCCESS),
        Command::Schedule(args) => schedule(&args).map(|()| ExitCode::SUCCESS),
    }
}

/// Every channel's validation problem, by trying each channel alone; with `all`, also every array
/// whose metadata om4 cannot use (no channel name reaches those).
fn problems(store: &Om4Store, channels: &[String], all: bool) -> Vec<String> {
    let mut out: Vec<String> = if all {
        store.broken_arrays().iter().map(|(name, reason)| format!("array {name:?}: {reason}")).collect()
    } else {
        Vec::new()
    };
    out.extend(channels.iter().filter_map(|c| store.channels(&[c]).err().map(|e| e.to_string())));
    if out.is_empty()
        && !channels.is_empty()
        && let Err(e) = store.channels(channels)
    {
        out.push(e.to_string());
    }
    out
}

fn inspect(path: &Path, as_json: bool) -> Result<()> {
    let store = Om4Store::open(path)?;
    let channels = store.channel_names();
    let problems = problems(&store, &channels, true);
    let arrays = store.arrays();
    let data: Vec<_> = arrays.values().filter(|a| a.shape.len() >= 3).collect();
    let mut formats: Vec<String> = arrays.values().map(|a| format!("{:?}", a.format).to_lowercase()).collect();
    formats.sort();
    formats.dedup();
    let mut codecs: Vec<&str> = data.iter().map(|a| a.codecs.as_str()).collect();
    codecs.sort_unstable();
    codecs.dedup();
    let mut chunks: Vec<String> = data.iter().map(|a| format!("{:?}", a.chunks)).collect();
    chunks.sort();
    chunks.dedup();
    let grid = data.first().map(|a| {
        let n = a.shape.len();
        (a.shape[n - 2], a.shape[n - 1])
    });
    let time = store.time().map(|t| {
        let first_last = t.instants.as_ref().map(|i| (i[0].to_string(), i[i.len() - 1].to_string()));
        json!({"steps": t.len(), "units": t.units, "calendar": t.calendar(), "first": first_last.as_ref().map(|f| &f.0), "last": first_last.as_ref().map(|f| &f.1)})
    });
    let masks: Vec<&String> = arrays.keys().filter(|k| k.starts_with("mask_") || *k == "wetmask").collect();
    let parent = path.parent().unwrap_or(Path::new("."));
    let stats: Vec<String> = ["OM4_means.zarr", "OM4_stds.zarr"]
        .iter()
        .filter(|s| parent.join(s).is_dir())
        .map(|s| (*s).to_string())
        .collect();
    let report = json!({
        "store": path, "layout": store.layout(), "formats": formats, "grid": grid.map(|(y, x)| json!({"y": y, "x": x})),
        "time": time, "channels": channels, "codecs": codecs, "chunks": chunks, "masks": masks,
        "levels": store.levels(), "statistics": stats, "problems": problems,
    });
    if as_json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("store      {}", path.display());
    println!("layout     {:?}, zarr {}", store.layout(), formats.join("+"));
    if let Some((y, x)) = grid {
        println!("grid       {y} × {x}");
    }
    match store.time() {
        Some(t) => match &t.instants {
            Some(i) => println!(
                "time       {} steps, {} .. {} ({:?} calendar)",
                t.len(),
                i[0],
                i[i.len() - 1],
                t.calendar().expect("decoded")
            ),
            None => println!("time       {} steps (no CF units: positions only)", t.len()),
        },
        None => println!("time       no time coordinate"),
    }
    println!("channels   {} ({})", channels.len(), abbreviate(&channels));
    println!("codecs     {}", codecs.join("; "));
    println!("chunks     {}", chunks.join("; "));
    println!("masks      {}", if masks.is_empty() { "none".to_string() } else { format!("{} arrays", masks.len()) });
    println!("statistics {}", if stats.is_empty() { "none beside the store".to_string() } else { stats.join(", ") });
    if problems.is_empty() {
        println!("problems   none");
    } else {
        println!("problems   {}", problems.len());
        for p in &problems {
            println!("  - {p}");
        }
    }
    Ok(())
}

fn abbreviate(names: &[String]) -> String {
    if names.len() <= 8 {
        return names.join(", ");
    }
    format!("{}, …, {}", names[..4].join(", "), names[names.len() - 2..].join(", "))
}

fn validate(path: &Path, channels: &[String]) -> Result<ExitCode> {
    let store = Om4Store::open(path)?;
    let all = channels.is_empty();
    let channels = if all { store.channel_names() } else { channels.to_vec() };
    let problems = problems(&store, &channels, all);
    if problems.is_empty() {
        println!("ok: {} channels readable", channels.len());
        Ok(ExitCode::SUCCESS)
    } else {
        for p in &problems {
            eprintln!("invalid: {p}");
        }
        Ok(ExitCode::FAILURE)
    }
}

fn dump(path: &Path, channels: &[String], times: &[usize], out: &Path) -> Result<()> {
    let store = Om4Store::open(path)?;
    let set = store.channels(channels)?;
    let grid = set.grid();
    let mut buf = vec![0f32; times.len() * set.len() * grid.plane()];
    let sel = set.all_rows();
    store.read_into(&ReadPool::new(num_threads())?, &set, &sel, times, &mut buf)?;
    npy::write_f32(out, &[times.len(), set.len(), grid.y, grid.x], &buf)
        .with_context(|| format!("writing {}", out.display()))?;
    println!("wrote {} ({} × {} × {} × {})", out.display(), times.len(), set.len(), grid.y, grid.x);
    Ok(())
}

pub(crate) fn num_threads() -> usize {
    std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get)
}

fn synth(a: SynthArgs) -> Result<()> {
    let (ny, nx) = match a.grid {
        GridArg::Two => (90, 180),
        GridArg::One => (180, 360),
        GridArg::Quarter => (720, 1440),
    };
    let codec: SynthCodec =
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
            FormatArg::V2 => SynthFormat::V2,
            FormatArg::V3 => SynthFormat::V3,
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

fn stats(
    path: &Path,
    out: &Path,
    force: bool,
    channels: &[String],
    (start, end): (Option<&str>, Option<&str>),
    threads: Option<usize>,
    as_json: bool,
) -> Result<()> {
    // Before any work: published statistics are not replaced by accident.
    if let Some(existing) =
        ["OM4_means.zarr", "OM4_stds.zarr"].iter().map(|n| out.join(n)).find(|p| p.exists()).filter(|_| !force)
    {
        bail!("{} exists; pass --force to replace it", existing.display());
    }
    let store = Om4Store::open(path)?;
    let channels = if channels.is_empty() { store.channel_names() } else { channels.to_vec() };
    let set = store.channels(&channels)?;
    let sel = store.select(start, end)?;
    if sel.is_empty() {
        bail!("the time range holds no time step");
    }
    let pool = ReadPool::new(threads.unwrap_or_else(num_threads))?;
    let bar = indicatif::ProgressBar::new(sel.len() as u64).with_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} reading time steps [{bar:30}] {pos}/{len} {elapsed} (eta {eta})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let computed = om4_store::compute_statistics(&store, &pool, &set, &sel, |done, _| bar.set_position(done as u64))?;
    bar.finish_and_clear();
    if let Some((name, _)) = channels.iter().zip(&computed).find(|(_, s)| s.count == 0) {
        bail!("channel {name} has no ocean cell in the selected time steps: no statistics to write");
    }
    for (name, s) in channels.iter().zip(&computed).filter(|(_, s)| s.std == 0.0) {
        eprintln!("warning: channel {name} is constant ({}): its std is 0", s.mean);
    }
    let pairs: Vec<(f32, f32)> = computed.iter().map(|s| (s.mean as f32, s.std as f32)).collect();
    let (means, stds) = om4_store::write_statistics(out, &set, &pairs)?;
    if as_json {
        let rows: Vec<_> = channels
            .iter()
            .zip(&computed)
            .map(|(c, s)| json!({"channel": c, "mean": s.mean, "std": s.std, "count": s.count}))
            .collect();
        println!("{}", json!({"time_steps": sel.len(), "means": means, "stds": stds, "channels": rows}));
    } else {
        println!(
            "{} channels over {} time steps: wrote {} and {}",
            channels.len(),
            sel.len(),
            means.display(),
            stds.display()
        );
    }
    Ok(())
}

fn schedule(a: &ScheduleArgs) -> Result<()> {
    let steps = if a.validation { 1 } else { a.steps };
    let spec = WindowSpec::new(a.history, steps, a.stride)?;
    let space = SampleSpace::single(spec, a.len)?;
    let ddp = a.world_size.map(|w| Ddp { world_size: w, rank: a.rank });
    let sched = if a.validation {
        Schedule::validation(a.batch_size, a.seed, ddp)?
    } else {
        Schedule::training(a.batch_size, a.seed, ddp)?
    };
    let batches = sched.epoch(&space.groups(), a.epoch);
    if a.json {
        println!("{}", json!({"samples": space.len(), "batches": batches}));
        return Ok(());
    }
    println!(
        "{} samples, {} batches (history {}, steps {steps}, stride {}, batch {}, seed {}, epoch {})",
        space.len(),
        batches.len(),
        a.history,
        a.stride,
        a.batch_size,
        a.seed,
        a.epoch
    );
    for (i, b) in batches.iter().enumerate() {
        let plan = BatchPlan::new(&space.samples(b)?, &Roles { input: 0, label: 0, boundary: None }, &[1])?;
        let times = &plan.groups()[0].times;
        if times.is_empty() {
            bail!("empty batch");
        }
        println!("batch {i:>4}: samples {b:?} read times {}", compact_ranges(times));
    }
    Ok(())
}

/// `[1, 2, 3, 7]` → `1..=3, 7`.
fn compact_ranges(v: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut start = v[0];
    for w in v.windows(2) {
        if w[1] != w[0] + 1 {
            parts.push(if start == w[0] { start.to_string() } else { format!("{start}..={}", w[0]) });
            start = w[1];
        }
    }
    let last = v[v.len() - 1];
    parts.push(if start == last { start.to_string() } else { format!("{start}..={last}") });
    parts.join(", ")
}
