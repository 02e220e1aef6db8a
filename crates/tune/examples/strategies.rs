//! Compares the search strategies on the FAIR Benchmark Hub's recorded spaces, in simulation,
//! with the methodology of Willemsen et al., "A methodology for comparing optimization
//! algorithms for auto-tuning" (FGCS 2024). Run by `cargo xtask strategies`; see
//! docs/search.md for the formula and the figures.
//!
//! When Kernel Tuner is installed (a Python environment with `kernel_tuner`, `$KT_VENV` or
//! `target/kernel-tuner-venv`) and `--no-kt` is not given, Kernel Tuner's strategies run too, in
//! its simulation mode on the same files under the same simulated budgets
//! (`benchmarks/kernel-tuner/strategies.py`, reading the budgets this writes to
//! `target/strategies/kt-budgets.json`); their traces are scored here by the same formula and
//! appear as `kt:NAME` in the table and dotted in the plot.
//!
//! ```text
//! cargo run --release -p tunebox-tune --example strategies -- [--seeds N] [--budget-fraction F]
//!     [--hub DIR] [--svg PATH] [--markdown PATH] [--strategies a,b,…]
//!     [--no-kt] [--kt-seeds N] [--kt-strategies a,b,…] [--kt-traces PATH]
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use tunebox_tune::SearchSpace;
use tunebox_tune::formats::T1File;
use tunebox_tune::replay::{Budget, Recorded, Recording, Trace, simulate};
use tunebox_tune::strategies;

/// The random baseline reaches this fraction of the way from the median to the optimum at the
/// end of the budget …
const CUTOFF: f64 = 0.95;
/// … and this fraction at its start.
const CUTOFF_START: f64 = 0.01;
/// Points of the time axis the performance is averaged over.
const STEPS: usize = 100;

struct Options {
    seeds: u64,
    fraction: f64,
    hub: PathBuf,
    svg: PathBuf,
    markdown: Option<PathBuf>,
    strategies: Vec<String>,
    /// Kernel Tuner's Python, when it runs.
    kt_python: Option<PathBuf>,
    kt_seeds: u64,
    kt_strategies: Option<String>,
    /// Kernel Tuner traces recorded before: score these instead of running Kernel Tuner.
    kt_traces: Option<PathBuf>,
}

fn parse() -> Result<Options, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut o = Options {
        seeds: 20,
        fraction: 1.0,
        hub: root.join("data/benchmark_hub"),
        svg: root.join("target/strategies/search-strategies.svg"),
        markdown: None,
        strategies: strategies::NAMES
            .iter()
            .filter(|n| **n != "brute-force")
            .map(|n| (*n).to_owned())
            .collect(),
        kt_python: None,
        kt_seeds: 10,
        kt_strategies: None,
        kt_traces: None,
    };
    let mut kt = true;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--seeds" => o.seeds = value()?.parse().map_err(|e| format!("--seeds: {e}"))?,
            "--budget-fraction" => {
                o.fraction = value()?
                    .parse()
                    .map_err(|e| format!("--budget-fraction: {e}"))?;
            }
            "--hub" => o.hub = value()?.into(),
            "--svg" => o.svg = value()?.into(),
            "--markdown" => o.markdown = Some(value()?.into()),
            "--strategies" => {
                o.strategies = value()?.split(',').map(str::to_owned).collect();
            }
            "--no-kt" => kt = false,
            "--kt-seeds" => {
                o.kt_seeds = value()?.parse().map_err(|e| format!("--kt-seeds: {e}"))?;
            }
            "--kt-strategies" => o.kt_strategies = Some(value()?),
            "--kt-traces" => o.kt_traces = Some(value()?.into()),
            other => return Err(format!("unknown option {other}")),
        }
    }
    for s in &o.strategies {
        if strategies::by_name(s, 1, 0).is_none() {
            return Err(format!("unknown strategy {s}"));
        }
    }
    let venv = std::env::var_os("KT_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/kernel-tuner-venv"));
    let python = venv.join("bin/python");
    if kt && o.kt_traces.is_none() && python.is_file() {
        o.kt_python = Some(python);
    }
    if !kt {
        o.kt_traces = None;
    }
    if o.fraction.is_nan() || o.fraction <= 0.0 || o.seeds == 0 || o.kt_seeds == 0 {
        return Err("--seeds and --budget-fraction must be above 0".into());
    }
    Ok(o)
}

