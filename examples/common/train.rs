//! The training job of `train_samudra` (and of `gpu_check train`, so that one GPU binary carries
//! both): command line, configuration file in Samudra's words, and the epoch loop.

use std::path::{Path, PathBuf};
use std::time::Instant;

use burn::tensor::Device;
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use om4_burn::{LoaderConfig, Om4Source, SourceConfig};
use om4_samudra::{SamudraConfig, TrainConfig, Trainer};
use om4_store::ReadPool;
use serde::Deserialize;

/// The command line of `train_samudra` (and of `gpu_check train`).
#[derive(Parser, Debug)]
#[command(about = "Train the Samudra ocean emulator from an OM4 Zarr store")]
pub(crate) struct Args {
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
    /// cpu (default), cuda[:N], vulkan[:N]; GPU backends need a build with their cargo feature.
    #[arg(long, default_value = "cpu")]
    device: String,
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

/// The configuration file, in Samudra's words.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct FileConfig {
    experiment: Experiment,
    data: Data,
    train: Train,
    model: Model,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Experiment {
    rand_seed: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Data {
    data_location: Option<om4_store::StoreLocation>,
    data_means_location: Option<om4_store::StoreLocation>,
    data_stds_location: Option<om4_store::StoreLocation>,
    hist: Option<usize>,
    prognostic: Option<Vec<String>>,
    boundary: Option<Vec<String>>,
    normalize_before_mask: Option<bool>,
    masked_fill_value: Option<f32>,
    train_time: Option<Span>,
    val_time: Option<Span>,
    loading: Option<LoaderConfig>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Span {
    start: Option<String>,
    end: Option<String>,
}

/// `steps = 4` or, as upstream's curriculum, `steps = [1, 2, 4]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum StepsSetting {
    One(usize),
    Curriculum(Vec<usize>),
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Train {
    epochs: Option<usize>,
    learning_rate: Option<f64>,
    batch_size: Option<usize>,
    /// One rollout length, or upstream's curriculum list (with `step_transition`).
    steps: Option<StepsSetting>,
    /// Epochs at which the curriculum takes its next length.
    step_transition: Option<Vec<usize>>,
    data_stride: Option<usize>,
    grad_accumulation: Option<usize>,
    /// Samudra's dynamic loss weights with this limit (v2 configs use 20).
    dynamic_loss_limit: Option<f32>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct Model {
    name: Option<String>,
    use_bfloat16: Option<bool>,
}

fn read_config(path: &Path) -> Result<FileConfig, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let is_yaml = matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"));
    Ok(if is_yaml { serde_yaml::from_str(&text)? } else { toml::from_str(&text)? })
}

/// A device by name: `cpu`, `cuda` or `cuda:N`, `vulkan` (wgpu's default: the high-power GPU,
/// or `CUBECL_WGPU_DEFAULT_DEVICE`) or `vulkan:N` (the N-th discrete GPU).
pub(crate) fn device(name: &str) -> Result<Device, String> {
    let (backend, index) = match name.split_once(':') {
        Some((b, i)) => (b, Some(i.parse::<usize>().map_err(|_| format!("device {name:?}: {i:?} is not an index"))?)),
        None => (name, None),
    };
    let device = match (backend, index) {
        ("cpu" | "flex", None) => Device::flex(),
        #[cfg(feature = "cuda")]
        ("cuda", i) => Device::cuda(i.unwrap_or(0)),
        #[cfg(feature = "vulkan")]
        ("vulkan", None) => Device::vulkan(burn::tensor::DeviceKind::DefaultDevice),
        #[cfg(feature = "vulkan")]
        ("vulkan", Some(i)) => Device::vulkan(burn::tensor::DeviceKind::DiscreteGpu(i)),
        _ => {
            return Err(format!(
                "device {name:?} is not in this build: GPU backends need their cargo feature \
                 (`--features cuda` for --device cuda[:N], `--features vulkan` for --device vulkan[:N]); CPU: --device cpu"
            ));
        }
    };
    probe(name, device)
}

/// Uses `device` once, so that a missing driver or adapter (which the backends report by
/// panicking on first use) is an error here, not a panic in the middle of training.
fn probe(name: &str, device: Device) -> Result<Device, String> {
    // The backend may panic on its own threads first; the first message says why.
    let first = std::sync::Arc::new(std::sync::Mutex::new(None::<String>));
    let hook = std::panic::take_hook();
    let record = std::sync::Arc::clone(&first);
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()));
        if let (Ok(mut slot), Some(m)) = (record.lock(), message) {
            slot.get_or_insert(m);
        }
    }));
    let used = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        burn::tensor::Tensor::<1>::from_data([1.0f32, 2.0], &device).sum().into_scalar::<f32>()
    }));
    std::panic::set_hook(hook);
    match used {
        Ok(3.0) => Ok(device),
        Ok(v) => Err(format!("device {name:?} computed 1 + 2 = {v}")),
        Err(_) => {
            let reason = first.lock().ok().and_then(|m| m.clone()).unwrap_or_else(|| "the backend panicked".into());
            Err(format!("cannot use device {name:?}: {reason}"))
        }
    }
}

