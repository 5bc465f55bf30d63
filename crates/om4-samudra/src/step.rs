//! One training step's parts, shared by [`Trainer`](crate::Trainer) and the step benchmark
//! (`benches/step`): the batch loss, its gradients, and the optimizer.

use burn::optim::{AdamConfig, GradientsParams, ModuleOptimizer};
use burn::tensor::{Bool, Tensor};
use om4_burn::ModelBatch;

use crate::loss::{Masked, grad_norm, rollout_loss};
use crate::model::Samudra;

/// The optimizer a run steps with: Adam (ε = 1e-8), gradients clipped to a global L2 norm of
/// `grad_clip` first, as upstream's `clip_grad_norm_` before `Adam.step`.
pub fn optimizer(grad_clip: f32) -> ModuleOptimizer {
    AdamConfig::new()
        .with_epsilon(1e-8)
        .with_grad_clipping(Some(burn::grad_clipping::GradientClippingConfig::Norm(grad_clip)))
        .init()
}

/// What the loss of a batch is measured against: the label mask, the land it implies, and the
/// prognostic part of each step's input.
#[derive(Debug, Clone)]
pub struct LossTargets {
    /// `(1, (h+1)·C_prog, Y, X)`: 1 where a label counts.
    pub label_mask: Tensor<4>,
    /// Where the label mask is 0: the model's output is set to 0 there.
    pub land: Tensor<4, Bool>,
    /// `(h+1)·C_prog`: the prognostic channels of each step's input.
    pub prognostic_inputs: usize,
}

impl LossTargets {
    /// Targets from the label mask (land is where it is 0: one source for both).
    pub fn new(label_mask: Tensor<4>, prognostic_inputs: usize) -> Self {
        let land = label_mask.clone().equal_elem(0.0);
        Self { label_mask, land, prognostic_inputs }
    }

    /// The per-channel masked MSE of `model`'s rollout over `batch`, summed over its steps.
    pub fn per_channel(&self, model: &Samudra, batch: &ModelBatch) -> Tensor<1> {
        let masked = Masked { model, land: self.land.clone() };
        rollout_loss(&masked, batch, &self.label_mask, self.prognostic_inputs)
    }

    /// The batch's scalar loss: the per-channel loss, weighted by `scales` when given
    /// (Samudra's dynamic loss weights, one per channel), averaged over the channels.
    pub fn loss(&self, model: &Samudra, batch: &ModelBatch, scales: Option<Tensor<1>>) -> Tensor<1> {
        let per_channel = self.per_channel(model, batch);
        match scales {
            Some(s) => (per_channel * s).mean(),
            None => per_channel.mean(),
        }
    }
}

/// The gradients of `loss / micro` for `model`'s parameters (`micro` batches accumulate into one
/// optimizer step), and their global L2 norm before clipping.
///
/// # Errors
/// [`Error::Device`](crate::Error::Device) when the device failed computing them.
pub fn gradients(model: &Samudra, loss: Tensor<1>, micro: usize) -> crate::Result<(GradientsParams, f32)> {
    let grads = GradientsParams::from_grads((loss / micro as f64).backward(), model);
    let norm = grad_norm(model, &grads)?;
    Ok((grads, norm))
}
