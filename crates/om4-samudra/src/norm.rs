//! Instance norm without affine parameters, `(x − mean) / sqrt(var + eps)` per sample and channel
//! over the plane, with the biased variance, as PyTorch's `InstanceNorm2d`; and instance norm
//! followed by Samudra's capped GELU, as the network's blocks apply them.
//!
//! On flex (float32) each is one operation of its own, forward and backward, the same passes
//! with or without the GELU, a plane per rayon task: the statistics in float64 (the mean, then
//! the variance about it, and `1/σ = 1/sqrt(var + ε)` rounded once to float32); then block by
//! block (a few thousand values on the stack) the normalized values `y = (x − mean) · 1/σ` (a
//! multiplication, as PyTorch's CPU kernel normalizes: a division costs several on every vector
//! width) and, with the GELU, its value, written once. The backward keeps the input and each
//! plane's statistics, recomputes `y` by the same formula (the same bits), takes
//! `u = g · gelu'(y)` with the GELU (`u = g` without) and gives
//! `dx = (u − mean(u) − y · mean(u·y)) · 1/σ` (the exact derivative, ε included, as `σ` is the
//! same `sqrt(var + ε)`). So the normalized tensor is never written with the GELU, the two as one
//! operation equal the two in turn bit for bit, and the GELU's cost in the step is the one
//! operation less the other at the same shape (`om4-train step --profile`). Burn's tensor
//! operations (what runs elsewhere, [`instance_norm_ops`]) take five allocations and passes
//! forward and about twice that backward under autodiff.
//!
//! Precision: at 1° a plane is 64 800 values, where one long float32 sum loses about 30 times
//! more than two short ones; the fused operation sums in float64, the tensor form row by row
//! and then over the rows. Both stay within 4 float32 ulps of 1 of a float64 computation
//! (`tests/model.rs`), the variance always about the mean, never `E[x²] − E[x]²`.
//!
//! Batch norm's training statistics ([`batch_norm_stats`]) are Burn's operation on flex and, on
//! every other backend, tensor operations that reduce rows no longer than a grid's width or
//! height: Burn's own reduces each channel's `B·H·W` values as one row, and on cubecl devices
//! where long rows come out short (lavapipe, docs/gpu.md: rows past about 65 533 values) that
//! gives v1 and v2 at 1° with batch 2+ wrong batch statistics and gradients.

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, Flex, TensorMetadata};
use burn::tensor::{DType, Tensor};
use rayon::prelude::*;

use crate::wide::{self, Width};

type Ad = Autodiff<Flex, NoCheckpointing>;

/// Instance norm of `x` `(B, C, H, W)` (see the module documentation).
pub fn instance_norm(x: Tensor<4>, epsilon: f64) -> Tensor<4> {
    on_flex(&x, epsilon, Activation::None).unwrap_or_else(|| instance_norm_ops(x, epsilon))
}

/// Instance norm as Burn's tensor operations, on any backend: both statistics reduced row by row
/// and then over the rows (a mean of row means; every row has the same length, so it is the
/// plane's mean).
pub fn instance_norm_ops(x: Tensor<4>, epsilon: f64) -> Tensor<4> {
    let mean = x.clone().mean_dim(3).mean_dim(2);
    let centered = x - mean;
    let var = centered.clone().powi_scalar(2).mean_dim(3).mean_dim(2);
    centered / (var + epsilon).sqrt()
}

/// Batch norm of `x` `(B, C, H, W)` in training mode: `(output, mean, variance)`, the output
/// `γ · (x − mean) / sqrt(var + ε) + β` with each channel's batch mean and biased variance, as
/// Burn's [`batch_norm_train`](burn::tensor::module::batch_norm_train) computes them. On flex
/// that operation itself; elsewhere [`batch_norm_ops`].
pub fn batch_norm_stats(
    x: Tensor<4>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    epsilon: f64,
) -> (Tensor<4>, Tensor<1>, Tensor<1>) {
    if x.device().inner() == burn::tensor::Device::flex() {
        let r = burn::tensor::module::batch_norm_train(x, gamma, beta, epsilon);
        (r.output, r.mean, r.variance)
    } else {
        batch_norm_ops(x, gamma, beta, epsilon)
    }
}

