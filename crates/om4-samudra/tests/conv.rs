//! The network's fast paths against simple references: the convolutions (1×1 as a matrix
//! product, k×k by Winograd, in tiles, per tap, as a direct correlation or as GEMMs and a
//! scatter-add, as each shape takes them and each forced) against float64 loops,
//! forward and every gradient; the longitude padding as one copy and by slices against the
//! padding by index, and the capped GELU against its composition from Burn's operations, bit for
//! bit; the GPU backends' GELU (tensor operations) against the exact derivative; the fused
//! instance norm and its gradient against float64 and against the tensor-operation form, and
//! instance norm fused with the GELU against the two in turn, bit for bit.

use burn::tensor::{Device, Distribution, Tensor, TensorData};
use om4_samudra::model::{
    ConvPlan, capped_gelu, capped_gelu_ops, conv_with, gelu_capped, gelu_capped_grad, instance_norm,
    instance_norm_gelu, instance_norm_ops, own_kernels, pad_lonlat, pad_lonlat_ops, wrap_longitude,
};

fn values<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().try_to_vec::<f32>().unwrap()
}

/// `y = conv(x, w) + b` (stride 1, unpadded, dilation `d`) and, for `L = Σ y·g`, the gradients
/// of `x`, `w` and `b`, all in float64.
#[allow(clippy::type_complexity)]
fn reference(
    x: &[f32],
    [b, ci, h, w]: [usize; 4],
    wt: &[f32],
    [co, k]: [usize; 2],
    bias: &[f32],
    d: usize,
    g: &[f32],
) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let (ho, wo) = (h - d * (k - 1), w - d * (k - 1));
    let (mut y, mut dx, mut dw, mut db) =
        (vec![0f64; b * co * ho * wo], vec![0f64; x.len()], vec![0f64; wt.len()], vec![0f64; co]);
    for n in 0..b {
        for o in 0..co {
            for yy in 0..ho {
                for xx in 0..wo {
                    let out = ((n * co + o) * ho + yy) * wo + xx;
                    let gv = f64::from(g[out]);
                    let mut acc = f64::from(bias[o]);
                    for i in 0..ci {
                        for ky in 0..k {
                            for kx in 0..k {
                                let xi = ((n * ci + i) * h + yy + ky * d) * w + xx + kx * d;
                                let wi = ((o * ci + i) * k + ky) * k + kx;
                                acc += f64::from(wt[wi]) * f64::from(x[xi]);
                                dx[xi] += gv * f64::from(wt[wi]);
                                dw[wi] += gv * f64::from(x[xi]);
                            }
                        }
                    }
                    y[out] = acc;
                    db[o] += gv;
                }
            }
        }
    }
    (y, dx, dw, db)
}

fn max_rel(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want.iter().fold(0f64, |m, v| m.max(v.abs())).max(1e-30);
    got.iter().zip(want).fold(0f64, |m, (a, b)| m.max((f64::from(*a) - b).abs())) / scale
}

/// Every convolution shape the network has (k×k with dilations 1 and 2, 1×1, batch 1 and 3; 128
/// channels on a small grid; 64 channels on a 64 × 64 output, where all three passes take
/// Winograd's F(2×2, 3×3) by default) agrees with float64 within float32 rounding, forward and in
/// all three gradients, by every [`ConvPlan`]: per shape as training runs it, and each method
/// forced.
#[test]
fn convolutions_and_their_gradients_match_float64() {
    let device = Device::flex().autodiff();
    assert!(own_kernels(&device), "k×k convolutions run by om4's kernels on flex with autodiff");
    assert!(own_kernels(&Device::flex()), "and on flex without autodiff");
    for (b, ci, co, k, d, h, w) in [
        (1, 5, 7, 3, 1, 9, 12),
        (3, 4, 6, 3, 2, 11, 10),
        (2, 6, 3, 1, 1, 5, 8),
        (1, 128, 130, 3, 1, 6, 7),
        (1, 64, 64, 3, 2, 68, 68),
    ] {
        let normal = Distribution::Normal(0.0, 1.0);
        let x = Tensor::<4>::random([b, ci, h, w], normal, &device);
        let wt = Tensor::<4>::random([co, ci, k, k], normal, &device);
        let bias = Tensor::<1>::random([co], normal, &device);
        let (ho, wo) = (h - d * (k - 1), w - d * (k - 1));
        let g = Tensor::<4>::random([b, co, ho, wo], normal, &device);
        let (xv, wv, bv, gv) = (values(x.clone()), values(wt.clone()), values(bias.clone()), values(g.clone()));
        let (ry, rdx, rdw, rdb) = reference(&xv, [b, ci, h, w], &wv, [co, k], &bv, d, &gv);
        for plan in
            [ConvPlan::Auto, ConvPlan::Winograd, ConvPlan::Tiles, ConvPlan::Taps, ConvPlan::Direct, ConvPlan::Scatter]
        {
            let (x, wt, bias) = (x.clone().require_grad(), wt.clone().require_grad(), bias.clone().require_grad());
            let y = conv_with(x.clone(), wt.clone(), Some(bias.clone()), d, plan);
            let grads = (y.clone() * g.clone()).sum().backward();
            let case = format!("b{b} {ci}→{co} k{k} d{d} {h}×{w} {plan:?}");
            for (what, got, want) in [
                ("output", values(y.inner()), &ry),
                ("x gradient", values(x.grad(&grads).unwrap()), &rdx),
                ("weight gradient", values(wt.grad(&grads).unwrap()), &rdw),
                ("bias gradient", values(bias.grad(&grads).unwrap()), &rdb),
            ] {
                let err = max_rel(&got, want);
                assert!(err < 1e-5, "{case}: {what} off by {err:e} of its largest value");
            }
        }
    }
}