/// One replayable space and what the methodology needs of it.
struct Problem {
    name: String,
    cache: PathBuf,
    t1: PathBuf,
    space: SearchSpace,
    recorded: Recorded,
    optimum: f64,
    median: f64,
    /// Mean cost of one measurement, ms.
    mean_cost: f64,
    /// Expected best time of random search after k measurements, k = 1..=N (index k-1).
    baseline: Vec<f64>,
    /// The budget: [start, end] in simulated ms.
    start_ms: f64,
    end_ms: f64,
}

impl Problem {
    fn load(cache: &Path, t1_path: &Path, name: String, fraction: f64) -> Problem {
        let t1 = t1_path;
        let recording = Recording::read(cache).expect("a readable cache file");
        let t1 = T1File::read(t1).expect("a readable T1 file");
        let conditions: Vec<String> = t1
            .configuration_space
            .conditions
            .iter()
            .map(|c| c.expression.clone())
            .collect();
        let space = recording.space(&conditions).expect("a valid space");
        let recorded = Recorded::new(&recording, &space).expect("matching params");
        let mut times: Vec<f64> = recorded.times().collect();
        times.sort_by(f64::total_cmp);
        let n = space.len();
        let optimum = times[0];
        let median = times[times.len() / 2];
        let mean_cost = recorded.total_cost_ms() / n as f64;
        let baseline = expected_best(&times, n);
        let time_of = |fraction: f64| {
            let target = median - fraction * (median - optimum);
            let k = baseline.iter().position(|&b| b <= target).unwrap_or(n - 1) + 1;
            k as f64 * mean_cost
        };
        let start_ms = time_of(CUTOFF_START);
        let end_ms = (time_of(CUTOFF) * fraction).max(start_ms * 1.01);
        Problem {
            name,
            cache: cache.to_owned(),
            t1: t1_path.to_owned(),
            space,
            recorded,
            optimum,
            median,
            mean_cost,
            baseline,
            start_ms,
            end_ms,
        }
    }

    /// The random baseline at simulated time `t`.
    fn baseline_at(&self, t: f64) -> f64 {
        let k = ((t / self.mean_cost).floor() as usize).clamp(1, self.baseline.len());
        self.baseline[k - 1]
    }

    fn times(&self) -> Vec<f64> {
        (0..STEPS)
            .map(|j| self.start_ms + (self.end_ms - self.start_ms) * j as f64 / (STEPS - 1) as f64)
            .collect()
    }
}

/// E[best of k draws without replacement] for k = 1..=n, over `sorted` working times among
/// `n` choices (the others failed), conditioned on at least one working draw.
fn expected_best(sorted: &[f64], n: usize) -> Vec<f64> {
    (1..=n)
        .map(|k| {
            // P(the best draw is the i-th best choice) = C(n-i, k-1) / C(n, k).
            let mut p = k as f64 / n as f64;
            let (mut sum, mut mass) = (0.0, 0.0);
            for (i, &t) in sorted.iter().enumerate() {
                sum += p * t;
                mass += p;
                let i = i + 1;
                if i + k > n {
                    break;
                }
                p *= (n - i + 1 - k) as f64 / (n - i) as f64;
            }
            if mass > 0.0 { sum / mass } else { f64::NAN }
        })
        .collect()
}

/// Per strategy and problem: the mean best-found curve over seeds at `problem.times()`.
fn curve(problem: &Problem, strategy: &str, seeds: u64) -> Vec<f64> {
    let ts = problem.times();
    let mut sum = vec![0.0; ts.len()];
    for seed in 0..seeds {
        let mut s = strategies::by_name(strategy, problem.space.len(), seed).expect("a strategy");
        let budget = Budget {
            max_evals: usize::MAX,
            max_time_ms: problem.end_ms,
        };
        let trace: Trace = simulate(&problem.space, s.as_mut(), &problem.recorded, budget);
        for (acc, &t) in sum.iter_mut().zip(&ts) {
            // Nothing found yet: as good as the median choice.
            *acc += trace.best_at(t).unwrap_or(problem.median);
        }
    }
    sum.iter().map(|s| s / seeds as f64).collect()
}

/// Kernel Tuner's strategies on the same problems: per strategy (`kt:NAME`), per problem, the
/// mean best-found curve; and a line saying what ran and what was skipped.
type KtCurves = (Vec<String>, Curves, String);

/// Per strategy, per problem, the mean best-found curve.
type Curves = Vec<Vec<Vec<f64>>>;

