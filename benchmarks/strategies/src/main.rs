//! Compares search strategies on recorded spaces, in simulation, scored as the field scores them:
//! the methodology of Willemsen et al., "A methodology for comparing optimization algorithms for
//! auto-tuning" (FGCS 2024), as its `autotuning-methodology` package (1.1.0) computes it
//! (`tunebox_tune::strategies::score`, a port checked against the package). Run by
//! `cargo xtask strategies`; see docs/search.md.
//!
//! Usage: [`USAGE`] (`--help` prints it).
//!
//! FILES are T1 files (their Conditions are the restrictions) and recorded files (Kernel Tuner
//! cache files `.json`/`.json.gz`, T4 results, tunebox results caches), any kernels, any devices;
//! a recorded file is paired with the T1 file whose stem or `BenchmarkName` is its folder's name
//! or whose `KernelName` is its `kernel_name` (with the only T1 file when there is one). Without
//! FILES: every cache file and T1 file of `data/benchmark_hub`.
//!
//! Each tunebox strategy runs `--seeds` seeds (default 10), doubled up to `--max-seeds` (default
//! 40) until the order of the three leading strategies is settled (each gap above twice its
//! standard error); the output says when it is not. Standard errors come from a bootstrap over
//! the runs. `--loo` adds the leave-one-GPU-out and leave-one-kernel-out selection: in each fold,
//! among the tunebox strategies (or `auto` variants, e.g. `auto[transform=log;turns=0]`) not
//! behind `bayes` beyond twice the standard error on the other spaces, the one of best mean score
//! there is chosen and scored on the held-out ones, beside `bayes` and the default's gap to it;
//! then the setting the same rule picks on every space, and the spaces where the default is
//! behind `bayes`. `--loo-fractions 1,0.25` chooses by the mean over those budget fractions and
//! reports each, `--choose` limits the candidates.
//! `--runs PATH` keeps tunebox's simulated runs and reuses them by strategy name;
//! `--strategy-time` puts tunebox's strategies' own time on the simulated clock. `--package` scores the same traces with
//! the `autotuning-methodology` package too (`benchmarks/kernel-tuner/methodology.py`, in the
//! Kernel Tuner environment) and prints both.
//!
//! When Kernel Tuner is installed (`$KT_VENV` or `target/kernel-tuner-venv`) and `--no-kt` is
//! not given, Kernel Tuner's strategies run in its simulation mode on the same files under the
//! same simulated budgets (`benchmarks/kernel-tuner/strategies.py`), scored the same way, as
//! `kt:NAME`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use tunebox_tune::SearchSpace;
use tunebox_tune::Strategy;
use tunebox_tune::formats::T1File;
use tunebox_tune::replay::{Budget, Recorded, Recording, simulate};
use tunebox_tune::strategies::score::{self, Run, Settings, SpaceStats};
use tunebox_tune::strategies::{self, AutoOptions, AutoSearch, Transform};

/// Runs go on past the end of the time range by this factor, so that the methodology's curve
/// fit has points beyond it (it looks 10–35% past the end).
const RUN_PAST_END: f64 = 1.4;
/// Bootstrap resamples of the runs for a standard error.
const BOOTSTRAP: usize = 16;

struct Options {
    files: Vec<PathBuf>,
    seeds: u64,
    max_seeds: u64,
    fraction: f64,
    svg: PathBuf,
    markdown: Option<PathBuf>,
    strategies: Vec<String>,
    jobs: usize,
    loo: bool,
    package: bool,
    kt_python: Option<PathBuf>,
    kt_seeds: u64,
    kt_strategies: Option<String>,
    kt_traces: Option<PathBuf>,
    /// tunebox's simulated runs are kept here and reused when their strategy and seeds match.
    runs_file: Option<PathBuf>,
    /// The strategies' own time on the simulated clock (tunebox's only: Kernel Tuner's traces
    /// are rebuilt from recorded costs).
    strategy_time: bool,
    /// The strategies the leave-one-out folds choose among (all of tunebox's when empty).
    choose: Vec<String>,
    /// The budget fractions the leave-one-out folds choose by (their mean) and report (the
    /// `--budget-fraction` alone when empty).
    loo_fractions: Vec<f64>,
}

/// The command line, as `--help` prints it.
const USAGE: &str = "usage: cargo run --release -p tunebox-strategies -- [FILES…]
    [--seeds N] [--max-seeds M] [--budget-fraction F] [--strategies a,b,…] [--jobs J]
    [--svg PATH] [--markdown PATH] [--loo] [--loo-fractions F,…] [--choose a,b,…]
    [--runs PATH] [--strategy-time] [--package]
    [--no-kt] [--kt-seeds N] [--kt-strategies a,b,…] [--kt-traces PATH]
(`cargo xtask strategies [ARGS]` passes --svg docs/search-strategies.svg; see docs/search.md)
";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The options from the command line, checked, with the defaults for what it leaves out.
fn parse() -> Result<Options, String> {
    let root = root();
    let mut o = Options::defaults(&root);
    let mut kt = true;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        apply(&mut o, &mut kt, &arg, &mut args)?;
    }
    check(&o)?;
    o.max_seeds = o.max_seeds.max(o.seeds);
    o.jobs = o.jobs.max(1);
    let venv = std::env::var_os("KT_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/kernel-tuner-venv"));
    let python = venv.join("bin/python");
    if (kt || o.package) && python.is_file() {
        o.kt_python = Some(python);
    }
    if !kt {
        o.kt_traces = None;
    }
    if o.files.is_empty() {
        o.files = hub_files(&root.join("data/benchmark_hub"))?;
    }
    Ok(o)
}

impl Options {
    /// The options when the command line gives none (`root`: the workspace).
    fn defaults(root: &Path) -> Options {
        Options {
            files: Vec::new(),
            seeds: 10,
            max_seeds: 40,
            fraction: 1.0,
            svg: root.join("target/strategies/search-strategies.svg"),
            markdown: None,
            strategies: strategies::NAMES
                .iter()
                .filter(|n| **n != "brute-force")
                .map(|n| (*n).to_owned())
                .collect(),
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            loo: false,
            package: false,
            kt_python: None,
            kt_seeds: 5,
            kt_strategies: None,
            kt_traces: None,
            runs_file: None,
            strategy_time: false,
            choose: Vec::new(),
            loo_fractions: Vec::new(),
        }
    }
}

/// Applies one command-line argument `arg` to `o` (`kt`: false after `--no-kt`), taking its
/// value from `args` when it has one; a FILE when it is not an option.
fn apply(
    o: &mut Options,
    kt: &mut bool,
    arg: &str,
    args: &mut impl Iterator<Item = String>,
) -> Result<(), String> {
    let mut value = || args.next().ok_or(format!("{arg} needs a value"));
    match arg {
        "--seeds" => o.seeds = whole(value()?, "--seeds")?,
        "--max-seeds" => o.max_seeds = whole(value()?, "--max-seeds")?,
        "--jobs" => o.jobs = whole(value()?, "--jobs")? as usize,
        "--budget-fraction" => {
            let v = value()?;
            o.fraction = v
                .parse()
                .map_err(|e| format!("--budget-fraction {v}: {e}"))?;
        }
        "--svg" => o.svg = value()?.into(),
        "--markdown" => o.markdown = Some(value()?.into()),
        "--strategies" => o.strategies = value()?.split(',').map(str::to_owned).collect(),
        "--loo" => o.loo = true,
        "--package" => o.package = true,
        "--no-kt" => *kt = false,
        "--kt-seeds" => o.kt_seeds = whole(value()?, "--kt-seeds")?,
        "--kt-strategies" => o.kt_strategies = Some(value()?),
        "--kt-traces" => o.kt_traces = Some(value()?.into()),
        "--runs" => o.runs_file = Some(value()?.into()),
        "--strategy-time" => o.strategy_time = true,
        "--choose" => o.choose = value()?.split(',').map(str::to_owned).collect(),
        "--loo-fractions" => o.loo_fractions = fractions(&value()?)?,
        other if other.starts_with("--") => {
            return Err(format!("unknown option {other} (--help lists them)"));
        }
        file => o.files.push(file.into()),
    }
    Ok(())
}

/// The whole number `v` given to the option `what`.
fn whole(v: String, what: &str) -> Result<u64, String> {
    v.parse::<u64>()
        .map_err(|e| format!("{what} {v}: {e} (a whole number)"))
}

