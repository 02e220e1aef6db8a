//! `cargo xtask agreement [RUNS] [--busy] [--no-kt] [--timing KEY=VALUE]… [--vs "ARGS"] [--vs-bin PATH] [-- TUNE_ARGS…]`: how well independent runs
//! of the main job (`tunebox tune examples/matmul-cpu.toml`) agree on one machine, beside
//! Kernel Tuner's runs of the same kernel and space.
//!
//! Each of the RUNS (default 5) runs starts from an empty results cache (`--no-cache`) and an
//! empty kernel cache (a fresh `TUNEBOX_CACHE_DIR`), so it compiles every choice as a new
//! user's first run does. With `--busy`, 2 × `nproc` busy loops run the whole time, and each
//! tunebox run must print its busy-machine warning. Between tunebox's runs, Kernel Tuner 1.5
//! (from `target/kernel-tuner-venv` or `$KT_VENV`, created with pip as
//! `benchmarks/kernel-tuner/run.sh` does) tunes the same 27 choices once per run
//! (`benchmarks/kernel-tuner/compare.py kt-tune`), unless `--no-kt`.
//!
//! With `--timing KEY=VALUE` (repeatable), tunebox's runs use a copy of the manifest, written
//! to `target/agreement/`, whose `[timing]` sets KEY to VALUE (a TOML value): `--timing
//! clock='"wall"'` times every rep's wall time, as before issue 23's preemption clock;
//! `--timing rep_ms=50` halves the measuring budget.
//!
//! With `--vs "ARGS"`, each run is followed by a run of tunebox with ARGS (split at spaces)
//! added to TUNE_ARGS, kernel cache emptied again: two configurations interleaved in the same
//! stretch of time, as a before/after comparison must be on a machine whose speed drifts
//! (`--vs "--rounds 3"`). Its figures are printed in a column of their own. With `--vs-bin
//! PATH` (alone or with `--vs`), those runs use the tunebox binary at PATH instead: another
//! build, such as main's before a change, interleaved with this one.
//!
//! For every pair of runs of a tool it reports Spearman's rank correlation over the choices
//! both measured `ok`, and the top-1 regret: run i's best as run j measured it, against run j's
//! best (both directions). Prints min / median / max of each and of the wall times, checks them
//! against the targets of issue 23 (idle: regret ≤ 1 %, Spearman ≥ 0.95; busy: ≤ 3 %, ≥ 0.9;
//! tunebox's median wall time ≤ Kernel Tuner's), and writes `target/agreement/summary.json`
//! (`summary-busy.json`) with each run's JSON report beside it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::{Value, json};

use crate::busy::Hogs;
use crate::{cargo, fresh_dir, target_dir, workspace_root};

/// One run's `ok` results: choice label → time in ms (tunebox's estimate, Kernel Tuner's
/// objective).
pub(crate) type Medians = BTreeMap<String, f64>;

const USAGE: &str = "usage: cargo xtask agreement [RUNS ≥ 2] [--busy] [--no-kt] [--timing KEY=VALUE]… [--vs \"ARGS\"] [--vs-bin PATH] [-- TUNE_ARGS…]";

/// What one tool's runs gave.
#[derive(Default)]
struct Runs {
    medians: Vec<Medians>,
    walls: Vec<f64>,
    /// Runs that printed the busy-machine warning.
    warned: usize,
}

