//! What a measurement window costs beside its kernel's calls when the tensors are large
//! (issue 33, "Windows that cost nothing"): a manifest with three 1 GiB f32 tensors
//! (`c = a + b`, two choices of unrolling), measured through the engine's own stages
//! ([`tunebox_tune::lookup_cached`], [`tunebox_tune::compile()`], [`tunebox_tune::reference()`],
//! [`tunebox_tune::measure()`]) as a run measures them: each screening window in a fresh
//! worker, the round windows in one reused worker (`--fresh-windows`: a fresh worker each).
//! Run by `cargo xtask window-cost`.
//!
//! ```text
//! cargo run --release -p tunebox-tune --example window_cost -- \
//!     --worker target/release/tunebox [--gib 1] [--rounds 3] [--rounds-only] [--fresh-windows]
//!     [--json PATH]
//! ```
//!
//! Each choice gets a screening window (outputs returned and verified against the reference,
//! one last call on fresh inputs) and `--rounds` round windows (no outputs), with the
//! manifest's timing shared between them as a run shares it (warmup in the screening window
//! only, the first call as the estimate). For every window it prints its wall time (from the
//! end of the window before to the end of this one, on one worker: what the window adds to a
//! run), its kernel calls' time (the first call, the warmup calls, the timed reps and, with
//! outputs, the final call, each counted at the reps' mean; reps timed by the wall clock), the
//! overhead (wall less calls) and the overhead's ratio to the calls. The first window of each
//! batch also starts the pool (and makes the pool's shared inputs). `--gib` scales every tensor (0.25 for a quick look); `--rounds-only` skips the
//! reference and the screening windows (to profile the round windows alone).

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use tunebox_tune::{
    ChoiceResult, Compiled, Event, Manifest, Observer, Setup, Stop, Todo, compile, compiler,
    load_space, lookup_cached, measure, reference,
};

const KERNEL: &str = r#"#include <stdint.h>
#ifndef UNROLL
#define UNROLL 1
#endif
/* c = a + b over n floats, UNROLL elements per step. */
void vadd(const float *a, const float *b, float *c, int64_t n)
{
    int64_t i = 0;
    for (; i + UNROLL <= n; i += UNROLL)
        for (int u = 0; u < UNROLL; u++)
            c[i + u] = a[i + u] + b[i + u];
    for (; i < n; i++)
        c[i] = a[i] + b[i];
}
"#;

/// The manifest, for tensors of `n` floats each.
fn manifest_text(n: u64) -> String {
    format!(
        r#"name = "window-cost"
seed = 0
timeout_s = 300

[kernel]
source = "vadd.c"
entry = "vadd"
flags = ["-O2"]

[[tensors]]
name = "a"
dtype = "f32"
shape = [{n}]
init = "random"

[[tensors]]
name = "b"
dtype = "f32"
shape = [{n}]
init = "random"

[[tensors]]
name = "c"
dtype = "f32"
shape = [{n}]
init = "zeros"
output = true

[[scalars]]
name = "n"
value = {n}

[params]
UNROLL = [1, 4]

[timing]
# Every rep by the wall clock: on a busy machine a preempted rep would otherwise count its
# thread's CPU time, and the window's wall time less its calls would count the wait as overhead.
clock = "wall"

[verify]
rtol = 1e-6
atol = 1e-6
reference = {{ choice = {{ UNROLL = 1 }} }}
"#
    )
}

struct Options {
    worker: PathBuf,
    gib: f64,
    rounds: usize,
    rounds_only: bool,
    fresh_windows: bool,
    json: Option<PathBuf>,
}

impl Options {
    fn parse() -> Result<Options> {
        let mut options = Options {
            worker: std::env::var_os("TUNEBOX_WORKER")
                .map(PathBuf::from)
                .unwrap_or_default(),
            gib: 1.0,
            rounds: 3,
            rounds_only: false,
            fresh_windows: false,
            json: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--worker" => options.worker = value()?.into(),
                "--gib" => options.gib = value()?.parse().context("--gib")?,
                "--rounds" => options.rounds = value()?.parse().context("--rounds")?,
                "--json" => options.json = Some(value()?.into()),
                "--rounds-only" => options.rounds_only = true,
                "--fresh-windows" => options.fresh_windows = true,
                other => bail!("unknown option {other}; see the doc comment of window_cost.rs"),
            }
        }
        if options.worker.as_os_str().is_empty() {
            bail!("give the tunebox binary with --worker (or $TUNEBOX_WORKER)");
        }
        if !(options.gib > 0.0 && options.gib <= 4.0) {
            bail!("--gib must be in (0, 4]");
        }
        Ok(options)
    }
}

