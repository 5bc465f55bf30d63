//! One module per command.

pub(crate) mod batch;
pub(crate) mod dump;
pub(crate) mod inspect;
pub(crate) mod schedule;
pub(crate) mod stats;
pub(crate) mod synth;
pub(crate) mod validate;

use std::path::Path;

use anyhow::{Result, bail};
use clap::Args;
use om4_store::StoreLocation;

/// How to reach a store on object storage (`s3://bucket/path`, or an `http(s)://` URL): unset S3
/// options come from the `AWS_*` environment variables (`AWS_ENDPOINT_URL`, `AWS_REGION`,
/// `AWS_ACCESS_KEY_ID`, ...).
#[derive(Args, Debug, Clone, Default)]
pub(crate) struct RemoteArgs {
    /// Endpoint of an S3-compatible server for an s3:// store (e.g. http://127.0.0.1:9000).
    #[arg(long, value_name = "URL")]
    endpoint_url: Option<String>,
    /// Region of an s3:// store (default: AWS_REGION, else us-east-1).
    #[arg(long)]
    region: Option<String>,
    /// Read an s3:// store without credentials (unsigned requests, public buckets).
    #[arg(long)]
    anon: bool,
    /// Requests in flight at most for an s3:// or http(s):// store (unset: from the measured round trips, 512 to 2048), apart from --threads' decoding.
    #[arg(long, value_name = "N")]
    concurrency: Option<usize>,
}

impl RemoteArgs {
    /// The location `store` names, with these options for a remote URL.
    pub(crate) fn location(&self, store: &Path) -> Result<StoreLocation> {
        let mut location = StoreLocation::from_path(store)?;
        let s3_flags = self.endpoint_url.is_some() || self.region.is_some() || self.anon;
        match &mut location {
            StoreLocation::S3(s3) => {
                s3.endpoint_url = self.endpoint_url.clone().or(s3.endpoint_url.take());
                s3.region = self.region.clone().or(s3.region.take());
                s3.anon |= self.anon;
            }
            _ if s3_flags => {
                bail!("--endpoint-url, --region and --anon apply to s3:// stores, not {}", store.display())
            }
            StoreLocation::Local(_) if self.concurrency.is_some() => {
                bail!("--concurrency applies to s3:// and http(s):// stores, not {}", store.display())
            }
            _ => {}
        }
        if let Some(requests) = location.requests_mut() {
            requests.concurrency = self.concurrency.or(requests.concurrency);
        }
        Ok(location)
    }
}
