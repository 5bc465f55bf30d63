//! Pure planning for OM4 training batches: the half of the om4 loader that does no I/O.
//!
//! om4-batch turns Samudra's data settings into exactly the planes to read and the model batches
//! to build from them, and is checked against naive re-statements of the same rules:
//!
//! - [`WindowSpec`]: history, rollout steps and stride; sample counts and time positions.
//! - [`SampleSpace`]: global sample indices over one dataset per stride, and their groups.
//! - [`Schedule`]: seeded, DDP-aware epoch orders identical to Samudra's samplers.
//! - [`BatchPlan`]: the unique `(time, channel)` planes of a batch per source, read once, and the
//!   rows each `(sample, step, role, state)` gathers.
//! - [`Normalization`], [`gather`]: normalization and land masking once per plane, then the model layout;
//!   [`reference_batch`] is the naive path the fast one must equal bit for bit.
//! - [`ReadPool`]: the bounded thread pool every read and host preparation of a process shares.
//!
//! ```
//! use om4_batch::{BatchPlan, Roles, SampleSpace, Schedule, WindowSpec};
//!
//! let spec = WindowSpec::new(1, 4, 1)?; // hist 1, 4 rollout steps, stride 1
//! let space = SampleSpace::single(spec, 100)?;
//! assert_eq!(space.len(), 100 - 4 * 2 - 1);
//!
//! let schedule = Schedule::training(4, 15, None)?;
//! let batches = schedule.epoch(&space.groups(), 1);
//! assert_eq!(batches.len(), space.len() / 4);
//!
//! // 77 prognostic and 3 boundary channels: input and label share the prognostic reads.
//! let plan = BatchPlan::new(&space.samples(&batches[0])?, &Roles::samudra(), &[77, 3])?;
//! assert!(plan.planes().unique < plan.planes().requested);
//! # Ok::<(), om4_batch::Error>(())
//! ```
//!
//! This crate has no features and depends only on `serde`, `thiserror` and `rayon` (the host
//! normalization and gather run on the caller's rayon pool).

#![warn(missing_docs)]

mod error;
mod gather;
mod normalize;
mod plan;
mod pool;
pub mod rng;
mod schedule;
mod space;
mod window;

pub use error::{Error, Result};
pub use gather::{
    GatheredBatch, GatheredStep, check_groups, fill_groups, gather, gather_into, gather_into_steps, prepare_and_gather,
    prepare_and_gather_into, prepare_and_gather_into_steps, reference_batch, step_lens,
};
pub use normalize::{Grid, LandMask, NormOrder, Normalization, Precision, nan_to_num, prepare_value};
pub use plan::{BatchPlan, PlaneCount, ReadGroup, Role, RoleRows, Roles};
pub use pool::ReadPool;
pub use schedule::{Ddp, Order, Schedule, Tail};
pub use space::{Sample, SampleSpace};
pub use window::{WindowConfig, WindowSpec};