/// Records when each choice's window finished.
#[derive(Default)]
struct Clock {
    finished: Mutex<Vec<Instant>>,
}

impl Observer for Clock {
    fn on_event(&self, event: Event<'_>) {
        if let Event::ChoiceFinished { .. } = event {
            self.finished
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Instant::now());
        }
    }
}

/// One window's figures.
struct Window {
    label: String,
    kind: &'static str,
    first_of_batch: bool,
    wall_ms: f64,
    calls: u32,
    calls_ms: f64,
}

impl Window {
    fn overhead_ms(&self) -> f64 {
        self.wall_ms - self.calls_ms
    }

    fn ratio(&self) -> f64 {
        self.overhead_ms() / self.calls_ms
    }
}

/// The timing of window `window` of `windows`, as the engine shares a manifest's timing
/// between a choice's screening window and its rounds (`run/lookup.rs`, `window_timing`).
fn window_timing(
    timing: &tunebox_protocol::TimingConfig,
    windows: usize,
    window: usize,
) -> tunebox_protocol::TimingConfig {
    let n = windows as u32;
    let i = window as u32;
    let share = |reps: u32| (reps / n + u32::from(i < reps % n)).max(1);
    let scale = 1.0 / f64::from(n);
    let mut w = timing.clone();
    w.rep_ms *= scale;
    w.warmup_ms = if i == 0 {
        timing.warmup_ms * scale
    } else {
        0.0
    };
    w.min_reps = share(timing.min_reps);
    w.max_reps = share(timing.max_reps).max(w.min_reps);
    w.max_time_ms = timing.max_time_ms.map(|t| t * scale);
    w.estimate_runs = Some(0);
    w
}

/// Measures `batch` in one `measure` call on one worker; each result with its window's wall
/// time.
fn run_batch(
    setup: &Setup<'_>,
    batch: &[Todo],
    reference: Option<&[tunebox_protocol::TensorData]>,
    worker: &Path,
) -> Result<Vec<(ChoiceResult, f64)>> {
    let clock = Clock::default();
    let started = Instant::now();
    let results = measure(
        setup,
        batch,
        reference,
        1,
        Some(worker),
        &clock,
        &Stop::new(),
    )?;
    let finished = clock
        .finished
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    if results.len() != batch.len() || finished.len() != batch.len() {
        bail!(
            "{} of {} windows finished",
            results.len().min(finished.len()),
            batch.len()
        );
    }
    let mut before = started;
    Ok(results
        .into_iter()
        .zip(finished)
        .map(|(result, end)| {
            let wall = end.duration_since(before);
            before = end;
            (result, wall.as_secs_f64() * 1e3)
        })
        .collect())
}

/// The window of `result`, measured in `wall_ms`.
fn window(
    result: &ChoiceResult,
    wall_ms: f64,
    kind: &'static str,
    first_of_batch: bool,
) -> Result<Window> {
    let label = result.choice.label();
    if result.status != tunebox_pool::Status::Ok {
        bail!(
            "window of {label} ({kind}): {} {}",
            result.status,
            result.error.as_deref().unwrap_or("")
        );
    }
    let stats = result.stats.as_ref().context("an ok result has stats")?;
    // The first call, the warmup calls, the reps and, with outputs, the call after them.
    let calls = 1 + stats.warmup_reps + stats.reps + u32::from(kind == "screening");
    Ok(Window {
        label,
        kind,
        first_of_batch,
        wall_ms,
        calls,
        calls_ms: f64::from(calls) * stats.mean_ms,
    })
}

