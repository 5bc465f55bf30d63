//! The training run: model, optimizer, EMA and the train and validation loaders.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use burn::module::Module;
use burn::optim::{GradientsAccumulator, ModuleOptimizer};
use burn::tensor::{Bool, Device, Tensor, TensorData};
use om4_batch::{SampleSpace, Schedule, WindowSpec};
use om4_burn::{Loader, ModelBatch, loader};
use om4_pipeline::{BatchSource, BatchTelemetry, BufferPool, EpochSummary, LoaderConfig, PrepareOn};
use om4_store::Om4Source;

use crate::builder::TrainerBuilder;
use crate::checkpoint::{self, Progress, State};
use crate::config::{EpochReport, TrainConfig};
use crate::data_record::DataRecord;
use crate::ema::Ema;
use crate::error::{Error, Result};
use crate::loss::{DynamicLoss, cosine_lr};
use crate::model::{Samudra, SamudraConfig};
use crate::parallel::{self, DataParallel};
use crate::step::{self, LossTargets};

/// A training run: model, optimizer, EMA and the train and validation data, from any
/// [`BatchSource`] (an OM4 store by default).
pub struct Trainer<S: BatchSource = Om4Source> {
    /// Settings.
    pub config: TrainConfig,
    /// Architecture.
    pub model_config: SamudraConfig,
    pub(crate) model: Samudra,
    pub(crate) optim: ModuleOptimizer,
    pub(crate) ema: Ema,
    pub(crate) device: Device,
    pub(crate) train: Loader<S>,
    pub(crate) val: Loader<S>,
    /// What the training loader is rebuilt from when the curriculum changes the rollout length.
    pub(crate) train_src: Arc<S>,
    /// Which processes share the run.
    pub(crate) parallel: DataParallel,
    pub(crate) staging: BufferPool,
    /// The training loader's rollout steps, and the epoch this run started (or resumed) at.
    pub(crate) train_steps: usize,
    pub(crate) start_epoch: usize,
    pub(crate) targets: LossTargets,
    pub(crate) next_epoch: usize,
    pub(crate) dynamic: Option<DynamicLoss>,
    /// Where and how often (in optimizer steps) to checkpoint inside an epoch.
    pub(crate) checkpoint: Option<(PathBuf, usize)>,
    /// Where a resumed run picks up inside its epoch.
    pub(crate) resume_at: Option<Progress>,
    /// The loaders' settings.
    pub(crate) loader: LoaderSettings,
    /// The data the splits come from, recorded in checkpoints.
    pub(crate) data: Option<DataRecord>,
}

/// How the trainer's loaders are made: the data configuration's loading settings, and the
/// training split's device budget when it is resident.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LoaderSettings {
    pub(crate) loading: LoaderConfig,
    pub(crate) resident: Option<u64>,
}

impl<S: BatchSource> std::fmt::Debug for Trainer<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer")
            .field("config", &self.config)
            .field("next_epoch", &self.next_epoch)
            .finish_non_exhaustive()
    }
}

impl Trainer<Om4Source> {
    /// Opens `data` (its store once, both splits) and starts a builder over its splits with its
    /// loading settings and its [`DataRecord`]; the builder then takes device, staging and
    /// parallelism ([`Trainer::builder`] takes other sources).
    ///
    /// # Errors
    /// As [`DataConfig::open`](om4_store::DataConfig::open): a store that cannot be opened or
    /// validated, a split outside the store's times.
    pub fn over(
        config: TrainConfig,
        model_config: SamudraConfig,
        data: &om4_store::DataConfig,
    ) -> Result<TrainerBuilder<Om4Source>> {
        let splits = data.open()?;
        let (train, val) = (Arc::new(splits.train.clone()), Arc::new(splits.val.clone()));
        Ok(Self::builder(config, model_config, train, val).data(data, &splits))
    }
}

impl<S: BatchSource> Trainer<S> {
    /// Starts building a trainer over a training and a validation source of the same variables
    /// (the sources are the splits).
    pub fn builder(config: TrainConfig, model_config: SamudraConfig, train: Arc<S>, val: Arc<S>) -> TrainerBuilder<S> {
        TrainerBuilder {
            config,
            model_config,
            train,
            val,
            device: Device::flex(),
            staging: BufferPool::new(),
            parallel: DataParallel::Single,
            loader: LoaderSettings::default(),
            data: None,
        }
    }

