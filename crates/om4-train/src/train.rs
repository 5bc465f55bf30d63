//! `om4-train train` (and the `train_samudra` example): the command line, the configuration file
//! in Samudra's words, the device and MPI set-up, and the epoch loop.

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use om4_samudra::{RunConfig, TrainConfig, Trainer};

/// The command line of `om4-train train` and of the `train_samudra` example.
#[derive(Parser, Debug)]
#[command(about = "Train the Samudra ocean emulator from an OM4 Zarr store")]
pub struct TrainArgs {
    /// OM4.zarr (default: a synthetic store made under target/om4-demo).
    #[arg(long)]
    store: Option<PathBuf>,
    /// OM4_means.zarr (default: beside the store).
    #[arg(long)]
    means: Option<PathBuf>,
    /// OM4_stds.zarr (default: beside the store).
    #[arg(long)]
    stds: Option<PathBuf>,
    /// TOML or YAML configuration (sections `data`, `data.loading`, `train`, `model`, `experiment`).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Architecture: tiny, v1, v2, v2_highres.
    #[arg(long)]
    model: Option<String>,
    /// The U-Net in bfloat16, the head in float32 (upstream's `use_bfloat16`; also
    /// `model.use_bfloat16` in a configuration file).
    #[arg(long)]
    bf16: bool,
    #[arg(long)]
    epochs: Option<usize>,
    #[arg(long)]
    steps: Option<usize>,
    #[arg(long)]
    batch_size: Option<usize>,
    #[arg(long)]
    history: Option<usize>,
    /// Save a checkpoint here after every epoch.
    #[arg(long)]
    checkpoint_dir: Option<PathBuf>,
    /// Also checkpoint inside each epoch, every N optimizer steps (needs --checkpoint-dir); a
    /// run resumed from such a checkpoint continues with the epoch's next batch.
    #[arg(long, value_name = "N")]
    checkpoint_every: Option<usize>,
    /// Resume from --checkpoint-dir.
    #[arg(long)]
    resume: bool,
    /// At the end, save the EMA weights for upstream PyTorch Samudra and `rollout_samudra`
    /// (safetensors with upstream's names).
    #[arg(long)]
    save_weights: Option<PathBuf>,
    /// cpu (default), cuda[:N], vulkan[:N], wgpu[:N]; GPU backends need a build with their cargo
    /// feature. A CUDA device stages batches in pinned memory of its own context.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// How much cubecl tunes each kernel on a GPU: minimal, balanced (default), extensive, full
    /// (overrides cubecl.toml's `[autotune] level`; docs/gpu.md says what each costs).
    #[arg(long, value_name = "LEVEL")]
    autotune_level: Option<om4_burn::AutotuneLevel>,
    /// Keep the training split resident on the device within this many GB: each plane is read
    /// and uploaded once, then gathered there (an error names the split's size if it does not fit).
    #[arg(long, value_name = "GB")]
    resident_gb: Option<f64>,
    /// Train data-parallel as one rank of an MPI job (`mpirun -n W … train_samudra --mpi`): each
    /// rank trains on its slice of upstream's DDP schedule (`--batch-size` per rank) and the
    /// gradients are averaged; rank 0 alone prints and writes checkpoints (build with `--features mpi`).
    #[arg(long)]
    mpi: bool,
    /// With --mpi: hold the planes of the training and validation splits in the ranks' memory
    /// (om4_mpi::ShardedSource, read once at the start) and take batches from there.
    #[cfg(feature = "mpi")]
    #[arg(long)]
    sharded: bool,
    /// With --sharded: ranks per full copy of the planes (default: one copy over all ranks).
    #[cfg(feature = "mpi")]
    #[arg(long, value_name = "N")]
    shard_width: Option<usize>,
}

/// The demo's run: the store at `paths`, unless the configuration says otherwise split at
/// 1959-07-01 (both splits hold that day) and trained 6 epochs of 2 rollout steps at learning
/// rate 2e-3.
fn demo_run(run: &mut om4_samudra::RunConfig, paths: om4_store::SynthPaths) -> Result<(), Box<dyn std::error::Error>> {
    let source = &mut run.data.source;
    source.data_location = Some(paths.data.into());
    source.data_means_location = Some(paths.means.into());
    source.data_stds_location = Some(paths.stds.into());
    let split = "1959-07-01".parse()?;
    if source.train_time == om4_store::DateRange::ALL && source.val_time == om4_store::DateRange::ALL {
        (source.train_time, source.val_time) = (om4_store::DateRange::until(split), om4_store::DateRange::from(split));
    }
    let train = &mut run.train;
    train.epochs.get_or_insert(6);
    train.learning_rate.get_or_insert(2e-3);
    train.steps.get_or_insert(om4_samudra::Steps::One(2));
    Ok(())
}