/// Runs `benchmarks/kernel-tuner/strategies.py` with `python` on the problems' files and
/// budgets; returns the path of its traces.
fn run_kt(problems: &[Problem], python: &Path, options: &Options) -> Result<PathBuf, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = root.join("target/strategies");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let spaces: Vec<serde_json::Value> = problems
        .iter()
        .map(|p| {
            serde_json::json!({
                "name": p.name,
                "cache": p.cache,
                "t1": p.t1,
                "start_ms": p.start_ms,
                "end_ms": p.end_ms,
            })
        })
        .collect();
    let budgets = dir.join("kt-budgets.json");
    let traces = dir.join("kt-traces.json");
    std::fs::write(
        &budgets,
        serde_json::json!({ "spaces": spaces }).to_string(),
    )
    .map_err(|e| format!("{}: {e}", budgets.display()))?;
    let mut cmd = std::process::Command::new(python);
    cmd.arg(root.join("benchmarks/kernel-tuner/strategies.py"))
        .arg(&budgets)
        .arg(&traces)
        .args(["--seeds", &options.kt_seeds.to_string()]);
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

/// Scores the traces of `run_kt` (`[[elapsed_ms, best_ms or null], …]` per seed) as `curve`
/// does tunebox's.
fn kt_curves(problems: &[Problem], traces: &Path) -> Result<KtCurves, String> {
    let text = std::fs::read_to_string(traces).map_err(|e| format!("{}: {e}", traces.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", traces.display()))?;
    let spaces = &v["spaces"];
    let first = spaces[problems[0].name.as_str()]
        .as_object()
        .ok_or("no traces for the first space")?;
    let mut names = Vec::new();
    let mut curves = Vec::new();
    for strategy in first.keys() {
        let mut per_problem = Vec::new();
        for p in problems {
            let runs = spaces[p.name.as_str()][strategy]
                .as_array()
                .ok_or(format!("no {strategy} traces for {}", p.name))?;
            let runs: Vec<Vec<(f64, Option<f64>)>> = runs
                .iter()
                .filter_map(|r| r.as_array())
                .map(|r| {
                    r.iter()
                        .map(|pt| (pt[0].as_f64().unwrap_or(f64::INFINITY), pt[1].as_f64()))
                        .collect()
                })
                .collect();
            if runs.is_empty() {
                return Err(format!("no {strategy} runs for {}", p.name));
            }
            let curve: Vec<f64> = p
                .times()
                .iter()
                .map(|&t| {
                    runs.iter()
                        .map(|r| {
                            let n = r.partition_point(|pt| pt.0 <= t);
                            n.checked_sub(1).and_then(|i| r[i].1).unwrap_or(p.median)
                        })
                        .sum::<f64>()
                        / runs.len() as f64
                })
                .collect();
            per_problem.push(curve);
        }
        names.push(format!("kt:{strategy}"));
        curves.push(per_problem);
    }
    let skipped = v["skipped"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, why)| format!("{k} ({})", why.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join("; ")
        })
        .unwrap_or_default();
    let note = format!(
        "Kernel Tuner {}: {} seeds, {:.1} s wall (all runs, {} processes){}{}",
        v["kernel_tuner"].as_str().unwrap_or("?"),
        v["seeds"].as_u64().unwrap_or(0),
        v["total_wall_s"].as_f64().unwrap_or(f64::NAN),
        v["jobs"].as_u64().unwrap_or(1),
        v["slow_seeds"]
            .as_object()
            .map(|m| m
                .iter()
                .map(|(k, n)| format!(" ({k}: {n} seed(s))"))
                .collect::<String>())
            .unwrap_or_default(),
        if skipped.is_empty() {
            String::new()
        } else {
            format!("; skipped: {skipped}")
        }
    );
    Ok((names, curves, note))
}

/// The performance at each time: 0 is random search, 1 the optimum.
fn performance(problem: &Problem, curve: &[f64]) -> Vec<f64> {
    problem
        .times()
        .iter()
        .zip(curve)
        .map(|(&t, &best)| {
            let b = problem.baseline_at(t);
            (b - best) / (b - problem.optimum).max(1e-12)
        })
        .collect()
}

const COLORS: [&str; 8] = [
    "#888888", "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
];

/// Legend entries per row.
const LEGEND_ROW: usize = 6;

/// Kernel Tuner's strategies (`kt:…`) are dotted, tunebox's solid.
fn style(name: &str) -> &'static str {
    if name.starts_with("kt:") {
        r#"stroke-dasharray="2 2""#
    } else {
        ""
    }
}

