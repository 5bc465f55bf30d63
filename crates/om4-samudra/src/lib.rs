//! The Samudra ocean emulator in Burn, trained autoregressively from om4 batches.
//!
//! - [`SamudraConfig`] and [`Samudra`]: the dilated ConvNeXt U-Net (`v1`, `v2`, `v2_highres`, `tiny`).
//! - [`RunConfig`]: a training run's configuration file in Samudra's words (`experiment`, `data`,
//!   `train`, `model`), turned into [`TrainConfig`], [`SamudraConfig`] and the data's splits
//!   (`om4_store::DataConfig::open`, which opens the store once).
//! - [`Trainer`]: rollout training from any `om4_pipeline::BatchSource` (an OM4 store by default) with masked per-channel MSE, Adam, cosine schedule, gradient
//!   clipping and accumulation, a stop on a non-finite loss or gradient norm, dynamic loss weights,
//!   EMA weights for validation, checkpoints. [`Trainer::over`] trains on a data configuration
//!   (its splits, loading settings and [`DataRecord`], which checkpoints keep and a resume
//!   checks). Its step's parts are public ([`LossTargets`], [`gradients`], [`optimizer`]) for
//!   benchmarks and custom loops.
//! - On Burn's CPU backend the network's hot spots run on om4's own paths: 1×1 convolutions as
//!   matrix products, every pass of a k×k convolution by the method fastest on its shape (the
//!   large 3×3 ones by Winograd's F(2×2, 3×3), the small ones as a direct correlation in SIMD
//!   registers or im2col tiles, the rest as GEMMs over the taps: [`model::conv`]), the capped
//!   GELU as one parallel, vectorized pass ([`model::capped_gelu`]), instance norm as one
//!   operation, with the GELU in the same passes where a block applies both
//!   ([`model::instance_norm`], [`model::instance_norm_gelu`]), longitude padding as one copy
//!   ([`model::pad_lonlat`]). On other backends Burn's operations, with batch norm's training
//!   statistics reduced in short rows ([`model::batch_norm_stats`]: some GPU reductions drop
//!   values along long rows).
//! - [`DataParallel`]: a trainer as one rank of a distributed run over any
//!   `om4_mpi::Collective` (ranks as threads, or MPI with om4-mpi's `mpi`): upstream's DDP schedule slice per rank and
//!   gradients averaged in [`BUCKET_FLOATS`]-float buckets, or one process emulating such a run.
//!
//! ```
//! use burn::module::Module;
//! use burn::tensor::Device;
//! use om4_samudra::SamudraConfig;
//!
//! let model = SamudraConfig::tiny().init(12, 8, &Device::flex());
//! assert!(model.num_params() > 0);
//! ```

#![warn(missing_docs)]

mod builder;
mod checkpoint;
mod config;
mod conv;
mod data_record;
mod direct;
mod ema;
mod erf;
mod error;
mod gelu;
mod loss;
pub mod model;
mod norm;
mod pad;
mod parallel;
mod rollout;
mod run;
mod scatter;
mod scratch;
mod step;
mod taps;
mod tiles;
mod trainer;
mod weights;
mod wide;
mod winograd;

pub use builder::TrainerBuilder;
pub use config::{EpochReport, TrainConfig};
pub use data_record::DataRecord;
pub use ema::Ema;
pub use error::{Error, Result};
pub use loss::{DynamicLoss, Masked, Predictor, cosine_lr, grad_norm, rollout_loss};
pub use model::{NormKind, Samudra, SamudraConfig, UpsampleKind};
pub use parallel::{BUCKET_FLOATS, DataParallel, flatten_parameters};
pub use rollout::{RolloutStep, denormalize, rollout};
pub use run::{ExperimentSection, ModelSection, RunConfig, Steps, TrainSection};
pub use step::{LossTargets, gradients, optimizer};
pub use trainer::Trainer;
pub use weights::{load_upstream, save_upstream};
