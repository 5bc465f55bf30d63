//! Measures the sharded plane store against the Zarr store it was built from (docs/scale-out.md):
//!
//! ```sh
//! cargo build --release -p om4-mpi --features mpi --example sharded_bench
//! mpirun -n 4 --oversubscribe target/release/examples/sharded_bench [DIR] [TIMES]
//! ```
//!
//! Rank 0 synthesizes a 2° store of 19 levels (77 prognostic + 3 boundary channels, 90 × 180)
//! with TIMES time steps (default 48) into DIR (default `target/om4-mpi-bench`) unless it is there;
//! then every rank opens it, builds a `ShardedSource` (width = all ranks) and prints one line:
//! time to fill its share, `MPI_Get` throughput of its reads from its successor's share against a
//! raw `MPI_Get` probe of the same size, loader batch time from the sharded store and from the
//! Zarr store, and its memory.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use mpi::Threading;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use om4_batch::{Ddp, ReadGroup, SampleSpace, Schedule, WindowSpec};
use om4_mpi::{ShardOptions, ShardedSource, get_probe};
use om4_pipeline::{BatchSource, Loader, LoaderConfig};
use om4_store::{Om4Source, ReadPool, SourceConfig, SynthConfig, synthesize};

type Outcome<T> = Result<T, Box<dyn std::error::Error>>;

fn main() -> ExitCode {
    let Some((universe, _)) = mpi::initialize_with_threading(Threading::Multiple) else {
        eprintln!("cannot initialize MPI");
        return ExitCode::FAILURE;
    };
    let world = universe.world();
    match run(&world) {
        Ok(line) => {
            println!("rank {}/{}: {line}", world.rank(), world.size());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rank {}/{}: FAILED: {e}", world.rank(), world.size());
            world.abort(1)
        }
    }
}

fn status_kib(key: &str) -> u64 {
    let text = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Milliseconds per batch over this rank's DDP slice of one epoch.
fn batch_ms<S: BatchSource>(source: Arc<S>, world: &SimpleCommunicator) -> Outcome<(f64, usize)> {
    let ddp = Ddp { world_size: world.size() as usize, rank: world.rank() as usize };
    let space = SampleSpace::single(WindowSpec::new(1, 2, 1)?, source.time_len())?;
    let loader = Loader::new(source, space, Schedule::training(4, 3, Some(ddp))?, LoaderConfig::default());
    let start = Instant::now();
    let mut n = 0;
    for batch in loader.epoch(1)? {
        batch?;
        n += 1;
    }
    Ok((start.elapsed().as_secs_f64() * 1e3 / n.max(1) as f64, n))
}

fn run(world: &SimpleCommunicator) -> Outcome<String> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "target/om4-mpi-bench".into()));
    let times: usize = args.next().map(|t| t.parse()).transpose()?.unwrap_or(48);
    let cfg = SynthConfig { ny: 90, nx: 180, times, levels: 19, ..SynthConfig::default() };
    let (data, means, stds) = (dir.join("OM4.zarr"), dir.join("OM4_means.zarr"), dir.join("OM4_stds.zarr"));
    if world.rank() == 0 && !stds.exists() {
        synthesize(&dir, &cfg, |_, _| {})?;
    }
    world.barrier();
    let config = SourceConfig::samudra(data, means, stds, 19);
    let store = Arc::new(Om4Source::open(&config, ReadPool::new(1)?)?);

    world.barrier();
    let sharded = Arc::new(ShardedSource::new(world, &*store, &ShardOptions::default())?);
    world.barrier();

    // Reads of the successor's whole share through read_group (set by set), against raw gets.
    let size = world.size() as usize;
    let next = (world.rank() as usize + 1) % size;
    let theirs = sharded.layout().times_of(next);
    let plane = sharded.grid().plane();
    let repeats = 5;
    // Buffers reused across repeats (as the loader's pooled buffers are), like the probe's.
    let groups: Vec<_> = (sharded.channels().into_iter().enumerate())
        .map(|(set, channels)| ReadGroup { source: set, times: theirs.clone().collect(), channels })
        .collect();
    let mut outs: Vec<Vec<f32>> = groups.iter().map(|g| vec![0.0f32; g.times.len() * g.channels * plane]).collect();
    let mut bytes = 0usize;
    let start = Instant::now();
    for _ in 0..repeats {
        for (group, out) in groups.iter().zip(&mut outs) {
            sharded.read_group(group, out)?;
            bytes += out.len() * 4;
        }
    }
    let get_gbs = bytes as f64 / start.elapsed().as_secs_f64() / 1e9;
    world.barrier();
    let floats = sharded.layout().floats_of(next);
    let block = sharded.channels()[0] * plane;
    let probe_one = get_probe(world, floats, floats.max(1), repeats)? / 1e9;
    let probe_block = get_probe(world, floats, block.max(1), repeats)? / 1e9;

    world.barrier();
    let (zarr_ms, batches) = batch_ms(Arc::clone(&store), world)?;
    world.barrier();
    let (sharded_ms, _) = batch_ms(Arc::clone(&sharded), world)?;
    world.barrier();

    let line = format!(
        "share {} times {:.1} MB filled in {:.2} s ({:.0} MB/s); read_group from rank {next}: {get_gbs:.2} GB/s, \
         raw MPI_Get probe {probe_one:.2} GB/s (one get) / {probe_block:.2} GB/s (one get per time block) = {:.2}x / \
         {:.2}x; batch (B=4, hist 1, 2 steps, {batches} batches): zarr {zarr_ms:.1} ms, sharded {sharded_ms:.1} ms; \
         VmHWM {} MB, VmRSS {} MB",
        sharded.local_times().len(),
        sharded.local_bytes() as f64 / 1e6,
        sharded.fill_time().as_secs_f64(),
        sharded.local_bytes() as f64 / 1e6 / sharded.fill_time().as_secs_f64().max(1e-9),
        get_gbs / probe_one,
        get_gbs / probe_block,
        status_kib("VmHWM:") / 1024,
        status_kib("VmRSS:") / 1024,
    );
    drop(sharded);
    Ok(line)
}
