//! The data-parallel reference case: a small synthetic store, the tiny network without block
//! normalization and its settings, shared by om4-samudra's thread-rank test and the root's
//! `examples/ddp_check` (MPI).
//!
//! Without block normalization: instance and batch norm cancel the gradient of the convolution
//! bias before them exactly, so what is left there is rounding noise, which Adam's first steps
//! scale to ±lr whatever its size; two summation orders (per rank then across ranks, or all at
//! once) then move those biases apart by about lr per step, in any DDP implementation.

use std::path::Path;

use om4_pipeline::LoaderConfig;
use om4_samudra::{NormKind, SamudraConfig, TrainConfig};
use om4_store::{DataConfig, SynthConfig, synthesize};

/// The data: a store of 16 × 32 cells, 24 five-day steps and 2 levels written under `dir`
/// (statistics beside it), split up to and from March 1958, read 2 planes at a time with 2
/// batches prefetched.
///
/// # Errors
/// When the store cannot be written.
pub fn data(dir: &Path) -> om4_store::Result<DataConfig> {
    let cfg = SynthConfig { ny: 16, nx: 32, times: 24, levels: 2, ..SynthConfig::default() };
    let paths = synthesize(dir, &cfg, |_, _| {})?;
    let mut data = DataConfig::at(paths.data);
    data.source.train_time = "..1958-04-01".parse().expect("a date range");
    data.source.val_time = "1958-03-01..".parse().expect("a date range");
    data.loading = LoaderConfig { prefetch_batches: 2, ..LoaderConfig::default() };
    data.read_threads = 2;
    Ok(data)
}

/// The tiny network without block normalization.
pub fn model() -> SamudraConfig {
    SamudraConfig { norm: NormKind::None, ..SamudraConfig::tiny() }
}

/// One epoch, batch 2 per rank, 2 rollout steps, dynamic loss weights.
pub fn config() -> TrainConfig {
    TrainConfig {
        epochs: 1,
        learning_rate: 1e-3,
        batch_size: 2,
        steps: 2,
        grad_clip: 0.5,
        dynamic_loss_limit: Some(20.0),
        ..TrainConfig::default()
    }
}
