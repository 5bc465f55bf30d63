//! `om4`: inspect, validate, dump, synthesize and benchmark OM4 Zarr stores, compute their
//! statistics, and print epoch schedules. One module per command under `cmd/` and `bench/`.

mod bench;
mod cmd;

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "om4", version, about = "Inspect, validate, dump, synthesize and benchmark OM4 Zarr stores")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    Inspect(cmd::inspect::InspectArgs),
    Validate(cmd::validate::ValidateArgs),
    Dump(cmd::dump::DumpArgs),
    Synth(cmd::synth::SynthArgs),
    Stats(cmd::stats::StatsArgs),
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        what: BenchCommand,
    },
    Schedule(cmd::schedule::ScheduleArgs),
    Batch(cmd::batch::BatchArgs),
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Read random windows of consecutive steps × all channels into one reused buffer.
    Read(bench::read::ReadArgs),
    /// Build Samudra training batches on the host: deduplicated reads, normalization, masks, gather.
    Batch(bench::batch::BatchArgs),
}

fn main() -> ExitCode {
    // warnings by default (RUST_LOG=... for more or less)
    let filter = tracing_subscriber::EnvFilter::builder()
        .with_default_directive(tracing_subscriber::filter::LevelFilter::WARN.into())
        .from_env_lossy();
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    let done = |r: Result<()>| r.map(|()| ExitCode::SUCCESS);
    match cli.command {
        Command::Inspect(a) => done(cmd::inspect::run(&a)),
        Command::Validate(a) => cmd::validate::run(&a),
        Command::Dump(a) => done(cmd::dump::run(&a)),
        Command::Synth(a) => done(cmd::synth::run(&a)),
        Command::Stats(a) => done(cmd::stats::run(&a)),
        Command::Bench { what: BenchCommand::Read(a) } => done(bench::read::run(&a)),
        Command::Bench { what: BenchCommand::Batch(a) } => done(bench::batch::run(&a)),
        Command::Schedule(a) => done(cmd::schedule::run(&a)),
        Command::Batch(a) => done(cmd::batch::run(&a)),
    }
}

/// Threads for reads when none are asked for: the available cores.
pub(crate) fn num_threads() -> usize {
    std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get)
}