/// Colours cycle separately over tunebox's and Kernel Tuner's strategies.
fn color(names: &[String], s: usize) -> &'static str {
    let kt = names[s].starts_with("kt:");
    let k = names[..s]
        .iter()
        .filter(|n| n.starts_with("kt:") == kt)
        .count();
    let palette: &[&str] = if kt { &KT_COLORS } else { &COLORS[1..] };
    palette[k % palette.len()]
}

const KT_COLORS: [&str; 10] = [
    "#17becf", "#bcbd22", "#7f7f7f", "#e377c2", "#8c564b", "#9467bd", "#d62728", "#2ca02c",
    "#ff7f0e", "#1f77b4",
];

fn svg(problems: &[Problem], names: &[String], curves: &[Vec<Vec<f64>>]) -> String {
    let (cols, w, h, pad) = (3, 360.0, 260.0, 50.0);
    let rows = problems.len().div_ceil(cols);
    let width = cols as f64 * w;
    let height = rows as f64 * h + 30.0 + names.len().div_ceil(LEGEND_ROW) as f64 * 18.0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (p, problem) in problems.iter().enumerate() {
        let (ox, oy) = ((p % cols) as f64 * w, (p / cols) as f64 * h);
        let ts = problem.times();
        let (x0, x1) = (ts[0], ts[ts.len() - 1]);
        let base: Vec<f64> = ts.iter().map(|&t| problem.baseline_at(t)).collect();
        let lo = problem.optimum;
        let hi = base[0].max(problem.optimum * 1.05);
        let px = |t: f64| ox + pad + (t - x0) / (x1 - x0) * (w - pad - 15.0);
        let py =
            |v: f64| oy + 30.0 + (1.0 - ((v - lo) / (hi - lo)).clamp(0.0, 1.0)) * (h - pad - 40.0);
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" font-weight="bold">{}</text>"#,
            ox + pad,
            oy + 20.0,
            problem.name
        );
        let _ = writeln!(
            out,
            r#"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="black"/>"#,
            ox + pad,
            oy + 30.0,
            w - pad - 15.0,
            h - pad - 40.0
        );
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="end">{:.3}</text><text x="{}" y="{}" text-anchor="end">{:.3}</text>"#,
            ox + pad - 3.0,
            py(hi) + 4.0,
            hi,
            ox + pad - 3.0,
            py(lo) + 4.0,
            lo
        );
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}">{:.0} s</text><text x="{}" y="{}" text-anchor="end">{:.0} s</text>"#,
            px(x0),
            oy + h - 12.0,
            x0 / 1000.0,
            px(x1),
            oy + h - 12.0,
            x1 / 1000.0
        );
        let line = |values: &[f64], color: &str, dash: &str| {
            let points: Vec<String> = ts
                .iter()
                .zip(values)
                .map(|(&t, &v)| format!("{:.1},{:.1}", px(t), py(v)))
                .collect();
            format!(
                r#"<polyline fill="none" stroke="{color}" stroke-width="1.5" {dash} points="{}"/>"#,
                points.join(" ")
            )
        };
        let _ = writeln!(out, "{}", line(&base, "black", r#"stroke-dasharray="4 3""#));
        for (s, c) in curves.iter().enumerate() {
            let _ = writeln!(out, "{}", line(&c[p], color(names, s), style(&names[s])));
        }
    }
    // Legend.
    let ly = rows as f64 * h + 20.0;
    let _ = writeln!(
        out,
        r#"<line x1="10" y1="{ly}" x2="30" y2="{ly}" stroke="black" stroke-dasharray="4 3"/><text x="34" y="{}">random (expected)</text>"#,
        ly + 4.0
    );
    for (s, name) in names.iter().enumerate() {
        let x = 150.0 + (s % LEGEND_ROW) as f64 * 150.0;
        let y = ly + (s / LEGEND_ROW) as f64 * 18.0;
        let _ = writeln!(
            out,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{}" stroke-width="2" {}/><text x="{}" y="{}">{name}</text>"#,
            x + 20.0,
            color(names, s),
            style(name),
            x + 24.0,
            y + 4.0
        );
    }
    out.push_str("</svg>\n");
    out
}

