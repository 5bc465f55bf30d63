//! Train a small candle network from an OM4 store through om4's pipeline, on the CPU.
//!
//! The same loader as `train_samudra` (deduplicated reads into pooled buffers, host preparation
//! on the read pool, prefetch), with batches handed to candle as tensors. The network is three
//! convolutions that predict the next prognostic state from the current state and forcing; the
//! loss is the masked MSE on ocean cells. With no arguments it trains on the synthetic demo
//! store (`target/om4-demo`, written once) and prints the loss falling and the data wait.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use candle_core::{DType, Device, Module, Tensor};
use candle_nn::{AdamW, Conv2d, Conv2dConfig, Optimizer, ParamsAdamW, VarBuilder, VarMap, conv2d};
use clap::Parser;
use om4_batch::{Roles, SampleSpace, Schedule, WindowSpec};
use om4_candle::{label_mask, loader};
use om4_pipeline::{BatchSource, EpochSummary};
use om4_store::DataConfig;

#[derive(Parser, Debug)]
#[command(about = "Train a small candle network from an OM4 Zarr store")]
struct Args {
    /// OM4.zarr (default: the synthetic demo store); statistics are read beside it.
    #[arg(long)]
    store: Option<PathBuf>,
    /// Levels of the store's depth variables (Samudra's channel names).
    #[arg(long, default_value_t = 3)]
    levels: usize,
    #[arg(long, default_value_t = 4)]
    epochs: usize,
    #[arg(long, default_value_t = 4)]
    batch_size: usize,
    #[arg(long, default_value_t = 3e-3)]
    learning_rate: f64,
    /// Training uses the steps up to this date (12:00, included), validation the steps from it on
    /// (both splits hold that day, as Samudra's splits that share a bound).
    #[arg(long, default_value = "1959-07-01")]
    split: om4_store::JulianDate,
}

/// conv 3×3 → GELU → conv 3×3 → GELU → conv 1×1.
struct Net {
    layers: [Conv2d; 3],
}

impl Net {
    fn new(inputs: usize, outputs: usize, vb: &VarBuilder) -> candle_core::Result<Self> {
        let pad = Conv2dConfig { padding: 1, ..Conv2dConfig::default() };
        Ok(Self {
            layers: [
                conv2d(inputs, 32, 3, pad, vb.pp("c0"))?,
                conv2d(32, 32, 3, pad, vb.pp("c1"))?,
                conv2d(32, outputs, 1, Conv2dConfig::default(), vb.pp("c2"))?,
            ],
        })
    }

    fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        let x = self.layers[0].forward(x)?.gelu()?;
        let x = self.layers[1].forward(&x)?.gelu()?;
        self.layers[2].forward(&x)
    }
}

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let data = match args.store {
        Some(p) => om4_store::StoreLocation::from_path(&p)?,
        None => {
            let demo = om4_store::DemoStore::locate();
            println!("the synthetic demo store in {} (written on first use)", demo.dir.display());
            demo.ensure()?.data.into()
        }
    };
    let mut config = DataConfig::at(data);
    config.source.levels = Some(args.levels);
    let loading = config.loading;
    let store = config.open()?.train; // every time; split below at --split
    let train = Arc::new(store.with_range(&om4_store::DateRange::until(args.split))?);
    let val = Arc::new(store.with_range(&om4_store::DateRange::from(args.split))?);
    let spec = WindowSpec::new(0, 1, 1)?;
    let grid = train.grid();
    let channels = train.channels();
    let (c_prog, c_in) = (channels[Roles::PROGNOSTIC], channels.iter().sum::<usize>());
    let space = SampleSpace::single(spec, train.time_len())?;
    let train_loader = loader(train, space, Schedule::training(args.batch_size, 15, None)?, loading, Device::Cpu);
    let val_space = SampleSpace::single(spec, val.time_len())?;
    let val_loader = loader(val, val_space, Schedule::validation(args.batch_size, 15, None)?, loading, Device::Cpu);

    let device = Device::Cpu;
    let mask = label_mask(&store.normalizations()[Roles::PROGNOSTIC], 1, grid, &device)?;
    let cells = mask.sum_all()?.to_scalar::<f32>()?;
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, DType::F32, &device);
    let net = Net::new(c_in, c_prog, &vb)?;
    let mut opt = AdamW::new(varmap.all_vars(), ParamsAdamW { lr: args.learning_rate, ..ParamsAdamW::default() })?;
    let loss_of = |input: &Tensor, label: &Tensor| -> candle_core::Result<Tensor> {
        let diff = net.forward(input)?.broadcast_mul(&mask)?.sub(&label.broadcast_mul(&mask)?)?;
        let batch = input.dims()[0] as f64;
        diff.sqr()?.sum_all()? / (f64::from(cells) * batch)
    };
    println!(
        "training a 3-layer candle CNN on {} ({c_in} inputs, {c_prog} outputs, {}×{}), batch {}, {} batches/epoch",
        config.source.data_location.as_ref().expect("a store is given"),
        grid.y,
        grid.x,
        args.batch_size,
        train_loader.len()
    );
    for epoch in 1..=args.epochs {
        let t0 = Instant::now();
        let (mut sum, mut n, mut telemetry) = (0.0f64, 0usize, Vec::new());
        for batch in train_loader.epoch(epoch as u64)? {
            let batch = batch?;
            let step = &batch.batch.steps[0];
            let loss = loss_of(&step.input, &step.label)?;
            opt.backward_step(&loss)?;
            sum += f64::from(loss.to_scalar::<f32>()?);
            n += 1;
            telemetry.push(batch.telemetry);
        }
        let wall = t0.elapsed();
        let (mut val, mut vn) = (0.0f64, 0usize);
        for batch in val_loader.epoch(epoch as u64)? {
            let step = &batch?.batch.steps[0];
            val += f64::from(loss_of(&step.input, &step.label)?.to_scalar::<f32>()?);
            vn += 1;
        }
        let s = EpochSummary::of(&telemetry);
        println!(
            "epoch {epoch:>3}: train loss {:.4}  val loss {:.4}  {:.1} samples/s  data wait p50 {:.2} ms p95 {:.2} ms ({:.1}% of step time)  {:.1}s",
            sum / n.max(1) as f64,
            val / vn.max(1) as f64,
            (n * args.batch_size) as f64 / wall.as_secs_f64(),
            s.wait.p50.as_secs_f64() * 1e3,
            s.wait.p95.as_secs_f64() * 1e3,
            s.wait.total.as_secs_f64() / wall.as_secs_f64() * 100.0,
            wall.as_secs_f64()
        );
    }
    Ok(())
}
