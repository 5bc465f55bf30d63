//! Checks data-parallel training over MPI on loopback: run it as
//! `mpirun -n W target/debug/examples/ddp_check` (feature `mpi`).
//!
//! Every rank writes the same small synthetic store into its own temporary directory and trains
//! one epoch as one rank of a `W`-rank run ([`DataParallel::Rank`] over [`MpiCollective`]).
//! Then:
//! - the ranks' weights, EMA weights and dynamic loss weights must be identical bit for bit
//!   (compared through an all-reduce of their minimum and maximum, which agree only if every
//!   rank holds the same bits);
//! - rank 0 trains one process on the run's global batches ([`DataParallel::Emulate`]) and the
//!   distributed weights must equal it to a relative 1e-6 (the tiny network without block
//!   normalization: `om4_testkit::ddp`, the case the thread-rank test trains too).
//!
//! Exit status 0 when every check passes. Failure modes, for the CI's abort checks:
//! `--fail-rank R` makes rank R's store unreadable (its chunks overwritten), so its first batch
//! fails: it aborts the job (`MPI_Abort`) and every rank stops instead of waiting in the
//! gradient all-reduce; `--exit-rank R` makes rank R exit in the middle of the epoch without a
//! word to MPI, and `mpirun` ends the others.

use std::path::Path;
use std::sync::Arc;

use clap::Parser;
use om4_mpi::MpiCollective;
use om4_mpi::{Collective, ReduceOp};
use om4_samudra::{DataParallel, Trainer, flatten_parameters};
use om4_store::{DataConfig, SynthPaths};
use om4_testkit::ddp::{config, model};

#[derive(Parser, Debug)]
#[command(about = "Data-parallel training over MPI equals one process on the global batches")]
struct Args {
    /// This rank's store is made unreadable: its first batch fails and it aborts the job.
    #[arg(long, value_name = "R")]
    fail_rank: Option<usize>,
    /// This rank exits in the middle of the epoch without finalizing MPI.
    #[arg(long, value_name = "R")]
    exit_rank: Option<usize>,
}

const TOLERANCE: f64 = 1e-6;

fn store(dir: &Path, unreadable: bool) -> Result<DataConfig, Box<dyn std::error::Error>> {
    let data = om4_testkit::ddp::data(dir)?;
    if unreadable {
        // Every chunk of `zos` becomes bytes no codec decodes.
        for entry in std::fs::read_dir(SynthPaths::under(dir).data.join("zos"))? {
            let path = entry?.path();
            if !path.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.')) {
                std::fs::write(&path, b"not a chunk")?;
            }
        }
    }
    Ok(data)
}

struct Trained {
    model: Vec<f32>,
    ema: Vec<f32>,
    weights: Vec<f32>,
    train_loss: f64,
    batches: usize,
}

fn train(
    data: &DataConfig,
    parallel: DataParallel,
    exit_at: Option<usize>,
) -> Result<Trained, Box<dyn std::error::Error>> {
    let mut trainer = Trainer::over(config(), model(), data)?.parallel(parallel).build()?;
    let report = trainer.run_epoch(|done, _, _, _| {
        if exit_at == Some(done) {
            eprintln!("exiting in the middle of the epoch, as asked (--exit-rank)");
            std::process::exit(4);
        }
    })?;
    Ok(Trained {
        model: flatten_parameters(trainer.model())?,
        ema: flatten_parameters(trainer.ema())?,
        weights: trainer.loss_weights().map(|w| w.scales.clone()).unwrap_or_default(),
        train_loss: report.train_loss,
        batches: trainer.train_batches(),
    })
}

/// Values whose bits differ between ranks (0 on every rank when all ranks hold the same).
fn differing_across_ranks(c: &MpiCollective, values: &[f32]) -> Result<usize, Box<dyn std::error::Error>> {
    let (mut low, mut high) = (values.to_vec(), values.to_vec());
    c.all_reduce_f32(&mut low, ReduceOp::Min)?;
    c.all_reduce_f32(&mut high, ReduceOp::Max)?;
    Ok(low.iter().zip(&high).filter(|(a, b)| a.to_bits() != b.to_bits()).count())
}

/// ‖a − b‖ / ‖b‖.
fn relative(a: &[f32], b: &[f32]) -> f64 {
    let diff: f64 = a.iter().zip(b).map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2)).sum();
    let norm: f64 = b.iter().map(|y| f64::from(*y).powi(2)).sum();
    (diff / norm).sqrt()
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let Some((universe, _)) = mpi::initialize_with_threading(mpi::Threading::Multiple) else {
        eprintln!("error: MPI could not be initialized");
        return std::process::ExitCode::FAILURE;
    };
    let collective = match MpiCollective::new(&universe.world()) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let code = match run(&args, &collective) {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        // What train_samudra --mpi does too: a rank that cannot go on ends the job.
        Err(e) => collective.abort(&format!("error: {e}"), 3),
    };
    drop(collective);
    drop(universe);
    code
}

fn run(args: &Args, collective: &Arc<MpiCollective>) -> Result<bool, Box<dyn std::error::Error>> {
    let (rank, world) = (collective.rank(), collective.world_size());
    let dir = tempfile::tempdir()?;
    let data = store(dir.path(), args.fail_rank == Some(rank))?;
    let exit_at = (args.exit_rank == Some(rank)).then_some(2);
    let ranked = train(&data, DataParallel::Rank(Arc::clone(collective) as Arc<dyn Collective>), exit_at)?;
    let mut ok = true;
    for (what, values) in [("model", &ranked.model), ("EMA", &ranked.ema), ("loss weights", &ranked.weights)] {
        let differing = differing_across_ranks(collective, values)?;
        if rank == 0 {
            println!("{what}: {differing} of {} values differ between the {world} ranks", values.len());
        }
        ok &= differing == 0;
    }
    if rank == 0 {
        let reference = train(&data, DataParallel::Emulate { world_size: world }, None)?;
        let (model, ema) = (relative(&ranked.model, &reference.model), relative(&ranked.ema, &reference.ema));
        let weights = relative(&ranked.weights, &reference.weights);
        println!(
            "{} optimizer steps over {world} ranks vs one process on the global batches: relative difference \
             model {model:.2e}, EMA {ema:.2e}, loss weights {weights:.2e}; train loss {:.6} vs {:.6}",
            ranked.batches, ranked.train_loss, reference.train_loss
        );
        let close = model <= TOLERANCE && ema <= TOLERANCE && weights <= TOLERANCE;
        if !close {
            println!("FAILED: the distributed run differs from the one-process reference by more than {TOLERANCE:e}");
        }
        ok &= close && ranked.batches == reference.batches && ranked.batches >= 2;
        println!("{}", if ok { "ddp_check: all checks passed" } else { "ddp_check: FAILED" });
    }
    // Every rank exits with rank 0's verdict.
    let mut verdict = [if ok { 0.0 } else { 1.0 }];
    collective.all_reduce_f64(&mut verdict, ReduceOp::Max)?;
    Ok(verdict[0] == 0.0)
}