fn main() {
    let options = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("strategies: {e}");
            std::process::exit(2);
        }
    };
    let started = Instant::now();
    let mut problems = Vec::new();
    for kernel in ["convolution_milo", "dedispersion_milo"] {
        for gpu in ["A100", "A4000", "A6000"] {
            let cache = options
                .hub
                .join(format!("cachefiles/{kernel}/{gpu}.json.gz"));
            let t1 = options.hub.join(format!("kernels/{kernel}.json"));
            let name = format!("{} {gpu}", kernel.trim_end_matches("_milo"));
            problems.push(Problem::load(&cache, &t1, name, options.fraction));
        }
    }
    let names = &options.strategies;
    // curves[strategy][problem][step]
    let (curves, kt): (Curves, Option<Result<PathBuf, String>>) = std::thread::scope(|scope| {
        // Kernel Tuner's strategies run beside tunebox's.
        let kt = options.kt_python.as_ref().map(|python| {
            let problems = &problems;
            let options = &options;
            scope.spawn(move || run_kt(problems, python, options))
        });
        let handles: Vec<_> = names
            .iter()
            .map(|name| {
                let problems = &problems;
                let seeds = options.seeds;
                scope.spawn(move || {
                    let started = Instant::now();
                    let curves = problems
                        .iter()
                        .map(|p| curve(p, name, seeds))
                        .collect::<Vec<_>>();
                    eprintln!(
                        "strategies: {name} done in {:.1} s",
                        started.elapsed().as_secs_f64()
                    );
                    curves
                })
            })
            .collect();
        let curves = handles
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect();
        (curves, kt.map(|h| h.join().expect("no panic")))
    });
    let kt = kt.or(options.kt_traces.clone().map(Ok));
    let (mut names, mut curves) = (names.clone(), curves);
    let mut kt_note = None;
    match kt.map(|traces| traces.and_then(|t| kt_curves(&problems, &t))) {
        Some(Ok((kt_names, kt_curves, note))) => {
            names.extend(kt_names);
            curves.extend(kt_curves);
            kt_note = Some(note);
        }
        Some(Err(e)) => eprintln!("strategies: Kernel Tuner's strategies left out: {e}"),
        None => {}
    }
    let names = &names;
    let mut md = String::new();
    let _ = writeln!(
        md,
        "Seeds: {}; budget fraction: {}; cutoffs {CUTOFF_START}–{CUTOFF}; {} time steps.\n",
        options.seeds, options.fraction, STEPS
    );
    let _ = writeln!(
        md,
        "| space | choices | optimum ms | median ms | budget (simulated) | random evals in budget |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|---:|");
    for p in &problems {
        let _ = writeln!(
            md,
            "| {} | {} | {:.4} | {:.4} | {:.0}–{:.0} s | {:.0} |",
            p.name,
            p.space.len(),
            p.optimum,
            p.median,
            p.start_ms / 1000.0,
            p.end_ms / 1000.0,
            p.end_ms / p.mean_cost
        );
    }
    let _ = writeln!(md);
    let header: Vec<&str> = problems.iter().map(|p| p.name.as_str()).collect();
    let _ = writeln!(md, "| strategy | score | {} |", header.join(" | "));
    let _ = writeln!(md, "|---|---:|{}", "---:|".repeat(problems.len()));
    let mut ranked: Vec<(f64, String, Vec<f64>)> = names
        .iter()
        .zip(&curves)
        .map(|(name, per_problem)| {
            let scores: Vec<f64> = problems
                .iter()
                .zip(per_problem)
                .map(|(p, c)| {
                    let perf = performance(p, c);
                    perf.iter().sum::<f64>() / perf.len() as f64
                })
                .collect();
            let score = scores.iter().sum::<f64>() / scores.len() as f64;
            (score, name.clone(), scores)
        })
        .collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (score, name, scores) in &ranked {
        let cells: Vec<String> = scores.iter().map(|s| format!("{s:.3}")).collect();
        let _ = writeln!(md, "| {name} | **{score:.3}** | {} |", cells.join(" | "));
    }
    let _ = writeln!(
        md,
        "\n({:.1} s on this machine{})",
        started.elapsed().as_secs_f64(),
        kt_note.map(|n| format!("; {n}")).unwrap_or_default()
    );
    print!("{md}");
    if let Some(path) = &options.markdown {
        std::fs::write(path, &md).expect("the markdown file can be written");
    }
    if let Some(dir) = options.svg.parent() {
        std::fs::create_dir_all(dir).expect("the SVG's folder can be made");
    }
    std::fs::write(&options.svg, svg(&problems, names, &curves)).expect("the SVG can be written");
    eprintln!("strategies: wrote {}", options.svg.display());
}