fn main() -> Result<()> {
    let options = Options::parse()?;
    let floats = ((options.gib * f64::from(1u32 << 30)) / 4.0) as u64;
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("vadd.c"), KERNEL)?;
    let path = dir.path().join("window-cost.toml");
    std::fs::write(&path, manifest_text(floats))?;

    let manifest = Manifest::load(&path, &compiler())?;
    let space = load_space(&path)?;
    let setup = Setup::new(&manifest, "cpu", None, Some(1));
    let stop = Stop::new();
    let indices: Vec<usize> = (0..space.len()).collect();
    let todo = lookup_cached(&setup, &space, &indices, None).todo;
    for t in &todo {
        match compile(&setup, t, &stop)? {
            Compiled::Ready { .. } => {}
            other => bail!("{} did not compile: {other:?}", t.choice.label()),
        }
    }
    println!(
        "window_cost: 3 tensors of {floats} f32 ({:.2} GiB each), {} choices, {} round(s), \
         worker {}",
        options.gib,
        todo.len(),
        options.rounds,
        options.worker.display()
    );

    let started = Instant::now();
    let reference = if options.rounds_only {
        Vec::new()
    } else {
        reference(&setup, Some(&options.worker), &(), &stop)?
            .context("the manifest verifies against a reference")?
    };
    let reference_ms = started.elapsed().as_secs_f64() * 1e3;

    let windows = options.rounds + 1;
    let with_timing = |t: &Todo, window: usize, outputs: bool| {
        let mut t = t.clone();
        t.request.timing = window_timing(&t.request.timing, windows, window);
        t.request.timing.return_outputs = outputs;
        t
    };
    let screening: Vec<Todo> = if options.rounds_only {
        Vec::new()
    } else {
        todo.iter().map(|t| with_timing(t, 0, true)).collect()
    };
    let rounds: Vec<Todo> = (1..windows)
        .flat_map(|w| todo.iter().map(move |t| (t, w)))
        .map(|(t, w)| with_timing(t, w, false))
        .collect();

    let mut figures = Vec::new();
    if !screening.is_empty() {
        for (i, (result, wall)) in run_batch(&setup, &screening, Some(&reference), &options.worker)?
            .iter()
            .enumerate()
        {
            figures.push(window(result, *wall, "screening", i == 0)?);
        }
    }
    // A run measures the round windows in one reused worker (`TuneOptions::warm_windows`),
    // unless asked for a fresh worker per window.
    let uses = options.fresh_windows.then_some(1);
    let rounds_setup = Setup::new(&manifest, "cpu", None, uses);
    for (i, (result, wall)) in run_batch(&rounds_setup, &rounds, None, &options.worker)?
        .iter()
        .enumerate()
    {
        figures.push(window(result, *wall, "round", i == 0)?);
    }
    report(&figures, reference_ms, options.json.as_deref())
}

/// Prints the table and the summary, and writes them as JSON to `json`.
fn report(figures: &[Window], reference_ms: f64, json: Option<&Path>) -> Result<()> {
    println!("reference (once per run): {reference_ms:.0} ms");
    println!(
        "{:<10} {:<10} {:>10} {:>6} {:>10} {:>12} {:>7}",
        "window", "choice", "wall ms", "calls", "calls ms", "overhead ms", "ratio"
    );
    for w in figures {
        println!(
            "{:<10} {:<10} {:>10.0} {:>6} {:>10.0} {:>12.0} {:>6.1}%{}",
            w.kind,
            w.label,
            w.wall_ms,
            w.calls,
            w.calls_ms,
            w.overhead_ms(),
            w.ratio() * 100.0,
            if w.first_of_batch {
                "  (starts the pool)"
            } else {
                ""
            }
        );
    }
    let median = |kind: &str| {
        let mut ratios: Vec<f64> = figures
            .iter()
            .filter(|w| w.kind == kind && !w.first_of_batch)
            .map(Window::ratio)
            .collect();
        ratios.sort_by(f64::total_cmp);
        ratios.get(ratios.len() / 2).copied()
    };
    let (screening, round) = (median("screening"), median("round"));
    let shown = |r: Option<f64>| r.map_or("-".to_owned(), |r| format!("{:.1}%", r * 100.0));
    println!(
        "median overhead / calls, windows that do not start a pool: screening {}, round {} \
         (target: at most 10%)",
        shown(screening),
        shown(round)
    );
    if let Some(path) = json {
        let windows: Vec<serde_json::Value> = figures
            .iter()
            .map(|w| {
                serde_json::json!({
                    "window": w.kind, "choice": w.label, "starts_pool": w.first_of_batch,
                    "wall_ms": w.wall_ms, "calls": w.calls, "calls_ms": w.calls_ms,
                    "overhead_ms": w.overhead_ms(), "ratio": w.ratio(),
                })
            })
            .collect();
        let summary = serde_json::json!({
            "reference_ms": reference_ms,
            "median_ratio": { "screening": screening, "round": round },
            "windows": windows,
        });
        std::fs::write(path, serde_json::to_string_pretty(&summary)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