/// The budget fractions `v` given to `--loo-fractions` (comma-separated).
fn fractions(v: &str) -> Result<Vec<f64>, String> {
    v.split(',')
        .map(|f| {
            f.parse::<f64>()
                .map_err(|e| format!("--loo-fractions {v}: {e}"))
        })
        .collect()
}

/// Whether the options parsed make sense together: known strategies, fractions in (0, 1], at
/// least two seeds.
fn check(o: &Options) -> Result<(), String> {
    for s in &o.strategies {
        make(s, 1, 0)?;
    }
    if let Some(f) = o
        .loo_fractions
        .iter()
        .find(|f| f.is_nan() || **f <= 0.0 || **f > 1.0)
    {
        return Err(format!("--loo-fractions {f}: give fractions in (0, 1]"));
    }
    if o.fraction.is_nan() || o.fraction <= 0.0 || o.fraction > 1.0 {
        return Err(format!(
            "--budget-fraction {}: give a fraction in (0, 1]",
            o.fraction
        ));
    }
    if o.seeds < 2 || o.kt_seeds < 2 {
        return Err(
            "--seeds and --kt-seeds must be at least 2 (a standard error needs two)".into(),
        );
    }
    Ok(())
}

/// Every cache file and T1 file of the hub folder.
fn hub_files(hub: &Path) -> Result<Vec<PathBuf>, String> {
    let list = |dir: PathBuf| -> Result<Vec<PathBuf>, String> {
        let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        v.sort();
        Ok(v)
    };
    let mut files = Vec::new();
    let mut kernels = Vec::new();
    for dir in list(hub.join("cachefiles"))? {
        if dir.is_dir() {
            let stem = dir.file_name().unwrap_or_default().to_owned();
            files.extend(list(dir)?);
            kernels.push(hub.join("kernels").join(stem).with_extension("json"));
        }
    }
    files.extend(kernels.into_iter().filter(|k| k.is_file()));
    Ok(files)
}

/// The strategy `name` names: one of [`strategies::NAMES`], or an `auto` variant
/// `auto[transform=rank|log;init=N;xi=F;batch=N;refine=N;handoff=N;turns=N]`.
fn make(name: &str, budget: usize, seed: u64) -> Result<Box<dyn Strategy>, String> {
    if let Some(spec) = name.strip_prefix("auto[").and_then(|s| s.strip_suffix(']')) {
        let mut o = AutoOptions::default();
        for kv in spec.split(';').filter(|s| !s.is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or(format!("{name}: `{kv}` is not key=value"))?;
            let bad = |e: String| format!("{name}: {k}={v}: {e}");
            match k {
                "transform" => {
                    o.transform = match v {
                        "rank" => Transform::Rank,
                        "log" => Transform::Log,
                        _ => return Err(bad("rank or log".into())),
                    }
                }
                "init" => o.initial = v.parse().map_err(|e| bad(format!("{e}")))?,
                "xi" => o.xi = v.parse().map_err(|e| bad(format!("{e}")))?,
                "batch" => o.batch = v.parse().map_err(|e| bad(format!("{e}")))?,
                "refine" => o.refine = v.parse().map_err(|e| bad(format!("{e}")))?,
                "handoff" => o.handoff = v.parse().map_err(|e| bad(format!("{e}")))?,
                "turns" => o.turns = v.parse().map_err(|e| bad(format!("{e}")))?,
                _ => {
                    return Err(bad(
                        "keys: transform, init, xi, batch, refine, handoff, turns".into(),
                    ));
                }
            }
        }
        return Ok(Box::new(AutoSearch::with_options(budget, seed, o)));
    }
    strategies::by_name(name, budget, seed).ok_or(format!(
        "unknown strategy {name} (one of {}, or auto[transform=log;init=20;xi=0.1;batch=4])",
        strategies::NAMES.join(", ")
    ))
}

/// One replayable space and what the methodology needs of it.
struct Problem {
    name: String,
    kernel: String,
    device: String,
    cache: PathBuf,
    t1: Option<PathBuf>,
    space: SearchSpace,
    recorded: Recorded,
    stats: SpaceStats,
    /// The time range scored, s.
    range: Vec<f64>,
    /// Where the methodology's time range starts and ends at the full budget, s.
    span: (f64, f64),
    /// How long each simulated run goes on, ms.
    limit_ms: f64,
    /// Objectives and costs of the recorded configurations (for the package).
    performance: Vec<Option<f64>>,
    cost_s: Vec<f64>,
}

fn read_t1(path: &Path) -> Option<T1File> {
    let gz = path.extension().is_some_and(|e| e == "gz");
    if gz {
        return None;
    }
    T1File::read(path).ok()
}

/// The T1 file for a recorded file: by folder name, by kernel name, or the only one.
fn pair<'a>(cache: &Path, recording_kernel: &str, t1s: &'a [T1File]) -> Option<&'a T1File> {
    let folder = cache
        .parent()
        .and_then(|p| p.file_name())
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = |t: &T1File| {
        t.path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    t1s.iter()
        .find(|t| stem(t) == folder || t.general.benchmark_name.as_deref() == Some(&*folder))
        .or_else(|| {
            t1s.iter()
                .find(|t| t.kernel_specification.kernel_name == recording_kernel)
        })
        .or(if t1s.len() == 1 { t1s.first() } else { None })
}

/// The problems of `options.files`: each recorded file with the T1 file that pairs with it.
fn load(options: &Options) -> Result<Vec<Problem>, String> {
    let mut t1s = Vec::new();
    let mut caches = Vec::new();
    for f in &options.files {
        match read_t1(f) {
            Some(t) => t1s.push(t),
            None => caches.push(f.clone()),
        }
    }
    if caches.is_empty() {
        return Err("no recorded file among FILES (Kernel Tuner cache files, T4 files)".into());
    }
    let settings = Settings::default();
    let mut problems = Vec::new();
    for cache in caches {
        problems.push(problem(&cache, &t1s, options, &settings)?);
    }
    Ok(problems)
}

/// The problem of the recorded file `cache`, its restrictions from the one of `t1s` that pairs
/// with it ([`pair`]), its time range as `settings` and `options` set it.
fn problem(
    cache: &Path,
    t1s: &[T1File],
    options: &Options,
    settings: &Settings,
) -> Result<Problem, String> {
    let recording = Recording::read(cache).map_err(|e| format!("{e}"))?;
    let kt_kernel = tunebox_tune::formats::KtCache::read(cache)
        .map(|c| c.kernel_name)
        .unwrap_or_default();
    let t1 = pair(cache, &kt_kernel, t1s);
    let conditions = t1.map(T1File::conditions).unwrap_or_default();
    if t1.is_none() {
        eprintln!(
            "strategies: {}: no T1 file pairs with it; its space is every combination of \
             its params, those it lacks failed and free",
            cache.display()
        );
    }
    let space = recording
        .space(&conditions)
        .map_err(|e| format!("{}: {e}", cache.display()))?;
    let recorded = Recorded::new(&recording, &space).map_err(|e| format!("{e}"))?;
    let (performance, cost_s): (Vec<Option<f64>>, Vec<f64>) = recorded
        .present()
        .map(|(_, m)| (m.time_ms, m.cost_ms / 1000.0))
        .unzip();
    let stats =
        SpaceStats::new(&performance, &cost_s).map_err(|e| format!("{}: {e}", cache.display()))?;
    let (_, _, t0, t1_s) = stats
        .budget(settings)
        .map_err(|e| format!("{}: {e}", cache.display()))?;
    let range = range_at((t0, t1_s), options.fraction, settings.resolution);
    let kernel = kernel_name(t1, &kt_kernel);
    let device = recorded.device().to_owned();
    Ok(Problem {
        name: format!("{} {device}", kernel.trim_end_matches("_milo")),
        kernel,
        device,
        cache: cache.to_path_buf(),
        t1: t1.map(|t| t.path.clone()),
        space,
        recorded,
        stats,
        range,
        span: (t0, t1_s),
        limit_ms: limit_ms(options, (t0, t1_s)),
        performance,
        cost_s,
    })
}

/// The kernel's name: the stem of its T1 file, else the cache file's `kernel_name`, else
/// `kernel`.
fn kernel_name(t1: Option<&T1File>, kt_kernel: &str) -> String {
    t1.map(|t| {
        t.path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    })
    .unwrap_or_else(|| {
        if kt_kernel.is_empty() {
            "kernel".into()
        } else {
            kt_kernel.to_owned()
        }
    })
}

