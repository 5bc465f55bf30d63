//! Autoregressive training of Samudra from om4 batches.
//!
//! Step 0 takes the data's prognostic input and boundary forcing; step `s > 0` takes the previous
//! prediction (all `h + 1` states) plus the true boundary of step `s`. The loss is a masked MSE per
//! channel (prediction and target masked, mean over all cells), summed over steps, then averaged
//! over channels. Adam (ε = 1e-8) with gradient-norm clipping at 1.0, a cosine learning rate per
//! epoch, gradient accumulation, an EMA of the weights (0.999 with warm-up) used for validation
//! (`steps = 1`), and checkpoints that resume exactly, also from inside an epoch; a checkpoint is
//! replaced atomically (weights first, then the `state.json` that names them).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::optim::{AdamConfig, GradientsAccumulator, GradientsParams, ModuleOptimizer};
use burn::store::ModuleRecord;
use burn::tensor::{Bool, Device, Tensor, TensorData};
use om4_batch::{SampleSpace, Schedule, WindowSpec};
use om4_burn::{BatchSource, BatchTelemetry, BufferPool, EpochSummary, Loader, LoaderConfig, ModelBatch, Om4Source};
use serde::{Deserialize, Serialize};

use crate::model::{Samudra, SamudraConfig};

/// Errors of training.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Data loading failed.
    #[error(transparent)]
    Data(#[from] om4_burn::Error),
    /// Planning failed.
    #[error(transparent)]
    Plan(#[from] om4_batch::Error),
    /// The loss or the gradient norm is NaN or infinite.
    #[error("non-finite {what} ({value}) at epoch {epoch}, batch {batch}: training stopped")]
    NonFinite {
        /// `loss` or `gradient norm`.
        what: &'static str,
        /// Epoch.
        epoch: usize,
        /// Batch in the epoch.
        batch: usize,
        /// The offending value.
        value: f32,
    },
    /// Reading or writing a checkpoint failed.
    #[error("checkpoint {path}: {reason}")]
    Checkpoint {
        /// File.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A configuration value is out of range.
    #[error("invalid {field}: {reason}")]
    Config {
        /// Field.
        field: &'static str,
        /// Why.
        reason: String,
    },
}

/// `Result` of training.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Training settings (Samudra's `train`/`experiment` words where they exist).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    /// Epochs.
    pub epochs: usize,
    /// Peak learning rate (cosine-annealed per epoch to 0).
    pub learning_rate: f64,
    /// Samples per batch.
    pub batch_size: usize,
    /// History `hist`.
    pub hist: usize,
    /// Rollout steps in training.
    pub steps: usize,
    /// Stride between states.
    pub data_stride: usize,
    /// Micro-batches per optimizer step.
    pub grad_accumulation: usize,
    /// Gradient-norm clip.
    pub grad_clip: f32,
    /// EMA decay (with warm-up `min(decay, (1+n)/(10+n))`).
    pub ema_decay: f64,
    /// Seed of the schedule and of initialization.
    pub rand_seed: u64,
    /// Samudra's dynamic per-variable loss weights (window 25), limited to `limit × min`; `None`: plain mean.
    pub dynamic_loss_limit: Option<f32>,
    /// Train split `[start, end)`, dates.
    pub train_time: (Option<String>, Option<String>),
    /// Validation split `[start, end)`, dates.
    pub val_time: (Option<String>, Option<String>),
    /// Loader settings.
    pub loading: LoaderConfig,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            epochs: 70,
            learning_rate: 6e-4,
            batch_size: 4,
            hist: 1,
            steps: 4,
            data_stride: 1,
            grad_accumulation: 1,
            grad_clip: 1.0,
            ema_decay: 0.999,
            rand_seed: 15,
            dynamic_loss_limit: None,
            train_time: (None, None),
            val_time: (None, None),
            loading: LoaderConfig::default(),
        }
    }
}

/// What one epoch did.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EpochReport {
    /// Epoch (1-based).
    pub epoch: usize,
    /// Mean training loss.
    pub train_loss: f64,
    /// Mean validation loss (EMA weights, one step).
    pub val_loss: f64,
    /// Training samples per second.
    pub samples_per_s: f64,
    /// Median data wait per batch.
    pub wait_p50: Duration,
    /// 95th percentile data wait.
    pub wait_p95: Duration,
    /// Data wait as a share of the epoch's wall time.
    pub wait_share: f64,
    /// Wall time of the epoch (training and validation).
    pub wall: Duration,
}

