//! Samudra: a dilated ConvNeXt U-Net with circular longitude padding.
//!
//! Blocks: `skip + body`, body = pad → k×k conv (a → a·u, dilation d) → norm → CappedGELU → pad →
//! k×k conv (a·u → a·u, d) → norm → CappedGELU → 1×1 conv (a·u → b); skip is the identity or a
//! 1×1 conv when widths differ. Before every k×k conv the block pads `d` cells: circular along
//! longitude (x), zeros along latitude (y). Four down blocks with dilations [1, 2, 4, 8], each
//! followed by AvgPool2d(2); a middle block; three up blocks (dilations 8, 4, 2); after every ×2
//! upsample the skip is added;
//! a final block (dilation 2); a 3×3 head on a circular pad; land set to 0. The upsampled tensor
//! is zero-padded to the skip's size split evenly (left/right, top/bottom) as upstream does.

use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::{BatchNorm, BatchNormConfig, InstanceNorm, InstanceNormConfig, PaddingConfig2d};
use burn::tensor::module::avg_pool2d;
use burn::tensor::ops::AvgPoolOptions;

pub use crate::conv::{ConvPlan, conv, conv_with, own_kernels};
pub use crate::erf::{erf, gelu_capped, gelu_capped_grad};
pub use crate::gelu::{capped_gelu, capped_gelu_ops};
pub use crate::norm::{batch_norm_ops, batch_norm_stats, instance_norm, instance_norm_gelu, instance_norm_ops};
pub use crate::pad::{pad_lonlat, pad_lonlat_ops, wrap_longitude};
use burn::tensor::{Bool, Device, FloatDType, Tensor};
use serde::{Deserialize, Serialize};

/// Normalization inside blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NormKind {
    /// `BatchNorm2d` (affine).
    Batch,
    /// `InstanceNorm2d` without affine parameters.
    Instance,
    /// No normalization.
    None,
}

/// Upsampling between up blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UpsampleKind {
    /// Plain bilinear ×2 (`v1`).
    Bilinear,
    /// Circular pad of one column, bilinear ×2, crop two columns each side (`v2`).
    ZonallyPeriodic,
}

/// Architecture settings (Samudra's `model` section).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SamudraConfig {
    /// Widths of the four levels (`ch_width`).
    pub ch_width: [usize; 4],
    /// Dilations of the four levels.
    pub dilation: [usize; 4],
    /// Expansion of the block body (`upscale_factor`), applied to the block's input width.
    pub upscale: usize,
    /// Kernel size of the block convolutions.
    pub kernel_size: usize,
    /// Normalization.
    pub norm: NormKind,
    /// Upsampling.
    pub upsample: UpsampleKind,
    /// The U-Net in bfloat16, the head in float32 (upstream's `use_bfloat16`, on in
    /// `samudra_om4_v2_highres`; off by default): see [`Samudra::forward`].
    #[serde(default)]
    pub use_bfloat16: bool,
}

impl SamudraConfig {
    /// `samudra_om4_v1`: widths [200, 250, 300, 400], expansion 4, batch norm, bilinear upsampling.
    pub fn v1() -> Self {
        Self {
            ch_width: [200, 250, 300, 400],
            dilation: [1, 2, 4, 8],
            upscale: 4,
            kernel_size: 3,
            norm: NormKind::Batch,
            upsample: UpsampleKind::Bilinear,
            use_bfloat16: false,
        }
    }
    /// `samudra_om4_v2`: widths [280, 380, 480, 520], expansion 2, batch norm, periodic upsampling.
    pub fn v2() -> Self {
        Self { ch_width: [280, 380, 480, 520], upscale: 2, upsample: UpsampleKind::ZonallyPeriodic, ..Self::v1() }
    }
    /// `samudra_om4_v2_highres`: as `v2` with instance norm.
    pub fn v2_highres() -> Self {
        Self { norm: NormKind::Instance, ..Self::v2() }
    }
    /// A small network that trains on a CPU in minutes.
    pub fn tiny() -> Self {
        Self { ch_width: [16, 24, 32, 48], upscale: 2, norm: NormKind::Instance, ..Self::v2() }
    }
    /// A configuration by name: `v1`, `v2`, `v2_highres`, `tiny`.
    pub fn named(name: &str) -> Option<Self> {
        match name {
            "v1" => Some(Self::v1()),
            "v2" => Some(Self::v2()),
            "v2_highres" => Some(Self::v2_highres()),
            "tiny" => Some(Self::tiny()),
            _ => None,
        }
    }