/// `cargo xtask agreement`.
pub(crate) fn agreement(args: &[String]) -> Result<(), String> {
    let (own, tune_args) = match args.iter().position(|a| a == "--") {
        Some(i) => (&args[..i], &args[i + 1..]),
        None => (args, &[][..]),
    };
    let options = Options::parse(own)?;
    if let Some(bin) = &options.vs_bin
        && !bin.is_file()
    {
        return Err(format!("--vs-bin {}: no such file", bin.display()));
    }
    let root = workspace_root();
    cargo(&["build", "--release", "--package", "tunebox-cli"], &[])?;
    let tunebox = target_dir(&root).join("release").join("tunebox");
    let out = target_dir(&root).join("agreement");
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let manifest = if options.timing.is_empty() {
        root.join("examples").join("matmul-cpu.toml")
    } else {
        manifest_with_timing(&root, &out, &options.timing)?
    };
    let python = if options.kt {
        Some(kt_python(&root)?)
    } else {
        None
    };
    let _hogs = busy_loops(options.busy)?;
    let kernels = out.join("kernel-cache");
    let tune = TuneRun {
        tunebox: &tunebox,
        manifest: &manifest,
        root: &root,
        kernels: &kernels,
    };
    let vs = options.vs_run(&tune, tune_args);
    let session = Session {
        out: &out,
        tag: if options.busy { "busy" } else { "idle" },
        tune,
        tune_args,
        vs,
        python,
    };
    let tallies = session.run_all(options.runs)?;
    session.report(&tallies, &options)
}

/// With `busy`, 2 × `nproc` busy loops, running until dropped.
fn busy_loops(busy: bool) -> Result<Option<Hogs>, String> {
    if !busy {
        return Ok(None);
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    eprintln!("xtask: {} busy loops on {cores} cores", 2 * cores);
    Ok(Some(Hogs::start(2 * cores)?))
}

/// The runs of each tool.
#[derive(Default)]
struct Tallies {
    /// tunebox's runs with TUNE_ARGS.
    ours: Runs,
    /// Kernel Tuner's runs.
    theirs: Runs,
    /// The `--vs` runs.
    alt: Runs,
}

/// One `cargo xtask agreement`: what each tool runs, and where the reports go.
struct Session<'a> {
    out: &'a Path,
    /// `idle` or `busy`, in the reports' names.
    tag: &'static str,
    tune: TuneRun<'a>,
    tune_args: &'a [String],
    /// `--vs`, `--vs-bin`: the other tunebox run and its arguments.
    vs: Option<(TuneRun<'a>, Vec<String>)>,
    /// Kernel Tuner's Python, unless `--no-kt`.
    python: Option<PathBuf>,
}

impl Session<'_> {
    /// Every tool's `runs` runs, in turn.
    fn run_all(&self, runs: usize) -> Result<Tallies, String> {
        let mut tallies = Tallies::default();
        for run in 0..runs {
            self.tunebox_runs(run, &mut tallies)?;
            if let Some(python) = &self.python {
                let kt_path = self.out.join(format!("kt-{}-{run}.json", self.tag));
                let outcome = kt_run(python, self.tune.root, &kt_path, run)?;
                tallies.theirs.record(run, "Kernel Tuner", outcome);
            }
        }
        Ok(tallies)
    }

    /// Run `run` of tunebox, and of the `--vs` tunebox when there is one.
    fn tunebox_runs(&self, run: usize, tallies: &mut Tallies) -> Result<(), String> {
        let Some((vs_tune, args)) = &self.vs else {
            return self.base_run(run, &mut tallies.ours);
        };
        // Which goes first alternates: neither is always the one after Kernel Tuner.
        let json_path = self.out.join(format!("run-{}-vs-{run}.json", self.tag));
        if run.is_multiple_of(2) {
            self.base_run(run, &mut tallies.ours)?;
        }
        tallies
            .alt
            .record(run, "tunebox --vs", vs_tune.run(&json_path, args)?);
        if !run.is_multiple_of(2) {
            self.base_run(run, &mut tallies.ours)?;
        }
        Ok(())
    }

    /// Run `run` of tunebox with TUNE_ARGS, kept in `ours`.
    fn base_run(&self, run: usize, ours: &mut Runs) -> Result<(), String> {
        let json_path = self.out.join(format!("run-{}-{run}.json", self.tag));
        ours.record(run, "tunebox", self.tune.run(&json_path, self.tune_args)?);
        Ok(())
    }

    /// Prints the summary of the runs (and of the `--vs` runs after it) and writes it.
    fn report(&self, tallies: &Tallies, options: &Options) -> Result<(), String> {
        let described: Vec<String> = self
            .tune_args
            .iter()
            .cloned()
            .chain(
                options
                    .timing
                    .iter()
                    .map(|(k, v)| format!("timing.{k} = {v}")),
            )
            .collect();
        let mut summary = summarize(&tallies.ours, &tallies.theirs, options.busy, &described)?;
        if let Some((vs_tune, args)) = &self.vs {
            println!();
            println!("--vs: {} {}", vs_tune.tunebox.display(), args.join(" "));
            summary["vs"] = summarize(&tallies.alt, &tallies.theirs, options.busy, args)?;
        }
        write_summary(self.out, options.busy, &summary)
    }
}

