//! One forward pass of Samudra with upstream weights, for checking om4 against PyTorch.
//!
//! ```sh
//! cargo run --release --example samudra_forward -- --weights model.safetensors --model v2 \
//!   --in-channels 157 --out-channels 154 --input input.npy --mask mask.npy --out output.npy
//! ```
//! The training application's `om4-train forward` (crates/om4-train; `--help` says what each
//! file holds), under the name tests/data/upstream/check_forward_1deg.py uses.

fn main() -> std::process::ExitCode {
    om4_train::forward(&clap::Parser::parse())
}
