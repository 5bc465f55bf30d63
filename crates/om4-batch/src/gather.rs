//! Gather prepared group buffers into model batches, and the naive reference path they must equal.
//!
//! Per rollout step, the input is `(B, (h+1)·C_prog + (h+1)·C_bound, Y, X)`, time-major:
//! `[prog(t0) | prog(t1) | … | bound(t0) | bound(t1) | …]`; the label is `(B, (h+1)·C_prog, Y, X)`.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::normalize::{Grid, Normalization};
use crate::plan::{BatchPlan, Role, Roles};
use crate::space::Sample;

/// One rollout step of a model batch, on the host.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GatheredStep {
    /// `(B, input_channels, Y, X)`.
    pub input: Vec<f32>,
    /// `(B, label_channels, Y, X)`.
    pub label: Vec<f32>,
}

/// A model batch on the host: every rollout step's input and label.
///
/// A batch can be kept and passed again to [`gather_into`] / [`prepare_and_gather_into`]: its
/// buffers are then overwritten in place, without new allocations when the shape is unchanged.
#[derive(Debug, Clone, PartialEq)]
pub struct GatheredBatch {
    /// Samples.
    pub batch: usize,
    /// Plane size.
    pub grid: Grid,
    /// Channels of each input: `(h+1)·(C_prog + C_bound)`.
    pub input_channels: usize,
    /// Channels of each label: `(h+1)·C_prog`.
    pub label_channels: usize,
    /// One entry per rollout step.
    pub steps: Vec<GatheredStep>,
}

impl Default for GatheredBatch {
    fn default() -> Self {
        Self { batch: 0, grid: Grid { y: 0, x: 0 }, input_channels: 0, label_channels: 0, steps: Vec::new() }
    }
}

impl GatheredBatch {
    /// Sets the shape and sizes every buffer, keeping buffers that already have the right length
    /// (their old values are overwritten by the caller; nothing is zero-filled twice).
    fn reshape(&mut self, batch: usize, grid: Grid, states: usize, c_prog: usize, c_bound: usize, steps: usize) {
        self.batch = batch;
        self.grid = grid;
        self.input_channels = states * (c_prog + c_bound);
        self.label_channels = states * c_prog;
        let plane = grid.plane();
        let fit = |v: &mut Vec<f32>, n: usize| {
            if v.len() != n {
                v.clear();
                v.resize(n, 0.0);
            }
        };
        self.steps.resize_with(steps, GatheredStep::default);
        for step in &mut self.steps {
            fit(&mut step.input, batch * self.input_channels * plane);
            fit(&mut step.label, batch * self.label_channels * plane);
        }
    }

    /// Bit-level equality (NaN-aware, distinguishes `-0.0`), for parity checks.
    pub fn bitwise_eq(&self, other: &Self) -> bool {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        self.batch == other.batch
            && self.grid == other.grid
            && self.input_channels == other.input_channels
            && self.label_channels == other.label_channels
            && self.steps.len() == other.steps.len()
            && self
                .steps
                .iter()
                .zip(&other.steps)
                .all(|(a, b)| bits(&a.input) == bits(&b.input) && bits(&a.label) == bits(&b.label))
    }
}

/// Splits the first `n` values off `rest`.
fn take<'a>(rest: &mut &'a mut [f32], n: usize) -> &'a mut [f32] {
    let (head, tail) = std::mem::take(rest).split_at_mut(n);
    *rest = tail;
    head
}

/// Gathers prepared group buffers (one per plan group, `(times, channels, y, x)`) into a new model batch.
///
/// # Errors
/// [`Error::BufferLength`] when a group buffer does not match its plan group.
pub fn gather(plan: &BatchPlan, groups: &[&[f32]], grid: Grid) -> Result<GatheredBatch> {
    let mut out = GatheredBatch::default();
    gather_into(plan, groups, grid, &mut out)?;
    Ok(out)
}

