//! Samudra's unpadded, stride-1 convolutions, each pass on the CPU by the method that measures
//! fastest on its shape.
//!
//! Burn's CPU backend (flex) computes a k×k convolution by im2col (an NHWC copy of the input,
//! then a k²-times larger matrix) and a GEMM, its data gradient as a transposed convolution, and
//! its weight gradient as another convolution whose kernel is the whole output plane: per input
//! channel a GEMM only k² columns wide, after single-threaded transposes of both operands (that
//! alone was about 60 % of the tiny network's training step at 2°, docs/benchmarks.md). Here:
//! - a 1×1 convolution is a matrix product, `W · X` per sample, on every backend, so autodiff
//!   derives both of its gradients as matrix products;
//! - a k×k convolution on flex (float32, with or without autodiff) runs its three passes by om4's
//!   own kernels, chosen per shape ([`Plan`]): a 3×3 one with enough channels on a large enough
//!   grid by Winograd's F(2×2, 3×3), 16 GEMMs over transformed tiles with 2.25 times fewer
//!   multiply-adds ([`crate::winograd`]); otherwise the data gradient on a small grid as GEMMs
//!   over the output's positions and a scatter-add ([`crate::scatter`]); with few channels, the
//!   forward and the data gradient as a direct correlation in SIMD registers ([`crate::direct`]);
//!   the remaining forwards, and the weight gradients where a side has few channels, as im2col in
//!   cache-sized tiles, one GEMM per tile ([`crate::tiles`]); the remaining gradients as one GEMM
//!   per kernel tap on views of the planes ([`crate::taps`]);
//! - anywhere else (a GPU) Burn's `conv2d`.
//!
//! The fast paths compute the same sums as Burn's in another order, so they agree with it to
//! float32 rounding, not bit for bit (`tests/conv.rs` holds them to a float64 reference).

use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::NoCheckpointing;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::ops::FloatTensorOps;
use burn::backend::{Autodiff, Flex, TensorMetadata};
use burn::tensor::module::conv2d;
use burn::tensor::ops::ConvOptions;
use burn::tensor::{Shape, Tensor};

use crate::taps::{self, Taps};
use crate::{direct, scatter, tiles, winograd};

/// `conv2d(x, weight, bias)` with stride 1, no padding and dilation `dilation`: `x` is
/// `(B, C_in, H, W)`, `weight` `(C_out, C_in, k, k)`, the result `(B, C_out, H − d(k−1), W − d(k−1))`.
pub fn conv(x: Tensor<4>, weight: Tensor<4>, bias: Option<Tensor<1>>, dilation: usize) -> Tensor<4> {
    conv_with(x, weight, bias, dilation, ConvPlan::Auto)
}

/// [`conv`], a k×k convolution on flex run by `plan` (elsewhere, and for 1×1 kernels, `plan`
/// changes nothing).
pub fn conv_with(
    x: Tensor<4>,
    weight: Tensor<4>,
    bias: Option<Tensor<1>>,
    dilation: usize,
    plan: ConvPlan,
) -> Tensor<4> {
    let [cout, cin, kh, kw] = weight.dims();
    if (kh, kw) == (1, 1) {
        return pointwise(x, weight.reshape([1, cout, cin]), bias);
    }
    let options = ConvOptions::new([1, 1], [0, 0], [dilation, dilation], 1);
    match bias {
        Some(bias) => match on_flex(&x, &weight, &bias, dilation, plan) {
            Some(y) => y,
            None => conv2d(x, weight, Some(bias), options),
        },
        None => conv2d(x, weight, None, options),
    }
}

/// How a k×k convolution on flex runs its three passes. [`conv`] takes [`ConvPlan::Auto`]; the
/// others force one way on every shape, for tests and benchmarks (`om4-train step --profile
/// --conv-plan`). Parsed from `auto`, `winograd`, `tiles`, `taps`, `direct`, `scatter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConvPlan {
    /// Per shape, whichever measured fastest (docs/benchmarks.md).
    #[default]
    Auto,
    /// Winograd's F(2×2, 3×3) for all three passes where the kernel is 3×3; other kernels as `Auto`.
    Winograd,
    /// im2col in cache-sized tiles for all three passes.
    Tiles,
    /// The forward in tiles, both gradients as one GEMM per kernel tap.
    Taps,
    /// The forward and the data gradient as a direct correlation, the weight gradient as `Auto`.
    Direct,
    /// The data gradient as GEMMs and a scatter-add, the forward in tiles, the weight gradient as
    /// `Auto`.
    Scatter,
}

