//! The object-storage benchmark's S3 server: the folders under `ROOT` are buckets and the files
//! under them objects, served read-only (GET with byte ranges, HEAD, ListObjectsV2) on
//! 127.0.0.1 through the `s3s` crate's S3 protocol, with signatures checked when a key is given.
//! Every request is answered `--delay-ms` after it arrived: the per-request latency of object
//! storage without a proxy in between.
//!
//! ```text
//! om4-bench-s3 ROOT [--delay-ms MS] [--key ID:SECRET]
//! ```
//!
//! Prints `port PORT` once it listens, then serves until killed.
//!
//! Why not a general S3 server: on a machine of two cores the server shares the CPU with the
//! readers it serves, and what it spends is taken from them (a real object store's CPU is not
//! the reader's). So it costs as little per byte as it can: every object is read into memory
//! once, at start (the benchmark's stores are a few hundred MB), and an answer is a slice of it,
//! sent as one body; the files must not change while it serves. Listings walk the folder.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use s3s::dto::{
    CommonPrefix, ETag, GetObjectInput, GetObjectOutput, HeadObjectInput, HeadObjectOutput, ListObjectsV2Input,
    ListObjectsV2Output, Object, StreamingBlob, Timestamp,
};
use s3s::service::S3ServiceBuilder;
use s3s::{S3, S3Request, S3Response, S3Result, s3_error};

struct Folder {
    root: PathBuf,
    /// The folders directly under `root`, at start.
    buckets: std::collections::HashSet<String>,
    /// Every file under `root`, by path, read at start, with its metadata.
    objects: HashMap<PathBuf, (Bytes, std::fs::Metadata)>,
}

impl Folder {
    /// The file of `key` in `bucket`: no component may climb out of the bucket.
    fn path(&self, bucket: &str, key: &str) -> S3Result<PathBuf> {
        let bucket_dir = self.bucket(bucket)?;
        let rel = Path::new(key);
        if key.is_empty() || !rel.components().all(|c| matches!(c, Component::Normal(_))) {
            return Err(s3_error!(InvalidArgument, "bad key {key:?}"));
        }
        Ok(bucket_dir.join(rel))
    }

    /// The object `key` of `bucket` and its file's metadata, or NoSuchKey.
    fn object(&self, bucket: &str, key: &str) -> S3Result<&(Bytes, std::fs::Metadata)> {
        self.objects.get(&self.path(bucket, key)?).ok_or_else(|| s3_error!(NoSuchKey))
    }

    fn bucket(&self, bucket: &str) -> S3Result<PathBuf> {
        if bucket.contains(['/', '\\']) || bucket.starts_with('.') || !self.buckets.contains(bucket) {
            return Err(s3_error!(NoSuchBucket));
        }
        Ok(self.root.join(bucket))
    }
}

fn modified(m: &std::fs::Metadata) -> Option<Timestamp> {
    m.modified().ok().map(Timestamp::from)
}

/// An entity tag from the file's length and modification time (readers compare tags only: an
/// MD5 of every answer would cost the server more than the reader's whole decode).
fn e_tag(m: &std::fs::Metadata) -> Option<ETag> {
    let t = m.modified().ok()?.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(ETag::Strong(format!("{:x}-{:x}", t.as_nanos(), m.len())))
}

/// Every file under `dir`, as keys relative to `base` with `/` separators.
fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, std::fs::Metadata)>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let meta = std::fs::metadata(&path)?; // follows links: the bucket may link to stores
        if meta.is_dir() {
            walk(base, &path, out)?;
        } else if let Ok(rel) = path.strip_prefix(base) {
            let key: Vec<_> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            out.push((key.join("/"), meta));
        }
    }
    Ok(())
}

#[async_trait::async_trait]
impl S3 for Folder {
    async fn get_object(&self, req: S3Request<GetObjectInput>) -> S3Result<S3Response<GetObjectOutput>> {
        let input = req.input;
        let (object, meta) = self.object(&input.bucket, &input.key)?;
        let len = meta.len();
        let range = match &input.range {
            Some(r) => r.check(len).map_err(|_| s3_error!(InvalidRange))?,
            None => 0..len,
        };
        let body = object.slice(range.start as usize..range.end as usize);
        let content_range =
            input.range.is_some().then(|| format!("bytes {}-{}/{len}", range.start, range.end.max(1) - 1));
        let output = GetObjectOutput {
            content_length: Some(body.len() as i64),
            content_range,
            last_modified: modified(meta),
            e_tag: e_tag(meta),
            body: Some(StreamingBlob::wrap(futures::stream::once(async move { Ok::<_, std::io::Error>(body) }))),
            ..Default::default()
        };
        Ok(S3Response::new(output))
    }

    async fn head_object(&self, req: S3Request<HeadObjectInput>) -> S3Result<S3Response<HeadObjectOutput>> {
        let (_, meta) = self.object(&req.input.bucket, &req.input.key)?;
        let output = HeadObjectOutput {
            content_length: Some(meta.len() as i64),
            last_modified: modified(meta),
            e_tag: e_tag(meta),
            ..Default::default()
        };
        Ok(S3Response::new(output))
    }

