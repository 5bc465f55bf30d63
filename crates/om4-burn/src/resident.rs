//! A training split resident on a Burn device (`om4_pipeline::Loader::resident`): per variable
//! set one tensor `(times, channels, y, x)` of prepared planes, filled as batches hand over the
//! planes they are the first to need, and gathered from by every batch.

use std::sync::Arc;

use burn::tensor::{Device, IndexingUpdateOp, Int, Tensor, TensorData};
use om4_batch::{BatchPlan, Grid};
use om4_pipeline::{FreshPlanes, Residency};

use crate::device::{DeviceNormalization, ModelBatch, gather_steps};
use crate::error::{Error, Result};
use crate::staging;

/// The device copy of a split: per variable set, its prepared planes and which times are filled.
#[derive(Debug, Default)]
pub(crate) struct ResidentCopy {
    sets: Vec<Option<(Tensor<4>, Vec<bool>)>>,
}

impl ResidentCopy {
    /// Writes `fresh` (prepared) into the copy, marks it in `residency`, and gathers the batch.
    ///
    /// # Errors
    /// [`Error::Config`] when the batch needs a plane the copy lacks (the loader's record and this
    /// copy disagree: another consumer marked it); [`Error::Plan`] when a buffer does not match.
    pub(crate) fn take(
        &mut self,
        plan: &BatchPlan,
        fresh: Vec<FreshPlanes>,
        residency: &Arc<Residency>,
        normalizations: &[DeviceNormalization],
        grid: Grid,
        device: &Device,
    ) -> Result<ModelBatch> {
        if fresh.len() != plan.groups().len() {
            return Err(Error::Config(format!("{} fresh groups for a plan of {}", fresh.len(), plan.groups().len())));
        }
        if self.sets.is_empty() {
            self.sets = (0..residency.channels().len()).map(|_| None).collect();
        }
        for (g, f) in plan.groups().iter().zip(fresh) {
            let block = g.channels * grid.plane();
            if f.planes.len() != f.times.len() * block {
                return Err(om4_batch::Error::BufferLength {
                    what: format!("fresh planes of set {}", g.source),
                    expected: f.times.len() * block,
                    found: f.planes.len(),
                }
                .into());
            }
            let (copy, filled) = self.sets[g.source].get_or_insert_with(|| {
                let zeros = Tensor::<4>::zeros([residency.times(), g.channels, grid.y, grid.x], device);
                (zeros, vec![false; residency.times()])
            });
            if f.times.is_empty() {
                continue;
            }
            let planes = Tensor::<4>::from_data(
                staging::tensor_data(f.planes, [f.times.len(), g.channels, grid.y, grid.x]),
                device,
            );
            let prepared = normalizations[g.source].apply(planes);
            let at: Vec<i64> = f.times.iter().map(|&t| t as i64).collect();
            let at = Tensor::<1, Int>::from_data(TensorData::new(at, [f.times.len()]), device);
            *copy = copy.clone().select_assign(0, at, prepared, IndexingUpdateOp::Assign);
            for &t in &f.times {
                filled[t] = true;
            }
            residency.mark(g.source, &f.times);
        }
        let mut planes = Vec::with_capacity(plan.groups().len());
        for g in plan.groups() {
            let set = self.sets[g.source].as_ref().filter(|(_, filled)| g.times.iter().all(|&t| filled[t]));
            let Some((copy, _)) = set else {
                return Err(Error::Config(format!(
                    "a plane of variable set {} is neither resident on the device nor in this batch: the loader's \
                     residency was marked by another consumer",
                    g.source
                )));
            };
            planes.push(copy.clone());
        }
        Ok(gather_steps(plan, &planes, |g, row| plan.groups()[g].times[row], grid, device))
    }
}