/// [`gather`] into an existing batch, reusing its buffers. The copies run on the current rayon
/// pool (call it inside `ThreadPool::install` to choose the threads).
///
/// # Errors
/// [`Error::BufferLength`] when a group buffer does not match its plan group; `out` is then unchanged.
pub fn gather_into(plan: &BatchPlan, groups: &[&[f32]], grid: Grid, out: &mut GatheredBatch) -> Result<()> {
    check_group_lens(plan, groups.iter().map(|g| g.len()), grid)?;
    let (c_prog, c_bound) = (plan.role_channels(Role::Input), plan.role_channels(Role::Boundary));
    out.reshape(plan.batch(), grid, plan.states(), c_prog, c_bound, plan.steps());
    let steps = out.steps.iter_mut().map(|s| (s.input.as_mut_slice(), s.label.as_mut_slice())).collect();
    copy_blocks(plan, groups, grid, steps);
    Ok(())
}

/// Values of one rollout step's input and label for `plan` on `grid`: the lengths the step
/// buffers of [`gather_into_steps`] must have.
pub fn step_lens(plan: &BatchPlan, grid: Grid) -> (usize, usize) {
    let (c_prog, c_bound) = (plan.role_channels(Role::Input), plan.role_channels(Role::Boundary));
    let per_sample = plan.batch() * plan.states() * grid.plane();
    (per_sample * (c_prog + c_bound), per_sample * c_prog)
}

/// [`gather_into`] for buffers the caller owns (pooled or page-locked memory, say): `steps[k]`
/// is rollout step `k`'s `(input, label)`, laid out as [`GatheredStep`]'s, each [`step_lens`] long.
///
/// # Errors
/// [`Error::BufferLength`] when a group or step buffer does not match the plan; nothing is
/// written then.
pub fn gather_into_steps<O: AsMut<[f32]>>(
    plan: &BatchPlan,
    groups: &[&[f32]],
    grid: Grid,
    steps: &mut [(O, O)],
) -> Result<()> {
    check_group_lens(plan, groups.iter().map(|g| g.len()), grid)?;
    check_steps(plan, grid, steps)?;
    copy_blocks(plan, groups, grid, steps.iter_mut().map(|(i, l)| (i.as_mut(), l.as_mut())).collect());
    Ok(())
}

/// One buffer per plan group, of the group's size.
fn check_group_lens(plan: &BatchPlan, lens: impl ExactSizeIterator<Item = usize>, grid: Grid) -> Result<()> {
    if lens.len() != plan.groups().len() {
        return Err(Error::BufferLength {
            what: "group buffer list".into(),
            expected: plan.groups().len(),
            found: lens.len(),
        });
    }
    for (i, (g, len)) in plan.groups().iter().zip(lens).enumerate() {
        if len != g.planes() * grid.plane() {
            return Err(Error::BufferLength {
                what: format!("group buffer {i}"),
                expected: g.planes() * grid.plane(),
                found: len,
            });
        }
    }
    Ok(())
}

/// One `(input, label)` pair per rollout step, each [`step_lens`] long.
fn check_steps<O: AsMut<[f32]>>(plan: &BatchPlan, grid: Grid, steps: &mut [(O, O)]) -> Result<()> {
    if steps.len() != plan.steps() {
        return Err(Error::BufferLength {
            what: "step buffer list".into(),
            expected: plan.steps(),
            found: steps.len(),
        });
    }
    let (input, label) = step_lens(plan, grid);
    for (k, (i, l)) in steps.iter_mut().enumerate() {
        for (what, expected, found) in [("input", input, i.as_mut().len()), ("label", label, l.as_mut().len())] {
            if expected != found {
                return Err(Error::BufferLength { what: format!("{what} buffer of step {k}"), expected, found });
            }
        }
    }
    Ok(())
}

/// The gather itself, on checked buffers: every output block paired with its source rows, in
/// layout order, then copied in parallel.
fn copy_blocks(plan: &BatchPlan, groups: &[&[f32]], grid: Grid, steps: Vec<(&mut [f32], &mut [f32])>) {
    let plane = grid.plane();
    let (c_prog, c_bound) = (plan.role_channels(Role::Input), plan.role_channels(Role::Boundary));
    let states = plan.states();
    // The planes of one (role, sample, step, state): one contiguous row of a group buffer.
    let block = |role: Role, b: usize, k: usize, j: usize| -> &[f32] {
        let (group, row) = plan.row(role, b, k, j).expect("role present");
        let len = plan.groups()[group].channels * plane;
        &groups[group][row * len..(row + 1) * len]
    };
    let mut copies: Vec<(&mut [f32], &[f32])> = Vec::with_capacity(plan.steps() * plan.batch() * states * 3);
    for (k, (mut input, mut label)) in steps.into_iter().enumerate() {
        for b in 0..plan.batch() {
            for j in 0..states {
                copies.push((take(&mut input, c_prog * plane), block(Role::Input, b, k, j)));
            }
            if c_bound > 0 {
                for j in 0..states {
                    copies.push((take(&mut input, c_bound * plane), block(Role::Boundary, b, k, j)));
                }
            }
            for j in 0..states {
                copies.push((take(&mut label, c_prog * plane), block(Role::Label, b, k, j)));
            }
        }
        debug_assert!(input.is_empty() && label.is_empty());
    }
    copies.into_par_iter().for_each(|(dst, src)| dst.copy_from_slice(src));
}

