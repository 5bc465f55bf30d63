//! `om4 bench`: what the benchmarks share (process measurements, the copy ceiling, medians).

pub(crate) mod batch;
pub(crate) mod read;

use std::time::Instant;

use om4_store::ReadPool;
use rayon::prelude::*;

pub(super) fn load_average() -> Option<String> {
    std::fs::read_to_string("/proc/loadavg").ok().map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
}

/// User + system CPU seconds of this process (Linux; clock ticks assumed 100 Hz).
pub(super) fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit(')').next()?.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// Peak resident memory of this process in bytes (Linux `VmHWM`).
pub(super) fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kb = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().trim_end_matches("kB").trim();
    kb.parse::<u64>().ok().map(|k| k * 1024)
}

/// Best GB/s of copying an in-memory copy of `buf` into `buf` on the pool's threads, in pieces of
/// `piece` values, over `repeats` timed rounds after one untimed one: what a reader that found
/// every plane already in memory would reach.
pub(super) fn copy_ceiling(pool: &ReadPool, buf: &mut [f32], piece: usize, repeats: usize) -> f64 {
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

pub(super) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 }
}
