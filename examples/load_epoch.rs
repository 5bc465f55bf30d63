//! Load one epoch of Samudra batches from a store with the om4 loader (CPU backend) and report
//! data wait, read and preparation times. Usage:
//! `cargo run --release --example load_epoch -- STORE [BATCH_SIZE] [PREFETCH] [MAX_BATCHES] [TO_DEVICE 1|0] [auto|host|device]`
//! (means and stds are read from `OM4_means.zarr` / `OM4_stds.zarr` beside the store).

use std::error::Error;
use std::path::PathBuf;
use std::sync::Arc;

use burn::tensor::Device;
use om4_batch::{SampleSpace, Schedule, WindowSpec};
use om4_burn::{BatchSource, EpochSummary, LoaderConfig, PrepareOn, loader};
use om4_store::DataConfig;

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let store = PathBuf::from(args.first().ok_or("usage: load_epoch STORE [BATCH_SIZE] [PREFETCH] [MAX_BATCHES]")?);
    let arg = |i: usize, default: usize| args.get(i).map_or(Ok(default), |s| s.parse::<usize>());
    let (batch, prefetch, max_batches, to_device) = (arg(1, 4)?, arg(2, 2)?, arg(3, usize::MAX)?, arg(4, 1)? == 1);
    let store = om4_store::StoreLocation::from_path(&store)?;
    let prepare_on = match args.get(5).map(String::as_str) {
        None | Some("auto") => PrepareOn::Auto,
        Some("host") => PrepareOn::Host,
        Some("device") => PrepareOn::Device,
        Some(other) => return Err(format!("prepare on {other:?}: auto, host or device").into()),
    };
    let loading = LoaderConfig {
        prefetch_batches: prefetch,
        prefetch_to_device: to_device,
        prepare_on,
        ..LoaderConfig::default()
    };
    // Samudra's channels and statistics (beside the store), every time.
    let data = DataConfig { loading, ..DataConfig::at(store) };
    let source = Arc::new(data.open()?.train);
    let space = SampleSpace::single(WindowSpec::new(1, 4, 1)?, source.time_len())?;
    let loader = loader(source, space, Schedule::training(batch, 15, None)?, loading, Device::flex());
    let mut telemetry = Vec::new();
    for b in loader.epoch(1)?.take(max_batches) {
        telemetry.push(b?.telemetry);
    }
    let s = EpochSummary::of(&telemetry);
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    println!(
        "{} batches of {batch}: {:.1} MB unique planes per batch ({} requested, {} unique planes in all); \
         wait p50 {:.2} ms p95 {:.2} ms; read p50 {:.1} ms; prepare p50 {:.1} ms; \
         host staging peak {:.1} MB in {} buffers; host model-batch buffers peak {:.1} MB in {}",
        s.batches,
        s.bytes as f64 / s.batches.max(1) as f64 / 1e6,
        s.planes.requested,
        s.planes.unique,
        ms(s.wait.p50),
        ms(s.wait.p95),
        ms(s.read.p50),
        ms(s.prepare.p50),
        loader.buffers().peak_bytes() as f64 / 1e6,
        loader.buffers().allocations(),
        loader.output_buffers().peak_bytes() as f64 / 1e6,
        loader.output_buffers().allocations()
    );
    Ok(())
}
