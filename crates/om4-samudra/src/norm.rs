//! Instance norm without affine parameters, `(x − mean) / sqrt(var + eps)` per sample and channel
//! over the plane, with the biased variance, as PyTorch's `InstanceNorm2d`.
//!
//! On flex (float32) it is one operation of its own, forward and backward, each a few passes
//! over a plane per rayon task: the statistics in float64 (the mean, then the variance about it),
//! the normalized values written once; the backward from the saved output `y` and `σ`,
//! `dx = (g − mean(g) − y · mean(g·y)) / σ` (the exact derivative, ε included, as `σ` is the
//! same `sqrt(var + ε)`). Burn's tensor operations (what runs elsewhere, [`instance_norm_ops`])
//! take five allocations and passes forward and about twice that backward under autodiff.
//!
//! The network's blocks apply the capped GELU right after it: [`instance_norm_gelu`] is the two
//! as one operation that never writes the normalized tensor, equal to them bit for bit.
//!
//! Precision: at 1° a plane is 64 800 values, where one long float32 sum loses about 30 times
//! more than two short ones; the fused operation sums in float64, the tensor form row by row
//! and then over the rows. Both stay within 4 float32 ulps of 1 of a float64 computation
//! (`tests/model.rs`), the variance always about the mean, never `E[x²] − E[x]²`.

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
    if x.dtype() == DType::F32 {
        if let Ok(t) = x.clone().try_into_primitive::<Ad>() {
            return Tensor::from_primitive::<Ad>(tracked(t, epsilon));
        }
        if let Ok(t) = x.clone().try_into_primitive::<Flex>() {
            return Tensor::from_primitive::<Flex>(forward(&t, epsilon).0);
        }
    }
    instance_norm_ops(x, epsilon)
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

fn tracked(x: FloatTensor<Ad>, epsilon: f64) -> FloatTensor<Ad> {
    match InstanceNorm.prepare::<NoCheckpointing>([x.node()]).compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            let (y, sigma) = forward(&x.into_primitive(), epsilon);
            prep.finish((y.clone(), sigma), y)
        }
        OpsKind::UnTracked(prep) => prep.finish(forward(&x.into_primitive(), epsilon).0),
    }
}

/// The normalized tensor and each plane's `σ = sqrt(var + ε)`.
fn forward(x: &FlexTensor, epsilon: f64) -> (FlexTensor, Vec<f32>) {
    let x = x.to_contiguous();
    let [b, c, h, w] = x.shape().dims::<4>();
    let plane = h * w;
    let src: &[f32] = x.as_slice().expect("a contiguous float32 tensor");
    let mut out = FlexTensor::empty(x.shape(), DType::F32);
    let mut sigma = vec![0f32; b * c];
    if plane > 0 {
        let dst: &mut [f32] = out.storage_mut();
        dst.par_chunks_mut(plane).zip(src.par_chunks(plane)).zip(sigma.par_iter_mut()).for_each(|((y, x), s)| {
            *s = normalize(x, y, epsilon);
        });
    }
    (out, sigma)
}

/// One plane's mean and `σ = sqrt(var + ε)`, summed in float64, rounded to float32.
fn statistics(x: &[f32], epsilon: f64) -> (f32, f32) {
    let n = x.len() as f64;
    let mean = sum(x, x, |v, _| f64::from(v)) / n;
    let var = sum(x, x, |v, _| (f64::from(v) - mean).powi(2)) / n;
    (mean as f32, (var + epsilon).sqrt() as f32)
}

/// One plane: `y = (x − mean) / σ`; returns `σ`.
fn normalize(x: &[f32], y: &mut [f32], epsilon: f64) -> f32 {
    let (mean, sigma) = statistics(x, epsilon);
    standardize(x, mean, sigma, y);
    sigma
}

/// `y = (x − mean) / σ`, the one formula both operations normalize by.
#[inline]
fn standardize(x: &[f32], mean: f32, sigma: f32, y: &mut [f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = (x - mean) / sigma;
    }
}

