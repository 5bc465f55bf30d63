//! Training settings and what an epoch reports.

use std::time::Duration;

use om4_pipeline::LoaderConfig;
use serde::{Deserialize, Serialize};

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
    /// Train split: Julian dates at 12:00, both ends included (Samudra's rule).
    pub train_time: (Option<String>, Option<String>),
    /// Validation split, likewise.
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