/// How long each simulated run goes on, ms: [`RUN_PAST_END`] times the end of the time range
/// `span` (s) at the longest budget fraction asked for.
fn limit_ms(options: &Options, span: (f64, f64)) -> f64 {
    let longest = options
        .loo_fractions
        .iter()
        .fold(options.fraction, |a, &b| a.max(b));
    let end = range_at(span, longest, 2)[1];
    end * 1000.0 * RUN_PAST_END
}

/// The methodology's time range from `t0` to `fraction` of the way to `t1` (its end at the full
/// budget), in `steps` steps, s.
fn range_at((t0, t1): (f64, f64), fraction: f64, steps: usize) -> Vec<f64> {
    let end = (t1 * fraction).max(t0 * 1.05 + 1e-9);
    (0..steps)
        .map(|i| t0 + (end - t0) * i as f64 / (steps - 1) as f64)
        .collect()
}

/// One simulated run of `strategy` with `seed`.
fn run_once(problem: &Problem, strategy: &str, seed: u64, strategy_time: bool) -> Run {
    let mut s = make(strategy, problem.space.len(), seed).expect("checked names");
    let budget = Budget {
        max_evals: usize::MAX,
        max_time_ms: problem.limit_ms,
        strategy_time,
    };
    let trace = simulate(&problem.space, s.as_mut(), &problem.recorded, budget);
    trace
        .points
        .iter()
        .map(|p| (p.elapsed_ms / 1000.0, p.best_ms))
        .collect()
}

/// Per strategy, per problem: its score, or why it was refused.
type Table = Vec<Vec<Result<Cell, String>>>;

/// A score and its standard error (bootstrap over the runs); `None` when refused.
#[derive(Debug, Clone, Copy)]
struct Cell {
    score: f64,
    se: f64,
}

fn score_cell(problem: &Problem, runs: &[Run], seed: u64, range: &[f64]) -> Result<Cell, String> {
    let value = score::score_over(&problem.stats, runs, range, 8).map_err(|e| e.to_string())?;
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut boot = Vec::new();
    for _ in 0..BOOTSTRAP {
        let sample: Vec<Run> = (0..runs.len())
            .map(|_| runs[rng.usize(0..runs.len())].clone())
            .collect();
        if let Ok(s) = score::score_over(&problem.stats, &sample, range, 2) {
            boot.push(s);
        }
    }
    let m = boot.iter().sum::<f64>() / boot.len().max(1) as f64;
    let var = boot.iter().map(|b| (b - m) * (b - m)).sum::<f64>() / (boot.len().max(2) - 1) as f64;
    Ok(Cell {
        score: value,
        se: var.sqrt(),
    })
}

/// Runs `work` items on `jobs` threads.
fn parallel<T: Send>(jobs: usize, n: usize, work: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<Option<T>>> = Mutex::new((0..n).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(n.max(1)) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n {
                        break;
                    }
                    let v = work(i);
                    out.lock().expect("no panic")[i] = Some(v);
                }
            });
        }
    });
    out.into_inner()
        .expect("no panic")
        .into_iter()
        .map(|v| v.expect("every item ran"))
        .collect()
}

/// Per strategy, per problem: the runs.
type AllRuns = Vec<Vec<Vec<Run>>>;

/// Runs kept by `--runs`: per strategy name, per problem name, the runs.
type Kept = BTreeMap<String, BTreeMap<String, Vec<Run>>>;

