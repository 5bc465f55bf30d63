//! Checkpoints: weights in new files, then `state.json` (which names them) replaced atomically;
//! resume reads everything before replacing anything.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::store::ModuleRecord;
use om4_pipeline::BatchSource;
use serde::{Deserialize, Serialize};

use crate::config::TrainConfig;
use crate::ema::Ema;
use crate::error::{Error, Result};
use crate::loss::DynamicLoss;
use crate::model::SamudraConfig;
use crate::trainer::Trainer;

/// `state.json`: what a checkpoint holds besides the weights, and which weight files are its own.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct State {
    /// The last completed epoch.
    epoch: usize,
    ema_updates: u64,
    loss_weights: Option<DynamicLoss>,
    config: TrainConfig,
    model: SamudraConfig,
    /// The weight files are `model-{generation}.bpk` (and `ema`, `optim`); 0 names `model.bpk`.
    #[serde(default)]
    generation: u64,
    /// Set when the checkpoint was written inside an epoch.
    #[serde(default)]
    progress: Option<Progress>,
    /// The ranks of the data-parallel run that wrote it (1 for one process).
    #[serde(default = "one_rank")]
    world_size: usize,
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

impl<S: BatchSource> Trainer<S> {
    /// Saves model, EMA, optimizer and progress under `dir`, as of the end of the last epoch run
    /// (on a data-parallel rank other than 0 it writes nothing: rank 0's files are the run's).
    ///
    /// The weights go to new files first and `state.json`, which names them, is replaced
    /// atomically last: a run killed while saving leaves the previous checkpoint whole.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] when a file cannot be written.
    pub fn save(&self, dir: &Path) -> Result<()> {
        self.write_checkpoint(dir, None)
    }

    pub(crate) fn write_checkpoint(&self, dir: &Path, progress: Option<Progress>) -> Result<()> {
        // Every rank holds the same weights; rank 0 alone writes them.
        if self.parallel.rank() != 0 {
            return Ok(());
        }
        let err = |path: &Path, reason: String| Error::Checkpoint { path: path.to_path_buf(), reason };
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
        written(path("model"), self.model.clone().into_record().save(path("model")).map_err(|e| e.to_string()))?;
        written(path("ema"), self.ema.model().clone().into_record().save(path("ema")).map_err(|e| e.to_string()))?;
        written(path("optim"), self.optim.save(path("optim")).map_err(|e| e.to_string()))?;
        let state = State {
            epoch: self.next_epoch - 1,
            ema_updates: self.ema.updates,
            loss_weights: self.dynamic.clone(),
            config: self.config.clone(),
            model: self.model_config.clone(),
            generation,
            progress,
            world_size: self.parallel.world_size(),
        };
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

    /// Restores a checkpoint written by [`save`](Self::save) (training continues with the next
    /// epoch) or inside an epoch by [`checkpoint_every`](Self::checkpoint_every) (training
    /// continues with that epoch's next batch). Under [`crate::DataParallel`] every rank reads the
    /// same files, and a checkpoint of another world size is refused.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] for missing or mismatched files.
    pub fn resume(&mut self, dir: &Path) -> Result<()> {
        let err = |path: &Path, reason: String| Error::Checkpoint { path: path.to_path_buf(), reason };
        let text =
            std::fs::read_to_string(dir.join("state.json")).map_err(|e| err(&dir.join("state.json"), e.to_string()))?;
        let state: State = serde_json::from_str(&text).map_err(|e| err(&dir.join("state.json"), e.to_string()))?;
        if state.model != self.model_config {
            return Err(err(dir, "the checkpoint was written for another architecture".into()));
        }
        if state.world_size != self.parallel.world_size() {
            return Err(err(
                dir,
                format!(
                    "written by a run of {} rank(s), but this run has {}: its schedule, batch positions and \
                     effective batch size differ (resume with the same number of ranks)",
                    state.world_size,
                    self.parallel.world_size()
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
                c.train_time,
            )
        };
        if state.progress.is_some() && schedule(&state.config) != schedule(&self.config) {
            return Err(err(
                dir,
                "written inside an epoch: resuming it needs the same batch size, seed, window, gradient \
                 accumulation and training split"
                    .into(),
            ));
        }
        let file = |name: &str| dir.join(weight_file(name, state.generation));
        let load = |name: &str| ModuleRecord::load(file(name)).map_err(|e| err(&file(name), e.to_string()));
        // Everything is read before anything is replaced: a failed resume leaves the trainer as it was.
        let model = self.model.clone().load_record(load("model")?);
        let ema = self.ema.model().clone().load_record(load("ema")?);
        let optim = self.optim.clone().load(file("optim")).map_err(|e| err(&file("optim"), e.to_string()))?;
        self.model = model;
        self.ema = Ema { model: ema, decay: self.config.ema_decay, updates: state.ema_updates };
        self.optim = optim;
        self.dynamic = state.loss_weights;
        self.next_epoch = state.epoch + 1;
        self.start_epoch = self.next_epoch;
        self.resume_at = state.progress.filter(|p| p.epoch == self.next_epoch);
        Ok(())
    }
}