impl std::str::FromStr for ConvPlan {
    type Err = String;

    fn from_str(s: &str) -> Result<ConvPlan, String> {
        match s {
            "auto" => Ok(ConvPlan::Auto),
            "winograd" => Ok(ConvPlan::Winograd),
            "tiles" => Ok(ConvPlan::Tiles),
            "taps" => Ok(ConvPlan::Taps),
            "direct" => Ok(ConvPlan::Direct),
            "scatter" => Ok(ConvPlan::Scatter),
            other => Err(format!("no convolution plan {other:?}: auto, winograd, tiles, taps, direct or scatter")),
        }
    }
}

/// Whether [`conv`] runs a k×k convolution (and, under autodiff, its gradients) by om4's own kernels
/// for tensors on `device`.
pub fn own_kernels(device: &burn::tensor::Device) -> bool {
    let x = Tensor::<4>::zeros([1, 1, 3, 3], device);
    let w = Tensor::<4>::zeros([1, 1, 3, 3], device);
    let b = Tensor::<1>::zeros([1], device);
    on_flex(&x, &w, &b, 1, ConvPlan::Auto).is_some()
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

/// The k×k convolution by om4's kernels when all three tensors are float32 flex tensors (an
/// autodiff operation of its own under autodiff); `None` otherwise.
fn on_flex(x: &Tensor<4>, weight: &Tensor<4>, bias: &Tensor<1>, dilation: usize, plan: ConvPlan) -> Option<Tensor<4>> {
    if [x.dtype(), weight.dtype(), bias.dtype()].iter().any(|&t| t != burn::tensor::DType::F32) {
        return None;
    }
    if let (Ok(x), Ok(weight), Ok(bias)) = (
        x.clone().try_into_primitive::<Ad>(),
        weight.clone().try_into_primitive::<Ad>(),
        bias.clone().try_into_primitive::<Ad>(),
    ) {
        let prepared =
            FlexConv.prepare::<NoCheckpointing>([x.node(), weight.node(), bias.node()]).compute_bound().stateful();
        let (x, weight, bias) = (x.into_primitive(), weight.into_primitive(), bias.into_primitive());
        let s = taps(&x, &weight, dilation);
        let plan = Plan::of(&s, plan);
        let out = match prepared {
            OpsKind::Tracked(prep) => {
                let y = forward(&x, &weight, &bias, &s, plan);
                prep.finish((x, weight, s, plan), y)
            }
            OpsKind::UnTracked(prep) => prep.finish(forward(&x, &weight, &bias, &s, plan)),
        };
        return Some(Tensor::from_primitive::<Ad>(out));
    }
    let x = x.clone().try_into_primitive::<Flex>().ok()?;
    let weight = weight.clone().try_into_primitive::<Flex>().ok()?;
    let bias = bias.clone().try_into_primitive::<Flex>().ok()?;
    let s = taps(&x, &weight, dilation);
    Some(Tensor::from_primitive::<Flex>(forward(&x, &weight, &bias, &s, Plan::of(&s, plan))))
}

/// The shapes of a convolution of `x` by `weight`.
fn taps(x: &FlexTensor, weight: &FlexTensor, d: usize) -> Taps {
    let [b, cin, hp, wp] = x.shape().dims::<4>();
    let [cout, _, k, _] = weight.shape().dims::<4>();
    Taps { b, cin, cout, k, d, hp, wp }
}

/// How the passes of a k×k convolution run on flex, chosen per shape (docs/benchmarks.md has
/// the measurements).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Plan {
    /// Winograd's F(2×2, 3×3), all three passes: 3×3 kernels with many channels on large grids.
    Winograd,
    /// Each pass its own way.
    Split { forward: Way, data: Way, weight: Way },
}

/// How one pass runs outside Winograd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    /// A direct correlation in registers ([`crate::direct`]; the forward and the data gradient).
    Direct,
    /// im2col in cache-sized tiles ([`crate::tiles`]).
    Tiles,
    /// One GEMM per kernel tap ([`crate::taps`]; the gradients).
    Taps,
    /// GEMMs over the output's positions and a scatter-add ([`crate::scatter`]; the data gradient).
    Scatter,
}