/// Writes `summary` to `out/summary.json` (`summary-busy.json` for a busy run).
fn write_summary(out: &Path, busy: bool, summary: &Value) -> Result<(), String> {
    let path = out.join(if busy {
        "summary-busy.json"
    } else {
        "summary.json"
    });
    std::fs::write(&path, format!("{summary:#}\n"))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    eprintln!("xtask: wrote {}", path.display());
    Ok(())
}

/// `cargo xtask agreement`'s own arguments (those before `--`).
struct Options {
    runs: usize,
    busy: bool,
    /// Run Kernel Tuner too.
    kt: bool,
    /// `--timing KEY=VALUE`: the manifest's `[timing]` overrides.
    timing: Vec<(String, String)>,
    /// `--vs ARGS`: a second set of tunebox arguments, run beside the first.
    vs: Option<Vec<String>>,
    /// `--vs-bin BIN`: a second tunebox binary, run beside the first.
    vs_bin: Option<PathBuf>,
}

impl Options {
    fn parse(args: &[String]) -> Result<Options, String> {
        let mut options = Options {
            runs: 5,
            busy: false,
            kt: true,
            timing: Vec::new(),
            vs: None,
            vs_bin: None,
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--busy" => options.busy = true,
                "--no-kt" => options.kt = false,
                "--vs" => {
                    let extra = args.next().ok_or(USAGE)?;
                    options.vs = Some(extra.split_whitespace().map(str::to_owned).collect());
                }
                "--vs-bin" => options.vs_bin = Some(PathBuf::from(args.next().ok_or(USAGE)?)),
                "--timing" => {
                    let (key, value) =
                        args.next().and_then(|kv| kv.split_once('=')).ok_or(USAGE)?;
                    options
                        .timing
                        .push((key.trim().to_owned(), value.trim().to_owned()));
                }
                n => options.runs = n.parse().ok().filter(|&n: &usize| n >= 2).ok_or(USAGE)?,
            }
        }
        Ok(options)
    }

    /// The `--vs` run, when `--vs` or `--vs-bin` asks for one: `tune` with `--vs-bin`'s
    /// tunebox, and TUNE_ARGS followed by `--vs`'s arguments.
    fn vs_run<'a>(
        &'a self,
        tune: &TuneRun<'a>,
        tune_args: &[String],
    ) -> Option<(TuneRun<'a>, Vec<String>)> {
        if self.vs.is_none() && self.vs_bin.is_none() {
            return None;
        }
        let args = tune_args
            .iter()
            .cloned()
            .chain(self.vs.iter().flatten().cloned())
            .collect();
        let tune = TuneRun {
            tunebox: self.vs_bin.as_deref().unwrap_or(tune.tunebox),
            ..*tune
        };
        Some((tune, args))
    }
}

/// Run `run` of Kernel Tuner (`benchmarks/kernel-tuner/compare.py kt-tune` under `python`,
/// its times written to `kt_path`): its medians and wall time.
fn kt_run(python: &Path, root: &Path, kt_path: &Path, run: usize) -> Result<Outcome, String> {
    let started = Instant::now();
    let status = Command::new(python)
        .args(["benchmarks/kernel-tuner/compare.py", "kt-tune", "--out"])
        .arg(kt_path)
        .current_dir(root)
        .stdout(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    if !status.success() {
        return Err(format!("Kernel Tuner run {run} failed ({status})"));
    }
    let wall = started.elapsed().as_secs_f64();
    Ok(Outcome {
        medians: kt_times(kt_path)?,
        wall,
        warned: false,
    })
}

/// What one tunebox run needs besides its arguments.
struct TuneRun<'a> {
    tunebox: &'a Path,
    manifest: &'a Path,
    root: &'a Path,
    /// The kernel cache, emptied before each run.
    kernels: &'a Path,
}