/// Longitude padding: flex's one-copy operation, Burn's operations by slices and by index give
/// the same tensor, bit for bit, for every width from 1 to past the grid's, with and without
/// autodiff. Input gradients: the one-copy operation's equals the by-index form's bit for bit
/// (both sum a column's terms left to right from zero) and the by-slices form's bit for bit while
/// `2p ≤ w` (a column then gathers at most two terms, whose sum does not depend on the order),
/// within float32 rounding of the three-term sums when both edges take the same column.
#[test]
fn longitude_padding_by_one_copy_by_slices_and_by_index_agree() {
    let device = Device::flex().autodiff();
    let (h, w) = (4usize, 6usize);
    let bits = |t: Vec<f32>| t.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    for p in 1..=w + 2 {
        let data: Vec<f32> = (0..2 * 3 * h * w).map(|i| ((i * 37) % 23) as f32 * 0.37 - 4.0).collect();
        let input = || Tensor::<4>::from_data(TensorData::new(data.clone(), [2, 3, h, w]), &device).require_grad();
        let (a, b, c) = (input(), input(), input());
        let fused = pad_lonlat(a.clone(), p);
        let by_slices = pad_lonlat_ops(b.clone(), p);
        let by_index = wrap_longitude(c.clone(), p).pad((0, 0, p, p), burn::tensor::ops::PadMode::Constant(0.0));
        let plain = pad_lonlat(Tensor::<4>::from_data(TensorData::new(data.clone(), [2, 3, h, w]), &Device::flex()), p);
        let want = bits(values(by_index.clone().inner()));
        assert_eq!(bits(values(fused.clone().inner())), want, "p = {p}");
        assert_eq!(bits(values(by_slices.clone().inner())), want, "p = {p}");
        assert_eq!(bits(values(plain)), want, "without autodiff, p = {p}");
        let weights = Tensor::<4>::random(fused.dims(), Distribution::Normal(0.0, 1.0), &device);
        let grad = |y: Tensor<4>, x: &Tensor<4>| values(x.grad(&(y * weights.clone()).sum().backward()).unwrap());
        let (da, db, dc) = (grad(fused, &a), grad(by_slices, &b), grad(by_index, &c));
        assert_eq!(bits(da.clone()), bits(dc), "gradient, p = {p}");
        if 2 * p <= w {
            assert_eq!(bits(da), bits(db), "gradient, p = {p}");
        } else {
            for (u, v) in da.iter().zip(&db) {
                assert!((u - v).abs() <= 4.0 * f32::EPSILON * u.abs().max(1.0), "gradient, p = {p}: {u} vs {v}");
            }
        }
    }
}