    /// The network for `inputs` and `outputs` channels with weights drawn from `seed` on the host
    /// (flex, autodiff on), every parameter drawn: [`fork`](burn::module::Module::fork) it to the
    /// device it trains on. Each backend has its own generator, so drawing on the host is what
    /// gives every backend the same network. Burn's seed is global to the process and parameters
    /// draw their values when first read, so draws made at once (thread ranks, tests) are made
    /// one at a time here.
    pub fn init_seeded(&self, inputs: usize, outputs: usize, seed: u64) -> Samudra {
        static SEEDED_INIT: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one_at_a_time = SEEDED_INIT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let host = Device::flex().autodiff();
        host.seed(seed);
        let model = self.init(inputs, outputs, &host);
        let _drawn = burn::module::Module::valid(&model); // every parameter reads (draws) its value
        model
    }

    /// Builds the network for `inputs` and `outputs` channels on `device`.
    pub fn init(&self, inputs: usize, outputs: usize, device: &Device) -> Samudra {
        let k = self.kernel_size;
        let w = self.ch_width;
        let widths = [inputs, w[0], w[1], w[2], w[3]];
        let block = |a: usize, b: usize, d: usize| ConvNextBlock::new(a, b, k, d, self.upscale, self.norm, device);
        let down = (0..4).map(|i| block(widths[i], widths[i + 1], self.dilation[i])).collect();
        let middle = block(w[3], w[3], self.dilation[3]);
        let up = (0..3).map(|i| block(w[3 - i], w[2 - i], self.dilation[3 - i])).collect();
        let last = block(w[0], w[0], self.dilation[1]);
        let head = Conv2dConfig::new([w[0], outputs], [3, 3]).with_padding(PaddingConfig2d::Valid).init(device);
        Samudra {
            down,
            middle,
            up,
            last,
            head,
            periodic_upsample: self.upsample == UpsampleKind::ZonallyPeriodic,
            bf16: self.use_bfloat16,
        }
    }
}

/// Bilinear ×2 upsampling (`align_corners = false`); zonally periodic: one column wrapped onto
/// each side first and two columns cropped from each side after, as upstream's
/// `zonally_periodic_upsample`.
///
/// Written with slices and elementwise operations ([`upsample2`] along each axis), not Burn's
/// `interpolate`: its backward is missing on the GPU backends (cubecl: "Bilinear interpolation
/// backward is not supported by JIT backend"), and this form is differentiable on every backend.
pub fn upsample(x: Tensor<4>, kind: UpsampleKind) -> Tensor<4> {
    let [b, c, h, w] = x.dims();
    let bilinear = |x: Tensor<4>| upsample2(upsample2(x, 3), 2);
    match kind {
        UpsampleKind::ZonallyPeriodic => {
            let left = x.clone().slice([0..b, 0..c, 0..h, w - 1..w]);
            let right = x.clone().slice([0..b, 0..c, 0..h, 0..1]);
            let padded = Tensor::cat(vec![left, x, right], 3);
            bilinear(padded).slice([0..b, 0..c, 0..2 * h, 2..2 * w + 2])
        }
        UpsampleKind::Bilinear => bilinear(x),
    }
}

/// Linear ×2 upsampling along `dim` (2 or 3) with `align_corners = false`, in the arithmetic of
/// PyTorch's bilinear kernel (`λ0·x[i0] + λ1·x[i1]`, the source coordinate clamped at 0 and the
/// upper neighbour at `n − 1`): output `2i` is `0.25·x[i−1] + 0.75·x[i]` and output 0 is `x[0]`;
/// output `2i + 1` is `0.75·x[i] + 0.25·x[min(i+1, n−1)]`. Width, then height, is the order of
/// PyTorch's two-dimensional kernel (two-term sums of two-term sums).
pub fn upsample2(x: Tensor<4>, dim: usize) -> Tensor<4> {
    let n = x.dims()[dim];
    let (even, next) = if n == 1 {
        (x.clone(), x.clone())
    } else {
        let (lo, hi) = (x.clone().narrow(dim, 0, n - 1), x.clone().narrow(dim, 1, n - 1));
        let first = x.clone().narrow(dim, 0, 1);
        let last = x.clone().narrow(dim, n - 1, 1);
        (Tensor::cat(vec![first, lo * 0.25 + hi.clone() * 0.75], dim), Tensor::cat(vec![hi, last], dim))
    };
    let odd = x * 0.75 + next * 0.25;
    let mut dims = even.dims();
    dims[dim] *= 2;
    Tensor::stack::<5>(vec![even, odd], dim + 1).reshape(dims)
}