/// The fast host path: prepare each unique plane once in the group buffers, then gather.
/// `preparations[s]` prepares source `s`.
///
/// # Errors
/// [`Error::BufferLength`] when buffers or preparations do not match the plan.
pub fn prepare_and_gather<B: AsRef<[f32]> + AsMut<[f32]>>(
    plan: &BatchPlan,
    groups: &mut [B],
    preparations: &[&Normalization],
    grid: Grid,
) -> Result<GatheredBatch> {
    let mut out = GatheredBatch::default();
    prepare_and_gather_into(plan, groups, preparations, grid, &mut out)?;
    Ok(out)
}

/// Checks group buffers and preparations against a plan before anything is prepared: one buffer
/// per plan group (`lens`, in values) of the group's size, and for each group's source a
/// preparation (`(channels, plane)` per source id) of the group's channel count and `grid`'s plane.
///
/// # Errors
/// [`Error::BufferLength`] naming the first mismatch.
pub fn check_groups(plan: &BatchPlan, lens: &[usize], preparations: &[(usize, usize)], grid: Grid) -> Result<()> {
    check_group_lens(plan, lens.iter().copied(), grid)?;
    for (i, g) in plan.groups().iter().enumerate() {
        let &(channels, plane) = preparations.get(g.source).ok_or_else(|| Error::BufferLength {
            what: "preparation list".into(),
            expected: g.source + 1,
            found: preparations.len(),
        })?;
        for (what, expected, found) in [
            ("channels of the preparation of group", g.channels, channels),
            ("plane size of the preparation of group", grid.plane(), plane),
        ] {
            if expected != found {
                return Err(Error::BufferLength { what: format!("{what} {i}"), expected, found });
            }
        }
    }
    Ok(())
}

/// [`prepare_and_gather`] into an existing batch, reusing its buffers; both halves run in
/// parallel on the current rayon pool.
///
/// # Errors
/// [`Error::BufferLength`] when buffers or preparations do not match the plan. This is checked
/// before any group buffer is prepared, so a failed call leaves `groups` and `out` unchanged.
pub fn prepare_and_gather_into<B: AsRef<[f32]> + AsMut<[f32]>>(
    plan: &BatchPlan,
    groups: &mut [B],
    preparations: &[&Normalization],
    grid: Grid,
    out: &mut GatheredBatch,
) -> Result<()> {
    prepare_groups(plan, groups, preparations, grid)?;
    let views: Vec<&[f32]> = groups.iter().map(AsRef::as_ref).collect();
    gather_into(plan, &views, grid, out)
}

/// [`prepare_and_gather_into`] for step buffers the caller owns, as [`gather_into_steps`] takes them.
///
/// # Errors
/// [`Error::BufferLength`] when buffers or preparations do not match the plan, checked before
/// anything is written: a failed call leaves `groups` and `steps` unchanged.
pub fn prepare_and_gather_into_steps<B: AsRef<[f32]> + AsMut<[f32]>, O: AsMut<[f32]>>(
    plan: &BatchPlan,
    groups: &mut [B],
    preparations: &[&Normalization],
    grid: Grid,
    steps: &mut [(O, O)],
) -> Result<()> {
    check_steps(plan, grid, steps)?;
    prepare_groups(plan, groups, preparations, grid)?;
    let views: Vec<&[f32]> = groups.iter().map(AsRef::as_ref).collect();
    copy_blocks(plan, &views, grid, steps.iter_mut().map(|(i, l)| (i.as_mut(), l.as_mut())).collect());
    Ok(())
}