    async fn list_objects_v2(&self, req: S3Request<ListObjectsV2Input>) -> S3Result<S3Response<ListObjectsV2Output>> {
        let input = req.input;
        let dir = self.bucket(&input.bucket)?;
        let prefix = input.prefix.clone().unwrap_or_default();
        let mut files = Vec::new();
        walk(&dir, &dir, &mut files).map_err(|e| s3_error!(InternalError, "{}: {e}", dir.display()))?;
        files.retain(|(k, _)| k.starts_with(&prefix));
        files.sort_by(|a, b| a.0.cmp(&b.0));
        let after = input.continuation_token.clone().or(input.start_after.clone());
        // Keys, or (with a delimiter) the common prefix a key falls under, in key order.
        let mut entries: Vec<(String, Option<std::fs::Metadata>)> = Vec::new();
        for (key, meta) in files {
            let folded = input
                .delimiter
                .as_deref()
                .and_then(|d| key[prefix.len()..].find(d).map(|i| key[..prefix.len() + i + d.len()].to_string()));
            match folded {
                Some(p) if entries.last().is_some_and(|(last, _)| *last == p) => {}
                Some(p) => entries.push((p, None)),
                None => entries.push((key, Some(meta))),
            }
        }
        entries.retain(|(k, _)| after.as_ref().is_none_or(|a| k > a));
        let max = input.max_keys.unwrap_or(1000).clamp(1, 1000) as usize;
        let truncated = entries.len() > max;
        entries.truncate(max);
        let next = truncated.then(|| entries.last().map(|(k, _)| k.clone())).flatten();
        let (mut contents, mut prefixes) = (Vec::new(), Vec::new());
        for (key, meta) in entries {
            match meta {
                Some(m) => contents.push(Object {
                    size: Some(m.len() as i64),
                    last_modified: modified(&m),
                    e_tag: e_tag(&m),
                    key: Some(key),
                    ..Default::default()
                }),
                None => prefixes.push(CommonPrefix { prefix: Some(key) }),
            }
        }
        let output = ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: input.prefix,
            delimiter: input.delimiter,
            key_count: Some((contents.len() + prefixes.len()) as i32),
            max_keys: Some(max as i32),
            is_truncated: Some(truncated),
            continuation_token: input.continuation_token,
            next_continuation_token: next,
            contents: Some(contents),
            common_prefixes: Some(prefixes),
            ..Default::default()
        };
        Ok(S3Response::new(output))
    }
}

fn usage() -> ! {
    eprintln!("usage: om4-bench-s3 ROOT [--delay-ms MS] [--key ID:SECRET]");
    std::process::exit(2)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut root, mut delay, mut key) = (None, Duration::ZERO, None);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--delay-ms" => {
                let ms: f64 = args.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| usage());
                delay = Duration::try_from_secs_f64(ms / 1e3).unwrap_or_else(|_| usage());
            }
            "--key" => key = Some(args.next().unwrap_or_else(|| usage())),
            _ if root.is_none() && !a.starts_with("--") => root = Some(PathBuf::from(a)),
            _ => usage(),
        }
    }
    let root = root.unwrap_or_else(|| usage());
    let mut files = Vec::new();
    walk(&root, &root, &mut files)?;
    let mut objects = HashMap::with_capacity(files.len());
    for (key, meta) in files {
        let path = root.join(key);
        let bytes = Bytes::from(std::fs::read(&path)?);
        objects.insert(path, (bytes, meta));
    }
    let mut buckets = std::collections::HashSet::new();
    for entry in std::fs::read_dir(&root)? {
        let entry = entry?;
        if std::fs::metadata(entry.path())?.is_dir() {
            buckets.insert(entry.file_name().to_string_lossy().into_owned());
        }
    }
    let mut builder = S3ServiceBuilder::new(Folder { root, buckets, objects });
    if let Some(k) = key {
        let (id, secret) = k.split_once(':').unwrap_or_else(|| usage());
        builder.set_auth(s3s::auth::SimpleAuth::from_single(id, secret));
    }
    let service = Arc::new(builder.build());
    // A deep accept queue: a reader that opens a connection per request (TensorStore's does, at
    // hundreds in flight) would otherwise overflow the default one and wait a second for every
    // SYN the kernel drops.
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(([127, 0, 0, 1], 0).into())?;
    let listener = socket.listen(4096)?;
    println!("port {}", listener.local_addr()?.port());
    std::io::stdout().flush()?;
    loop {
        let (socket, _) = listener.accept().await?;
        let _ = socket.set_nodelay(true);
        let service = Arc::clone(&service);
        let delayed = hyper::service::service_fn(move |req| {
            let service = Arc::clone(&service);
            async move {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                service.call(req.map(s3s::Body::from)).await
            }
        });
        tokio::spawn(async move {
            let _ = Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(socket), delayed).await;
        });
    }
}