/// The MPI job this process is a rank of (with `--mpi`).
#[cfg(feature = "mpi")]
struct Mpi {
    collective: std::sync::Arc<om4_mpi::MpiCollective>,
    _universe: mpi::environment::Universe,
}

#[cfg(feature = "mpi")]
fn join_mpi(args: &Args) -> Result<Option<Mpi>, Box<dyn std::error::Error>> {
    if !args.mpi {
        return Ok(None);
    }
    let (universe, _) =
        mpi::initialize_with_threading(mpi::Threading::Multiple).ok_or("MPI could not be initialized")?;
    let collective = std::sync::Arc::new(om4_mpi::MpiCollective::new(&universe.world())?);
    Ok(Some(Mpi { collective, _universe: universe }))
}

/// Runs a training job; the exit status says whether it succeeded.
pub(crate) fn main(args: Args) -> std::process::ExitCode {
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
fn run(args: Args, mpi: Option<std::sync::Arc<om4_mpi::MpiCollective>>) -> Result<(), Box<dyn std::error::Error>> {
    let parallel = match mpi {
        Some(c) => om4_samudra::DataParallel::Rank(c),
        None => om4_samudra::DataParallel::Single,
    };
    train(args, parallel)
}

#[cfg(not(feature = "mpi"))]
fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    train(args, om4_samudra::DataParallel::Single)
}