/// One tunebox run's figures: its `ok` medians, wall time (s), and whether it warned.
struct Outcome {
    medians: Medians,
    wall: f64,
    warned: bool,
}

impl TuneRun<'_> {
    /// `tunebox tune MANIFEST --no-cache --json JSON_PATH ARGS…` from an empty kernel cache.
    fn run(&self, json_path: &Path, args: &[String]) -> Result<Outcome, String> {
        let kernels = fresh_dir(self.kernels)?;
        let started = Instant::now();
        let output = Command::new(self.tunebox)
            .arg("tune")
            .arg(self.manifest)
            .args(["--no-cache", "--json"])
            .arg(json_path)
            .args(args)
            .env("TUNEBOX_CACHE_DIR", &kernels)
            .current_dir(self.root)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.tunebox.display()))?;
        let wall = started.elapsed().as_secs_f64();
        let stderr = String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            return Err(format!(
                "tunebox {} failed ({}):\n{stderr}",
                args.join(" "),
                output.status
            ));
        }
        Ok(Outcome {
            medians: ok_medians(json_path)?,
            wall,
            warned: stderr.contains("warning: the machine was busy"),
        })
    }
}

impl Runs {
    /// Keeps run `run`'s outcome, and says what it was.
    fn record(&mut self, run: usize, who: &str, outcome: Outcome) {
        eprintln!(
            "xtask: {who} run {run}: {} ok choices in {:.1} s{}",
            outcome.medians.len(),
            outcome.wall,
            if outcome.warned {
                ", warned: busy machine"
            } else {
                ""
            }
        );
        self.warned += usize::from(outcome.warned);
        self.walls.push(outcome.wall);
        self.medians.push(outcome.medians);
    }
}

/// A copy of the main job's manifest in `out` whose `[timing]` sets each KEY to its VALUE
/// (replacing the manifest's own line for KEY), with its kernels' paths made absolute.
fn manifest_with_timing(
    root: &Path,
    out: &Path,
    timing: &[(String, String)],
) -> Result<PathBuf, String> {
    let examples = root.join("examples");
    let original = examples.join("matmul-cpu.toml");
    let text = std::fs::read_to_string(&original)
        .map_err(|e| format!("cannot read {}: {e}", original.display()))?;
    let kernels = format!("source = \"{}/kernels/", examples.display());
    let text = text.replace("source = \"kernels/", &kernels);
    let mut table = String::new();
    let mut lines: Vec<String> = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with('[') {
            table = line.trim().to_owned();
        }
        let key = line.split('=').next().map(str::trim);
        let replaced = table == "[timing]" && timing.iter().any(|(k, _)| key == Some(k.as_str()));
        if !replaced {
            lines.push(line.to_owned());
        }
    }
    let at = lines
        .iter()
        .position(|l| l.trim() == "[timing]")
        .ok_or_else(|| format!("{}: no [timing] table", original.display()))?;
    for (key, value) in timing {
        lines.insert(at + 1, format!("{key} = {value}"));
    }
    let name: Vec<String> = timing
        .iter()
        .map(|(k, v)| format!("{k}-{}", v.replace('"', "")))
        .collect();
    let path = out.join(format!("matmul-cpu-{}.toml", name.join("-")));
    std::fs::write(&path, lines.join("\n") + "\n")
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// Pairwise figures of one tool's runs: (Spearman of each pair, regret both ways).
fn pairwise(medians: &[Medians]) -> Result<(Vec<f64>, Vec<f64>), String> {
    let (mut rhos, mut regrets) = (Vec::new(), Vec::new());
    for i in 0..medians.len() {
        for j in i + 1..medians.len() {
            let (a, b) = (&medians[i], &medians[j]);
            rhos.push(spearman(a, b).ok_or("fewer than 2 choices measured ok in both runs")?);
            regrets.push(regret(a, b).ok_or("no choice measured ok")?);
            regrets.push(regret(b, a).ok_or("no choice measured ok")?);
        }
    }
    Ok((rhos, regrets))
}