fn read_kept(path: &Path) -> Kept {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

fn write_kept(path: &Path, problems: &[Problem], names: &[String], runs: &AllRuns) {
    let mut kept = read_kept(path);
    for (s, name) in names.iter().enumerate() {
        let per = kept.entry(name.clone()).or_default();
        for (p, problem) in problems.iter().enumerate() {
            per.insert(problem.name.clone(), runs[s][p].clone());
        }
    }
    if let Ok(text) = serde_json::to_string(&kept) {
        let _ = std::fs::write(path, text);
    }
}

/// Per strategy: CPU seconds spent in simulated runs (the strategy's own time, the replay's
/// being negligible) and steps taken.
type OwnCost = Vec<(f64, usize)>;

/// Adds seeds `from..to` of every tunebox strategy to `runs`, and their time to `cost`.
fn extend_runs(
    problems: &[Problem],
    names: &[String],
    runs: &mut AllRuns,
    cost: &mut OwnCost,
    (from, to): (u64, u64),
    jobs: usize,
    strategy_time: bool,
) {
    let items: Vec<(usize, usize, u64)> = (0..names.len())
        .flat_map(|s| {
            (0..problems.len()).flat_map(move |p| (from..to).map(move |seed| (s, p, seed)))
        })
        .filter(|&(s, p, seed)| runs[s][p].len() <= seed as usize)
        .collect();
    let started = Instant::now();
    let done = parallel(jobs, items.len(), |i| {
        let (s, p, seed) = items[i];
        let t = Instant::now();
        let run = run_once(&problems[p], &names[s], seed, strategy_time);
        (run, t.elapsed().as_secs_f64())
    });
    for ((s, p, _), (run, secs)) in items.into_iter().zip(done) {
        cost[s].0 += secs;
        cost[s].1 += run.len();
        runs[s][p].push(run);
    }
    eprintln!(
        "strategies: seeds {from}..{to} of {} strategies on {} spaces: {:.1} s",
        names.len(),
        problems.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Scores of every strategy on every problem.
fn score_all(problems: &[Problem], runs: &AllRuns, jobs: usize) -> Table {
    let ranges: Vec<Vec<f64>> = problems.iter().map(|p| p.range.clone()).collect();
    score_all_in(problems, runs, jobs, &ranges)
}

/// Every strategy's scores on every problem, over `ranges` (one per problem).
fn score_all_in(problems: &[Problem], runs: &AllRuns, jobs: usize, ranges: &[Vec<f64>]) -> Table {
    let n = problems.len();
    let flat = parallel(jobs, runs.len() * n, |i| {
        let (s, p) = (i / n, i % n);
        score_cell(&problems[p], &runs[s][p], i as u64, &ranges[p])
    });
    flat.chunks(n).map(<[_]>::to_vec).collect()
}

/// Mean score over the problems `which`, and its standard error; NaN when any is refused.
fn mean_over(cells: &[Result<Cell, String>], which: &[usize]) -> (f64, f64) {
    let mut sum = 0.0;
    let mut var = 0.0;
    for &p in which {
        match &cells[p] {
            Ok(c) => {
                sum += c.score;
                var += c.se * c.se;
            }
            Err(_) => return (f64::NAN, f64::NAN),
        }
    }
    let k = which.len() as f64;
    (sum / k, var.sqrt() / k)
}

/// Whether the leading `k` of `order` (by mean) are each ahead of the next by more than twice
/// the standard error of the difference; the first pair that is not.
fn unsettled(means: &[(f64, f64)], order: &[usize], k: usize) -> Option<(usize, usize)> {
    for w in order.windows(2).take(k.saturating_sub(1).max(1)) {
        let (a, b) = (means[w[0]], means[w[1]]);
        if a.0 - b.0 <= 2.0 * (a.1 * a.1 + b.1 * b.1).sqrt() {
            return Some((w[0], w[1]));
        }
    }
    None
}

/// Runs `benchmarks/kernel-tuner/strategies.py` on the problems' files and budgets.
fn run_kt(problems: &[Problem], python: &Path, options: &Options) -> Result<PathBuf, String> {
    let dir = root().join("target/strategies");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut spaces = Vec::new();
    for p in problems {
        let Some(t1) = &p.t1 else {
            return Err(format!(
                "{}: Kernel Tuner needs the T1 file's restrictions",
                p.name
            ));
        };
        spaces.push(serde_json::json!({
            "name": p.name,
            "cache": p.cache,
            "t1": t1,
            "end_ms": p.limit_ms,
        }));
    }
    let budgets = dir.join("kt-budgets.json");
    let traces = dir.join(format!("kt-traces-{}.json", options.fraction));
    std::fs::write(
        &budgets,
        serde_json::json!({ "spaces": spaces }).to_string(),
    )
    .map_err(|e| format!("{}: {e}", budgets.display()))?;
    let mut cmd = std::process::Command::new(python);
    cmd.arg(root().join("benchmarks/kernel-tuner/strategies.py"))
        .arg(&budgets)
        .arg(&traces)
        .args(["--seeds", &options.kt_seeds.to_string()])
        .args(["--jobs", &options.jobs.to_string()]);
    if let Some(list) = &options.kt_strategies {
        cmd.args(["--strategies", list]);
    }
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !status.success() {
        return Err(format!("Kernel Tuner's strategies failed ({status})"));
    }
    Ok(traces)
}

/// Kernel Tuner's runs from a traces file (`[[elapsed_ms, best_ms or null], …]` per seed), per
/// strategy (`kt:NAME`) and problem, and a line on what ran.
fn kt_runs(problems: &[Problem], traces: &Path) -> Result<(Vec<String>, AllRuns, String), String> {
    let text = std::fs::read_to_string(traces).map_err(|e| format!("{}: {e}", traces.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", traces.display()))?;
    let spaces = &v["spaces"];
    let first = spaces[problems[0].name.as_str()]
        .as_object()
        .ok_or("no traces for the first space")?;
    let mut names = Vec::new();
    let mut all = Vec::new();
    for strategy in first.keys() {
        let mut per_problem = Vec::new();
        for p in problems {
            let runs = spaces[p.name.as_str()][strategy]
                .as_array()
                .ok_or(format!("no {strategy} traces for {}", p.name))?;
            let runs: Vec<Run> = runs
                .iter()
                .filter_map(|r| r.as_array())
                .map(|r| {
                    r.iter()
                        .map(|pt| {
                            (
                                pt[0].as_f64().unwrap_or(f64::INFINITY) / 1000.0,
                                pt[1].as_f64(),
                            )
                        })
                        .collect()
                })
                .collect();
            per_problem.push(runs);
        }
        names.push(format!("kt:{strategy}"));
        all.push(per_problem);
    }
    let note = format!(
        "Kernel Tuner {}: {} seeds{}, {:.0} s wall",
        v["kernel_tuner"].as_str().unwrap_or("?"),
        v["seeds"].as_u64().unwrap_or(0),
        v["slow_seeds"]
            .as_object()
            .map(|m| m
                .iter()
                .map(|(k, n)| format!(" ({k}: {n})"))
                .collect::<String>())
            .unwrap_or_default(),
        v["total_wall_s"].as_f64().unwrap_or(f64::NAN),
    );
    Ok((names, all, note))
}

/// Scores the same traces with the package (`methodology.py`); per problem and strategy, its
/// score.
fn package_scores(
    problems: &[Problem],
    names: &[String],
    runs: &AllRuns,
    python: &Path,
) -> Result<BTreeMap<(String, String), f64>, String> {
    let dir = root().join("target/strategies");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let spaces: Vec<serde_json::Value> = problems
        .iter()
        .enumerate()
        .map(|(p, problem)| {
            let strategies: serde_json::Map<String, serde_json::Value> = names
                .iter()
                .enumerate()
                .map(|(s, name)| (name.clone(), serde_json::json!(runs[s][p])))
                .collect();
            serde_json::json!({
                "name": problem.name,
                "performance": problem.performance,
                "cost_s": problem.cost_s,
                "strategies": strategies,
            })
        })
        .collect();
    let input = dir.join("package-traces.json");
    let output = dir.join("package-scores.json");
    std::fs::write(&input, serde_json::json!({ "spaces": spaces }).to_string())
        .map_err(|e| format!("{}: {e}", input.display()))?;
    let status = std::process::Command::new(python)
        .arg(root().join("benchmarks/kernel-tuner/methodology.py"))
        .arg(&input)
        .arg(&output)
        .args(["--bagging-seeds", "3"])
        .status()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !status.success() {
        return Err(format!("methodology.py failed ({status})"));
    }
    let text = std::fs::read_to_string(&output).map_err(|e| format!("{e}"))?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{e}"))?;
    let mut out = BTreeMap::new();
    for p in problems {
        for name in names {
            if let Some(s) =
                v["spaces"][p.name.as_str()]["strategies"][name.as_str()]["score"].as_f64()
            {
                out.insert((p.name.clone(), name.clone()), s);
            }
        }
    }
    Ok(out)
}

/// The strategy the default is held to: a leave-one-out fold chooses only among settings not
/// behind it beyond twice the standard error on its training spaces, and reports the default's
/// gap to it on the held-out ones.
const REFERENCE: &str = "bayes";
/// What `--strategy auto` runs ([`AutoOptions::default`]).
const DEFAULT: &str = "auto";

/// `a − b` over the problems `which`, and the standard error of the difference.
fn gap_over(a: &[Result<Cell, String>], b: &[Result<Cell, String>], which: &[usize]) -> (f64, f64) {
    let (ma, sa) = mean_over(a, which);
    let (mb, sb) = mean_over(b, which);
    (ma - mb, (sa * sa + sb * sb).sqrt())
}

/// Whether a gap and its standard error are behind beyond twice that error.
fn behind((gap, se): (f64, f64)) -> bool {
    gap < -2.0 * se
}

/// The setting the leave-one-out rule picks on the problems `train`: among `candidates` not
/// behind [`REFERENCE`] beyond twice the standard error at any budget fraction (all of them when
/// it did not run), the one of best mean over the fractions.
fn pick(
    names: &[String],
    tables: &[(f64, Table)],
    candidates: &[usize],
    train: &[usize],
) -> Option<usize> {
    let reference = names.iter().position(|n| n == REFERENCE);
    let mean = |s: usize| {
        tables
            .iter()
            .map(|(_, t)| mean_over(&t[s], train).0)
            .sum::<f64>()
            / tables.len() as f64
    };
    candidates
        .iter()
        .copied()
        .filter(|&s| !mean(s).is_nan())
        .filter(|&s| {
            reference.is_none_or(|r| {
                tables
                    .iter()
                    .all(|(_, t)| !behind(gap_over(&t[s], &t[r], train)))
            })
        })
        .max_by(|&a, &b| mean(a).total_cmp(&mean(b)))
}

/// `score ± se`, or `—`.
fn cell_text((score, se): (f64, f64)) -> String {
    if score.is_nan() {
        "—".into()
    } else {
        format!("{score:.3} ± {se:.3}")
    }
}

/// A gap to [`REFERENCE`], marked when behind beyond twice its standard error.
fn gap_text(gap: (f64, f64)) -> String {
    if gap.0.is_nan() {
        return "—".into();
    }
    let mark = if behind(gap) { " **behind**" } else { "" };
    format!("{:+.3} ± {:.3}{mark}", gap.0, gap.1)
}

/// The strategies the leave-one-out rule chooses among: tunebox's named in `choose` (all of
/// tunebox's when it is empty).
fn candidates(names: &[String], choose: &[String]) -> Vec<usize> {
    (0..names.len())
        .filter(|&s| !names[s].starts_with("kt:"))
        .filter(|&s| choose.is_empty() || choose.contains(&names[s]))
        .collect()
}

/// Leave-one-group-out: per fold, the setting [`pick`] chooses among `choose` (tunebox's
/// strategies when empty) on the other problems, scored on the held-out ones at every budget
/// fraction beside [`REFERENCE`], with [`DEFAULT`]'s gap to it; markdown rows and summary.
fn loo(
    problems: &[Problem],
    names: &[String],
    tables: &[(f64, Table)],
    group: impl Fn(&Problem) -> String,
    what: &str,
    choose: &[String],
) -> String {
    let mut groups: Vec<String> = problems.iter().map(&group).collect();
    groups.sort();
    groups.dedup();
    let candidates = candidates(names, choose);
    let folds = Folds::new(names, tables);
    let mut md = folds.header(what);
    let mut held = Held::new(tables.len());
    for g in &groups {
        let test: Vec<usize> = (0..problems.len())
            .filter(|&p| group(&problems[p]) == *g)
            .collect();
        let train: Vec<usize> = (0..problems.len())
            .filter(|&p| group(&problems[p]) != *g)
            .collect();
        if train.is_empty() {
            continue;
        }
        let Some(c) = pick(names, tables, &candidates, &train) else {
            continue;
        };
        let row = folds.row(g, c, &test, &mut held);
        let _ = writeln!(md, "{row}");
    }
    md.push_str(&folds.summary(&held));
    md
}

/// What the leave-one-out tables compare: the scores per budget fraction, and which strategies
/// are [`REFERENCE`], [`DEFAULT`] and Kernel Tuner's.
struct Folds<'a> {
    names: &'a [String],
    tables: &'a [(f64, Table)],
    reference: Option<usize>,
    default: Option<usize>,
    kt: Vec<usize>,
}

/// The held-out results over the folds: per budget fraction, the chosen settings' and
/// [`REFERENCE`]'s mean scores; the folds (and fractions) where [`DEFAULT`] is behind.
struct Held {
    chosen: Vec<Vec<f64>>,
    reference: Vec<Vec<f64>>,
    default_behind: Vec<String>,
}

impl Held {
    /// No fold yet, at `fractions` budget fractions.
    fn new(fractions: usize) -> Held {
        Held {
            chosen: vec![Vec::new(); fractions],
            reference: vec![Vec::new(); fractions],
            default_behind: Vec::new(),
        }
    }
}

impl<'a> Folds<'a> {
    /// The comparison of `names` by `tables` (per budget fraction, the scores).
    fn new(names: &'a [String], tables: &'a [(f64, Table)]) -> Folds<'a> {
        Folds {
            names,
            tables,
            reference: names.iter().position(|n| n == REFERENCE),
            default: names.iter().position(|n| n == DEFAULT),
            kt: (0..names.len())
                .filter(|&s| names[s].starts_with("kt:"))
                .collect(),
        }
    }

    /// The budget fractions, as the text shows them.
    fn fractions(&self) -> Vec<String> {
        self.tables.iter().map(|(f, _)| format!("{f}")).collect()
    }

    /// The paragraph saying what the folds over `what` (GPU, kernel) do, and the table's header.
    fn header(&self, what: &str) -> String {
        let mut md = String::new();
        let fractions = self.fractions();
        let _ = writeln!(
            md,
            "\nLeave-one-{what}-out (per fold, among the settings not behind `{REFERENCE}` beyond \
             twice the standard error on the other spaces at budget fractions {}, the one of best \
             mean over them; scored on the held-out spaces beside `{REFERENCE}`, and `{DEFAULT}`'s \
             gap to it there):\n",
            fractions.join(" and ")
        );
        let mut header = "| held out | chosen |".to_owned();
        let mut rule = "|---|---|".to_owned();
        for f in &fractions {
            let _ = write!(
                header,
                " chosen ({f}) | {REFERENCE} ({f}) | {DEFAULT} − {REFERENCE} ({f}) |"
            );
            rule.push_str("---:|---:|---:|");
            if !self.kt.is_empty() {
                let _ = write!(header, " best Kernel Tuner strategy ({f}) |");
                rule.push_str("---:|");
            }
        }
        let _ = writeln!(md, "{header}\n{rule}");
        md
    }

    /// The row of the fold holding out `g` (the problems `test`) where `c` was chosen: per
    /// budget fraction, its score, [`REFERENCE`]'s, [`DEFAULT`]'s gap and Kernel Tuner's best;
    /// the results go to `held` too.
    fn row(&self, g: &str, c: usize, test: &[usize], held: &mut Held) -> String {
        let none = (f64::NAN, f64::NAN);
        let mut row = format!("| {g} | {} |", self.names[c]);
        for (k, (f, table)) in self.tables.iter().enumerate() {
            let chosen = mean_over(&table[c], test);
            let base = self.reference.map_or(none, |r| mean_over(&table[r], test));
            let gap = match (self.default, self.reference) {
                (Some(d), Some(r)) => gap_over(&table[d], &table[r], test),
                _ => none,
            };
            if behind(gap) {
                held.default_behind.push(format!("{g} at {f}"));
            }
            held.chosen[k].push(chosen.0);
            held.reference[k].push(base.0);
            let _ = write!(
                row,
                " {} | {} | {} |",
                cell_text(chosen),
                cell_text(base),
                gap_text(gap)
            );
            if !self.kt.is_empty() {
                let _ = write!(row, " {} |", self.kt_best(table, test));
            }
        }
        row
    }

    /// Kernel Tuner's strategy of best mean score on the problems `test` in `table`, and that
    /// score; `—` when there is none.
    fn kt_best(&self, table: &Table, test: &[usize]) -> String {
        let best = self
            .kt
            .iter()
            .map(|&s| (mean_over(&table[s], test).0, s))
            .max_by(|a, b| a.0.total_cmp(&b.0));
        best.map_or("—".into(), |(v, s)| format!("{v:.3} ({})", self.names[s]))
    }

    /// The lines after the table: the held-out mean of the chosen settings and of
    /// [`REFERENCE`] per budget fraction, and the folds where [`DEFAULT`] is behind.
    fn summary(&self, held: &Held) -> String {
        let mut md = String::new();
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let means: Vec<String> = self
            .fractions()
            .iter()
            .enumerate()
            .map(|(k, f)| {
                format!(
                    "**{:.3}** at {f} (`{REFERENCE}` {:.3})",
                    mean(&held.chosen[k]),
                    mean(&held.reference[k])
                )
            })
            .collect();
        let _ = writeln!(
            md,
            "\nHeld-out mean of the chosen settings: {}.",
            means.join(", ")
        );
        if self.default.is_some() && self.reference.is_some() {
            let _ = writeln!(
                md,
                "`{DEFAULT}` behind `{REFERENCE}` beyond twice the standard error on the held-out \
                 spaces: {}.",
                if held.default_behind.is_empty() {
                    "in no fold".to_owned()
                } else {
                    held.default_behind.join(", ")
                }
            );
        }
        md
    }
}

/// Per budget fraction, the spaces on which [`DEFAULT`] is behind [`REFERENCE`] beyond twice
/// the standard error of the difference (a stricter test than a fold's mean), as a line.
fn default_per_space(problems: &[Problem], names: &[String], tables: &[(f64, Table)]) -> String {
    let (Some(d), Some(r)) = (
        names.iter().position(|n| n == DEFAULT),
        names.iter().position(|n| n == REFERENCE),
    ) else {
        return String::new();
    };
    let parts: Vec<String> = tables
        .iter()
        .map(|(f, t)| {
            let behind_on: Vec<String> = (0..problems.len())
                .filter_map(|p| {
                    let gap = gap_over(&t[d], &t[r], &[p]);
                    behind(gap).then(|| format!("{} ({})", problems[p].name, gap_text(gap)))
                })
                .collect();
            format!(
                "at {f}: {}",
                if behind_on.is_empty() {
                    "none".to_owned()
                } else {
                    behind_on.join(", ")
                }
            )
        })
        .collect();
    format!(
        "\nSpaces on which `{DEFAULT}` is behind `{REFERENCE}` beyond twice the standard error: {}.\n",
        parts.join("; ")
    )
}

/// The setting [`pick`] chooses on every problem (what the default should be), as a line.
fn pick_on_all(
    names: &[String],
    tables: &[(f64, Table)],
    choose: &[String],
    problems: usize,
) -> String {
    let candidates = candidates(names, choose);
    let every: Vec<usize> = (0..problems).collect();
    match pick(names, tables, &candidates, &every) {
        Some(c) => format!(
            "\nOn all {problems} spaces the same rule picks `{}`.",
            names[c]
        ),
        None => format!(
            "\nOn all {problems} spaces no setting is within twice the standard error of `{REFERENCE}`."
        ),
    }
}

/// Per space, the strategies whose runs the methodology package stops on (fewer than two
/// points in the time range, `score::package_stops`) and the port scores by its sparse-run rule.
fn sparse_note(problems: &[Problem], names: &[String], runs: &AllRuns, kt: &AllRuns) -> String {
    let mut md = String::new();
    for (p, problem) in problems.iter().enumerate() {
        let mut which = Vec::new();
        let mut first = None;
        for (s, per) in runs.iter().chain(kt).enumerate() {
            if let Some(why) = score::package_stops(&per[p], &problem.range) {
                which.push(names[s].as_str());
                first.get_or_insert(why);
            }
        }
        if let Some(why) = first {
            let _ = writeln!(
                md,
                "- {}: the package stops on the runs of {} ({why}, the first); scored by the \
                 sparse-run rule (docs/search.md)",
                problem.name,
                which.join(", ")
            );
        }
    }
    md
}

/// `auto` (the default) against Kernel Tuner's strategy of best mean score: the gap, its
/// standard error and whether it is settled (above twice that).
fn against_kt(names: &[String], means: &[(f64, f64)]) -> Option<String> {
    let ours = names.iter().position(|n| n == "auto")?;
    let theirs = (0..names.len())
        .filter(|&s| names[s].starts_with("kt:") && !means[s].0.is_nan())
        .max_by(|&a, &b| means[a].0.total_cmp(&means[b].0))?;
    let gap = means[ours].0 - means[theirs].0;
    let se = (means[ours].1.powi(2) + means[theirs].1.powi(2)).sqrt();
    Some(format!(
        "`auto` against Kernel Tuner's best, {}: {gap:+.3} ± {se:.3} ({}).",
        names[theirs],
        if gap.abs() > 2.0 * se {
            "settled: beyond twice its standard error"
        } else {
            "not settled: within twice its standard error"
        }
    ))
}

fn main() {
    if let Err(e) = main_inner() {
        eprintln!("strategies: {e}");
        std::process::exit(2);
    }
}

/// The evaluation: the options, the problems, the runs until the leaders are settled, then the
/// report (printed, and to `--markdown`), `--runs` and the figure (`--svg`) written.
fn main_inner() -> Result<(), String> {
    if std::env::args().skip(1).any(|a| a == "--help" || a == "-h") {
        print!("{USAGE}");
        return Ok(());
    }
    let options = parse()?;
    let started = Instant::now();
    let problems = load(&options)?;
    let mut evaluation = Evaluation::start(&options, &problems);
    let scored = evaluation.settle();
    if let Some(path) = &options.runs_file {
        write_kept(path, &problems, &evaluation.names, &evaluation.runs);
    }
    let md = evaluation.report(&scored, started);
    print!("{md}");
    if let Some(path) = &options.markdown {
        std::fs::write(path, &md).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let svg = svg(&problems, &evaluation.all_names, &evaluation.combined());
    write_svg(&options.svg, &svg)
}

/// The evaluation as it goes: tunebox's runs (more seeds as it needs them), Kernel Tuner's, and
/// what tunebox's cost.
struct Evaluation<'a> {
    options: &'a Options,
    problems: &'a [Problem],
    /// tunebox's strategies.
    names: Vec<String>,
    /// tunebox's strategies, then Kernel Tuner's (`kt:NAME`).
    all_names: Vec<String>,
    /// Per tunebox strategy, per problem: its runs.
    runs: AllRuns,
    /// Per Kernel Tuner strategy, per problem: its runs.
    kt: AllRuns,
    /// What ran of Kernel Tuner's (version, seeds, wall time), when it did.
    kt_note: Option<String>,
    /// Per tunebox strategy: its own time and steps in the runs simulated now.
    cost: OwnCost,
}

/// The scores once the seeds are settled.
struct Scored {
    /// Per strategy (tunebox's, then Kernel Tuner's), per problem: the score.
    table: Table,
    /// The first pair of leading strategies whose order is not settled, by name; `None` when
    /// it is.
    open: Option<(String, String)>,
    /// The seeds of tunebox's strategies (the fewest on any problem).
    seeds: usize,
    /// Per strategy: the mean score over every problem and its standard error.
    means: Vec<(f64, f64)>,
    /// The strategies by mean score, best first, refused last.
    order: Vec<usize>,
}

impl<'a> Evaluation<'a> {
    /// tunebox's first `--seeds` runs on `problems` and Kernel Tuner's runs (run beside them,
    /// or read from `--kt-traces`); Kernel Tuner's are left out, with a message, when they fail.
    fn start(options: &'a Options, problems: &'a [Problem]) -> Evaluation<'a> {
        let names = options.strategies.clone();
        let (runs, cost, kt) = first_runs(options, problems, &names);
        let kt = kt.or(options.kt_traces.clone().map(Ok));
        let mut evaluation = Evaluation {
            options,
            problems,
            all_names: names.clone(),
            names,
            runs,
            kt: Vec::new(),
            kt_note: None,
            cost,
        };
        if let Some(traces) = kt {
            match traces.and_then(|t| kt_runs(problems, &t)) {
                Ok((n, r, note)) => {
                    evaluation.all_names.extend(n);
                    evaluation.kt = r;
                    evaluation.kt_note = Some(note);
                }
                Err(e) => eprintln!("strategies: Kernel Tuner's strategies left out: {e}"),
            }
        }
        evaluation
    }

    /// Per strategy (tunebox's, then Kernel Tuner's), per problem: the runs.
    fn combined(&self) -> AllRuns {
        let mut combined = self.runs.clone();
        combined.extend(self.kt.iter().cloned());
        combined
    }

    /// Scores every strategy, doubling tunebox's seeds (up to `--max-seeds`) until the order of
    /// the three leading strategies is settled or the open pair is Kernel Tuner's.
    fn settle(&mut self) -> Scored {
        let mut seeds = self.options.seeds;
        let (table, open) = loop {
            let table = score_all(self.problems, &self.combined(), self.options.jobs);
            let open = open_leaders(&table, self.problems.len());
            let leader_is_ours = |s: usize| s < self.names.len();
            let can_grow = seeds < self.options.max_seeds
                && open.is_some_and(|(a, b)| leader_is_ours(a) || leader_is_ours(b));
            if !can_grow {
                break (
                    table,
                    open.map(|(a, b)| (self.all_names[a].clone(), self.all_names[b].clone())),
                );
            }
            let next = (seeds * 2).min(self.options.max_seeds);
            extend_runs(
                self.problems,
                &self.names,
                &mut self.runs,
                &mut self.cost,
                (seeds, next),
                self.options.jobs,
                self.options.strategy_time,
            );
            seeds = next;
        };
        let seeds = self
            .runs
            .iter()
            .flatten()
            .map(Vec::len)
            .min()
            .unwrap_or(0)
            .max(seeds as usize);
        let (means, order) = ranked(&table, self.problems.len());
        Scored {
            table,
            open,
            seeds,
            means,
            order,
        }
    }

    /// The whole report, markdown: the spaces, the scores, then what the options add
    /// (`--loo`, `--package`) and the wall time since `started`.
    fn report(&self, scored: &Scored, started: Instant) -> String {
        let mut md = self.intro(scored.seeds);
        md.push_str(&spaces_table(self.problems));
        md.push_str(&self.scores_table(scored));
        md.push_str(&self.settled_text(scored));
        if let Some(line) = against_kt(&self.all_names, &scored.means) {
            let _ = writeln!(md, "\n{line}");
        }
        md.push_str(&self.refusals(&scored.table));
        md.push_str(&sparse_note(
            self.problems,
            &self.all_names,
            &self.runs,
            &self.kt,
        ));
        md.push_str(&self.own_cost());
        if self.options.loo {
            md.push_str(&self.loo_section(&scored.table));
        }
        if self.options.package {
            md.push_str(&self.package_section(scored));
        }
        let _ = writeln!(
            md,
            "\n({:.0} s on this machine)",
            started.elapsed().as_secs_f64()
        );
        md
    }

    /// The opening paragraph: how the scores are computed, the budget fraction, the seeds and
    /// what ran of Kernel Tuner's.
    fn intro(&self, seeds: usize) -> String {
        let mut md = String::new();
        let _ = writeln!(
            md,
            "Scored with the methodology of Willemsen et al. (FGCS 2024) as its package computes \
             it (port: `tunebox_tune::strategies::score`); budget fraction {}; tunebox's \
             strategies {seeds} seeds{}.\n",
            self.options.fraction,
            self.kt_note
                .as_deref()
                .map(|n| format!("; {n}"))
                .unwrap_or_default()
        );
        md
    }

    /// The table of scores: per strategy, best first, its mean ± standard error and its score
    /// on each problem (or `refused`).
    fn scores_table(&self, scored: &Scored) -> String {
        let mut md = String::new();
        let header: Vec<&str> = self.problems.iter().map(|p| p.name.as_str()).collect();
        let _ = writeln!(md, "\n| strategy | score ± se | {} |", header.join(" | "));
        let _ = writeln!(md, "|---|---:|{}", "---:|".repeat(self.problems.len()));
        for &s in &scored.order {
            let cells: Vec<String> = scored.table[s]
                .iter()
                .map(|c| match c {
                    Ok(c) => format!("{:.3} ± {:.3}", c.score, c.se),
                    Err(_) => "refused".into(),
                })
                .collect();
            let _ = writeln!(
                md,
                "| {} | **{:.3}** ± {:.3} | {} |",
                self.all_names[s],
                scored.means[s].0,
                scored.means[s].1,
                cells.join(" | ")
            );
        }
        md
    }

    /// Whether the order of the three leading strategies is settled, or which pair is not.
    fn settled_text(&self, scored: &Scored) -> String {
        let mut md = String::new();
        match &scored.open {
            None => {
                let _ = writeln!(
                    md,
                    "\nThe order of the three leading strategies is settled (each gap above twice its standard error)."
                );
            }
            Some((a, b)) => {
                let _ = writeln!(
                    md,
                    "\nNot settled: {a} and {b} are within twice the standard error of their \
                     difference at {} seeds (--max-seeds {}; Kernel Tuner's seeds are fixed by \
                     --kt-seeds).",
                    scored.seeds, self.options.max_seeds
                );
            }
        }
        md
    }

    /// A line per strategy and problem the methodology refused, with why.
    fn refusals(&self, table: &Table) -> String {
        let mut md = String::new();
        for (s, cells) in table.iter().enumerate() {
            for (p, c) in cells.iter().enumerate() {
                if let Err(e) = c {
                    let _ = writeln!(
                        md,
                        "- {} on {}: {e}",
                        self.all_names[s], self.problems[p].name
                    );
                }
            }
        }
        md
    }

    /// tunebox's strategies' own cost per step of the runs simulated now (none when all were
    /// kept by `--runs`).
    fn own_cost(&self) -> String {
        let mut md = String::new();
        let measured: Vec<String> = self
            .names
            .iter()
            .zip(&self.cost)
            .filter(|(_, (secs, steps))| *secs > 0.0 && *steps > 0)
            .map(|(n, (secs, steps))| format!("{n} {:.2} ms/step", secs * 1000.0 / *steps as f64))
            .collect();
        if !measured.is_empty() {
            let _ = writeln!(
                md,
                "\nOwn cost (wall time of the runs simulated now over their steps, {} threads on \
                 this machine): {}.",
                self.options.jobs,
                measured.join(", ")
            );
        }
        md
    }

    /// `--loo`: the leave-one-GPU-out and leave-one-kernel-out folds, the setting picked on
    /// every space, and the spaces where the default is behind.
    fn loo_section(&self, table: &Table) -> String {
        let (problems, names, choose) = (self.problems, &self.all_names, &self.options.choose);
        let tables = self.loo_tables(table);
        let mut md = loo(
            problems,
            names,
            &tables,
            |p| p.device.clone(),
            "GPU",
            choose,
        );
        md.push_str(&loo(
            problems,
            names,
            &tables,
            |p| p.kernel.clone(),
            "kernel",
            choose,
        ));
        md.push_str(&pick_on_all(names, &tables, choose, problems.len()));
        md.push_str(&default_per_space(problems, names, &tables));
        md
    }

    /// The scores the leave-one-out folds choose by, per budget fraction: `table` at
    /// `--budget-fraction`, or every strategy scored again at each of `--loo-fractions`.
    fn loo_tables(&self, table: &Table) -> Vec<(f64, Table)> {
        if self.options.loo_fractions.is_empty() {
            return vec![(self.options.fraction, table.clone())];
        }
        let combined = self.combined();
        self.options
            .loo_fractions
            .iter()
            .map(|&f| {
                let ranges: Vec<Vec<f64>> = self
                    .problems
                    .iter()
                    .map(|p| range_at(p.span, f, Settings::default().resolution))
                    .collect();
                let table = score_all_in(self.problems, &combined, self.options.jobs, &ranges);
                (f, table)
            })
            .collect()
    }

    /// `--package`: the package's scores of the same traces beside the port's, and the largest
    /// difference; nothing (and a message) when the package cannot run.
    fn package_section(&self, scored: &Scored) -> String {
        match self
            .options
            .kt_python
            .as_ref()
            .ok_or("no Python with the package (target/kernel-tuner-venv or $KT_VENV)".to_owned())
            .and_then(|py| package_scores(self.problems, &self.all_names, &self.combined(), py))
        {
            Ok(package) => self.package_table(&package, scored),
            Err(e) => {
                eprintln!("strategies: --package: {e}");
                String::new()
            }
        }
    }

    /// Per strategy and problem, the package's score (`package`, by problem and strategy name)
    /// beside the port's, and the largest difference.
    fn package_table(&self, package: &BTreeMap<(String, String), f64>, scored: &Scored) -> String {
        let mut md = String::new();
        let mut worst: f64 = 0.0;
        let _ = writeln!(
            md,
            "\nThe package on the same traces (3 bagging draws) against the port:\n"
        );
        let _ = writeln!(
            md,
            "| strategy | space | package | port |\n|---|---|---:|---:|"
        );
        for &s in &scored.order {
            for (p, problem) in self.problems.iter().enumerate() {
                if let (Some(theirs), Ok(ours)) = (
                    package.get(&(problem.name.clone(), self.all_names[s].clone())),
                    &scored.table[s][p],
                ) {
                    worst = worst.max((theirs - ours.score).abs());
                    let _ = writeln!(
                        md,
                        "| {} | {} | {theirs:.3} | {:.3} |",
                        self.all_names[s], problem.name, ours.score
                    );
                }
            }
        }
        let _ = writeln!(md, "\nLargest difference: {worst:.4}.");
        md
    }
}

/// tunebox's first `--seeds` runs of `names` on `problems` (those `--runs` kept, the others
/// simulated) and their cost; Kernel Tuner's strategies run beside them when its Python is there
/// and no `--kt-traces` are given: its traces file, or why it failed.
fn first_runs(
    options: &Options,
    problems: &[Problem],
    names: &[String],
) -> (AllRuns, OwnCost, Option<Result<PathBuf, String>>) {
    std::thread::scope(|scope| {
        let kt = options
            .kt_python
            .as_ref()
            .filter(|_| options.kt_traces.is_none())
            .map(|python| scope.spawn(move || run_kt(problems, python, options)));
        let mut runs = kept_runs(options, problems, names);
        let mut cost: OwnCost = vec![(0.0, 0); names.len()];
        extend_runs(
            problems,
            names,
            &mut runs,
            &mut cost,
            (0, options.seeds),
            options.jobs,
            options.strategy_time,
        );
        (runs, cost, kt.map(|h| h.join().expect("no panic")))
    })
}

/// Per strategy of `names`, per problem: the runs `--runs` kept (at most `--max-seeds`); none
/// without `--runs`.
fn kept_runs(options: &Options, problems: &[Problem], names: &[String]) -> AllRuns {
    let mut runs: AllRuns = vec![(0..problems.len()).map(|_| Vec::new()).collect(); names.len()];
    if let Some(path) = &options.runs_file {
        let kept = read_kept(path);
        for (s, name) in names.iter().enumerate() {
            for (p, problem) in problems.iter().enumerate() {
                if let Some(r) = kept.get(name).and_then(|k| k.get(&problem.name)) {
                    runs[s][p] = r.iter().take(options.max_seeds as usize).cloned().collect();
                }
            }
        }
    }
    runs
}

/// The first pair among the three leading strategies of `table` (by mean over all `problems`,
/// refused ones left out) within twice the standard error of their difference.
fn open_leaders(table: &Table, problems: usize) -> Option<(usize, usize)> {
    let every: Vec<usize> = (0..problems).collect();
    let means: Vec<(f64, f64)> = table.iter().map(|c| mean_over(c, &every)).collect();
    let mut order: Vec<usize> = (0..means.len()).filter(|&s| !means[s].0.is_nan()).collect();
    order.sort_by(|&a, &b| means[b].0.total_cmp(&means[a].0));
    unsettled(&means, &order, 3)
}

/// Per strategy of `table`, the mean score over all `problems` and its standard error; and the
/// strategies by that mean, best first, refused ones (NaN) last.
fn ranked(table: &Table, problems: usize) -> (Vec<(f64, f64)>, Vec<usize>) {
    let every: Vec<usize> = (0..problems).collect();
    let means: Vec<(f64, f64)> = table.iter().map(|c| mean_over(c, &every)).collect();
    let mut order: Vec<usize> = (0..means.len()).collect();
    order.sort_by(|&a, &b| match (means[a].0.is_nan(), means[b].0.is_nan()) {
        (false, true) => std::cmp::Ordering::Less,
        (true, false) => std::cmp::Ordering::Greater,
        _ => means[b].0.total_cmp(&means[a].0),
    });
    (means, order)
}

/// The table of spaces: per problem, its size, failed configurations, optimum and median, the
/// time range scored and how many random draws fit in it.
fn spaces_table(problems: &[Problem]) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "| space | choices | failed | optimum ms | median ms | time range (simulated) | random draws by its end |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|---:|");
    for p in problems {
        let failed = p.performance.iter().filter(|v| v.is_none()).count();
        let (t0, t1) = (p.range[0], p.range[p.range.len() - 1]);
        let _ = writeln!(
            md,
            "| {} | {} | {failed} | {:.4} | {:.4} | {t0:.0}–{t1:.0} s | {:.0} |",
            p.name,
            p.space.len(),
            p.stats.optimum(),
            p.stats.median(),
            t1 / p.stats.mean_cost_s()
        );
    }
    md
}

