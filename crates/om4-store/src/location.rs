//! Where a store lives: a local directory, an S3 URL (`s3://bucket/path`) or an HTTP(S) URL, with
//! the options a remote store needs, in the forms configuration files write them.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, Result};

/// Where a store lives.
///
/// Parsed from text by [`StoreLocation::parse`] (or `str::parse`): `s3://bucket/path/OM4.zarr` is
/// [`StoreLocation::S3`], `https://host/path/OM4.zarr` (or `http://`) [`StoreLocation::Http`],
/// anything without a `scheme://` is a local path. In configuration files (serde) it is either
/// such a string or a table in Samudra's form, `{type: s3, bucket, path, endpoint_url, anon,
/// region}`, `{type: http, url}` or `{type: local, path}`.
///
/// Opening a remote location needs om4-store's feature `s3`; without it, it is an [`Error::Store`]
/// that says so.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreLocation {
    /// A directory on the local file system.
    Local(PathBuf),
    /// A prefix in an S3 bucket (AWS or any S3-compatible server).
    S3(S3Location),
    /// A URL prefix served over plain HTTP(S) GET (a static web server, or a public bucket's
    /// HTTPS address on S3, Google Cloud Storage or Azure): read-only and unsigned.
    Http(HttpLocation),
}

/// A store under an HTTP(S) URL: every object is `URL/KEY`, read by GET (byte ranges for shard
/// indexes and inner chunks) and, when zarrs asks a size, HEAD. There is no listing over plain
/// HTTP, so the store must carry consolidated metadata (v2 `.zmetadata`, or v3
/// `consolidated_metadata` in the root `zarr.json`), as published stores do.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct HttpLocation {
    /// The store's URL (`https://example.org/data/OM4.zarr`), without a trailing `/`.
    pub url: String,
    /// Request behaviour (timeouts, retries, concurrency); defaults in [`RequestOptions`].
    #[serde(skip_serializing_if = "RequestOptions::is_default")]
    pub requests: RequestOptions,
}

/// A store in an S3 bucket, and how to reach it. Unset options come from the usual AWS
/// environment variables (`AWS_ENDPOINT_URL`, `AWS_REGION`/`AWS_DEFAULT_REGION`,
/// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_SKIP_SIGNATURE`,
/// `AWS_ALLOW_HTTP`), as `object_store`'s `AmazonS3Builder::from_env` reads them.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct S3Location {
    /// Bucket name.
    pub bucket: String,
    /// The store's key prefix in the bucket (`Samudra/v2026-07/om4_twodeg/OM4.zarr`); no leading
    /// or trailing `/`.
    pub path: String,
    /// Endpoint of an S3-compatible server (`http://127.0.0.1:9000`); `None`: AWS, or
    /// `AWS_ENDPOINT_URL`. An `http://` endpoint allows plain HTTP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint_url: Option<String>,
    /// Region; `None`: `AWS_REGION`/`AWS_DEFAULT_REGION`, else `us-east-1`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Anonymous access: requests are not signed (public buckets). Else credentials come from the
    /// environment.
    pub anon: bool,
    /// Request behaviour (timeouts, retries); defaults in [`RequestOptions`].
    #[serde(skip_serializing_if = "RequestOptions::is_default")]
    pub requests: RequestOptions,
}

/// Timeouts, retries and concurrency of object-storage requests. Every field left `None` takes
/// om4's default.
///
/// A request that fails with a 5xx status, a connection reset or a timeout is retried with
/// exponential backoff (100 ms, doubling, at most 5 s between tries) until `max_retries` retries
/// are spent or `retry_window_s` has passed since the first try; then the read fails with an error
/// that names the key. A 404 is never retried: a missing chunk reads as the fill value (NaN).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RequestOptions {
    /// Deadline of one request, from connecting to the last byte (default 30 s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<f64>,
    /// Deadline for establishing a connection (default 5 s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_timeout_s: Option<f64>,
    /// Retries of one request (default 5).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<usize>,
    /// No retry starts later than this after the first try (default 60 s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_window_s: Option<f64>,
    /// Requests in flight at most for the store, all its reads together; set apart from the read
    /// pool's decode threads. Latency is hidden when this is at least the requests a read needs
    /// per round trip. Left unset, it follows the measured round trips by Little's law: the
    /// fetched bytes per second to sustain ([`AUTO_TARGET_BYTES_PER_S`](Self::AUTO_TARGET_BYTES_PER_S))
    /// × the round trip (the fastest time to first byte of the last 10 s) ÷ the mean bytes of an
    /// answer (recent fetch rounds, each weighed by its requests), between
    /// [`AUTO_MIN_CONCURRENCY`](Self::AUTO_MIN_CONCURRENCY) and
    /// [`AUTO_MAX_CONCURRENCY`](Self::AUTO_MAX_CONCURRENCY) and at most half the process's
    /// open-file limit (each request in flight holds a connection).
    /// [`Om4Store::requests_in_flight`](crate::Om4Store::requests_in_flight) tells the number now.
    pub concurrency: Option<usize>,
}

