//! `om4 schedule`: the batches of one epoch, and the time positions they read.

use anyhow::{Result, bail};
use clap::Args;
use om4_batch::{BatchPlan, Ddp, Roles, SampleSpace, Schedule, WindowSpec};
use serde_json::json;

/// Print the batches of one epoch (sample indices and the time positions they read).
#[derive(Args, Debug)]
pub(crate) struct ScheduleArgs {
    /// Time positions in the selection.
    #[arg(long)]
    len: usize,
    #[arg(long, default_value_t = 1)]
    history: usize,
    #[arg(long, default_value_t = 4)]
    steps: usize,
    #[arg(long, default_value_t = 1)]
    stride: usize,
    #[arg(long, default_value_t = 4)]
    batch_size: usize,
    #[arg(long, default_value_t = 15)]
    seed: u64,
    /// Epoch (Samudra counts from 1).
    #[arg(long, default_value_t = 1)]
    epoch: u64,
    #[arg(long)]
    world_size: Option<usize>,
    #[arg(long, default_value_t = 0)]
    rank: usize,
    /// Validation sampler (steps = 1, nothing dropped).
    #[arg(long)]
    validation: bool,
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(a: &ScheduleArgs) -> Result<()> {
    let steps = if a.validation { 1 } else { a.steps };
    let spec = WindowSpec::new(a.history, steps, a.stride)?;
    let space = SampleSpace::single(spec, a.len)?;
    let ddp = a.world_size.map(|w| Ddp { world_size: w, rank: a.rank });
    let sched = if a.validation {
        Schedule::validation(a.batch_size, a.seed, ddp)?
    } else {
        Schedule::training(a.batch_size, a.seed, ddp)?
    };
    let batches = sched.epoch(&space.groups(), a.epoch);
    if a.json {
        println!("{}", json!({"samples": space.len(), "batches": batches}));
        return Ok(());
    }
    println!(
        "{} samples, {} batches (history {}, steps {steps}, stride {}, batch {}, seed {}, epoch {})",
        space.len(),
        batches.len(),
        a.history,
        a.stride,
        a.batch_size,
        a.seed,
        a.epoch
    );
    for (i, b) in batches.iter().enumerate() {
        let plan = BatchPlan::new(&space.samples(b)?, &Roles::prognostic_only(), &[1])?;
        let times = &plan.groups()[0].times;
        if times.is_empty() {
            bail!("empty batch");
        }
        println!("batch {i:>4}: samples {b:?} read times {}", compact_ranges(times));
    }
    Ok(())
}

/// `[1, 2, 3, 7]` → `1..=3, 7`.
fn compact_ranges(v: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut start = v[0];
    for w in v.windows(2) {
        if w[1] != w[0] + 1 {
            parts.push(if start == w[0] { start.to_string() } else { format!("{start}..={}", w[0]) });
            start = w[1];
        }
    }
    let last = v[v.len() - 1];
    parts.push(if start == last { start.to_string() } else { format!("{start}..={last}") });
    parts.join(", ")
}