    /// The training loader for rollouts of `steps` steps, its split resident within
    /// `settings.resident` bytes if given.
    pub(crate) fn train_loader(
        config: &TrainConfig,
        settings: &LoaderSettings,
        source: &Arc<S>,
        steps: usize,
        device: &Device,
        staging: &BufferPool,
        parallel: &DataParallel,
    ) -> Result<Loader<S>> {
        let LoaderSettings { mut loading, resident } = *settings;
        let spec = WindowSpec::new(config.hist, steps, config.data_stride)?;
        let space = SampleSpace::single(spec, source.time_len())?;
        let schedule = parallel.schedule(config.batch_size, config.rand_seed, Schedule::training)?;
        if resident.is_some() && loading.prepare_on == PrepareOn::Auto {
            loading.prepare_on = PrepareOn::Device;
        }
        let loader = loader(Arc::clone(source), space, schedule, loading, device.clone()).with_buffers(staging.clone());
        Ok(match resident {
            Some(budget) => loader.resident(budget)?,
            None => loader,
        })
    }

    /// What the training split's device copy holds, when it is resident
    /// ([`TrainerBuilder::resident`]).
    pub fn train_residency(&self) -> Option<&Arc<om4_pipeline::Residency>> {
        self.train.residency()
    }

    /// The validation loader (one rollout step).
    pub(crate) fn val_loader(
        config: &TrainConfig,
        settings: &LoaderSettings,
        source: &Arc<S>,
        device: &Device,
        staging: &BufferPool,
        parallel: &DataParallel,
    ) -> Result<Loader<S>> {
        let spec = WindowSpec::new(config.hist, 1, config.data_stride)?;
        let space = SampleSpace::single(spec, source.time_len())?;
        let schedule = parallel.schedule(config.batch_size, config.rand_seed, Schedule::validation)?;
        Ok(loader(Arc::clone(source), space, schedule, settings.loading, device.clone()).with_buffers(staging.clone()))
    }

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

    fn write_checkpoint(&self, dir: &Path, progress: Option<Progress>) -> Result<()> {
        // Every rank holds the same weights; rank 0 alone writes them.
        if self.parallel.rank() != 0 {
            return Ok(());
        }
        let state = State {
            epoch: self.next_epoch - 1,
            ema_updates: self.ema.updates,
            loss_weights: self.dynamic.clone(),
            config: self.config.clone(),
            model: self.model_config.clone(),
            generation: 0,
            progress,
            world_size: self.parallel.world_size(),
            data: self.data.clone(),
        };
        checkpoint::write(dir, &self.model, self.ema.model(), &self.optim, state)
    }

    /// Restores a checkpoint written by [`save`](Self::save) (training continues with the next
    /// epoch) or inside an epoch by [`checkpoint_every`](Self::checkpoint_every) (training
    /// continues with that epoch's next batch). Under [`DataParallel`] every rank reads the same
    /// files, and a checkpoint of another world size is refused.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] for missing or mismatched files; the trainer is then as it was.
    pub fn resume(&mut self, dir: &Path) -> Result<()> {
        let state = checkpoint::read(dir)?;
        state.check_resumable(dir, &self.model_config, self.parallel.world_size(), &self.config, self.data.as_ref())?;
        let (model, ema, optim) = state.load(dir, &self.model, self.ema.model(), &self.optim)?;
        self.model = model;
        self.ema = Ema { model: ema, decay: self.config.ema_decay, updates: state.ema_updates };
        self.optim = optim;
        self.dynamic = state.loss_weights;
        self.next_epoch = state.epoch + 1;
        self.start_epoch = self.next_epoch;
        self.resume_at = state.progress.filter(|p| p.epoch == self.next_epoch);
        Ok(())
    }

    /// Which processes share this run.
    pub fn parallel(&self) -> &DataParallel {
        &self.parallel
    }

    /// The rollout steps the next epoch trains with (upstream's curriculum, see
    /// [`TrainConfig::steps_at`]).
    pub fn train_steps(&self) -> usize {
        self.config.steps_at(self.next_epoch, self.start_epoch)
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
        &self.targets.label_mask
    }
    /// The land mask of the outputs.
    pub fn land(&self) -> &Tensor<4, Bool> {
        &self.targets.land
    }

    /// Mean loss of one batch's rollout (no gradient), with `model`.
    ///
    /// # Errors
    /// [`Error::Device`] when the device failed computing it.
    pub fn eval_loss(&self, model: &Samudra, batch: &ModelBatch) -> Result<f32> {
        self.targets
            .loss(model, batch, None)
            .try_into_scalar::<f32>()
            .map_err(|e| Error::Device { what: "validation loss", reason: e.to_string() })
    }

