//! om4's side of the step benchmark (`benches/step/step.py`): Samudra's optimizer step as
//! `Trainer` takes it (rollout, masked per-channel MSE, backward, gradient norm, clipping, Adam,
//! through the same `om4_samudra` functions), on inputs made as `scripts/gpu/torch_step.py`
//! makes upstream's: 77 prognostic + 3 boundary variables with history 1 (160 → 154 channels),
//! standard-normal inputs and labels, a label mask with 70 % of cells wet.

use std::io::BufRead;
use std::time::Instant;

use burn::module::Module;
use burn::tensor::{Distribution, Tensor};
use om4_burn::{ModelBatch, StepTensors};
use om4_samudra::{LossTargets, Samudra, SamudraConfig, gradients, optimizer};

/// Samudra's variables at history 1: 2 · 77 prognostic and 2 · 3 boundary channels.
const HIST: usize = 1;
const PROGNOSTIC: usize = 77;
const BOUNDARY: usize = 3;

/// Times Samudra's optimizer step.
#[derive(clap::Args, Debug)]
pub(crate) struct StepArgs {
    /// tiny, v1, v2 or v2_highres.
    #[arg(long, default_value = "tiny")]
    pub(crate) preset: String,
    /// Grid as YxX.
    #[arg(long, default_value = "180x360")]
    pub(crate) grid: String,
    #[arg(long, default_value_t = 1)]
    pub(crate) batch: usize,
    /// Rollout steps per optimizer step.
    #[arg(long, default_value_t = 4)]
    pub(crate) steps: usize,
    /// The U-Net in bfloat16 (upstream's use_bfloat16).
    #[arg(long)]
    pub(crate) bf16: bool,
    /// cpu, cuda[:N], vulkan[:N] or wgpu[:N].
    #[arg(long, default_value = "cpu")]
    pub(crate) device: String,
    /// Steps before timing (the first one compiles and tunes kernels on a GPU).
    #[arg(long, default_value_t = 1)]
    pub(crate) warmup: usize,
    /// Timed steps (without --serve).
    #[arg(long, default_value_t = 5)]
    pub(crate) repeats: usize,
    /// After the warm-up, read a step count per line from standard input, run that many steps
    /// and print their times as one JSON line; stop at the end of input (the interleaved rounds
    /// of benches/step/step.py).
    #[arg(long)]
    pub(crate) serve: bool,
    /// Instead of timing whole steps, time the step's phases and each operation of the network
    /// alone at its shapes (median of --repeats): a per-operation profile.
    #[arg(long, conflicts_with = "serve")]
    pub(crate) profile: bool,
    /// With --profile, how the k×k convolutions of the per-operation table run on the CPU: auto
    /// (per shape, as training runs them), winograd, tiles, taps or direct (forced on every shape, to
    /// compare the methods; the step phases always run as training does).
    #[arg(long, default_value = "auto", requires = "profile")]
    pub(crate) conv_plan: om4_samudra::model::ConvPlan,
}

/// A model, its optimizer and one synthetic batch, stepped as `Trainer` steps.
pub(crate) struct Bench {
    config: SamudraConfig,
    model: Samudra,
    optim: burn::optim::ModuleOptimizer,
    targets: LossTargets,
    batch: ModelBatch,
    device: burn::tensor::Device,
    pub(crate) parameters: usize,
}

impl Bench {
    pub(crate) fn new(args: &StepArgs) -> Result<Self, Box<dyn std::error::Error>> {
        let (ny, nx) = parse_grid(&args.grid)?;
        let mut config = SamudraConfig::named(&args.preset)
            .ok_or_else(|| format!("--preset {:?}: one of tiny, v1, v2, v2_highres", args.preset))?;
        config.use_bfloat16 = args.bf16;
        if args.batch == 0 || args.steps == 0 {
            return Err("--batch and --steps must be at least 1".into());
        }
        let device = crate::device::open(&args.device, None)?.device.autodiff();
        let (states, b) = (HIST + 1, args.batch);
        let (prog, bound) = (states * PROGNOSTIC, states * BOUNDARY);
        // The weights are drawn on the host and moved, as the trainer draws them: the same network
        // on every device.
        let model = config.init_seeded(prog + bound, prog, 0).fork(&device);
        device.seed(0);
        let parameters = om4_samudra::model::trainable_params(&model);
        let normal = Distribution::Normal(0.0, 1.0);
        let wet = Tensor::<4>::random([1, prog, ny, nx], Distribution::Uniform(0.0, 1.0), &device).greater_elem(0.3);
        let targets = LossTargets::new(wet.float(), prog);
        let steps = (0..args.steps)
            .map(|_| StepTensors {
                input: Tensor::random([b, prog + bound, ny, nx], normal, &device),
                label: Tensor::random([b, prog, ny, nx], normal, &device),
            })
            .collect();
        Ok(Self {
            config,
            model,
            optim: optimizer(1.0),
            targets,
            batch: ModelBatch { samples: b, steps },
            device,
            parameters,
        })
    }

