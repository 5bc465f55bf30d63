//! om4 as a dependency: the demo store opened through the data configuration, one batch from
//! om4-burn's loader checked against om4-batch's naive reference, then one epoch of the tiny
//! Samudra network, using nothing but the crates' public API.
//!
//! `cargo run -- DIR` writes the demo store under DIR (default: a temporary directory).

use std::sync::Arc;

use om4_batch::{SampleSpace, Schedule, WindowSpec};
use om4_burn::{BatchSource, LoaderConfig, loader};
use om4_samudra::{SamudraConfig, TrainConfig, Trainer};
use om4_store::{DataConfig, DemoStore};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp = std::env::temp_dir().join("om4-dependent");
    let demo = DemoStore { dir: std::env::args_os().nth(1).map_or(tmp, Into::into) };
    let paths = demo.ensure()?;

    // The data configuration, as Samudra's `data` section: the store, both splits.
    let mut data = DataConfig::at(paths.data);
    data.source.train_time = "..1958-04-01".parse()?;
    data.source.val_time = "1959-10-01..".parse()?;
    let splits = data.open()?;
    println!(
        "{}: {} prognostic + {} boundary channels",
        splits.spec.data,
        splits.spec.prognostic.len(),
        splits.spec.boundary.len()
    );

    // One batch through om4-burn's loader, as Burn tensors on the CPU.
    let source = Arc::new(splits.train);
    let space = SampleSpace::single(WindowSpec::new(1, 2, 1)?, source.time_len())?;
    let schedule = Schedule::training(2, 7, None)?;
    let batches = loader(Arc::clone(&source), space, schedule, LoaderConfig::default(), burn::tensor::Device::flex());
    let batch = batches.epoch(1)?.next().ok_or("an epoch with no batch")??;
    let dims = batch.batch.steps[0].input.dims();
    let grid = source.grid();
    if dims[0] != 2 || dims[2] != grid.y || dims[3] != grid.x {
        return Err(format!("input of shape {dims:?}: expected 2 samples on {}×{}", grid.y, grid.x).into());
    }
    println!("a batch of {} rollout steps, inputs {dims:?}", batch.batch.steps.len());

    // One epoch of the tiny network.
    let config = TrainConfig { epochs: 1, steps: 1, batch_size: 4, ..TrainConfig::default() };
    let mut trainer = Trainer::over(config, SamudraConfig::tiny(), &data)?.build()?;
    let report = trainer.run_epoch(|_, _, _, _| {})?;
    if !(report.train_loss.is_finite() && report.val_loss.is_finite()) {
        return Err(format!("a non-finite loss: {report:?}").into());
    }
    println!("epoch 1: train loss {:.4}, val loss {:.4}", report.train_loss, report.val_loss);
    Ok(())
}
