//! `om4 bench read`: random windows of consecutive time steps × channels into one reused buffer.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Result, bail};
use clap::Args;
use om4_store::{Om4Store, ReadPool};
use serde_json::json;

use super::{copy_ceiling, cpu_seconds, load_average, median, peak_rss_bytes};

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
    /// Also time the composed read + decode reference on the same windows (chunk files read
    /// whole first, then decoded, each phase on all threads) and report om4's ratio to it.
    #[arg(long)]
    reference: bool,
    /// Also time the copy ceiling: the window's bytes copied from memory into the same buffer on
    /// the same threads (plane by plane, and as one block per thread), with om4's ratio to it.
    #[arg(long)]
    memcpy: bool,
    /// One timed pass, without the first-window read and the warm-up pass, for reads from disk:
    /// drop the page cache first (`sync; echo 3 > /proc/sys/vm/drop_caches` as root) and give
    /// windows that do not overlap (`--starts`), so that no plane is read twice.
    #[arg(long)]
    cold: bool,
    /// Windows read at once, each into its own buffer by its own thread (as a loader's prefetch
    /// overlaps batches): with a remote store one window's round trips overlap another's reads.
    #[arg(long, default_value_t = 1)]
    in_flight: usize,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    remote: crate::cmd::RemoteArgs,
}