/// Trainable parameters, as PyTorch's `sum(p.numel() for p in model.parameters())` counts them:
/// batch-norm running statistics are state, not parameters.
pub fn trainable_params<M: Module>(module: &M) -> usize {
    struct Count {
        path: Vec<String>,
        n: usize,
    }
    impl ModuleVisitor for Count {
        fn enter_module(&mut self, name: &str, _container: &str) {
            self.path.push(name.to_string());
        }
        fn exit_module(&mut self, _name: &str, _container: &str) {
            self.path.pop();
        }
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let running = self.path.last().is_some_and(|n| n.starts_with("running_"));
            if !running {
                self.n += param.lazy_shape().num_elements();
            }
        }
    }
    let mut c = Count { path: Vec::new(), n: 0 };
    module.visit(&mut c);
    c.n
}

/// The normalization of a block: batch, instance (no affine), or none.
#[derive(Module, Debug)]
pub struct Norm {
    batch: Option<BatchNorm>,
    instance: Option<InstanceNorm>,
}

impl Norm {
    fn new(kind: NormKind, channels: usize, device: &Device) -> Self {
        Self {
            batch: (kind == NormKind::Batch).then(|| BatchNormConfig::new(channels).init(device)),
            instance: (kind == NormKind::Instance)
                .then(|| InstanceNormConfig::new(channels).with_affine(false).init(device)),
        }
    }
    fn forward(&self, x: Tensor<4>) -> Tensor<4> {
        match (&self.batch, &self.instance) {
            (Some(n), _) if x.device().is_autodiff() && n.training.is_enabled() => batch_norm_train(n, x),
            (Some(n), _) => n.forward(x),
            (None, Some(n)) => instance_norm(x, n.epsilon),
            (None, None) => x,
        }
    }
}

/// Batch norm in training mode as PyTorch computes it: normalize with the batch's biased
/// variance, but update the running variance with the unbiased one (`var · n / (n − 1)`, `n`
/// values per channel); Burn's own `BatchNorm` stores the biased variance. The statistics are
/// [`batch_norm_stats`]'s.
pub fn batch_norm_train(bn: &BatchNorm, x: Tensor<4>) -> Tensor<4> {
    let [b, _, h, w] = x.dims();
    let n = (b * h * w) as f64;
    let (output, batch_mean, batch_var) = batch_norm_stats(x, bn.gamma.val(), bn.beta.val(), bn.epsilon);
    let device = output.device();
    let m = bn.momentum;
    let unbiased = if n > 1.0 { batch_var.detach() * (n / (n - 1.0)) } else { batch_var.detach() };
    let mean = bn.running_mean.value_sync().to_device(&device) * (1.0 - m) + batch_mean.detach() * m;
    let var = bn.running_var.value_sync().to_device(&device) * (1.0 - m) + unbiased * m;
    bn.running_mean.update(mean.detach());
    bn.running_var.update(var.detach());
    output
}

/// `conv` on `x`, or with `bf16` in bfloat16: input, weight and bias cast down as PyTorch's
/// autocast does (the float32 weights stay the trained ones). Every convolution here is unpadded.
fn convolve(layer: &Conv2d, x: Tensor<4>, bf16: bool) -> Tensor<4> {
    let (weight, bias) = (layer.weight.val(), layer.bias.as_ref().map(|b| b.val()));
    let dilation = layer.dilation[0];
    if !bf16 {
        return conv(x, weight, bias, dilation);
    }
    conv(x.cast(FloatDType::BF16), weight.cast(FloatDType::BF16), bias.map(|b| b.cast(FloatDType::BF16)), dilation)
}

/// `norm` on `x`; a bfloat16 input is normalized in float32 and cast back (statistics
/// accumulate in float32, as cuDNN's normalization does for half-precision inputs).
fn normalize(norm: &Norm, x: Tensor<4>) -> Tensor<4> {
    if x.dtype() == burn::tensor::DType::BF16 {
        norm.forward(x.cast(FloatDType::F32)).cast(FloatDType::BF16)
    } else {
        norm.forward(x)
    }
}

/// `capped_gelu(normalize(norm, x))`: with instance norm on a float32 input one operation
/// ([`instance_norm_gelu`], the same values and gradients bit for bit).
fn normalize_gelu(norm: &Norm, x: Tensor<4>) -> Tensor<4> {
    match (&norm.batch, &norm.instance) {
        (None, Some(n)) if x.dtype() == burn::tensor::DType::F32 => instance_norm_gelu(x, n.epsilon),
        _ => capped_gelu(normalize(norm, x)),
    }
}