/// Writes the figure `svg` to `path`, making its folder.
fn write_svg(path: &Path, svg: &str) -> Result<(), String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(path, svg).map_err(|e| format!("{}: {e}", path.display()))?;
    eprintln!("strategies: wrote {}", path.display());
    Ok(())
}

const COLORS: [&str; 7] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
];
const KT_COLORS: [&str; 10] = [
    "#17becf", "#bcbd22", "#7f7f7f", "#e377c2", "#8c564b", "#9467bd", "#d62728", "#2ca02c",
    "#ff7f0e", "#1f77b4",
];
/// Legend entries per row.
const LEGEND_ROW: usize = 6;

fn color(names: &[String], s: usize) -> &'static str {
    let kt = names[s].starts_with("kt:");
    let k = names[..s]
        .iter()
        .filter(|n| n.starts_with("kt:") == kt)
        .count();
    let palette: &[&str] = if kt { &KT_COLORS } else { &COLORS };
    palette[k % palette.len()]
}

/// Plots per row of the figure.
const PLOT_COLS: usize = 3;
/// A plot's width and height, px.
const PLOT_W: f64 = 360.0;
const PLOT_H: f64 = 260.0;
/// Room left of (and below) a plot's frame for its labels, px.
const PLOT_PAD: f64 = 50.0;
/// The standardised performance at the bottom and the top of a plot's frame.
const PLOT_LO: f64 = -1.0;
const PLOT_HI: f64 = 1.0;

