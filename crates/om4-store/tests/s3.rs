//! Stores on S3, against a local S3 server on loopback (feature `s3`).
//!
//! Start the server with `eval "$(scripts/s3-server.sh)"` (moto, 127.0.0.1 only), which exports
//! `OM4_S3_ENDPOINT`; then `cargo test -p om4-store --features s3 --test s3`. Without
//! `OM4_S3_ENDPOINT` every test prints that it was skipped and checks nothing else.
//!
//! Each test makes its own bucket, uploads synthetic stores written to a temporary directory, and
//! holds the remote store to the local copy: same arrays, coordinates, statistics and masks, and
//! bit-identical planes.
#![allow(missing_docs)]

mod common;
mod s3_support;

use s3_support::{bucket, delete, endpoint, runtime, upload};

use std::path::Path;

use om4_store::{
    Codec, Om4Store, RequestOptions, S3Location, StatsStore, StoreLocation, SynthConfig, SynthLayout, ZarrFormat,
    channel_names,
};

fn s3(endpoint: &str, bucket: &str, path: &str) -> StoreLocation {
    StoreLocation::S3(S3Location {
        bucket: bucket.into(),
        path: path.into(),
        endpoint_url: Some(endpoint.into()),
        anon: true,
        ..S3Location::default()
    })
}

fn config(layout: SynthLayout, format: ZarrFormat, shard: Option<usize>, consolidated: bool) -> SynthConfig {
    SynthConfig {
        ny: 6,
        nx: 10,
        times: 8,
        levels: 3,
        layout,
        format,
        shard,
        time_chunk: 1,
        consolidated,
        codec: Codec::BloscLz4,
        ..SynthConfig::default()
    }
}

/// The same objects over plain HTTP: a public bucket's object is `ENDPOINT/BUCKET/KEY`, as on
/// S3 itself (`https://BUCKET.s3.amazonaws.com/KEY`) or Google Cloud Storage.
fn http(endpoint: &str, bucket: &str, path: &str) -> StoreLocation {
    StoreLocation::parse(&format!("{endpoint}/{bucket}/{path}")).unwrap()
}

/// Holds a remote store to its local copy: the same arrays, coordinates and masks, and every
/// plane bit-identical by om4's direct path and through zarrs.
fn reads_as_local(remote: &Om4Store, local: &Om4Store, levels: usize, what: &str) {
    assert_eq!(remote.arrays(), local.arrays(), "{what}");
    assert_eq!(remote.channel_names(), local.channel_names(), "{what}");
    assert_eq!(remote.time(), local.time(), "{what}");
    assert_eq!(remote.levels(), local.levels(), "{what}");
    assert!(remote.broken_arrays().is_empty(), "{what}");
    let names = channel_names(levels);
    let set = remote.channels(&names).unwrap();
    // blosc one-plane chunks: decoded directly from the fetched bytes, as locally
    assert!(set.direct_arrays() > 0, "{what}");
    assert_eq!(set.direct_arrays(), local.channels(&names).unwrap().direct_arrays(), "{what}");
    let expected = common::bits(&common::read_all(local, levels));
    assert_eq!(common::bits(&common::read_all(remote, levels)), expected, "{what}: direct decoding");
    // and through zarrs, the reference the direct path is held to
    let sel = remote.select(&om4_store::DateRange::ALL).unwrap();
    let positions: Vec<usize> = (0..sel.len()).collect();
    let mut via_zarrs = vec![0f32; positions.len() * set.len() * set.grid().plane()];
    let pool = om4_store::ReadPool::new(2).unwrap();
    remote.reader(&pool, &set.zarrs_only(), &sel).read(&positions, &mut via_zarrs).unwrap();
    assert_eq!(common::bits(&via_zarrs), expected, "{what}: through zarrs");
    assert_eq!(remote.masks(&set).unwrap(), local.masks(&local.channels(&names).unwrap()).unwrap(), "{what}");
}