/// Something that maps a model input to a prediction: Samudra, or a stub in tests.
pub trait Predictor {
    /// `(B, inputs, Y, X)` → `(B, outputs, Y, X)`.
    fn predict(&self, input: Tensor<4>) -> Tensor<4>;
}

/// Samudra with its land mask.
#[derive(Debug)]
pub struct Masked<'a> {
    /// The network.
    pub model: &'a Samudra,
    /// True on land, `(1, outputs, Y, X)`.
    pub land: Tensor<4, Bool>,
}

impl Predictor for Masked<'_> {
    fn predict(&self, input: Tensor<4>) -> Tensor<4> {
        self.model.forward(input, self.land.clone())
    }
}

/// Per-channel masked MSE over a rollout, summed over steps: `(outputs,)`.
///
/// `prognostic_inputs` is `(h+1)·C_prog`, the prognostic part of each step's input.
pub fn rollout_loss(
    model: &impl Predictor,
    batch: &ModelBatch,
    label_mask: &Tensor<4>,
    prognostic_inputs: usize,
) -> Tensor<1> {
    let mut total: Option<Tensor<1>> = None;
    let mut previous: Option<Tensor<4>> = None;
    for step in &batch.steps {
        let input = match previous.take() {
            None => step.input.clone(),
            Some(pred) => {
                let [b, c, h, w] = step.input.dims();
                let boundary = step.input.clone().slice([0..b, prognostic_inputs..c, 0..h, 0..w]);
                Tensor::cat(vec![pred, boundary], 1)
            }
        };
        let pred = model.predict(input);
        let mask = label_mask.clone().expand(pred.shape());
        let diff = pred.clone() * mask.clone() - step.label.clone() * mask;
        let channels = diff.dims()[1];
        let per_channel = diff.powi_scalar(2).mean_dim(0).mean_dim(2).mean_dim(3).reshape([channels]);
        total = Some(match total {
            None => per_channel,
            Some(t) => t + per_channel,
        });
        previous = Some(pred);
    }
    total.expect("a batch has at least one step")
}

/// Exponential moving average of a model's parameters.
#[derive(Debug)]
pub struct Ema {
    model: Samudra,
    decay: f64,
    updates: u64,
}

struct Collect(HashMap<ParamId, Tensor<1>>);
impl ModuleVisitor for Collect {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let t = param.val();
        let n = t.shape().num_elements();
        self.0.insert(param.id, t.reshape([n]));
    }
}

struct Blend<'a> {
    source: &'a HashMap<ParamId, Tensor<1>>,
    keep: f64,
}
impl ModuleMapper for Blend<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let Some(src) = self.source.get(&param.id).cloned() else { return param };
        let keep = self.keep;
        param.map(|t| {
            let shape = t.shape();
            t * keep + src.reshape::<D, _>(shape) * (1.0 - keep)
        })
    }
}

impl Ema {
    /// Starts from a copy of `model` (inference mode).
    pub fn new(model: &Samudra, decay: f64) -> Self {
        Self { model: model.valid(), decay, updates: 0 }
    }
    /// Blends in `model` after an optimizer step.
    pub fn update(&mut self, model: &Samudra) {
        let mut collect = Collect(HashMap::new());
        model.valid().visit(&mut collect);
        let keep = self.decay.min((1.0 + self.updates as f64) / (10.0 + self.updates as f64));
        self.model = self.model.clone().map(&mut Blend { source: &collect.0, keep });
        self.updates += 1;
    }
    /// The averaged model.
    pub fn model(&self) -> &Samudra {
        &self.model
    }
}

/// The global L2 norm of a model's gradients (what clipping by norm measures), read back once.
pub fn grad_norm<M: Module>(model: &M, grads: &GradientsParams) -> f32 {
    struct SumSquares<'a> {
        grads: &'a GradientsParams,
        total: Option<Tensor<1>>,
    }
    impl ModuleVisitor for SumSquares<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(g) = self.grads.get::<D>(param.id) {
                let s = g.powi_scalar(2).sum();
                self.total = Some(match self.total.take() {
                    Some(t) => t + s,
                    None => s,
                });
            }
        }
    }
    let mut v = SumSquares { grads, total: None };
    model.visit(&mut v);
    v.total.map_or(0.0, |t| t.sqrt().into_scalar::<f32>())
}