/// The dash pattern of `name`'s line: dotted for Kernel Tuner's strategies, solid for tunebox's.
fn dash(name: &str) -> &'static str {
    if name.starts_with("kt:") {
        r#"stroke-dasharray="2 2""#
    } else {
        ""
    }
}

/// Per space, each strategy's standardised performance over the time range (the methodology's
/// curve: 0 is random search, 1 the optimum), tunebox's solid, Kernel Tuner's dotted.
fn svg(problems: &[Problem], names: &[String], runs: &AllRuns) -> String {
    let rows = problems.len().div_ceil(PLOT_COLS);
    let width = PLOT_COLS as f64 * PLOT_W;
    let height = rows as f64 * PLOT_H + 30.0 + names.len().div_ceil(LEGEND_ROW) as f64 * 18.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (p, problem) in problems.iter().enumerate() {
        let plot = Plot::new(p, problem);
        plot.frame(&mut out, &problem.name);
        plot.curves(&mut out, problem, names, runs, p);
    }
    legend(&mut out, names, rows as f64 * PLOT_H + 20.0);
    out.push_str("</svg>\n");
    out
}

/// One space's plot: where it sits in the figure and the times it is drawn at.
struct Plot {
    /// Its top-left corner, px.
    ox: f64,
    oy: f64,
    /// Every tenth time of the space's range, s.
    ts: Vec<f64>,
    /// The first and last of `ts`, s.
    x0: f64,
    x1: f64,
}

