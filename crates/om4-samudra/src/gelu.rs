//! Samudra's activation, exact GELU capped at 10, as one parallel pass over the tensor.
//!
//! Burn's CPU backend (flex) evaluates GELU and its gradient one element at a time on one thread
//! (an `erff` each), and the cap is another pass: about 19 % of the tiny network's training step
//! at 2° (`gpu_check step --profile`, docs/benchmarks.md). Here the forward and the backward on
//! flex are each one pass split across rayon's threads, with flex's own formulas and the cap's
//! semantics under autodiff (the gradient is zero where the GELU exceeds the cap), so they equal
//! `gelu(x).clamp_max(10)` bit for bit, values and gradients (`tests/model.rs`).
//!
//! Elsewhere (cubecl on a GPU) the GELU is written as tensor operations, `x · (erf(x/√2) + 1) / 2`
//! in the order of Burn's own `gelu` (the same forward values), so that autodiff differentiates
//! the exact function: Burn's `gelu_backward` on cubecl (0.22) is the derivative of the tanh
//! approximation, up to 8.7e-4 off the exact one near x = 2. [`capped_gelu_ops`] is that path on
//! any backend; the tests hold it to flex's exact gradient.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, Flex, TensorMetadata};
use burn::tensor::{DType, Tensor};
use rayon::prelude::*;

/// The cap.
const CAP: f32 = 10.0;
/// Elements per rayon task.
const CHUNK: usize = 1 << 14;

/// `gelu(x).clamp_max(10)` with the exact (erf) GELU.
pub fn capped_gelu(x: Tensor<4>) -> Tensor<4> {
    if x.dtype() == DType::F32 {
        if let Ok(t) = x.clone().try_into_primitive::<Ad>() {
            return Tensor::from_primitive::<Ad>(tracked(t));
        }
        if let Ok(t) = x.clone().try_into_primitive::<Flex>() {
            return Tensor::from_primitive::<Flex>(map(&t, gelu_capped));
        }
    }
    capped_gelu_ops(x)
}

/// `gelu(x).clamp_max(10)` as tensor operations whose autodiff gradient is the exact GELU
/// derivative `Φ(x) + x·φ(x)` (zero where the cap applies): what runs on every backend but flex.
pub fn capped_gelu_ops(x: Tensor<4>) -> Tensor<4> {
    let cdf = x.clone().div_scalar(core::f32::consts::SQRT_2).erf().add_scalar(1.0);
    (x * cdf).div_scalar(2.0).clamp_max(CAP)
}

type Ad = Autodiff<Flex, NoCheckpointing>;

/// flex's GELU: `0.5 · x · (1 + erf(x / √2))`.
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + libm::erff(x / core::f32::consts::SQRT_2))
}

/// The cap as flex's `clamp_max` and autodiff's `mask_fill` apply it (NaN stays NaN).
fn gelu_capped(x: f32) -> f32 {
    let y = gelu(x);
    if y > CAP { CAP } else { y }
}

/// The gradient: zero where the cap applies (autodiff's `mask_fill` backward), flex's
/// `gelu_backward` of that.
fn gelu_capped_grad(x: f32, g: f32) -> f32 {
    let g = if gelu(x) > CAP { 0.0 } else { g };
    let inv_sqrt_2pi: f32 = 1.0 / (2.0 * core::f32::consts::PI).sqrt();
    let cdf = 0.5 * (1.0 + libm::erff(x / core::f32::consts::SQRT_2));
    let pdf = inv_sqrt_2pi * (-0.5 * x * x).exp();
    g * (cdf + x * pdf)
}

/// `f` of every element, in parallel, into a new contiguous tensor of the same shape.
fn map(x: &FlexTensor, f: impl Fn(f32) -> f32 + Sync) -> FlexTensor {
    let x = x.to_contiguous();
    let src: &[f32] = x.as_slice().expect("a contiguous float32 tensor");
    let mut out = FlexTensor::empty(x.shape(), DType::F32);
    let dst: &mut [f32] = out.storage_mut();
    dst.par_chunks_mut(CHUNK).zip(src.par_chunks(CHUNK)).for_each(|(d, s)| {
        d.iter_mut().zip(s).for_each(|(d, &s)| *d = f(s));
    });
    out
}

/// The autodiff operation: the input is kept for the backward.
fn tracked(x: FloatTensor<Ad>) -> FloatTensor<Ad> {
    match CappedGelu.prepare::<NoCheckpointing>([x.node()]).compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            let x = x.into_primitive();
            let y = map(&x, gelu_capped);
            prep.finish(x, y)
        }
        OpsKind::UnTracked(prep) => prep.finish(map(&x.into_primitive(), gelu_capped)),
    }
}

#[derive(Debug)]
struct CappedGelu;

impl Backward<Flex, 1> for CappedGelu {
    type State = FlexTensor;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [node] = ops.parents;
        let grad = grads.consume::<Flex>(&ops.node);
        let Some(node) = node else { return };
        let (x, grad) = (ops.state.to_contiguous(), grad.to_contiguous());
        let (src, g): (&[f32], &[f32]) =
            (x.as_slice().expect("a contiguous float32 tensor"), grad.as_slice().expect("a contiguous float32 tensor"));
        let mut out = FlexTensor::empty(x.shape(), DType::F32);
        let dst: &mut [f32] = out.storage_mut();
        dst.par_chunks_mut(CHUNK).zip(src.par_chunks(CHUNK).zip(g.par_chunks(CHUNK))).for_each(|(d, (s, g))| {
            d.iter_mut().zip(s.iter().zip(g)).for_each(|(d, (&s, &g))| *d = gelu_capped_grad(s, g));
        });
        grads.register::<Flex>(node.id, out);
    }
}