/// The capped GELU's single parallel pass on flex equals its scalar formula element by element
/// bit for bit (values without autodiff, values and input gradients with it), on values across
/// the cap (GELU reaches 10 just above x = 10) and a tensor larger than one task; and it is
/// `gelu(x).clamp_max(10)` composed from Burn's operations (flex's scalar `erff`) within float32
/// rounding: its own erf differs from libm's by at most an ulp or so.
#[test]
fn capped_gelu_equals_its_scalar_formula_bit_for_bit() {
    let n = 3 * (1 << 14) + 17;
    let data: Vec<f32> = (0..n).map(|i| (i as f32 * 0.618_034).sin() * 12.0 + ((i % 7) as f32 - 3.0) * 0.25).collect();
    assert!(data.iter().any(|&v| v > 10.5) && data.iter().any(|&v| v < -10.5));
    let bits = |t: Vec<f32>| t.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let scalar: Vec<f32> = data.iter().map(|&x| gelu_capped(x)).collect();
    let plain = Device::flex();
    let x = Tensor::<4>::from_data(TensorData::new(data.clone(), [1, 1, 1, n]), &plain);
    assert_eq!(bits(values(capped_gelu(x.clone()))), bits(scalar.clone()), "without autodiff");
    let composed = values(burn::tensor::activation::gelu(x).clamp_max(10.0));
    for (i, (&a, &b)) in scalar.iter().zip(&composed).enumerate() {
        assert!((a - b).abs() <= 4.0 * f32::EPSILON * b.abs().max(1.0), "element {i}: {a} vs Burn's {b}");
    }
    let device = plain.autodiff();
    let a = Tensor::<4>::from_data(TensorData::new(data.clone(), [1, 1, 1, n]), &device).require_grad();
    let weights: Vec<f32> = (0..n).map(|i| (i as f32 * 0.377).cos()).collect();
    let w = Tensor::<4>::from_data(TensorData::new(weights.clone(), [1, 1, 1, n]), &device);
    let ya = capped_gelu(a.clone());
    assert_eq!(bits(values(ya.clone().inner())), bits(scalar), "with autodiff");
    let ga = (ya * w).sum().backward();
    let want: Vec<f32> = data.iter().zip(&weights).map(|(&x, &g)| gelu_capped_grad(x, g)).collect();
    assert_eq!(bits(values(a.grad(&ga).unwrap())), bits(want), "gradient");
}

/// The capped GELU that every backend but flex runs (tensor operations under autodiff) has the
/// exact derivative `Φ(x) + x·φ(x)`: its values and gradients equal flex's exact pass within
/// float32 rounding of the operations (4 ulp of max(|v|, 1)), and its gradient is not the
/// tanh approximation's (Burn's `gelu_backward` on cubecl), which is up to 8.7e-4 away near x = 2.
#[test]
fn the_gpu_gelu_has_the_exact_gradient() {
    let n = 20_001;
    let data: Vec<f32> = (0..n).map(|i| -12.0 + 24.0 * i as f32 / (n - 1) as f32).collect();
    let device = Device::flex().autodiff();
    let run = |f: fn(Tensor<4>) -> Tensor<4>| {
        let x = Tensor::<4>::from_data(TensorData::new(data.clone(), [1, 1, 1, n]), &device).require_grad();
        let y = f(x.clone());
        let grads = y.clone().sum().backward();
        (values(y.inner()), values(x.grad(&grads).unwrap()))
    };
    let ((y_ops, g_ops), (y_flex, g_flex)) = (run(capped_gelu_ops), run(capped_gelu));
    let close = |a: f32, b: f32| (a - b).abs() <= 4.0 * f32::EPSILON * a.abs().max(b.abs()).max(1.0);
    for i in 0..n {
        assert!(close(y_ops[i], y_flex[i]), "value at x = {}: {} vs {}", data[i], y_ops[i], y_flex[i]);
        assert!(close(g_ops[i], g_flex[i]), "gradient at x = {}: {} vs {}", data[i], g_ops[i], g_flex[i]);
    }
    // Against float64's exact derivative, and away from the tanh approximation's.
    let exact = |x: f64| {
        0.5 * (1.0 + libm::erf(x / std::f64::consts::SQRT_2))
            + x * (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt()
    };
    let tanh_approx = |x: f64| {
        let (x3, c) = (x * x * x, (2.0 / std::f64::consts::PI).sqrt());
        let t = (c * (x + 0.044715 * x3)).tanh();
        0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x)
    };
    let (mut worst_exact, mut worst_tanh) = (0f64, 0f64);
    for (i, &x) in data.iter().enumerate() {
        if (0.5 * x * (1.0 + libm::erff(x / std::f32::consts::SQRT_2))) > 10.0 {
            assert_eq!(g_ops[i], 0.0, "capped at x = {x}");
            continue;
        }
        worst_exact = worst_exact.max((g_ops[i] as f64 - exact(x as f64)).abs());
        worst_tanh = worst_tanh.max((g_ops[i] as f64 - tanh_approx(x as f64)).abs());
    }
    assert!(worst_exact < 2e-6, "exact derivative off by {worst_exact}");
    assert!(worst_tanh > 5e-4, "indistinguishable from the tanh approximation ({worst_tanh})");
}