/// Cosine annealing to 0 over `epochs`, stepped once per epoch (epoch 1 uses the peak).
pub fn cosine_lr(peak: f64, epoch: usize, epochs: usize) -> f64 {
    let e = (epoch.saturating_sub(1)) as f64;
    peak * 0.5 * (1.0 + (std::f64::consts::PI * e / epochs.max(1) as f64).cos())
}

/// Samudra's dynamic loss weights: one scale per prognostic variable, shared across history.
/// After each batch, `w = mean over history of 1 / max(loss, 1e-8)` from a no-grad single step,
/// clamped to `[min w, limit · min w]`, then `s ← (24 s + w) / 25`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DynamicLoss {
    /// Current scales, one per prognostic variable.
    pub scales: Vec<f32>,
    /// Upper limit as a multiple of the smallest weight.
    pub limit: f32,
}

impl DynamicLoss {
    const WINDOW: f32 = 25.0;

    /// Unit scales for `channels` variables.
    pub fn new(channels: usize, limit: f32) -> Self {
        Self { scales: vec![1.0; channels], limit }
    }

    /// The scales tiled over `states` history states: `(states · channels,)`.
    pub fn tiled(&self, states: usize) -> Vec<f32> {
        self.scales.repeat(states)
    }

    /// Updates the scales from a per-channel loss of `states · channels` values.
    pub fn update(&mut self, per_channel: &[f32], states: usize) {
        let c = self.scales.len();
        let w: Vec<f32> = (0..c)
            .map(|v| (0..states).map(|j| 1.0 / per_channel[j * c + v].max(1e-8)).sum::<f32>() / states as f32)
            .collect();
        let lo = w.iter().copied().fold(f32::INFINITY, f32::min);
        for (s, w) in self.scales.iter_mut().zip(w) {
            let w = w.clamp(lo, lo * self.limit);
            *s = ((Self::WINDOW - 1.0) * *s + w) / Self::WINDOW;
        }
    }
}

/// `state.json`: what a checkpoint holds besides the weights, and which weight files are its own.
#[derive(Debug, Serialize, Deserialize)]
struct State {
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
}

/// How far an epoch had got when a checkpoint was written inside it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Progress {
    /// The epoch in progress.
    epoch: usize,
    /// Its batches already trained on.
    batches: usize,
    /// Their summed loss and their samples, for the epoch's report.
    loss_sum: f64,
    samples: usize,
}

/// A checkpoint's weight file `name` of `generation`.
fn weight_file(name: &str, generation: u64) -> String {
    if generation == 0 { format!("{name}.bpk") } else { format!("{name}-{generation}.bpk") }
}

/// Flushes a written file (or directory) to disk.
fn sync(path: &Path) -> std::io::Result<()> {
    std::fs::File::open(path)?.sync_all()
}

/// A training run: model, optimizer, EMA and data.
pub struct Trainer {
    /// Settings.
    pub config: TrainConfig,
    /// Architecture.
    pub model_config: SamudraConfig,
    model: Samudra,
    optim: ModuleOptimizer,
    ema: Ema,
    device: Device,
    train: Loader<Om4Source>,
    val: Loader<Om4Source>,
    label_mask: Tensor<4>,
    land: Tensor<4, Bool>,
    prognostic_inputs: usize,
    next_epoch: usize,
    dynamic: Option<DynamicLoss>,
    /// Where and how often (in optimizer steps) to checkpoint inside an epoch.
    checkpoint: Option<(PathBuf, usize)>,
    /// Where a resumed run picks up inside its epoch.
    resume_at: Option<Progress>,
}

impl std::fmt::Debug for Trainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer")
            .field("config", &self.config)
            .field("next_epoch", &self.next_epoch)
            .finish_non_exhaustive()
    }
}

impl Trainer {
    /// Builds the model and the train and validation loaders over `source` (autodiff is enabled on `device`).
    ///
    /// # Errors
    /// A split too short for its windows, or a bad configuration.
    pub fn new(config: TrainConfig, model_config: SamudraConfig, source: &Om4Source, device: Device) -> Result<Self> {
        Self::with_staging(config, model_config, source, device, BufferPool::new())
    }

