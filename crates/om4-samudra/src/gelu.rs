//! Samudra's activation, exact GELU capped at 10, as one parallel, vectorized pass over the tensor.
//!
//! Burn's CPU backend (flex) evaluates GELU and its gradient one element at a time on one thread
//! (a scalar `erff` each, with branches), and the cap is another pass: about 19 % of the tiny
//! network's training step at 2° (`om4-train step --profile`, docs/benchmarks.md). Here the
//! forward and the backward on flex are each one pass split across rayon's threads, with flex's
//! formulas (`0.5·x·(1 + erf(x/√2))`, gradient `Φ(x) + x·φ(x)`) and the cap's semantics under
//! autodiff (the gradient is zero where the GELU exceeds the cap), over the `erf` module's
//! branch-free float32 polynomials that the compiler vectorizes, within 1.2 ulp of the exact
//! functions (tests). Each element's value is that of the scalar function, whatever the vector
//! width: the operations are IEEE float32 ones, in the same order, without fused multiply-adds.
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

use crate::erf::CAP;
use crate::wide::{self, Width};

/// Elements per rayon task.
const CHUNK: usize = 1 << 14;

/// `gelu(x).clamp_max(10)` with the exact (erf) GELU.
pub fn capped_gelu(x: Tensor<4>) -> Tensor<4> {
    if x.dtype() == DType::F32 {
        if let Ok(t) = x.clone().try_into_primitive::<Ad>() {
            return Tensor::from_primitive::<Ad>(tracked(t));
        }
        if let Ok(t) = x.clone().try_into_primitive::<Flex>() {
            return Tensor::from_primitive::<Flex>(map(&t));
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

/// The capped GELU of every element, in parallel, into a new contiguous tensor of the same shape.
fn map(x: &FlexTensor) -> FlexTensor {
    let x = x.to_contiguous();
    let src: &[f32] = x.as_slice().expect("a contiguous float32 tensor");
    let mut out = FlexTensor::empty(x.shape(), DType::F32);
    let dst: &mut [f32] = out.storage_mut();
    let width = Width::widest();
    dst.par_chunks_mut(CHUNK).zip(src.par_chunks(CHUNK)).for_each(|(d, s)| wide::gelu_capped(width, s, d));
    out
}

/// The autodiff operation: the input is kept for the backward.
fn tracked(x: FloatTensor<Ad>) -> FloatTensor<Ad> {
    match CappedGelu.prepare::<NoCheckpointing>([x.node()]).compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            let x = x.into_primitive();
            let y = map(&x);
            prep.finish(x, y)
        }
        OpsKind::UnTracked(prep) => prep.finish(map(&x.into_primitive())),
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
        let width = Width::widest();
        dst.par_chunks_mut(CHUNK)
            .zip(src.par_chunks(CHUNK).zip(g.par_chunks(CHUNK)))
            .for_each(|(d, (s, g))| wide::gelu_capped_grad(width, s, g, d));
        grads.register::<Flex>(node.id, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::erf::gelu_capped;

    #[test]
    fn the_parallel_passes_equal_the_scalar_functions_bit_for_bit() {
        let n = 3 * CHUNK + 17;
        let data: Vec<f32> =
            (0..n).map(|i| (i as f32 * 0.618_034).sin() * 12.0 + ((i % 7) as f32 - 3.0) * 0.25).collect();
        let x = FlexTensor::from_data(burn::tensor::TensorData::new(data.clone(), [n]));
        let out = map(&x);
        let got: &[f32] = out.as_slice().expect("contiguous");
        for (i, (&g, &v)) in got.iter().zip(&data).enumerate() {
            assert_eq!(g.to_bits(), gelu_capped(v).to_bits(), "element {i}");
        }
    }
}
