//! `om4 stats`: normalization statistics computed the way Samudra's are made.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use clap::Args;
use om4_store::{Om4Store, ReadPool};
use serde_json::json;

/// Compute normalization statistics the way Samudra's are made (per channel: mean and
/// population std over every ocean cell of every selected time step) and write
/// OM4_means.zarr and OM4_stds.zarr under --out.
#[derive(Args, Debug)]
pub(crate) struct StatsArgs {
    /// Store root.
    store: PathBuf,
    /// Output directory for OM4_means.zarr and OM4_stds.zarr.
    #[arg(long)]
    out: PathBuf,
    /// Replace OM4_means.zarr and OM4_stds.zarr if --out already holds them.
    #[arg(long)]
    force: bool,
    /// Comma-separated channels (default: all).
    #[arg(long, value_delimiter = ',')]
    channels: Vec<String>,
    /// Time range, as Samudra's splits: dates at 12:00, both ends included, e.g.
    /// `1958-01-01..1999-12-31`, `1958-01-01..` or `..1999-12-31` (default: every time).
    #[arg(long, value_name = "START..END", default_value = "..")]
    time: om4_store::DateRange,
    /// Read threads (default: available cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    remote: super::RemoteArgs,
}

pub(crate) fn run(a: &StatsArgs) -> Result<()> {
    stats(&a.remote.location(&a.store)?, &a.out, a.force, &a.channels, &a.time, a.threads, a.json)
}

fn stats(
    location: &om4_store::StoreLocation,
    out: &Path,
    force: bool,
    channels: &[String],
    time: &om4_store::DateRange,
    threads: Option<usize>,
    as_json: bool,
) -> Result<()> {
    // Before any work: published statistics are not replaced by accident.
    if let Some(existing) =
        ["OM4_means.zarr", "OM4_stds.zarr"].iter().map(|n| out.join(n)).find(|p| p.exists()).filter(|_| !force)
    {
        bail!("{} exists; pass --force to replace it", existing.display());
    }
    let store = Om4Store::open_location(location)?;
    let channels = if channels.is_empty() { store.channel_names() } else { channels.to_vec() };
    let set = store.channels(&channels)?;
    let sel = store.select(time)?;
    if sel.is_empty() {
        bail!("the time range holds no time step");
    }
    let pool = ReadPool::new(threads.unwrap_or_else(crate::num_threads))?;
    let bar = indicatif::ProgressBar::new(sel.len() as u64).with_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} reading time steps [{bar:30}] {pos}/{len} {elapsed} (eta {eta})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let computed = om4_store::compute_statistics(&store, &pool, &set, &sel, |done, _| bar.set_position(done as u64))?;
    bar.finish_and_clear();
    if let Some((name, _)) = channels.iter().zip(&computed).find(|(_, s)| s.count == 0) {
        bail!("channel {name} has no ocean cell in the selected time steps: no statistics to write");
    }
    for (name, s) in channels.iter().zip(&computed).filter(|(_, s)| s.std == 0.0) {
        eprintln!("warning: channel {name} is constant ({}): its std is 0", s.mean);
    }
    let pairs: Vec<(f32, f32)> = computed.iter().map(|s| (s.mean as f32, s.std as f32)).collect();
    let (means, stds) = om4_store::write_statistics(out, &set, &pairs)?;
    if as_json {
        let rows: Vec<_> = channels
            .iter()
            .zip(&computed)
            .map(|(c, s)| json!({"channel": c, "mean": s.mean, "std": s.std, "count": s.count}))
            .collect();
        println!("{}", json!({"time_steps": sel.len(), "means": means, "stds": stds, "channels": rows}));
    } else {
        println!(
            "{} channels over {} time steps: wrote {} and {}",
            channels.len(),
            sel.len(),
            means.display(),
            stds.display()
        );
    }
    Ok(())
}