/// The MPI job this process is a rank of (with `--mpi`).
#[cfg(feature = "mpi")]
struct Mpi {
    collective: std::sync::Arc<om4_mpi::MpiCollective>,
    _universe: mpi::environment::Universe,
}

#[cfg(feature = "mpi")]
fn join_mpi(args: &TrainArgs) -> Result<Option<Mpi>, Box<dyn std::error::Error>> {
    if !args.mpi {
        return Ok(None);
    }
    let (universe, _) =
        mpi::initialize_with_threading(mpi::Threading::Multiple).ok_or("MPI could not be initialized")?;
    let collective = std::sync::Arc::new(om4_mpi::MpiCollective::new(&universe.world())?);
    Ok(Some(Mpi { collective, _universe: universe }))
}

/// Runs a training job; the exit status says whether it succeeded (the error is printed).
pub fn main(args: TrainArgs) -> std::process::ExitCode {
    crate::alloc::keep_freed_memory();
    #[cfg(feature = "mpi")]
    let mpi = match join_mpi(&args) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("error: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    #[cfg(not(feature = "mpi"))]
    if args.mpi {
        eprintln!("error: --mpi needs a build with `--features mpi`");
        return std::process::ExitCode::FAILURE;
    }
    #[cfg(feature = "mpi")]
    let result = run(args, mpi.as_ref().map(|m| std::sync::Arc::clone(&m.collective)));
    #[cfg(not(feature = "mpi"))]
    let result = run(args);
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // A rank that stops ends the job: the others would wait in the next all-reduce.
            #[cfg(feature = "mpi")]
            if let Some(m) = &mpi {
                m.collective.abort(&format!("error: {e}"), 1);
            }
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(feature = "mpi")]
fn run(args: TrainArgs, mpi: Option<std::sync::Arc<om4_mpi::MpiCollective>>) -> Result<(), Box<dyn std::error::Error>> {
    let parallel = match mpi {
        Some(c) => om4_samudra::DataParallel::Rank(c),
        None => om4_samudra::DataParallel::Single,
    };
    train(args, parallel)
}

#[cfg(not(feature = "mpi"))]
fn run(args: TrainArgs) -> Result<(), Box<dyn std::error::Error>> {
    train(args, om4_samudra::DataParallel::Single)
}

fn train(args: TrainArgs, parallel: om4_samudra::DataParallel) -> Result<(), Box<dyn std::error::Error>> {
    let quiet = parallel.rank() != 0;
    let mut run = match &args.config {
        Some(p) => RunConfig::from_file(p)?,
        None => RunConfig::default(),
    };
    // A command-line path may be an s3:// URL (options from the AWS_* environment variables);
    // the config file also takes Samudra's `{type: s3, ...}` tables.
    let source = &mut run.data.source;
    if let Some(p) = &args.store {
        source.data_location = Some(om4_store::StoreLocation::from_path(p)?);
    }
    if let Some(p) = &args.means {
        source.data_means_location = Some(om4_store::StoreLocation::from_path(p)?);
    }
    if let Some(p) = &args.stds {
        source.data_stds_location = Some(om4_store::StoreLocation::from_path(p)?);
    }
    if source.data_location.is_none() {
        // Rank 0 writes the demo store (once); the other ranks wait until it has.
        let demo = om4_store::DemoStore::locate();
        let p = if quiet {
            demo.paths()
        } else {
            let written = demo.is_written();
            println!(
                "{} the synthetic demo store in {}",
                if written { "using" } else { "writing (once)" },
                demo.dir.display()
            );
            demo.ensure()?
        };
        if let om4_samudra::DataParallel::Rank(c) = &parallel {
            om4_mpi::Collective::all_reduce_f64(c.as_ref(), &mut [0.0], om4_mpi::ReduceOp::Sum)?;
        }
        demo_run(&mut run, p)?;
    }
    let t = &mut run.train;
    t.epochs = args.epochs.or(t.epochs);
    t.batch_size = args.batch_size.or(t.batch_size);
    if let Some(n) = args.steps {
        (t.steps, t.step_transition) = (Some(om4_samudra::Steps::One(n)), None);
    }
    run.data.hist = args.history.unwrap_or(run.data.hist);
    run.model.name = args.model.clone().or(run.model.name.take());
    if args.bf16 {
        run.model.use_bfloat16 = Some(true);
    }
    let config = run.train_config()?;
    let model = run.model_config()?;
    let model_name = run.model.name.clone().unwrap_or_else(|| "tiny".into());
    // The store opens once: its levels resolve Samudra's channels, and both splits share it.
    let splits = run.data.open()?;
    let grid = om4_burn::BatchSource::grid(&splits.train);
    let header = format!(
        "training {model_name} on {} ({} prognostic + {} boundary channels, {}×{}), hist {}, steps {}, batch {}",
        splits.spec.data,
        splits.spec.prognostic.len(),
        splits.spec.boundary.len(),
        grid.y,
        grid.x,
        config.hist,
        config.steps,
        config.batch_size,
    );
    // On CUDA, the loaders stage batches in pinned host memory of the device's own context, which
    // cubecl DMAs without a copy.
    let device = crate::device::open(&args.device, args.autotune_level)?;
    let setup = Setup { args: &args, run: &run, splits: &splits, config, model, device, parallel, header };
    #[cfg(feature = "mpi")]
    if args.sharded {
        if !matches!(setup.parallel, om4_samudra::DataParallel::Rank(_)) {
            return Err("--sharded needs --mpi".into());
        }
        // The planes of both splits, spread over the ranks' memory (DDStore); collective.
        let world = mpi::topology::SimpleCommunicator::world();
        let options = om4_mpi::ShardOptions { width: args.shard_width, ..Default::default() };
        let split = |selection: &om4_store::Om4Source| -> Result<_, Box<dyn std::error::Error>> {
            Ok(std::sync::Arc::new(om4_mpi::ShardedSource::new(&world, selection, &options)?))
        };
        let (train_src, val_src) = (split(&splits.train)?, split(&splits.val)?);
        if !quiet {
            println!(
                "planes of both splits sharded over the ranks' memory: this rank filled {:.2} s",
                train_src.fill_time().as_secs_f64() + val_src.fill_time().as_secs_f64()
            );
        }
        return setup.train(train_src, val_src);
    }
    setup.train(std::sync::Arc::new(splits.train.clone()), std::sync::Arc::new(splits.val.clone()))
}

/// Everything a training run is built from but its two sources (the store's splits, or their
/// planes sharded over MPI ranks).
struct Setup<'a> {
    args: &'a TrainArgs,
    run: &'a RunConfig,
    splits: &'a om4_store::DataSplits,
    config: TrainConfig,
    model: om4_samudra::SamudraConfig,
    device: om4_burn::TrainingDevice,
    parallel: om4_samudra::DataParallel,
    header: String,
}