impl RequestOptions {
    /// Default request deadline, seconds.
    pub const DEFAULT_TIMEOUT_S: f64 = 30.0;
    /// Default connect deadline, seconds.
    pub const DEFAULT_CONNECT_TIMEOUT_S: f64 = 5.0;
    /// Default retries per request.
    pub const DEFAULT_MAX_RETRIES: usize = 5;
    /// Default retry window, seconds.
    pub const DEFAULT_RETRY_WINDOW_S: f64 = 60.0;
    /// Fewest requests in flight when `concurrency` is unset: the best fixed number at low
    /// latency in the sweep of docs/benchmarks.md (`benches/peers/s3.sh --sweep`).
    pub const AUTO_MIN_CONCURRENCY: usize = 512;
    /// Most requests in flight when `concurrency` is unset.
    pub const AUTO_MAX_CONCURRENCY: usize = 2048;
    /// Fetched bytes per second that an unset `concurrency` plans for: about twice what two cores
    /// decode of blosc-lz4 chunks (docs/benchmarks.md), as a read's requests come in rounds, not
    /// as a steady stream. A machine that decodes faster may set `concurrency` itself.
    pub const AUTO_TARGET_BYTES_PER_S: f64 = 2.5e9;
    /// The most requests in flight per read.
    pub const MAX_CONCURRENCY: usize = 4096;

    fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// Requests a remote store has sent, counted since it was opened (retries inside one request are
/// not counted again).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// GET requests, whole objects and byte ranges.
    pub gets: u64,
    /// HEAD requests (object sizes).
    pub heads: u64,
    /// LIST requests (one per listing call; a long listing may take several pages).
    pub lists: u64,
    /// Bytes received in GET answers.
    pub bytes: u64,
    /// Batches of requests sent together by reads (plane reads, masks, statistics, coordinates):
    /// one batch costs about one round trip, and a plane read keeps several in flight at once, so
    /// this bounds its round trips from above.
    pub rounds: u64,
}

impl RequestCounts {
    /// All requests.
    pub fn total(&self) -> u64 {
        self.gets + self.heads + self.lists
    }

    /// The requests made between `earlier` and `self`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            gets: self.gets - earlier.gets,
            heads: self.heads - earlier.heads,
            lists: self.lists - earlier.lists,
            bytes: self.bytes - earlier.bytes,
            rounds: self.rounds - earlier.rounds,
        }
    }
}

