//! Samudra's unpadded, stride-1 convolutions, with weight gradients that run as large GEMMs.
//!
//! Burn's CPU backend (flex) computes a convolution's weight gradient as another convolution
//! whose kernel is the whole output plane: per input channel a GEMM only k² columns wide, after
//! single-threaded transposes of both operands. That was about 60 % of the tiny network's
//! training step at 2° (`om4-train step --profile`, docs/benchmarks.md). Here:
//! - a 1×1 convolution is a matrix product, `W · X` per sample, on every backend, so autodiff
//!   derives both of its gradients as matrix products;
//! - a k×k convolution on flex with autodiff is flex's own forward and data gradient with a
//!   weight gradient of k² GEMMs, one per kernel tap: `dW[:, :, i, j] = Σ_b G_b · X_b(i, j)ᵀ`,
//!   `G_b` the output gradient `(C_out, H·W)` and `X_b(i, j)` the input window of that tap
//!   `(C_in, H·W)` (`GemmConv` below);
//! - anywhere else (a GPU, or no autodiff) Burn's `conv2d`.
//!
//! The fast paths compute the same sums as Burn's in another order, so they agree with it to
//! float32 rounding, not bit for bit (`tests/conv.rs` holds them to a float64 reference).

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::ops::{FloatTensorOps, ModuleOps};
use burn::backend::tensor::FloatTensor;
use burn::backend::{Autodiff, Flex, TensorMetadata};
use burn::tensor::module::conv2d;
use burn::tensor::ops::{ConvOptions, PadMode};
use burn::tensor::{Shape, Slice, Tensor};

/// `conv2d(x, weight, bias)` with stride 1, no padding and dilation `dilation`: `x` is
/// `(B, C_in, H, W)`, `weight` `(C_out, C_in, k, k)`, the result `(B, C_out, H − d(k−1), W − d(k−1))`.
pub fn conv(x: Tensor<4>, weight: Tensor<4>, bias: Option<Tensor<1>>, dilation: usize) -> Tensor<4> {
    let [cout, cin, kh, kw] = weight.dims();
    if (kh, kw) == (1, 1) {
        return pointwise(x, weight.reshape([1, cout, cin]), bias);
    }
    let options = ConvOptions::new([1, 1], [0, 0], [dilation, dilation], 1);
    match bias {
        Some(bias) => match gemm_conv(&x, &weight, &bias, dilation) {
            Some(y) => y,
            None => conv2d(x, weight, Some(bias), options),
        },
        None => conv2d(x, weight, None, options),
    }
}

/// Whether [`conv`] computes the k×k weight gradient as GEMMs for tensors on `device`.
pub fn gemm_weight_gradient(device: &burn::tensor::Device) -> bool {
    let x = Tensor::<4>::zeros([1, 1, 3, 3], device);
    let w = Tensor::<4>::zeros([1, 1, 3, 3], device);
    let b = Tensor::<1>::zeros([1], device);
    gemm_conv(&x, &w, &b, 1).is_some()
}

/// A 1×1 convolution as `W · X` per sample: `(1, C_out, C_in) × (B, C_in, H·W)`.
fn pointwise(x: Tensor<4>, weight: Tensor<3>, bias: Option<Tensor<1>>) -> Tensor<4> {
    let [b, cin, h, w] = x.dims();
    let cout = weight.dims()[1];
    let y = weight.expand([b, cout, cin]).matmul(x.reshape([b, cin, h * w]));
    let y = match bias {
        Some(bias) => y + bias.reshape([1, cout, 1]),
        None => y,
    };
    y.reshape([b, cout, h, w])
}

type Ad = Autodiff<Flex, NoCheckpointing>;

