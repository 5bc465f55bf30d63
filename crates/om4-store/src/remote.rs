//! Stores on object storage (feature `s3`): an `object_store` S3 client under zarrs'
//! `object_store` adapter (`zarrs_object_store`), driven from om4's synchronous read pool.
//!
//! [`Remote`] is the synchronous zarrs storage om4 reads through. Each call blocks its read-pool
//! thread on a small tokio runtime owned by the store, so as many requests are in flight as
//! read-pool threads wait on them. A whole-object `get` is one GET request (zarrs' own
//! async-to-sync adapter would make it a HEAD and a ranged GET), and a byte-range read (a shard's
//! index, an inner chunk) is one ranged GET per range, suffix ranges included, without the HEAD
//! that `zarrs_object_store` sends first to learn the size. A 404 is `None`, which zarrs reads as
//! the fill value; any other failure is an error naming the object's URL, with `object_store`'s
//! message (HTTP status, retries made).

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::prefix::PrefixStore;
use object_store::{BackoffConfig, ClientOptions, GetOptions, GetRange, ObjectStore, RetryConfig};
use zarrs_object_store::AsyncObjectStore;
use zarrs_storage::byte_range::ByteRange;
use zarrs_storage::byte_range::ByteRangeIterator;
use zarrs_storage::{
    AsyncListableStorageTraits, AsyncReadableStorageTraits, ListableStorageTraits, MaybeBytes, MaybeBytesIterator,
    ReadableStorageTraits, StorageError, StoreKey, StoreKeys, StoreKeysPrefixes, StorePrefix,
};

use crate::error::BoxError;
use crate::location::{RequestOptions, S3Location};

type Client = Arc<PrefixStore<object_store::aws::AmazonS3>>;

/// A remote store as synchronous zarrs storage.
pub(crate) struct Remote {
    inner: AsyncObjectStore<Client>,
    /// The same client, for ranged reads without a HEAD request.
    client: Client,
    runtime: tokio::runtime::Runtime,
    /// `s3://bucket/path`, to name objects in errors.
    url: String,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote").field("url", &self.url).finish_non_exhaustive()
    }
}

fn seconds(value: Option<f64>, default: f64, what: &str) -> Result<Duration, BoxError> {
    let s = value.unwrap_or(default);
    Duration::try_from_secs_f64(s)
        .map_err(|_| format!("{what} must be a non-negative number of seconds, not {s}").into())
}

impl Remote {
    /// Connects nothing yet: builds the S3 client for `loc` (unset options from the `AWS_*`
    /// environment variables) and the runtime its requests run on.
    pub(crate) fn s3(loc: &S3Location) -> Result<Self, BoxError> {
        // reqwest's rustls is built without a bundled provider: use ring's, unless the process
        // installed one already (then that one is used).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut builder = AmazonS3Builder::from_env().with_bucket_name(&loc.bucket);
        let env_endpoint = std::env::var("AWS_ENDPOINT_URL").or_else(|_| std::env::var("AWS_ENDPOINT")).ok();
        let endpoint = loc.endpoint_url.clone().or(env_endpoint);
        if let Some(url) = &loc.endpoint_url {
            builder = builder.with_endpoint(url);
        }
        if let Some(region) = &loc.region {
            builder = builder.with_region(region);
        }
        if loc.anon {
            builder = builder.with_skip_signature(true);
        }
        let allow_http = endpoint.as_deref().is_some_and(|u| u.starts_with("http://"))
            || std::env::var("AWS_ALLOW_HTTP").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
        let opts: &RequestOptions = &loc.requests;
        let client = ClientOptions::new()
            .with_allow_http(allow_http)
            .with_timeout(seconds(opts.timeout_s, RequestOptions::DEFAULT_TIMEOUT_S, "timeout_s")?)
            .with_connect_timeout(seconds(
                opts.connect_timeout_s,
                RequestOptions::DEFAULT_CONNECT_TIMEOUT_S,
                "connect_timeout_s",
            )?);
        let retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(5),
                base: 2.0,
            },
            max_retries: opts.max_retries.unwrap_or(RequestOptions::DEFAULT_MAX_RETRIES),
            retry_timeout: seconds(opts.retry_window_s, RequestOptions::DEFAULT_RETRY_WINDOW_S, "retry_window_s")?,
        };
        let s3 = builder.with_client_options(client).with_retry(retry).build()?;
        let client = Arc::new(PrefixStore::new(s3, loc.path.as_str()));
        let inner = AsyncObjectStore::new(Arc::clone(&client));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("om4-object-store")
            .enable_all()
            .build()?;
        Ok(Self { inner, client, runtime, url: loc.to_string() })
    }

    fn named(&self, key: &str, e: StorageError) -> StorageError {
        StorageError::Other(format!("{}/{key}: {e}", self.url))
    }

    /// Runs a request to completion on the store's runtime, from a thread outside any runtime.
    fn block_on<F: Future>(&self, future: F) -> Result<F::Output, StorageError> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(StorageError::Other(
                "om4 reads object storage synchronously: call it from a thread outside an async runtime \
                 (for example with tokio::task::spawn_blocking)"
                    .into(),
            ));
        }
        Ok(self.runtime.block_on(future))
    }
}

