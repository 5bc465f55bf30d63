//! Batches on a Burn device: prepared host batches become tensors without a copy; raw ones go to
//! the device once per group buffer, each unique plane is normalized and masked once with tensor
//! ops, then `select` gathers the model batch.

use burn::tensor::{Bool, DType, Device, FloatDType, Int, Tensor, TensorCreationOptions, TensorData};
use om4_batch::{BatchPlan, Grid, NormOrder, Normalization, Precision, ReadGroup, Role};

use om4_pipeline::{HostBatch, PooledBuf};

use crate::error::{Error, Result};
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
    pub samples: usize,
    /// One entry per rollout step.
    pub steps: Vec<StepTensors>,
}

/// One variable set's normalization (statistics, land mask, order, fill) on a device.
#[derive(Debug, Clone)]
pub struct DeviceNormalization {
    /// In the normalization's precision (float64 tensors for [`Precision::F64`]).
    mean: Tensor<4>,
    std: Tensor<4>,
    precision: Precision,
    land: Tensor<4, Bool>,
    order: NormOrder,
    fill: f32,
    channels: usize,
    plane: usize,
}

impl DeviceNormalization {
    /// Uploads a host normalization.
    pub fn new(prep: &Normalization, grid: Grid, device: &Device) -> Self {
        let c = prep.channels();
        let land: Vec<bool> = prep.mask().as_slice().iter().map(|w| !w).collect();
        let stat = |v: &[f64]| -> Tensor<4> {
            match prep.precision() {
                Precision::F32 => {
                    let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
                    Tensor::from_data(TensorData::new(v, [1, c, 1, 1]), device)
                }
                Precision::F64 => {
                    let options = TensorCreationOptions::new(device.clone()).with_dtype(DType::F64);
                    Tensor::<4>::from_data(TensorData::new(v.to_vec(), [1, c, 1, 1]), options)
                }
            }
        };
        Self {
            mean: stat(prep.mean()),
            std: stat(prep.std()),
            precision: prep.precision(),
            land: Tensor::from_data(TensorData::new(land, [1, c, grid.y, grid.x]), device),
            order: prep.order(),
            fill: prep.fill(),
            channels: c,
            plane: grid.plane(),
        }
    }

    /// `nan_to_num((x - mean) / std)` in the statistics' precision, as float32: NaN → 0; ±inf →
    /// ±f32::MAX in float32 (in float64, ±f64::MAX, which rounds to ±inf).
    fn normalize(&self, x: Tensor<4>) -> Tensor<4> {
        match self.precision {
            Precision::F32 => {
                let y = (x - self.mean.clone()) / self.std.clone();
                let nan = y.clone().is_nan();
                y.mask_fill(nan, 0.0).clamp(f32::MIN, f32::MAX)
            }
            Precision::F64 => {
                let y = (x.cast(FloatDType::F64) - self.mean.clone()) / self.std.clone();
                let nan = y.clone().is_nan();
                y.mask_fill(nan, 0.0).cast(FloatDType::F32)
            }
        }
    }

    /// Normalizes and masks a `(T, C, Y, X)` tensor of raw planes, each plane once.
    pub fn apply(&self, x: Tensor<4>) -> Tensor<4> {
        let shape = x.shape();
        let land = self.land.clone().expand(shape.clone());
        match self.order {
            NormOrder::NormalizeThenMask => self.normalize(x).mask_fill(land, self.fill),
            NormOrder::MaskThenNormalize => self.normalize(x.mask_fill(land, self.fill)),
        }
    }
}

/// Uploads the plan's group buffers (copied), prepares them on `device` and gathers the model
/// batch. `normalizations[s]` belongs to source `s`.
///
/// # Errors
/// [`om4_batch::Error::BufferLength`] when buffers or normalizations do not match the plan.
pub fn prepare_batch(
    plan: &BatchPlan,
    groups: &[&[f32]],
    normalizations: &[DeviceNormalization],
    grid: Grid,
    device: &Device,
) -> Result<ModelBatch> {
    check(plan, &groups.iter().map(|g| g.len()).collect::<Vec<_>>(), normalizations, grid)?;
    let data = plan.groups().iter().zip(groups).map(|(g, buf)| TensorData::new(buf.to_vec(), group_shape(g, grid)));
    Ok(prepare_data(plan, data, normalizations, grid, device))
}

/// The model batch of one host batch on `device`: a prepared batch's step buffers become the
/// tensors' storage; raw group buffers are uploaded once each and prepared with tensor ops.
/// Pooled buffers are handed over without a host copy and return to their pool when the backend
/// has finished with them.
///
/// # Errors
/// [`om4_batch::Error::BufferLength`] when buffers or normalizations do not match the plan.
pub fn to_model_batch(
    host: HostBatch,
    normalizations: &[DeviceNormalization],
    grid: Grid,
    device: &Device,
) -> Result<ModelBatch> {
    match host {
        HostBatch::Prepared(prepared) => {
            let tensor = |buf: PooledBuf, shape| Tensor::<4>::from_data(staging::tensor_data(buf, shape), device);
            let steps = prepared
                .steps
                .into_iter()
                .map(|s| StepTensors {
                    input: tensor(s.input, prepared.input_shape),
                    label: tensor(s.label, prepared.label_shape),
                })
                .collect();
            Ok(ModelBatch { samples: prepared.batch, steps })
        }
        HostBatch::Raw { plan, groups } => {
            check(&plan, &groups.iter().map(|g| g.len()).collect::<Vec<_>>(), normalizations, grid)?;
            let data = plan.groups().iter().zip(groups).map(|(g, buf)| staging::tensor_data(buf, group_shape(g, grid)));
            Ok(prepare_data(&plan, data, normalizations, grid, device))
        }
        HostBatch::Resident { .. } => Err(Error::Config(
            "a batch of a resident split is gathered from the device copy that om4-burn's OnDevice keeps \
             (om4_burn::loader)"
                .into(),
        )),
    }
}