impl Plot {
    /// The plot of `problem`, the `p`th in the figure.
    fn new(p: usize, problem: &Problem) -> Plot {
        let (ox, oy) = (
            (p % PLOT_COLS) as f64 * PLOT_W,
            (p / PLOT_COLS) as f64 * PLOT_H,
        );
        let ts: Vec<f64> = problem.range.iter().step_by(10).copied().collect();
        let (x0, x1) = (ts[0], ts[ts.len() - 1]);
        Plot { ox, oy, ts, x0, x1 }
    }

    /// The x coordinate of the time `t` (s), px.
    fn px(&self, t: f64) -> f64 {
        self.ox + PLOT_PAD + (t - self.x0) / (self.x1 - self.x0) * (PLOT_W - PLOT_PAD - 15.0)
    }

    /// The y coordinate of the standardised performance `v`, clamped to the frame, px.
    fn py(&self, v: f64) -> f64 {
        self.oy
            + 30.0
            + (1.0 - ((v - PLOT_LO) / (PLOT_HI - PLOT_LO)).clamp(0.0, 1.0))
                * (PLOT_H - PLOT_PAD - 40.0)
    }

    /// A polyline through `values` (one per time of `ts`) in `color` with the dash attribute
    /// `dash`.
    fn line(&self, values: &[f64], color: &str, dash: &str) -> String {
        let points: Vec<String> = self
            .ts
            .iter()
            .zip(values)
            .map(|(&t, &v)| format!("{:.1},{:.1}", self.px(t), self.py(v)))
            .collect();
        format!(
            r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" {dash} points="{}"/>"#,
            points.join(" ")
        )
    }