fn train(args: Args, parallel: om4_samudra::DataParallel) -> Result<(), Box<dyn std::error::Error>> {
    let quiet = parallel.rank() != 0;
    let file = match &args.config {
        Some(p) => read_config(p)?,
        None => FileConfig::default(),
    };
    let demo = args.store.is_none() && file.data.data_location.is_none();
    let (data, means, stds) = if demo {
        // Rank 0 writes the demo store (once); the other ranks wait until it has.
        let p = if quiet { om4_store::SynthPaths::under(&crate::demo::demo_dir()) } else { crate::demo::demo_store()? };
        if let om4_samudra::DataParallel::Rank(c) = &parallel {
            om4_pipeline::Collective::all_reduce_f64(c.as_ref(), &mut [0.0], om4_pipeline::ReduceOp::Sum)?;
        }
        (p.data.into(), p.means.into(), p.stds.into())
    } else {
        // A command-line path may be an s3:// URL (options from the AWS_* environment variables);
        // the config file also takes Samudra's `{type: s3, ...}` tables.
        let given = |arg: &Option<PathBuf>, file: &Option<om4_store::StoreLocation>| match arg {
            Some(p) => om4_store::StoreLocation::from_path(p).map(Some),
            None => Ok(file.clone()),
        };
        let data = given(&args.store, &file.data.data_location)?.expect("checked above");
        let means = given(&args.means, &file.data.data_means_location)?.unwrap_or(data.sibling("OM4_means.zarr"));
        let stds = given(&args.stds, &file.data.data_stds_location)?.unwrap_or(data.sibling("OM4_stds.zarr"));
        (data, means, stds)
    };
    // Samudra's channels for as many levels as the store has (19 for OM4; the demo's 3): the store
    // is opened once more to count them, unless the file lists both channel sets itself.
    let levels = match (&file.data.prognostic, &file.data.boundary) {
        _ if demo => 3,
        (Some(_), Some(_)) => 19, // unused: the file's lists replace Samudra's below
        _ => om4_store::Om4Store::open_location(&data)?.levels().map_or(19, <[f64]>::len),
    };
    let channels = SourceConfig::samudra(data, means, stds, levels);
    let source_config = SourceConfig {
        prognostic: file.data.prognostic.clone().unwrap_or(channels.prognostic.clone()),
        boundary: file.data.boundary.clone().unwrap_or(channels.boundary.clone()),
        normalize_before_mask: file.data.normalize_before_mask.unwrap_or(true),
        masked_fill_value: file.data.masked_fill_value.unwrap_or(0.0),
        ..channels
    };
    let loading = file.data.loading.unwrap_or_default();
    let pool = ReadPool::new(loading.max_concurrent_reads)?;
    let source = Om4Source::open(&source_config, None, None, pool)?;

    let defaults = TrainConfig::default();
    let span = |s: &Option<Span>| s.as_ref().map_or((None, None), |s| (s.start.clone(), s.end.clone()));
    let (train_time, val_time) = if demo {
        ((None, Some("1959-07-01".to_string())), (Some("1959-07-01".to_string()), None))
    } else {
        (span(&file.data.train_time), span(&file.data.val_time))
    };
    let config = TrainConfig {
        epochs: args.epochs.or(file.train.epochs).unwrap_or(if demo { 6 } else { defaults.epochs }),
        learning_rate: file.train.learning_rate.unwrap_or(if demo { 2e-3 } else { defaults.learning_rate }),
        batch_size: args.batch_size.or(file.train.batch_size).unwrap_or(defaults.batch_size),
        hist: args.history.or(file.data.hist).unwrap_or(defaults.hist),
        steps: args
            .steps
            .or(match &file.train.steps {
                Some(StepsSetting::One(n)) => Some(*n),
                Some(StepsSetting::Curriculum(list)) => list.first().copied(),
                None => None,
            })
            .unwrap_or(if demo { 2 } else { defaults.steps }),
        curriculum_steps: match (&file.train.steps, args.steps) {
            (Some(StepsSetting::Curriculum(list)), None) => list.clone(),
            _ => Vec::new(),
        },
        step_transition: file.train.step_transition.clone().unwrap_or_default(),
        data_stride: file.train.data_stride.unwrap_or(1),
        grad_accumulation: file.train.grad_accumulation.unwrap_or(1),
        rand_seed: file.experiment.rand_seed.unwrap_or(defaults.rand_seed),
        dynamic_loss_limit: file.train.dynamic_loss_limit,
        train_time,
        val_time,
        loading,
        ..defaults
    };
    let model_name = args.model.clone().or(file.model.name.clone()).unwrap_or_else(|| "tiny".into());
    let model = SamudraConfig {
        use_bfloat16: args.bf16 || file.model.use_bfloat16.unwrap_or(false),
        ..SamudraConfig::named(&model_name)
            .ok_or_else(|| format!("unknown model {model_name:?} (tiny, v1, v2, v2_highres)"))?
    };
    // On CUDA, the loaders stage batches in pinned host memory that cubecl DMAs without a copy.
    #[cfg(feature = "cuda")]
    let staging = if args.device == "cuda" { om4_burn::BufferPool::pinned(0)? } else { om4_burn::BufferPool::new() };
    #[cfg(not(feature = "cuda"))]
    let staging = om4_burn::BufferPool::new();
    let header = format!(
        "training {model_name} on {} ({} prognostic + {} boundary channels, {}×{}), hist {}, steps {}, batch {}",
        source_config.data,
        source_config.prognostic.len(),
        source_config.boundary.len(),
        om4_burn::BatchSource::grid(&source).y,
        om4_burn::BatchSource::grid(&source).x,
        config.hist,
        config.steps,
        config.batch_size,
    );
    let device = device(&args.device)?;
    #[cfg(feature = "mpi")]
    if args.sharded {
        if !matches!(parallel, om4_samudra::DataParallel::Rank(_)) {
            return Err("--sharded needs --mpi".into());
        }
        // The planes of both splits, spread over the ranks' memory (DDStore); collective.
        let world = mpi::topology::SimpleCommunicator::world();
        let options = om4_mpi::ShardOptions { width: args.shard_width, ..Default::default() };
        let split = |(start, end): &(Option<String>, Option<String>)| -> Result<_, Box<dyn std::error::Error>> {
            let selection = source.with_range(start.as_deref(), end.as_deref())?;
            Ok(std::sync::Arc::new(om4_mpi::ShardedSource::new(&world, &selection, &options)?))
        };
        let (train_src, val_src) = (split(&config.train_time)?, split(&config.val_time)?);
        if !quiet {
            println!(
                "planes of both splits sharded over the ranks' memory: this rank filled {:.2} s",
                train_src.fill_time().as_secs_f64() + val_src.fill_time().as_secs_f64()
            );
        }
        let trainer = Trainer::from_sources(config.clone(), model, train_src, val_src, device, staging)?;
        return drive(trainer, &args, parallel, &config, header);
    }
    let trainer = Trainer::with_staging(config.clone(), model, &source, device, staging)?;
    drive(trainer, &args, parallel, &config, header)
}

/// Trains `config.epochs` epochs (after a resume, the rest of them), printing one line per epoch
/// on rank 0 and checkpointing as asked.
fn drive<S: om4_burn::BatchSource>(
    mut trainer: Trainer<S>,
    args: &Args,
    parallel: om4_samudra::DataParallel,
    config: &TrainConfig,
    header: String,
) -> Result<(), Box<dyn std::error::Error>> {
    let quiet = parallel.rank() != 0;
    let world = parallel.world_size();
    trainer.data_parallel(parallel)?;
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
        println!("{header}{ranks}, {} batches/epoch", trainer.train_batches());
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
        let report = trainer.run_epoch(|done, _, loss, t| {
            bar.set_position(done as u64);
            bar.set_message(format!("loss {loss:.4} wait {:.1} ms", t.wait.as_secs_f64() * 1e3));
            last_step = epoch_start.elapsed();
            first_step.get_or_insert(last_step);
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
            println!(
                "           first batch {:.3} s (its data, and on a GPU kernel compilation and autotune), {steady}",
                first.as_secs_f64()
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