/// Min, median and max.
fn spread(values: &[f64]) -> [f64; 3] {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => [f64::NAN; 3],
        n => [v[0], (v[(n - 1) / 2] + v[n / 2]) / 2.0, v[n - 1]],
    }
}

/// Prints the table and the targets' verdicts; the summary as JSON.
fn summarize(
    ours: &Runs,
    theirs: &Runs,
    busy: bool,
    tune_args: &[String],
) -> Result<Value, String> {
    let figures = Figures::of(ours, theirs)?;
    figures.print_table(ours, theirs, busy);
    figures.print_targets(ours, theirs, busy);
    Ok(figures.json(ours, theirs, busy, tune_args))
}

/// The pairwise figures of tunebox's runs and of Kernel Tuner's (none for fewer than 2 runs).
struct Figures {
    rho: Vec<f64>,
    regret: Vec<f64>,
    kt_rho: Vec<f64>,
    kt_regret: Vec<f64>,
}

impl Figures {
    /// The figures of `ours` (tunebox's runs) and `theirs` (Kernel Tuner's).
    fn of(ours: &Runs, theirs: &Runs) -> Result<Figures, String> {
        let (rho, regret) = pairwise(&ours.medians)?;
        let (kt_rho, kt_regret) = if theirs.medians.len() >= 2 {
            pairwise(&theirs.medians)?
        } else {
            (Vec::new(), Vec::new())
        };
        Ok(Figures {
            rho,
            regret,
            kt_rho,
            kt_regret,
        })
    }

    /// Prints min / median / max of each figure and of the wall times, a column per tool.
    fn print_table(&self, ours: &Runs, theirs: &Runs, busy: bool) {
        let machine = if busy {
            "busy (2 x nproc loops)"
        } else {
            "idle"
        };
        println!(
            "{} runs each, {machine}; min / median / max over pairs of runs",
            ours.medians.len()
        );
        println!("{:<28} {:<34} Kernel Tuner 1.5", "", "tunebox");
        print_row("Spearman", &self.rho, &self.kt_rho, 1.0, "");
        print_row("top-1 regret", &self.regret, &self.kt_regret, 100.0, " %");
        print_row("wall time", &ours.walls, &theirs.walls, 1.0, " s");
    }

    /// Prints the verdicts of issue 23's targets (regret and Spearman; busy: every run warned;
    /// idle: wall time against Kernel Tuner's), and of tunebox against Kernel Tuner.
    fn print_targets(&self, ours: &Runs, theirs: &Runs, busy: bool) {
        let (max_regret, min_rho) = if busy { (0.03, 0.9) } else { (0.01, 0.95) };
        let worst_regret = spread(&self.regret)[2];
        let worst_rho = spread(&self.rho)[0];
        println!(
            "target: top-1 regret <= {:.0} %: {} ({:.2} %); Spearman >= {min_rho}: {} ({worst_rho:.3})",
            max_regret * 100.0,
            verdict(worst_regret <= max_regret),
            worst_regret * 100.0,
            verdict(worst_rho >= min_rho)
        );
        if busy {
            println!(
                "target: every busy run warns: {} ({} of {})",
                verdict(ours.warned == ours.medians.len()),
                ours.warned,
                ours.medians.len()
            );
        } else if !theirs.walls.is_empty() {
            let (a, b) = (spread(&ours.walls)[1], spread(&theirs.walls)[1]);
            println!(
                "target: wall time <= Kernel Tuner's: {} (median {a:.1} s against {b:.1} s)",
                verdict(a <= b)
            );
        }
        if !self.kt_rho.is_empty() {
            println!(
                "tunebox better than Kernel Tuner: Spearman {}, regret {}",
                verdict(worst_rho >= spread(&self.kt_rho)[0]),
                verdict(worst_regret <= spread(&self.kt_regret)[2])
            );
        }
    }

