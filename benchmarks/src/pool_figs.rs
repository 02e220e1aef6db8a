//! Figures of the pool: `PoolExecutor` and `TuningProcessPool` from the outside.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use tunebox_pool::{PoolConfig, PoolExecutor, Status, TuningProcessPool};
use tunebox_protocol::{BenchmarkRequest, DiagnosticTask};

use crate::report::{Figure, Kind, ScalingRow, Target, Unit};
use crate::setup::{LONG, Setup, diag, ms, trivial};
use crate::stats::{Summary, collect};

/// Trivial tasks per throughput run.
const THROUGHPUT_TASKS: usize = 20_000;

/// Voluntary context switches so far of this process's threads, split into the calling thread
/// and the pool's worker threads (named `tunebox-pool-N`); `None` where `/proc` cannot be read.
fn voluntary_switches() -> Option<(u64, u64)> {
    let read = |dir: &std::path::Path| -> Option<u64> {
        let status = std::fs::read_to_string(dir.join("status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
    };
    let caller = read(std::path::Path::new("/proc/thread-self"))?;
    let mut pool = 0;
    for entry in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.starts_with("tunebox-pool-") && !comm.starts_with("tunebox-pool-start") {
            pool += read(&entry.path()).unwrap_or(0);
        }
    }
    Some((caller, pool))
}

/// A started `PoolExecutor` of `workers` that has run a few trivial tasks.
pub(crate) fn executor(setup: &Setup, workers: usize) -> Result<PoolExecutor> {
    let executor = PoolExecutor::new(
        PoolConfig::new()
            .max_workers(workers)
            .timeout(LONG)
            .process_config(setup.config()),
    )
    .context("starting a PoolExecutor")?;
    let handles = (0..workers * 4)
        .map(|_| executor.submit(trivial()))
        .collect::<Result<Vec<_>, _>>()?;
    for handle in handles {
        handle.wait().context("a warmup task")?;
    }
    Ok(executor)
}

/// A started `TuningProcessPool` of `workers`, warmed up.
fn pool(setup: &Setup, workers: usize) -> Result<TuningProcessPool> {
    let pool = TuningProcessPool::new(
        PoolConfig::new()
            .max_workers(workers)
            .timeout(LONG)
            .process_config(setup.config()),
    )
    .context("starting a TuningProcessPool")?;
    let warmup = vec![trivial(); workers * 4];
    for result in pool.benchmark(&warmup) {
        result.context("a warmup task")?;
    }
    Ok(pool)
}

/// Throughput of 20,000 trivial tasks on 2 warm workers, through `PoolExecutor` (submit all,
/// then wait for all) and `TuningProcessPool::benchmark`; runs of the two alternate, so that both
/// see the same machine state.
///
/// # Errors
///
/// The pool fails or a task fails.
pub(crate) fn throughput(setup: &Setup) -> Result<Vec<Figure>> {
    let runs = setup.n(7, 2);
    let tasks = setup.n(THROUGHPUT_TASKS, 5_000);
    let requests = vec![trivial(); tasks];
    eprintln!(
        "bench: throughput, 2 workers, PoolExecutor and TuningProcessPool::benchmark \
         ({runs} × {tasks} each, alternating)"
    );
    let executor = executor(setup, 2)?;
    let pool = pool(setup, 2)?;
    // Voluntary context switches per task (calling thread, pool threads), summed over the runs.
    let mut executor_switches = (0.0, 0.0);
    let mut pool_switches = (0.0, 0.0);
    let executor_run = |switches: &mut (f64, f64)| executor_rate(&executor, &requests, switches);
    let pool_run = |switches: &mut (f64, f64)| pool_rate(&pool, &requests, switches);
    // One warmup run each.
    executor_run(&mut (0.0, 0.0))?;
    pool_run(&mut (0.0, 0.0))?;
    let (mut executor_rates, mut pool_rates) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        executor_rates.push(executor_run(&mut executor_switches).context("a PoolExecutor run")?);
        pool_rates.push(pool_run(&mut pool_switches).context("a TuningProcessPool run")?);
    }

    let note = |switches| throughput_note(tasks, runs, switches);
    Ok(vec![
        throughput_figure(
            "throughput_executor",
            "throughput, 2 workers (PoolExecutor submit all + wait all)",
            &executor_rates,
        )?
        .note(note(executor_switches)),
        throughput_figure(
            "throughput_pool",
            "throughput, 2 workers (TuningProcessPool::benchmark)",
            &pool_rates,
        )?
        .note(note(pool_switches)),
    ])
}