    /// [`Trainer::new`] with the host staging pool both loaders share, e.g.
    /// `BufferPool::pinned(0)?` for a CUDA device (feature `cuda`).
    ///
    /// # Errors
    /// As [`Trainer::new`].
    pub fn with_staging(
        config: TrainConfig,
        model_config: SamudraConfig,
        source: &Om4Source,
        device: Device,
        staging: BufferPool,
    ) -> Result<Self> {
        if config.batch_size == 0 || config.epochs == 0 || config.grad_accumulation == 0 {
            return Err(Error::Config {
                field: "batch_size/epochs/grad_accumulation",
                reason: "must be at least 1".into(),
            });
        }
        let device = device.autodiff();
        // Seeded initialization: the same config trains the same network.
        device.seed(config.rand_seed);
        let states = config.hist + 1;
        let spec = WindowSpec::new(config.hist, config.steps, config.data_stride)?;
        let (ts, te) = &config.train_time;
        let (vs, ve) = &config.val_time;
        let train_src = Arc::new(source.with_range(ts.as_deref(), te.as_deref())?);
        let val_src = Arc::new(source.with_range(vs.as_deref(), ve.as_deref())?);
        let train_space = SampleSpace::single(spec, train_src.time_len())?;
        let val_space = SampleSpace::single(spec.with_steps(1)?, val_src.time_len())?;
        let seed = config.rand_seed;
        let train = Loader::new(
            Arc::clone(&train_src),
            train_space,
            Schedule::training(config.batch_size, seed, None)?,
            config.loading,
            device.clone(),
        )
        .with_buffers(staging.clone());
        let val = Loader::new(
            val_src,
            val_space,
            Schedule::validation(config.batch_size, seed, None)?,
            config.loading,
            device.clone(),
        )
        .with_buffers(staging);
        let channels = source.channels();
        let (c_prog, c_bound) = (channels[0], channels.get(1).copied().unwrap_or(0));
        let grid = source.grid();
        let prog = &source.preparations()[0];
        let label_mask = om4_burn::label_mask(prog, states, grid, &device);
        // Land is where the label mask is 0: one source for both.
        let land = label_mask.clone().equal_elem(0.0);
        let model = model_config.init(states * (c_prog + c_bound), states * c_prog, &device);
        let optim = AdamConfig::new()
            .with_epsilon(1e-8)
            .with_grad_clipping(Some(burn::grad_clipping::GradientClippingConfig::Norm(config.grad_clip)))
            .init();
        let ema = Ema::new(&model, config.ema_decay);
        let dynamic = config.dynamic_loss_limit.map(|limit| DynamicLoss::new(c_prog, limit));
        Ok(Self {
            config,
            model_config,
            model,
            optim,
            ema,
            device,
            train,
            val,
            label_mask,
            land,
            prognostic_inputs: states * c_prog,
            next_epoch: 1,
            dynamic,
            checkpoint: None,
            resume_at: None,
        })
    }

    /// Also checkpoints into `dir` inside each epoch, after every `every_steps` optimizer steps
    /// (the same files [`save`](Self::save) writes; [`resume`](Self::resume) then continues
    /// from the next batch of that epoch, exactly as if the run had not stopped).
    ///
    /// # Errors
    /// [`Error::Config`] when `every_steps` is zero.
    pub fn checkpoint_every(&mut self, dir: impl Into<PathBuf>, every_steps: usize) -> Result<()> {
        if every_steps == 0 {
            return Err(Error::Config { field: "checkpoint_every", reason: "must be at least 1 step".into() });
        }
        self.checkpoint = Some((dir.into(), every_steps));
        Ok(())
    }

    /// Where the next [`run_epoch`](Self::run_epoch) starts: `(epoch, batches already done)`;
    /// the second is non-zero after resuming from a checkpoint written inside an epoch.
    pub fn resume_point(&self) -> (usize, usize) {
        (self.next_epoch, self.resume_at.map_or(0, |p| p.batches))
    }

    /// The model being trained.
    pub fn model(&self) -> &Samudra {
        &self.model
    }
    /// The EMA model.
    pub fn ema(&self) -> &Samudra {
        self.ema.model()
    }
    /// The next epoch to run.
    pub fn next_epoch(&self) -> usize {
        self.next_epoch
    }
    /// Batches per training epoch.
    pub fn train_batches(&self) -> usize {
        self.train.len()
    }
    /// The label mask `(1, (h+1)·C_prog, Y, X)`.
    pub fn label_mask(&self) -> &Tensor<4> {
        &self.label_mask
    }
    /// The land mask of the outputs.
    pub fn land(&self) -> &Tensor<4, Bool> {
        &self.land
    }

