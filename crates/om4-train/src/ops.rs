//! `om4-train ops --device D`: every operation Samudra's training step runs, forward and backward,
//! on device D against Burn's CPU backend (flex) on the same inputs, then whole training steps
//! (rollout loss, backward, gradient norm, clipping, Adam) from the same initial weights.
//!
//! Inputs are made on the host and uploaded, so both sides see identical values. Each tensor's
//! error is `max |device − flex| / max(max |flex|, 1e-3)`; a row fails above `--tolerance`
//! (default 1e-4: float32 arithmetic in another order; a CUDA build's TF32 convolutions need
//! about 1e-2). Exits 1 when any row fails; the rows marked "not used by om4" are printed for the
//! record only.

use burn::module::Module;
use burn::tensor::module::avg_pool2d;
use burn::tensor::ops::AvgPoolOptions;
use burn::tensor::{Device, Tensor, TensorData};
use om4_burn::{ModelBatch, StepTensors};
use om4_samudra::model::{batch_norm_stats, capped_gelu, conv, instance_norm, pad_lonlat, upsample};
use om4_samudra::{LossTargets, NormKind, SamudraConfig, UpsampleKind, gradients, optimizer};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The command line of `om4-train ops`.
#[derive(clap::Args, Debug)]
pub(crate) struct OpsArgs {
    /// The device to check against flex: cuda[:N], vulkan[:N], wgpu[:N] (cpu checks flex against itself).
    #[arg(long, default_value = "cpu")]
    pub(crate) device: String,
    /// The largest relative error accepted.
    #[arg(long, default_value_t = 1e-4)]
    pub(crate) tolerance: f64,
    /// Optimizer steps of the whole-step check.
    #[arg(long, default_value_t = 3)]
    pub(crate) steps: usize,
    /// Grid of the whole-step check, YxX (the demo's is 32x64).
    #[arg(long, default_value = "32x64")]
    pub(crate) grid: String,
}

