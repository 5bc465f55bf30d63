//! The rollout loss (masked per-channel MSE), Samudra's dynamic loss weights, the gradient norm
//! and the learning-rate schedule.

use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::{Bool, Tensor};
use om4_burn::ModelBatch;
use serde::{Deserialize, Serialize};

use crate::model::Samudra;

/// Something that maps a model input to a prediction: Samudra, or a stub in tests.
pub trait Predictor {
    /// `(B, inputs, Y, X)` → `(B, outputs, Y, X)`.
    fn predict(&self, input: Tensor<4>) -> Tensor<4>;
}

/// Samudra with its land mask.
#[derive(Debug)]
pub struct Masked<'a> {
    /// The network.
    pub model: &'a Samudra,
    /// True on land, `(1, outputs, Y, X)`.
    pub land: Tensor<4, Bool>,
}

impl Predictor for Masked<'_> {
    fn predict(&self, input: Tensor<4>) -> Tensor<4> {
        self.model.forward(input, self.land.clone())
    }
}

/// Per-channel masked MSE over a rollout, summed over steps: `(outputs,)`.
///
/// `prognostic_inputs` is `(h+1)·C_prog`, the prognostic part of each step's input.
pub fn rollout_loss(
    model: &impl Predictor,
    batch: &ModelBatch,
    label_mask: &Tensor<4>,
    prognostic_inputs: usize,
) -> Tensor<1> {
    let mut total: Option<Tensor<1>> = None;
    let mut previous: Option<Tensor<4>> = None;
    for step in &batch.steps {
        let input = match previous.take() {
            None => step.input.clone(),
            Some(pred) => {
                let [b, c, h, w] = step.input.dims();
                let boundary = step.input.clone().slice([0..b, prognostic_inputs..c, 0..h, 0..w]);
                Tensor::cat(vec![pred, boundary], 1)
            }
        };
        let pred = model.predict(input);
        let mask = label_mask.clone().expand(pred.shape());
        let diff = pred.clone() * mask.clone() - step.label.clone() * mask;
        let channels = diff.dims()[1];
        let per_channel = diff.powi_scalar(2).mean_dim(0).mean_dim(2).mean_dim(3).reshape([channels]);
        total = Some(match total {
            None => per_channel,
            Some(t) => t + per_channel,
        });
        previous = Some(pred);
    }
    total.expect("a batch has at least one step")
}

/// The global L2 norm of a model's gradients (what clipping by norm measures), read back once.
///
/// # Errors
/// [`Error::Device`](crate::Error::Device) when the device failed computing the gradients.
pub fn grad_norm<M: Module>(model: &M, grads: &GradientsParams) -> crate::Result<f32> {
    struct SumSquares<'a> {
        grads: &'a GradientsParams,
        total: Option<Tensor<1>>,
    }
    impl ModuleVisitor for SumSquares<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(g) = self.grads.get::<D>(param.id) {
                let s = g.powi_scalar(2).sum();
                self.total = Some(match self.total.take() {
                    Some(t) => t + s,
                    None => s,
                });
            }
        }
    }
    let mut v = SumSquares { grads, total: None };
    model.visit(&mut v);
    v.total.map_or(Ok(0.0), |t| {
        t.sqrt()
            .try_into_scalar::<f32>()
            .map_err(|e| crate::Error::Device { what: "gradient norm", reason: e.to_string() })
    })
}

/// Cosine annealing to 0 over `epochs`, stepped once per epoch (epoch 1 uses the peak).
pub fn cosine_lr(peak: f64, epoch: usize, epochs: usize) -> f64 {
    let e = (epoch.saturating_sub(1)) as f64;
    peak * 0.5 * (1.0 + (std::f64::consts::PI * e / epochs.max(1) as f64).cos())
}

/// Samudra's dynamic loss weights: one scale per prognostic variable, shared across history.
/// After each batch, `w = mean over history of 1 / max(loss, 1e-8)` from a no-grad single step,
/// clamped to `[min w, limit · min w]`, then `s ← (24 s + w) / 25`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DynamicLoss {
    /// Current scales, one per prognostic variable.
    pub scales: Vec<f32>,
    /// Upper limit as a multiple of the smallest weight.
    pub limit: f32,
}

impl DynamicLoss {
    const WINDOW: f32 = 25.0;

    /// Unit scales for `channels` variables.
    pub fn new(channels: usize, limit: f32) -> Self {
        Self { scales: vec![1.0; channels], limit }
    }

    /// The scales tiled over `states` history states: `(states · channels,)`.
    pub fn tiled(&self, states: usize) -> Vec<f32> {
        self.scales.repeat(states)
    }

    /// Updates the scales from a per-channel loss of `states · channels` values.
    pub fn update(&mut self, per_channel: &[f32], states: usize) {
        let c = self.scales.len();
        let w: Vec<f32> = (0..c)
            .map(|v| (0..states).map(|j| 1.0 / per_channel[j * c + v].max(1e-8)).sum::<f32>() / states as f32)
            .collect();
        let lo = w.iter().copied().fold(f32::INFINITY, f32::min);
        for (s, w) in self.scales.iter_mut().zip(w) {
            let w = w.clamp(lo, lo * self.limit);
            *s = ((Self::WINDOW - 1.0) * *s + w) / Self::WINDOW;
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::Device;

    use super::*;

    #[test]
    fn dynamic_loss_update_follows_samudra() {
        let mut d = DynamicLoss::new(2, 20.0);
        // states 2 × channels 2: losses [1, 4 | 1, 4] → w = [1, 0.25], inside [0.25, 5]
        d.update(&[1.0, 4.0, 1.0, 4.0], 2);
        assert_eq!(d.scales, vec![1.0, (24.0 + 0.25) / 25.0]);
        // a tiny loss gives a huge weight, clamped to limit × the smallest
        let mut d = DynamicLoss::new(2, 20.0);
        d.update(&[1.0, 1e-12], 1);
        assert_eq!(d.scales, vec![1.0, (24.0 + 20.0) / 25.0]);
        assert_eq!(d.tiled(2), vec![1.0, 44.0 / 25.0, 1.0, 44.0 / 25.0]);
    }

    #[test]
    fn gradient_norm_is_global_l2_and_flags_nan() {
        use burn::nn::conv::Conv2dConfig;
        let device = Device::flex().autodiff();
        let conv = Conv2dConfig::new([1, 1], [1, 1]).init(&device);
        let x = Tensor::<4>::full([1, 1, 2, 2], 2.0, &device);
        let grads = GradientsParams::from_grads(conv.forward(x).sum().backward(), &conv);
        // d/dw = Σx = 8, d/db = 4 cells → √(64 + 16)
        assert!((grad_norm(&conv, &grads).unwrap() - 80f32.sqrt()).abs() < 1e-5);
        let nan = Tensor::<4>::full([1, 1, 2, 2], f32::NAN, &device);
        let grads = GradientsParams::from_grads(conv.forward(nan).sum().backward(), &conv);
        assert!(!grad_norm(&conv, &grads).unwrap().is_finite());
    }

    #[test]
    fn cosine_schedule_per_epoch() {
        assert_eq!(cosine_lr(6e-4, 1, 70), 6e-4);
        assert!((cosine_lr(6e-4, 36, 70) - 3e-4).abs() < 1e-12);
        assert!(cosine_lr(6e-4, 70, 70) > 0.0);
    }
}
