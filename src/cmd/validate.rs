//! `om4 validate`: exit 0 when om4 can read the channels, else 1 with the reasons.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use om4_store::Om4Store;

use super::inspect::problems;

/// Exit 0 when the channels can be read by om4, else 1 with the reasons.
#[derive(Args, Debug)]
pub(crate) struct ValidateArgs {
    /// Store root.
    store: PathBuf,
    /// Comma-separated channels (default: every channel the store offers).
    #[arg(long, value_delimiter = ',')]
    channels: Vec<String>,
    #[command(flatten)]
    remote: super::RemoteArgs,
}

pub(crate) fn run(a: &ValidateArgs) -> Result<ExitCode> {
    validate(&a.remote.location(&a.store)?, &a.channels)
}

fn validate(location: &om4_store::StoreLocation, channels: &[String]) -> Result<ExitCode> {
    let store = Om4Store::open_location(location)?;
    let all = channels.is_empty();
    let channels = if all { store.channel_names() } else { channels.to_vec() };
    let problems = problems(&store, &channels, all);
    if problems.is_empty() {
        println!("ok: {} channels readable", channels.len());
        Ok(ExitCode::SUCCESS)
    } else {
        for p in &problems {
            eprintln!("invalid: {p}");
        }
        Ok(ExitCode::FAILURE)
    }
}
