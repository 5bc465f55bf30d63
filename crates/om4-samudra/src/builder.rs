//! [`TrainerBuilder`]: a [`Trainer`]'s splits, device, host staging and parallelism, then the
//! model (its initial weights drawn on the host) and both loaders.

use std::sync::Arc;

use burn::module::Module;
use burn::tensor::Device;
use om4_batch::Roles;
use om4_pipeline::{BatchSource, BufferPool, LoaderConfig};

use crate::config::TrainConfig;
use crate::data_record::DataRecord;
use crate::ema::Ema;
use crate::error::{Error, Result};
use crate::loss::DynamicLoss;
use crate::model::SamudraConfig;
use crate::parallel::DataParallel;
use crate::step::{self, LossTargets};
use crate::trainer::{LoaderSettings, Trainer};

/// Builds a [`Trainer`] once: its splits, then where it runs (device, host staging, the ranks
/// of a data-parallel run), then the model and both loaders.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use om4_samudra::{DataParallel, RunConfig, Trainer};
/// let run = RunConfig::from_file("configs/om4.toml".as_ref())?;
/// // The store opened once, both splits, the loader's settings and the record checkpoints keep:
/// let mut trainer = Trainer::over(run.train_config()?, run.model_config()?, &run.data)?
///     .parallel(DataParallel::Single)
///     .build()?;
/// trainer.run_epoch(|_, _, _, _| {})?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct TrainerBuilder<S: BatchSource> {
    pub(crate) config: TrainConfig,
    pub(crate) model_config: SamudraConfig,
    pub(crate) train: Arc<S>,
    pub(crate) val: Arc<S>,
    pub(crate) device: Device,
    pub(crate) staging: BufferPool,
    pub(crate) parallel: DataParallel,
    pub(crate) loader: LoaderSettings,
    pub(crate) data: Option<DataRecord>,
}

impl<S: BatchSource> TrainerBuilder<S> {
    /// Keeps the training split resident on the device within `budget_bytes`
    /// ([`om4_pipeline::Loader::resident`]): each plane is read and uploaded once, and later
    /// batches and epochs gather from the device copy (prepared there: `prepare_on` auto becomes
    /// device). Default: off.
    #[must_use]
    pub fn resident(mut self, budget_bytes: u64) -> Self {
        self.loader.resident = Some(budget_bytes);
        self
    }

    /// The loaders' settings (prefetch, reads in flight, where batches are prepared), when they
    /// are not a data configuration's (see [`data`](Self::data)); default: [`LoaderConfig::default`].
    #[must_use]
    pub fn loading(mut self, loading: LoaderConfig) -> Self {
        self.loader.loading = loading;
        self
    }

    /// The data configuration the splits were opened from ([`om4_store::DataConfig::open`]):
    /// its loader settings ([`loading`](Self::loading)), and its record in every checkpoint, so
    /// that a resume on data whose record differs (another store, split, channel list or
    /// normalization) is an error naming each difference. [`Trainer::over`] sets it; default:
    /// none (the default loader settings, nothing recorded, nothing checked).
    #[must_use]
    pub fn data(mut self, data: &om4_store::DataConfig, splits: &om4_store::DataSplits) -> Self {
        self.loader.loading = data.loading;
        self.data = Some(DataRecord::new(data, splits));
        self
    }

    /// Where the model trains (default: the CPU, `Device::flex()`); autodiff is enabled on it.
    #[must_use]
    pub fn device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }

    /// The host staging pool both loaders share, e.g. `BufferPool::pinned(0)?` for a CUDA device
    /// (feature `cuda`); default: pageable memory.
    #[must_use]
    pub fn staging(mut self, staging: BufferPool) -> Self {
        self.staging = staging;
        self
    }

    /// Makes the trainer one rank of a data-parallel run, or a single process emulating one
    /// ([`DataParallel`]; default: one process). `config.batch_size` is per rank, as under
    /// upstream's DDP. Every rank must build its trainer from the same configuration and seed and
    /// call [`Trainer::run_epoch`] the same number of times; [`build`](Self::build) is then
    /// collective, and every rank starts from rank 0's initial weights (as DDP's construction
    /// broadcasts them). Rank 0 alone writes checkpoints.
    #[must_use]
    pub fn parallel(mut self, parallel: DataParallel) -> Self {
        self.parallel = parallel;
        self
    }

    /// Builds the model (seeded by `rand_seed`) and the training and validation loaders.
    ///
    /// # Errors
    /// [`Error::Config`] for splits of different variables or grids, a bad curriculum, a zero
    /// batch size, epoch count, gradient accumulation or world size; a split too short for its
    /// windows; a failed broadcast of rank 0's weights.
    pub fn build(self) -> Result<Trainer<S>> {
        let Self { config, model_config, train: train_src, val: val_src, device, staging, parallel, loader, data } =
            self;
        if train_src.channels() != val_src.channels() || train_src.grid() != val_src.grid() {
            return Err(Error::Config {
                field: "sources",
                reason: "the training and validation sources hold different variables or grids".into(),
            });
        }
        config.check_curriculum().map_err(|reason| Error::Config { field: "steps/step_transition", reason })?;
        if config.batch_size == 0 || config.epochs == 0 || config.grad_accumulation == 0 {
            return Err(Error::Config {
                field: "batch_size/epochs/grad_accumulation",
                reason: "must be at least 1".into(),
            });
        }
        if parallel.world_size() == 0 {
            return Err(Error::Config { field: "world_size", reason: "must be at least 1".into() });
        }
        let device = device.autodiff();
        let states = config.hist + 1;
        let train_steps = config.steps_at(1, 1);
        let train = Trainer::train_loader(&config, &loader, &train_src, train_steps, &device, &staging, &parallel)?;
        let val = Trainer::val_loader(&config, &loader, &val_src, &device, &staging, &parallel)?;
        let channels = train_src.channels();
        let (c_prog, c_bound) = (channels[Roles::PROGNOSTIC], channels.get(Roles::BOUNDARY).copied().unwrap_or(0));
        let grid = train_src.grid();
        let prog = &train_src.normalizations()[Roles::PROGNOSTIC];
        let targets = LossTargets::new(om4_burn::label_mask(prog, states, grid, &device), states * c_prog);
        // Seeded initialization, drawn on the host: the same config trains the same network on
        // every backend.
        let drawn = model_config.init_seeded(states * (c_prog + c_bound), states * c_prog, config.rand_seed);
        let mut model = if device == Device::flex().autodiff() { drawn } else { drawn.fork(&device) };
        let mut ema = Ema::new(&model, config.ema_decay);
        // Every rank starts from rank 0's weights, as DDP's construction broadcasts them.
        if let Some(collective) = parallel.collective() {
            model = crate::parallel::from_rank0(model, collective, true)?;
            ema = Ema::new(&model, config.ema_decay);
        }
        let optim = step::optimizer(config.grad_clip);
        let dynamic = config.dynamic_loss_limit.map(|limit| DynamicLoss::new(c_prog, limit));
        Ok(Trainer {
            config,
            model_config,
            model,
            optim,
            ema,
            device,
            train,
            val,
            train_src,
            parallel,
            staging,
            train_steps,
            start_epoch: 1,
            targets,
            next_epoch: 1,
            dynamic,
            checkpoint: None,
            resume_at: None,
            loader,
            data,
        })
    }
}