/// One ConvNeXt block.
#[derive(Module, Debug)]
pub struct ConvNextBlock {
    skip: Option<Conv2d>,
    conv1: Conv2d,
    norm1: Norm,
    conv2: Conv2d,
    norm2: Norm,
    project: Conv2d,
    pad: usize,
}

impl ConvNextBlock {
    fn new(a: usize, b: usize, k: usize, d: usize, u: usize, norm: NormKind, device: &Device) -> Self {
        let e = a * u;
        let conv = |i: usize, o: usize, k: usize, d: usize| {
            Conv2dConfig::new([i, o], [k, k]).with_dilation([d, d]).with_padding(PaddingConfig2d::Valid).init(device)
        };
        Self {
            skip: (a != b).then(|| conv(a, b, 1, 1)),
            conv1: conv(a, e, k, d),
            norm1: Norm::new(norm, e, device),
            conv2: conv(e, e, k, d),
            norm2: Norm::new(norm, e, device),
            project: conv(e, b, 1, 1),
            pad: d * (k - 1) / 2,
        }
    }

    /// `skip(x) + body(x)` (with `bf16`, convolutions in bfloat16; see [`Samudra::forward`]).
    pub fn forward(&self, x: Tensor<4>, bf16: bool) -> Tensor<4> {
        let skip = match &self.skip {
            Some(s) => convolve(s, x.clone(), bf16),
            None => x.clone(),
        };
        let h = normalize_gelu(&self.norm1, convolve(&self.conv1, pad_lonlat(x, self.pad), bf16));
        let h = normalize_gelu(&self.norm2, convolve(&self.conv2, pad_lonlat(h, self.pad), bf16));
        skip + convolve(&self.project, h, bf16)
    }
}

/// The Samudra network.
#[derive(Module, Debug)]
pub struct Samudra {
    down: Vec<ConvNextBlock>,
    middle: ConvNextBlock,
    up: Vec<ConvNextBlock>,
    last: ConvNextBlock,
    head: Conv2d,
    periodic_upsample: bool,
    bf16: bool,
}

impl Samudra {
    fn upsample(&self, x: Tensor<4>) -> Tensor<4> {
        upsample(x, if self.periodic_upsample { UpsampleKind::ZonallyPeriodic } else { UpsampleKind::Bilinear })
    }

    /// Zero-pads to the skip's size as upstream does (`[dw/2, dw − dw/2, dh/2, dh − dh/2]`:
    /// left, right, top, bottom), then adds the skip.
    fn add_skip(x: Tensor<4>, skip: Tensor<4>) -> Tensor<4> {
        let [_, _, h, w] = x.dims();
        let [_, _, sh, sw] = skip.dims();
        let x = if (h, w) == (sh, sw) {
            x
        } else {
            let (dh, dw) = (sh.saturating_sub(h), sw.saturating_sub(w));
            x.pad((dw / 2, dw - dw / 2, dh / 2, dh - dh / 2), burn::tensor::ops::PadMode::Constant(0.0))
        };
        x + skip
    }

    /// Predicts `(B, outputs, Y, X)` from `(B, inputs, Y, X)`; cells where `land` is true are 0.
    ///
    /// With `use_bfloat16` the U-Net runs as under upstream's `autocast(dtype=bfloat16)`: the
    /// input is cast to bfloat16, every convolution takes bfloat16 copies of its float32 weights,
    /// activations, pooling, upsampling and skips stay in bfloat16, normalization is computed in
    /// float32; the U-Net's output is cast to float32 for the head, as upstream's decoder runs
    /// outside autocast. The prediction (and every gradient) is float32.
    pub fn forward(&self, x: Tensor<4>, land: Tensor<4, Bool>) -> Tensor<4> {
        let bf16 = self.bf16;
        let mut skips = Vec::with_capacity(4);
        let mut h = if bf16 { x.cast(FloatDType::BF16) } else { x };
        for block in &self.down {
            h = block.forward(h, bf16);
            skips.push(h.clone());
            h = avg_pool2d(h, AvgPoolOptions::new([2, 2]));
        }
        h = self.upsample(self.middle.forward(h, bf16));
        h = Self::add_skip(h, skips[3].clone());
        for (i, block) in self.up.iter().enumerate() {
            h = self.upsample(block.forward(h, bf16));
            h = Self::add_skip(h, skips[2 - i].clone());
        }
        h = self.last.forward(h, bf16);
        if bf16 {
            h = h.cast(FloatDType::F32);
        }
        let y = convolve(&self.head, pad_lonlat(h, 1), false);
        let shape = y.shape();
        y.mask_fill(land.expand(shape), 0.0)
    }
}
