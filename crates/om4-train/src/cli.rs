//! The command line of `om4-train`: one subcommand per job, each a module of this crate.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::{forward, ops, prepare, step, train};

#[derive(Parser, Debug)]
#[command(name = "om4-train", about = "Train Samudra from OM4 stores, and check om4's GPU paths against the CPU")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Train Samudra (as `cargo run --release --example train_samudra`: the same flags).
    Train(Box<train::TrainArgs>),
    /// Batches prepared on the device equal the host reference bit for bit (exits 1 otherwise).
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
    /// Time Samudra's optimizer step on synthetic inputs (om4's side of benches/step/step.py).
    Step(step::StepArgs),
    /// One forward pass with upstream weights on .npy input (as the `samudra_forward` example).
    Forward(forward::ForwardArgs),
}

/// Parses the command line and runs the subcommand; the exit status says whether it succeeded
/// (a check that finds a difference exits 1 after printing it).
pub fn main() -> ExitCode {
    crate::alloc::keep_freed_memory();
    match Cli::parse().command {
        Command::Train(args) => train::main(*args),
        Command::Forward(args) => forward::main(&args),
        Command::Step(args) => exit(step::main(&args).map(|()| true)),
        Command::Ops(args) => exit(ops::main(&args)),
        Command::Prepare { device, ny, nx } => exit(prepare::main(&device, ny, nx)),
    }
}

/// The exit status of a job that returns whether its check passed.
pub(crate) fn exit(result: Result<bool, Box<dyn std::error::Error>>) -> ExitCode {
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