impl StoreLocation {
    /// Parses a location: `s3://bucket/path` is S3 (options unset: from the environment),
    /// `http://` and `https://` URLs are HTTP, text without a `scheme://` a local path.
    ///
    /// # Errors
    /// [`Error::Store`] for an `s3://` URL without a bucket, an HTTP URL without a host, or
    /// another scheme (`gs://`, `az://`, ... are not supported: read such a public bucket through
    /// its HTTPS address).
    pub fn parse(text: &str) -> Result<Self> {
        let bad = |reason: String| Error::Store { store: PathBuf::from(text), reason };
        match text.split_once("://") {
            Some(("s3" | "S3", rest)) => {
                let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(bad("an s3:// URL needs a bucket: s3://BUCKET/PATH".into()));
                }
                Ok(Self::S3(S3Location {
                    bucket: bucket.to_string(),
                    path: path.trim_matches('/').to_string(),
                    ..S3Location::default()
                }))
            }
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") => {
                if rest.split('/').next().is_none_or(str::is_empty) {
                    return Err(bad(format!("an {scheme}:// URL needs a host: {scheme}://HOST/PATH")));
                }
                Ok(Self::Http(HttpLocation {
                    url: text.trim_end_matches('/').to_string(),
                    requests: RequestOptions::default(),
                }))
            }
            Some((scheme, _)) if !scheme.is_empty() && scheme.bytes().all(|b| b.is_ascii_alphanumeric()) => {
                Err(bad(format!("unsupported scheme {scheme}://: om4 reads local paths, s3:// and http(s):// URLs")))
            }
            _ => Ok(Self::Local(PathBuf::from(text))),
        }
    }

    /// The location a path names: a path whose text is an `s3://` or `http(s)://` URL is that
    /// location (S3 options from the environment); any other path is local.
    ///
    /// # Errors
    /// As [`parse`](Self::parse), for a path whose text has a `scheme://`.
    pub fn from_path(path: &Path) -> Result<Self> {
        match path.to_str() {
            Some(text) if text.contains("://") => Self::parse(text),
            _ => Ok(Self::Local(path.to_path_buf())),
        }
    }

    /// True for a store on object storage.
    pub fn is_remote(&self) -> bool {
        !matches!(self, Self::Local(_))
    }

    /// The local directory, if the store is local.
    pub fn local_path(&self) -> Option<&Path> {
        match self {
            Self::Local(p) => Some(p),
            Self::S3(_) | Self::Http(_) => None,
        }
    }

    /// The location as a path, as errors name the store: the directory, or the URL.
    pub fn display_path(&self) -> PathBuf {
        match self {
            Self::Local(p) => p.clone(),
            other => PathBuf::from(other.to_string()),
        }
    }

    /// A sibling store in the same directory or bucket prefix (`OM4_means.zarr` beside
    /// `OM4.zarr`), with the same options.
    pub fn sibling(&self, name: &str) -> Self {
        match self {
            Self::Local(p) => Self::Local(p.parent().unwrap_or(Path::new("")).join(name)),
            Self::S3(s3) => {
                let parent = s3.path.rsplit_once('/').map_or("", |(parent, _)| parent);
                let path = if parent.is_empty() { name.to_string() } else { format!("{parent}/{name}") };
                Self::S3(S3Location { path, ..s3.clone() })
            }
            Self::Http(http) => {
                // the URL up to its last `/` after the host (a store at the host's root: the host)
                let host = http.url.find("://").map_or(0, |i| i + 3);
                let parent = http.url[host..].rfind('/').map_or(http.url.as_str(), |i| &http.url[..host + i]);
                Self::Http(HttpLocation { url: format!("{parent}/{name}"), ..http.clone() })
            }
        }
    }

    /// The request options of a remote store (`None` for a local one).
    pub fn requests_mut(&mut self) -> Option<&mut RequestOptions> {
        match self {
            Self::Local(_) => None,
            Self::S3(s3) => Some(&mut s3.requests),
            Self::Http(http) => Some(&mut http.requests),
        }
    }
}

impl fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Local(p) => write!(f, "{}", p.display()),
            Self::S3(s3) => write!(f, "{s3}"),
            Self::Http(http) => f.write_str(&http.url),
        }
    }
}

impl fmt::Display for S3Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.path)
    }
}