    pub(crate) fn device(&self) -> &burn::tensor::Device {
        &self.device
    }
    pub(crate) fn config(&self) -> &SamudraConfig {
        &self.config
    }
    /// The network's input and output channels.
    pub(crate) fn channels(&self) -> (usize, usize) {
        let prog = (HIST + 1) * PROGNOSTIC;
        (prog + (HIST + 1) * BOUNDARY, prog)
    }

    /// The step in its phases, as [`step`](Self::step) runs them: median seconds of `repeats`
    /// steps (after one) for the forward rollout and loss, the backward, the gradient norm and
    /// the optimizer.
    pub(crate) fn phases(&mut self, repeats: usize) -> Result<Vec<(&'static str, f64)>, Box<dyn std::error::Error>> {
        let sync = |d: &burn::tensor::Device| d.sync().map_err(|e| format!("device sync: {e:?}"));
        let mut times = vec![Vec::new(); 4];
        for round in 0..=repeats {
            let t0 = Instant::now();
            let loss = self.targets.loss(&self.model, &self.batch, None);
            loss.clone().try_into_scalar::<f32>().map_err(|e| format!("loss: {e}"))?;
            let t1 = Instant::now();
            let grads = loss.backward();
            sync(&self.device)?;
            let t2 = Instant::now();
            let grads = burn::optim::GradientsParams::from_grads(grads, &self.model);
            om4_samudra::grad_norm(&self.model, &grads)?;
            let t3 = Instant::now();
            self.model = self.optim.step(2e-4, self.model.clone(), grads);
            sync(&self.device)?;
            let t4 = Instant::now();
            if round > 0 {
                for (k, (a, b)) in [(t0, t1), (t1, t2), (t2, t3), (t3, t4)].into_iter().enumerate() {
                    times[k].push((b - a).as_secs_f64());
                }
            }
        }
        let names = ["forward rollout + loss", "backward", "gradient norm", "optimizer (clip, Adam)"];
        Ok(names.into_iter().zip(times.iter().map(|t| median(t))).collect())
    }

    /// One optimizer step, finished on the device; returns the batch's loss.
    pub(crate) fn step(&mut self) -> Result<f32, Box<dyn std::error::Error>> {
        let loss = self.targets.loss(&self.model, &self.batch, None);
        let value = loss.clone().try_into_scalar::<f32>().map_err(|e| format!("loss: {e}"))?;
        let (grads, _norm) = gradients(&self.model, loss, 1)?;
        self.model = self.optim.step(2e-4, self.model.clone(), grads);
        self.device.sync().map_err(|e| format!("device sync: {e:?}"))?;
        Ok(value)
    }

    /// Seconds per step of `n` steps.
    fn timed(&mut self, n: usize) -> Result<Vec<f64>, Box<dyn std::error::Error>> {
        (0..n)
            .map(|_| {
                let t0 = Instant::now();
                let loss = self.step()?;
                if !loss.is_finite() {
                    return Err(format!("loss {loss}").into());
                }
                Ok(t0.elapsed().as_secs_f64())
            })
            .collect()
    }
}

pub(crate) fn parse_grid(text: &str) -> Result<(usize, usize), String> {
    let bad = || format!("--grid {text:?}: expected YxX, e.g. 180x360");
    let (y, x) = text.split_once('x').ok_or_else(bad)?;
    let (y, x) = (y.parse::<usize>().map_err(|_| bad())?, x.parse::<usize>().map_err(|_| bad())?);
    if y < 16 || x < 16 {
        return Err(format!("--grid {text:?}: both sides at least 16 (four 2×2 poolings)"));
    }
    Ok((y, x))
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 { s[n / 2] } else { (s[n / 2 - 1] + s[n / 2]) / 2.0 }
}

pub(crate) fn main(args: &StepArgs) -> Result<(), Box<dyn std::error::Error>> {
    if args.profile {
        return crate::profile::main(args);
    }
    let t0 = Instant::now();
    let mut bench = Bench::new(args)?;
    let first = bench.timed(1)?[0];
    let _ = bench.timed(args.warmup.saturating_sub(1))?;
    let head = serde_json::json!({
        "framework": "om4", "preset": args.preset, "batch": args.batch, "steps": args.steps,
        "dtype": if args.bf16 { "bf16" } else { "f32" }, "grid": parse_grid(&args.grid)?,
        "parameters": bench.parameters, "first_step_s": first, "setup_s": t0.elapsed().as_secs_f64(),
        "threads": rayon::current_num_threads(),
    });
    if args.serve {
        println!("{head}");
        for line in std::io::stdin().lock().lines() {
            let n: usize = line?.trim().parse().map_err(|e| format!("a step count per line: {e}"))?;
            println!("{}", serde_json::json!({ "times": bench.timed(n)? }));
        }
        return Ok(());
    }
    let times = bench.timed(args.repeats.max(1))?;
    let mut out = head;
    out["step_s_median"] = median(&times).into();
    out["step_s_best"] = times.iter().copied().fold(f64::INFINITY, f64::min).into();
    out["samples_per_s"] = (args.batch as f64 / median(&times)).into();
    out["times"] = times.into();
    println!("{out}");
    Ok(())
}
