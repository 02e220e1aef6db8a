//! `tunebox-benchmarks`: tunebox's own overhead, measured from the outside (issue 9).
//!
//! `cargo xtask bench` builds this binary and `tunebox-worker` in release and runs
//!
//! ```text
//! tunebox-benchmarks run --worker target/release/tunebox-worker --json target/bench/summary.json [--quick]
//! ```
//!
//! which measures the floors (a raw socketpair round trip, fork+exec+wait of a static binary,
//! memcpy), then every figure of issue 9 through the public APIs of `tunebox-process` and
//! `tunebox-pool` (cold start, round trips, throughput, crash and timeout handling, orphan
//! cleanup, CPU timing overhead, 256 MiB payloads) and the scaling table, prints one table and
//! writes the JSON summary. Each figure reports the median, 90th percentile and minimum of its
//! samples, taken after warmup runs. See `docs/performance.md`.
//!
//! The binary is also its own child process in two modes ([`children`]): `echo` (the far end of
//! the socketpair floor) and `launch-busy WORKER` (a parent to SIGKILL for the orphan figure).

mod affinity;
mod children;
mod floors;
mod flush_figs;
mod pool_figs;
mod process_figs;
mod report;
mod round_trips;
mod sandbox_figs;
mod setup;
mod stats;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::report::{Figure, Machine, Report};
use crate::setup::Setup;

const USAGE: &str = "usage:
  tunebox-benchmarks run --worker PATH [--quick] [--json PATH] [--strict] [--only GROUP,…]
      measure every figure, print the table, write the JSON summary to PATH;
      --quick: fewer iterations (a smoke test); --strict: exit 1 when a target is missed;
      --only: just these groups (to profile one), of: spawn, round-trips, cold-start, crash,
      timeout, orphan, cpu-timing, flush, big, throughput, respawn, scaling,
      sandbox
  tunebox-benchmarks echo [--cpu N]          (child mode: socketpair echo on stdin)
  tunebox-benchmarks launch-busy WORKER      (child mode: a parent to SIGKILL)
The worker defaults to $TUNEBOX_WORKER.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("echo") => children::echo(&args[1..]).map(|()| ExitCode::SUCCESS),
        Some("launch-busy") => children::launch_busy(&args[1..]).map(|()| ExitCode::SUCCESS),
        Some("run") => Options::parse(&args[1..]).and_then(run),
        Some("help" | "--help" | "-h") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::FAILURE;
        }
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tunebox-benchmarks: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Options of `run`.
#[derive(Debug)]
struct Options {
    worker: PathBuf,
    quick: bool,
    json: Option<PathBuf>,
    strict: bool,
    /// Groups to run; empty: all.
    only: Vec<String>,
}

/// The groups of figures, in the order they run; `--only` selects some.
const GROUPS: &[&str] = &[
    "spawn",
    "round-trips",
    "cold-start",
    "crash",
    "timeout",
    "orphan",
    "cpu-timing",
    "flush",
    "big",
    "throughput",
    "respawn",
    "scaling",
    "sandbox",
];

impl Options {
    fn parse(args: &[String]) -> Result<Options> {
        let mut worker = std::env::var_os("TUNEBOX_WORKER").map(PathBuf::from);
        let (mut quick, mut json, mut strict, mut only) = (false, None, false, Vec::new());
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--quick" => quick = true,
                "--strict" => strict = true,
                "--worker" => worker = Some(args.next().context("--worker needs a path")?.into()),
                "--json" => json = Some(args.next().context("--json needs a path")?.into()),
                "--only" => {
                    for group in args.next().context("--only needs groups")?.split(',') {
                        if !GROUPS.contains(&group) {
                            bail!("unknown group `{group}`; the groups are {GROUPS:?}");
                        }
                        only.push(group.to_owned());
                    }
                }
                other => bail!("unknown option `{other}`\n{USAGE}"),
            }
        }
        Ok(Options {
            worker: worker.context("no worker: pass --worker PATH or set TUNEBOX_WORKER")?,
            quick,
            json,
            strict,
            only,
        })
    }
}

/// Measures everything, prints the table, writes the JSON.
fn run(options: Options) -> Result<ExitCode> {
    let started = Instant::now();
    let setup = Setup::new(options.worker, options.quick)?;
    let machine = Machine::detect();
    eprintln!(
        "bench: {} ({} cores), {}; worker {}{}",
        machine.cpu,
        machine.cores,
        machine.kernel,
        setup.worker.display(),
        if setup.quick { "; quick run" } else { "" }
    );
    let wanted = |group: &str| options.only.is_empty() || options.only.iter().any(|g| g == group);
    let mut figures: Vec<Figure> = Vec::new();
    let mut scaling = Vec::new();
    for &group in GROUPS.iter().filter(|g| wanted(g)) {
        match group {
            "spawn" => figures.extend(floors::spawn_figures(&setup)?),
            "round-trips" => figures.extend(round_trips::figures(&setup, machine.cores)?),
            "cold-start" => figures.extend(process_figs::cold_start(&setup)?),
            "crash" => figures.extend(process_figs::crash_to_error(&setup)?),
            "timeout" => figures.push(process_figs::timeout_overshoot(&setup)?),
            "orphan" => figures.push(process_figs::orphan_cleanup(&setup)?),
            "cpu-timing" => figures.push(process_figs::cpu_timing_overhead(&setup)?),
            "sandbox" => figures.extend(sandbox_figs::sandbox_costs(&setup)?),
            "flush" => figures.extend(flush_figs::flush_costs(&setup)?),
            "big" => {
                let source = floors::pattern(floors::BIG);
                let memcpy = floors::memcpy_figure(&setup, &source)?;
                let memcpy_ms = memcpy.summary.median;
                figures.push(memcpy);
                figures.extend(process_figs::big_transfers(&setup, &source, memcpy_ms)?);
            }
            "throughput" => figures.extend(pool_figs::throughput(&setup)?),
            "respawn" => figures.extend(pool_figs::crash_to_next(&setup)?),
            "scaling" => scaling = pool_figs::scaling(&setup)?,
            other => unreachable!("group {other} is listed in GROUPS"),
        }
    }

    // Targets first, in the order of issue 9.
    figures.sort_by_key(|f| order(f.key));
    let report = Report {
        machine,
        quick: setup.quick,
        elapsed_s: started.elapsed().as_secs_f64(),
        figures,
        scaling,
    };
    println!("{}", report.table());
    if let Some(path) = &options.json {
        report.write_json(path)?;
        eprintln!("bench: wrote {}", path.display());
    }
    Ok(if options.strict && !report.missed().is_empty() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Position of a figure in the table: issue 9's order, then context, then floors.
fn order(key: &str) -> usize {
    const ORDER: &[&str] = &[
        "cold_start",
        "ping_process",
        "ping_pool",
        "throughput_executor",
        "throughput_pool",
        "crash_to_error",
        "crash_to_next_result",
        "timeout_overshoot",
        "big_roundtrip_fresh",
        "orphan_cleanup",
        "cpu_timing_overhead",
        "clean_shutdown",
        "cold_start_big_parent",
        "exec_worker_no_parent",
        "ping_process_same_core",
        "ping_process_cross_core",
        "crash_to_error_no_capture",
        "abort_submitted_to_next_result",
        "big_roundtrip_reused",
        "big_handoff_reused",
        "floor_socketpair_rtt",
        "floor_socketpair_rtt_same_core",
        "floor_socketpair_rtt_cross_core",
        "floor_fork_exec_static",
        "floor_memcpy_256mib",
    ];
    ORDER.iter().position(|k| *k == key).unwrap_or(ORDER.len())
}
