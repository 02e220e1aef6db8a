//! Tunes Rust functions in isolated tunebox workers: a downstream crate's own kind of candidate,
//! with the `tunebox` facade as its only dependency. `docs/extending.md` walks through it.
//!
//! The candidates (in `kernels.rs`) are dot products of two `f32` vectors, chosen by name with
//! typed arguments. Some are broken as real candidates are: one panics, one aborts its process,
//! one never returns, one computes the wrong value. The run ranks the others, and each broken
//! one costs only its own result.
//!
//! Usage: `tunebox-example-rust-fns [LEN]` (default 262144 elements).

use std::hint::black_box;
use std::process::ExitCode;
use std::time::Duration;

use tunebox::serde::{Deserialize, Serialize};
use tunebox::{
    BenchError, MapResult, PoolConfig, PoolExecutor, Registry, Task, TaskContext, TaskRequest,
    TensorSpec, TimingStats, TuningProcessPool,
};

mod kernels;

// ---- The task kind: everything a downstream crate writes to run its candidates in tunebox ----

/// One candidate: the dot product `function` over the request's tensors `x` and `y`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(crate = "tunebox::serde")]
struct Dot {
    function: String,
    unroll: usize,
}

/// What a worker sends back: the product it computed, and its timing.
#[derive(Debug, Serialize, Deserialize)]
#[serde(crate = "tunebox::serde")]
struct Timed {
    value: f32,
    stats: TimingStats,
}

impl Task for Dot {
    const BACKEND: &'static str = "rust-dot";
    type Output = Timed;
}

/// The backend, run in a worker for each task: find the function, time it as `do_bench` does.
fn run(task: Dot, cx: &mut TaskContext<'_>) -> Result<Timed, BenchError> {
    let dot = kernels::by_name(&task.function).ok_or_else(|| BenchError::InvalidRequest {
        detail: format!("no candidate called `{}`", task.function),
    })?;
    let tensors = cx.allocate_tensors()?;
    let (x, y) = (tensors[0].as_slice::<f32>()?, tensors[1].as_slice::<f32>()?);
    let mut value = 0.0;
    let stats = cx.bench(|| {
        value = dot(black_box(x), black_box(y), task.unroll);
        Ok(())
    })?;
    Ok(Timed { value, stats })
}

// ---- The tuning run ----

fn main() -> Result<ExitCode, Box<dyn std::error::Error>> {
    // In a worker (this same executable, started by the pool) this serves tasks and exits.
    tunebox::run_if_worker(|| Registry::new().with_task(run));

    let Some(len) = vector_len() else {
        eprintln!("usage: tunebox-example-rust-fns [LEN], 1 <= LEN <= 4194304");
        return Ok(ExitCode::from(2));
    };
    let (x, y, expected) = vectors(len);
    // Both travel to the workers as shared memory.
    let (x, y) = (
        TensorSpec::from_values("x", &x)?,
        TensorSpec::from_values("y", &y)?,
    );
    let request = |function: &str, unroll: usize| {
        let task = Dot {
            function: function.into(),
            unroll,
        };
        TaskRequest::new(task).tensor(x.clone()).tensor(y.clone())
    };

    // TVM's face: every candidate, each outcome told apart.
    let config = PoolConfig::new()
        .max_workers(2)
        .timeout(Duration::from_secs(3));
    let executor = PoolExecutor::new(config.clone())?;
    let best = every_candidate(&executor, request, expected);
    executor.shutdown(true);

    // Inductor's face: one result per choice, in order; a failed choice times +inf.
    let pool = TuningProcessPool::new(config)?;
    by_unroll(&pool, request);

    Ok(report_best(best))
}

/// The vectors' length: the first argument (1 to 2^22), else 2^18; `None` when it is not one.
fn vector_len() -> Option<usize> {
    match std::env::args().nth(1).map(|a| a.parse()) {
        None => Some(1 << 18),
        Some(Ok(len)) if len > 0 && len <= 1 << 22 => Some(len),
        Some(_) => None,
    }
}

/// The two vectors of `len` elements, and the dot product every right candidate computes.
fn vectors(len: usize) -> (Vec<f32>, Vec<f32>, f64) {
    // Small integers: every candidate that is right gets exactly this sum in f32.
    let x: Vec<f32> = (0..len).map(|i| (1 + i % 3) as f32).collect();
    let y: Vec<f32> = (0..len).map(|i| (1 + i % 2) as f32).collect();
    let expected: f64 = x.iter().zip(&y).map(|(a, b)| f64::from(a * b)).sum();
    (x, y, expected)
}

/// Runs every candidate on `executor` and prints a line for each (its median and status): the
/// fastest one that computed `expected`, and its median in ms.
fn every_candidate(
    executor: &PoolExecutor,
    request: impl Fn(&str, usize) -> TaskRequest<Dot>,
    expected: f64,
) -> Option<(String, f64)> {
    let candidates = [
        ("indexed", 1),
        ("iterator", 1),
        ("accumulators", 4),
        ("accumulators", 16),
        ("off_by_one", 1),
        ("aborts", 1),
        ("spins", 1),
        ("drops_tail", 16),
        ("missing", 1),
    ];
    let results = executor.map_tasks(candidates.iter().map(|&(f, u)| request(f, u)));
    println!("{:<18} {:>12}  status", "candidate", "median");
    let mut best: Option<(String, f64)> = None;
    for (&(function, unroll), result) in candidates.iter().zip(&results) {
        let name = format!("{function}/{unroll}");
        let (median, status) = outcome(result, expected);
        if status == "ok" && best.as_ref().is_none_or(|(_, ms)| median < *ms) {
            best = Some((name.clone(), median));
        }
        let median = if median.is_finite() {
            format!("{median:.4} ms")
        } else {
            "-".into()
        };
        println!("{name:<18} {median:>12}  {status}");
    }
    best
}

/// A candidate's median (ms; +inf when it has none) and status: `ok`, `wrong: …` when it did not
/// compute `expected`, or how it failed.
fn outcome(result: &MapResult<Timed>, expected: f64) -> (f64, String) {
    match result {
        MapResult::Complete(t) if f64::from(t.value) != expected => (
            t.stats.median_ms,
            format!("wrong: {} != {expected}", t.value),
        ),
        MapResult::Complete(t) => (t.stats.median_ms, "ok".to_owned()),
        other => (
            f64::INFINITY,
            format!("{:?}: {}", other.status(), first_line(other)),
        ),
    }
}

/// Times the `accumulators` candidate at each unroll on `pool` and prints the medians (ms).
fn by_unroll(pool: &TuningProcessPool, request: impl Fn(&str, usize) -> TaskRequest<Dot>) {
    let sweep = [1, 2, 4, 8, 16];
    let timings: Vec<f64> = pool
        .run_tasks(sweep.iter().map(|&u| request("accumulators", u)))
        .into_iter()
        .map(|r| r.map_or(f64::INFINITY, |t| t.stats.median_ms))
        .collect();
    println!("accumulators by unroll {sweep:?}: {timings:.4?} ms");
}

/// Prints the best candidate: success, or failure when none was measured.
fn report_best(best: Option<(String, f64)>) -> ExitCode {
    match best {
        Some((name, ms)) => {
            println!("best: {name} at {ms:.4} ms");
            ExitCode::SUCCESS
        }
        None => {
            println!("no candidate was measured");
            ExitCode::FAILURE
        }
    }
}

/// The first line of a failed task's error.
fn first_line(result: &MapResult<Timed>) -> String {
    let error = result.error().map(ToString::to_string).unwrap_or_default();
    error.lines().next().unwrap_or_default().to_owned()
}