/// Uploads a synthetic store and checks the remote copy reads exactly as the local one, over S3
/// and (consolidated metadata) over plain HTTP; unconsolidated, HTTP says it cannot list.
fn same_as_local(test: &str, cfg: &SynthConfig) {
    let Some(endpoint) = endpoint(test) else { return };
    let dir = tempfile::tempdir().unwrap();
    let paths = common::make(dir.path(), cfg);
    let bucket = bucket(&endpoint, test);
    upload(&endpoint, &bucket, dir.path(), "runs/demo");

    let local = Om4Store::open(&paths.data).unwrap();
    let remote = Om4Store::open_location(&s3(&endpoint, &bucket, "runs/demo/OM4.zarr")).unwrap();
    assert_eq!(remote.root(), Path::new(&format!("s3://{bucket}/runs/demo/OM4.zarr")));
    reads_as_local(&remote, &local, cfg.levels, "s3");
    let over_http = http(&endpoint, &bucket, "runs/demo/OM4.zarr");
    if cfg.consolidated {
        let remote = Om4Store::open_location(&over_http).unwrap();
        assert_eq!(remote.root(), Path::new(&format!("{endpoint}/{bucket}/runs/demo/OM4.zarr")));
        reads_as_local(&remote, &local, cfg.levels, "http");
    } else {
        let e = Om4Store::open_location(&over_http).unwrap_err().to_string();
        assert!(e.contains("consolidated metadata") && e.contains(&over_http.to_string()), "{e}");
        eprintln!("unconsolidated over http: {e}");
    }

    let names = channel_names(cfg.levels);
    let set = remote.channels(&names).unwrap();
    let expected = common::bits(&common::read_all(&local, cfg.levels));
    let pool = om4_store::ReadPool::new(2).unwrap();
    // Few requests in flight: a read of many waves, each decoding while the next ones fetch,
    // shards split across waves.
    let StoreLocation::S3(mut narrow) = s3(&endpoint, &bucket, "runs/demo/OM4.zarr") else { unreachable!() };
    narrow.requests.concurrency = Some(3);
    let narrow = Om4Store::open_location(&StoreLocation::S3(narrow)).unwrap();
    assert_eq!(common::bits(&common::read_all(&narrow, cfg.levels)), expected, "in many waves");
    // Reads in flight at once (one per time step, sharing the store's requests in flight and one
    // pool, each in many waves): each gets its own bits.
    let (narrow_set, narrow_sel) =
        (narrow.channels(&names).unwrap(), narrow.select(&om4_store::DateRange::ALL).unwrap());
    let per_step = narrow_set.len() * narrow_set.grid().plane();
    let reads: Vec<Vec<f32>> = std::thread::scope(|scope| {
        let (narrow, set, sel, pool) = (&narrow, &narrow_set, &narrow_sel, &pool);
        let handles: Vec<_> = (0..sel.len())
            .map(|p| {
                scope.spawn(move || {
                    let mut out = vec![0f32; per_step];
                    narrow.reader(pool, set, sel).read(&[p], &mut out).unwrap();
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(common::bits(&reads.concat()), expected, "reads in flight at once");

    let mut roots = vec![s3(&endpoint, &bucket, "runs/demo/OM4.zarr")];
    if cfg.consolidated {
        roots.push(over_http);
    }
    for root in roots {
        for (name, path) in [("OM4_means.zarr", &paths.means), ("OM4_stds.zarr", &paths.stds)] {
            let remote_stats = StatsStore::open_location(&root.sibling(name)).unwrap();
            let local_stats = StatsStore::open(path).unwrap();
            assert_eq!(
                remote_stats.values_with_precision(&set).unwrap(),
                local_stats.values_with_precision(&set).unwrap(),
                "{root}"
            );
        }
    }
}

#[test]
fn flat_v2_consolidated() {
    same_as_local("flat-v2", &config(SynthLayout::Flat, ZarrFormat::V2, None, true));
}

#[test]
fn compact_v2_unconsolidated() {
    same_as_local("compact-v2", &config(SynthLayout::Compact, ZarrFormat::V2, None, false));
}

#[test]
fn flat_v3_sharded() {
    same_as_local("flat-v3-sharded", &config(SynthLayout::Flat, ZarrFormat::V3, Some(4), false));
}

#[test]
fn compact_v3_sharded_consolidated() {
    same_as_local("compact-v3-sharded", &config(SynthLayout::Compact, ZarrFormat::V3, Some(4), true));
}

/// Deletes `key` (under the store) from both copies, then reads time row 3 of `thetao_0` and
/// `zos` remotely (S3 and HTTP), directly and through zarrs: the plane in `key` is NaN, as locally.
fn missing_reads_as_nan(test: &str, cfg: &SynthConfig, key: &str) {
    let Some(endpoint) = endpoint(test) else { return };
    let dir = tempfile::tempdir().unwrap();
    let paths = common::make(dir.path(), cfg);
    let bucket = bucket(&endpoint, test);
    upload(&endpoint, &bucket, dir.path(), "s");
    std::fs::remove_file(paths.data.join(key)).unwrap();
    delete(&endpoint, &bucket, &format!("s/OM4.zarr/{key}"));

    let local = Om4Store::open(&paths.data).unwrap();
    let read = |store: &Om4Store, zarrs_only: bool| {
        let set = store.channels(&["thetao_0", "zos"]).unwrap();
        let set = if zarrs_only { set.zarrs_only() } else { set };
        let sel = set.all_rows();
        let mut out = vec![0f32; 2 * set.grid().plane()];
        let pool = om4_store::ReadPool::new(2).unwrap();
        store.reader(&pool, &set, &sel).read(&[3], &mut out).unwrap();
        out
    };
    let l = read(&local, false);
    // over S3 and over plain HTTP (a 404 from either client)
    for at in [s3(&endpoint, &bucket, "s/OM4.zarr"), http(&endpoint, &bucket, "s/OM4.zarr")] {
        let remote = Om4Store::open_location(&at).unwrap();
        for zarrs_only in [false, true] {
            let r = read(&remote, zarrs_only);
            assert!(r[..60].iter().all(|v| v.is_nan()), "{at}: the missing plane reads as NaN");
            assert!(r[60..].iter().any(|v| !v.is_nan()), "{at}: the other channel is read");
            assert_eq!(common::bits(&r), common::bits(&l), "{at}: zarrs only: {zarrs_only}");
        }
    }
}

#[test]
fn missing_chunk_reads_as_nan() {
    // time row 3 of thetao_0
    missing_reads_as_nan("missing-chunk", &config(SynthLayout::Flat, ZarrFormat::V2, None, true), "thetao_0/3.0.0");
}

#[test]
fn missing_shard_reads_as_nan() {
    // time rows 0–3 of thetao_0: one shard
    let cfg = config(SynthLayout::Flat, ZarrFormat::V3, Some(4), true);
    missing_reads_as_nan("missing-shard", &cfg, "thetao_0/c/0/0/0");
}

#[test]
fn wrong_bucket_or_key_is_a_clear_error() {
    let Some(endpoint) = endpoint("wrong-location") else { return };
    let bucket = bucket(&endpoint, "wrong-location");
    let missing_bucket = format!("{bucket}-absent");
    let e = Om4Store::open_location(&s3(&endpoint, &missing_bucket, "OM4.zarr")).unwrap_err().to_string();
    assert!(e.contains(&format!("s3://{missing_bucket}/OM4.zarr")), "{e}");
    eprintln!("missing bucket: {e}");
    let e = Om4Store::open_location(&s3(&endpoint, &bucket, "nothing/OM4.zarr")).unwrap_err().to_string();
    assert!(e.contains(&format!("s3://{bucket}/nothing/OM4.zarr")) && e.contains("no Zarr group"), "{e}");
    eprintln!("missing key: {e}");
    let nothing = http(&endpoint, &bucket, "nothing/OM4.zarr");
    let e = Om4Store::open_location(&nothing).unwrap_err().to_string();
    assert!(e.contains(&nothing.to_string()) && e.contains("no Zarr group"), "{e}");
    eprintln!("missing key over http: {e}");
}

#[test]
fn unreachable_server_fails_within_the_deadline_naming_the_key() {
    let Some(_) = endpoint("unreachable") else { return };
    // A loopback port with nothing listening: every request is refused, retried, then reported.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let loc = StoreLocation::S3(S3Location {
        bucket: "b".into(),
        path: "OM4.zarr".into(),
        endpoint_url: Some(format!("http://127.0.0.1:{port}")),
        anon: true,
        requests: RequestOptions {
            timeout_s: Some(2.0),
            connect_timeout_s: Some(1.0),
            max_retries: Some(2),
            retry_window_s: Some(5.0),
            ..RequestOptions::default()
        },
        ..S3Location::default()
    });
    let t0 = std::time::Instant::now();
    let e = Om4Store::open_location(&loc).unwrap_err().to_string();
    assert!(t0.elapsed().as_secs_f64() < 15.0, "took {:?}", t0.elapsed());
    assert!(e.contains("s3://b/OM4.zarr/.zmetadata"), "{e}");
    eprintln!("unreachable: {e}");
}

#[test]
fn s3_url_as_a_path() {
    // `Om4Store::open` takes `s3://` text too (options from the environment), as a
    // `SourceConfig` path or a CLI argument gives it; a malformed URL is an error, not a path.
    let e = Om4Store::open("s3:///OM4.zarr").unwrap_err().to_string();
    assert!(e.contains("needs a bucket"), "{e}");
    let e = Om4Store::open("gs://bucket/OM4.zarr").unwrap_err().to_string();
    assert!(e.contains("unsupported scheme"), "{e}");
}

/// `s3-proxy.py` in front of the server: latency and faults (see its docs); killed when dropped.
struct Proxy {
    child: std::process::Child,
    url: String,
}

impl Proxy {
    fn start(upstream: &str, args: &[&str]) -> Self {
        use std::io::BufRead;
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/s3-proxy.py");
        let mut child = std::process::Command::new("python3")
            .arg(script)
            .args(["--upstream", upstream])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3 scripts/s3-proxy.py");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().strip_prefix("port ").unwrap_or_else(|| panic!("proxy said {line:?}"));
        Self { child, url: format!("http://127.0.0.1:{port}") }
    }

    /// Requests forwarded and faults injected so far.
    fn stats(&self) -> serde_json::Value {
        runtime().block_on(async {
            let r = reqwest::get(format!("{}/__proxy/stats", self.url)).await.unwrap();
            serde_json::from_slice(&r.bytes().await.unwrap()).unwrap()
        })
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A store uploaded to a fresh bucket: (temporary dir, local paths, bucket).
fn uploaded(endpoint: &str, test: &str, cfg: &SynthConfig) -> (tempfile::TempDir, om4_store::SynthPaths, String) {
    let dir = tempfile::tempdir().unwrap();
    let paths = common::make(dir.path(), cfg);
    let bucket = bucket(endpoint, test);
    upload(endpoint, &bucket, dir.path(), "s");
    (dir, paths, bucket)
}

fn with_requests(mut loc: StoreLocation, requests: RequestOptions) -> StoreLocation {
    *loc.requests_mut().expect("a remote location") = requests;
    loc
}

fn quick_retries() -> RequestOptions {
    RequestOptions {
        timeout_s: Some(1.0),
        connect_timeout_s: Some(1.0),
        max_retries: Some(3),
        retry_window_s: Some(10.0),
        ..RequestOptions::default()
    }
}

/// The requests of one read of every plane at `positions` (the channels opened before counting).
fn counted_read(store: &Om4Store, levels: usize, positions: &[usize]) -> om4_store::RequestCounts {
    let set = store.channels(&channel_names(levels)).unwrap();
    let before = store.request_counts().unwrap();
    let mut out = vec![0f32; positions.len() * set.len() * set.grid().plane()];
    let pool = om4_store::ReadPool::new(2).unwrap();
    store.reader(&pool, &set, &set.all_rows()).read(positions, &mut out).unwrap();
    store.request_counts().unwrap().since(&before)
}

/// Reads every plane of `positions` through one reader call.
fn read_positions(store: &Om4Store, levels: usize, positions: &[usize]) -> om4_store::Result<Vec<f32>> {
    let set = store.channels(&channel_names(levels)).unwrap();
    let sel = set.all_rows();
    let mut out = vec![0f32; positions.len() * set.len() * set.grid().plane()];
    let pool = om4_store::ReadPool::new(2).unwrap();
    store.reader(&pool, &set, &sel).read(positions, &mut out)?;
    Ok(out)
}

#[test]
fn requests_per_open_and_per_read() {
    let Some(endpoint) = endpoint("requests") else { return };
    // Flat v2, consolidated, one plane per chunk: opening is `.zmetadata` + the time and lev
    // chunks; a read is one GET per plane, all in one round.
    let cfg = config(SynthLayout::Flat, ZarrFormat::V2, None, true);
    let (_dir, _paths, bucket) = uploaded(&endpoint, "requests", &cfg);
    let store = Om4Store::open_location(&s3(&endpoint, &bucket, "s/OM4.zarr")).unwrap();
    let open = store.request_counts().unwrap();
    eprintln!("open (flat v2, consolidated): {open:?}");
    assert_eq!((open.gets, open.heads, open.lists), (3, 0, 0), "{open:?}");
    let channels = channel_names(cfg.levels).len() as u64;
    // the land masks of all channels: one GET per mask array, all in one round
    let set = store.channels(&channel_names(cfg.levels)).unwrap();
    let before = store.request_counts().unwrap();
    store.masks(&set).unwrap();
    let masks = store.request_counts().unwrap().since(&before);
    assert_eq!((masks.gets, masks.rounds), (cfg.levels as u64, 1), "{masks:?}");
    let read = counted_read(&store, cfg.levels, &[0, 1, 2]);
    assert_eq!((read.gets, read.heads, read.lists, read.rounds), (3 * channels, 0, 0, 1), "{read:?}");
    // the same objects over plain HTTP: the same requests
    let store = Om4Store::open_location(&http(&endpoint, &bucket, "s/OM4.zarr")).unwrap();
    let open = store.request_counts().unwrap();
    assert_eq!((open.gets, open.heads, open.lists), (3, 0, 0), "over http: {open:?}");
    let read = counted_read(&store, cfg.levels, &[0, 1, 2]);
    assert_eq!((read.gets, read.heads, read.lists, read.rounds), (3 * channels, 0, 0, 1), "over http: {read:?}");

    // Flat v3 sharded (4 times per shard): a shard's index, then the inner chunk; the indexes stay
    // cached, so a later read in the same shards is one round of inner chunks, and adjacent inner
    // chunks of one shard go as one ranged GET.
    let cfg = config(SynthLayout::Flat, ZarrFormat::V3, Some(4), false);
    let (_dir, _paths, bucket) = uploaded(&endpoint, "requests-sharded", &cfg);
    let store = Om4Store::open_location(&s3(&endpoint, &bucket, "s/OM4.zarr")).unwrap();
    let open = store.request_counts().unwrap();
    eprintln!("open (flat v3 sharded, not consolidated): {open:?}");
    // a listing, then every array's zarr.json in one round and the coordinates in another
    assert_eq!((open.lists, open.rounds), (1, 2), "{open:?}");
    let first = counted_read(&store, cfg.levels, &[0]);
    assert_eq!((first.gets, first.rounds), (2 * channels, 2), "{first:?}");
    let second = counted_read(&store, cfg.levels, &[1, 2]);
    assert_eq!((second.gets, second.rounds), (channels, 1), "{second:?}");

    // Flat v3 sharded with consolidated metadata: opening lists nothing and reads the root
    // zarr.json (after looking for a v2 .zmetadata) and the coordinates.
    let cfg = config(SynthLayout::Flat, ZarrFormat::V3, Some(4), true);
    let (_dir, _paths, bucket) = uploaded(&endpoint, "requests-v3-consolidated", &cfg);
    let store = Om4Store::open_location(&s3(&endpoint, &bucket, "s/OM4.zarr")).unwrap();
    let open = store.request_counts().unwrap();
    eprintln!("open (flat v3 sharded, consolidated): {open:?}");
    assert_eq!(open.lists, 0, "{open:?}");
    assert!(open.gets <= 6, "{open:?}");
    let first = counted_read(&store, cfg.levels, &[0]);
    assert_eq!((first.gets, first.rounds), (2 * channels, 2), "opening the channels reads nothing: {first:?}");
}

/// The process's soft limit on open files, from /proc (Linux), if it can be read.
fn open_file_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

#[test]
fn requests_in_flight_follow_the_round_trip_unless_set() {
    let Some(endpoint) = endpoint("in-flight") else { return };
    let cfg = config(SynthLayout::Flat, ZarrFormat::V2, None, true);
    let (_dir, paths, bucket) = uploaded(&endpoint, "in-flight", &cfg);
    // every request answered 100 ms late: with the test's small chunks Little's law asks for more
    // than the floor, up to the ceiling (and half the open-file limit)
    let proxy = Proxy::start(&endpoint, &["--latency-ms", "100"]);
    let remote = Om4Store::open_location(&s3(&proxy.url, &bucket, "s/OM4.zarr")).unwrap();
    let positions: Vec<usize> = (0..cfg.times).collect();
    let local = read_positions(&Om4Store::open(&paths.data).unwrap(), cfg.levels, &positions).unwrap();
    assert_eq!(common::bits(&read_positions(&remote, cfg.levels, &positions).unwrap()), common::bits(&local));
    let n = remote.requests_in_flight().unwrap();
    eprintln!("in flight after reads at 100 ms: {n}; open-file limit {:?}", open_file_limit());
    let ceiling = RequestOptions::AUTO_MAX_CONCURRENCY.min(open_file_limit().map_or(usize::MAX, |n| n / 2));
    if ceiling > RequestOptions::AUTO_MIN_CONCURRENCY {
        assert!(n > RequestOptions::AUTO_MIN_CONCURRENCY && n <= ceiling, "{n} in flight, ceiling {ceiling}");
    } else {
        assert_eq!(n, ceiling);
    }
    // set: kept, whatever the round trips
    let set = RequestOptions { concurrency: Some(7), ..RequestOptions::default() };
    let fixed = Om4Store::open_location(&with_requests(s3(&proxy.url, &bucket, "s/OM4.zarr"), set)).unwrap();
    assert_eq!(common::bits(&read_positions(&fixed, cfg.levels, &positions).unwrap()), common::bits(&local));
    assert_eq!(fixed.requests_in_flight(), Some(7));
    // a local store has none
    assert_eq!(Om4Store::open(&paths.data).unwrap().requests_in_flight(), None);
}

#[test]
fn injected_faults_are_retried_to_the_same_bits() {
    let Some(endpoint) = endpoint("faults") else { return };
    for (test, cfg, faults) in [
        (
            "faults-v2",
            config(SynthLayout::Flat, ZarrFormat::V2, None, true),
            ["--once", "--fail-every", "3", "--fail-status", "503", "--reset-every", "7"],
        ),
        (
            "faults-v3",
            config(SynthLayout::Compact, ZarrFormat::V3, Some(4), false),
            ["--once", "--fail-every", "4", "--fail-status", "500", "--reset-every", "9"],
        ),
    ] {
        let (_dir, paths, bucket) = uploaded(&endpoint, test, &cfg);
        let local = Om4Store::open(&paths.data).unwrap();
        let positions: Vec<usize> = (0..cfg.times).collect();
        let l = read_positions(&local, cfg.levels, &positions).unwrap();
        // over S3, and (consolidated) over plain HTTP: the same retries, each behind a fresh proxy
        let at: [fn(&str, &str, &str) -> StoreLocation; 2] = [s3, http];
        for location in at.into_iter().take(if cfg.consolidated { 2 } else { 1 }) {
            let proxy = Proxy::start(&endpoint, &faults);
            let loc = with_requests(location(&proxy.url, &bucket, "s/OM4.zarr"), quick_retries());
            let remote = Om4Store::open_location(&loc).unwrap();
            let r = read_positions(&remote, cfg.levels, &positions).unwrap();
            assert_eq!(common::bits(&r), common::bits(&l), "{test}: {loc}");
            let stats = proxy.stats();
            eprintln!("{test}, {loc}: {stats}");
            assert!(stats["failed"].as_u64() > Some(0) && stats["reset"].as_u64() > Some(0), "{test}: {loc}: {stats}");
        }
    }
}

#[test]
fn a_stalled_response_is_retried_after_the_deadline() {
    let Some(endpoint) = endpoint("stall") else { return };
    let cfg = config(SynthLayout::Flat, ZarrFormat::V2, None, true);
    let (_dir, paths, bucket) = uploaded(&endpoint, "stall", &cfg);
    // every 5th chunk request answers after 30 s; the request deadline is 1 s
    let proxy =
        Proxy::start(&endpoint, &["--once", "--stall-every", "5", "--stall-s", "30", "--match", r"/\d+\.\d+\.\d+$"]);
    let loc = with_requests(s3(&proxy.url, &bucket, "s/OM4.zarr"), quick_retries());
    let remote = Om4Store::open_location(&loc).unwrap();
    let t0 = std::time::Instant::now();
    let r = read_positions(&remote, cfg.levels, &[0, 1, 2, 3]).unwrap();
    let took = t0.elapsed();
    let l = read_positions(&Om4Store::open(&paths.data).unwrap(), cfg.levels, &[0, 1, 2, 3]).unwrap();
    assert_eq!(common::bits(&r), common::bits(&l));
    let stats = proxy.stats();
    eprintln!("stall: {stats}, read took {took:?}");
    assert!(stats["stalled"].as_u64() > Some(0), "{stats}");
    assert!(took.as_secs_f64() < 25.0, "took {took:?}");
}

#[test]
fn a_request_that_keeps_failing_ends_the_read_with_an_error_naming_the_chunk() {
    let Some(endpoint) = endpoint("failing") else { return };
    let cfg = config(SynthLayout::Flat, ZarrFormat::V2, None, true);
    let (_dir, _paths, bucket) = uploaded(&endpoint, "failing", &cfg);
    for (faults, what) in [
        (vec!["--fail-every", "1", "--fail-status", "500", "--match", r"thetao_0/3\.0\.0$"], "500"),
        (vec!["--stall-every", "1", "--stall-s", "30", "--match", r"thetao_0/3\.0\.0$"], "timed out"),
    ] {
        let proxy = Proxy::start(&endpoint, &faults);
        let requests = RequestOptions { max_retries: Some(2), retry_window_s: Some(4.0), ..quick_retries() };
        let remote = Om4Store::open_location(&with_requests(s3(&proxy.url, &bucket, "s/OM4.zarr"), requests)).unwrap();
        let t0 = std::time::Instant::now();
        let e = read_positions(&remote, cfg.levels, &[2, 3]).unwrap_err();
        let took = t0.elapsed();
        let message = format!("{e}: {}", std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_default());
        eprintln!("failing ({what}, {took:?}): {message}");
        assert!(matches!(&e, om4_store::Error::Read { array, row: 3, .. } if array == "thetao_0"), "{e:?}");
        assert!(message.contains(&format!("s3://{bucket}/s/OM4.zarr/thetao_0/3.0.0")), "{message}");
        assert!(message.to_lowercase().contains(what), "{message}");
        assert!(took.as_secs_f64() < 15.0, "took {took:?}");
        // the store stays usable: other rows read
        read_positions(&remote, cfg.levels, &[4]).unwrap();
    }
}
