//! Device-side preparation: each group buffer goes to the device once, each unique plane is
//! normalized and masked once with tensor ops, then `select` gathers the model batch.

use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use om4_batch::{BatchPlan, Grid, NormOrder, Preparation, ReadGroup, Role};

use std::sync::Arc;

use crate::buffers::{BufferPool, PooledBuf};
use crate::error::Result;
use crate::staging;

/// One rollout step of a model batch on a device.
#[derive(Debug, Clone)]
pub struct StepTensors {
    /// `(B, (h+1)·(C_prog + C_bound), Y, X)`, time-major: `[prog(t0) | prog(t1) | … | bound(t0) | …]`.
    pub input: Tensor<4>,
    /// `(B, (h+1)·C_prog, Y, X)`.
    pub label: Tensor<4>,
}

/// A model batch on a device: every rollout step.
#[derive(Debug, Clone)]
pub struct ModelBatch {
    /// Samples.
    pub batch: usize,
    /// One entry per rollout step.
    pub steps: Vec<StepTensors>,
}

/// One source's statistics and land mask, on a device.
#[derive(Debug, Clone)]
pub struct DevicePreparation {
    mean: Tensor<4>,
    std: Tensor<4>,
    land: Tensor<4, Bool>,
    order: NormOrder,
    fill: f32,
    channels: usize,
    plane: usize,
}

impl DevicePreparation {
    /// Uploads a host preparation.
    pub fn new(prep: &Preparation, grid: Grid, device: &Device) -> Self {
        let c = prep.channels();
        let land: Vec<bool> = prep.mask().as_slice().iter().map(|w| !w).collect();
        Self {
            mean: Tensor::from_data(TensorData::new(prep.mean().to_vec(), [1, c, 1, 1]), device),
            std: Tensor::from_data(TensorData::new(prep.std().to_vec(), [1, c, 1, 1]), device),
            land: Tensor::from_data(TensorData::new(land, [1, c, grid.y, grid.x]), device),
            order: prep.order(),
            fill: prep.fill(),
            channels: c,
            plane: grid.plane(),
        }
    }

    /// `torch.nan_to_num(x, nan=0)`: NaN → 0, ±inf → ±f32::MAX.
    fn nan_to_num(x: Tensor<4>) -> Tensor<4> {
        let nan = x.clone().is_nan();
        x.mask_fill(nan, 0.0).clamp(f32::MIN, f32::MAX)
    }

    /// Normalizes and masks a `(T, C, Y, X)` tensor of raw planes, each plane once.
    pub fn apply(&self, x: Tensor<4>) -> Tensor<4> {
        let shape = x.shape();
        let land = self.land.clone().expand(shape.clone());
        match self.order {
            NormOrder::NormalizeThenMask => {
                let y = Self::nan_to_num((x - self.mean.clone()) / self.std.clone());
                y.mask_fill(land, self.fill)
            }
            NormOrder::MaskThenNormalize => {
                let x = x.mask_fill(land, self.fill);
                Self::nan_to_num((x - self.mean.clone()) / self.std.clone())
            }
        }
    }
}

/// Uploads the plan's group buffers (copied), prepares them on `device` and gathers the model
/// batch. `preparations[s]` belongs to source `s`.
///
/// # Errors
/// [`om4_batch::Error::BufferLength`] when buffers or preparations do not match the plan.
pub fn prepare_batch(
    plan: &BatchPlan,
    groups: &[&[f32]],
    preparations: &[DevicePreparation],
    grid: Grid,
    device: &Device,
) -> Result<ModelBatch> {
    check(plan, &groups.iter().map(|g| g.len()).collect::<Vec<_>>(), preparations, grid)?;
    let data = plan.groups().iter().zip(groups).map(|(g, buf)| TensorData::new(buf.to_vec(), group_shape(g, grid)));
    Ok(prepare_data(plan, data, preparations, grid, device))
}

/// What a loader prepares batches with: the device preparations, and the host ones when batches
/// are prepared on the host.
#[derive(Debug, Clone)]
pub(crate) struct Preparers {
    pub(crate) device: Arc<Vec<DevicePreparation>>,
    pub(crate) host: Option<Arc<Vec<Preparation>>>,
    /// Where the host path runs (the source's read pool; else rayon's global pool).
    pub(crate) pool: Option<om4_store::ReadPool>,
    /// The host path's output buffers, which become the model batch's tensors and come back
    /// when the backend drops them: reused, not faulted in anew for every batch.
    pub(crate) outputs: BufferPool,
}

impl Preparers {
    /// The model batch of `plan` from its pooled group buffers, on `device`.
    pub(crate) fn prepare(
        &self,
        plan: &BatchPlan,
        groups: Vec<PooledBuf>,
        grid: Grid,
        device: &Device,
    ) -> Result<ModelBatch> {
        match &self.host {
            Some(host) => prepare_pooled_on_host(plan, groups, host, grid, device, self.pool.as_ref(), &self.outputs),
            None => prepare_pooled(plan, groups, &self.device, grid, device),
        }
    }
}

