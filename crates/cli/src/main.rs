//! `tunebox`: tune kernel families in isolated worker processes and rank them.
//!
//! Spawned with `TUNEBOX_WORKER_SERVER` set, the binary runs as a worker instead (so a
//! `TuningProcess` can use it without a second binary).

mod devices;
mod launch;
mod manifest;
mod report;
mod space;
mod tune;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, ensure};
use clap::{Parser, Subcommand};

use crate::manifest::MAX_TIMEOUT_S;
use crate::tune::TuneOptions;

/// Most worker processes a run may start.
const MAX_WORKERS: usize = 512;

/// Benchmark kernel candidates in isolated worker processes and rank them.
#[derive(Parser)]
#[command(name = "tunebox", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the GPUs a worker sees (name, compute capability, memory, L2, SMs, clocks, UUID),
    /// probed in a worker process: the `tunebox` process itself never loads a GPU library.
    Devices {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Compile, benchmark and verify every choice of a manifest; print them ranked.
    Tune {
        /// The TOML manifest describing the kernel family.
        manifest: PathBuf,
        /// Also write the results as JSON to this file.
        #[arg(long, value_name = "PATH")]
        json: Option<PathBuf>,
        /// Worker processes measuring in parallel. The default, 1, measures one choice at a time:
        /// concurrent CPU benchmarks share the last-level cache and memory bandwidth and perturb
        /// each other.
        #[arg(long, default_value_t = 1, value_name = "N")]
        workers: usize,
        /// Per-choice timeout in seconds (overrides the manifest's `timeout_s`). It covers every
        /// call of the choice: the first call, the estimate, warmup and timed reps, and the
        /// final verification call.
        #[arg(long, value_name = "SECS")]
        timeout: Option<f64>,
        /// Benchmarks a worker process runs before it is replaced (TVM's
        /// `maximum_process_uses`). The default, 1, gives every choice a fresh process, so that
        /// nothing a choice does to its process (floating-point modes, signal handlers, leaked
        /// threads or memory) can change the next choice's result; 0 means unlimited.
        #[arg(long, default_value_t = 1, value_name = "N")]
        max_process_uses: u64,
        /// No progress on stderr.
        #[arg(long, short)]
        quiet: bool,
        /// Only list the choices that survive the restrictions; compile and run nothing.
        #[arg(long)]
        list: bool,
    },
}

fn main() -> ExitCode {
    tunebox_worker::run_if_worker(tunebox_worker::Registry::standard);
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tunebox: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Devices { json } => devices::print(json),
        Command::Tune {
            manifest,
            json,
            workers,
            timeout,
            max_process_uses,
            quiet,
            list,
        } => {
            if list {
                for choice in tune::list(&manifest)? {
                    println!("{}", choice.label());
                }
                return Ok(());
            }
            ensure!(
                (1..=MAX_WORKERS).contains(&workers),
                "--workers must be between 1 and {MAX_WORKERS}"
            );
            let timeout = timeout
                .map(|t| {
                    ensure!(
                        t.is_finite() && t > 0.0 && t <= MAX_TIMEOUT_S,
                        "--timeout must be a number of seconds above 0 and at most {MAX_TIMEOUT_S} \
                         (a week)"
                    );
                    Ok(Duration::from_secs_f64(t))
                })
                .transpose()?;
            let report = tune::tune(&TuneOptions {
                manifest,
                workers,
                timeout,
                max_process_uses: (max_process_uses > 0).then_some(max_process_uses),
                quiet,
                json: json.clone(),
            })?;
            report::print_table(&report, &mut std::io::stdout().lock())?;
            if let Some(path) = json {
                report::write_json(&report, &path)?;
                if !quiet {
                    eprintln!("tunebox: wrote {}", path.display());
                }
            }
            Ok(())
        }
    }
}
