//! `om4-train forward` (and the `samudra_forward` example): one Samudra forward pass with
//! upstream weights on `.npy` input, on any device.

use std::path::{Path, PathBuf};

use burn::tensor::{Bool, Device, Tensor, TensorData};
use om4_samudra::{SamudraConfig, load_upstream};

/// One forward pass: weights, model, the device and the .npy files in and out.
///
/// `input` is `(1, N, H, W)` float32; `mask` is `(M, H, W)` boolean (or 0/1 integers) in
/// upstream's convention (true = ocean; the output is 0 where false); `out` is written
/// `(1, M, H, W)` float32. Batch norm runs in inference mode. Weights: `.safetensors`, or a
/// `.pt`/`.pth` file holding a whole checkpoint (its `"model"` entry) or a bare `state_dict`
/// (told apart by that key), with or without DDP's `module.` prefix, or the 2024 flat `layers.N` layout.
#[derive(clap::Parser, Debug)]
#[command(about = "One Samudra forward pass with upstream weights on .npy input")]
pub struct ForwardArgs {
    /// cpu, cuda[:N], vulkan[:N] or wgpu[:N].
    #[arg(long, default_value = "cpu")]
    device: String,
    #[arg(long)]
    weights: PathBuf,
    /// tiny, v1, v2, v2_highres.
    #[arg(long)]
    model: String,
    #[arg(long)]
    in_channels: usize,
    #[arg(long)]
    out_channels: usize,
    #[arg(long)]
    input: PathBuf,
    #[arg(long)]
    mask: PathBuf,
    #[arg(long)]
    out: PathBuf,
}

/// A `.npy` array's values as f32 and its shape.
fn read_npy(path: &Path) -> Result<(Vec<f32>, Vec<usize>), String> {
    let npy = om4_store::npy::Npy::read(path).map_err(|e| e.to_string())?;
    let values = npy.to_f32().map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((values, npy.shape))
}

/// Runs the forward pass and writes its output; the exit status says whether it succeeded (the
/// error is printed).
pub fn main(args: &ForwardArgs) -> std::process::ExitCode {
    crate::cli::exit(crate::device::open(&args.device, None).and_then(|d| run(args, &d.device)).map(|()| true))
}

/// Runs the forward pass of `a` on `device` and writes its output.
fn run(a: &ForwardArgs, device: &Device) -> Result<(), Box<dyn std::error::Error>> {
    let config = SamudraConfig::named(&a.model).ok_or_else(|| format!("unknown model {:?}", a.model))?;
    let (x, shape) = read_npy(&a.input)?;
    let (mask, mask_shape) = read_npy(&a.mask)?;
    if shape.len() != 4 || shape[0] != 1 || shape[1] != a.in_channels {
        return Err(format!("input shape {shape:?}: expected (1, {}, H, W)", a.in_channels).into());
    }
    let (h, w) = (shape[2], shape[3]);
    if mask_shape != [a.out_channels, h, w] {
        return Err(format!("mask shape {mask_shape:?}: expected ({}, {h}, {w})", a.out_channels).into());
    }
    let mut model = config.init(a.in_channels, a.out_channels, device);
    load_upstream(&mut model, &a.weights)?;
    let x = Tensor::<4>::from_data(TensorData::new(x, [1, a.in_channels, h, w]), device);
    let land: Vec<bool> = mask.iter().map(|&m| m == 0.0).collect();
    let land = Tensor::<4, Bool>::from_data(TensorData::new(land, [1, a.out_channels, h, w]), device);
    let t0 = std::time::Instant::now();
    let y = model.forward(x, land).into_data().try_to_vec::<f32>().map_err(|e| format!("{e:?}"))?;
    om4_store::npy::write_f32(&a.out, &[1, a.out_channels, h, w], &y)?;
    println!("wrote {} ({} × {h} × {w}) in {:.2} s", a.out.display(), a.out_channels, t0.elapsed().as_secs_f64());
    Ok(())
}
