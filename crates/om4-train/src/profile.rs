//! A per-operation profile of Samudra's optimizer step (`om4-train step --profile`).
//!
//! Two views, both measured here (median of `--repeats` runs after a warm-up, each finished on
//! the device):
//! - the step in its phases: forward rollout and loss, backward, gradient norm, optimizer;
//! - every operation of the network alone, forward and backward, at the shapes the step runs
//!   it: each convolution with its data gradient and its weight gradient timed apart, the
//!   norms, the capped GELU, the longitude padding, pooling and upsampling; multiplied by its
//!   uses per optimizer step (per block, per rollout step). Their sum against the measured step
//!   says how much of the step the table explains (the rest: the loss, skips, adds, the
//!   rollout's concatenation, allocation).
//!
//! The blocks run instance norm and the capped GELU as one operation; what the GELU costs inside
//! it is that operation less instance norm alone at the same shape (the same passes without the
//! GELU's arithmetic, `om4_samudra`'s norm.rs).

use std::time::Instant;

use burn::tensor::module::avg_pool2d;
use burn::tensor::ops::AvgPoolOptions;
use burn::tensor::{Device, Distribution, Tensor};
use om4_samudra::model::{ConvPlan, capped_gelu, conv_with, instance_norm, instance_norm_gelu, pad_lonlat, upsample};
use om4_samudra::{NormKind, SamudraConfig};

use crate::step::{Bench, StepArgs, parse_grid};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Seconds of one run of `f`, finished on the device.
fn once(device: &Device, f: &mut impl FnMut()) -> Res<f64> {
    let t0 = Instant::now();
    f();
    device.sync().map_err(|e| format!("{e:?}"))?;
    Ok(t0.elapsed().as_secs_f64())
}

