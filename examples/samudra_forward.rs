//! One forward pass of Samudra with upstream weights, for checking om4 against PyTorch.
//!
//! ```sh
//! cargo run --release --example samudra_forward -- --weights model.safetensors --model v2 \
//!   --in-channels 157 --out-channels 154 --input input.npy --mask mask.npy --out output.npy
//! ```
//! `input.npy` is `(1, N, H, W)` float32; `mask.npy` is `(M, H, W)` boolean (or 0/1 integers)
//! in upstream's convention (true = ocean; the output is 0 where false); `output.npy` is written
//! `(1, M, H, W)` float32. Batch norm runs in inference mode. Weights: `.safetensors`, or a
//! `.pt`/`.pth` file holding a whole checkpoint (its `"model"` entry) or a bare `state_dict`
//! (told apart by that key), with or without DDP's `module.` prefix, or the 2024 flat `layers.N` layout.

use burn::tensor::Device;
use clap::Parser;

#[path = "common/forward.rs"]
mod forward;

#[derive(Parser, Debug)]
#[command(about = "One Samudra forward pass with upstream weights on .npy input")]
struct Cli {
    #[command(flatten)]
    args: forward::Args,
}

fn main() -> std::process::ExitCode {
    match forward::run(&Cli::parse().args, &Device::flex()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
