//! Exponential moving average of a model's parameters, used for validation.

use std::collections::HashMap;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::tensor::Tensor;

use crate::model::Samudra;

/// Exponential moving average of a model's parameters.
#[derive(Debug)]
pub struct Ema {
    pub(crate) model: Samudra,
    pub(crate) decay: f64,
    pub(crate) updates: u64,
}

struct Collect(HashMap<ParamId, Tensor<1>>);
impl ModuleVisitor for Collect {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let t = param.val();
        let n = t.shape().num_elements();
        self.0.insert(param.id, t.reshape([n]));
    }
}

struct Blend<'a> {
    source: &'a HashMap<ParamId, Tensor<1>>,
    keep: f64,
}
impl ModuleMapper for Blend<'_> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        let Some(src) = self.source.get(&param.id).cloned() else { return param };
        let keep = self.keep;
        param.map(|t| {
            let shape = t.shape();
            t * keep + src.reshape::<D, _>(shape) * (1.0 - keep)
        })
    }
}

impl Ema {
    /// Starts from a copy of `model` (inference mode).
    pub fn new(model: &Samudra, decay: f64) -> Self {
        Self { model: model.valid(), decay, updates: 0 }
    }
    /// Blends in `model` after an optimizer step.
    pub fn update(&mut self, model: &Samudra) {
        let mut collect = Collect(HashMap::new());
        model.valid().visit(&mut collect);
        let keep = self.decay.min((1.0 + self.updates as f64) / (10.0 + self.updates as f64));
        self.model = self.model.clone().map(&mut Blend { source: &collect.0, keep });
        self.updates += 1;
    }
    /// The averaged model.
    pub fn model(&self) -> &Samudra {
        &self.model
    }
}