fn group_shape(g: &ReadGroup, grid: Grid) -> [usize; 4] {
    [g.times.len(), g.channels, grid.y, grid.x]
}

/// Every group has a buffer of its size and a preparation of its channel count and grid.
fn check(plan: &BatchPlan, lens: &[usize], normalizations: &[DeviceNormalization], grid: Grid) -> Result<()> {
    let shapes: Vec<(usize, usize)> = normalizations.iter().map(|p| (p.channels, p.plane)).collect();
    Ok(om4_batch::check_groups(plan, lens, &shapes, grid)?)
}

fn prepare_data(
    plan: &BatchPlan,
    groups: impl Iterator<Item = TensorData>,
    normalizations: &[DeviceNormalization],
    grid: Grid,
    device: &Device,
) -> ModelBatch {
    let prepared: Vec<Tensor<4>> = plan
        .groups()
        .iter()
        .zip(groups)
        .map(|(g, data)| normalizations[g.source].apply(Tensor::<4>::from_data(data, device)))
        .collect();
    gather_steps(plan, &prepared, |_, row| row, grid, device)
}

/// The model batch gathered from `planes[g]`, the prepared planes of each group `g` of `plan`:
/// a role's row `r` of group `g` is plane `index(g, r)` of `planes[g]` (the row itself for a
/// batch's own group buffers; its time position for a resident copy of the split).
pub(crate) fn gather_steps(
    plan: &BatchPlan,
    planes: &[Tensor<4>],
    index: impl Fn(usize, usize) -> usize,
    grid: Grid,
    device: &Device,
) -> ModelBatch {
    let (b, states) = (plan.batch(), plan.states());
    let gather = |role: Role, step: usize| -> Option<Tensor<4>> {
        let rows = plan.rows(role)?;
        let idx: Vec<i64> = (0..b)
            .flat_map(|s| (0..states).map(move |j| rows.rows[(s * plan.steps() + step) * states + j]))
            .map(|row| index(rows.group, row) as i64)
            .collect();
        let idx = Tensor::<1, Int>::from_data(TensorData::new(idx, [b * states]), device);
        let c = plan.groups()[rows.group].channels;
        Some(planes[rows.group].clone().select(0, idx).reshape([b, states * c, grid.y, grid.x]))
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
    ModelBatch { samples: b, steps }
}

/// The label mask `(1, (h+1)·C_prog, Y, X)` (prognostic mask repeated per state), 1 on ocean.
pub fn label_mask(prognostic: &Normalization, states: usize, grid: Grid, device: &Device) -> Tensor<4> {
    let wet: Vec<f32> = prognostic.mask().repeat(states).as_slice().iter().map(|&w| f32::from(u8::from(w))).collect();
    Tensor::from_data(TensorData::new(wet, [1, states * prognostic.channels(), grid.y, grid.x]), device)
}

#[cfg(test)]
mod tests {
    use om4_batch::LandMask;

    use super::*;

    /// The device path equals the host path bit for bit in both precisions, both orders and
    /// with a non-zero fill, on values that include NaN, ±inf, zeros and large magnitudes.
    #[test]
    fn device_normalization_equals_the_host_path_bit_for_bit() {
        let (c, grid) = (3, Grid { y: 4, x: 5 });
        let plane = grid.plane();
        let raw: Vec<f32> = (0..2 * c * plane)
            .map(|i| match i % 11 {
                0 => f32::NAN,
                1 => f32::INFINITY,
                2 => f32::NEG_INFINITY,
                3 => 3.0e38,
                4 => -0.0,
                _ => (i as f32 * 0.731).sin() * 40.0 + 0.1,
            })
            .collect();
        let wet: Vec<bool> = (0..c * plane).map(|i| i % 7 != 3).collect();
        let device = Device::flex();
        for precision in [Precision::F32, Precision::F64] {
            for order in [NormOrder::NormalizeThenMask, NormOrder::MaskThenNormalize] {
                let mask = LandMask::new(c, plane, wet.clone()).unwrap();
                let (mean, std) = (vec![0.1, -2.7, 1e-3], vec![0.3, 1.7, 1e-30]);
                let norm = Normalization::with_precision(mean, std, precision, mask, order, -3.5).unwrap();
                let mut host = raw.clone();
                norm.prepare_group(&mut host).unwrap();
                let on_device = DeviceNormalization::new(&norm, grid, &device)
                    .apply(Tensor::from_data(TensorData::new(raw.clone(), [2, c, grid.y, grid.x]), &device));
                let got = on_device.into_data().try_to_vec::<f32>().unwrap();
                let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&host), "{precision:?} {order:?}");
            }
        }
    }
}