    /// Mean loss of one batch's rollout (no gradient), with `model`.
    pub fn eval_loss(&self, model: &Samudra, batch: &ModelBatch) -> f32 {
        let m = Masked { model, land: self.land.clone() };
        let l = rollout_loss(&m, batch, &self.label_mask, self.prognostic_inputs).mean();
        l.into_scalar::<f32>()
    }

    /// Runs one training epoch and one validation pass. `on_batch(done, total, loss, telemetry)`
    /// is called after each training batch.
    ///
    /// # Errors
    /// A data error, or [`Error::NonFinite`] when the loss is NaN or infinite.
    pub fn run_epoch(&mut self, mut on_batch: impl FnMut(usize, usize, f64, &BatchTelemetry)) -> Result<EpochReport> {
        let epoch = self.next_epoch;
        let t0 = Instant::now();
        let lr = cosine_lr(self.config.learning_rate, epoch, self.config.epochs);
        let total = self.train.len();
        let mut accum = GradientsAccumulator::new();
        let mut pending = 0;
        // A run resumed inside this epoch starts after the batches its checkpoint had done.
        let start = self.resume_at.take().filter(|p| p.epoch == epoch);
        let first = start.map_or(0, |p| p.batches);
        let (mut loss_sum, mut samples) = start.map_or((0.0f64, 0usize), |p| (p.loss_sum, p.samples));
        let samples_before = samples;
        let mut telemetry = Vec::with_capacity(total - first.min(total));
        let micro = self.config.grad_accumulation;
        let mut optimizer_steps = 0usize;
        for (k, batch) in self.train.epoch_from(epoch as u64, first)?.enumerate() {
            let k = first + k;
            let batch = batch?;
            let masked = Masked { model: &self.model, land: self.land.clone() };
            let per_channel = rollout_loss(&masked, &batch.batch, &self.label_mask, self.prognostic_inputs);
            let loss = match &self.dynamic {
                Some(d) => {
                    let states = self.config.hist + 1;
                    let scales = Tensor::<1>::from_data(
                        TensorData::new(d.tiled(states), [d.scales.len() * states]),
                        &self.device,
                    );
                    (per_channel * scales).mean()
                }
                None => per_channel.mean(),
            };
            let value = loss.clone().into_scalar::<f32>();
            if !value.is_finite() {
                return Err(Error::NonFinite { what: "loss", epoch, batch: k, value });
            }
            let grads = GradientsParams::from_grads((loss / micro as f64).backward(), &self.model);
            let norm = grad_norm(&self.model, &grads);
            if !norm.is_finite() {
                return Err(Error::NonFinite { what: "gradient norm", epoch, batch: k, value: norm });
            }
            accum.accumulate(&self.model, grads);
            pending += 1;
            let stepped = pending == micro || k + 1 == total;
            if stepped {
                self.model = self.optim.step(lr, self.model.clone(), accum.grads());
                self.ema.update(&self.model);
                pending = 0;
                optimizer_steps += 1;
            }
            if self.dynamic.is_some() {
                self.update_loss_weights(&batch.batch);
            }
            loss_sum += f64::from(value);
            samples += batch.samples.len();
            telemetry.push(batch.telemetry);
            on_batch(k + 1, total, loss_sum / (k + 1) as f64, &batch.telemetry);
            // Inside the epoch, right after an optimizer step (nothing accumulated is lost).
            if let Some((dir, every)) = &self.checkpoint
                && stepped
                && optimizer_steps.is_multiple_of(*every)
                && k + 1 < total
            {
                let progress = Progress { epoch, batches: k + 1, loss_sum, samples };
                self.write_checkpoint(dir, Some(progress))?;
            }
        }
        let done = first + telemetry.len();
        let train_wall = t0.elapsed();
        let ema = self.ema.model().clone();
        let (mut val_sum, mut val_n) = (0.0f64, 0usize);
        for batch in self.val.epoch(epoch as u64)? {
            let batch = batch?;
            val_sum += f64::from(self.eval_loss(&ema, &batch.batch));
            val_n += 1;
        }
        let summary = EpochSummary::of(&telemetry);
        self.next_epoch += 1;
        Ok(EpochReport {
            epoch,
            train_loss: loss_sum / done.max(1) as f64,
            val_loss: if val_n == 0 { f64::NAN } else { val_sum / val_n as f64 },
            // This call's samples only: a resumed epoch's earlier ones took no time here.
            samples_per_s: (samples - samples_before) as f64 / train_wall.as_secs_f64(),
            wait_p50: summary.wait.p50,
            wait_p95: summary.wait.p95,
            wait_share: summary.wait.total.as_secs_f64() / train_wall.as_secs_f64(),
            wall: t0.elapsed(),
        })
    }

