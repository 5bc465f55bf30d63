//! `om4 batch`: writes exactly what the model receives, in upstream Samudra's layout, so that a
//! user can diff om4 against their Python loader. Batches come from the pipeline's loader (the
//! same code path training uses), prepared on the host.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use clap::Args;
use om4_batch::{Ddp, Roles, SampleSpace, Schedule, WindowSpec};
use om4_pipeline::{BatchSource, HostBatch, Loader, LoaderConfig, PrepareOn};
use om4_store::DataConfig;
use serde_json::json;

use om4_store::npy;

/// Write the batches of one epoch as upstream Samudra's loader gives them to the model:
/// DIR/batch_NNN/step_K/{prognostic,boundary,label,model_input}.npy (float32), DIR/label_mask.npy
/// (uint8, 1 = ocean) and DIR/schedule.json (the epoch's batches as sample indices).
#[derive(Args, Debug)]
pub(crate) struct BatchArgs {
    /// OM4.zarr.
    #[arg(long)]
    store: PathBuf,
    /// OM4_means.zarr (default: beside --store).
    #[arg(long)]
    means: Option<PathBuf>,
    /// OM4_stds.zarr (default: beside --store).
    #[arg(long)]
    stds: Option<PathBuf>,
    #[command(flatten)]
    remote: super::RemoteArgs,
    /// Comma-separated prognostic channels, in model order.
    #[arg(long, value_delimiter = ',', required = true)]
    prognostic: Vec<String>,
    /// Comma-separated boundary channels (may be empty).
    #[arg(long, value_delimiter = ',')]
    boundary: Vec<String>,
    #[arg(long, default_value_t = 1)]
    history: usize,
    /// Rollout steps (1 with --validation, as upstream's validation datasets).
    #[arg(long, default_value_t = 1)]
    steps: usize,
    #[arg(long, default_value_t = 1)]
    stride: usize,
    #[arg(long, default_value_t = 4)]
    batch_size: usize,
    #[arg(long, default_value_t = 15)]
    seed: u64,
    /// Epoch (upstream counts from 1).
    #[arg(long, default_value_t = 1)]
    epoch: u64,
    #[arg(long)]
    world_size: Option<usize>,
    #[arg(long, default_value_t = 0)]
    rank: usize,
    /// The validation split and sampler (steps = 1).
    #[arg(long)]
    validation: bool,
    /// Training split, `START..END`: Julian dates at 12:00, both ends included (upstream's rule);
    /// either end may be left open.
    #[arg(long, value_name = "START..END", default_value = "..")]
    train: om4_store::DateRange,
    /// Validation split, likewise.
    #[arg(long, value_name = "START..END", default_value = "..")]
    val: om4_store::DateRange,
    /// Mask, then normalize (upstream's `normalize_before_mask: false`).
    #[arg(long)]
    normalize_after_mask: bool,
    /// Value of land cells (`masked_fill_value`).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    fill: f32,
    /// Batches to write (the schedule lists them all).
    #[arg(long, default_value_t = 1)]
    batches: usize,
    /// Read threads (default: available cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Output directory.
    #[arg(long)]
    out: PathBuf,
}

pub(crate) fn run(a: &BatchArgs) -> Result<()> {
    // The data configuration as a Samudra config file would give it; the channels as listed.
    let mut config = DataConfig::at(a.remote.location(&a.store)?);
    let source = &mut config.source;
    source.data_means_location = a.means.as_ref().map(|p| a.remote.location(p)).transpose()?;
    source.data_stds_location = a.stds.as_ref().map(|p| a.remote.location(p)).transpose()?;
    (source.prognostic, source.boundary) = (Some(a.prognostic.clone()), Some(a.boundary.clone()));
    (source.train_time, source.val_time) = (a.train, a.val);
    config.normalize_before_mask = !a.normalize_after_mask;
    config.masked_fill_value = a.fill;
    config.read_threads = a.threads.unwrap_or_else(crate::num_threads);
    let splits = config.open()?;
    let source = Arc::new(if a.validation { splits.val } else { splits.train });
    let steps = if a.validation { 1 } else { a.steps };
    let space = SampleSpace::single(WindowSpec::new(a.history, steps, a.stride)?, source.time_len())?;
    let ddp = a.world_size.map(|world_size| Ddp { world_size, rank: a.rank });
    let schedule = if a.validation {
        Schedule::validation(a.batch_size, a.seed, ddp)?
    } else {
        Schedule::training(a.batch_size, a.seed, ddp)?
    };
    let all = schedule.epoch(&space.groups(), a.epoch);
    let loading = LoaderConfig { prefetch_batches: 0, prepare_on: PrepareOn::Host, ..LoaderConfig::default() };
    let loader = Loader::new(Arc::clone(&source), space, schedule, loading);

    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let grid = source.grid();
    let states = a.history + 1;
    let channels = source.channels();
    let (c_prog, c_bound) = (channels[Roles::PROGNOSTIC], channels.get(Roles::BOUNDARY).copied().unwrap_or(0));
    let mask = source.normalizations()[Roles::PROGNOSTIC].mask().repeat(states);
    let wet: Vec<u8> = mask.as_slice().iter().map(|&w| u8::from(w)).collect();
    npy::write_u8(&a.out.join("label_mask.npy"), &[states * c_prog, grid.y, grid.x], &wet)?;
    std::fs::write(a.out.join("schedule.json"), json!({ "batches": all }).to_string())?;

    let mut written = 0;
    for (b, loaded) in loader.epoch(a.epoch)?.take(a.batches).enumerate() {
        let loaded = loaded?;
        let HostBatch::Prepared(batch) = loaded.batch else { bail!("expected a batch prepared on the host") };
        let n = batch.batch;
        let plane = grid.plane();
        let (prog_len, bound_len) = (states * c_prog * plane, states * c_bound * plane);
        for (k, step) in batch.steps.iter().enumerate() {
            let dir = a.out.join(format!("batch_{b:03}")).join(format!("step_{k}"));
            std::fs::create_dir_all(&dir)?;
            let per_sample = prog_len + bound_len;
            let (mut prog, mut bound) = (Vec::with_capacity(n * prog_len), Vec::with_capacity(n * bound_len));
            for sample in step.input.chunks_exact(per_sample) {
                prog.extend_from_slice(&sample[..prog_len]);
                bound.extend_from_slice(&sample[prog_len..]);
            }
            npy::write_f32(&dir.join("prognostic.npy"), &[n, states * c_prog, grid.y, grid.x], &prog)?;
            npy::write_f32(&dir.join("boundary.npy"), &[n, states * c_bound, grid.y, grid.x], &bound)?;
            npy::write_f32(&dir.join("label.npy"), &batch.label_shape, &step.label)?;
            npy::write_f32(&dir.join("model_input.npy"), &batch.input_shape, &step.input)?;
        }
        written += 1;
    }
    println!("wrote {written} of {} batches ({} steps each) and the schedule to {}", all.len(), steps, a.out.display());
    Ok(())
}
