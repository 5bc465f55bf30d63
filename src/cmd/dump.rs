//! `om4 dump`: planes to a float32 .npy of shape (times, channels, y, x).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;
use om4_store::{Om4Store, ReadPool};

/// Write planes to a little-endian float32 .npy of shape (times, channels, y, x).
#[derive(Args, Debug)]
pub(crate) struct DumpArgs {
    /// Store root.
    store: PathBuf,
    /// Comma-separated channels.
    #[arg(long, value_delimiter = ',', required = true)]
    channels: Vec<String>,
    /// Comma-separated physical time indices.
    #[arg(long, value_delimiter = ',', required = true)]
    times: Vec<usize>,
    /// Output file.
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    remote: super::RemoteArgs,
}

pub(crate) fn run(a: &DumpArgs) -> Result<()> {
    dump(&a.remote.location(&a.store)?, &a.channels, &a.times, &a.out)
}

fn dump(location: &om4_store::StoreLocation, channels: &[String], times: &[usize], out: &Path) -> Result<()> {
    let store = Om4Store::open_location(location)?;
    let set = store.channels(channels)?;
    let grid = set.grid();
    let mut buf = vec![0f32; times.len() * set.len() * grid.plane()];
    let sel = set.all_rows();
    store.reader(&ReadPool::new(crate::num_threads())?, &set, &sel).read(times, &mut buf)?;
    om4_store::npy::write_f32(out, &[times.len(), set.len(), grid.y, grid.x], &buf)
        .with_context(|| format!("writing {}", out.display()))?;
    println!("wrote {} ({} × {} × {} × {})", out.display(), times.len(), set.len(), grid.y, grid.x);
    Ok(())
}
