//! The GPU checks of `scripts/gpu-check.sh`, in one binary (a CUDA build is about 140 MB
//! stripped, so the device run carries one):
//!
//! - `gpu_check prepare --device cuda`: loader batches prepared on the device (normalize, mask,
//!   gather with Burn ops, `PrepareOn::Device`), uploaded ahead on the loader's thread and used on
//!   the caller's, equal the host reference (`PrepareOn::Host` on the CPU backend) bit for bit,
//!   for history 0/1, rollouts of 1/2 steps, strides 1/2 and both normalization orders; exits 1
//!   with the first difference otherwise. The upload thread makes the tensors and the caller's
//!   thread reads them back, so missing stream ordering shows up as different values.
//! - `gpu_check train …`: exactly `train_samudra …` (same flags), e.g. `--device cuda`.
//! - `gpu_check step …`: Samudra's optimizer step timed on synthetic inputs (om4's side of the
//!   step benchmark, `benches/step/step.py`; `--profile` times its operations one by one).
//! - `gpu_check forward --device cuda …`: `samudra_forward …` on a device (forward parity with
//!   upstream, `tests/data/upstream/check_forward_1deg.py --forward-bin "gpu_check forward --device cuda"`).
//!
//! - `gpu_check ops --device wgpu`: every operation of the training step (convolutions, norms,
//!   GELU, padding, pooling, upsampling), forward and gradients, then clipping with Adam and whole
//!   steps from the same weights, against flex within a stated bound (scripts/software-gpu.sh).
//!
//! All run on the CPU too (`--device cpu`), which is how they are checked without a GPU.

use std::sync::Arc;

use clap::{Parser, Subcommand};
use om4_batch::{SampleSpace, Schedule, WindowSpec};
use om4_burn::{BatchSource, LoaderConfig, PrepareOn, loader};
use om4_store::{DataConfig, Om4Source, SynthConfig, synthesize};

#[path = "common/demo.rs"]
mod demo;
#[path = "common/forward.rs"]
mod forward;
#[path = "common/ops.rs"]
mod ops;
#[path = "common/profile.rs"]
mod profile;
#[path = "common/step.rs"]
mod step;
#[path = "common/train.rs"]
mod train;

#[derive(Parser, Debug)]
#[command(about = "om4's GPU checks: device preparation equal to the host reference, and training")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Batches prepared on the device equal the host reference bit for bit.
    Prepare {
        /// cpu, cuda[:N], vulkan[:N] or wgpu[:N] (GPU backends need their cargo feature).
        #[arg(long, default_value = "cpu")]
        device: String,
        /// Grid of the synthetic store (rows × columns).
        #[arg(long, default_value_t = 45)]
        ny: usize,
        #[arg(long, default_value_t = 90)]
        nx: usize,
    },
    /// Every operation of Samudra's training step, forward and backward, and whole steps, on the
    /// device against flex (exits 1 above the tolerance).
    Ops(ops::OpsArgs),
    /// Train as `train_samudra` does (same flags).
    Train(Box<train::Args>),
    /// Time Samudra's optimizer step on synthetic inputs (om4's side of benches/step/step.py).
    Step(step::StepArgs),
    /// One forward pass with upstream weights on .npy input, as `samudra_forward`, on a device.
    Forward {
        /// cpu, cuda[:N], vulkan[:N] or wgpu[:N].
        #[arg(long, default_value = "cpu")]
        device: String,
        #[command(flatten)]
        args: forward::Args,
    },
}

fn main() -> std::process::ExitCode {
    match Cli::parse().command {
        Command::Train(args) => train::main(*args),
        Command::Step(args) => match step::main(&args) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::ExitCode::FAILURE
            }
        },
        Command::Ops(args) => match ops::main(&args) {
            Ok(true) => std::process::ExitCode::SUCCESS,
            Ok(false) => std::process::ExitCode::FAILURE,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::ExitCode::FAILURE
            }
        },
        Command::Forward { device, args } => {
            match train::open_device(&device, None).and_then(|d| forward::run(&args, &d.device)) {
                Ok(()) => std::process::ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    std::process::ExitCode::FAILURE
                }
            }
        }
        Command::Prepare { device, ny, nx } => match prepare(&device, ny, nx) {
            Ok(true) => std::process::ExitCode::SUCCESS,
            Ok(false) => std::process::ExitCode::FAILURE,
            Err(e) => {
                eprintln!("error: {e}");
                std::process::ExitCode::FAILURE
            }
        },
    }
}