/// [`batch_norm_stats`] as tensor operations whose every reduction is along a row of at most
/// `max(B, H, W)` values (and, backward, `H·W`): the statistics by means along W, then H, then
/// the batch (every row of a step the same length, so it is the mean of all `B·H·W` values).
pub fn batch_norm_ops(
    x: Tensor<4>,
    gamma: Tensor<1>,
    beta: Tensor<1>,
    epsilon: f64,
) -> (Tensor<4>, Tensor<1>, Tensor<1>) {
    let c = x.dims()[1];
    let mean = x.clone().mean_dim(3).mean_dim(2).mean_dim(0);
    let centered = x - mean.clone();
    let var = centered.clone().powi_scalar(2).mean_dim(3).mean_dim(2).mean_dim(0);
    let scale = gamma.reshape([1, c, 1, 1]) / (var.clone() + epsilon).sqrt();
    let output = centered * scale + beta.reshape([1, c, 1, 1]);
    (output, mean.reshape([c]), var.reshape([c]))
}

/// `capped_gelu(instance_norm(x, epsilon))`: on flex (float32) one operation, forward and
/// backward, that never writes the normalized tensor and equals the composition bit for bit (see
/// the module documentation); elsewhere the composition.
pub fn instance_norm_gelu(x: Tensor<4>, epsilon: f64) -> Tensor<4> {
    on_flex(&x, epsilon, Activation::CappedGelu).unwrap_or_else(|| crate::gelu::capped_gelu(instance_norm(x, epsilon)))
}

/// What the operation applies to the normalized values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Activation {
    None,
    CappedGelu,
}

/// The operation on flex in float32, with or without autodiff; `None` for any other tensor.
fn on_flex(x: &Tensor<4>, epsilon: f64, act: Activation) -> Option<Tensor<4>> {
    if x.dtype() == DType::F32 {
        if let Ok(t) = x.clone().try_into_primitive::<Ad>() {
            return Some(Tensor::from_primitive::<Ad>(tracked(t, epsilon, act)));
        }
        if let Ok(t) = x.clone().try_into_primitive::<Flex>() {
            return Some(Tensor::from_primitive::<Flex>(forward(&t, epsilon, act).0));
        }
    }
    None
}

fn tracked(x: FloatTensor<Ad>, epsilon: f64, act: Activation) -> FloatTensor<Ad> {
    match InstanceNorm(act).prepare::<NoCheckpointing>([x.node()]).compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            let x = x.into_primitive();
            let (z, stats) = forward(&x, epsilon, act);
            prep.finish((x, stats), z)
        }
        OpsKind::UnTracked(prep) => prep.finish(forward(&x.into_primitive(), epsilon, act).0),
    }
}

/// Values per block of a pass (the normalized values of a block live on the stack between its
/// two steps); a multiple of eight, so that the sums over blocks are those over the plane bit for
/// bit ([`Lanes`]).
const BLOCK: usize = 1024;

/// The output, and each plane's `(mean, 1/σ)`.
fn forward(x: &FlexTensor, epsilon: f64, act: Activation) -> (FlexTensor, Vec<(f32, f32)>) {
    let x = x.to_contiguous();
    let [b, c, h, w] = x.shape().dims::<4>();
    let plane = h * w;
    let src: &[f32] = x.as_slice().expect("a contiguous float32 tensor");
    let mut out = FlexTensor::empty(x.shape(), DType::F32);
    let mut stats = vec![(0f32, 0f32); b * c];
    if plane > 0 {
        let width = Width::widest();
        let dst: &mut [f32] = out.storage_mut();
        dst.par_chunks_mut(plane).zip(src.par_chunks(plane)).zip(stats.par_iter_mut()).for_each(|((z, x), st)| {
            let (mean, inv_sigma) = statistics(x, epsilon);
            *st = (mean, inv_sigma);
            match act {
                Activation::None => standardize(x, mean, inv_sigma, z),
                Activation::CappedGelu => {
                    let mut y = [0f32; BLOCK];
                    for (z, x) in z.chunks_mut(BLOCK).zip(x.chunks(BLOCK)) {
                        let y = &mut y[..x.len()];
                        standardize(x, mean, inv_sigma, y);
                        wide::gelu_capped(width, y, z);
                    }
                }
            }
        });
    }
    (out, stats)
}

/// One plane's mean and `1/σ = 1/sqrt(var + ε)`, computed in float64, each rounded once to
/// float32.
fn statistics(x: &[f32], epsilon: f64) -> (f32, f32) {
    let n = x.len() as f64;
    let mean = sum(x, x, |v, _| f64::from(v)) / n;
    let var = sum(x, x, |v, _| (f64::from(v) - mean).powi(2)) / n;
    (mean as f32, (1.0 / (var + epsilon).sqrt()) as f32)
}

/// `y = (x − mean) · 1/σ`, the one formula every pass normalizes by.
#[inline]
fn standardize(x: &[f32], mean: f32, inv_sigma: f32, y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = (x - mean) * inv_sigma;
    }
}

