//! Train Samudra from an OM4 store with om4, end to end, without Python.
//!
//! With no arguments: writes a small synthetic OM4 store under `target/om4-demo` (reused on the
//! next run), trains the `tiny` network on the CPU for a few epochs and prints the loss falling.
//! Point it at a real store with `--store OM4.zarr --means OM4_means.zarr --stds OM4_stds.zarr`,
//! or a config file (`--config configs/om4.toml`, TOML or YAML with Samudra's section names).
//!
//! This is the training application's `om4-train train` (crates/om4-train), under the name the
//! README's first command uses.

fn main() -> std::process::ExitCode {
    om4_train::train(clap::Parser::parse())
}