fn values(t: burn::tensor::Tensor<4>) -> Result<Vec<u32>, Box<dyn std::error::Error>> {
    let v = t.into_data().try_to_vec::<f32>().map_err(|e| format!("{e:?}"))?;
    Ok(v.iter().map(|x| x.to_bits()).collect())
}

/// Every input and label of one epoch, as bits.
fn epoch(loader: &om4_burn::Loader<Om4Source>) -> Result<Vec<Vec<u32>>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    for batch in loader.epoch(1)? {
        for step in batch?.batch.steps {
            out.push(values(step.input)?);
            out.push(values(step.label)?);
        }
    }
    Ok(out)
}

fn prepare(device_name: &str, ny: usize, nx: usize) -> Result<bool, Box<dyn std::error::Error>> {
    let device = train::open_device(device_name, None)?.device;
    let dir = tempfile::tempdir()?;
    let cfg = SynthConfig { ny, nx, times: 16, levels: 3, consolidated: false, ..SynthConfig::default() };
    let paths = synthesize(dir.path(), &cfg, |_, _| {})?;
    let (mut tensors, mut floats) = (0usize, 0usize);
    for normalize_before_mask in [true, false] {
        let mut data = DataConfig {
            normalize_before_mask,
            masked_fill_value: if normalize_before_mask { 0.0 } else { -3.5 },
            ..DataConfig::at(paths.data.clone())
        };
        data.loading.max_concurrent_reads = 4;
        let source = Arc::new(data.open()?.train);
        for (history, steps, stride) in [(0, 1, 1), (1, 2, 1), (1, 1, 2), (0, 2, 2)] {
            let space = SampleSpace::single(WindowSpec::new(history, steps, stride)?, source.time_len())?;
            let schedule = Schedule::training(3, 7, None)?;
            let loader = |prepare_on, device: burn::tensor::Device| {
                let config = LoaderConfig {
                    prefetch_batches: 2,
                    max_concurrent_reads: 4,
                    prefetch_to_device: true,
                    prepare_on,
                    ..LoaderConfig::default()
                };
                loader(Arc::clone(&source), space.clone(), schedule, config, device)
            };
            let on_device = epoch(&loader(PrepareOn::Device, device.clone()))?;
            let reference = epoch(&loader(PrepareOn::Host, burn::tensor::Device::flex()))?;
            let case = format!(
                "hist {history}, steps {steps}, stride {stride}, {}",
                if normalize_before_mask { "normalize then mask" } else { "mask then normalize, fill -3.5" }
            );
            if on_device.len() != reference.len() {
                println!(
                    "prepare FAILED ({case}): {} tensors on the device, {} on the host",
                    on_device.len(),
                    reference.len()
                );
                return Ok(false);
            }
            for (k, (d, h)) in on_device.iter().zip(&reference).enumerate() {
                let differing = d.iter().zip(h).filter(|(a, b)| a != b).count();
                if d.len() != h.len() || differing > 0 {
                    let first = d.iter().zip(h).position(|(a, b)| a != b);
                    println!(
                        "prepare FAILED ({case}): tensor {k} ({}) differs in {differing} of {} values; first at {first:?}: \
                         device {:?} vs host {:?}",
                        if k % 2 == 0 { "input" } else { "label" },
                        h.len(),
                        first.map(|i| f32::from_bits(d[i])),
                        first.map(|i| f32::from_bits(h[i])),
                    );
                    return Ok(false);
                }
                floats += h.len();
            }
            tensors += on_device.len();
        }
    }
    println!(
        "prepare on {device_name}: {tensors} tensors ({floats} values, 8 cases) equal to the host reference bit for bit"
    );
    Ok(true)
}
