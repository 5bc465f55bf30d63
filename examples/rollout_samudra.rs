//! Autoregressive rollout of Samudra from an OM4 store, written as a Zarr store.
//!
//! ```sh
//! cargo run --release --example rollout_samudra -- --store OM4.zarr --means OM4_means.zarr \
//!   --stds OM4_stds.zarr --weights model.safetensors --model v2 --start 2014-10-10 --steps 100 \
//!   --out predictions.zarr
//! ```
//! From the true state at START (the first time step on or after START 12:00) with true boundary
//! forcing, each model step predicts the next `hist + 1` states from the previous prediction.
//! Predictions are de-normalized (`x · std + mean`) with land NaN and written with zarrs as a
//! Zarr v2 store in the flat layout and the input's channel names, with the input's CF `time`
//! values for the predicted steps, so `om4 inspect` and xarray open it. Per-step RMSE against the
//! truth on ocean cells is printed and written to `predictions.zarr.rmse.json`. With no store it
//! rolls out on the synthetic demo store (the weights must match its 13 + 3 channels, e.g. from
//! `train_samudra --save-weights`).

use std::path::PathBuf;
use std::sync::Arc;

use burn::tensor::Device;
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use om4_batch::Roles;
use om4_pipeline::BatchSource;
use om4_samudra::{SamudraConfig, load_upstream, rollout};
use om4_store::{DataConfig, PlaneWriter, TimeCoordinate};

#[derive(Parser, Debug)]
#[command(about = "Roll Samudra out from an OM4 store and write the predictions as Zarr")]
struct Args {
    /// OM4.zarr (default: the synthetic demo store).
    #[arg(long)]
    store: Option<PathBuf>,
    /// OM4_means.zarr (default: beside the store).
    #[arg(long)]
    means: Option<PathBuf>,
    /// OM4_stds.zarr (default: beside the store).
    #[arg(long)]
    stds: Option<PathBuf>,
    /// Levels of the depth variables (Samudra's channel names; 3 for the demo store).
    #[arg(long)]
    levels: Option<usize>,
    /// Upstream or om4-saved weights: .safetensors, or a .pt/.pth whole checkpoint or bare state_dict.
    #[arg(long)]
    weights: PathBuf,
    /// tiny, v1, v2, v2_highres.
    #[arg(long, default_value = "tiny")]
    model: String,
    #[arg(long, default_value_t = 1)]
    hist: usize,
    /// First date of the initial state (Julian date at 12:00, as Samudra's bounds).
    #[arg(long)]
    start: om4_store::JulianDate,
    /// Model steps (each predicts hist + 1 states).
    #[arg(long)]
    steps: usize,
    #[arg(long)]
    out: PathBuf,
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

fn run(a: Args) -> Result<(), Box<dyn std::error::Error>> {
    let location = |p: &Option<PathBuf>| p.as_deref().map(om4_store::StoreLocation::from_path).transpose();
    let data = match location(&a.store)? {
        Some(p) => p,
        None => {
            let demo = om4_store::DemoStore::locate();
            println!("the synthetic demo store in {} (written on first use)", demo.dir.display());
            demo.ensure()?.data.into()
        }
    };
    // Samudra's channels for --levels (default: the store's), statistics beside the store unless
    // given; every time.
    let mut config = DataConfig::at(data.clone());
    config.source.levels = a.levels;
    config.source.data_means_location = location(&a.means)?;
    config.source.data_stds_location = location(&a.stds)?;
    config.read_threads = 8;
    let splits = config.open()?;
    let (resolved, source) = (splits.spec, Arc::new(splits.train));
    let axis = source.store().time().ok_or("the store has no time coordinate")?;
    let first = source.store().select(&om4_store::DateRange::from(a.start))?.rows.start;
    let states = a.hist + 1;
    let channels = source.channels();
    let (c_prog, c_bound) = (channels[Roles::PROGNOSTIC], channels.get(Roles::BOUNDARY).copied().unwrap_or(0));
    let model_config = SamudraConfig::named(&a.model).ok_or_else(|| format!("unknown model {:?}", a.model))?;
    let device = Device::flex();
    let mut model = model_config.init(states * (c_prog + c_bound), states * c_prog, &device);
    load_upstream(&mut model, &a.weights)?;

    // The predicted steps' own time values, units and calendar.
    let spec = om4_batch::WindowSpec::new(a.hist, a.steps, 1)?;
    let positions: Vec<usize> =
        (0..a.steps).flat_map(|k| (0..states).map(move |j| spec.label_time(first, k, j))).collect();
    let last = positions.last().copied().unwrap_or(first);
    if last >= source.time_len() {
        return Err(format!("{} steps from {} run past the store's last time step", a.steps, a.start).into());
    }
    let time = TimeCoordinate {
        values: positions.iter().map(|&p| axis.raw[p]).collect(),
        units: axis.units.clone().ok_or("the time coordinate has no CF units")?,
        calendar: axis.calendar().map_or_else(|| "standard".into(), |c| c.cf_name().to_string()),
    };
    let grid = source.grid();
    let mut writer = PlaneWriter::create(&a.out, &resolved.prognostic, grid, &time, None)?;
    let bar = ProgressBar::new(a.steps as u64)
        .with_style(ProgressStyle::with_template("rollout [{bar:30}] {pos}/{len} {elapsed} (eta {eta}) {msg}")?);
    let t0 = std::time::Instant::now();
    let reports = rollout(&model, &*source, a.hist, first, a.steps, &device, |k, predicted, report| {
        for (j, planes) in predicted.chunks_exact(c_prog * grid.plane()).enumerate() {
            writer.write_time(k * states + j, planes)?;
        }
        let mean: f64 = report.rmse.iter().flatten().filter(|v| v.is_finite()).sum::<f64>()
            / report.rmse.iter().flatten().filter(|v| v.is_finite()).count().max(1) as f64;
        bar.set_position(k as u64 + 1);
        bar.set_message(format!("mean RMSE {mean:.4}"));
        Ok(())
    })?;
    bar.finish_and_clear();
    writer.finish()?;
    for r in &reports {
        let finite: Vec<f64> = r.rmse.iter().flatten().copied().filter(|v| v.is_finite()).collect();
        let mean = finite.iter().sum::<f64>() / finite.len().max(1) as f64;
        println!("step {:>4}: times {:?}  mean RMSE over channels {mean:.5}", r.step, r.times);
    }
    let json_path = PathBuf::from(format!("{}.rmse.json", a.out.display()));
    let names: Vec<&String> = resolved.prognostic.iter().collect();
    std::fs::write(
        &json_path,
        serde_json::to_string_pretty(&serde_json::json!({"channels": names, "steps": reports}))?,
    )?;
    println!(
        "wrote {} ({} steps × {c_prog} channels) and {} in {:.1} s",
        a.out.display(),
        positions.len(),
        json_path.display(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
