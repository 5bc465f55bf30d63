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

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ClientOptions, ObjectStoreExt};
use om4_store::{
    Om4Store, RequestOptions, S3Location, StatsStore, StoreLocation, SynthCodec, SynthConfig, SynthFormat, SynthLayout,
    channel_names,
};

/// The server's endpoint, or `None` (after saying the test is skipped).
fn endpoint(test: &str) -> Option<String> {
    match std::env::var("OM4_S3_ENDPOINT") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!("{test}: skipped: OM4_S3_ENDPOINT is not set (start a server: eval \"$(scripts/s3-server.sh)\")");
            None
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    // reqwest is built with rustls and no bundled provider (om4-store installs ring's when it
    // opens a remote store; these helpers may run first)
    let _ = rustls::crypto::ring::default_provider().install_default();
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// A fresh bucket on the server.
fn bucket(endpoint: &str, test: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let name = format!("om4-{test}-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
    // object_store has no bucket API: an unsigned CreateBucket request (moto accepts it), then a
    // policy that lets anyone read, as the public bucket Samudra's data is published in.
    let url = format!("{endpoint}/{name}");
    let policy = format!(
        r#"{{"Version": "2012-10-17", "Statement": [{{"Effect": "Allow", "Principal": "*",
            "Action": ["s3:GetObject", "s3:ListBucket"], "Resource": ["arn:aws:s3:::{name}", "arn:aws:s3:::{name}/*"]}}]}}"#
    );
    runtime().block_on(async {
        let http = reqwest::Client::new();
        let created = http.put(&url).send().await.map(|r| r.status());
        assert!(created.as_ref().is_ok_and(|s| s.is_success()), "creating bucket {url}: {created:?}");
        let public = http
            .put(format!("{url}?policy"))
            .header("content-type", "application/json")
            .body(policy)
            .send()
            .await
            .map(|r| r.status());
        assert!(public.as_ref().is_ok_and(|s| s.is_success()), "bucket policy of {url}: {public:?}");
    });
    name
}

fn client(endpoint: &str, bucket: &str) -> AmazonS3 {
    AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_bucket_name(bucket)
        .with_region("us-east-1")
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .with_client_options(ClientOptions::new().with_allow_http(true))
        .build()
        .unwrap()
}

/// Uploads every file under `dir` to `prefix/` in the bucket.
fn upload(endpoint: &str, bucket: &str, dir: &Path, prefix: &str) {
    let s3 = client(endpoint, bucket);
    let mut files = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() { todo.push(path) } else { files.push(path) }
        }
    }
    runtime().block_on(async {
        for file in files {
            let rel = file.strip_prefix(dir).unwrap().to_str().unwrap().replace('\\', "/");
            let key = ObjectPath::from(format!("{prefix}/{rel}"));
            s3.put(&key, std::fs::read(&file).unwrap().into()).await.unwrap();
        }
    });
}

fn delete(endpoint: &str, bucket: &str, key: &str) {
    let s3 = client(endpoint, bucket);
    runtime().block_on(async { s3.delete(&ObjectPath::from(key)).await.unwrap() });
}

fn s3(endpoint: &str, bucket: &str, path: &str) -> StoreLocation {
    StoreLocation::S3(S3Location {
        bucket: bucket.into(),
        path: path.into(),
        endpoint_url: Some(endpoint.into()),
        anon: true,
        ..S3Location::default()
    })
}

fn config(layout: SynthLayout, format: SynthFormat, shard: Option<usize>, consolidated: bool) -> SynthConfig {
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
        codec: SynthCodec::BloscLz4,
        ..SynthConfig::default()
    }
}

