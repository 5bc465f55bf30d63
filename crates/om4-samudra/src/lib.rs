//! The Samudra ocean emulator in Burn, trained autoregressively from om4 batches.
//!
//! - [`SamudraConfig`] and [`Samudra`]: the dilated ConvNeXt U-Net (`v1`, `v2`, `v2_highres`, `tiny`).
//! - [`Trainer`]: rollout training with masked per-channel MSE, Adam, cosine schedule, gradient
//!   clipping and accumulation, a stop on a non-finite loss or gradient norm, dynamic loss weights,
//!   EMA weights for validation, checkpoints.
//!
//! ```
//! use burn::module::Module;
//! use burn::tensor::Device;
//! use om4_samudra::SamudraConfig;
//!
//! let model = SamudraConfig::tiny().init(12, 8, &Device::flex());
//! assert!(model.num_params() > 0);
//! ```

pub mod model;
pub mod train;

pub use model::{NormKind, Samudra, SamudraConfig, UpsampleKind};
pub use train::{DynamicLoss, EpochReport, Predictor, TrainConfig, Trainer, cosine_lr, grad_norm, rollout_loss};