impl Plan {
    fn of(s: &Taps, plan: ConvPlan) -> Plan {
        let weight = if tiles::pays(s) { Way::Tiles } else { Way::Taps };
        match plan {
            ConvPlan::Winograd if s.k == 3 => Plan::Winograd,
            ConvPlan::Tiles => Plan::Split { forward: Way::Tiles, data: Way::Tiles, weight: Way::Tiles },
            ConvPlan::Taps => Plan::Split { forward: Way::Tiles, data: Way::Taps, weight: Way::Taps },
            ConvPlan::Direct => Plan::Split { forward: Way::Direct, data: Way::Direct, weight },
            ConvPlan::Scatter => Plan::Split { forward: Way::Tiles, data: Way::Scatter, weight },
            ConvPlan::Auto | ConvPlan::Winograd if winograd::pays(s) => Plan::Winograd,
            ConvPlan::Auto | ConvPlan::Winograd => Plan::Split {
                forward: if direct::pays(s) { Way::Direct } else { Way::Tiles },
                data: if scatter::pays(s) {
                    Way::Scatter
                } else if direct::pays_data_gradient(s) {
                    Way::Direct
                } else if tiles::pays_data_gradient(s) {
                    Way::Tiles
                } else {
                    Way::Taps
                },
                weight,
            },
        }
    }
}

fn forward(x: &FlexTensor, weight: &FlexTensor, bias: &FlexTensor, s: &Taps, plan: Plan) -> FlexTensor {
    let (h, w) = s.out();
    let (x, weight, bias) = (f32s(x), f32s(weight), f32s(bias));
    let y = match plan {
        Plan::Winograd => winograd::forward(&x, &weight, &bias, s),
        Plan::Split { forward: Way::Direct, .. } => direct::forward(&x, &weight, &bias, s),
        Plan::Split { .. } => tiles::forward(&x, &weight, &bias, s),
    };
    tensor(y, [s.b, s.cout, h, w])
}

/// A float32 tensor's values in order (a copy only if it is not contiguous).
fn f32s(t: &FlexTensor) -> std::borrow::Cow<'_, [f32]> {
    match t.as_slice::<f32>() {
        Some(v) => std::borrow::Cow::Borrowed(v),
        None => {
            std::borrow::Cow::Owned(t.to_contiguous().as_slice::<f32>().expect("a contiguous float32 tensor").to_vec())
        }
    }
}

fn tensor<const D: usize>(values: Vec<f32>, shape: [usize; D]) -> FlexTensor {
    FlexTensor::from_data(burn::tensor::TensorData::new(values, shape))
}

/// The backward of [`on_flex`]: its gradients by the same [`Plan`] as its forward.
#[derive(Debug)]
struct FlexConv;

impl Backward<Flex, 3> for FlexConv {
    /// The input, the weight, the shapes and the plan of the forward.
    type State = (FlexTensor, FlexTensor, Taps, Plan);

    fn backward(self, ops: Ops<Self::State, 3>, grads: &mut Gradients, _checkpointer: &mut Checkpointer) {
        let [node_x, node_weight, node_bias] = ops.parents;
        let grad = grads.consume::<Flex>(&ops.node);
        let (x, weight, s, plan) = ops.state;
        let g = f32s(&grad);
        if let Some(node) = node_bias {
            let b = Flex::float_sum_dim(Flex::float_sum_dim(Flex::float_sum_dim(grad.clone(), 3), 2), 0);
            grads.register::<Flex>(node.id, Flex::float_reshape(b, Shape::new([s.cout])));
        }
        if let Some(node) = node_weight {
            let x = f32s(&x);
            let dw = match plan {
                Plan::Winograd => winograd::weight_gradient(&x, &g, &s),
                Plan::Split { weight: Way::Tiles, .. } => tiles::weight_gradient(&x, &g, &s),
                Plan::Split { .. } => taps::weight_gradient(&x, &g, &s),
            };
            grads.register::<Flex>(node.id, tensor(dw, [s.cout, s.cin, s.k, s.k]));
        }
        if let Some(node) = node_x {
            let weight = f32s(&weight);
            let dx = match plan {
                Plan::Winograd => winograd::data_gradient(&g, &weight, &s),
                Plan::Split { data: Way::Direct, .. } => direct::data_gradient(&g, &weight, &s),
                Plan::Split { data: Way::Scatter, .. } => scatter::data_gradient(&g, &weight, &s),
                Plan::Split { data: Way::Tiles, .. } => tiles::data_gradient(&g, &weight, &s),
                Plan::Split { .. } => taps::data_gradient(&g, &weight, &s),
            };
            grads.register::<Flex>(node.id, tensor(dx, [s.b, s.cin, s.hp, s.wp]));
        }
    }
}