fn median(mut t: Vec<f64>) -> f64 {
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// Median seconds of `repeats` runs of `f` after one warm-up run.
fn clock(device: &Device, repeats: usize, mut f: impl FnMut()) -> Res<f64> {
    once(device, &mut f)?;
    Ok(median((0..repeats.max(1)).map(|_| once(device, &mut f)).collect::<Res<_>>()?))
}

/// One operation at one shape: forward and backward seconds (a convolution's backward split
/// into its data and weight gradients), and how often a step runs it.
struct Row {
    op: String,
    shape: String,
    uses: usize,
    forward: f64,
    backward: [f64; 2],
}

fn normal(shape: [usize; 4], device: &Device) -> Tensor<4> {
    Tensor::random(shape, Distribution::Normal(0.0, 1.0), device)
}

/// Forward alone, then forward + backward with the gradient flowing into `x` (the backward is the
/// difference): median seconds of `repeats` runs after one warm-up.
fn unary(device: &Device, repeats: usize, shape: [usize; 4], f: impl Fn(Tensor<4>) -> Tensor<4>) -> Res<(f64, f64)> {
    let [r] = unary_ops(device, repeats, shape, [&f])?;
    Ok(r)
}

/// [`unary`] for several operations on the same input, their runs alternating round by round so
/// that all meet the same machine: their (forward, backward) seconds. For differences of them,
/// which the noise of separate medians would swamp.
fn unary_ops<const N: usize>(
    device: &Device,
    repeats: usize,
    shape: [usize; 4],
    ops: [&dyn Fn(Tensor<4>) -> Tensor<4>; N],
) -> Res<[(f64, f64); N]> {
    let plain = device.clone().inner();
    let (x, xa) = (normal(shape, &plain), normal(shape, device).require_grad());
    let forward = |f: &dyn Fn(Tensor<4>) -> Tensor<4>| {
        once(&plain, &mut || {
            let _ = f(x.clone()).sum().try_into_scalar::<f32>(); // a failure shows at the sync
        })
    };
    let both = |f: &dyn Fn(Tensor<4>) -> Tensor<4>| once(device, &mut || drop(f(xa.clone()).sum().backward()));
    let mut runs: [[Vec<f64>; 2]; N] = std::array::from_fn(|_| [Vec::new(), Vec::new()]);
    for round in 0..=repeats.max(1) {
        for (op, runs) in ops.iter().zip(runs.iter_mut()) {
            let (f, b) = (forward(*op)?, both(*op)?);
            if round > 0 {
                runs[0].push(f);
                runs[1].push(b);
            }
        }
    }
    Ok(runs.map(|[f, b]| {
        let (f, b) = (median(f), median(b));
        (f, (b - f).max(0.0))
    }))
}

/// A k×k convolution (`cin` → `cout`, dilation `d`) on an already padded `(b, cin, h, w)`:
/// forward, data gradient and weight gradient (each backward alone, as forward + backward minus
/// forward with only that input tracked).
fn convolution(
    device: &Device,
    repeats: usize,
    [b, cin, h, w]: [usize; 4],
    cout: usize,
    k: usize,
    d: usize,
    plan: ConvPlan,
) -> Res<(f64, [f64; 2])> {
    let plain = device.clone().inner();
    let run = |dev: &Device, gx: bool, gw: bool| -> Res<f64> {
        let x = normal([b, cin, h, w], dev);
        let wt = normal([cout, cin, k, k], dev);
        let bias = Tensor::<1>::zeros([cout], dev);
        let (x, wt) = (if gx { x.require_grad() } else { x }, if gw { wt.require_grad() } else { wt });
        clock(dev, repeats, || {
            let y = conv_with(x.clone(), wt.clone(), Some(bias.clone()), d, plan).sum();
            if gx || gw {
                drop(y.backward());
            } else {
                let _ = y.try_into_scalar::<f32>();
            }
        })
    };
    let forward = run(&plain, false, false)?;
    let data = run(device, true, false)?;
    let weight = run(device, false, true)?;
    Ok((forward, [(data - forward).max(0.0), (weight - forward).max(0.0)]))
}

/// The network's operations at their shapes, with their uses per forward pass.
/// The step being profiled: batch, grid, the network's channels, rollout steps.
struct Case {
    b: usize,
    grid: (usize, usize),
    inputs: usize,
    outputs: usize,
    steps: usize,
    /// How the k×k convolutions run (`--conv-plan`).
    plan: ConvPlan,
}

/// The rows, and the seconds per step of the capped GELU within the fused norm (see the module
/// documentation).
fn rows(config: &SamudraConfig, device: &Device, repeats: usize, case: &Case) -> Res<(Vec<Row>, f64)> {
    let &Case { b, grid, inputs, outputs, steps, plan } = case;
    let k = config.kernel_size;
    let w = config.ch_width;
    let u = config.upscale;
    let widths = [inputs, w[0], w[1], w[2], w[3]];
    // (input width, output width, dilation, level) of every block in order.
    let mut blocks: Vec<(usize, usize, usize, usize)> =
        (0..4).map(|i| (widths[i], widths[i + 1], config.dilation[i], i)).collect();
    blocks.push((w[3], w[3], config.dilation[3], 4));
    blocks.extend((0..3).map(|i| (w[3 - i], w[2 - i], config.dilation[3 - i], 3 - i)));
    blocks.push((w[0], w[0], config.dilation[1], 0));
    let mut out = Vec::new();
    let mut gelu_within = 0.0;
    let mut add = |op: &str, shape: String, uses: usize, forward: f64, backward: [f64; 2]| {
        out.push(Row { op: op.into(), shape, uses: uses * steps, forward, backward });
    };
    for (i, &(a, bw, d, level)) in blocks.iter().enumerate() {
        let (h, wd) = (grid.0 >> level, grid.1 >> level);
        let e = a * u;
        let p = d * (k - 1) / 2;
        let (f, bk) = convolution(device, repeats, [b, a, h + 2 * p, wd + 2 * p], e, k, d, plan)?;
        add("conv k×k", format!("{a}→{e} d{d} {h}×{wd}"), 1, f, bk);
        let (f, bk) = convolution(device, repeats, [b, e, h + 2 * p, wd + 2 * p], e, k, d, plan)?;
        add("conv k×k", format!("{e}→{e} d{d} {h}×{wd}"), 1, f, bk);
        let (f, bk) = convolution(device, repeats, [b, e, h, wd], bw, 1, 1, plan)?;
        add("conv 1×1", format!("{e}→{bw} {h}×{wd}"), 1, f, bk);
        if a != bw {
            let (f, bk) = convolution(device, repeats, [b, a, h, wd], bw, 1, 1, plan)?;
            add("conv 1×1", format!("{a}→{bw} {h}×{wd} (skip)"), 1, f, bk);
        }
        if config.norm == NormKind::Instance {
            // The network runs the two as one operation (the composition on a GPU).
            // The difference of two near-equal times: at least 9 rounds.
            let [(f, bk), (f0, bk0)] = unary_ops(
                device,
                repeats.max(9),
                [b, e, h, wd],
                [&|x| instance_norm_gelu(x, 1e-5), &|x| instance_norm(x, 1e-5)],
            )?;
            add("instance norm + capped GELU", format!("{e} {h}×{wd}"), 2, f, [bk, 0.0]);
            gelu_within += (2 * steps) as f64 * (f + bk - f0 - bk0).max(0.0);
        } else {
            let (f, bk) = unary(device, repeats, [b, e, h, wd], capped_gelu)?;
            add("capped GELU", format!("{e} {h}×{wd}"), 2, f, [bk, 0.0]);
        }
        let (f, bk) = unary(device, repeats, [b, a, h, wd], |x| pad_lonlat(x, p))?;
        add("pad_lonlat", format!("{a} {h}×{wd} p{p}"), 1, f, [bk, 0.0]);
        let (f, bk) = unary(device, repeats, [b, e, h, wd], |x| pad_lonlat(x, p))?;
        add("pad_lonlat", format!("{e} {h}×{wd} p{p}"), 1, f, [bk, 0.0]);
        if i < 4 {
            let (f, bk) = unary(device, repeats, [b, bw, h, wd], |x| avg_pool2d(x, AvgPoolOptions::new([2, 2])))?;
            add("avg pool 2×2", format!("{bw} {h}×{wd}"), 1, f, [bk, 0.0]);
        }
    }
    for level in (0..4).rev() {
        // After the middle block and each up block: level 3's width at 1/16 of the grid, ...
        let c = w[level];
        let (h, wd) = (grid.0 >> (level + 1), grid.1 >> (level + 1));
        let (f, bk) = unary(device, repeats, [b, c, h, wd], |x| upsample(x, config.upsample))?;
        add("upsample ×2", format!("{c} {h}×{wd}"), 1, f, [bk, 0.0]);
    }
    let (f, bk) = convolution(device, repeats, [b, w[0], grid.0 + 2, grid.1 + 2], outputs, 3, 1, plan)?;
    add("conv head 3×3", format!("{}→{outputs} {}×{}", w[0], grid.0, grid.1), 1, f, bk);
    Ok((out, gelu_within))
}

pub(crate) fn main(args: &StepArgs) -> Res<()> {
    let (ny, nx) = parse_grid(&args.grid)?;
    let mut bench = Bench::new(args)?;
    let device = bench.device().clone();
    let repeats = args.repeats.max(1);
    let phases = bench.phases(repeats)?;
    let step: f64 = phases.iter().map(|(_, t)| t).sum();
    println!(
        "step phases ({} at {ny}×{nx}, batch {}, {} rollout steps, median of {repeats}):",
        args.preset, args.batch, args.steps
    );
    for (name, t) in &phases {
        println!("  {name:<22} {t:8.3} s  {:5.1} %", 100.0 * t / step);
    }
    let config = bench.config().clone();
    let (inputs, outputs) = bench.channels();
    let case = Case { b: args.batch, grid: (ny, nx), inputs, outputs, steps: args.steps, plan: args.conv_plan };
    let (table, gelu_within) = rows(&config, &device, repeats, &case)?;
    let total: f64 = table.iter().map(|r| r.uses as f64 * (r.forward + r.backward[0] + r.backward[1])).sum();
    println!(
        "\n| operation | shape | uses per step | forward ms | data grad ms | weight grad ms | s per step | share of step |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut by_op: Vec<(String, f64)> = Vec::new();
    for r in &table {
        let per = r.uses as f64 * (r.forward + r.backward[0] + r.backward[1]);
        println!(
            "| {} | {} | {} | {:.2} | {:.2} | {} | {:.3} | {:.1} % |",
            r.op,
            r.shape,
            r.uses,
            1e3 * r.forward,
            1e3 * r.backward[0],
            if r.op.starts_with("conv") { format!("{:.2}", 1e3 * r.backward[1]) } else { "".into() },
            per,
            100.0 * per / step
        );
        let key = if r.op.starts_with("conv") {
            vec![format!("{} forward", r.op), format!("{} data grad", r.op), format!("{} weight grad", r.op)]
        } else {
            vec![r.op.clone()]
        };
        let parts = if r.op.starts_with("conv") {
            vec![r.forward, r.backward[0], r.backward[1]]
        } else {
            vec![r.forward + r.backward[0]]
        };
        for (k, t) in key.into_iter().zip(parts) {
            match by_op.iter_mut().find(|(n, _)| *n == k) {
                Some(e) => e.1 += r.uses as f64 * t,
                None => by_op.push((k, r.uses as f64 * t)),
            }
        }
    }
    by_op.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!("\n| operation (all shapes) | s per step | share of step |");
    println!("|---|---|---|");
    for (k, t) in &by_op {
        println!("| {k} | {t:.3} | {:.1} % |", 100.0 * t / step);
    }
    println!("| **sum of the operations alone** | {total:.3} | {:.1} % |", 100.0 * total / step);
    println!("| **measured step** | {step:.3} | 100 % |");
    let gelu = gelu_within
        + table
            .iter()
            .filter(|r| r.op == "capped GELU")
            .map(|r| r.uses as f64 * (r.forward + r.backward[0]))
            .sum::<f64>();
    println!(
        "\nthe capped GELU, all shapes (within the fused norm: it less instance norm alone): {gelu:.3} s per step, {:.1} % of the step",
        100.0 * gelu / step
    );
    ceiling(&device, repeats, &config, &case)
}

/// The largest convolution's three passes against the GEMM each amounts to (im2col's product,
/// `(C_out, C_in·k²) × (C_in·k², H·W)` per sample, for the forward) on the same backend: what a
/// convolution built on that GEMM can reach.
fn ceiling(device: &Device, repeats: usize, config: &SamudraConfig, case: &Case) -> Res<()> {
    let (b, (h, w), inputs) = (case.b, case.grid, case.inputs);
    let plain = device.clone().inner();
    let (k, e) = (config.kernel_size, inputs * config.upscale);
    let flops = 2.0 * (b * e * e * k * k * h * w) as f64;
    let lhs = Tensor::<2>::random([e, e * k * k], Distribution::Normal(0.0, 1.0), &plain);
    let rhs = Tensor::<2>::random([e * k * k, b * h * w], Distribution::Normal(0.0, 1.0), &plain);
    let gemm = clock(&plain, repeats, || {
        let _ = lhs.clone().matmul(rhs.clone()).slice([0..1, 0..1]).try_into_scalar::<f32>();
    })?;
    let (conv, [data, weight]) = convolution(device, repeats, [b, e, h + k - 1, w + k - 1], e, k, 1, case.plan)?;
    println!(
        "\nlargest convolution {e}→{e} {k}×{k} at {h}×{w}, batch {b}: {:.1} GFLOP per pass; its GEMM alone {:.3} s ({:.0} GFLOP/s); the convolution's forward {:.3} s ({:.0} GFLOP/s), data gradient {:.3} s ({:.0} GFLOP/s), weight gradient {:.3} s ({:.0} GFLOP/s); {} threads",
        flops / 1e9,
        gemm,
        flops / gemm / 1e9,
        conv,
        flops / conv / 1e9,
        data,
        flops / data / 1e9,
        weight,
        flops / weight / 1e9,
        rayon::current_num_threads(),
    );
    Ok(())
}