/// Uploads a synthetic store and checks the remote copy reads exactly as the local one.
fn same_as_local(test: &str, cfg: &SynthConfig) {
    let Some(endpoint) = endpoint(test) else { return };
    let dir = tempfile::tempdir().unwrap();
    let paths = common::make(dir.path(), cfg);
    let bucket = bucket(&endpoint, test);
    upload(&endpoint, &bucket, dir.path(), "runs/demo");

    let local = Om4Store::open(&paths.data).unwrap();
    let remote = Om4Store::open_location(&s3(&endpoint, &bucket, "runs/demo/OM4.zarr")).unwrap();
    assert_eq!(remote.root(), Path::new(&format!("s3://{bucket}/runs/demo/OM4.zarr")));
    assert_eq!(remote.arrays(), local.arrays());
    assert_eq!(remote.channel_names(), local.channel_names());
    assert_eq!(remote.time(), local.time());
    assert_eq!(remote.levels(), local.levels());
    assert!(remote.broken_arrays().is_empty());

    let names = channel_names(cfg.levels);
    let set = remote.channels(&names).unwrap();
    assert_eq!(set.direct_arrays(), 0, "remote arrays are read through zarrs");
    assert_eq!(
        common::bits(&common::read_all(&remote, cfg.levels)),
        common::bits(&common::read_all(&local, cfg.levels))
    );
    assert_eq!(remote.masks(&set).unwrap(), local.masks(&local.channels(&names).unwrap()).unwrap());

    let sibling = |name: &str| s3(&endpoint, &bucket, "runs/demo/OM4.zarr").sibling(name);
    for (name, path) in [("OM4_means.zarr", &paths.means), ("OM4_stds.zarr", &paths.stds)] {
        let remote_stats = StatsStore::open_location(&sibling(name)).unwrap();
        let local_stats = StatsStore::open(path).unwrap();
        assert_eq!(remote_stats.values_with_precision(&set).unwrap(), local_stats.values_with_precision(&set).unwrap());
    }
}

#[test]
fn flat_v2_consolidated() {
    same_as_local("flat-v2", &config(SynthLayout::Flat, SynthFormat::V2, None, true));
}

#[test]
fn compact_v2_unconsolidated() {
    same_as_local("compact-v2", &config(SynthLayout::Compact, SynthFormat::V2, None, false));
}

#[test]
fn flat_v3_sharded() {
    same_as_local("flat-v3-sharded", &config(SynthLayout::Flat, SynthFormat::V3, Some(4), false));
}

#[test]
fn compact_v3_sharded() {
    same_as_local("compact-v3-sharded", &config(SynthLayout::Compact, SynthFormat::V3, Some(4), false));
}

#[test]
fn missing_chunk_reads_as_nan() {
    let Some(endpoint) = endpoint("missing-chunk") else { return };
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(SynthLayout::Flat, SynthFormat::V2, None, true);
    let paths = common::make(dir.path(), &cfg);
    let bucket = bucket(&endpoint, "missing-chunk");
    upload(&endpoint, &bucket, dir.path(), "s");
    // time row 3 of thetao_0, gone from both copies
    std::fs::remove_file(paths.data.join("thetao_0/3.0.0")).unwrap();
    delete(&endpoint, &bucket, "s/OM4.zarr/thetao_0/3.0.0");

    let remote = Om4Store::open_location(&s3(&endpoint, &bucket, "s/OM4.zarr")).unwrap();
    let local = Om4Store::open(&paths.data).unwrap();
    let read = |store: &Om4Store| {
        let set = store.channels(&["thetao_0", "zos"]).unwrap();
        let sel = set.all_rows();
        let mut out = vec![0f32; 2 * set.grid().plane()];
        let pool = om4_store::ReadPool::new(2).unwrap();
        store.reader(&pool, &set, &sel).read(&[3], &mut out).unwrap();
        out
    };
    let (r, l) = (read(&remote), read(&local));
    assert!(r[..60].iter().all(|v| v.is_nan()), "the missing plane reads as NaN");
    assert!(r[60..].iter().any(|v| !v.is_nan()), "the other channel is read");
    assert_eq!(common::bits(&r), common::bits(&l));
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