/// One plane's data gradient from its input `x`, output gradient `g` and `(mean, 1/σ)`:
/// `u = g · gelu'(y)` with the GELU (written into `dx` on the way), `u = g` without, then
/// `dx = (u − mean(u) − y · mean(u·y)) · 1/σ`.
fn data_gradient(x: &[f32], g: &[f32], (mean, inv_sigma): (f32, f32), act: Activation, width: Width, dx: &mut [f32]) {
    let mut y = [0f32; BLOCK];
    let n = x.len() as f64;
    let (mut sum_u, mut sum_uy) = (Lanes::default(), Lanes::default());
    for ((dx, x), g) in dx.chunks_mut(BLOCK).zip(x.chunks(BLOCK)).zip(g.chunks(BLOCK)) {
        let y = &mut y[..x.len()];
        standardize(x, mean, inv_sigma, y);
        let u: &[f32] = match act {
            Activation::None => g,
            Activation::CappedGelu => {
                wide::gelu_capped_grad(width, y, g, dx);
                dx
            }
        };
        sum_u.add(u, u, |u, _| f64::from(u));
        sum_uy.add(u, y, |u, y| f64::from(u) * f64::from(y));
    }
    let (mean_u, mean_uy) = ((sum_u.total() / n) as f32, (sum_uy.total() / n) as f32);
    for ((dx, x), g) in dx.chunks_mut(BLOCK).zip(x.chunks(BLOCK)).zip(g.chunks(BLOCK)) {
        let y = &mut y[..x.len()];
        standardize(x, mean, inv_sigma, y);
        match act {
            Activation::None => {
                for ((dx, &u), &y) in dx.iter_mut().zip(g).zip(y.iter()) {
                    *dx = (u - mean_u - y * mean_uy) * inv_sigma;
                }
            }
            Activation::CappedGelu => {
                for (dx, &y) in dx.iter_mut().zip(y.iter()) {
                    *dx = (*dx - mean_u - y * mean_uy) * inv_sigma;
                }
            }
        }
    }
}

/// `Σ f(a[i], b[i])` in float64 (see [`Lanes`]).
fn sum(a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f64) -> f64 {
    let mut lanes = Lanes::default();
    lanes.add(a, b, f);
    lanes.total()
}

/// A float64 sum in eight running sums, one per lane of a fixed order, so that the loop
/// vectorizes where a single running sum would wait on each addition. Values may come in blocks:
/// when every block but the last is a multiple of eight long, the total is the same, bit for
/// bit, as one [`Lanes::add`] of them all.
#[derive(Default)]
struct Lanes {
    lanes: [f64; 8],
    rest: f64,
}

impl Lanes {
    fn add(&mut self, a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f64) {
        let head = a.len() / 8 * 8;
        for (a, b) in a[..head].chunks_exact(8).zip(b[..head].chunks_exact(8)) {
            for k in 0..8 {
                self.lanes[k] += f(a[k], b[k]);
            }
        }
        for (&a, &b) in a[head..].iter().zip(&b[head..]) {
            self.rest += f(a, b);
        }
    }

    fn total(&self) -> f64 {
        self.lanes.iter().sum::<f64>() + self.rest
    }
}

/// The autodiff operation, with or without the GELU.
#[derive(Debug)]
struct InstanceNorm(Activation);

impl Backward<Flex, 1> for InstanceNorm {
    /// The input and each plane's `(mean, 1/σ)`.
    type State = (FlexTensor, Vec<(f32, f32)>);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [node] = ops.parents;
        let grad = grads.consume::<Flex>(&ops.node);
        let Some(node) = node else { return };
        let (x, stats) = ops.state;
        let (x, grad) = (x.to_contiguous(), grad.to_contiguous());
        let [_, _, h, w] = x.shape().dims::<4>();
        let plane = h * w;
        let (xs, gs): (&[f32], &[f32]) =
            (x.as_slice().expect("a contiguous float32 tensor"), grad.as_slice().expect("a contiguous float32 tensor"));
        let mut out = FlexTensor::empty(x.shape(), DType::F32);
        if plane > 0 {
            let (act, width) = (self.0, Width::widest());
            let dst: &mut [f32] = out.storage_mut();
            dst.par_chunks_mut(plane)
                .zip(xs.par_chunks(plane).zip(gs.par_chunks(plane)))
                .zip(stats.par_iter())
                .for_each(|((dx, (x, g)), &st)| data_gradient(x, g, st, act, width, dx));
        }
        grads.register::<Flex>(node.id, out);
    }
}