    /// The plot's title `name`, frame, axis labels and random search's line (0), to `out`.
    fn frame(&self, out: &mut String, name: &str) {
        let (ox, oy) = (self.ox, self.oy);
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" font-weight="bold">{}</text>"#,
            ox + PLOT_PAD,
            oy + 20.0,
            name
        );
        let _ = writeln!(
            out,
            r#"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="black"/>"#,
            ox + PLOT_PAD,
            oy + 30.0,
            PLOT_W - PLOT_PAD - 15.0,
            PLOT_H - PLOT_PAD - 40.0
        );
        for v in [-1.0, 0.0, 1.0] {
            let _ = writeln!(
                out,
                r#"<text x="{}" y="{}" text-anchor="end">{v:.0}</text>"#,
                ox + PLOT_PAD - 3.0,
                self.py(v) + 4.0
            );
        }
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}">{:.0} s</text><text x="{}" y="{}" text-anchor="end">{:.0} s</text>"#,
            self.px(self.x0),
            oy + PLOT_H - 12.0,
            self.x0,
            self.px(self.x1),
            oy + PLOT_H - 12.0,
            self.x1
        );
        let _ = writeln!(
            out,
            "{}",
            self.line(
                &vec![0.0; self.ts.len()],
                "black",
                r#"stroke-dasharray="4 3""#
            )
        );
    }

    /// Each strategy's standardised performance curve on `problem` (the `p`th of `runs`), to
    /// `out`; none for a strategy the methodology refuses there.
    fn curves(
        &self,
        out: &mut String,
        problem: &Problem,
        names: &[String],
        runs: &AllRuns,
        p: usize,
    ) {
        let baseline = problem.stats.baseline(&self.ts);
        for (s, per) in runs.iter().enumerate() {
            let Ok(curve) = score::strategy_curve(&problem.stats, &per[p], &self.ts, 0) else {
                continue;
            };
            let perf = score::standardised(&problem.stats, &baseline, &curve);
            let _ = writeln!(
                out,
                "{}",
                self.line(&perf, color(names, s), dash(&names[s]))
            );
        }
    }
}

/// The legend at the height `ly` (px): random search's line, then each strategy's, to `out`.
fn legend(out: &mut String, names: &[String], ly: f64) {
    let _ = writeln!(
        out,
        r#"<line x1="10" y1="{ly}" x2="30" y2="{ly}" stroke="black" stroke-dasharray="4 3"/><text x="34" y="{}">random (0)</text>"#,
        ly + 4.0
    );
    for (s, name) in names.iter().enumerate() {
        let x = 150.0 + (s % LEGEND_ROW) as f64 * 150.0;
        let y = ly + (s / LEGEND_ROW) as f64 * 18.0;
        let dash = dash(name);
        let _ = writeln!(
            out,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{}" stroke-width="2" {dash}/><text x="{}" y="{}">{name}</text>"#,
            x + 20.0,
            color(names, s),
            x + 24.0,
            y + 4.0
        );
    }
}