/// The k×k convolution as an autodiff operation of its own, when all three tensors are flex
/// tensors under autodiff (float32); `None` otherwise.
fn gemm_conv(x: &Tensor<4>, weight: &Tensor<4>, bias: &Tensor<1>, dilation: usize) -> Option<Tensor<4>> {
    let x = x.clone().try_into_primitive::<Ad>().ok()?;
    let weight = weight.clone().try_into_primitive::<Ad>().ok()?;
    let bias = bias.clone().try_into_primitive::<Ad>().ok()?;
    let f32 = burn::tensor::DType::F32;
    if x.dtype() != f32 || weight.dtype() != f32 || bias.dtype() != f32 {
        return None;
    }
    let options = ConvOptions::new([1, 1], [0, 0], [dilation, dilation], 1);
    let prepared =
        GemmConv.prepare::<NoCheckpointing>([x.node(), weight.node(), bias.node()]).compute_bound().stateful();
    let (x, weight, bias) = (x.into_primitive(), weight.into_primitive(), bias.into_primitive());
    let out = match prepared {
        OpsKind::Tracked(prep) => {
            let y = Flex::conv2d(x.clone(), weight.clone(), Some(bias), options);
            prep.finish((x, weight, dilation), y)
        }
        OpsKind::UnTracked(prep) => prep.finish(Flex::conv2d(x, weight, Some(bias), options)),
    };
    Some(Tensor::from_primitive::<Ad>(out))
}

/// The backward of [`gemm_conv`]: flex's data and bias gradients, the weight gradient as GEMMs.
#[derive(Debug)]
struct GemmConv;

impl Backward<Flex, 3> for GemmConv {
    /// The input, the weight and the dilation.
    type State = (FloatTensor<Flex>, FloatTensor<Flex>, usize);

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [node_x, node_weight, node_bias] = ops.parents;
        let grad = grads.consume::<Flex>(&ops.node);
        let (x, weight, dilation) = ops.state;
        let options = ConvOptions::new([1, 1], [0, 0], [dilation, dilation], 1);
        if let Some(node) = node_bias {
            let b = Flex::float_sum_dim(Flex::float_sum_dim(Flex::float_sum_dim(grad.clone(), 3), 2), 0);
            let cout = weight.shape().dims::<4>()[0];
            grads.register::<Flex>(node.id, Flex::float_reshape(b, Shape::new([cout])));
        }
        if let Some(node) = node_weight {
            let k = weight.shape().dims::<4>()[2];
            grads.register::<Flex>(node.id, weight_gradient(x.clone(), grad.clone(), k, dilation));
        }
        if let Some(node) = node_x {
            grads.register::<Flex>(node.id, Flex::conv2d_x_backward(x, weight, grad, options));
        }
    }
}

/// `dW[o, i, ky, kx] = Σ_{b, y, x} G[b, o, y, x] · X[b, i, y + ky·d, x + kx·d]`: for each of the
/// k² taps one batched GEMM `(B, C_out, n) × (B, n, C_in)`, summed over the batch, on views.
///
/// `G` is widened with zero columns to the input's width `W_in`, so that a tap's window of the
/// input, flattened per channel, is one run of `n = H·W_in − (k−1)·d` values starting at
/// `ky·d·W_in + kx·d`: a strided view of the input (no copy), and the columns that wrap into the
/// next row meet zeros of `G`.
pub(crate) fn weight_gradient(x: FloatTensor<Flex>, grad: FloatTensor<Flex>, k: usize, d: usize) -> FloatTensor<Flex> {
    let [b, cin, hp, wp] = x.shape().dims::<4>();
    let [_, cout, h, w] = grad.shape().dims::<4>();
    let span = (k - 1) * d;
    let n = h * wp - span;
    let wide = Flex::float_pad(grad, &[(0, 0), (0, 0), (0, 0), (0, wp - w)], PadMode::Constant(0.0));
    let g = Flex::float_reshape(wide, Shape::new([b, cout, h * wp]));
    let g = Flex::float_slice(g, &[Slice::from(0..b), Slice::from(0..cout), Slice::from(0..n)]);
    let planes = Flex::float_reshape(x, Shape::new([b, cin, hp * wp]));
    let taps = (0..k * k)
        .map(|tap| {
            let start = tap / k * d * wp + tap % k * d;
            let ranges = [Slice::from(0..b), Slice::from(0..cin), Slice::from(start..start + n)];
            let window = Flex::float_slice(planes.clone(), &ranges);
            let per_sample = Flex::float_matmul(g.clone(), Flex::float_swap_dims(window, 1, 2));
            Flex::float_reshape(Flex::float_sum_dim(per_sample, 0), Shape::new([cout, cin, 1]))
        })
        .collect();
    Flex::float_reshape(Flex::float_cat(taps, 2), Shape::new([cout, cin, k, k]))
}
