//! Exponential moving average of a model's parameters, used for validation, as upstream
//! Samudra's `EMATracker` (m2lines/Samudra 018a6a7, `utils/ema.py`) computes it.
//!
//! After every optimizer step the update counter is incremented first, then
//! `decay = min(0.999, (1 + n) / (10 + n))` in float32 (the first decay is 2/11) and every
//! trainable parameter moves as `ema -= (1 − decay) · (ema − p)`. Only trainable parameters are
//! averaged: buffers (batch-norm running statistics) are the live model's, as upstream's
//! `copy_to` leaves them when it validates with the EMA weights.

use std::collections::HashMap;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::tensor::Tensor;

use crate::model::Samudra;

/// Exponential moving average of a model's trainable parameters.
#[derive(Debug)]
pub struct Ema {
    pub(crate) model: Samudra,
    pub(crate) decay: f64,
    pub(crate) updates: u64,
}

/// Every float tensor of a model, flattened, by parameter id.
struct Collect(HashMap<ParamId, Tensor<1>>);
impl ModuleVisitor for Collect {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let t = param.val();
        let n = t.shape().num_elements();
        self.0.insert(param.id, t.reshape([n]));
    }
}

/// Moves trainable parameters towards the live model's and copies its running statistics.
struct Blend<'a> {
    source: &'a HashMap<ParamId, Tensor<1>>,
    /// `1 − decay`, in float32 as upstream computes it.
    step: f32,
    path: Vec<String>,
}
impl ModuleMapper for Blend<'_> {
    fn enter_module(&mut self, name: &str, _container_type: &str) {
        self.path.push(name.to_string());
    }
    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let Some(src) = self.source.get(&param.id).cloned() else { return param };
        let buffer = self.path.last().is_some_and(|n| n.starts_with("running_"));
        let step = self.step;
        param.map(|ema| {
            let live = src.reshape::<D, _>(ema.shape());
            if buffer { live } else { ema.clone() - (ema - live) * step }
        })
    }
}

impl Ema {
    /// Starts from a copy of `model` (inference mode).
    pub fn new(model: &Samudra, decay: f64) -> Self {
        Self { model: model.valid(), decay, updates: 0 }
    }

    /// The decay of update number `n` (1-based): `min(decay, (1 + n) / (10 + n))` in float32.
    pub fn decay_at(decay: f64, n: u64) -> f32 {
        let warm = (1.0 + n as f32) / (10.0 + n as f32);
        (decay as f32).min(warm)
    }

    /// Blends in `model` after an optimizer step.
    pub fn update(&mut self, model: &Samudra) {
        let mut collect = Collect(HashMap::new());
        model.valid().visit(&mut collect);
        self.updates += 1;
        let step = 1.0 - Self::decay_at(self.decay, self.updates);
        self.model = self.model.clone().map(&mut Blend { source: &collect.0, step, path: Vec::new() });
    }

    /// The averaged model.
    pub fn model(&self) -> &Samudra {
        &self.model
    }

    /// Updates so far.
    pub fn updates(&self) -> u64 {
        self.updates
    }
}