/// Submits every request to `executor`, then waits for all; returns the tasks per second and
/// adds the voluntary context switches per task to `switches`.
fn executor_rate(
    executor: &PoolExecutor,
    requests: &[BenchmarkRequest],
    switches: &mut (f64, f64),
) -> Result<f64> {
    tasks_per_second(requests.len(), switches, || {
        let handles = requests
            .iter()
            .map(|r| executor.submit(r.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        for handle in handles {
            handle.wait()?;
        }
        Ok(())
    })
}

/// Runs every request through `TuningProcessPool::benchmark`; returns the tasks per second and
/// adds the voluntary context switches per task to `switches`.
fn pool_rate(
    pool: &TuningProcessPool,
    requests: &[BenchmarkRequest],
    switches: &mut (f64, f64),
) -> Result<f64> {
    tasks_per_second(requests.len(), switches, || {
        for result in pool.benchmark(requests) {
            result?;
        }
        Ok(())
    })
}

/// Times `run` of `tasks` tasks: returns the tasks per second, and adds the voluntary context
/// switches per task during it to `switches`.
fn tasks_per_second(
    tasks: usize,
    switches: &mut (f64, f64),
    run: impl FnOnce() -> Result<()>,
) -> Result<f64> {
    let before = voluntary_switches();
    let start = Instant::now();
    run()?;
    let rate = tasks as f64 / start.elapsed().as_secs_f64();
    count_switches(switches, before, tasks);
    Ok(rate)
}

/// The note of a throughput figure: its runs, and its context switches per task (`switches`,
/// summed over the runs) on average.
fn throughput_note(tasks: usize, runs: usize, switches: (f64, f64)) -> String {
    format!(
        "{tasks} tasks per run, {runs} runs alternating with the other API; min is the \
         slowest run; voluntary context switches per task: calling thread {:.2}, pool \
         threads {:.2}",
        switches.0 / runs as f64,
        switches.1 / runs as f64
    )
}

/// A throughput figure of `rates` (tasks/s), with issue 9's target of 50,000 tasks/s.
fn throughput_figure(key: &'static str, name: &str, rates: &[f64]) -> Result<Figure> {
    Ok(
        Figure::from_samples(key, name, Kind::Target, Unit::TasksPerSec, rates)?
            .target(Target::at_least(50_000.0, "issue 9"))
            .anchors("Inductor-style 8.7k/s, TVM 6.6k/s, ProcessPoolExecutor 4.5k/s"),
    )
}

/// Adds the voluntary context switches per task since `before` to `total`.
fn count_switches(total: &mut (f64, f64), before: Option<(u64, u64)>, tasks: usize) {
    if let (Some(before), Some(after)) = (before, voluntary_switches()) {
        total.0 += after.0.saturating_sub(before.0) as f64 / tasks as f64;
        total.1 += after.1.saturating_sub(before.1) as f64 / tasks as f64;
    }
}

/// Crash → next result: a 1-worker `PoolExecutor` gets an aborting task and a trivial one; the
/// time from the abort's error to the trivial task's result (the replacement worker is started
/// eagerly, in between).
///
/// # Errors
///
/// The pool fails, or the tasks end otherwise than crash, then success.
pub(crate) fn crash_to_next(setup: &Setup) -> Result<Vec<Figure>> {
    let n = setup.n(60, 10);
    eprintln!("bench: crash → next result, PoolExecutor 1 worker ({n})");
    let executor = executor(setup, 1)?;
    let mut totals = Vec::with_capacity(n);
    let samples = collect(3, n, || {
        // A warm worker before each sample.
        executor.submit(trivial())?.wait()?;
        let submitted = Instant::now();
        let abort = executor.submit(diag(DiagnosticTask::Abort))?;
        let next = executor.submit(trivial())?;
        match abort.wait() {
            Err(e) if e.status() == Status::Crashed => {}
            other => bail!("expected the abort to crash its worker, got {other:?}"),
        }
        let crashed = Instant::now();
        next.wait().context("the task after the crash")?;
        let done = Instant::now();
        totals.push(ms(done - submitted));
        Ok(ms(done - crashed))
    })?;
    let totals = &totals[totals.len() - n..];
    Ok(vec![
        Figure::from_samples(
            "crash_to_next_result",
            "crash → next result (pool, eager respawn)",
            Kind::Target,
            Unit::Millis,
            &samples,
        )?
        .target(Target::at_most(3.0, "issue 9"))
        .anchors("Inductor-style 78 ms, TVM 1495 ms")
        .note("from the abort's WorkerCrashed to the next trivial task's result, 1 worker"),
        Figure::from_samples(
            "abort_submitted_to_next_result",
            "abort submitted → next result (pool)",
            Kind::Info,
            Unit::Millis,
            totals,
        )?
        .note("the whole sequence: crash detection + reaping + respawn + one round trip"),
    ])
}

/// Time to benchmark 1, 10, 100 and 1,000 trivial candidates on a warm `TuningProcessPool` of 1
/// and 2 workers.
///
/// # Errors
///
/// The pool fails or a candidate fails.
pub(crate) fn scaling(setup: &Setup) -> Result<Vec<ScalingRow>> {
    let mut rows = Vec::new();
    for workers in [1, 2] {
        let pool = pool(setup, workers)?;
        for (candidates, full, quick) in [(1, 300, 30), (10, 200, 20), (100, 40, 5), (1000, 10, 3)]
        {
            let n = setup.n(full, quick);
            eprintln!("bench: scaling, {candidates} candidates on {workers} workers ({n})");
            let requests = vec![trivial(); candidates];
            let samples = collect(n / 10 + 1, n, || {
                let start = Instant::now();
                for result in pool.benchmark(&requests) {
                    result?;
                }
                Ok(ms(start.elapsed()))
            })?;
            rows.push(ScalingRow {
                workers,
                candidates,
                summary_ms: Summary::of(&samples)?,
            });
        }
        pool.shutdown(Duration::from_secs(1));
    }
    Ok(rows)
}
