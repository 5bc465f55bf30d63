//! `om4 bench batch`: Samudra batches on the host through the pipeline, batch by batch.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Result, bail};
use clap::Args;
use om4_pipeline::{BatchSource, HostBatch, Loader, LoaderConfig, PrepareOn};
use om4_store::DataConfig;
use serde_json::json;

use super::{median, peak_rss_bytes};

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
    /// Batches the loader reads ahead on threads of its own (0: each batch read on demand, on
    /// this thread, as the peers read theirs; then a batch's time is its latency, otherwise the
    /// interval between batches as a consumer that computes nothing sees it).
    #[arg(long, default_value_t = 0)]
    prefetch: usize,
    /// Batch reads at once with `--prefetch` (the loader's `reads_in_flight`; default: 2 for a
    /// store on object storage, 1 for local files).
    #[arg(long)]
    reads_in_flight: Option<usize>,
    /// Read threads (default: available cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Write the first batch's per-step inputs and labels as DIR/step{k}_{input,label}.npy.
    #[arg(long)]
    check_out: Option<PathBuf>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    remote: crate::cmd::RemoteArgs,
}

pub(crate) fn run(a: &BatchArgs) -> Result<()> {
    let opened = Instant::now();
    let data = a.remote.location(&a.store)?;
    let mut config = DataConfig::at(data);
    config.source.levels = Some(a.levels);
    config.read_threads = a.threads.unwrap_or_else(crate::num_threads);
    let source = Arc::new(config.open()?.train);
    // A remote store's requests: opening the store (its statistics stores not counted), then per
    // timed batch.
    let open_requests = source.store().request_counts();
    let spec = om4_batch::WindowSpec::new(a.history, a.steps, 1)?;
    let space = om4_batch::SampleSpace::single(spec, source.time_len())?;
    let schedule = om4_batch::Schedule::training(a.batch_size, 15, None)?;
    // The pipeline's own path, by default batch by batch on this thread (no prefetch):
    // deduplicated reads into pooled buffers, then normalization, masks and the gather on the
    // read pool.
    let loading = LoaderConfig {
        prefetch_batches: a.prefetch,
        reads_in_flight: a.reads_in_flight,
        prepare_on: PrepareOn::Host,
        ..LoaderConfig::default()
    };
    let loader = Loader::new(Arc::clone(&source), space, schedule, loading);
    let n = loader.len().min(a.batches);
    if n == 0 {
        bail!("the store holds no complete batch");
    }
    let mut epoch = loader.epoch(1)?;
    let first = epoch.next().expect("n > 0")?;
    drop(epoch);
    let open_plus_first_batch = opened.elapsed().as_secs_f64();
    let HostBatch::Prepared(prepared) = &first.batch else { bail!("expected a batch prepared on the host") };
    if let Some(out) = &a.check_out {
        std::fs::create_dir_all(out)?;
        for (k, step) in prepared.steps.iter().enumerate() {
            om4_store::npy::write_f32(&out.join(format!("step{k}_input.npy")), &prepared.input_shape, &step.input)?;
            om4_store::npy::write_f32(&out.join(format!("step{k}_label.npy")), &prepared.label_shape, &step.label)?;
        }
        let samples: Vec<Vec<usize>> =
            loader.epoch(1)?.take(n).map(|b| b.map(|b| b.samples)).collect::<Result<_, _>>()?;
        std::fs::write(out.join("samples.json"), json!({"batches": samples}).to_string())?;
    }
    drop(first);
    // One untimed pass, then the timed repeats.
    for b in loader.epoch(1)?.take(n) {
        b?;
    }
    let mut per_batch_ms = Vec::new();
    let mut planes = om4_batch::PlaneCount::default();
    let timed_from = source.store().request_counts();
    // Per repeat, the interval between batches once the reads in flight have all come once (they
    // start together, so the first few arrive in a burst and single intervals mislead).
    let lanes = loader.reads_in_flight()?;
    let mut steady_ms = Vec::new();
    for _ in 0..a.repeats {
        let mut epoch = loader.epoch(1)?;
        let mut warm = None;
        for k in 0..n {
            let t0 = Instant::now();
            let b = epoch.next().expect("n batches")?;
            per_batch_ms.push(t0.elapsed().as_secs_f64() * 1e3);
            if k + 1 == lanes {
                warm = Some(Instant::now());
            }
            planes = b.telemetry.planes;
        }
        if let (Some(warm), true) = (warm, n > lanes) {
            steady_ms.push(warm.elapsed().as_secs_f64() * 1e3 / (n - lanes) as f64);
        }
    }
    // Every timed batch, the first of each epoch (its whole latency) included.
    let ms_per_batch_overall = per_batch_ms.iter().sum::<f64>() / per_batch_ms.len() as f64;
    let ms_per_batch_steady = (!steady_ms.is_empty()).then(|| median(&mut steady_ms));
    let requests = open_requests.zip(timed_from).zip(source.store().request_counts()).map(|((open, from), to)| {
        let timed = to.since(&from);
        let batches = (a.repeats * n) as f64;
        json!({
            "open": {"gets": open.gets, "heads": open.heads, "lists": open.lists, "rounds": open.rounds},
            "per_batch": {"gets": timed.gets as f64 / batches, "rounds": timed.rounds as f64 / batches,
                          "bytes": timed.bytes as f64 / batches},
            "in_flight_at_end": source.store().requests_in_flight(),
        })
    });
    let best = per_batch_ms.iter().copied().fold(f64::INFINITY, f64::min);
    let med = median(&mut per_batch_ms);
    let report = json!({
        "store": a.store, "history": a.history, "steps": a.steps, "batch_size": a.batch_size, "batches": n,
        "repeats": a.repeats, "prefetch": a.prefetch, "reads_in_flight": lanes,
        "ms_per_batch_best": best, "ms_per_batch_median": med, "ms_per_batch_overall": ms_per_batch_overall,
        "ms_per_batch_steady": ms_per_batch_steady,
        "buffer_allocations": {"raw": loader.buffers().allocations(), "prepared": loader.output_buffers().allocations()},
        "planes_requested_last": planes.requested, "planes_unique_last": planes.unique,
        "open_plus_first_batch_s": open_plus_first_batch, "peak_rss_bytes": peak_rss_bytes(), "requests": requests,
    });
    if a.json {
        println!("{report}");
    } else {
        println!(
            "{} batches of {} (hist {}, steps {}): best {best:.1} ms, median {med:.1} ms, overall \
             {ms_per_batch_overall:.1} ms per batch; last batch read {} unique of {} requested planes",
            n, a.batch_size, a.history, a.steps, planes.unique, planes.requested
        );
    }
    Ok(())
}
