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
use om4_store::SourceConfig;
use om4_store::{SynthConfig, synthesize};

/// The store: 16 × 32, 24 five-day steps, 2 levels, written under `dir`.
///
/// # Errors
/// When the store cannot be written.
pub fn store(dir: &Path) -> om4_store::Result<SourceConfig> {
    let cfg = SynthConfig { ny: 16, nx: 32, times: 24, levels: 2, ..SynthConfig::default() };
    let paths = synthesize(dir, &cfg, |_, _| {})?;
    Ok(SourceConfig::samudra(paths.data, paths.means, paths.stds, 2))
}

/// The tiny network without block normalization.
pub fn model() -> SamudraConfig {
    SamudraConfig { norm: NormKind::None, ..SamudraConfig::tiny() }
}

/// One epoch, batch 2 per rank, 2 rollout steps, dynamic loss weights, the splits up to and from
/// March 1958.
pub fn config() -> TrainConfig {
    TrainConfig {
        epochs: 1,
        learning_rate: 1e-3,
        batch_size: 2,
        steps: 2,
        grad_clip: 0.5,
        dynamic_loss_limit: Some(20.0),
        train_time: "..1958-04-01".parse().expect("a date range"),
        val_time: "1958-03-01..".parse().expect("a date range"),
        loading: LoaderConfig { prefetch_batches: 2, max_concurrent_reads: 2, ..LoaderConfig::default() },
        ..TrainConfig::default()
    }
}