/// Checks, then prepares (normalizes and masks) every group buffer in place.
fn prepare_groups<B: AsRef<[f32]> + AsMut<[f32]>>(
    plan: &BatchPlan,
    groups: &mut [B],
    preparations: &[&Normalization],
    grid: Grid,
) -> Result<()> {
    let lens: Vec<usize> = groups.iter().map(|b| b.as_ref().len()).collect();
    let shapes: Vec<(usize, usize)> = preparations.iter().map(|p| (p.channels(), p.mask().plane())).collect();
    check_groups(plan, &lens, &shapes, grid)?;
    for (g, buf) in plan.groups().iter().zip(groups.iter_mut()) {
        preparations[g.source].prepare_group(buf.as_mut())?;
    }
    Ok(())
}

/// Fills a plan's group buffers one plane at a time through `fetch(source, time, channel, out)`.
///
/// # Errors
/// Whatever `fetch` returns.
pub fn fill_groups<E>(
    plan: &BatchPlan,
    grid: Grid,
    mut fetch: impl FnMut(usize, usize, usize, &mut [f32]) -> Result<(), E>,
) -> Result<Vec<Vec<f32>>, E> {
    let plane = grid.plane();
    plan.groups()
        .iter()
        .map(|g| {
            let mut buf = vec![0.0; g.planes() * plane];
            for (chunk, (t, c)) in
                buf.chunks_exact_mut(plane).zip(g.times.iter().flat_map(|&t| (0..g.channels).map(move |c| (t, c))))
            {
                fetch(g.source, t, c, chunk)?;
            }
            Ok(buf)
        })
        .collect()
}

/// The naive reference: every sample, step, role and state read on its own through
/// `fetch(source, time, channel, out)`, prepared value by value and stacked. No plan, no dedup.
///
/// # Errors
/// [`Error::MixedBatch`] for an empty or mixed batch (as a plan would), or whatever `fetch` returns.
pub fn reference_batch<E: From<Error>>(
    samples: &[Sample],
    roles: &Roles,
    preparations: &[&Normalization],
    grid: Grid,
    mut fetch: impl FnMut(usize, usize, usize, &mut [f32]) -> Result<(), E>,
) -> Result<GatheredBatch, E> {
    let channels: Vec<usize> = preparations.iter().map(|p| p.channels()).collect();
    // The plan is built only to apply the same input validation; its maps are not used.
    let plan = BatchPlan::new(samples, roles, &channels)?;
    let plane = grid.plane();
    let c_prog = channels[roles.input];
    let c_bound = roles.boundary.map_or(0, |b| channels[b]);
    let states = plan.states();
    let mut out = GatheredBatch::default();
    out.reshape(samples.len(), grid, states, c_prog, c_bound, plan.steps());
    let mut scratch = vec![0.0f32; plane];
    let mut put = |source: usize, time: usize, dst: &mut [f32]| -> Result<(), E> {
        let prep = preparations[source];
        for (c, dst_plane) in dst.chunks_exact_mut(plane).enumerate() {
            fetch(source, time, c, &mut scratch)?;
            for ((d, &x), &wet) in dst_plane.iter_mut().zip(&scratch).zip(prep.mask().channel(c)) {
                *d = crate::normalize::prepare_value(
                    x,
                    prep.mean()[c],
                    prep.std()[c],
                    wet,
                    prep.order(),
                    prep.fill(),
                    prep.precision(),
                );
            }
        }
        Ok(())
    };
    for (k, step) in out.steps.iter_mut().enumerate() {
        let input_block = out.input_channels * plane;
        let label_block = out.label_channels * plane;
        for (b, s) in samples.iter().enumerate() {
            for j in 0..states {
                let t_in = s.spec.input_time(s.start, k, j);
                let dst = &mut step.input[b * input_block + j * c_prog * plane..][..c_prog * plane];
                put(roles.input, t_in, dst)?;
                if let Some(bsrc) = roles.boundary {
                    let off = b * input_block + (states * c_prog + j * c_bound) * plane;
                    put(bsrc, t_in, &mut step.input[off..off + c_bound * plane])?;
                }
                let t_label = s.spec.label_time(s.start, k, j);
                let dst = &mut step.label[b * label_block + j * c_prog * plane..][..c_prog * plane];
                put(roles.label, t_label, dst)?;
            }
        }
    }
    Ok(out)
}
