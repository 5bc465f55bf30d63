//! `om4 bench read`: random windows of consecutive time steps × channels into one reused buffer.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Result, bail};
use clap::Args;
use om4_store::{Om4Store, ReadPool, Selection};
use rayon::prelude::*;
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

/// Peak resident memory of this process in bytes (Linux `VmHWM`).
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().trim_end_matches("kB").trim();
    kb.parse::<u64>().ok().map(|k| k * 1024)
}

/// Best GB/s of copying an in-memory copy of `buf` into `buf` on the pool's threads, in pieces of
/// `piece` values, over `repeats` timed rounds after one untimed one: what a reader that found
/// every plane already in memory would reach.
fn copy_ceiling(pool: &ReadPool, buf: &mut [f32], piece: usize, repeats: usize) -> f64 {
    let src = buf.to_vec();
    let mut best = f64::INFINITY;
    for round in 0..=repeats {
        let t0 = Instant::now();
        pool.install(|| buf.par_chunks_mut(piece).zip(src.par_chunks(piece)).for_each(|(d, s)| d.copy_from_slice(s)));
        if round > 0 {
            best = best.min(t0.elapsed().as_secs_f64());
        }
    }
    std::mem::size_of_val(buf) as f64 / best / 1e9
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
    let mut buf = vec![0f32; a.steps * set.len() * plane];
    let pass = |buf: &mut [f32]| -> Result<()> {
        for &s in &starts {
            let positions: Vec<usize> = (s..s + a.steps).collect();
            store.read_into(&pool, &set, &sel, &positions, buf)?;
        }
        Ok(())
    };
    if a.cold && a.check_out.is_some() {
        bail!("--check-out writes the first window, which --cold does not read on its own");
    }
    let repeats = if a.cold { 1 } else { a.repeats };
    let mut open_plus_first_window = None;
    if !a.cold {
        // Open, validate and read the first window: what a fresh training process pays up front.
        let first: Vec<usize> = (starts[0]..starts[0] + a.steps).collect();
        store.read_into(&pool, &set, &sel, &first, &mut buf)?;
        open_plus_first_window = Some(opened.elapsed().as_secs_f64());
        if let Some(path) = &a.check_out {
            let g = set.grid();
            crate::npy::write_f32(path, &[a.steps, set.len(), g.y, g.x], &buf)?;
        }
        pass(&mut buf)?; // warm-up: page cache and allocator
    }
    let load_before = load_average();
    let cpu0 = cpu_seconds();
    let mut secs = Vec::with_capacity(repeats);
    for _ in 0..repeats {
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
    // The reference: per repeat, the read phases and the decode phases of every window summed.
    let reference = if a.reference {
        let mut best_ref: Option<(f64, f64, f64)> = None;
        let mut frames = Vec::new();
        // One untimed pass first, which also sizes the frame buffers.
        for pass in 0..=a.repeats {
            let (mut read, mut decode, mut compressed) = (0.0, 0.0, 0.0);
            for &s in &starts {
                let positions: Vec<usize> = (s..s + a.steps).collect();
                let t = store.read_decode_reference(&pool, &set, &sel, &positions, &mut buf, &mut frames)?;
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
        let planes = copy_ceiling(&pool, &mut buf, plane, a.repeats * starts.len());
        let block = buf.len().div_ceil(threads);
        let blocks = copy_ceiling(&pool, &mut buf, block, a.repeats * starts.len());
        json!({
            "window_bytes": std::mem::size_of_val(buf.as_slice()), "planes_gb_per_s": planes, "blocks_gb_per_s": blocks,
            "om4_best_over_planes": best / planes, "om4_best_over_blocks": best / blocks,
        })
    });
    let total_gb = bytes * repeats as f64 / 1e9;
    let report = json!({
        "store": a.store, "channels": set.len(), "grid": [set.grid().y, set.grid().x], "steps": a.steps,
        "windows": starts.len(), "starts": starts, "repeats": repeats, "cold": a.cold, "threads": threads, "bytes_per_repeat": bytes,
        "gb_per_s_best": best, "gb_per_s_median": med,
        "planes_per_s_best": best * 1e9 / (plane as f64 * 4.0), "planes_per_s_median": med * 1e9 / (plane as f64 * 4.0),
        "cpu_seconds_per_gb": cpu.map(|c| c / total_gb), "open_plus_first_window_s": open_plus_first_window, "peak_rss_bytes": peak_rss_bytes(), "read_decode_reference": reference, "memcpy": memcpy, "load_average_before": load_before, "load_average_after": load_average(),
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

#[derive(Args, Debug)]
pub(crate) struct BatchArgs {
    /// Store root (statistics are read from OM4_means.zarr and OM4_stds.zarr beside it).
    store: PathBuf,
    /// Levels of the depth variables (Samudra's channels: 4 × levels + zos, then tauuo, tauvo, hfds).
    #[arg(long, default_value_t = 19)]
    levels: usize,
    #[arg(long, default_value_t = 1)]
    history: usize,
    #[arg(long, default_value_t = 4)]
    steps: usize,
    #[arg(long, default_value_t = 1)]
    batch_size: usize,
    /// Batches per repeat (the first ones of epoch 1, seed 15).
    #[arg(long, default_value_t = 4)]
    batches: usize,
    /// Timed repeats (after one untimed pass).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    /// Read threads (default: available cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Write the first batch's per-step inputs and labels as DIR/step{k}_{input,label}.npy.
    #[arg(long)]
    check_out: Option<PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

/// One host batch: plan, deduplicated reads into reused group buffers, prepare each plane once,
/// gather into the reused `out`; the normalization and gather run on the read pool too.
fn host_batch(
    store: &Om4Store,
    pool: &ReadPool,
    sets: &[om4_store::ChannelSet],
    sel: &Selection,
    preps: &[&om4_batch::Preparation],
    samples: &[om4_batch::Sample],
    (groups, out): &mut (Vec<Vec<f32>>, om4_batch::HostBatch),
) -> Result<om4_batch::PlaneCount> {
    let channels: Vec<usize> = sets.iter().map(om4_store::ChannelSet::len).collect();
    let plan = om4_batch::BatchPlan::new(samples, &om4_batch::Roles::samudra(), &channels)?;
    let grid = sets[0].grid();
    groups.resize_with(plan.groups().len(), Vec::new);
    for (g, buf) in plan.groups().iter().zip(groups.iter_mut()) {
        buf.resize(g.planes() * grid.plane(), 0.0);
        store.read_into(pool, &sets[g.source], sel, &g.times, buf)?;
    }
    pool.install(|| om4_batch::prepare_and_gather_into(&plan, groups, preps, grid, out))?;
    Ok(plan.planes())
}

pub(crate) fn batch(a: &BatchArgs) -> Result<()> {
    let opened = Instant::now();
    let store = Om4Store::open(&a.store)?;
    let dir = a.store.parent().map(PathBuf::from).unwrap_or_default();
    let names = om4_store::channel_names(a.levels);
    let n_prog = om4_store::DEPTH_VARS.len() * a.levels + 1;
    let sets = [store.channels(&names[..n_prog])?, store.channels(&names[n_prog..n_prog + 3])?];
    let means = om4_store::StatsStore::open(dir.join("OM4_means.zarr"))?;
    let stds = om4_store::StatsStore::open(dir.join("OM4_stds.zarr"))?;
    let preps = sets
        .iter()
        .map(|set| {
            Ok(om4_batch::Preparation::new(
                means.values(set)?,
                stds.values(set)?,
                store.masks(set)?,
                om4_batch::NormOrder::NormalizeThenMask,
                0.0,
            )?)
        })
        .collect::<Result<Vec<_>>>()?;
    let prep_refs: Vec<&om4_batch::Preparation> = preps.iter().collect();
    let sel = sets[0].all_rows();
    let spec = om4_batch::WindowSpec::new(a.history, a.steps, 1)?;
    let space = om4_batch::SampleSpace::single(spec, sel.len())?;
    let schedule = om4_batch::Schedule::training(a.batch_size, 15, None)?;
    let batches: Vec<Vec<om4_batch::Sample>> = schedule
        .epoch(&space.groups(), 1)
        .iter()
        .take(a.batches)
        .map(|b| space.samples(b))
        .collect::<Result<_, _>>()?;
    if batches.is_empty() {
        bail!("the store holds no complete batch");
    }
    let pool = ReadPool::new(a.threads.unwrap_or_else(crate::num_threads))?;
    let mut scratch = (Vec::new(), om4_batch::HostBatch::default());
    host_batch(&store, &pool, &sets, &sel, &prep_refs, &batches[0], &mut scratch)?;
    let open_plus_first_batch = opened.elapsed().as_secs_f64();
    let first = &scratch.1;
    if let Some(out) = &a.check_out {
        std::fs::create_dir_all(out)?;
        let g = first.grid;
        for (k, step) in first.steps.iter().enumerate() {
            crate::npy::write_f32(
                &out.join(format!("step{k}_input.npy")),
                &[first.batch, first.input_channels, g.y, g.x],
                &step.input,
            )?;
            crate::npy::write_f32(
                &out.join(format!("step{k}_label.npy")),
                &[first.batch, first.label_channels, g.y, g.x],
                &step.label,
            )?;
        }
        let samples: Vec<Vec<usize>> = batches.iter().map(|b| b.iter().map(|s| s.start).collect()).collect();
        std::fs::write(out.join("samples.json"), json!({"batches": samples}).to_string())?;
    }
    let mut per_batch_ms = Vec::new();
    let mut planes = om4_batch::PlaneCount::default();
    for _ in 0..a.repeats {
        for b in &batches {
            let t0 = Instant::now();
            let p = host_batch(&store, &pool, &sets, &sel, &prep_refs, b, &mut scratch)?;
            per_batch_ms.push(t0.elapsed().as_secs_f64() * 1e3);
            planes = p;
        }
    }
    let best = per_batch_ms.iter().copied().fold(f64::INFINITY, f64::min);
    let med = median(&mut per_batch_ms);
    let report = json!({
        "store": a.store, "history": a.history, "steps": a.steps, "batch_size": a.batch_size, "batches": batches.len(),
        "repeats": a.repeats, "ms_per_batch_best": best, "ms_per_batch_median": med,
        "planes_requested_last": planes.requested, "planes_unique_last": planes.unique,
        "open_plus_first_batch_s": open_plus_first_batch, "peak_rss_bytes": peak_rss_bytes(),
    });
    if a.json {
        println!("{report}");
    } else {
        println!(
            "{} batches of {} (hist {}, steps {}): best {best:.1} ms, median {med:.1} ms per batch; last batch read {} unique of {} requested planes",
            batches.len(),
            a.batch_size,
            a.history,
            a.steps,
            planes.unique,
            planes.requested
        );
    }
    Ok(())
}