/// The fused instance norm on flex (under autodiff and without) against float64, values and the
/// data gradient of `L = Σ y·g` (`dx = (g − mean(g) − y·mean(g·y)) / σ`), and against the
/// tensor-operation form that other backends run: all within float32 rounding (1e-5 of the
/// largest value), on planes with a large mean, a constant plane (σ = sqrt(ε)) and batch 2.
#[test]
fn instance_norm_and_its_gradient_match_float64() {
    let (b, c, h, w) = (2usize, 3usize, 7usize, 11usize);
    let plane = h * w;
    let x: Vec<f32> = (0..b * c * plane)
        .map(|i| if i / plane == 4 { 2.5 } else { 5.0 * (i / plane) as f32 + (i as f32 * 0.731).sin() * 1.5 })
        .collect();
    let g: Vec<f32> = (0..x.len()).map(|i| (i as f32 * 0.377).cos()).collect();
    let eps = 1e-5;
    let (mut y_ref, mut dx_ref) = (vec![0f64; x.len()], vec![0f64; x.len()]);
    for p in 0..b * c {
        let xs: Vec<f64> = x[p * plane..][..plane].iter().map(|&v| f64::from(v)).collect();
        let gs: Vec<f64> = g[p * plane..][..plane].iter().map(|&v| f64::from(v)).collect();
        let n = plane as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let sigma = (xs.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n + eps).sqrt();
        let ys: Vec<f64> = xs.iter().map(|v| (v - mean) / sigma).collect();
        let (mg, mgy) = (gs.iter().sum::<f64>() / n, gs.iter().zip(&ys).map(|(g, y)| g * y).sum::<f64>() / n);
        for k in 0..plane {
            y_ref[p * plane + k] = ys[k];
            dx_ref[p * plane + k] = (gs[k] - mg - ys[k] * mgy) / sigma;
        }
    }
    let device = Device::flex().autodiff();
    let run = |f: fn(Tensor<4>, f64) -> Tensor<4>| {
        let xt = Tensor::<4>::from_data(TensorData::new(x.clone(), [b, c, h, w]), &device).require_grad();
        let gt = Tensor::<4>::from_data(TensorData::new(g.clone(), [b, c, h, w]), &device);
        let y = f(xt.clone(), eps);
        let grads = (y.clone() * gt).sum().backward();
        (values(y.inner()), values(xt.grad(&grads).unwrap()))
    };
    for (name, f) in
        [("fused", instance_norm as fn(Tensor<4>, f64) -> Tensor<4>), ("tensor operations", instance_norm_ops)]
    {
        let (y, dx) = run(f);
        assert!(max_rel(&y, &y_ref) < 1e-5, "{name} values: {}", max_rel(&y, &y_ref));
        assert!(max_rel(&dx, &dx_ref) < 1e-5, "{name} gradient: {}", max_rel(&dx, &dx_ref));
    }
    let plain = Tensor::<4>::from_data(TensorData::new(x.clone(), [b, c, h, w]), &Device::flex());
    let y = values(instance_norm(plain, eps));
    assert!(max_rel(&y, &y_ref) < 1e-5, "without autodiff: {}", max_rel(&y, &y_ref));
}

/// Instance norm fused with the capped GELU equals the two operations in turn bit for bit,
/// values and the data gradient, under autodiff and without: planes longer than the fused
/// operation's blocks and not a multiple of eight long, batch 2, and a plane with an outlier
/// whose normalized value passes the cap (where the gradient is zero).
#[test]
fn instance_norm_fused_with_the_gelu_equals_the_two_in_turn_bit_for_bit() {
    let (b, c, h, w) = (2usize, 3usize, 37usize, 61usize);
    let plane = h * w;
    let x: Vec<f32> = (0..b * c * plane)
        .map(|i| match (i / plane, i % plane) {
            (2, 100) => 1e4,
            (2, _) => (i as f32 * 0.01).sin() * 0.1,
            (p, _) => p as f32 + (i as f32 * 0.731).sin() * 2.0,
        })
        .collect();
    let g: Vec<f32> = (0..x.len()).map(|i| (i as f32 * 0.377).cos()).collect();
    let device = Device::flex().autodiff();
    let run = |fused: bool| {
        let xt = Tensor::<4>::from_data(TensorData::new(x.clone(), [b, c, h, w]), &device).require_grad();
        let gt = Tensor::<4>::from_data(TensorData::new(g.clone(), [b, c, h, w]), &device);
        let z = if fused { instance_norm_gelu(xt.clone(), 1e-5) } else { capped_gelu(instance_norm(xt.clone(), 1e-5)) };
        let grads = (z.clone() * gt).sum().backward();
        (values(z.inner()), values(xt.grad(&grads).unwrap()))
    };
    let bits = |v: &[f32]| v.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let ((z_fused, dx_fused), (z_two, dx_two)) = (run(true), run(false));
    assert!(z_two.contains(&10.0), "the outlier reaches the cap");
    assert_eq!(bits(&z_fused), bits(&z_two), "values");
    assert_eq!(bits(&dx_fused), bits(&dx_two), "gradients");
    let plain = || Tensor::<4>::from_data(TensorData::new(x.clone(), [b, c, h, w]), &Device::flex());
    assert_eq!(
        bits(&values(instance_norm_gelu(plain(), 1e-5))),
        bits(&values(capped_gelu(instance_norm(plain(), 1e-5))))
    );
}