/// Deterministic values in about [-2, 2] (a hash of the index: no generator of either backend).
fn values(n: usize, salt: u64) -> Vec<f32> {
    (0..n as u64)
        .map(|i| {
            let mut z = i.wrapping_add(salt.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            ((z >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
        })
        .collect()
}

fn host<const D: usize>(shape: [usize; D], salt: u64) -> TensorData {
    TensorData::new(values(shape.iter().product(), salt), shape)
}

fn read<const D: usize>(t: Tensor<D>) -> Res<Vec<f32>> {
    Ok(t.into_data().try_to_vec::<f32>().map_err(|e| format!("{e:?}"))?)
}

/// `max |a − b| / max(max |b|, 1e-3)`.
fn error(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return f64::INFINITY;
    }
    let scale = b.iter().fold(1e-3f64, |m, v| m.max(v.abs() as f64));
    let worst = a.iter().zip(b).fold(0f64, |m, (x, y)| {
        let d = (*x as f64 - *y as f64).abs();
        if d.is_nan() { f64::INFINITY } else { m.max(d) }
    });
    worst / scale
}

/// One operation on one device: its output, then the gradients of `Σ y·g` for its inputs.
type Outputs = Vec<Vec<f32>>;

/// Runs `f` on inputs made from `shapes` (each tracked), returns the output and every input's
/// gradient against a fixed upstream gradient.
fn run<const D: usize, const O: usize>(
    device: &Device,
    shapes: &[[usize; D]],
    f: &dyn Fn(&[Tensor<D>]) -> Tensor<O>,
) -> Res<Outputs> {
    let inputs: Vec<Tensor<D>> = shapes
        .iter()
        .enumerate()
        .map(|(k, s)| Tensor::<D>::from_data(host(*s, k as u64 + 1), device).require_grad())
        .collect();
    let y = f(&inputs);
    let g = Tensor::<O>::from_data(host(y.dims(), 99), device);
    let grads = (y.clone() * g).sum().backward();
    let mut out = vec![read(y.inner())?];
    for x in &inputs {
        out.push(read(x.grad(&grads).ok_or("an input took no part in the output")?)?);
    }
    Ok(out)
}

pub(crate) fn main(args: &OpsArgs) -> Res<bool> {
    let device = crate::device::open(&args.device, None)?.device.autodiff();
    let cpu = Device::flex().autodiff();
    let (b, c, h, w) = (2, 8, 16, 32);
    let x4 = [b, c, h, w];
    type Op = Box<dyn Fn(&[Tensor<4>]) -> Tensor<4>>;
    type Case = (&'static str, Vec<[usize; 4]>, Op, &'static [&'static str]);
    let cases: Vec<Case> = vec![
        (
            "conv 3×3 dilation 2 + bias",
            vec![[b, c, h + 4, w + 4], [12, c, 3, 3], [1, 1, 1, 12]],
            Box::new(|t| {
                let bias = t[2].clone().reshape([12]);
                conv(t[0].clone(), t[1].clone(), Some(bias), 2)
            }),
            &["x", "weight", "bias"],
        ),
        (
            "conv 1×1 + bias",
            vec![[b, c, h, w], [12, c, 1, 1], [1, 1, 1, 12]],
            Box::new(|t| conv(t[0].clone(), t[1].clone(), Some(t[2].clone().reshape([12])), 1)),
            &["x", "weight", "bias"],
        ),
        // Both norms on 8 or 16 planes of 73 728 cells (finer than 1°), batch norm on 147 456
        // values a channel: reduced as rows that long, forward or backward, some devices' sums
        // would come out short (lavapipe: past 4 × 65 533 values in a group of four rows,
        // docs/gpu.md).
        (
            "instance norm, 2 × 4 × 256 × 288",
            vec![[2, 4, 256, 288]],
            Box::new(|t| instance_norm(t[0].clone(), 1e-5)),
            &["x"],
        ),
        (
            "batch norm, training, 2 × 8 × 256 × 288",
            vec![[2, c, 256, 288], [1, 1, 1, c], [1, 1, 1, c]],
            Box::new(move |t| {
                batch_norm_stats(t[0].clone(), t[1].clone().reshape([c]), t[2].clone().reshape([c]), 1e-5).0
            }),
            &["x", "γ", "β"],
        ),
        ("capped GELU (×6 to cross the cap)", vec![x4], Box::new(|t| capped_gelu(t[0].clone() * 6.0)), &["x"]),
        ("longitude padding p2", vec![x4], Box::new(|t| pad_lonlat(t[0].clone(), 2)), &["x"]),
        // Deep levels of small grids: padding wider than the grid wraps around again (by index).
        ("longitude padding p8 on 2×4 (wraps)", vec![[b, c, 2, 4]], Box::new(|t| pad_lonlat(t[0].clone(), 8)), &["x"]),
        ("avg pool 2×2", vec![x4], Box::new(|t| avg_pool2d(t[0].clone(), AvgPoolOptions::new([2, 2]))), &["x"]),
        ("upsample ×2 bilinear", vec![x4], Box::new(|t| upsample(t[0].clone(), UpsampleKind::Bilinear)), &["x"]),
        (
            "upsample ×2 zonally periodic",
            vec![x4],
            Box::new(|t| upsample(t[0].clone(), UpsampleKind::ZonallyPeriodic)),
            &["x"],
        ),
        // A reduction as long as the gradient norm's over the largest weight (320 × 320 × 9) and
        // the loss's at 1°: the shapes above reduce a few thousand values at most.
        (
            "sum of squares of 2^20 values",
            vec![[1, 1, 1024, 1024]],
            Box::new(|t| (t[0].clone() * t[0].clone()).sum().reshape([1, 1, 1, 1])),
            &["x"],
        ),
    ];
    println!("| operation ({} against flex) | output | gradients | ok |", args.device);
    println!("|---|---|---|---|");
    let mut ok = true;
    for (name, shapes, f, grads) in &cases {
        let (d, r) = (run::<4, 4>(&device, shapes, f.as_ref())?, run::<4, 4>(&cpu, shapes, f.as_ref())?);
        let errs: Vec<f64> = d.iter().zip(&r).map(|(a, e)| error(a, e)).collect();
        let pass = errs.iter().all(|e| *e <= args.tolerance);
        ok &= pass;
        let g: Vec<String> = grads.iter().zip(&errs[1..]).map(|(n, e)| format!("{n} {e:.1e}")).collect();
        println!("| {name} | {:.1e} | {} | {} |", errs[0], g.join(", "), if pass { "yes" } else { "NO" });
    }
    long_rows(args, &device, &cpu)?;
    ok &= steps(args, &device, &cpu)?;
    Ok(ok)
}

/// For the record, never failing the check: `sum_dim` of ones along rows longer than some
/// devices add right (lavapipe: about 65 533 values, docs/gpu.md), as Burn's own batch norm
/// reduces each channel's `B·H·W` values; om4 reduces no row that long.
fn long_rows(args: &OpsArgs, device: &Device, cpu: &Device) -> Res<()> {
    for [rows, len] in [[1, 1 << 20], [8, 259_200]] {
        let sums = |dev: &Device| {
            read(Tensor::<2>::from_data(TensorData::new(vec![1f32; rows * len], [rows, len]), dev).sum_dim(1))
        };
        let err = error(&sums(device)?, &sums(cpu)?);
        let verdict = if err <= args.tolerance { "right" } else { "WRONG" };
        println!(
            "| (not used by om4) sum_dim along {rows} row(s) of {len} ones | {err:.1e} | | {verdict}, not checked |"
        );
    }
    Ok(())
}

/// Gradient clipping (global norm 0.5, which these gradients exceed) and Adam: three steps of a
/// linear layer from host weights on `Σ (W·x + b)·g`, every parameter compared after each.
fn adam(args: &OpsArgs, device: &Device, cpu: &Device) -> Res<bool> {
    let side = |dev: &Device| -> Res<Vec<f32>> {
        let mut layer = burn::nn::Linear {
            weight: burn::module::Param::from_tensor(Tensor::<2>::from_data(host([16, 8], 31), dev)),
            bias: Some(burn::module::Param::from_tensor(Tensor::<1>::from_data(host([8], 32), dev))),
        };
        let x = Tensor::<2>::from_data(host([4, 16], 33), dev);
        let g = Tensor::<2>::from_data(host([4, 8], 34), dev);
        let mut optim = optimizer(0.5);
        let mut out = Vec::new();
        for _ in 0..3 {
            let loss = (layer.forward(x.clone()) * g.clone()).sum();
            let grads = burn::optim::GradientsParams::from_grads(loss.backward(), &layer);
            layer = optim.step(1e-2, layer, grads);
            for p in layer.clone().into_record_flat()? {
                out.extend(p);
            }
        }
        Ok(out)
    };
    let err = error(&side(device)?, &side(cpu)?);
    let pass = err <= args.tolerance;
    println!(
        "| clip 0.5 + Adam, 3 steps of a linear layer | | parameters {err:.1e} | {} |",
        if pass { "yes" } else { "NO" }
    );
    Ok(pass)
}

/// Whole training steps of the tiny network at the demo's shapes from the same (host-drawn)
/// weights on both devices,
/// with instance and batch norm: each step's loss and its gradient norm before clipping (clip
/// 0.5, Adam at 1e-3). Parameters are not compared after Adam: gradients that are zero up to
/// rounding (a bias before a norm) take steps of ±lr whose sign is rounding's.
///
/// How far rounding alone moves these numbers is measured beside them: flex against flex with
/// every input value moved by one ulp. On small grids the deepest blocks normalize a few cells
/// (2 at 16×32, 8 at the demo's 32×64), where the norm's gradient cancels and amplifies rounding;
/// the bound is 10× the tolerance or 10× that one-ulp sensitivity, whichever is larger.
fn steps(args: &OpsArgs, device: &Device, cpu: &Device) -> Res<bool> {
    let (ny, nx) = crate::step::parse_grid(&args.grid)?;
    // The demo's network and batch (13 prognostic + 3 boundary channels, hist 1, batch 4), so that
    // scripts/software-gpu.sh's training run finds these kernels tuned.
    let (states, prog, bound, b) = (2, 13, 3, 4);
    let (inputs, outputs) = (states * (prog + bound), states * prog);
    let mut ok = adam(args, device, cpu)?;
    for norm in [NormKind::Instance, NormKind::Batch] {
        let config = SamudraConfig { norm, ..SamudraConfig::tiny() };
        let model = config.init_seeded(inputs, outputs, 7);
        let side = |dev: &Device, nudge: bool| -> Res<(Vec<f32>, Vec<f32>)> {
            let data = |shape: [usize; 4], salt: u64| {
                let mut v = values(shape.iter().product(), salt);
                if nudge {
                    v.iter_mut().for_each(|x| *x = f32::from_bits(x.to_bits() + 1));
                }
                TensorData::new(v, shape)
            };
            let mut model = model.clone().fork(dev);
            let mut optim = optimizer(0.5);
            let mask = Tensor::<4>::from_data(host([1, outputs, ny, nx], 5), dev).greater_elem(-1.2).float();
            let targets = LossTargets::new(mask, outputs);
            let batch = ModelBatch {
                samples: b,
                steps: (0..2)
                    .map(|k| StepTensors {
                        input: Tensor::from_data(data([b, inputs, ny, nx], 10 + k), dev),
                        label: Tensor::from_data(data([b, outputs, ny, nx], 20 + k), dev),
                    })
                    .collect(),
            };
            let (mut losses, mut norms) = (Vec::new(), Vec::new());
            for _ in 0..args.steps {
                let loss = targets.loss(&model, &batch, None);
                losses.push(loss.clone().try_into_scalar::<f32>().map_err(|e| format!("loss: {e:?}"))?);
                let (grads, norm) = gradients(&model, loss, 1)?;
                norms.push(norm);
                model = optim.step(1e-3, model, grads);
            }
            Ok((losses, norms))
        };
        let ((l, n), (lr, nr), (lu, nu)) = (side(device, false)?, side(cpu, false)?, side(cpu, true)?);
        let errs = [error(&l, &lr), error(&n, &nr)];
        let ulp = [error(&lu, &lr), error(&nu, &nr)];
        let pass = errs.iter().zip(&ulp).all(|(e, u)| *e <= (args.tolerance * 10.0).max(10.0 * u));
        ok &= pass;
        println!(
            "| {} training steps, tiny, {norm:?} norm, {ny}×{nx} | loss {:.1e} (one ulp on flex: {:.1e}) | gradient norm {:.1e} (one ulp on flex: {:.1e}) | {} |",
            args.steps,
            errs[0],
            ulp[0],
            errs[1],
            ulp[1],
            if pass { "yes" } else { "NO" }
        );
    }
    Ok(ok)
}

/// Every float parameter of a module, flattened, in module order.
trait Flat {
    fn into_record_flat(self) -> Res<Vec<Vec<f32>>>;
}

impl<M: Module> Flat for M {
    fn into_record_flat(self) -> Res<Vec<Vec<f32>>> {
        struct Collect(Vec<Tensor<1>>);
        impl burn::module::ModuleVisitor for Collect {
            fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<D>>) {
                let t = param.val();
                let n = t.shape().num_elements();
                self.0.push(t.reshape([n]));
            }
        }
        let mut c = Collect(Vec::new());
        self.visit(&mut c);
        c.0.into_iter().map(read).collect()
    }
}
