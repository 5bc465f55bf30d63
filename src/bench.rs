//! `om4 bench read`: random windows of consecutive time steps × channels into one reused buffer.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Result, bail};
use clap::Args;
use om4_store::{Om4Store, ReadPool, Selection};
use serde_json::json;

#[derive(Args, Debug)]
pub(crate) struct ReadArgs {
    /// Store root.
    store: PathBuf,
    /// Consecutive time steps per window.
    #[arg(long, default_value_t = 6)]
    steps: usize,
    /// Windows per repeat.
    #[arg(long, default_value_t = 12)]
    windows: usize,
    /// Timed repeats (after one untimed warm-up pass).
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Read threads (default: available cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Comma-separated channels (default: all).
    #[arg(long, value_delimiter = ',')]
    channels: Vec<String>,
    /// Seed of the window positions.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Explicit first time steps of the windows (overrides --windows and --seed).
    #[arg(long, value_delimiter = ',')]
    starts: Vec<usize>,
    /// Write the first window's planes to this .npy, (steps, channels, y, x), for comparisons.
    #[arg(long)]
    check_out: Option<PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

fn load_average() -> Option<String> {
    std::fs::read_to_string("/proc/loadavg").ok().map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

/// User + system CPU seconds of this process (Linux; clock ticks assumed 100 Hz).
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit(')').next()?.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}

pub(crate) fn read(a: &ReadArgs) -> Result<()> {
    let opened = Instant::now();
    let store = Om4Store::open(&a.store)?;
    let channels = if a.channels.is_empty() { store.channel_names() } else { a.channels.clone() };
    let set = store.channels(&channels)?;
    let t = set.time_len();
    if a.steps == 0 || a.steps > t || a.windows == 0 || a.repeats == 0 {
        bail!("need 1 ≤ steps ≤ {t} time steps, and at least one window and repeat");
    }
    if let Some(&s) = a.starts.iter().find(|&&s| s + a.steps > t) {
        bail!("window start {s} + {} steps runs past the {t} time steps", a.steps);
    }
    let threads = a.threads.unwrap_or_else(crate::num_threads);
    let pool = ReadPool::new(threads)?;
    let sel = Selection { rows: 0..t };
    let mut state = a.seed;
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let starts: Vec<usize> = if a.starts.is_empty() {
        (0..a.windows).map(|_| (next() % (t - a.steps + 1) as u64) as usize).collect()
    } else {
        a.starts.clone()
    };
    let plane = set.grid().plane();
    let mut buf = vec![0f32; a.steps * set.len() * plane];
    let pass = |buf: &mut [f32]| -> Result<()> {
        for &s in &starts {
            let positions: Vec<usize> = (s..s + a.steps).collect();
            store.read_into(&pool, &set, &sel, &positions, buf)?;
        }
        Ok(())
    };
    // Open, validate and read the first window: what a fresh training process pays up front.
    let first: Vec<usize> = (starts[0]..starts[0] + a.steps).collect();
    store.read_into(&pool, &set, &sel, &first, &mut buf)?;
    let open_plus_first_window = opened.elapsed().as_secs_f64();
    if let Some(path) = &a.check_out {
        let g = set.grid();
        crate::npy::write_f32(path, &[a.steps, set.len(), g.y, g.x], &buf)?;
    }
    pass(&mut buf)?; // warm-up: page cache and allocator
    let load_before = load_average();
    let cpu0 = cpu_seconds();
    let mut secs = Vec::with_capacity(a.repeats);
    for _ in 0..a.repeats {
        let t0 = Instant::now();
        pass(&mut buf)?;
        secs.push(t0.elapsed().as_secs_f64());
    }
    let cpu = cpu0.zip(cpu_seconds()).map(|(a, b)| b - a);
    let planes = (starts.len() * a.steps * set.len()) as f64;
    let bytes = planes * plane as f64 * 4.0;
    let mut gbs: Vec<f64> = secs.iter().map(|s| bytes / s / 1e9).collect();
    let best = gbs.iter().copied().fold(0.0, f64::max);
    let med = median(&mut gbs);
    let total_gb = bytes * a.repeats as f64 / 1e9;
    let report = json!({
        "store": a.store, "channels": set.len(), "grid": [set.grid().y, set.grid().x], "steps": a.steps,
        "windows": starts.len(), "starts": starts, "repeats": a.repeats, "threads": threads, "bytes_per_repeat": bytes,
        "gb_per_s_best": best, "gb_per_s_median": med,
        "planes_per_s_best": best * 1e9 / (plane as f64 * 4.0), "planes_per_s_median": med * 1e9 / (plane as f64 * 4.0),
        "cpu_seconds_per_gb": cpu.map(|c| c / total_gb), "open_plus_first_window_s": open_plus_first_window, "load_average_before": load_before, "load_average_after": load_average(),
        "finite_checksum": buf.iter().filter(|v| v.is_finite()).map(|&v| f64::from(v)).sum::<f64>(),
    });
    if a.json {
        println!("{report}");
    } else {
        println!(
            "{} channels × {} steps × {} windows ({:.1} MB per repeat, {threads} threads): best {best:.2} GB/s, median {med:.2} GB/s, \
             {:.0} planes/s median; load {}",
            set.len(),
            a.steps,
            starts.len(),
            bytes / 1e6,
            med * 1e9 / (plane as f64 * 4.0),
            load_before.unwrap_or_default()
        );
    }
    Ok(())
}