/// [`prepare_batch`] from pooled buffers without a host copy: each buffer becomes its upload's
/// source and returns to its pool when the backend has finished with it.
fn prepare_pooled(
    plan: &BatchPlan,
    groups: Vec<PooledBuf>,
    preparations: &[DevicePreparation],
    grid: Grid,
    device: &Device,
) -> Result<ModelBatch> {
    check(plan, &groups.iter().map(|g| g.len()).collect::<Vec<_>>(), preparations, grid)?;
    let data = plan.groups().iter().zip(groups).map(|(g, buf)| staging::tensor_data(buf, group_shape(g, grid)));
    Ok(prepare_data(plan, data, preparations, grid, device))
}

/// The same batch through om4-batch's host path (each unique plane normalized and masked once,
/// then gathered, in parallel on `pool` or else the global rayon pool) into step buffers from
/// `outputs`, which become the tensors' storage. For CPU devices, where this is several times
/// faster than tensor ops and allocates fewer intermediates; checked bit for bit against the
/// device path and the naive one.
fn prepare_pooled_on_host(
    plan: &BatchPlan,
    mut groups: Vec<PooledBuf>,
    preparations: &[Preparation],
    grid: Grid,
    device: &Device,
    pool: Option<&om4_store::ReadPool>,
    outputs: &BufferPool,
) -> Result<ModelBatch> {
    let refs: Vec<&Preparation> = preparations.iter().collect();
    // Leased here, on the loader's thread: a new allocation is then not made on whichever pool
    // thread runs the gather (glibc would keep an arena per pool thread).
    let (n_input, n_label) = om4_batch::step_lens(plan, grid);
    let mut steps: Vec<(PooledBuf, PooledBuf)> =
        (0..plan.steps()).map(|_| (outputs.acquire(n_input), outputs.acquire(n_label))).collect();
    let mut run = || om4_batch::prepare_and_gather_into_steps(plan, &mut groups, &refs, grid, &mut steps);
    match pool {
        Some(pool) => pool.install(run)?,
        None => run()?,
    }
    drop(groups); // back to the pool: the step buffers hold everything now
    let (batch, per_sample) = (plan.batch(), plan.batch() * grid.plane());
    let tensor = |buf: PooledBuf| {
        let channels = buf.len() / per_sample;
        Tensor::<4>::from_data(staging::tensor_data(buf, [batch, channels, grid.y, grid.x]), device)
    };
    let steps =
        steps.into_iter().map(|(input, label)| StepTensors { input: tensor(input), label: tensor(label) }).collect();
    Ok(ModelBatch { batch, steps })
}

fn group_shape(g: &ReadGroup, grid: Grid) -> [usize; 4] {
    [g.times.len(), g.channels, grid.y, grid.x]
}

/// Every group has a buffer of its size and a preparation of its channel count and grid.
fn check(plan: &BatchPlan, lens: &[usize], preparations: &[DevicePreparation], grid: Grid) -> Result<()> {
    let shapes: Vec<(usize, usize)> = preparations.iter().map(|p| (p.channels, p.plane)).collect();
    Ok(om4_batch::check_groups(plan, lens, &shapes, grid)?)
}

fn prepare_data(
    plan: &BatchPlan,
    groups: impl Iterator<Item = TensorData>,
    preparations: &[DevicePreparation],
    grid: Grid,
    device: &Device,
) -> ModelBatch {
    let prepared: Vec<Tensor<4>> = plan
        .groups()
        .iter()
        .zip(groups)
        .map(|(g, data)| preparations[g.source].apply(Tensor::<4>::from_data(data, device)))
        .collect();
    let (b, states) = (plan.batch(), plan.states());
    let gather = |role: Role, step: usize| -> Option<Tensor<4>> {
        let rows = plan.rows(role)?;
        let idx: Vec<i64> = (0..b)
            .flat_map(|s| (0..states).map(move |j| rows.rows[(s * plan.steps() + step) * states + j] as i64))
            .collect();
        let idx = Tensor::<1, Int>::from_data(TensorData::new(idx, [b * states]), device);
        let c = plan.groups()[rows.group].channels;
        Some(prepared[rows.group].clone().select(0, idx).reshape([b, states * c, grid.y, grid.x]))
    };
    // Every plan has input and label roles (BatchPlan::new checks them).
    let steps = (0..plan.steps())
        .map(|k| {
            let prog = gather(Role::Input, k).expect("input role");
            let input = match gather(Role::Boundary, k) {
                Some(bound) => Tensor::cat(vec![prog, bound], 1),
                None => prog,
            };
            StepTensors { input, label: gather(Role::Label, k).expect("label role") }
        })
        .collect();
    ModelBatch { batch: b, steps }
}

/// The label mask `(1, (h+1)·C_prog, Y, X)` (prognostic mask repeated per state), 1 on ocean.
pub fn label_mask(prognostic: &Preparation, states: usize, grid: Grid, device: &Device) -> Tensor<4> {
    let wet: Vec<f32> = prognostic.mask().repeat(states).as_slice().iter().map(|&w| f32::from(u8::from(w))).collect();
    Tensor::from_data(TensorData::new(wet, [1, states * prognostic.channels(), grid.y, grid.x]), device)
}
