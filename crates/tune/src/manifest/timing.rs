//! Timing: how each choice is measured (warmup, reps, cache flushing, noise) and how long it,
//! and its compile, may take.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use tunebox_protocol::{CacheFlush, RepClock, TimingConfig};

use super::raw::RawTiming;

/// Per-choice timeout when the manifest does not set `timeout_s`.
const DEFAULT_TIMEOUT_S: f64 = 60.0;
/// Longest per-choice timeout (and compile timeout): a week.
pub const MAX_TIMEOUT_S: f64 = 7.0 * 24.0 * 3600.0;
/// Most timed reps (and warmup calls) one choice may ask for.
pub(super) const MAX_REPS: u32 = 1_000_000;

/// The per-choice timeout (`timeout_s`, else [`DEFAULT_TIMEOUT_S`]) and the compile timeout
/// (`compile_timeout_s`, else [`tunebox_cpu::DEFAULT_COMPILE_TIMEOUT`]), each above 0 and at
/// most [`MAX_TIMEOUT_S`].
pub(super) fn timeouts(
    timeout_s: Option<f64>,
    compile_timeout_s: Option<f64>,
) -> Result<(Duration, Duration)> {
    let timeout_s = timeout_s.unwrap_or(DEFAULT_TIMEOUT_S);
    ensure!(
        timeout_s.is_finite() && timeout_s > 0.0 && timeout_s <= MAX_TIMEOUT_S,
        "timeout_s = {timeout_s}: it must be a number of seconds above 0 and at most \
         {MAX_TIMEOUT_S} (a week)"
    );
    let compile_timeout_s =
        compile_timeout_s.unwrap_or(tunebox_cpu::DEFAULT_COMPILE_TIMEOUT.as_secs_f64());
    ensure!(
        compile_timeout_s.is_finite()
            && compile_timeout_s > 0.0
            && compile_timeout_s <= MAX_TIMEOUT_S,
        "compile_timeout_s = {compile_timeout_s}: it must be a number of seconds above 0 and \
         at most {MAX_TIMEOUT_S} (a week)"
    );
    Ok((
        Duration::from_secs_f64(timeout_s),
        Duration::from_secs_f64(compile_timeout_s),
    ))
}

/// The timing of every choice: `[timing]`, with `iterations` (Kernel Tuner's) as its reps.
pub(super) fn timing(raw: Option<RawTiming>, iterations: Option<u32>) -> Result<TimingConfig> {
    let mut timing = TimingConfig::default();
    if let Some(iterations) = iterations {
        timing.min_reps = iterations;
        timing.max_reps = iterations;
    }
    let Some(raw) = raw else {
        return Ok(timing);
    };
    for (name, value) in [("warmup_ms", raw.warmup_ms), ("rep_ms", raw.rep_ms)] {
        if let Some(value) = value {
            ensure!(
                value.is_finite() && value >= 0.0,
                "timing.{name} = {value}: it must be a number of ms, 0 or more"
            );
        }
    }
    timing.warmup_ms = raw.warmup_ms.unwrap_or(timing.warmup_ms);
    timing.rep_ms = raw.rep_ms.unwrap_or(timing.rep_ms);
    timing.min_reps = raw.min_reps.unwrap_or(timing.min_reps);
    timing.max_reps = raw.max_reps.unwrap_or(timing.max_reps.max(timing.min_reps));
    timing.flush_cache = raw.flush_cache.unwrap_or(timing.flush_cache);
    timing.hot = raw.hot.unwrap_or(timing.hot);
    if let Some(name) = raw.cache_flush {
        timing.cache_flush = CacheFlush::from_name(&name).with_context(|| {
            format!(
                "timing.cache_flush = {name:?}: use \"tensors\" (evict the tensors' cache lines, \
                 the default) or \"llc\" (write a buffer twice the last-level cache)"
            )
        })?;
    }
    if let Some(name) = raw.clock {
        timing.clock = RepClock::from_name(&name).with_context(|| {
            format!(
                "timing.clock = {name:?}: use \"preemption\" (wall time, but a rep whose thread \
                 was preempted counts its CPU time; the default) or \"wall\" (wall time of \
                 every rep, as triton's do_bench)"
            )
        })?;
    }
    for (name, value) in [
        ("max_noise", raw.max_noise),
        ("max_time_ms", raw.max_time_ms),
    ] {
        if let Some(value) = value {
            ensure!(
                value.is_finite() && value > 0.0,
                "timing.{name} = {value}: it must be above 0"
            );
        }
    }
    timing.max_noise = raw.max_noise;
    timing.max_time_ms = raw.max_time_ms;
    ensure!(timing.min_reps >= 1, "timing.min_reps must be at least 1");
    ensure!(
        timing.max_reps >= timing.min_reps,
        "timing.max_reps ({}) must not be below timing.min_reps ({})",
        timing.max_reps,
        timing.min_reps
    );
    ensure!(
        timing.max_reps <= MAX_REPS,
        "timing.max_reps = {}: at most {MAX_REPS} reps are supported",
        timing.max_reps
    );
    Ok(timing)
}
