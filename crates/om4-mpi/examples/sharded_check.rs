//! Loopback check of the sharded plane store, on any number of ranks:
//!
//! ```sh
//! cargo build -p om4-mpi --features mpi --example sharded_check
//! mpirun -n 4 --oversubscribe target/debug/examples/sharded_check   # (as root add --allow-run-as-root)
//! ```
//!
//! Every rank synthesizes the same small OM4 store into its own temporary directory, opens it as
//! an `Om4Source`, and then, for each width (all ranks, half of them, 1):
//! 1. builds a `ShardedSource` from it and runs om4-pipeline's conformance suite on it against the
//!    store's planes loaded into a `MemorySource`;
//! 2. checks that the loader's host-prepared batches (this rank's DDP slice, two epochs) from the
//!    sharded source equal those from the store bit for bit.
//!
//! It also checks that a memory budget too small is an error on every rank naming the bytes,
//! and that a rank failing to read its share makes every rank's build fail. Each rank prints one
//! summary line; on any failure the failing rank prints why and calls `MPI_Abort`, which ends
//! every rank with a non-zero status.

use std::process::ExitCode;
use std::sync::Arc;

use mpi::Threading;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use om4_batch::{Ddp, SampleSpace, Schedule, WindowSpec};
use om4_mpi::{Error, ShardOptions, ShardedSource};
use om4_pipeline::conformance::{Intercept, check_source};
use om4_pipeline::{BatchSource, HostBatch, Loader, LoaderConfig, MemorySource};
use om4_store::{Om4Source, ReadPool, SourceConfig, SynthConfig, synthesize};

type Outcome<T> = Result<T, String>;

pub(crate) fn main() -> ExitCode {
    let Some((universe, _)) = mpi::initialize_with_threading(Threading::Multiple) else {
        eprintln!("cannot initialize MPI");
        return ExitCode::FAILURE;
    };
    let world = universe.world();
    match run(&world) {
        Ok(summary) => {
            println!("rank {}/{}: {summary}", world.rank(), world.size());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rank {}/{}: FAILED: {e}", world.rank(), world.size());
            // Ends every rank, also those waiting in a collective for this one.
            world.abort(1)
        }
    }
}

fn run(world: &SimpleCommunicator) -> Outcome<String> {
    let size = world.size() as usize;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let cfg = SynthConfig { ny: 12, nx: 20, times: 23, levels: 2, ..SynthConfig::default() };
    let paths = synthesize(dir.path(), &cfg, |_, _| {}).map_err(|e| e.to_string())?;
    let config = SourceConfig::samudra(paths.data, paths.means, paths.stds, 2);
    let pool = ReadPool::new(1).map_err(|e| e.to_string())?;
    let store = Arc::new(Om4Source::open(&config, pool).map_err(|e| e.to_string())?);
    let truth = MemorySource::load(&*store).map_err(|e| e.to_string())?;

    let mut widths = vec![size];
    if size > 1 && size.is_multiple_of(2) {
        widths.push(size / 2);
    }
    if size > 1 {
        widths.push(1);
    }
    let mut parts = Vec::new();
    for width in widths {
        let options = ShardOptions { width: Some(width), ..ShardOptions::default() };
        let sharded =
            Arc::new(ShardedSource::new(world, &*store, &options).map_err(|e| format!("width {width}: {e}"))?);
        check_source(Arc::clone(&sharded), &truth).map_err(|e| format!("width {width}: conformance: {e}"))?;
        let batches = same_batches(&store, &sharded, world)?;
        let times = sharded.local_times();
        parts.push(format!(
            "width {width}: conformance ok, {batches} batches bit-identical, holds times {}..{} ({} B, filled in {:.1} ms)",
            times.start,
            times.end,
            sharded.local_bytes(),
            sharded.fill_time().as_secs_f64() * 1e3
        ));
        // Collective: every rank drops its source here.
        drop(sharded);
    }

    // A memory budget too small: an error on every rank that names the bytes.
    let options = ShardOptions { memory_available: Some(1024), ..ShardOptions::default() };
    match ShardedSource::new(world, &*store, &options) {
        Err(e @ Error::OutOfMemory { needed, available: 1024, .. }) if needed > 1024 => {
            if !e.to_string().contains(&needed.to_string()) {
                return Err(format!("the memory error does not name the bytes needed: {e}"));
            }
        }
        Err(e) => return Err(format!("a too-small memory budget gave another error: {e}")),
        Ok(_) => return Err("a too-small memory budget was accepted".into()),
    }

    // The last rank fails to read its share: every rank's build fails, none hangs.
    let failing = world.size() - 1;
    let fail = world.rank() == failing;
    let broken = Intercept::new(Arc::new(truth.clone()), move |inner, group, out| {
        if fail {
            return Err(om4_pipeline::Error::Config { field: "test", reason: "this rank's reads fail".into() });
        }
        inner.read_group(group, out)
    });
    match ShardedSource::new(world, &broken, &ShardOptions::default()) {
        Err(Error::Source(_)) if world.rank() == failing => {}
        Err(Error::Peer { rank, .. }) if rank == failing && world.rank() != failing => {}
        Err(e) => return Err(format!("a failing rank gave the wrong error: {e}")),
        Ok(_) => return Err("a rank failing to read its share went unnoticed".into()),
    }
    parts.push("memory and peer-failure errors ok".into());
    Ok(parts.join("; "))
}

/// Compares the loader's batches from the store and from the sharded source, bit for bit: this
/// rank's DDP slice of two epochs. Returns how many batches were compared (at least one).
fn same_batches(store: &Arc<Om4Source>, sharded: &Arc<ShardedSource>, world: &SimpleCommunicator) -> Outcome<usize> {
    let ddp = Ddp { world_size: world.size() as usize, rank: world.rank() as usize };
    let space = SampleSpace::single(WindowSpec::new(1, 2, 1).map_err(|e| e.to_string())?, store.time_len())
        .map_err(|e| e.to_string())?;
    let schedule = Schedule::training(2, 11, Some(ddp)).map_err(|e| e.to_string())?;
    let a = Loader::new(Arc::clone(store), space.clone(), schedule, LoaderConfig::default());
    let b = Loader::new(Arc::clone(sharded), space, schedule, LoaderConfig::default());
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let mut compared = 0;
    for epoch in 1..=2 {
        let (ea, eb) = (a.epoch(epoch).map_err(|e| e.to_string())?, b.epoch(epoch).map_err(|e| e.to_string())?);
        for (x, y) in ea.zip(eb) {
            let (x, y) = (x.map_err(|e| e.to_string())?, y.map_err(|e| format!("sharded loader: {e}"))?);
            let (HostBatch::Prepared(px), HostBatch::Prepared(py)) = (x.batch, y.batch) else {
                return Err("expected host-prepared batches".into());
            };
            let same = x.samples == y.samples
                && px.steps.len() == py.steps.len()
                && px
                    .steps
                    .iter()
                    .zip(&py.steps)
                    .all(|(s, t)| bits(&s.input) == bits(&t.input) && bits(&s.label) == bits(&t.label));
            if !same {
                return Err(format!(
                    "epoch {epoch}: batch of samples {:?} differs between store and sharded",
                    x.samples
                ));
            }
            compared += 1;
        }
    }
    if compared == 0 {
        return Err("no batches to compare".into());
    }
    Ok(compared)
}