    /// The summary: the runs' settings, and every figure of each tool.
    fn json(&self, ours: &Runs, theirs: &Runs, busy: bool, tune_args: &[String]) -> Value {
        json!({
            "runs": ours.medians.len(),
            "busy": busy,
            "tune_args": tune_args,
            "tunebox": {
                "spearman": self.rho, "top1_regret": self.regret, "wall_s": ours.walls,
                "warned": ours.warned,
            },
            "kernel_tuner": {
                "spearman": self.kt_rho, "top1_regret": self.kt_regret, "wall_s": theirs.walls,
            },
        })
    }
}

/// Prints a row of the table: `name`, then min / median / max of `ours` and of `theirs`, each
/// value times `scale` and followed by `unit`.
fn print_row(name: &str, ours: &[f64], theirs: &[f64], scale: f64, unit: &str) {
    println!(
        "{name:<28} {:<34} {}",
        spread_text(ours, scale, unit),
        spread_text(theirs, scale, unit)
    );
}

/// `min / median / max` of `values`, each times `scale` and followed by `unit`; `-` for none.
fn spread_text(values: &[f64], scale: f64, unit: &str) -> String {
    let v = spread(values);
    if v[0].is_nan() {
        "-".to_owned()
    } else {
        format!(
            "{:.3}{unit} / {:.3}{unit} / {:.3}{unit}",
            v[0] * scale,
            v[1] * scale,
            v[2] * scale
        )
    }
}

/// A target's verdict: `met` or `MISSED`.
fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

/// The Python of the Kernel Tuner virtualenv (`$KT_VENV`, else `target/kernel-tuner-venv`),
/// created with Kernel Tuner 1.5 and numpy from pip when it lacks them.
fn kt_python(root: &Path) -> Result<PathBuf, String> {
    let venv = std::env::var_os("KT_VENV")
        .map_or_else(|| target_dir(root).join("kernel-tuner-venv"), PathBuf::from);
    let python = venv.join("bin").join("python");
    let has_kt = || {
        Command::new(&python)
            .args(["-c", "import kernel_tuner, numpy"])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if has_kt() {
        return Ok(python);
    }
    eprintln!(
        "xtask: installing Kernel Tuner 1.5 and numpy into {}",
        venv.display()
    );
    let run = |cmd: &mut Command| {
        cmd.status()
            .map_err(|e| format!("{e}"))
            .and_then(|s| s.success().then_some(()).ok_or(format!("{s}")))
    };
    run(Command::new("python3").arg("-m").arg("venv").arg(&venv)).map_err(|e| {
        format!(
            "python3 -m venv {} failed ({e}); --no-kt skips Kernel Tuner",
            venv.display()
        )
    })?;
    run(Command::new(&python).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "kernel_tuner>=1.5,<1.6",
        "numpy",
    ]))
    .map_err(|e| format!("pip install of kernel_tuner failed ({e}); --no-kt skips Kernel Tuner"))?;
    Ok(python)
}

/// Kernel Tuner's objective (`time`, ms) of each `ok` choice of a `compare.py kt-tune` file.
fn kt_times(path: &Path) -> Result<Medians, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let data: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(data["results"]
        .as_array()
        .ok_or_else(|| format!("{}: no results", path.display()))?
        .iter()
        .filter(|r| r["status"] == "ok")
        .filter_map(|r| Some((label(&r["choice"]), r["time_ms"].as_f64()?)))
        .collect())
}

/// The results of a JSON report (`tunebox tune --json`).
pub(crate) fn report_results(path: &Path) -> Result<Vec<Value>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let report: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    report["results"]
        .as_array()
        .cloned()
        .ok_or_else(|| format!("{}: no results", path.display()))
}