impl FromStr for StoreLocation {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

/// A local path, whatever its text (use [`StoreLocation::from_path`] to read `s3://` text as a URL).
impl From<PathBuf> for StoreLocation {
    fn from(path: PathBuf) -> Self {
        Self::Local(path)
    }
}

impl From<&Path> for StoreLocation {
    fn from(path: &Path) -> Self {
        Self::Local(path.to_path_buf())
    }
}

impl From<S3Location> for StoreLocation {
    fn from(s3: S3Location) -> Self {
        Self::S3(s3)
    }
}

impl From<HttpLocation> for StoreLocation {
    fn from(http: HttpLocation) -> Self {
        Self::Http(http)
    }
}

/// The forms a location takes in configuration files.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum Form {
    Text(String),
    Table(Table),
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Table {
    S3(S3Location),
    Http(HttpLocation),
    #[serde(alias = "file")]
    Local {
        path: PathBuf,
    },
}

impl Serialize for StoreLocation {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Self::Local(p) => match p.to_str() {
                Some(text) if !text.contains("://") => Form::Text(text.to_string()),
                _ => Form::Table(Table::Local { path: p.clone() }),
            },
            Self::S3(s3) => Form::Table(Table::S3(s3.clone())),
            Self::Http(http) => Form::Table(Table::Http(http.clone())),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for StoreLocation {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        match Form::deserialize(deserializer)? {
            Form::Text(text) => Self::parse(&text).map_err(serde::de::Error::custom),
            Form::Table(Table::Local { path }) => Ok(Self::Local(path)),
            Form::Table(Table::S3(s3)) if s3.bucket.is_empty() => {
                Err(serde::de::Error::custom("an s3 location needs a bucket"))
            }
            Form::Table(Table::S3(mut s3)) => {
                s3.path = s3.path.trim_matches('/').to_string();
                Ok(Self::S3(s3))
            }
            Form::Table(Table::Http(http)) => match Self::parse(&http.url).map_err(serde::de::Error::custom)? {
                Self::Http(parsed) => Ok(Self::Http(HttpLocation { requests: http.requests, ..parsed })),
                _ => Err(serde::de::Error::custom(format!(
                    "an http location needs an http(s):// url, not {:?}",
                    http.url
                ))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_text() {
        let s3 = StoreLocation::parse("s3://m2lines-pubs/Samudra/om4_twodeg/OM4.zarr/").unwrap();
        let StoreLocation::S3(loc) = &s3 else { panic!("{s3:?}") };
        assert_eq!((loc.bucket.as_str(), loc.path.as_str()), ("m2lines-pubs", "Samudra/om4_twodeg/OM4.zarr"));
        assert_eq!(s3.to_string(), "s3://m2lines-pubs/Samudra/om4_twodeg/OM4.zarr");
        assert_eq!(s3.sibling("OM4_means.zarr").to_string(), "s3://m2lines-pubs/Samudra/om4_twodeg/OM4_means.zarr");
        assert_eq!(StoreLocation::parse("/data/OM4.zarr").unwrap(), StoreLocation::Local("/data/OM4.zarr".into()));
        assert!(StoreLocation::parse("s3:///x").is_err());
        assert!(StoreLocation::parse("gs://b/x").is_err());
        assert!(StoreLocation::from_path(Path::new("s3://b/x")).unwrap().is_remote());
        let http = StoreLocation::parse("https://example.org/data/OM4.zarr/").unwrap();
        assert_eq!(
            http,
            StoreLocation::Http(HttpLocation {
                url: "https://example.org/data/OM4.zarr".into(),
                ..HttpLocation::default()
            })
        );
        assert_eq!(http.to_string(), "https://example.org/data/OM4.zarr");
        assert_eq!(http.sibling("OM4_stds.zarr").to_string(), "https://example.org/data/OM4_stds.zarr");
        assert!(http.is_remote() && http.local_path().is_none());
        let root = StoreLocation::parse("http://127.0.0.1:9000/").unwrap();
        assert_eq!(root.sibling("OM4_means.zarr").to_string(), "http://127.0.0.1:9000/OM4_means.zarr");
        assert!(StoreLocation::parse("http:///OM4.zarr").is_err());
        assert!(StoreLocation::from_path(Path::new("http://127.0.0.1:9000/b/OM4.zarr")).unwrap().is_remote());
    }

    #[test]
    fn samudra_table() {
        let text = r#"{"type": "s3", "endpoint_url": "https://s3.us-east-1.amazonaws.com", "anon": true,
                       "bucket": "m2lines-pubs", "path": "Samudra/v2026-07/om4_twodeg/OM4.zarr"}"#;
        let loc: StoreLocation = serde_json::from_str(text).unwrap();
        let StoreLocation::S3(s3) = &loc else { panic!("{loc:?}") };
        assert!(s3.anon);
        assert_eq!(s3.endpoint_url.as_deref(), Some("https://s3.us-east-1.amazonaws.com"));
        let back: StoreLocation = serde_json::from_str(&serde_json::to_string(&loc).unwrap()).unwrap();
        assert_eq!(back, loc);
        let local: StoreLocation = serde_json::from_str(r#""/data/OM4.zarr""#).unwrap();
        assert_eq!(local, StoreLocation::Local("/data/OM4.zarr".into()));
        let table: StoreLocation = serde_json::from_str(r#"{"type": "local", "path": "/d/OM4.zarr"}"#).unwrap();
        assert_eq!(table, StoreLocation::Local("/d/OM4.zarr".into()));
        assert!(serde_json::from_str::<StoreLocation>(r#"{"type": "s3", "path": "x"}"#).is_err());
        let text = r#"{"type": "http", "url": "https://example.org/OM4.zarr/", "requests": {"concurrency": 64}}"#;
        let http: StoreLocation = serde_json::from_str(text).unwrap();
        let StoreLocation::Http(h) = &http else { panic!("{http:?}") };
        assert_eq!((h.url.as_str(), h.requests.concurrency), ("https://example.org/OM4.zarr", Some(64)));
        let back: StoreLocation = serde_json::from_str(&serde_json::to_string(&http).unwrap()).unwrap();
        assert_eq!(back, http);
        assert!(serde_json::from_str::<StoreLocation>(r#"{"type": "http", "url": "/d/OM4.zarr"}"#).is_err());
    }
}
