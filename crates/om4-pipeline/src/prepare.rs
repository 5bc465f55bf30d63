//! Host preparation: each unique plane normalized and masked once, then gathered into the model
//! layout, on the source's read pool, into pooled buffers that adapters hand to their tensors.

use om4_batch::{BatchPlan, Grid, Normalization, ReadPool};

use crate::buffers::{BufferPool, PooledBuf};
use crate::error::Result;

/// One rollout step of a batch prepared on the host.
#[derive(Debug)]
pub struct PreparedStep {
    /// `(B, (h+1)·(C_prog + C_bound), Y, X)`, time-major: `[prog(t0) | prog(t1) | … | bound(t0) | …]`.
    pub input: PooledBuf,
    /// `(B, (h+1)·C_prog, Y, X)`.
    pub label: PooledBuf,
}

/// A model batch normalized, masked and gathered on the host, in pooled buffers.
#[derive(Debug)]
pub struct PreparedBatch {
    /// Samples.
    pub batch: usize,
    /// Shape of every step's input, `(B, (h+1)·(C_prog + C_bound), Y, X)`.
    pub input_shape: [usize; 4],
    /// Shape of every step's label, `(B, (h+1)·C_prog, Y, X)`.
    pub label_shape: [usize; 4],
    /// One entry per rollout step.
    pub steps: Vec<PreparedStep>,
}

/// Prepares the plan's raw group buffers in place (on `pool`, else rayon's global pool) and
/// gathers them into step buffers from `outputs`, each of at least `capacity` values (a loader
/// passes its epoch's largest, so that one kind of buffer serves every step; 0: exact); the
/// group buffers go back to their pool.
///
/// # Errors
/// [`om4_batch::Error::BufferLength`] when buffers or normalizations do not match the plan,
/// checked before anything is written.
pub fn prepare_on_host(
    plan: &BatchPlan,
    mut groups: Vec<PooledBuf>,
    normalizations: &[Normalization],
    grid: Grid,
    pool: Option<&ReadPool>,
    outputs: &BufferPool,
    capacity: usize,
) -> Result<PreparedBatch> {
    let refs: Vec<&Normalization> = normalizations.iter().collect();
    // Leased here, on the loader's thread: a new allocation is then not made on whichever pool
    // thread runs the gather (glibc would keep an arena per pool thread).
    let (n_input, n_label) = om4_batch::step_lens(plan, grid);
    let lease = |n: usize| outputs.acquire_with_capacity(n, capacity);
    let mut steps: Vec<(PooledBuf, PooledBuf)> = (0..plan.steps()).map(|_| (lease(n_input), lease(n_label))).collect();
    let mut run = || om4_batch::prepare_and_gather_into_steps(plan, &mut groups, &refs, grid, &mut steps);
    match pool {
        Some(pool) => pool.install(run)?,
        None => run()?,
    }
    drop(groups); // back to the pool: the step buffers hold everything now
    let steps = steps.into_iter().map(|(input, label)| PreparedStep { input, label }).collect();
    let b = plan.batch();
    let per_sample = (b * grid.plane()).max(1);
    let shape = |len: usize| [b, len / per_sample, grid.y, grid.x];
    Ok(PreparedBatch { batch: b, input_shape: shape(n_input), label_shape: shape(n_label), steps })
}