pub(crate) fn run(a: &ReadArgs) -> Result<()> {
    let opened = Instant::now();
    let store = Om4Store::open_location(&a.remote.location(&a.store)?)?;
    let open_requests = store.request_counts();
    let channels = if a.channels.is_empty() { store.channel_names() } else { a.channels.clone() };
    let set = store.channels(&channels)?;
    let t = set.time_len();
    if a.steps == 0 || a.steps > t || a.windows == 0 || a.repeats == 0 || a.in_flight == 0 {
        bail!("need 1 ≤ steps ≤ {t} time steps, and at least one window, repeat and window in flight");
    }
    if a.in_flight > 1 && (a.reference || a.memcpy || a.cold) {
        bail!("--in-flight reads windows at once; --reference, --memcpy and --cold time one at a time");
    }
    if let Some(&s) = a.starts.iter().find(|&&s| s + a.steps > t) {
        bail!("window start {s} + {} steps runs past the {t} time steps", a.steps);
    }
    let threads = a.threads.unwrap_or_else(crate::num_threads);
    let pool = ReadPool::new(threads)?;
    let sel = set.all_rows();
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
    let mut bufs = vec![vec![0f32; a.steps * set.len() * plane]; a.in_flight.min(starts.len())];
    // One pass over the windows: window i into buffer i mod k, on k threads at once (k = 1: here).
    let pass = |bufs: &mut [Vec<f32>]| -> Result<()> {
        let k = bufs.len();
        let read = |first: usize, buf: &mut [f32]| -> Result<()> {
            for &s in starts.iter().skip(first).step_by(k) {
                let positions: Vec<usize> = (s..s + a.steps).collect();
                store.reader(&pool, &set, &sel).read(&positions, buf)?;
            }
            Ok(())
        };
        if let [buf] = bufs {
            return read(0, buf);
        }
        std::thread::scope(|scope| {
            let handles: Vec<_> =
                bufs.iter_mut().enumerate().map(|(i, buf)| scope.spawn(move || read(i, buf))).collect();
            handles.into_iter().try_for_each(|h| h.join().unwrap_or_else(|_| bail!("a reading thread panicked")))
        })
    };
    if a.cold && a.check_out.is_some() {
        bail!("--check-out writes the first window, which --cold does not read on its own");
    }
    let repeats = if a.cold { 1 } else { a.repeats };
    let mut open_plus_first_window = None;
    if !a.cold {
        // Open, validate and read the first window: what a fresh training process pays up front.
        let first: Vec<usize> = (starts[0]..starts[0] + a.steps).collect();
        store.reader(&pool, &set, &sel).read(&first, &mut bufs[0])?;
        open_plus_first_window = Some(opened.elapsed().as_secs_f64());
        if let Some(path) = &a.check_out {
            let g = set.grid();
            om4_store::npy::write_f32(path, &[a.steps, set.len(), g.y, g.x], &bufs[0])?;
        }
        pass(&mut bufs)?; // warm-up: page cache and allocator
    }
    let load_before = load_average();
    let timed_requests = store.request_counts();
    let cpu0 = cpu_seconds();
    let mut secs = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let t0 = Instant::now();
        pass(&mut bufs)?;
        secs.push(t0.elapsed().as_secs_f64());
    }
    let cpu = cpu0.zip(cpu_seconds()).map(|(a, b)| b - a);
    let timed_requests = timed_requests.zip(store.request_counts()).map(|(before, after)| after.since(&before));
    let planes = (starts.len() * a.steps * set.len()) as f64;
    let bytes = planes * plane as f64 * 4.0;
    let mut gbs: Vec<f64> = secs.iter().map(|s| bytes / s / 1e9).collect();
    let best = gbs.iter().copied().fold(0.0, f64::max);
    let med = median(&mut gbs);
    // The reference: per repeat, the read phases and the decode phases of every window summed.
    let reference = if a.reference {
        let mut best_ref: Option<(f64, f64, f64)> = None;
        let mut frames = Vec::new();
        // One untimed pass first, which also sizes the frame buffers.
        for pass in 0..=a.repeats {
            let (mut read, mut decode, mut compressed) = (0.0, 0.0, 0.0);
            for &s in &starts {
                let positions: Vec<usize> = (s..s + a.steps).collect();
                let t = store.read_decode_reference(&pool, &set, &sel, &positions, &mut bufs[0], &mut frames)?;
                read += t.read.as_secs_f64();
                decode += t.decode.as_secs_f64();
                compressed += t.compressed_bytes as f64;
            }
            if pass > 0 && best_ref.is_none_or(|(r, d, _)| read + decode < r + d) {
                best_ref = Some((read, decode, compressed));
            }
        }
        best_ref.map(|(read, decode, compressed)| {
            json!({
                "gb_per_s": bytes / (read + decode) / 1e9, "read_s": read, "decode_s": decode,
                "compressed_bytes": compressed, "om4_best_over_reference": best / (bytes / (read + decode) / 1e9),
            })
        })
    } else {
        None
    };
    let memcpy = a.memcpy.then(|| {
        let planes = copy_ceiling(&pool, &mut bufs[0], plane, a.repeats * starts.len());
        let block = bufs[0].len().div_ceil(threads);
        let blocks = copy_ceiling(&pool, &mut bufs[0], block, a.repeats * starts.len());
        json!({
            "window_bytes": std::mem::size_of_val(bufs[0].as_slice()), "planes_gb_per_s": planes, "blocks_gb_per_s": blocks,
            "om4_best_over_planes": best / planes, "om4_best_over_blocks": best / blocks,
        })
    });
    let total_gb = bytes * repeats as f64 / 1e9;
    // A remote store's requests: opening (validation and coordinates), and per timed window.
    let requests = open_requests.map(|open| {
        let timed = timed_requests.unwrap_or_default();
        let windows = (repeats * starts.len()) as f64;
        json!({
            "open": {"gets": open.gets, "heads": open.heads, "lists": open.lists, "bytes": open.bytes},
            "per_window": {"gets": timed.gets as f64 / windows, "heads": timed.heads as f64 / windows,
                           "rounds": timed.rounds as f64 / windows, "bytes": timed.bytes as f64 / windows},
            "in_flight_at_end": store.requests_in_flight(),
        })
    });
    let report = json!({
        "requests": requests,
        "store": a.store, "channels": set.len(), "grid": [set.grid().y, set.grid().x], "steps": a.steps,
        "windows": starts.len(), "starts": starts, "in_flight": bufs.len(), "repeats": repeats, "cold": a.cold, "threads": threads, "bytes_per_repeat": bytes,
        "gb_per_s_best": best, "gb_per_s_median": med,
        "planes_per_s_best": best * 1e9 / (plane as f64 * 4.0), "planes_per_s_median": med * 1e9 / (plane as f64 * 4.0),
        "cpu_seconds_per_gb": cpu.map(|c| c / total_gb), "open_plus_first_window_s": open_plus_first_window, "peak_rss_bytes": peak_rss_bytes(), "read_decode_reference": reference, "memcpy": memcpy, "load_average_before": load_before, "load_average_after": load_average(),
        "finite_checksum": bufs[0].iter().filter(|v| v.is_finite()).map(|&v| f64::from(v)).sum::<f64>(),
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
        if let Some(r) = &report["read_decode_reference"].as_object() {
            println!(
                "read + decode reference: {:.2} GB/s (read {:.3} s + decode {:.3} s per repeat, best); om4 best / reference {:.2}",
                r["gb_per_s"].as_f64().unwrap_or(f64::NAN),
                r["read_s"].as_f64().unwrap_or(f64::NAN),
                r["decode_s"].as_f64().unwrap_or(f64::NAN),
                r["om4_best_over_reference"].as_f64().unwrap_or(f64::NAN)
            );
        }
        if let Some(m) = &report["memcpy"].as_object() {
            let f = |k: &str| m[k].as_f64().unwrap_or(f64::NAN);
            println!(
                "memcpy of the {:.1} MB window on the same threads: {:.2} GB/s plane by plane, {:.2} GB/s one block per thread (best); \
                 om4 best / memcpy {:.2} and {:.2}",
                f("window_bytes") / 1e6,
                f("planes_gb_per_s"),
                f("blocks_gb_per_s"),
                f("om4_best_over_planes"),
                f("om4_best_over_blocks")
            );
        }
    }
    Ok(())
}