    /// Runs one training epoch and one validation pass. `on_batch(done, total, loss, telemetry)`
    /// is called after each training batch.
    ///
    /// # Errors
    /// A data error, or [`Error::NonFinite`] when the loss is NaN or infinite.
    pub fn run_epoch(&mut self, mut on_batch: impl FnMut(usize, usize, f64, &BatchTelemetry)) -> Result<EpochReport> {
        let epoch = self.next_epoch;
        let steps = self.config.steps_at(epoch, self.start_epoch);
        if steps != self.train_steps {
            // A new loader, a new device copy: the old one is freed with the old loader.
            self.train = Self::train_loader(
                &self.config,
                &self.loader,
                &self.train_src,
                steps,
                &self.device,
                &self.staging,
                &self.parallel,
            )?;
            self.train_steps = steps;
        }
        let t0 = Instant::now();
        let lr = cosine_lr(self.config.learning_rate, epoch, self.config.epochs);
        let total = self.train.len();
        let mut accum = GradientsAccumulator::new();
        let mut pending = 0;
        // A run resumed inside this epoch starts after the batches its checkpoint had done.
        let start = self.resume_at.take().filter(|p| p.epoch == epoch);
        let first = start.map_or(0, |p| p.batches);
        let (mut loss_sum, mut samples) = match start {
            Some(p) if self.parallel.rank() == 0 => (p.loss_sum, p.samples),
            _ => (0.0f64, 0usize),
        };
        let samples_before = samples;
        let mut telemetry = Vec::with_capacity(total - first.min(total));
        let micro = self.config.grad_accumulation;
        let mut optimizer_steps = 0usize;
        // A local non-finite value on a rank of a distributed run, held for the step's all-reduce.
        let mut failure: Option<Error> = None;
        for (k, batch) in self.train.epoch_from(epoch as u64, first)?.enumerate() {
            let k = first + k;
            let batch = batch?;
            let value = self.backward(&batch.batch, &mut accum, (epoch, k), &mut failure)?;
            pending += 1;
            let stepped = pending == micro || k + 1 == total;
            if stepped {
                self.optimizer_step(lr, &mut accum, (epoch, k), &mut failure)?;
                pending = 0;
                optimizer_steps += 1;
            }
            if self.dynamic.is_some() {
                self.update_loss_weights(&batch.batch)?;
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
                // The checkpoint holds the run's sums; a resumed rank other than 0 starts from none.
                let mut sums = [loss_sum, samples as f64];
                parallel::sum_f64(&self.parallel, &mut sums)?;
                let progress = Progress { epoch, batches: k + 1, loss_sum: sums[0], samples: sums[1] as usize };
                self.write_checkpoint(dir, Some(progress))?;
            }
        }
        let done = first + telemetry.len();
        let train_wall = t0.elapsed();
        let (val_sum, val_n) = self.validate(epoch)?;
        // Every rank reports the run's means: sums and counts over all ranks.
        let mut sums = [loss_sum, done as f64, (samples - samples_before) as f64, val_sum, val_n as f64];
        parallel::sum_f64(&self.parallel, &mut sums)?;
        let [loss_sum, done, new_samples, val_sum, val_n] = sums;
        let summary = EpochSummary::of(&telemetry);
        self.next_epoch += 1;
        Ok(EpochReport {
            epoch,
            train_loss: loss_sum / done.max(1.0),
            val_loss: if val_n == 0.0 { f64::NAN } else { val_sum / val_n },
            // This call's samples only (all ranks'): a resumed epoch's earlier ones took no time here.
            samples_per_s: new_samples / train_wall.as_secs_f64(),
            wait_p50: summary.wait.p50,
            wait_p95: summary.wait.p95,
            wait_share: summary.wait.total.as_secs_f64() / train_wall.as_secs_f64(),
            wall: t0.elapsed(),
            read_bytes: summary.bytes,
        })
    }

