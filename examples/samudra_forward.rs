//! One forward pass of Samudra with upstream weights, for checking om4 against PyTorch.
//!
//! ```sh
//! cargo run --release --example samudra_forward -- --weights model.safetensors --model v2 \
//!   --in-channels 157 --out-channels 154 --input input.npy --mask mask.npy --out output.npy
//! ```
//! `input.npy` is `(1, N, H, W)` float32; `mask.npy` is `(M, H, W)` boolean (or 0/1 integers)
//! in upstream's convention (true = ocean; the output is 0 where false); `output.npy` is written
//! `(1, M, H, W)` float32. Batch norm runs in inference mode. Weights: `.safetensors`, or a
//! `.pt`/`.pth` file holding a whole checkpoint (its `"model"` entry) or a bare `state_dict`
//! (told apart by that key), with or without DDP's `module.` prefix, or the 2024 flat `layers.N` layout.

use std::path::{Path, PathBuf};

use burn::tensor::{Bool, Device, Tensor, TensorData};
use clap::Parser;
use om4_samudra::{SamudraConfig, load_upstream};

#[derive(Parser, Debug)]
#[command(about = "One Samudra forward pass with upstream weights on .npy input")]
struct Args {
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

/// A NumPy 1.0 array: values as f32 (from `<f4`, `<f8`, `|b1`, `|u1`, `<i8`) and its shape.
fn read_npy(path: &Path) -> Result<(Vec<f32>, Vec<usize>), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(format!("{}: not a .npy file", path.display()));
    }
    let (n, start) = match bytes[6] {
        1 => (usize::from(u16::from_le_bytes([bytes[8], bytes[9]])), 10),
        _ => (u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize, 12),
    };
    let header = std::str::from_utf8(bytes.get(start..start + n).ok_or("truncated header")?)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if header.contains("'fortran_order': True") {
        return Err(format!("{}: Fortran-ordered arrays are not supported", path.display()));
    }
    let shape_at = header.find("'shape': (").ok_or("no shape")? + 10;
    let shape_text = &header[shape_at..];
    let shape = shape_text[..shape_text.find(')').ok_or("bad shape")?]
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse::<usize>().map_err(|e| format!("{}: shape: {e}", path.display())))
        .collect::<Result<Vec<_>, _>>()?;
    let data = &bytes[start + n..];
    let values: Vec<f32> = if header.contains("'<f4'") {
        data.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
    } else if header.contains("'<f8'") {
        data.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")) as f32).collect()
    } else if header.contains("'|b1'") || header.contains("'|u1'") {
        data.iter().map(|&b| f32::from(b)).collect()
    } else if header.contains("'<i8'") {
        data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")) as f32).collect()
    } else {
        return Err(format!("{}: unsupported dtype in {header}", path.display()));
    };
    if values.len() != shape.iter().product::<usize>() {
        return Err(format!("{}: {} values for shape {shape:?}", path.display(), values.len()));
    }
    Ok((values, shape))
}

fn write_npy(path: &Path, shape: &[usize], values: &[f32]) -> std::io::Result<()> {
    let dims: Vec<String> = shape.iter().map(ToString::to_string).collect();
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}", dims.join(", "));
    header.push_str(&" ".repeat((64 - (10 + header.len() + 1) % 64) % 64));
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&u16::try_from(header.len()).expect("short header").to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    std::fs::write(path, out)
}

fn run(a: Args) -> Result<(), Box<dyn std::error::Error>> {
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
    let device = Device::flex();
    let mut model = config.init(a.in_channels, a.out_channels, &device);
    load_upstream(&mut model, &a.weights)?;
    let x = Tensor::<4>::from_data(TensorData::new(x, [1, a.in_channels, h, w]), &device);
    let land: Vec<bool> = mask.iter().map(|&m| m == 0.0).collect();
    let land = Tensor::<4, Bool>::from_data(TensorData::new(land, [1, a.out_channels, h, w]), &device);
    let t0 = std::time::Instant::now();
    let y = model.forward(x, land).into_data().try_to_vec::<f32>().map_err(|e| format!("{e:?}"))?;
    write_npy(&a.out, &[1, a.out_channels, h, w], &y)?;
    println!("wrote {} ({} × {h} × {w}) in {:.2} s", a.out.display(), a.out_channels, t0.elapsed().as_secs_f64());
    Ok(())
}

fn main() -> std::process::ExitCode {
    match run(Args::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