/// One plane's data gradient from the output `y`, its gradient `g` and `σ`.
fn data_gradient(y: &[f32], g: &[f32], sigma: f32, dx: &mut [f32]) {
    let n = y.len() as f64;
    let mean_g = (sum(g, g, |g, _| f64::from(g)) / n) as f32;
    let mean_gy = (sum(g, y, |g, y| f64::from(g) * f64::from(y)) / n) as f32;
    for ((dx, &g), &y) in dx.iter_mut().zip(g).zip(y) {
        *dx = (g - mean_g - y * mean_gy) / sigma;
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

#[derive(Debug)]
struct InstanceNorm;

impl Backward<Flex, 1> for InstanceNorm {
    /// The output and each plane's `σ`.
    type State = (FlexTensor, Vec<f32>);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [node] = ops.parents;
        let grad = grads.consume::<Flex>(&ops.node);
        let Some(node) = node else { return };
        let (y, sigma) = ops.state;
        let out = per_plane(&y, &grad, &sigma, |y, g, &s, dx| data_gradient(y, g, s, dx));
        grads.register::<Flex>(node.id, out);
    }
}

/// Values per block of the fused operation's passes (the normalized values of a block live on
/// the stack between the two steps of a pass); a multiple of eight, so that its sums are
/// [`data_gradient`]'s bit for bit.
const BLOCK: usize = 1024;

/// `capped_gelu(instance_norm(x, epsilon))`: on flex (float32) one operation, forward and
/// backward, that never writes the normalized tensor (each pass recomputes a block of it from
/// `x` and the plane's statistics, by the same formula, so it equals the composition bit for
/// bit); elsewhere the composition.
pub fn instance_norm_gelu(x: Tensor<4>, epsilon: f64) -> Tensor<4> {
    if x.dtype() == DType::F32 {
        if let Ok(t) = x.clone().try_into_primitive::<Ad>() {
            return Tensor::from_primitive::<Ad>(fused_tracked(t, epsilon));
        }
        if let Ok(t) = x.clone().try_into_primitive::<Flex>() {
            return Tensor::from_primitive::<Flex>(fused_forward(&t, epsilon).0);
        }
    }
    crate::gelu::capped_gelu(instance_norm(x, epsilon))
}

fn fused_tracked(x: FloatTensor<Ad>, epsilon: f64) -> FloatTensor<Ad> {
    match InstanceNormGelu.prepare::<NoCheckpointing>([x.node()]).compute_bound().stateful() {
        OpsKind::Tracked(prep) => {
            let x = x.into_primitive();
            let (z, stats) = fused_forward(&x, epsilon);
            prep.finish((x, stats), z)
        }
        OpsKind::UnTracked(prep) => prep.finish(fused_forward(&x.into_primitive(), epsilon).0),
    }
}

/// The capped GELU of the normalized tensor, and each plane's `(mean, σ)`.
fn fused_forward(x: &FlexTensor, epsilon: f64) -> (FlexTensor, Vec<(f32, f32)>) {
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
            let (mean, sigma) = statistics(x, epsilon);
            *st = (mean, sigma);
            let mut y = [0f32; BLOCK];
            for (z, x) in z.chunks_mut(BLOCK).zip(x.chunks(BLOCK)) {
                let y = &mut y[..x.len()];
                standardize(x, mean, sigma, y);
                wide::gelu_capped(width, y, z);
            }
        });
    }
    (out, stats)
}

/// One plane's data gradient: `u = g · gelu'(y)` (the capped GELU's gradient at the normalized
/// `y`), then instance norm's `dx = (u − mean(u) − y · mean(u·y)) / σ`.
fn fused_data_gradient(x: &[f32], g: &[f32], (mean, sigma): (f32, f32), width: Width, dx: &mut [f32]) {
    let mut y = [0f32; BLOCK];
    let n = x.len() as f64;
    let (mut sum_u, mut sum_uy) = (Lanes::default(), Lanes::default());
    for ((u, x), g) in dx.chunks_mut(BLOCK).zip(x.chunks(BLOCK)).zip(g.chunks(BLOCK)) {
        let y = &mut y[..x.len()];
        standardize(x, mean, sigma, y);
        wide::gelu_capped_grad(width, y, g, u);
        sum_u.add(u, u, |u, _| f64::from(u));
        sum_uy.add(u, y, |u, y| f64::from(u) * f64::from(y));
    }
    let (mean_u, mean_uy) = ((sum_u.total() / n) as f32, (sum_uy.total() / n) as f32);
    for (dx, x) in dx.chunks_mut(BLOCK).zip(x.chunks(BLOCK)) {
        let y = &mut y[..x.len()];
        standardize(x, mean, sigma, y);
        for (dx, &y) in dx.iter_mut().zip(y.iter()) {
            *dx = (*dx - mean_u - y * mean_uy) / sigma;
        }
    }
}

#[derive(Debug)]
struct InstanceNormGelu;

impl Backward<Flex, 1> for InstanceNormGelu {
    /// The input and each plane's `(mean, σ)`.
    type State = (FlexTensor, Vec<(f32, f32)>);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [node] = ops.parents;
        let grad = grads.consume::<Flex>(&ops.node);
        let Some(node) = node else { return };
        let (x, stats) = ops.state;
        let width = Width::widest();
        let out = per_plane(&x, &grad, &stats, |x, g, &st, dx| fused_data_gradient(x, g, st, width, dx));
        grads.register::<Flex>(node.id, out);
    }
}

/// A backward pass plane by plane: `f(saved plane, its output gradient, its statistics, the input
/// gradient's plane)` for every plane of an NCHW float32 `saved` tensor and its gradient, in
/// parallel.
fn per_plane<S: Sync>(
    saved: &FlexTensor,
    grad: &FlexTensor,
    stats: &[S],
    f: impl Fn(&[f32], &[f32], &S, &mut [f32]) + Sync,
) -> FlexTensor {
    let (saved, grad) = (saved.to_contiguous(), grad.to_contiguous());
    let [_, _, h, w] = saved.shape().dims::<4>();
    let plane = h * w;
    let (ss, gs): (&[f32], &[f32]) =
        (saved.as_slice().expect("a contiguous float32 tensor"), grad.as_slice().expect("a contiguous float32 tensor"));
    let mut out = FlexTensor::empty(saved.shape(), DType::F32);
    if plane > 0 {
        let dst: &mut [f32] = out.storage_mut();
        dst.par_chunks_mut(plane)
            .zip(ss.par_chunks(plane).zip(gs.par_chunks(plane)))
            .zip(stats.par_iter())
            .for_each(|((dx, (s, g)), st)| f(s, g, st, dx));
    }
    out
}
