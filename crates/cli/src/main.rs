//! `tunebox`: tune kernel families in isolated worker processes and rank them.
//!
//! Spawned with `TUNEBOX_WORKER_SERVER` set, the binary runs as a worker instead (so a
//! `TuningProcess` can use it without a second binary).

mod count;
mod devices;
mod doctor;
mod interrupt;
mod progress;
mod table;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Result, bail, ensure};
use clap::{Args, Parser, Subcommand, ValueEnum};
use tunebox_tune::replay::{Recorded, Trace};
use tunebox_tune::strategies::StrategyName;
use tunebox_tune::{
    CacheMode, MAX_TIMEOUT_S, Report, Selection, ShardSpec, TuneOptions, WorkerEnv,
};

use crate::interrupt::EXIT_INTERRUPTED;
use crate::progress::Progress;
use crate::table::TableOptions;

/// Most worker processes a run may start.
const MAX_WORKERS: usize = 512;

/// Benchmark kernel candidates in isolated worker processes and rank them.
///
/// A manifest (TOML) names a kernel, its arguments and the params whose combinations are the
/// choices; `tunebox tune` compiles every choice, measures each in a fresh worker process (a
/// choice that crashes, hangs or computes garbage costs its own result only), verifies its
/// outputs, and prints them ranked. See docs/manifest.md for every manifest field.
#[derive(Parser)]
#[command(
    name = "tunebox",
    version,
    about,
    long_about,
    propagate_version = true,
    after_help = "Examples:
  tunebox tune examples/matmul-cpu.toml
  tunebox tune examples/matmul-cpu.toml --strategy random --budget 10 --refine 3
  tunebox tune big.toml --shard auto --json results/shard-$SLURM_ARRAY_TASK_ID.json
  tunebox merge results/*.json --json merged.json
  tunebox report merged.json
  tunebox doctor"
)]
struct Cli {
    /// Debug logs on stderr (-vv: trace); RUST_LOG works too.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Compile, benchmark and verify the choices of a manifest; print them ranked.
    #[command(after_help = TUNE_EXAMPLES)]
    Tune(Box<TuneArgs>),
    /// Print the ranked table of a JSON report, a results cache, a Kernel Tuner cache file or a
    /// FAIR T4 file (told apart by their content); with two files, compare them.
    ///
    /// Two reports of one space (before and after a change, or two GPUs) are compared choice by
    /// choice: the ratio of their times, their change of rank, and whether the best moved beyond
    /// the noise; --html draws it.
    #[command(after_help = "Examples:
  tunebox report results.json
  tunebox report results.json --html results.html
  tunebox report A100.json.gz --top 10 --t4 A100-T4.json
  tunebox report examples/matmul-cpu.tunebox-cache.jsonl --top 10
  tunebox report results.json --csv results.csv
  tunebox report before.json after.json --html compared.html")]
    Report {
        /// A JSON report (`tune --json`, `merge --json`), a results cache (`*.jsonl`), a Kernel
        /// Tuner cache file (`.json`, `.json.gz`: time is its `time`, ms) or a T4 file (time is
        /// the objective's measurement); a second one to compare with the first.
        #[arg(required = true, num_args = 1..=2, value_name = "FILE")]
        files: Vec<PathBuf>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Combine the results of shards (JSON reports or results caches) into one ranking.
    ///
    /// Refuses files of different manifests or tunebox versions, reports choices that no file has
    /// (naming the missing shards) or that several files have, and ranks the results of each
    /// device apart unless --across-devices.
    #[command(after_help = "Examples:
  tunebox merge results/shard-*.json --json merged.json
  tunebox merge a100.json h100.json --across-devices")]
    Merge {
        /// The shards' results.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Rank results from different devices together (by default each device is ranked on
        /// its own: timings from different hardware do not compare).
        #[arg(long)]
        across_devices: bool,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Check the C compiler, the kernel cache, spawning a worker, a CPU benchmark, and the CUDA
    /// driver and NVRTC (through a worker); say how to fix what fails.
    ///
    /// Exits 0 when everything CPU tuning needs works (CUDA is optional).
    Doctor,
    /// List the GPUs a worker sees (name, compute capability, memory, L2, SMs, clocks, UUID),
    /// probed in a worker process: the `tunebox` process itself never loads a GPU library.
    Devices {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

const TUNE_EXAMPLES: &str = "Examples:
  tunebox tune examples/matmul-cpu.toml                  all choices, ranked
  tunebox tune examples/matmul-cpu.toml --list           the choices, nothing run
  tunebox tune m.toml --json r.json --csv r.csv          also write JSON and CSV
  tunebox tune m.toml --strategy random --budget 50      a seeded random sample of 50
  tunebox tune m.toml --strategy auto --budget 100       adaptive search, 100 choices
  tunebox tune m.toml --count                            how many choices, nothing run
  tunebox tune t1.json --replay cache.json.gz --strategy ils --budget 200
                                                         simulate a search on recorded data
  tunebox tune m.toml --max-time 600 --refine 5          10 minutes, then the best 5 again
  tunebox tune m.toml --shard 2/8 --json shard-2.json    shard 2 of 8 (numbered from 0)
  tunebox tune m.toml --shard auto --json r-$SLURM_ARRAY_TASK_ID.json   in a Slurm array

A re-run skips the choices its results cache already has (Ctrl-C, a kill or a lost node lose
nothing finished); --fresh measures everything again.

Exit status: 0 the run completed (even if choices failed); 1 an error (bad manifest or options,
a reference that fails); 3 the run completed but some results could not be kept in the results
cache (full or read-only file system: a re-run measures them again); 130 interrupted (Ctrl-C,
SIGTERM).";

/// Where a report goes besides the table.
#[derive(Args)]
struct OutputArgs {
    /// Also write the results as JSON to this file.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Also write the results as CSV (one row per choice, a column per param and metric).
    #[arg(long, value_name = "PATH")]
    csv: Option<PathBuf>,
    /// Also write the results as a FAIR T4 file (JSON, times in ms; docs/manifest.md, "T4
    /// output").
    #[arg(long, value_name = "PATH")]
    t4: Option<PathBuf>,
    /// Also write the report as one self-contained HTML page (figures of the ranking, each
    /// parameter's effect, the search and the measuring; nothing fetched from the network).
    #[arg(long, value_name = "PATH")]
    html: Option<PathBuf>,
    /// Show only the best N rows of the table (per device).
    #[arg(long, value_name = "N")]
    top: Option<usize>,
    /// After the table, print each distinct error message whole (compiler output, the crashed
    /// worker's stderr), with the choices that gave it; the table shows its first line.
    #[arg(long)]
    errors: bool,
}

impl OutputArgs {
    /// The files to write.
    fn files(&self) -> impl Iterator<Item = &PathBuf> {
        [&self.json, &self.csv, &self.t4, &self.html]
            .into_iter()
            .flatten()
    }
}

#[derive(Args)]
struct TuneArgs {
    /// The TOML manifest describing the kernel family, or a FAIR T1 file (JSON)
    /// (docs/manifest.md).
    manifest: PathBuf,
    /// Only list the choices this run would measure (after restrictions, strategy and shard);
    /// compile and run nothing.
    #[arg(long)]
    list: bool,
    /// Only print the number of valid choices (and of choices before restrictions); compile and
    /// run nothing.
    #[arg(long, conflicts_with = "list")]
    count: bool,
    /// Measure nothing: take every measurement from this recorded file (a Kernel Tuner cache
    /// file, `.json` or `.json.gz`; a T4 results file; a tunebox results cache) and account
    /// time as it was spent there (compile + verification + benchmark + framework time), as
    /// Kernel Tuner's simulation mode does. --max-time is then simulated time. See
    /// docs/search.md.
    #[arg(long, value_name = "RECORDED", conflicts_with = "list")]
    replay: Option<PathBuf>,
    #[command(flatten)]
    output: OutputArgs,
    /// The results cache [default: the manifest's, beside it as NAME.tunebox-cache.jsonl
    /// (NAME.shard-K-of-N.tunebox-cache.jsonl for a shard), whatever --json says].
    #[arg(long, value_name = "PATH", conflicts_with = "no_cache")]
    cache: Option<PathBuf>,
    /// Neither read nor write a results cache.
    #[arg(long)]
    no_cache: bool,
    /// Measure every choice again, ignoring the results cache (new results are still added).
    #[arg(long)]
    fresh: bool,
    /// Run the workers in a sandbox (no network, files limited to system paths, the manifest's
    /// folder, the cache and a scratch folder; seccomp; memory, task and file-size limits), as
    /// the manifest's [sandbox] table does; its allowances are set there. docs/sandbox.md.
    #[arg(long)]
    sandbox: bool,
    /// Worker processes measuring in parallel. The default, 1, measures one choice at a time:
    /// concurrent CPU benchmarks share the last-level cache and memory bandwidth and perturb
    /// each other. Compilation is always parallel.
    #[arg(long, default_value_t = 1, value_name = "N")]
    workers: usize,
    /// Per-choice timeout in seconds (overrides the manifest's `timeout_s`). It covers every
    /// call of the choice: the first call, the estimate, warmup and timed reps, and the final
    /// verification call.
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,
    /// Benchmarks a worker process runs before it is replaced (TVM's `maximum_process_uses`);
    /// 0 means unlimited. The default for C kernels, 1, gives every choice a fresh process, so
    /// that nothing a choice does to its process (floating-point modes, signal handlers, leaked
    /// threads or memory) can change the next choice's result. CUDA kernels run no host code,
    /// so their workers are kept (0; a sticky fault still replaces one): a fresh process would
    /// cost a new CUDA context per choice.
    #[arg(long, value_name = "N")]
    max_process_uses: Option<u64>,
    /// How to pick the choices: all of them, a random sample of --budget, or an adaptive
    /// search that measures --budget choices. For adaptive search pick `auto`: first of
    /// tunebox's strategies at full and quarter budgets on recorded spaces of six GPUs and two
    /// kernels, and not behind `bayes` beyond the noise with any GPU or kernel held out
    /// (docs/search.md).
    /// [default: brute-force; random with --budget]
    #[arg(long, value_enum)]
    strategy: Option<Strategy>,
    /// Measure N choices: a random sample unless --strategy names another.
    #[arg(long, value_name = "N")]
    budget: Option<usize>,
    /// Seed of the random sample or search (every shard of a run must use the same).
    #[arg(long, default_value_t = 0, value_name = "N")]
    seed: u64,
    /// Start no new choice after SECS seconds (finished ones are kept and cached; a re-run
    /// measures the rest).
    #[arg(long, value_name = "SECS")]
    max_time: Option<f64>,
    /// Re-measure the best K choices at the end with 4x rep_ms (and 4x the timeout) and rank
    /// them by that median (a quick screen, then a careful look at the candidates that matter);
    /// a choice whose re-measurement fails keeps its screening result.
    #[arg(long, value_name = "K")]
    refine: Option<usize>,
    /// Rounds of short windows after screening: the manifest's reps are shared by the
    /// screening window and up to N more, in an order shuffled per round; a choice leaves the
    /// rounds once two of its windows agree within their reps' noise (or, far behind the best
    /// with no other choice near it, at screening); each choice's time is the fastest of its
    /// windows' medians, and the choices whose intervals overlap the best's are raced in more
    /// rounds. 0 measures each choice once, in one window (docs/performance.md).
    #[arg(long, default_value_t = tunebox_tune::DEFAULT_ROUNDS, value_name = "N")]
    rounds: usize,
    /// Seconds the race for the top may take after the rounds [default: a quarter as long as the
    /// rounds took, at most 10].
    #[arg(long, value_name = "SECS")]
    race_time: Option<f64>,
    /// Measure every window in a fresh worker process. By default a choice's first window
    /// (where it is verified) runs in a fresh worker and its later windows (the rounds', the
    /// race's) in reused workers, which cost a window its calls rather than a process start;
    /// with --sandbox, or --max-process-uses other than 1, this is how windows are measured
    /// anyway.
    #[arg(long)]
    fresh_windows: bool,
    /// Measure only shard K of N (K = 0..N-1) of the choices, split round robin by their
    /// stable index; `auto` reads SLURM_ARRAY_TASK_ID/_COUNT (or _MIN/_MAX) or Kubernetes'
    /// JOB_COMPLETION_INDEX (with --shards N). The results go to --json [default:
    /// MANIFEST-STEM.shard-K-of-N.json in the current directory]; `tunebox merge` combines them.
    #[arg(long, value_name = "K/N|auto", value_parser = tunebox_tune::parse_shard)]
    shard: Option<ShardSpec>,
    /// The number of shards, for --shard auto: required in a Kubernetes Indexed Job (its
    /// `completions`); in a Slurm array it makes SLURM_ARRAY_TASK_ID the shard index (submit
    /// --array=0-N-1), so that failed shards can be submitted again alone (--array=3,7).
    #[arg(long, value_name = "N")]
    shards: Option<usize>,
    /// Give the workers a variable of this environment (NAME), or set one (NAME=VALUE), on
    /// top of the manifest's `[env]`; repeat for more. Workers get only a documented part of
    /// the environment by default (docs/manifest.md, "[env]"); `--env '*'` passes all of it.
    #[arg(long = "env", value_name = "NAME[=VALUE]")]
    env: Vec<String>,
    /// No progress on stderr.
    #[arg(long, short)]
    quiet: bool,
}

/// `--strategy`: one of the library's [`StrategyName`]s (its list, its names), with help for
/// each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Strategy(StrategyName);

impl Strategy {
    const BRUTE_FORCE: Strategy = Strategy(StrategyName::BruteForce);
    const RANDOM: Strategy = Strategy(StrategyName::Random);
    const ALL: [Strategy; 8] = {
        let mut all = [Strategy::BRUTE_FORCE; 8];
        let mut i = 0;
        while i < all.len() {
            all[i] = Strategy(StrategyName::ALL[i]);
            i += 1;
        }
        all
    };

    /// Its name in reports.
    fn name(self) -> &'static str {
        self.0.name()
    }

    /// What `--help` says of it.
    fn help(self) -> &'static str {
        match self.0 {
            StrategyName::BruteForce => "Every choice, in canonical order",
            StrategyName::Random => {
                "A random sample of --budget choices (seeded by --seed), in sampled order"
            }
            StrategyName::Genetic => "Genetic algorithm (Kernel Tuner's genetic_algorithm)",
            StrategyName::Annealing => "Simulated annealing (Kernel Tuner's simulated_annealing)",
            StrategyName::Ils => "Greedy iterated local search (Kernel Tuner's greedy_ils)",
            StrategyName::De => "Differential evolution, best1bin (Kernel Tuner's diff_evo)",
            StrategyName::Bayes => {
                "Bayesian optimization: Gaussian process, expected improvement (Kernel \
                 Tuner's bayes_opt)"
            }
            StrategyName::Auto => {
                "The adaptive search to pick, at any budget: Bayesian optimization on ranks \
                 (failures ranked last, string params categorical, a batch for as many \
                 workers); after 64 results it takes turns with iterated local search from the \
                 best, each turn to the one that improved the best more. Not behind `bayes` in \
                 any held-out fold (docs/search.md)"
            }
        }
    }
}

impl ValueEnum for Strategy {
    fn value_variants<'a>() -> &'a [Self] {
        &Strategy::ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()).help(self.help()))
    }
}

fn main() -> ExitCode {
    tunebox_worker::run_if_worker(tunebox_worker::Registry::standard);
    let cli = Cli::parse();
    let mut logger =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"));
    match cli.verbose {
        0 => {}
        1 => {
            logger.filter_level(log::LevelFilter::Debug);
        }
        _ => {
            logger.filter_level(log::LevelFilter::Trace);
        }
    }
    logger.init();
    match run(cli) {
        Ok(code) => code,
        // `tunebox … | head`: the reader has seen enough.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tunebox: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn run(cli: Cli) -> Result<ExitCode> {
    let verbose = cli.verbose > 0;
    match cli.command {
        Command::Devices { json } => devices::print(json).map(|()| ExitCode::SUCCESS),
        Command::Doctor => {
            let ok = doctor::run(&mut std::io::stdout().lock())?;
            Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Report { files, output } => match files.as_slice() {
            [a, b] => compare(a, b, &output),
            [file] => report(file, &output),
            _ => bail!("give one file to report, or two to compare"),
        },
        Command::Merge {
            files,
            across_devices,
            output,
        } => {
            let report = tunebox_tune::merge(&files, across_devices)?;
            for note in report
                .info
                .notes
                .iter()
                .filter(|n| n.starts_with("MISSING"))
            {
                eprintln!("tunebox: warning: {note}");
            }
            emit(&report, &output, true, true, Origin::Merge)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Tune(args) => tune(*args, verbose),
    }
}

/// `tunebox report FILE`: the table of each report the file holds, and the files asked for.
fn report(file: &std::path::Path, output: &OutputArgs) -> Result<ExitCode> {
    let reports = tunebox_tune::load_reports(file)?;
    for (i, report) in reports.iter().enumerate() {
        if i > 0 {
            writeln!(std::io::stdout())?;
        }
        emit(
            report,
            output,
            reports.len() == 1,
            true,
            Origin::Report(file),
        )?;
    }
    if reports.len() > 1 && output.files().next().is_some() {
        bail!(
            "{} holds results of {} manifests; --json, --csv, --t4 and --html need one (merge \
             the results of one manifest with `tunebox merge`)",
            file.display(),
            reports.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `tunebox report A B`: the two reports compared, in a few lines and `--html`.
fn compare(a: &std::path::Path, b: &std::path::Path, output: &OutputArgs) -> Result<ExitCode> {
    ensure!(
        output.json.is_none()
            && output.csv.is_none()
            && output.t4.is_none()
            && output.top.is_none()
            && !output.errors,
        "with two files `tunebox report` compares them: only --html applies (report one file \
         for --json, --csv, --t4, --top or --errors)"
    );
    let one = |path: &std::path::Path| -> Result<Report> {
        let mut reports = tunebox_tune::load_reports(path)?;
        ensure!(
            reports.len() == 1,
            "{} holds results of {} manifests; compare one manifest's (`tunebox merge` \
             writes them as one report)",
            path.display(),
            reports.len()
        );
        Ok(reports.remove(0))
    };
    let (ra, rb) = (one(a)?, one(b)?);
    let comparison = tunebox_tune::Comparison::new(&ra, &rb)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "A = {}, B = {}", a.display(), b.display())?;
    for line in comparison.summary() {
        writeln!(out, "{line}")?;
    }
    if let Some(path) = &output.html {
        tunebox_tune::HtmlComparison::new(&comparison).write(path)?;
        eprintln!("tunebox: wrote {}", path.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// What a printed report comes from: what the table may suggest depends on it.
#[derive(Debug, Clone, Copy)]
enum Origin<'a> {
    /// `tunebox tune` measured it.
    Tune,
    /// `tunebox tune --replay`: recorded measurements, with the course of the search and
    /// (for `--html`) the recording replayed.
    Replay(&'a Trace, Option<&'a Recorded>),
    /// `tunebox merge`.
    Merge,
    /// `tunebox report FILE`.
    Report(&'a std::path::Path),
}

/// Prints `report`'s table and, with `write_files`, writes the files `output` names (saying
/// so when `announce`); `origin` says where the report came from.
fn emit(
    report: &Report,
    output: &OutputArgs,
    write_files: bool,
    announce: bool,
    origin: Origin<'_>,
) -> Result<()> {
    let source = match origin {
        Origin::Report(file) => Some(file),
        _ => None,
    };
    let files: Vec<String> = output
        .files()
        .filter(|_| write_files)
        .map(|path| path.display().to_string())
        .collect();
    // Where the whole messages can be read again: the file reported, else the --json written,
    // else the run's results cache.
    let source = source
        .or(output.json.as_deref().filter(|_| write_files))
        .map(|p| p.display().to_string())
        .or_else(|| report.info.cache.as_ref().map(|c| c.path.clone()));
    let options = TableOptions {
        width: table::terminal_width(),
        top: output.top,
        files: &files,
        errors: output.errors,
        source: source.as_deref(),
        remeasure: remeasure(report, origin),
    };
    table::print_table(report, &mut std::io::stdout().lock(), options)?;
    if write_files {
        write_report_files(report, output, announce, origin)?;
    }
    Ok(())
}

/// How the table says to measure tied choices again: only tunebox's own measurements can be,
/// by `tune`.
fn remeasure<'r>(report: &'r Report, origin: Origin<'_>) -> table::Remeasure<'r> {
    let manifest = &report.info.header.manifest;
    let measurable = !report.info.header.manifest_hash.is_empty();
    match origin {
        Origin::Tune => table::Remeasure::Flag,
        Origin::Replay(..) => table::Remeasure::No,
        Origin::Merge | Origin::Report(_) if measurable => table::Remeasure::Command(manifest),
        Origin::Merge | Origin::Report(_) => table::Remeasure::No,
    }
}

/// Writes `report` to the files `output` names (`--json`, `--csv`, `--t4`, `--html`; a
/// replay's page with its search replayed), saying so when `announce`.
fn write_report_files(
    report: &Report,
    output: &OutputArgs,
    announce: bool,
    origin: Origin<'_>,
) -> Result<()> {
    let wrote = |path: &std::path::Path| {
        if announce {
            eprintln!("tunebox: wrote {}", path.display());
        }
    };
    if let Some(path) = &output.json {
        tunebox_tune::write_json(report, path)?;
        wrote(path);
    }
    if let Some(path) = &output.csv {
        tunebox_tune::write_csv(report, path)?;
        wrote(path);
    }
    if let Some(path) = &output.t4 {
        tunebox_tune::write_t4(report, path)?;
        wrote(path);
    }
    if let Some(path) = &output.html {
        let page = tunebox_tune::HtmlReport::new(report);
        match origin {
            Origin::Replay(trace, recorded) => page.replayed(trace, recorded),
            _ => page,
        }
        .write(path)?;
        wrote(path);
    }
    Ok(())
}

/// What `tunebox tune` was asked to do.
enum Mode {
    /// `--count`: the number of valid choices.
    Count,
    /// `--replay RECORDED`: a simulated run over recorded measurements.
    Replay(PathBuf),
    /// `--list`: the choices a run would measure.
    List,
    /// A tuning run.
    Run,
}

impl Mode {
    fn of(args: &TuneArgs) -> Mode {
        if args.count {
            Mode::Count
        } else if let Some(recorded) = &args.replay {
            Mode::Replay(recorded.clone())
        } else if args.list {
            Mode::List
        } else {
            Mode::Run
        }
    }
}

/// `tunebox tune`: the options are checked first (a listed command line is one that runs),
/// then one function per mode.
fn tune(args: TuneArgs, verbose: bool) -> Result<ExitCode> {
    let selection = selection(&args)?;
    let shard =
        tunebox_tune::resolve_shard(args.shard, args.shards, |name| std::env::var(name).ok())?;
    ensure!(
        (1..=MAX_WORKERS).contains(&args.workers),
        "--workers must be between 1 and {MAX_WORKERS}"
    );
    let timeout = seconds("--timeout", args.timeout)?;
    let max_time = seconds("--max-time", args.max_time)?;
    let race = seconds("--race-time", args.race_time)?;
    let env = args
        .env
        .iter()
        .try_fold(WorkerEnv::default(), |env, arg| env.arg(arg))
        .map_err(|e| anyhow::anyhow!("--env: {e}"))?;
    match Mode::of(&args) {
        Mode::Count => count(&args.manifest, args.quiet),
        Mode::Replay(recorded) => replay(&args, &recorded, &selection, max_time),
        Mode::List => list(&args.manifest, &selection, shard, env, args.workers),
        Mode::Run => {
            let options = TuneOptions {
                workers: args.workers,
                timeout,
                // Set from the manifest's kernel in `run_tune` when not given.
                max_process_uses: args.max_process_uses.filter(|&uses| uses > 0),
                worker: None,
                json: None,
                csv: None,
                cache: match (args.no_cache, &args.cache) {
                    (true, _) => CacheMode::Off,
                    (false, Some(path)) => CacheMode::Path(path.clone()),
                    (false, None) => CacheMode::Default,
                },
                fresh: args.fresh,
                selection,
                max_time,
                refine: args.refine,
                shard,
                rounds: args.rounds,
                race,
                warm_windows: !args.fresh_windows,
            };
            run_tune(args, options, env, verbose)
        }
    }
}

/// A number of seconds given as `flag`: above 0, at most a week.
fn seconds(flag: &str, value: Option<f64>) -> Result<Option<Duration>> {
    value
        .map(|t| {
            ensure!(
                t.is_finite() && t > 0.0 && t <= MAX_TIMEOUT_S,
                "{flag} must be a number of seconds above 0 and at most {MAX_TIMEOUT_S} (a week)"
            );
            Ok(Duration::from_secs_f64(t))
        })
        .transpose()
}

/// `--count`.
fn count(manifest: &std::path::Path, quiet: bool) -> Result<ExitCode> {
    count::print_count(manifest, quiet)?;
    Ok(ExitCode::SUCCESS)
}

/// `--replay RECORDED`.
fn replay(
    args: &TuneArgs,
    recorded: &std::path::Path,
    selection: &Selection,
    max_time: Option<Duration>,
) -> Result<ExitCode> {
    // The strategy's own time is on the simulated clock, as a real run's --max-time counts it.
    let budget = tunebox_tune::replay::Budget::new(
        selection.budget.unwrap_or(usize::MAX),
        max_time.map_or(f64::INFINITY, |t| t.as_secs_f64() * 1000.0),
    );
    let (report, trace) =
        tunebox_tune::replay::replay(&args.manifest, recorded, selection, budget)?;
    // The page draws random search's expected course and the optimum from the whole recording.
    let whole = match &args.output.html {
        Some(_) => Some(recording(&args.manifest, recorded)?),
        None => None,
    };
    emit(
        &report,
        &args.output,
        true,
        !args.quiet,
        Origin::Replay(&trace, whole.as_ref()),
    )?;
    writeln!(
        std::io::stdout(),
        "replayed {} measurements of {}: simulated time {:.1} s (the strategy's own {:.3} s), \
         best {}",
        trace.points.len(),
        recorded.display(),
        trace.elapsed_ms() / 1000.0,
        trace.strategy_ms / 1000.0,
        trace
            .best_ms()
            .map_or_else(|| "none (every choice failed)".into(), table::format_time)
    )?;
    Ok(ExitCode::SUCCESS)
}

/// The recording `recorded` of the space of `manifest`, every choice's time and cost.
fn recording(manifest: &std::path::Path, recorded: &std::path::Path) -> Result<Recorded> {
    let space = tunebox_tune::load_space(manifest)?;
    let recording = tunebox_tune::replay::Recording::read(recorded)?;
    Ok(Recorded::new(&recording, &space)?)
}

/// `--list`.
fn list(
    manifest: &std::path::Path,
    selection: &Selection,
    shard: Option<tunebox_tune::ShardInfo>,
    env: WorkerEnv,
    workers: usize,
) -> Result<ExitCode> {
    let plan = tunebox_tune::plan_batched(manifest, selection, shard, workers)?.with_env(env);
    for note in plan.manifest().notes() {
        eprintln!("tunebox: note: {note}");
    }
    for reason in plan.manifest().unsupported() {
        eprintln!("tunebox: note: cannot be tuned: {reason}");
    }
    let mut out = std::io::stdout().lock();
    for choice in plan
        .selected()
        .iter()
        .filter_map(|&i| plan.space().choice(i))
    {
        writeln!(out, "{}", choice.label())?;
    }
    for note in plan.notes() {
        eprintln!("note: {note}");
    }
    Ok(ExitCode::SUCCESS)
}

/// A tuning run: the output files settled (a shard's JSON named after it), the run, the table
/// and files.
fn run_tune(
    args: TuneArgs,
    mut options: TuneOptions,
    env: WorkerEnv,
    verbose: bool,
) -> Result<ExitCode> {
    let mut output = args.output;
    if let (Some(shard), None) = (options.shard, &output.json) {
        let stem = args
            .manifest
            .file_stem()
            .map_or_else(|| "tunebox".into(), |s| s.to_string_lossy().into_owned());
        output.json = Some(PathBuf::from(format!(
            "{stem}.shard-{}-of-{}.json",
            shard.index, shard.count
        )));
    }
    options.json = output.json.clone();
    options.csv = output.csv.clone();
    let stop = interrupt::stop();
    let progress = Progress::new(args.quiet, verbose);
    let plan = tune_plan(&args.manifest, args.sandbox, &options, &output)?;
    if args.max_process_uses.is_none() {
        // Fresh windows are fresh processes: a worker per window, whatever the kernel.
        options.max_process_uses = if args.fresh_windows {
            Some(1)
        } else {
            plan.manifest().default_max_process_uses()
        };
    }
    let report = tunebox_tune::run(plan.with_env(env), &options, &progress, &stop)?;
    // Why results could not be kept, when a warning of the run said it already.
    let reason_said = report
        .info
        .cache
        .as_ref()
        .and_then(|c| c.not_cached_reason.as_deref())
        .is_some_and(|reason| progress.warned(reason));
    drop(progress);
    let emitted = emit(&report, &output, true, !args.quiet, Origin::Tune);
    // Said even with --quiet, and when a file could not be written either (the same full
    // disk): a result that was not kept is measured again by the next run.
    let not_cached = not_cached_warning(&report, reason_said);
    if let Some(warning) = &not_cached {
        eprintln!("tunebox: warning: {warning}");
    }
    emitted?;
    if report.info.interrupted {
        return Ok(ExitCode::from(EXIT_INTERRUPTED));
    }
    if not_cached.is_some() {
        return Ok(ExitCode::from(EXIT_NOT_CACHED));
    }
    Ok(ExitCode::SUCCESS)
}

/// The plan of a tuning run of `manifest`: as many proposals at once as there are workers to
/// measure them (auto's batch), the report's files besides --json and --csv (which the run
/// checks) checked as those are, before anything is measured; sandboxed by `--sandbox` when
/// the manifest says nothing of a sandbox.
fn tune_plan(
    manifest: &std::path::Path,
    sandbox: bool,
    options: &TuneOptions,
    output: &OutputArgs,
) -> Result<tunebox_tune::Plan> {
    let plan =
        tunebox_tune::plan_batched(manifest, &options.selection, options.shard, options.workers)?;
    for (flag, path) in [("--t4", &output.t4), ("--html", &output.html)] {
        if let Some(path) = path {
            plan.check_output(flag, path)?;
        }
    }
    let plan = match plan.manifest().sandbox() {
        None if sandbox => {
            let sandbox = plan.manifest().default_sandbox();
            plan.with_sandbox(Some(sandbox))
        }
        _ => plan,
    };
    Ok(plan)
}

/// The exit status of a run that finished (its table and files written) but could not keep
/// every result in its results cache (a full or read-only file system).
const EXIT_NOT_CACHED: u8 = 3;

/// What a run whose results cache could not keep every result must say: how many, why, and
/// the fix (`reason_said`: a warning of the run said why already, so it is not said again).
fn not_cached_warning(report: &Report, reason_said: bool) -> Option<String> {
    let cache = report.info.cache.as_ref().filter(|c| c.not_cached > 0)?;
    let reason = match cache.not_cached_reason.as_deref() {
        Some(_) if reason_said => format!(
            "the results cache {} could not be written (why: the warning above)",
            cache.path
        ),
        Some(reason) => reason.to_owned(),
        None => "the results cache could not be written".to_owned(),
    };
    Some(format!(
        "{} of this run's results could not be kept: {reason}. The table and files above have \
         them; a re-run measures them again (exit status {EXIT_NOT_CACHED})",
        cache.not_cached,
    ))
}

/// The strategy, budget and seed: `--budget` alone means a random sample.
fn selection(args: &TuneArgs) -> Result<Selection> {
    let strategy = match (args.strategy, args.budget) {
        (Some(Strategy::BRUTE_FORCE), Some(_)) => bail!(
            "--budget samples choices at random; drop --strategy brute-force, or drop --budget \
             to measure every choice"
        ),
        (Some(Strategy::RANDOM), None) => {
            bail!("--strategy random needs --budget N, the number of choices to sample")
        }
        (Some(strategy), None) if strategy != Strategy::BRUTE_FORCE => bail!(
            "--strategy {} needs --budget N, the number of choices to measure",
            strategy.name()
        ),
        (Some(strategy), _) => strategy,
        (None, Some(_)) => Strategy::RANDOM,
        (None, None) => Strategy::BRUTE_FORCE,
    };
    if let Some(budget) = args.budget {
        ensure!(budget > 0, "--budget must be at least 1");
    }
    if let Some(refine) = args.refine {
        ensure!(
            refine > 0,
            "--refine must be at least 1 (the number of choices to re-measure)"
        );
    }
    Ok(Selection {
        strategy: strategy.name().to_owned(),
        budget: args.budget.filter(|_| strategy != Strategy::BRUTE_FORCE),
        seed: args.seed,
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// docs/cli.md is "every command and option": each long option of each command is named
    /// there (as `` `--name``), so that an option added to the CLI and not to the reference fails
    /// here.
    #[test]
    fn the_cli_reference_names_every_option() {
        let reference =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/cli.md"))
                .unwrap();
        let cli = super::Cli::command();
        let missing: Vec<String> = cli
            .get_subcommands()
            .flat_map(|command| {
                command
                    .get_arguments()
                    .filter_map(|arg| arg.get_long())
                    .filter(|long| !["help", "version"].contains(long))
                    .filter(|long| !reference.contains(&format!("`--{long}")))
                    .map(|long| format!("{} --{long}", command.get_name()))
                    .collect::<Vec<_>>()
            })
            .collect();
        assert!(missing.is_empty(), "docs/cli.md does not name {missing:?}");
    }
}
