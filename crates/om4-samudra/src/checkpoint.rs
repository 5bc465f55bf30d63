//! Checkpoints on disk: weights in new files, then `state.json` (which names them) replaced
//! atomically; a resume reads everything before anything is replaced. The trainer turns its state
//! into a [`State`] and back (`Trainer::save`, `Trainer::resume`).

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::optim::ModuleOptimizer;
use burn::store::ModuleRecord;
use serde::{Deserialize, Serialize};

use crate::config::TrainConfig;
use crate::data_record::DataRecord;
use crate::error::{Error, Result};
use crate::loss::DynamicLoss;
use crate::model::{Samudra, SamudraConfig};

/// `state.json`: what a checkpoint holds besides the weights, and which weight files are its own.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct State {
    /// The last completed epoch.
    pub(crate) epoch: usize,
    pub(crate) ema_updates: u64,
    pub(crate) loss_weights: Option<DynamicLoss>,
    pub(crate) config: TrainConfig,
    pub(crate) model: SamudraConfig,
    /// The weight files are `model-{generation}.bpk` (and `ema`, `optim`); 0 names `model.bpk`.
    /// Set by [`write`].
    #[serde(default)]
    pub(crate) generation: u64,
    /// Set when the checkpoint was written inside an epoch.
    #[serde(default)]
    pub(crate) progress: Option<Progress>,
    /// The ranks of the data-parallel run that wrote it (1 for one process).
    #[serde(default = "one_rank")]
    pub(crate) world_size: usize,
    /// The data it was trained on, when the trainer was given its record (checkpoints written
    /// before records were kept have none and resume unchecked).
    #[serde(default)]
    pub(crate) data: Option<DataRecord>,
}

fn one_rank() -> usize {
    1
}

/// How far an epoch had got when a checkpoint was written inside it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct Progress {
    /// The epoch in progress.
    pub(crate) epoch: usize,
    /// Its batches already trained on.
    pub(crate) batches: usize,
    /// Their summed loss and their samples (over all ranks), for the epoch's report.
    pub(crate) loss_sum: f64,
    pub(crate) samples: usize,
}

/// A checkpoint's weight file `name` of `generation`.
fn weight_file(name: &str, generation: u64) -> String {
    if generation == 0 { format!("{name}.bpk") } else { format!("{name}-{generation}.bpk") }
}

/// Flushes a written file (or directory) to disk.
fn sync(path: &Path) -> std::io::Result<()> {
    std::fs::File::open(path)?.sync_all()
}

fn err(path: &Path, reason: String) -> Error {
    Error::Checkpoint { path: path.to_path_buf(), reason }
}

/// Writes `model`, `ema` and `optim` to new files of the next generation under `dir`, then
/// `state` (naming them) atomically, then removes the previous generation's files: a run killed
/// while saving leaves the previous checkpoint whole.
///
/// # Errors
/// [`Error::Checkpoint`] when a file cannot be written.
pub(crate) fn write(
    dir: &Path,
    model: &Samudra,
    ema: &Samudra,
    optim: &ModuleOptimizer,
    mut state: State,
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| err(dir, e.to_string()))?;
    // The next generation after the one the directory holds (if it holds a readable one).
    let previous = std::fs::read_to_string(dir.join("state.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<State>(&text).ok())
        .map(|s| s.generation);
    let generation = previous.map_or(1, |g| g + 1);
    let path = |name: &str| dir.join(weight_file(name, generation));
    let written = |p: PathBuf, r: std::result::Result<(), String>| {
        r.and_then(|()| sync(&p).map_err(|e| e.to_string())).map_err(|e| err(&p, e))
    };
    written(path("model"), model.clone().into_record().save(path("model")).map_err(|e| e.to_string()))?;
    written(path("ema"), ema.clone().into_record().save(path("ema")).map_err(|e| e.to_string()))?;
    written(path("optim"), optim.save(path("optim")).map_err(|e| e.to_string()))?;
    state.generation = generation;
    let text = serde_json::to_string_pretty(&state).map_err(|e| err(dir, e.to_string()))?;
    let (tmp, target) = (dir.join("state.json.tmp"), dir.join("state.json"));
    written(tmp.clone(), std::fs::write(&tmp, text).map_err(|e| e.to_string()))?;
    std::fs::rename(&tmp, &target).map_err(|e| err(&target, e.to_string()))?;
    sync(dir).map_err(|e| err(dir, e.to_string()))?;
    // Only now are the previous generation's files unreferenced. (Files of a save killed
    // before its rename carry the generation the next save writes again.)
    if let Some(old) = previous.filter(|&g| g != generation) {
        for name in ["model", "ema", "optim"] {
            let _ = std::fs::remove_file(dir.join(weight_file(name, old)));
        }
    }
    Ok(())
}

/// Reads `dir/state.json`.
///
/// # Errors
/// [`Error::Checkpoint`] for a missing or unreadable file.
pub(crate) fn read(dir: &Path) -> Result<State> {
    let path = dir.join("state.json");
    let text = std::fs::read_to_string(&path).map_err(|e| err(&path, e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| err(&path, e.to_string()))
}

impl State {
    /// Whether a run of `model` over `world_size` ranks with `config` on `data` can continue
    /// this checkpoint.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] naming `dir` and what differs.
    pub(crate) fn check_resumable(
        &self,
        dir: &Path,
        model: &SamudraConfig,
        world_size: usize,
        config: &TrainConfig,
        data: Option<&DataRecord>,
    ) -> Result<()> {
        if self.model != *model {
            return Err(err(dir, "the checkpoint was written for another architecture".into()));
        }
        if let (Some(then), Some(now)) = (&self.data, data) {
            let differences = then.differences(now);
            if !differences.is_empty() {
                return Err(err(
                    dir,
                    format!(
                        "trained on other data than this run's (checkpoint → this run): {}",
                        differences.join("; ")
                    ),
                ));
            }
        }
        if self.world_size != world_size {
            return Err(err(
                dir,
                format!(
                    "written by a run of {} rank(s), but this run has {world_size}: its schedule, batch positions and \
                     effective batch size differ (resume with the same number of ranks)",
                    self.world_size,
                ),
            ));
        }
        // A batch number means something only in the same epoch schedule.
        let schedule = |c: &TrainConfig| {
            (
                c.batch_size,
                c.rand_seed,
                c.hist,
                c.steps,
                c.curriculum_steps.clone(),
                c.step_transition.clone(),
                c.data_stride,
                c.grad_accumulation,
            )
        };
        if self.progress.is_some() && schedule(&self.config) != schedule(config) {
            return Err(err(
                dir,
                "written inside an epoch: resuming it needs the same batch size, seed, window and gradient \
                 accumulation"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The checkpoint's weights loaded into copies of `model`, `ema` and `optim` (all read before
    /// the caller replaces anything).
    ///
    /// # Errors
    /// [`Error::Checkpoint`] for a missing or mismatched weight file.
    pub(crate) fn load(
        &self,
        dir: &Path,
        model: &Samudra,
        ema: &Samudra,
        optim: &ModuleOptimizer,
    ) -> Result<(Samudra, Samudra, ModuleOptimizer)> {
        let file = |name: &str| dir.join(weight_file(name, self.generation));
        let load = |name: &str| ModuleRecord::load(file(name)).map_err(|e| err(&file(name), e.to_string()));
        let model = model.clone().load_record(load("model")?);
        let ema = ema.clone().load_record(load("ema")?);
        let optim = optim.clone().load(file("optim")).map_err(|e| err(&file("optim"), e.to_string()))?;
        Ok((model, ema, optim))
    }
}
