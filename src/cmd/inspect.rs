//! `om4 inspect`: a store's layout, grid, time range, channels, codecs, masks and problems.

use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;
use om4_store::{Om4Store, StoreLocation};
use serde_json::json;

use super::RemoteArgs;

/// Layout, format, grid, time range, channels, codecs, chunking, masks, statistics and problems.
#[derive(Args, Debug)]
pub(crate) struct InspectArgs {
    /// Store root (e.g. OM4.zarr), or s3://BUCKET/PATH/OM4.zarr.
    store: PathBuf,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    remote: RemoteArgs,
}

pub(crate) fn run(a: &InspectArgs) -> Result<()> {
    inspect(&a.remote.location(&a.store)?, a.json)
}

/// Every channel's validation problem, by trying each channel alone; with `all`, also every array
/// whose metadata om4 cannot use (no channel name reaches those).
pub(crate) fn problems(store: &Om4Store, channels: &[String], all: bool) -> Vec<String> {
    let mut out: Vec<String> = if all {
        store.broken_arrays().iter().map(|(name, reason)| format!("array {name:?}: {reason}")).collect()
    } else {
        Vec::new()
    };
    out.extend(channels.iter().filter_map(|c| store.channels(&[c]).err().map(|e| e.to_string())));
    if out.is_empty()
        && !channels.is_empty()
        && let Err(e) = store.channels(channels)
    {
        out.push(e.to_string());
    }
    out
}

fn inspect(location: &StoreLocation, as_json: bool) -> Result<()> {
    let store = Om4Store::open_location(location)?;
    let channels = store.channel_names();
    let problems = problems(&store, &channels, true);
    let arrays = store.arrays();
    let data: Vec<_> = arrays.values().filter(|a| a.shape.len() >= 3).collect();
    let mut formats: Vec<String> = arrays.values().map(|a| format!("{:?}", a.format).to_lowercase()).collect();
    formats.sort();
    formats.dedup();
    let mut codecs: Vec<&str> = data.iter().map(|a| a.codecs.as_str()).collect();
    codecs.sort_unstable();
    codecs.dedup();
    let mut chunks: Vec<String> = data.iter().map(|a| format!("{:?}", a.chunks)).collect();
    chunks.sort();
    chunks.dedup();
    let grid = data.first().map(|a| {
        let n = a.shape.len();
        (a.shape[n - 2], a.shape[n - 1])
    });
    let time = store.time().map(|t| {
        let first_last = t.instants.as_ref().map(|i| (i[0].to_string(), i[i.len() - 1].to_string()));
        json!({"steps": t.len(), "units": t.units, "calendar": t.calendar(), "first": first_last.as_ref().map(|f| &f.0), "last": first_last.as_ref().map(|f| &f.1)})
    });
    let masks: Vec<&String> = arrays.keys().filter(|k| k.starts_with("mask_") || *k == "wetmask").collect();
    // Statistics beside the store: a directory, or (remote) a store that opens.
    let beside = |name: &str| match location {
        StoreLocation::Local(path) => path.parent().unwrap_or(Path::new(".")).join(name).is_dir(),
        remote => Om4Store::open_location(&remote.sibling(name)).is_ok(),
    };
    let stats: Vec<String> =
        ["OM4_means.zarr", "OM4_stds.zarr"].iter().filter(|s| beside(s)).map(|s| (*s).to_string()).collect();
    let report = json!({
        "store": location.to_string(), "layout": store.layout(), "formats": formats, "grid": grid.map(|(y, x)| json!({"y": y, "x": x})),
        "time": time, "channels": channels, "codecs": codecs, "chunks": chunks, "masks": masks,
        "levels": store.levels(), "statistics": stats, "problems": problems,
    });
    if as_json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!("store      {location}");
    println!("layout     {:?}, zarr {}", store.layout(), formats.join("+"));
    if let Some((y, x)) = grid {
        println!("grid       {y} × {x}");
    }
    match store.time() {
        Some(t) => match &t.instants {
            Some(i) => println!(
                "time       {} steps, {} .. {} ({:?} calendar)",
                t.len(),
                i[0],
                i[i.len() - 1],
                t.calendar().expect("decoded")
            ),
            None => println!("time       {} steps (no CF units: positions only)", t.len()),
        },
        None => println!("time       no time coordinate"),
    }
    println!("channels   {} ({})", channels.len(), abbreviate(&channels));
    println!("codecs     {}", codecs.join("; "));
    println!("chunks     {}", chunks.join("; "));
    println!("masks      {}", if masks.is_empty() { "none".to_string() } else { format!("{} arrays", masks.len()) });
    println!("statistics {}", if stats.is_empty() { "none beside the store".to_string() } else { stats.join(", ") });
    if problems.is_empty() {
        println!("problems   none");
    } else {
        println!("problems   {}", problems.len());
        for p in &problems {
            println!("  - {p}");
        }
    }
    Ok(())
}

fn abbreviate(names: &[String]) -> String {
    if names.len() <= 8 {
        return names.join(", ");
    }
    format!("{}, …, {}", names[..4].join(", "), names[names.len() - 2..].join(", "))
}