    /// Refreshes the dynamic loss weights with a no-grad single step on the batch's first step.
    fn update_loss_weights(&mut self, batch: &ModelBatch) {
        let Some(dynamic) = self.dynamic.as_mut() else { return };
        let model = self.model.valid();
        let first = &batch.steps[0];
        let one_step = ModelBatch {
            batch: batch.batch,
            steps: vec![om4_burn::StepTensors {
                input: first.input.clone().inner(),
                label: first.label.clone().inner(),
            }],
        };
        let masked = Masked { model: &model, land: self.land.clone().inner() };
        let per_channel = rollout_loss(&masked, &one_step, &self.label_mask.clone().inner(), self.prognostic_inputs);
        let values: Vec<f32> = per_channel.into_data().try_to_vec::<f32>().unwrap_or_default();
        dynamic.update(&values, self.config.hist + 1);
    }

    /// The dynamic loss weights, when enabled.
    pub fn loss_weights(&self) -> Option<&DynamicLoss> {
        self.dynamic.as_ref()
    }

    /// Saves model, EMA, optimizer and progress under `dir`, as of the end of the last epoch run.
    ///
    /// The weights go to new files first and `state.json`, which names them, is replaced
    /// atomically last: a run killed while saving leaves the previous checkpoint whole.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] when a file cannot be written.
    pub fn save(&self, dir: &Path) -> Result<()> {
        self.write_checkpoint(dir, None)
    }

    fn write_checkpoint(&self, dir: &Path, progress: Option<Progress>) -> Result<()> {
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
    /// continues with that epoch's next batch).
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
        // A batch number means something only in the same epoch schedule.
        let schedule = |c: &TrainConfig| {
            (c.batch_size, c.rand_seed, c.hist, c.steps, c.data_stride, c.grad_accumulation, c.train_time.clone())
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
        self.resume_at = state.progress.filter(|p| p.epoch == self.next_epoch);
        Ok(())
    }

    /// The device (with autodiff).
    pub fn device(&self) -> &Device {
        &self.device
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dynamic_loss_update_follows_samudra() {
        let mut d = DynamicLoss::new(2, 20.0);
        // states 2 × channels 2: losses [1, 4 | 1, 4] → w = [1, 0.25], inside [0.25, 5]
        d.update(&[1.0, 4.0, 1.0, 4.0], 2);
        assert_eq!(d.scales, vec![1.0, (24.0 + 0.25) / 25.0]);
        // a tiny loss gives a huge weight, clamped to limit × the smallest
        let mut d = DynamicLoss::new(2, 20.0);
        d.update(&[1.0, 1e-12], 1);
        assert_eq!(d.scales, vec![1.0, (24.0 + 20.0) / 25.0]);
        assert_eq!(d.tiled(2), vec![1.0, 44.0 / 25.0, 1.0, 44.0 / 25.0]);
    }

    #[test]
    fn gradient_norm_is_global_l2_and_flags_nan() {
        use burn::nn::conv::Conv2dConfig;
        let device = Device::flex().autodiff();
        let conv = Conv2dConfig::new([1, 1], [1, 1]).init(&device);
        let x = Tensor::<4>::full([1, 1, 2, 2], 2.0, &device);
        let grads = GradientsParams::from_grads(conv.forward(x).sum().backward(), &conv);
        // d/dw = Σx = 8, d/db = 4 cells → √(64 + 16)
        assert!((grad_norm(&conv, &grads) - 80f32.sqrt()).abs() < 1e-5);
        let nan = Tensor::<4>::full([1, 1, 2, 2], f32::NAN, &device);
        let grads = GradientsParams::from_grads(conv.forward(nan).sum().backward(), &conv);
        assert!(!grad_norm(&conv, &grads).is_finite());
    }

    #[test]
    fn cosine_schedule_per_epoch() {
        assert_eq!(cosine_lr(6e-4, 1, 70), 6e-4);
        assert!((cosine_lr(6e-4, 36, 70) - 3e-4).abs() < 1e-12);
        assert!(cosine_lr(6e-4, 70, 70) > 0.0);
    }
}
