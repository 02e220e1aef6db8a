//! What the sandbox costs (issue 28): a worker's start, and a well-behaved kernel's time.

use std::time::Duration;

use anyhow::{Context, Result};
use tunebox_process::{ProcessConfig, Sandbox, TuningProcess};

use crate::process_figs::{cold_start_once, run_spin};
use crate::report::{Figure, Kind, Unit};
use crate::setup::Setup;
use crate::stats::collect;

/// Cold start with the sandbox (spawn → first trivial result, in a fresh sandboxed worker), and
/// the 100 µs spin kernel's median with and without it, alternating, one fresh worker each.
///
/// # Errors
///
/// A worker fails to start or answer.
pub(crate) fn sandbox_costs(setup: &Setup) -> Result<Vec<Figure>> {
    let starts = sandboxed_cold_starts(setup)?;
    let (plain, boxed) = spin_pairs(setup)?;
    let differences: Vec<f64> = boxed.iter().zip(&plain).map(|(b, p)| b - p).collect();
    Ok(vec![
        Figure::from_samples(
            "sandbox_cold_start",
            "cold start in the sandbox: spawn → first trivial result",
            Kind::Info,
            Unit::Millis,
            &starts,
        )?
        .note("compare cold_start: Landlock, seccomp, a network namespace, a pids cgroup"),
        Figure::from_samples(
            "sandbox_spin_median",
            "100 µs spin kernel, median in the sandbox",
            Kind::Info,
            Unit::Micros,
            &boxed,
        )?
        .note("each sample: one fresh sandboxed worker's median of its timed reps"),
        Figure::from_samples(
            "sandbox_spin_difference",
            "100 µs spin kernel: sandboxed minus plain median",
            Kind::Info,
            Unit::Micros,
            &differences,
        )?
        .note("pairs alternate, each in a fresh worker; within the noise means no cost"),
    ])
}

/// How the sandboxed workers are started: the benchmark's config with the default sandbox.
fn sandboxed(setup: &Setup) -> ProcessConfig {
    setup.config().sandbox(Some(Sandbox::new()))
}

/// Cold starts of fresh sandboxed workers (spawn → first trivial result, then a clean
/// shutdown), ms.
fn sandboxed_cold_starts(setup: &Setup) -> Result<Vec<f64>> {
    let n = setup.n(50, 10);
    eprintln!("bench: sandboxed cold start ({n})");
    collect(3, n, || {
        let (cold, _) = cold_start_once(sandboxed(setup)).context("a sandboxed worker")?;
        Ok(cold)
    })
}

/// The spin kernel's median in fresh plain and sandboxed workers, alternating; returns
/// `(plain, sandboxed)`, µs.
fn spin_pairs(setup: &Setup) -> Result<(Vec<f64>, Vec<f64>)> {
    let m = setup.n(10, 3);
    eprintln!("bench: 100 µs spin kernel with and without the sandbox ({m} pairs)");
    // Compiled into the cache by an ordinary worker first: a sandboxed one may only read it.
    spin_median_us(setup.config())?;
    let (mut plain, mut boxed) = (Vec::with_capacity(m), Vec::with_capacity(m));
    for _ in 0..m {
        plain.push(spin_median_us(setup.config())?);
        boxed.push(spin_median_us(sandboxed(setup))?);
    }
    Ok((plain, boxed))
}

/// The 100 µs spin kernel's median in one fresh worker started with `config`, µs.
fn spin_median_us(config: ProcessConfig) -> Result<f64> {
    let mut process = TuningProcess::spawn(config).context("spawn")?;
    let result = run_spin(&mut process)?;
    process
        .shutdown(Duration::from_secs(1))
        .context("shutdown")?;
    Ok(result.stats.median_ms * 1e3)
}