impl ReadableStorageTraits for Remote {
    fn get(&self, key: &StoreKey) -> Result<MaybeBytes, StorageError> {
        self.block_on(self.inner.get(key))?.map_err(|e| self.named(key.as_str(), e))
    }

    fn get_partial_many<'a>(
        &'a self,
        key: &StoreKey,
        byte_ranges: ByteRangeIterator<'a>,
    ) -> Result<MaybeBytesIterator<'a>, StorageError> {
        let path = object_store::path::Path::from(key.as_str());
        let ranges: Vec<(GetRange, Option<u64>)> = byte_ranges
            .map(|r| match r {
                ByteRange::FromStart(start, Some(len)) => (GetRange::Bounded(start..start + len), Some(len)),
                ByteRange::FromStart(start, None) => (GetRange::Offset(start), None),
                ByteRange::Suffix(len) => (GetRange::Suffix(len), Some(len)),
            })
            .collect();
        let fetch = |range: GetRange| {
            let options = GetOptions { range: Some(range), ..GetOptions::default() };
            let path = &path;
            async move { self.client.get_opts(path, options).await?.bytes().await }
        };
        let parts = self.block_on(futures::future::try_join_all(ranges.iter().map(|(r, _)| fetch(r.clone()))))?;
        let parts = match parts {
            Ok(parts) => parts,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.named(key.as_str(), StorageError::Other(e.to_string()))),
        };
        let mut checked = Vec::with_capacity(parts.len());
        for (bytes, (range, len)) in parts.into_iter().zip(&ranges) {
            if len.is_some_and(|len| len != bytes.len() as u64) {
                let got = bytes.len();
                let e = StorageError::Other(format!("range {range} returned {got} bytes, not {}", len.unwrap_or(0)));
                return Err(self.named(key.as_str(), e));
            }
            checked.push(Ok(bytes));
        }
        Ok(Some(Box::new(checked.into_iter())))
    }

    fn size_key(&self, key: &StoreKey) -> Result<Option<u64>, StorageError> {
        self.block_on(self.inner.size_key(key))?.map_err(|e| self.named(key.as_str(), e))
    }

    fn supports_get_partial(&self) -> bool {
        true
    }
}

impl ListableStorageTraits for Remote {
    fn list(&self) -> Result<StoreKeys, StorageError> {
        self.block_on(self.inner.list())?.map_err(|e| self.named("", e))
    }

    fn list_prefix(&self, prefix: &StorePrefix) -> Result<StoreKeys, StorageError> {
        self.block_on(self.inner.list_prefix(prefix))?.map_err(|e| self.named(prefix.as_str(), e))
    }

    fn list_dir(&self, prefix: &StorePrefix) -> Result<StoreKeysPrefixes, StorageError> {
        self.block_on(self.inner.list_dir(prefix))?.map_err(|e| self.named(prefix.as_str(), e))
    }

    fn size_prefix(&self, prefix: &StorePrefix) -> Result<u64, StorageError> {
        self.block_on(self.inner.size_prefix(prefix))?.map_err(|e| self.named(prefix.as_str(), e))
    }
}