/// A choice's label, `BM=32 BN=64`, from its JSON object.
pub(crate) fn label(choice: &Value) -> String {
    choice.as_object().map_or_else(String::new, |params| {
        params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    })
}

/// The median of every `ok` choice of a JSON report.
fn ok_medians(path: &Path) -> Result<Medians, String> {
    Ok(report_results(path)?
        .iter()
        .filter(|r| r["status"] == "ok")
        .filter_map(|r| Some((label(&r["choice"]), r["median_ms"].as_f64()?)))
        .collect())
}

/// The fastest choice.
fn best(medians: &Medians) -> Option<String> {
    medians
        .iter()
        .min_by(|a, b| a.1.total_cmp(b.1))
        .map(|(label, _)| label.clone())
}

/// Run `a`'s best as `b` measured it, relative to `b`'s best: `b[best(a)] / min(b) - 1`.
fn regret(a: &Medians, b: &Medians) -> Option<f64> {
    let best_b = b.values().copied().min_by(f64::total_cmp)?;
    let chosen = b.get(&best(a)?)?;
    Some(chosen / best_b - 1.0)
}

/// Spearman's rank correlation of the choices in both (average ranks for ties), or `None` for
/// fewer than 2 common choices.
pub(crate) fn spearman(a: &Medians, b: &Medians) -> Option<f64> {
    let common: Vec<(f64, f64)> = a
        .iter()
        .filter_map(|(label, &x)| Some((x, *b.get(label)?)))
        .collect();
    if common.len() < 2 {
        return None;
    }
    let ra = ranks(&common.iter().map(|p| p.0).collect::<Vec<_>>());
    let rb = ranks(&common.iter().map(|p| p.1).collect::<Vec<_>>());
    Some(pearson(&ra, &rb))
}

/// Ranks from 1, ties sharing their average rank.
fn ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&i, &j| values[i].total_cmp(&values[j]));
    let mut ranks = vec![0.0; values.len()];
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && values[order[end]] == values[order[start]] {
            end += 1;
        }
        let average = (start + end + 1) as f64 / 2.0;
        for &i in &order[start..end] {
            ranks[i] = average;
        }
        start = end;
    }
    ranks
}

fn pearson(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let cov: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let vx: f64 = x.iter().map(|a| (a - mx).powi(2)).sum();
    let vy: f64 = y.iter().map(|b| (b - my).powi(2)).sum();
    if vx == 0.0 || vy == 0.0 {
        0.0
    } else {
        cov / (vx * vy).sqrt()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn medians(pairs: &[(&str, f64)]) -> Medians {
        pairs.iter().map(|(l, m)| (l.to_string(), *m)).collect()
    }

    #[test]
    fn spearman_and_regret() {
        let a = medians(&[("x", 1.0), ("y", 2.0), ("z", 3.0), ("w", 4.0)]);
        assert_eq!(spearman(&a, &a), Some(1.0));
        let reversed = medians(&[("x", 4.0), ("y", 3.0), ("z", 2.0), ("w", 1.0)]);
        assert_eq!(spearman(&a, &reversed), Some(-1.0));
        // Ties share their average rank (scipy.stats.spearmanr gives 0.9487 here).
        let tied = medians(&[("x", 1.0), ("y", 1.0), ("z", 3.0), ("w", 4.0)]);
        assert!((spearman(&a, &tied).unwrap() - 0.948_683).abs() < 1e-6);
        assert_eq!(regret(&a, &a), Some(0.0));
        // Run a's best (x) took 4 in run b, whose best took 1: 300 % regret.
        assert_eq!(regret(&a, &reversed), Some(3.0));
        assert_eq!(spearman(&a, &medians(&[("x", 1.0)])), None);
    }

    #[test]
    fn labels_follow_the_params() {
        let choice: Value = serde_json::from_str(r#"{"BM": 32, "NAME": "a"}"#).unwrap();
        assert_eq!(label(&choice), r#"BM=32 NAME="a""#);
    }
}
