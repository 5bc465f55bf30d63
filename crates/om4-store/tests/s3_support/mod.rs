//! Helpers of the S3 loopback tests (om4-store's and the command line's): the server from
//! `scripts/s3-server.sh`, fresh public buckets, uploads.
#![allow(dead_code, unreachable_pub)]

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ClientOptions, ObjectStoreExt};

/// The server's endpoint, or `None` (after saying the test is skipped).
pub fn endpoint(test: &str) -> Option<String> {
    match std::env::var("OM4_S3_ENDPOINT") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            eprintln!("{test}: skipped: OM4_S3_ENDPOINT is not set (start a server: eval \"$(scripts/s3-server.sh)\")");
            None
        }
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    // reqwest is built with rustls and no bundled provider (om4-store installs ring's when it
    // opens a remote store; these helpers may run first)
    let _ = rustls::crypto::ring::default_provider().install_default();
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// A fresh bucket on the server.
pub fn bucket(endpoint: &str, test: &str) -> String {
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

/// The credentials server of `scripts/s3-server.sh`: (endpoint, key id, secret), or `None` (after
/// saying the test is skipped).
pub fn auth_server(test: &str) -> Option<(String, String, String)> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    match (var("OM4_S3_AUTH_ENDPOINT"), var("OM4_S3_AUTH_KEY_ID"), var("OM4_S3_AUTH_SECRET")) {
        (Some(e), Some(k), Some(s)) => Some((e, k, s)),
        _ => {
            eprintln!(
                "{test}: skipped: OM4_S3_AUTH_* are not set (start the servers: eval \"$(scripts/s3-server.sh)\")"
            );
            None
        }
    }
}

fn client(endpoint: &str, bucket: &str, key: (&str, &str)) -> AmazonS3 {
    let _ = rustls::crypto::ring::default_provider().install_default();
    AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_bucket_name(bucket)
        .with_region("us-east-1")
        .with_access_key_id(key.0)
        .with_secret_access_key(key.1)
        .with_client_options(ClientOptions::new().with_allow_http(true))
        .build()
        .unwrap()
}

/// Uploads every file under `dir` to `prefix/` in the bucket.
pub fn upload(endpoint: &str, bucket: &str, dir: &Path, prefix: &str) {
    upload_as(endpoint, bucket, dir, prefix, ("test", "test"));
}

/// Uploads every file under `dir` to `prefix/` in the bucket, signed with `key` (id, secret).
pub fn upload_as(endpoint: &str, bucket: &str, dir: &Path, prefix: &str, key: (&str, &str)) {
    let s3 = client(endpoint, bucket, key);
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

pub fn delete(endpoint: &str, bucket: &str, key: &str) {
    let s3 = client(endpoint, bucket, ("test", "test"));
    runtime().block_on(async { s3.delete(&ObjectPath::from(key)).await.unwrap() });
}