    /// The loss of one training batch and, unless a failure is pending, its gradients added to
    /// `accum`. A non-finite loss or gradient norm is an error at once in one process; on a rank
    /// of a distributed run it is kept in `failure` for the step's all-reduce, whose flag stops
    /// every rank at the same point. `at` is `(epoch, batch)`.
    fn backward(
        &mut self,
        batch: &ModelBatch,
        accum: &mut GradientsAccumulator<Samudra>,
        (epoch, k): (usize, usize),
        failure: &mut Option<Error>,
    ) -> Result<f32> {
        let scales = self.dynamic.as_ref().map(|d| {
            let states = self.config.hist + 1;
            Tensor::<1>::from_data(TensorData::new(d.tiled(states), [d.scales.len() * states]), &self.device)
        });
        let loss = self.targets.loss(&self.model, batch, scales);
        let value =
            loss.clone().try_into_scalar::<f32>().map_err(|e| Error::Device { what: "loss", reason: e.to_string() })?;
        let distributed = self.parallel.collective().is_some();
        if !value.is_finite() {
            let e = Error::NonFinite { what: "loss", epoch, batch: k, value };
            if !distributed {
                return Err(e);
            }
            failure.get_or_insert(e);
        }
        if failure.is_none() {
            let (grads, norm) = step::gradients(&self.model, loss, self.config.grad_accumulation)?;
            if !norm.is_finite() {
                let e = Error::NonFinite { what: "gradient norm", epoch, batch: k, value: norm };
                if !distributed {
                    return Err(e);
                }
                failure.get_or_insert(e);
            }
            accum.accumulate(&self.model, grads);
        }
        Ok(value)
    }

    /// One optimizer step on the accumulated gradients (averaged over the ranks of a distributed
    /// run, whose weights stay rank 0's), then the EMA update.
    fn optimizer_step(
        &mut self,
        lr: f64,
        accum: &mut GradientsAccumulator<Samudra>,
        (epoch, k): (usize, usize),
        failure: &mut Option<Error>,
    ) -> Result<()> {
        let mut grads = accum.grads();
        if let Some(collective) = self.parallel.collective() {
            let (averaged, any_failed) = parallel::all_reduce_grads(&self.model, grads, collective, failure.is_some())?;
            if any_failed {
                return Err(failure.take().unwrap_or(Error::PeerNonFinite { epoch, batch: k }));
            }
            grads = averaged;
        }
        self.model = self.optim.step(lr, self.model.clone(), grads);
        if let Some(collective) = self.parallel.collective() {
            self.model = parallel::from_rank0(self.model.clone(), collective, false)?;
        }
        self.ema.update(&self.model);
        Ok(())
    }

    /// The validation pass of `epoch` with the EMA weights: this rank's summed loss and batches.
    fn validate(&self, epoch: usize) -> Result<(f64, usize)> {
        let ema = self.ema.model().clone();
        let (mut sum, mut n) = (0.0f64, 0usize);
        for batch in self.val.epoch(epoch as u64)? {
            sum += f64::from(self.eval_loss(&ema, &batch?.batch)?);
            n += 1;
        }
        Ok((sum, n))
    }

    /// Refreshes the dynamic loss weights with a no-grad single step on the batch's first step
    /// (on a distributed rank, from the per-channel losses averaged over the ranks).
    fn update_loss_weights(&mut self, batch: &ModelBatch) -> Result<()> {
        let model = self.model.valid();
        let first = &batch.steps[0];
        let one_step = ModelBatch {
            samples: batch.samples,
            steps: vec![om4_burn::StepTensors {
                input: first.input.clone().inner(),
                label: first.label.clone().inner(),
            }],
        };
        let targets = LossTargets {
            label_mask: self.targets.label_mask.clone().inner(),
            land: self.targets.land.clone().inner(),
            prognostic_inputs: self.targets.prognostic_inputs,
        };
        let per_channel = targets.per_channel(&model, &one_step);
        let mut values: Vec<f32> = per_channel
            .try_into_data()
            .map_err(|e| Error::Device { what: "dynamic loss weights", reason: format!("{e:?}") })?
            .try_to_vec::<f32>()
            .map_err(|e| Error::Device { what: "dynamic loss weights", reason: format!("{e:?}") })?;
        if let Some(collective) = self.parallel.collective() {
            collective
                .all_reduce_f32(&mut values, om4_mpi::ReduceOp::Sum)
                .map_err(|e| Error::Parallel { reason: e.to_string() })?;
            let scale = 1.0 / collective.world_size() as f32;
            values.iter_mut().for_each(|v| *v *= scale);
        }
        if let Some(dynamic) = self.dynamic.as_mut() {
            dynamic.update(&values, self.config.hist + 1);
        }
        Ok(())
    }

    /// The dynamic loss weights, when enabled.
    pub fn loss_weights(&self) -> Option<&DynamicLoss> {
        self.dynamic.as_ref()
    }

    /// The device (with autodiff).
    pub fn device(&self) -> &Device {
        &self.device
    }
}
