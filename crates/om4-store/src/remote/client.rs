//! A remote store's client: `object_store`'s S3 or HTTP client under the store's prefix, with
//! om4's deadlines, retries and request limit.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::http::HttpBuilder;
use object_store::prefix::PrefixStore;
use object_store::{BackoffConfig, ClientOptions, RetryConfig};

use super::limit::{self, Limit};
use super::{Client, Counters, Remote};
use crate::error::BoxError;
use crate::location::{HttpLocation, RequestOptions, S3Location};
use zarrs_object_store::AsyncObjectStore;

fn seconds(value: Option<f64>, default: f64, what: &str) -> Result<Duration, BoxError> {
    let s = value.unwrap_or(default);
    Duration::try_from_secs_f64(s)
        .map_err(|_| format!("{what} must be a non-negative number of seconds, not {s}").into())
}

/// The client options of every remote store: deadlines, idle connections kept.
fn client_options(opts: &RequestOptions, allow_http: bool) -> Result<ClientOptions, BoxError> {
    // reqwest's rustls is built without a bundled provider: use ring's, unless the process
    // installed one already (then that one is used). Before any client is built.
    let _ = rustls::crypto::ring::default_provider().install_default();
    Ok(ClientOptions::new()
        .with_allow_http(allow_http)
        .with_timeout(seconds(opts.timeout_s, RequestOptions::DEFAULT_TIMEOUT_S, "timeout_s")?)
        .with_connect_timeout(seconds(
            opts.connect_timeout_s,
            RequestOptions::DEFAULT_CONNECT_TIMEOUT_S,
            "connect_timeout_s",
        )?)
        .with_pool_max_idle_per_host(opts.concurrency.unwrap_or(limit::AUTO_MAX)))
}

/// The retries of every remote store: exponential backoff within the retry window.
fn retry_config(opts: &RequestOptions) -> Result<RetryConfig, BoxError> {
    Ok(RetryConfig {
        backoff: BackoffConfig {
            init_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            base: 2.0,
        },
        max_retries: opts.max_retries.unwrap_or(RequestOptions::DEFAULT_MAX_RETRIES),
        retry_timeout: seconds(opts.retry_window_s, RequestOptions::DEFAULT_RETRY_WINDOW_S, "retry_window_s")?,
    })
}

impl Remote {
    /// Connects nothing yet: builds the S3 client for `loc` (unset options from the `AWS_*`
    /// environment variables) and the runtime its requests run on.
    pub(crate) fn s3(loc: &S3Location) -> Result<Self, BoxError> {
        let opts = &loc.requests;
        let limit = Self::limit(opts)?;
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
        let s3 =
            builder.with_client_options(client_options(opts, allow_http)?).with_retry(retry_config(opts)?).build()?;
        Self::new(Arc::new(PrefixStore::new(s3, loc.path.as_str())), loc.to_string(), limit, "")
    }

    /// Connects nothing yet: builds the HTTP(S) client for `loc` (unsigned GETs and HEADs under
    /// its URL; `http://` allows plain HTTP) and the runtime its requests run on.
    pub(crate) fn http(loc: &HttpLocation) -> Result<Self, BoxError> {
        let opts = &loc.requests;
        let limit = Self::limit(opts)?;
        let allow_http = loc.url.get(..7).is_some_and(|s| s.eq_ignore_ascii_case("http://"));
        let http = HttpBuilder::new()
            .with_url(loc.url.as_str())
            .with_client_options(client_options(opts, allow_http)?)
            .with_retry(retry_config(opts)?)
            .build()?;
        let hint = " (plain HTTP has no listing, WebDAV aside: an http(s):// store needs consolidated metadata, \
                    v2 `.zmetadata` or v3 `consolidated_metadata` in its root `zarr.json`)";
        Self::new(Arc::new(http), loc.url.clone(), limit, hint)
    }

    /// The requests in flight `opts` ask for.
    fn limit(opts: &RequestOptions) -> Result<Limit, BoxError> {
        match opts.concurrency {
            Some(n) if !(1..=RequestOptions::MAX_CONCURRENCY).contains(&n) => Err(format!(
                "concurrency (requests in flight) must be between 1 and {}, not {n}",
                RequestOptions::MAX_CONCURRENCY
            )
            .into()),
            Some(n) => Ok(Limit::fixed(n)),
            None => Ok(Limit::auto()),
        }
    }

    /// A store read through `client`, named `url` in errors; `listing_hint` ends the error of a
    /// listing that failed.
    fn new(client: Client, url: String, limit: Limit, listing_hint: &'static str) -> Result<Self, BoxError> {
        let lister = AsyncObjectStore::new(Arc::clone(&client));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("om4-object-store")
            .enable_all()
            .build()?;
        Ok(Self {
            lister,
            client,
            runtime,
            url,
            limit,
            counters: Counters::default(),
            indexes: Mutex::new((HashMap::new(), 0)),
            listing_hint,
        })
    }
}
