//! The om4 training application: Samudra trained from OM4 Zarr stores on the CPU or a GPU, and
//! the checks a GPU run is measured by, as subcommands of one binary (a CUDA build is about
//! 140 MB stripped, so a device run carries one):
//!
//! - `om4-train train …`: Samudra's training (`cargo run --release --example train_samudra`
//!   runs the same job with the same flags). With no store it trains the `tiny` network on the
//!   synthetic demo store ([`om4_store::DemoStore`]); `--device cuda[:N] | vulkan[:N] | wgpu[:N]`
//!   with the build's feature, `--mpi` as one rank of a data-parallel job.
//! - `om4-train prepare --device cuda`: loader batches prepared on the device equal the host
//!   reference bit for bit.
//! - `om4-train ops --device wgpu`: every operation of the training step (convolutions, norms,
//!   GELU, padding, pooling, upsampling), forward and gradients, then clipping with Adam and
//!   whole steps from the same weights, against flex within a stated bound.
//! - `om4-train step …`: Samudra's optimizer step timed on synthetic inputs (om4's side of
//!   `benches/step/step.py`; `--profile` times its operations one by one).
//! - `om4-train forward …`: one forward pass with upstream weights on `.npy` input, on any
//!   device (forward parity with upstream: `tests/data/upstream/check_forward_1deg.py`; the
//!   `samudra_forward` example runs the same job).
//!
//! All run on the CPU too (`--device cpu`), which is how they are checked without a GPU. The
//! application is built over the library crates alone: a device by name with its staging pool
//! ([`om4_burn::TrainingDevice`]), the data through [`om4_store::DataConfig`], the trainer
//! ([`om4_samudra::Trainer`]).

mod alloc;
mod cli;
mod device;
mod forward;
mod ops;
mod prepare;
mod profile;
mod step;
mod train;

pub use cli::main;
pub use forward::{ForwardArgs, main as forward};
pub use train::{TrainArgs, main as train};