impl Setup<'_> {
    /// Builds the trainer over `train` and `val` (the training split resident on the device if
    /// `--resident-gb` asks) and trains.
    fn train<S: om4_burn::BatchSource>(
        self,
        train: std::sync::Arc<S>,
        val: std::sync::Arc<S>,
    ) -> Result<(), Box<dyn std::error::Error>> {
        let om4_burn::TrainingDevice { device, staging, name } = self.device;
        let mut builder = Trainer::builder(self.config.clone(), self.model, train, val)
            .data(&self.run.data, self.splits)
            .device(device)
            .staging(staging)
            .parallel(self.parallel.clone());
        match self.args.resident_gb {
            None => {}
            Some(gb) if gb.is_finite() && gb > 0.0 => builder = builder.resident((gb * 1e9) as u64),
            Some(gb) => return Err(format!("--resident-gb {gb}: expected a positive number of GB").into()),
        }
        drive(builder.build()?, self.args, name.is_gpu(), self.parallel, &self.config, self.header)
    }
}

/// Trains `config.epochs` epochs (after a resume, the rest of them), printing one line per epoch
/// on rank 0 and checkpointing as asked.
fn drive<S: om4_burn::BatchSource>(
    mut trainer: Trainer<S>,
    args: &TrainArgs,
    gpu: bool,
    parallel: om4_samudra::DataParallel,
    config: &TrainConfig,
    header: String,
) -> Result<(), Box<dyn std::error::Error>> {
    let quiet = parallel.rank() != 0;
    let world = parallel.world_size();
    if let Some(every) = args.checkpoint_every {
        let dir = args.checkpoint_dir.as_ref().ok_or("--checkpoint-every needs --checkpoint-dir")?;
        trainer.checkpoint_every(dir, every)?;
    }
    if args.resume {
        let dir = args.checkpoint_dir.as_ref().ok_or("--resume needs --checkpoint-dir")?;
        trainer.resume(dir)?;
        let (epoch, done) = trainer.resume_point();
        if !quiet {
            println!("resumed from {} at epoch {epoch}, batch {}", dir.display(), done + 1);
        }
    }
    if !quiet {
        let ranks = if world > 1 { format!(" per rank, {world} ranks") } else { String::new() };
        // On the CPU the step's kernels run on rayon's pool: say how many threads it has.
        let threads =
            if gpu { String::new() } else { format!(", the step on {} CPU threads", rayon::current_num_threads()) };
        println!("{header}{ranks}, {} batches/epoch{threads}", trainer.train_batches());
    }
    let started = Instant::now();
    while trainer.next_epoch() <= config.epochs {
        let epoch = trainer.next_epoch();
        let bar = ProgressBar::new(trainer.train_batches() as u64).with_style(
            ProgressStyle::with_template("epoch {prefix} [{bar:30}] {pos}/{len} {msg} {elapsed}")?
                .progress_chars("=> "),
        );
        bar.set_prefix(epoch.to_string());
        if quiet {
            bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
        }
        // The first batch apart from the rest: on a GPU it compiles (and, with autotune, tunes) the
        // kernels, so the steady time is (last − first) / (batches − 1).
        let epoch_start = Instant::now();
        let (mut first_step, mut last_step, mut steps_seen) = (None, std::time::Duration::ZERO, 0usize);
        // cubecl's kernel work (autotune, compilation) in the first batch, on a GPU.
        let kernels_before = if gpu { om4_burn::kernel_work() } else { None };
        let mut first_kernels = None;
        let report = trainer.run_epoch(|done, _, loss, t| {
            bar.set_position(done as u64);
            bar.set_message(format!("loss {loss:.4} wait {:.1} ms", t.wait.as_secs_f64() * 1e3));
            last_step = epoch_start.elapsed();
            if first_step.is_none() {
                first_step = Some(last_step);
                if gpu {
                    first_kernels =
                        om4_burn::kernel_work().map(|w| w.since(&kernels_before.clone().unwrap_or_default()));
                }
            }
            steps_seen += 1;
        })?;
        bar.finish_and_clear();
        if quiet {
            continue;
        }
        println!(
            "epoch {:>3}: train loss {:.4}  val loss {:.4}  {:.1} samples/s  data wait p50 {:.2} ms p95 {:.2} ms ({:.1}% of step time)  {:.1}s",
            report.epoch,
            report.train_loss,
            report.val_loss,
            report.samples_per_s,
            report.wait_p50.as_secs_f64() * 1e3,
            report.wait_p95.as_secs_f64() * 1e3,
            report.wait_share * 100.0,
            report.wall.as_secs_f64()
        );
        if let Some(first) = first_step {
            let steady = if steps_seen > 1 {
                format!("{:.3} s per batch after it", (last_step - first).as_secs_f64() / (steps_seen - 1) as f64)
            } else {
                "no batch after it".to_string()
            };
            let split = match first_kernels {
                Some(k) => format!(
                    "autotune {} keys {:.1} s; {} kernels compiled, {} loaded from the kernel cache, {:.1} s of it outside \
                     autotune; the rest (data, compute, the driver's own compilation) {:.1} s",
                    k.tuned,
                    k.autotune_s,
                    k.compiled,
                    k.loaded,
                    k.compile_s,
                    (first.as_secs_f64() - k.autotune_s - k.compile_s).max(0.0)
                ),
                None => "its data and compute".to_string(),
            };
            println!("           first batch {:.3} s ({split}), {steady}", first.as_secs_f64());
        }
        if let Some(r) = trainer.train_residency() {
            println!(
                "           resident split: {:.3} of {:.3} GB on the device; this epoch read {:.1} MB from the store",
                r.held_bytes() as f64 / 1e9,
                r.split_bytes() as f64 / 1e9,
                report.read_bytes as f64 / 1e6
            );
        }
        if let Some(dir) = &args.checkpoint_dir {
            trainer.save(dir)?;
        }
    }
    if quiet {
        return Ok(());
    }
    println!("done in {:.1}s", started.elapsed().as_secs_f64());
    if let Some(path) = &args.save_weights {
        om4_samudra::save_upstream(trainer.ema(), path)?;
        println!("saved the EMA weights to {}", path.display());
    }
    Ok(())
}
