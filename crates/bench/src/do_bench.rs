//! The timing loop, as triton's `do_bench`.

use std::time::{Duration, Instant};

use tunebox_protocol::{BenchError, Phase, RepClock, TimingConfig, TimingStats};

use crate::progress::report_progress;
use crate::rep_clock::ThreadWatch;
use crate::stats::summarize;

/// Number of runs used to estimate the cost of one run (triton uses 5).
const ESTIMATE_RUNS: u32 = 5;

/// One kernel, ready to run: what [`do_bench`] needs from a backend.
pub trait Runner {
    /// Runs the kernel once and waits for it to finish.
    ///
    /// # Errors
    ///
    /// A backend error; it ends the measurement.
    fn run(&mut self) -> Result<(), BenchError>;

    /// Evicts the kernel's data from the caches (CPU: write a buffer twice the last-level cache;
    /// GPU: twice the L2), so every timed rep starts cold.
    ///
    /// # Errors
    ///
    /// A backend error; it ends the measurement.
    fn flush(&mut self) -> Result<(), BenchError>;

    /// Puts back what a call may have changed and must not (inputs the kernel writes, tensors
    /// reset before every call), outside the timed window. Called before every call. The
    /// default does nothing.
    ///
    /// # Errors
    ///
    /// A backend error; it ends the measurement.
    fn restore(&mut self) -> Result<(), BenchError> {
        Ok(())
    }

    /// Readies the next timed rep, after [`Runner::restore`] and before the flush, outside the
    /// timed region: a backend timing reps on varied inputs
    /// ([`TimingConfig::varied_reps`](tunebox_protocol::TimingConfig::varied_reps)) varies
    /// them here. The default does nothing.
    ///
    /// # Errors
    ///
    /// A backend error; it ends the measurement.
    fn before_rep(&mut self) -> Result<(), BenchError> {
        Ok(())
    }

    /// Ends timed rep `rep` (from 0) of about `planned`, outside the timed region: a backend
    /// timing reps on varied inputs keeps the outputs of the reps it picks for checking and
    /// puts its inputs back here. The default does nothing.
    ///
    /// # Errors
    ///
    /// A backend error; it ends the measurement.
    fn after_rep(&mut self, rep: u32, planned: u32) -> Result<(), BenchError> {
        let _ = (rep, planned);
        Ok(())
    }

    /// Runs the kernel `calls` times back to back and returns the total duration in ms (hot
    /// mode). The default times `calls` [`Runner::run`]s with the monotonic clock; a GPU backend
    /// records one pair of events around the launches.
    ///
    /// # Errors
    ///
    /// A backend error; it ends the measurement.
    fn run_batch_timed(&mut self, calls: u32) -> Result<f64, BenchError> {
        let start = Instant::now();
        for _ in 0..calls {
            self.run()?;
        }
        Ok(start.elapsed().as_secs_f64() * 1e3)
    }

    /// Runs the kernel once and returns its duration in ms. The default times [`Runner::run`]
    /// with the monotonic clock; a GPU backend overrides it with device events.
    ///
    /// # Errors
    ///
    /// A backend error; it ends the measurement.
    fn run_timed(&mut self) -> Result<f64, BenchError> {
        let start = Instant::now();
        self.run()?;
        Ok(start.elapsed().as_secs_f64() * 1e3)
    }

    /// Whether [`Runner::run_timed`] and [`Runner::run_batch_timed`] time the calls on this
    /// thread with the host's monotonic clock, as the defaults do. [`do_bench`] then watches
    /// the thread's CPU time and context switches around each sample and corrects a preempted
    /// one ([`TimingConfig::clock`]). A backend that times on a device (events), or returns
    /// times it did not measure on this thread, returns `false`.
    fn host_timed(&self) -> bool {
        true
    }
}

/// One timed sample of `runner`, one call or (`batch`, hot mode) a batch of back-to-back
/// calls: its total time in ms, after [`RepClock`]'s correction on a host-timed runner, and
/// whether the correction applied.
fn timed_sample<R: Runner + ?Sized>(
    runner: &mut R,
    clock: RepClock,
    batch: Option<u32>,
) -> Result<(f64, bool), BenchError> {
    let clock = if runner.host_timed() {
        clock
    } else {
        RepClock::Wall
    };
    let watch = ThreadWatch::start(clock);
    let wall_ms = match batch {
        Some(calls) => runner.run_batch_timed(calls)?,
        None => runner.run_timed()?,
    };
    Ok(watch
        .stop()
        .map_or((wall_ms, false), |span| span.time_ms(wall_ms)))
}

/// In hot mode, a timed batch of back-to-back calls lasts about this long (ms).
const HOT_BATCH_MS: f64 = 1.0;
/// Most calls in one hot batch.
const MAX_HOT_BATCH: u32 = 10_000;

/// The flushes of the timed reps may make a measurement take at most this many times
/// `rep_ms` of wall time.
const FLUSH_WALL_FACTOR: f64 = 10.0;

/// Times `runner` as triton's `do_bench` does, and summarizes the reps.
///
/// Before every call, [`Runner::restore`] puts back what the kernel may not keep (outside the
/// timed window).
///
/// 1. Estimate: 5 runs, each after a flush; `estimate_ms` is their mean time as measured by
///    [`Runner::run_timed`], and `flush_ms` the mean time of a flush.
/// 2. Warmup: `warmup_ms / estimate_ms` untimed runs, at least one, at most `max_reps`, and
///    none started once they have taken twice `warmup_ms` (a kernel slow only now and then,
///    or slower than its estimate, does not warm up for seconds; triton runs them all). When
///    the first call is the estimate (`estimate_runs = Some(0)`), it has warmed the kernel
///    already and its time counts toward `warmup_ms`: warmup runs only fill what is left (none
///    for a kernel slower than `warmup_ms`).
/// 3. Reps: `rep_ms / estimate_ms` runs clamped to `[min_reps, max_reps]`, each preceded by a
///    flush outside the timed window (when `config.flush_cache`), each timed by
///    [`Runner::run_timed`].
///
/// In hot mode (`config.hot`), each timed sample is a batch of back-to-back calls lasting about
/// 1 ms ([`Runner::run_batch_timed`]), without a flush, divided by its size. With
/// `config.max_noise`, sampling stops once `min_reps` are done and the relative standard
/// deviation is at most `max_noise`, or after `max_time_ms` (nvbench's criterion); the stats say
/// which (`stopped`).
///
/// One difference from triton: its estimate includes the cache flush, which on a GPU costs
/// microseconds. A CPU flush (writing twice the last-level cache) costs milliseconds and would
/// leave a fast kernel with a handful of reps, so the estimate here is the kernel's own time,
/// and the rep count is instead capped so that reps and their flushes take at most
/// 10 × `rep_ms` of wall time (never below `min_reps`).
///
/// # Errors
///
/// [`BenchError::InvalidRequest`] for a config with a negative or non-finite budget, zero
/// `min_reps` or `max_reps < min_reps`; any error of the runner, unchanged.
pub fn do_bench<R: Runner + ?Sized>(
    runner: &mut R,
    config: &TimingConfig,
) -> Result<TimingStats, BenchError> {
    do_bench_within(runner, config, Instant::now())
}

/// [`do_bench`] for a request that began at `started`: `config.budget_ms` counts from there, so
/// that what the backend did before (tensor setup, the first call) is part of it.
///
/// With a budget, the estimate stops early once another run would not fit, and warmup and reps
/// are cut to what the time left allows (keeping one estimated call, plus its flush, in reserve
/// for the backend's final verification call): reps get 80 % of it, warmup the rest, and
/// before each rep the loop checks that the rep still fits, so that a machine slowing down
/// mid-measurement ends it early rather than at the parent's timeout. At least one rep is
/// always timed. Where the estimate would cut the reps or end sampling, and the median rep ran
/// in under half the wall time the plan expected, the plan is re-fitted once on the reps: the
/// reserve becomes their median call, and a cut count what the time left fits of such reps, at
/// most the count asked for (an estimate stretched by preemption, page faults or a slow disk
/// does not leave a fast kernel two reps). When the budget ended sampling below `min_reps` (or
/// below the count the budgets asked for), `stopped` is `"budget"`.
///
/// Each phase and call is reported to the process's progress sink
/// ([`report_progress`](crate::report_progress)), so that a parent that kills the worker at its
/// deadline can say where it was.
///
/// # Errors
///
/// As [`do_bench`].
pub fn do_bench_within<R: Runner + ?Sized>(
    runner: &mut R,
    config: &TimingConfig,
    started: Instant,
) -> Result<TimingStats, BenchError> {
    do_bench_after(runner, config, started, None)
}

/// [`do_bench_within`] for a backend that has already called the kernel once, on this
/// request's tensors, in `first_call_ms`: with `config.estimate_runs == Some(0)` that call's
/// time is the estimate (and one flush is timed for the flush's cost) instead of estimate runs
/// of its own.
///
/// # Errors
///
/// As [`do_bench`].
pub fn do_bench_after<R: Runner + ?Sized>(
    runner: &mut R,
    config: &TimingConfig,
    started: Instant,
    first_call_ms: Option<f64>,
) -> Result<TimingStats, BenchError> {
    validate(config)?;
    let budget = Budget::new(config.budget_ms, started);
    let estimate = Estimate::measure(runner, config, &budget, started, first_call_ms)?;
    // One timed rep and the final call must fit; if not, say so now rather than be killed.
    check_budget(config, started, estimate.call_ms + estimate.flush_ms, 2)?;
    let counts = Counts::plan(config, &estimate, &budget);
    log::debug!(
        "do_bench: estimate {:.4} ms over {} runs (+ {:.3} ms flush), {} warmup, {} reps of {} \
         call(s)",
        estimate.call_ms,
        estimate.runs,
        estimate.flush_ms,
        counts.warmup_reps,
        counts.reps,
        counts.batch
    );
    let warmup_reps = warm_up(runner, &counts, started, estimate.call_ms)?;
    let sampled = sample(runner, config, &counts, (&budget, started), &estimate)?;
    let mut stats = summarize(&sampled.samples, warmup_reps);
    stats.stopped = sampled.stopped.into();
    stats.preempted_reps = sampled.preempted_reps;
    Ok(stats)
}

/// Runs the warmup calls `counts` plans, each after a restore, until their time reaches
/// `counts.warmup_limit_ms` (after at least one): a kernel slower than its estimate, or slow
/// only now and then, does not spend the reps' time (or the budget) warming up. The warmup
/// calls made.
fn warm_up<R: Runner + ?Sized>(
    runner: &mut R,
    counts: &Counts,
    started: Instant,
    call_ms: f64,
) -> Result<u32, BenchError> {
    let call = Some(Duration::from_secs_f64(call_ms.max(0.0) / 1e3));
    let warming = Instant::now();
    for done in 0..counts.warmup_reps {
        if done > 0 && warming.elapsed().as_secs_f64() * 1e3 >= counts.warmup_limit_ms {
            return Ok(done);
        }
        report_progress(
            started,
            Phase::Warmup,
            (done, counts.warmup_reps),
            None,
            call,
        );
        runner.restore()?;
        runner.run()?;
    }
    Ok(counts.warmup_reps)
}

/// Flushes the caches before a call when `config` asks for it; the flush's time in ms.
fn flush_before<R: Runner + ?Sized>(
    runner: &mut R,
    config: &TimingConfig,
) -> Result<f64, BenchError> {
    if config.flush_cache {
        let start = Instant::now();
        runner.flush()?;
        Ok(start.elapsed().as_secs_f64() * 1e3)
    } else {
        Ok(0.0)
    }
}

/// What one call costs, as the estimate runs (or the backend's first call) found.
struct Estimate {
    /// One call's time, ms.
    call_ms: f64,
    /// One flush's time, ms.
    flush_ms: f64,
    /// Runs the estimate is over.
    runs: u32,
    /// Whether the backend's first call is the estimate (`estimate_runs == Some(0)`).
    first_call: bool,
}

impl Estimate {
    /// Estimates one call: the backend's first call (`first_call_ms`) with
    /// `config.estimate_runs == Some(0)`, else up to `estimate_runs` (5) timed runs, each after
    /// a flush, stopping early when the budget would not leave room for a rep and the final
    /// call.
    fn measure<R: Runner + ?Sized>(
        runner: &mut R,
        config: &TimingConfig,
        budget: &Budget,
        started: Instant,
        first_call_ms: Option<f64>,
    ) -> Result<Estimate, BenchError> {
        let (mut call_ms, mut flush_ms, mut runs) = (0.0, 0.0, 0u32);
        let first_call = config.estimate_runs == Some(0) && first_call_ms.is_some();
        let target = if first_call {
            0
        } else {
            config.estimate_runs.unwrap_or(ESTIMATE_RUNS).max(1)
        };
        if let (true, Some(first_ms)) = (first_call, first_call_ms) {
            runner.restore()?;
            flush_ms = flush_before(runner, config)?;
            call_ms = first_ms;
            runs = 1;
        }
        report_progress(started, Phase::Estimate, (0, target), None, None);
        while runs < target {
            runner.restore()?;
            let wall = Instant::now();
            flush_ms += flush_before(runner, config)?;
            let (ms, _) = timed_sample(runner, config.clock, None)?;
            call_ms += ms;
            runs += 1;
            let this = Some(Duration::from_secs_f64(ms.max(0.0) / 1e3));
            report_progress(started, Phase::Estimate, (runs, target), this, None);
            // Another run must leave room for one timed rep and the final call.
            let per_run = wall.elapsed().as_secs_f64() * 1e3;
            if budget.left_ms() < 3.0 * per_run {
                break;
            }
        }
        Ok(Estimate {
            call_ms: call_ms / f64::from(runs),
            flush_ms: flush_ms / f64::from(runs),
            runs,
            first_call,
        })
    }
}

/// How many warmup calls and timed reps of how many calls each a measurement makes.
struct Counts {
    /// Calls in one timed sample (hot mode: a batch; otherwise 1).
    batch: u32,
    warmup_reps: u32,
    /// Timed reps planned, after the budget.
    reps: u32,
    /// Timed reps `rep_ms` and the bounds asked for, before the budget.
    asked_reps: u32,
    /// The wall time the budget's fit expects of one timed rep, ms (its call, or hot mode's
    /// batch, and its flush).
    rep_wall_ms: f64,
    /// Warmup stops once its calls have taken this long, ms: [`WARMUP_OVERRUN`] × `warmup_ms`,
    /// within warmup's share of a limited budget.
    warmup_limit_ms: f64,
}

impl Counts {
    /// The counts for `config` at `estimate`, within `budget`: hot mode's batches long
    /// enough to hide the cost of timing them, warmup for `warmup_ms` (only what the first
    /// call left of it when it is the estimate; otherwise at least one, as triton's do_bench),
    /// reps for `rep_ms` within the reps' bounds, at most [`FLUSH_WALL_FACTOR`] × `rep_ms` of
    /// wall time with flushes, and what a limited budget leaves room for (one call and its
    /// flush kept for the final verification call).
    fn plan(config: &TimingConfig, estimate: &Estimate, budget: &Budget) -> Counts {
        let call_ms = estimate.call_ms;
        let batch = if config.hot { hot_batch(call_ms) } else { 1 };
        let sample_ms = call_ms * f64::from(batch);
        let mut warmup_reps = if estimate.first_call {
            match config.warmup_ms - call_ms {
                left if left > 0.0 => count(left, call_ms, 0, config.max_reps),
                _ => 0,
            }
        } else {
            count(config.warmup_ms, call_ms, 1, config.max_reps)
        };
        let mut reps = count(config.rep_ms, sample_ms, config.min_reps, config.max_reps);
        if !config.hot && config.flush_cache && estimate.flush_ms > 0.0 {
            let wall_cap = count(
                FLUSH_WALL_FACTOR * config.rep_ms,
                call_ms + estimate.flush_ms,
                config.min_reps,
                config.max_reps,
            );
            reps = reps.min(wall_cap);
        }
        let asked_reps = reps;
        let rep_wall_ms = if config.hot {
            sample_ms
        } else {
            call_ms + estimate.flush_ms
        };
        let mut warmup_limit_ms = WARMUP_OVERRUN * config.warmup_ms;
        if let Some(left_ms) = budget.limited_ms() {
            // Keep one call (and its flush) for the backend's final verification call.
            let left_ms = (left_ms - call_ms - estimate.flush_ms).max(0.0);
            reps = reps.min(fit(REPS_SHARE * left_ms, rep_wall_ms)).max(1);
            warmup_reps = warmup_reps.min(fit((1.0 - REPS_SHARE) * left_ms, call_ms));
            warmup_limit_ms = warmup_limit_ms.min((1.0 - REPS_SHARE) * left_ms);
        }
        Counts {
            batch,
            warmup_reps,
            reps,
            asked_reps,
            rep_wall_ms,
            warmup_limit_ms,
        }
    }
}

/// Calls in a hot-mode batch of `call_ms` calls: about [`HOT_BATCH_MS`], within
/// [`MAX_HOT_BATCH`].
fn hot_batch(call_ms: f64) -> u32 {
    count(HOT_BATCH_MS, call_ms, 1, MAX_HOT_BATCH)
}

/// Warmup calls planned on the estimate stop once they have taken this many times
/// `warmup_ms` ([`warm_up`]).
const WARMUP_OVERRUN: f64 = 2.0;

/// Share of a limited budget's time left that the timed reps get (warmup gets the rest).
const REPS_SHARE: f64 = 0.8;

/// The reps' plan while they run: the count planned, hot mode's batch, and the call time the
/// budget keeps room for (the final call's), all from the estimate until the reps show it was
/// far too slow.
struct RepPlan {
    reps: u32,
    /// Calls in a timed sample: hot mode's batch, `None` otherwise.
    batch: Option<u32>,
    call_ms: f64,
    refitted: bool,
}

impl RepPlan {
    /// Re-fits the plan once on the reps so far (`samples`: their times per call, ms;
    /// `walls`: their wall times with restore and flush, ms) when their median wall time is
    /// under half what the plan expected of a rep: the estimate was stretched (a first call
    /// preempted, faulting in its pages, reading the kernel's code from disk), and a budget
    /// cut made on it would leave a fast kernel two or three reps. The call time kept in
    /// reserve becomes the reps' median call, hot mode's batch is sized on it, and a count the
    /// budget cut becomes what the time left now fits of such reps, at most the count asked
    /// for (never more reps than `rep_ms` and the bounds asked for on the estimate, as without
    /// a budget). Whether the plan changed.
    fn refit(
        &mut self,
        (samples, walls): (&[f64], &[f64]),
        counts: &Counts,
        budget: &Budget,
    ) -> bool {
        if self.refitted || walls.is_empty() {
            return false;
        }
        let wall_ms = median(walls);
        if wall_ms >= 0.5 * counts.rep_wall_ms {
            return false;
        }
        self.refitted = true;
        self.call_ms = median(samples);
        // A rep's wall time at the new batch size: its calls scale, the rest does not matter
        // at this precision.
        let mut rep_wall_ms = wall_ms;
        if let Some(old) = self.batch {
            let batch = hot_batch(self.call_ms);
            rep_wall_ms = wall_ms / f64::from(old) * f64::from(batch);
            self.batch = Some(batch);
        }
        if let Some(left_ms) = budget.limited_ms()
            && self.reps < counts.asked_reps
        {
            let more = fit(REPS_SHARE * (left_ms - rep_wall_ms).max(0.0), rep_wall_ms);
            let done = walls.len() as u32;
            self.reps = done
                .saturating_add(more)
                .clamp(self.reps, counts.asked_reps);
        }
        true
    }
}

/// The median of `values` (not empty).
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    crate::stats::quantile(&sorted, 0.5)
}

/// The timed samples of a measurement, why sampling stopped, and how many were preempted.
struct Sampled {
    samples: Vec<f64>,
    stopped: &'static str,
    preempted_reps: u32,
}

/// Takes the timed reps `counts` plans (or, with `max_noise`, until the noise is low enough
/// or `max_time_ms` is spent), each after a restore, the runner's [`Runner::before_rep`] and a
/// flush, and ended by its [`Runner::after_rep`]; a rep that would not leave room in `budget`
/// for the final call ends sampling (after at least one rep). Where the budget's cut count is
/// reached, or the budget would end sampling, the plan is first re-fitted on the reps so far
/// ([`RepPlan::refit`]).
fn sample<R: Runner + ?Sized>(
    runner: &mut R,
    config: &TimingConfig,
    counts: &Counts,
    (budget, started): (&Budget, Instant),
    estimate: &Estimate,
) -> Result<Sampled, BenchError> {
    let ms = |ms: f64| Some(Duration::from_secs_f64(ms.max(0.0) / 1e3));
    // Noise-based stopping plans no count.
    let noise_stopping = config.max_noise.is_some();
    let time_limit_ms = config
        .max_noise
        .map(|_| config.max_time_ms.unwrap_or(1000.0));
    let sampling = Instant::now();
    let mut sampled = Sampled {
        samples: Vec::with_capacity(counts.reps as usize),
        stopped: "reps",
        preempted_reps: 0,
    };
    let mut walls = Vec::with_capacity(counts.reps as usize);
    let mut plan = RepPlan {
        reps: counts.reps,
        batch: config.hot.then_some(counts.batch),
        call_ms: estimate.call_ms,
        refitted: false,
    };
    // After a rep, the budget has no room for one more like it (or like the final call).
    let no_room = |plan: &RepPlan, walls: &[f64]| {
        walls
            .last()
            .is_some_and(|&last| budget.left_ms() < last.max(plan.call_ms) * 2.0)
    };
    loop {
        let samples = &mut sampled.samples;
        if no_room(&plan, &walls)
            && (!plan.refit((samples, &walls), counts, budget) || no_room(&plan, &walls))
        {
            sampled.stopped = "budget";
            break;
        }
        let done = samples.len() as u32;
        let planned = if noise_stopping { 0 } else { plan.reps };
        let last = samples.last().and_then(|&l| ms(l));
        report_progress(
            started,
            Phase::Reps,
            (done, planned),
            last,
            ms(plan.call_ms),
        );
        let wall = Instant::now();
        runner.restore()?;
        runner.before_rep()?;
        if !config.hot {
            flush_before(runner, config)?;
        }
        let calls = plan.batch;
        let (sample_ms, preempted) = timed_sample(runner, config.clock, calls)?;
        runner.after_rep(done, plan.reps.max(config.min_reps).max(1))?;
        samples.push(sample_ms / f64::from(calls.unwrap_or(1)));
        sampled.preempted_reps += u32::from(preempted);
        walls.push(wall.elapsed().as_secs_f64() * 1e3);
        let done = samples.len() as u32;
        if done >= config.max_reps {
            break;
        }
        match (config.max_noise, time_limit_ms) {
            (Some(max_noise), Some(limit)) => {
                if done >= config.min_reps && relative_stddev(samples) <= max_noise {
                    sampled.stopped = "noise";
                    break;
                }
                if done >= config.min_reps && sampling.elapsed().as_secs_f64() * 1e3 >= limit {
                    sampled.stopped = "time";
                    break;
                }
            }
            _ if done >= plan.reps => {
                if plan.refit((samples, &walls), counts, budget) && done < plan.reps {
                    continue;
                }
                if plan.reps < counts.asked_reps {
                    sampled.stopped = "budget";
                }
                break;
            }
            _ => {}
        }
    }
    Ok(sampled)
}

/// Fails with [`BenchError::DoesNotFit`] when the request begun at `started` has a
/// `budget_ms` that leaves room for fewer than `calls` more calls of `call_ms` each, so that a
/// kernel too slow for its timeout gets an error that says what timeout it needs instead of
/// being killed: a backend checks its first call through [`check_first_call`] with
/// `calls = 3` (an estimate run, a timed rep and the final call); [`do_bench_within`] checks
/// the estimate with 2.
///
/// # Errors
///
/// [`BenchError::DoesNotFit`], as above.
pub fn check_budget(
    config: &TimingConfig,
    started: Instant,
    call_ms: f64,
    calls: u32,
) -> Result<(), BenchError> {
    let (Some(budget_ms), Some(left_ms)) = (
        config.budget_ms,
        Budget::new(config.budget_ms, started).limited_ms(),
    ) else {
        return Ok(());
    };
    let more_ms = f64::from(calls) * call_ms;
    if left_ms >= more_ms {
        return Ok(());
    }
    Err(BenchError::DoesNotFit {
        call_ms,
        needed_ms: started.elapsed().as_secs_f64() * 1e3 + more_ms,
        budget_ms,
    })
}

/// A second opinion on a first call ([`check_first_call`]) is taken only where the time left
/// holds this many first calls: a second call somewhat slower than the first still ends within
/// the budget.
const SECOND_OPINION_ROOM: f64 = 1.25;

/// Times one call of `runner` with `clock`, as a timed rep is (a rep preempted or robbed by the
/// hypervisor counts its thread's CPU time; see [`RepClock`]), in ms; any error of the runner.
fn time_call<R: Runner + ?Sized>(runner: &mut R, clock: RepClock) -> Result<f64, BenchError> {
    timed_sample(runner, clock, None).map(|(ms, _)| ms)
}

/// [`check_budget`] for a backend's first call, with a second opinion: when `calls` more calls
/// of `first_ms` would not fit the request's budget but one would (with a quarter to spare,
/// `SECOND_OPINION_ROOM`), the kernel is called once more (after a restore and a flush,
/// timed as a rep) and the check is made on the faster of the two with one call fewer. A first
/// call stretched by something other than the kernel (preemption, faulting in its pages,
/// reading its code from disk, loading a GPU module) then does not fail a fast kernel with
/// [`BenchError::DoesNotFit`]; a kernel as slow the second time fails as before, one call (its
/// cost) later. Call it once the restore set holds the inputs the first call wrote, so that
/// the second call runs on the inputs the first did. Returns the call time to go on with
/// (`first_ms`, or the second call's when it was faster), the estimate for
/// [`do_bench_after`].
///
/// # Errors
///
/// [`BenchError::DoesNotFit`] as [`check_budget`]; any error of the runner, unchanged.
pub fn check_first_call<R: Runner + ?Sized>(
    runner: &mut R,
    config: &TimingConfig,
    started: Instant,
    first_ms: f64,
    calls: u32,
) -> Result<f64, BenchError> {
    let fits = check_budget(config, started, first_ms, calls);
    let left_ms = Budget::new(config.budget_ms, started).left_ms();
    if fits.is_ok() || calls < 2 || left_ms < SECOND_OPINION_ROOM * first_ms {
        return fits.map(|()| first_ms);
    }
    report_progress(started, Phase::Estimate, (0, 1), None, None);
    runner.restore()?;
    flush_before(runner, config)?;
    let call_ms = time_call(runner, config.clock)?.min(first_ms);
    log::debug!("do_bench: first call {first_ms:.3} ms did not fit; a second took {call_ms:.3} ms");
    check_budget(config, started, call_ms, calls - 1).map(|()| call_ms)
}

/// The request's time budget: `budget_ms` from `started`, or none.
struct Budget {
    end: Option<Instant>,
}

impl Budget {
    fn new(budget_ms: Option<f64>, started: Instant) -> Budget {
        Budget {
            // A budget too large to represent is no budget.
            end: budget_ms
                .and_then(|ms| Duration::try_from_secs_f64(ms.max(0.0) / 1e3).ok())
                .and_then(|budget| started.checked_add(budget)),
        }
    }

    /// ms left, if there is a budget.
    fn limited_ms(&self) -> Option<f64> {
        self.end
            .map(|end| end.saturating_duration_since(Instant::now()).as_secs_f64() * 1e3)
    }

    /// ms left; infinite without a budget.
    fn left_ms(&self) -> f64 {
        self.limited_ms().unwrap_or(f64::INFINITY)
    }
}

/// How many runs of `each_ms` fit in `budget_ms` (as many as `u32` holds for a zero cost).
fn fit(budget_ms: f64, each_ms: f64) -> u32 {
    if each_ms > 0.0 {
        // `as` saturates: a negative or NaN quotient is 0, a huge one `u32::MAX`.
        (budget_ms / each_ms) as u32
    } else {
        u32::MAX
    }
}

/// Standard deviation over mean of `samples` (0 for fewer than two).
fn relative_stddev(samples: &[f64]) -> f64 {
    let n = samples.len() as f64;
    if samples.len() < 2 {
        return 0.0;
    }
    let mean = samples.iter().sum::<f64>() / n;
    let variance = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    if mean > 0.0 {
        variance.sqrt() / mean
    } else {
        0.0
    }
}

/// `budget_ms / estimate_ms`, clamped to `[min, max]`; `max` when the estimate is zero.
fn count(budget_ms: f64, estimate_ms: f64, min: u32, max: u32) -> u32 {
    let n = if estimate_ms > 0.0 {
        budget_ms / estimate_ms
    } else {
        f64::from(max)
    };
    // `as` saturates for out-of-range floats, and the clamp bounds the rest.
    (n as u32).clamp(min, max)
}

fn validate(config: &TimingConfig) -> Result<(), BenchError> {
    let bad = |detail: String| Err(BenchError::InvalidRequest { detail });
    for (name, value) in [("warmup_ms", config.warmup_ms), ("rep_ms", config.rep_ms)] {
        if !value.is_finite() || value < 0.0 {
            return bad(format!(
                "timing.{name} is {value}; it must be a finite number of ms, 0 or more"
            ));
        }
    }
    if let Some(noise) = config.max_noise
        && !(noise.is_finite() && noise > 0.0)
    {
        return bad(format!(
            "timing.max_noise is {noise}; it must be above 0, e.g. 0.005"
        ));
    }
    if let Some(limit) = config.max_time_ms
        && !(limit.is_finite() && limit > 0.0)
    {
        return bad(format!("timing.max_time_ms is {limit}; it must be above 0"));
    }
    if let Some(budget) = config.budget_ms
        && !(budget.is_finite() && budget > 0.0)
    {
        return bad(format!("timing.budget_ms is {budget}; it must be above 0"));
    }
    if config.min_reps == 0 {
        return bad("timing.min_reps is 0; it must be at least 1".into());
    }
    if config.max_reps < config.min_reps {
        return bad(format!(
            "timing.max_reps ({}) is below timing.min_reps ({})",
            config.max_reps, config.min_reps
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A runner whose runs "take" a scripted time and count what was called.
    #[derive(Default)]
    struct Scripted {
        runs: u32,
        flushes: u32,
        fail_after: Option<u32>,
    }

    impl Runner for Scripted {
        fn run(&mut self) -> Result<(), BenchError> {
            self.runs += 1;
            match self.fail_after {
                Some(n) if self.runs > n => Err(BenchError::Failed {
                    message: "boom".into(),
                }),
                _ => Ok(()),
            }
        }
        fn flush(&mut self) -> Result<(), BenchError> {
            self.flushes += 1;
            Ok(())
        }
        fn run_timed(&mut self) -> Result<f64, BenchError> {
            self.run()?;
            Ok(f64::from(self.runs))
        }
    }

    #[test]
    fn counts_follow_budget_and_bounds() {
        assert_eq!(count(100.0, 1.0, 5, 1000), 100);
        assert_eq!(count(100.0, 50.0, 5, 1000), 5);
        assert_eq!(count(100.0, 0.001, 5, 1000), 1000);
        assert_eq!(count(100.0, 0.0, 5, 1000), 1000);
        assert_eq!(count(0.0, 1.0, 1, 1000), 1);
    }

    #[test]
    fn flushes_before_every_timed_rep_only() {
        let mut runner = Scripted::default();
        let config = TimingConfig::default().min_reps(7).max_reps(7);
        let stats = do_bench(&mut runner, &config).unwrap();
        assert_eq!(stats.reps, 7);
        assert_eq!(stats.warmup_reps, 7);
        // 5 estimate runs and 7 reps are flushed; the 7 warmup runs are not.
        assert_eq!(runner.flushes, ESTIMATE_RUNS + 7);
        assert_eq!(runner.runs, ESTIMATE_RUNS + 7 + 7);
    }

    /// A runner whose kernel takes `kernel_ms` and whose flush takes `flush_ms` (simulated).
    struct Costly {
        kernel_ms: f64,
        flush_ms: u64,
    }

    impl Runner for Costly {
        fn run(&mut self) -> Result<(), BenchError> {
            Ok(())
        }
        fn flush(&mut self) -> Result<(), BenchError> {
            std::thread::sleep(std::time::Duration::from_millis(self.flush_ms));
            Ok(())
        }
        fn run_timed(&mut self) -> Result<f64, BenchError> {
            Ok(self.kernel_ms)
        }
        fn host_timed(&self) -> bool {
            false
        }
    }

    #[test]
    fn the_estimate_excludes_the_flush_and_flushes_cap_the_wall_time() {
        let config = TimingConfig::default()
            .warmup_ms(1.0)
            .rep_ms(20.0)
            .min_reps(3)
            .max_reps(1000)
            .flush_cache(true);
        // Without a flush cost, 20 ms of a 0.5 ms kernel is 40 reps.
        let mut cheap = Costly {
            kernel_ms: 0.5,
            flush_ms: 0,
        };
        assert_eq!(do_bench(&mut cheap, &config).unwrap().reps, 40);
        // A 5 ms flush caps the reps at 10 x 20 ms / (0.5 + 5) ms = 36 (fewer when sleeping
        // overshoots: a loaded machine wakes a 5 ms sleep 9 ms or more later, 18 reps seen
        // with two busy loops per CPU), far more than triton's 20 / 5.5 = 3.
        let mut flushed = Costly {
            kernel_ms: 0.5,
            flush_ms: 5,
        };
        let reps = do_bench(&mut flushed, &config).unwrap().reps;
        assert!((9..=36).contains(&reps), "{reps}");
    }

    #[test]
    fn hot_mode_times_batches_and_divides() {
        let mut runner = Costly {
            kernel_ms: 0.01,
            flush_ms: 0,
        };
        let config = TimingConfig::default()
            .hot(true)
            .min_reps(3)
            .max_reps(50)
            .rep_ms(10.0);
        let stats = do_bench(&mut runner, &config).unwrap();
        assert_eq!(stats.stopped, "reps");
        assert!((3..=50).contains(&stats.reps), "{}", stats.reps);
    }

    /// A runner whose reps cycle through fixed times.
    struct Noisy {
        times: Vec<f64>,
        next: usize,
    }

    impl Runner for Noisy {
        fn run(&mut self) -> Result<(), BenchError> {
            Ok(())
        }
        fn flush(&mut self) -> Result<(), BenchError> {
            Ok(())
        }
        fn run_timed(&mut self) -> Result<f64, BenchError> {
            self.next += 1;
            Ok(self.times[self.next % self.times.len()])
        }
        fn host_timed(&self) -> bool {
            false
        }
    }

    /// A fixed amount of integer work per call (~1 ms on a 2020s core), timed on the host.
    struct Spinner;

    impl Runner for Spinner {
        fn run(&mut self) -> Result<(), BenchError> {
            let mut x = 0u64;
            for i in 0..1_500_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            std::hint::black_box(x);
            Ok(())
        }
        fn flush(&mut self) -> Result<(), BenchError> {
            Ok(())
        }
    }

    /// Pins the calling thread to `cpu` (or, with `None`, to every CPU it may use).
    fn pin_this_thread(cpu: Option<usize>) {
        // SAFETY: the set is a plain bit set, zeroed then filled; pid 0 is the calling thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            match cpu {
                Some(cpu) => libc::CPU_SET(cpu, &mut set),
                None => (0..libc::CPU_SETSIZE as usize).for_each(|c| libc::CPU_SET(c, &mut set)),
            }
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }

    /// A busy loop in another process, pinned to `cpu`; killed on drop.
    struct Hog(std::process::Child);

    impl Hog {
        fn on(cpu: usize) -> Hog {
            use std::os::unix::process::CommandExt;
            let mut command = std::process::Command::new("sh");
            command.args(["-c", "while :; do :; done"]);
            // SAFETY: only sched_setaffinity between fork and exec (async-signal-safe).
            unsafe {
                command.pre_exec(move || {
                    pin_this_thread(Some(cpu));
                    Ok(())
                });
            }
            Hog(command.spawn().expect("sh runs"))
        }
    }

    impl Drop for Hog {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// A runner that counts its calls.
    struct Counting(u32);

    impl Runner for Counting {
        fn run(&mut self) -> Result<(), BenchError> {
            self.0 += 1;
            std::thread::sleep(std::time::Duration::from_millis(2));
            Ok(())
        }
        fn flush(&mut self) -> Result<(), BenchError> {
            Ok(())
        }
    }

    /// A runner whose calls cost next to nothing; counts them.
    struct Quick(u64);

    impl Runner for Quick {
        fn run(&mut self) -> Result<(), BenchError> {
            self.0 += 1;
            std::hint::black_box(self.0);
            Ok(())
        }
        fn flush(&mut self) -> Result<(), BenchError> {
            Ok(())
        }
    }

    #[test]
    fn a_first_call_can_stand_for_the_estimate() {
        let config = TimingConfig::default()
            .warmup_ms(0.0)
            .rep_ms(0.0)
            .min_reps(3)
            .max_reps(3)
            .estimate_runs(Some(0));
        let started = Instant::now();
        let mut runner = Counting(0);
        let stats = do_bench_after(&mut runner, &config, started, Some(2.0)).unwrap();
        // No estimate run, and no warmup (the first call warmed it): the three reps only.
        assert_eq!((runner.0, stats.reps, stats.warmup_reps), (3, 3, 0));
        // Asked for less warmup time than the first call took: that call was the warmup.
        let mut runner = Counting(0);
        let warm = config.clone().warmup_ms(0.5);
        let stats = do_bench_after(&mut runner, &warm, started, Some(2.0)).unwrap();
        assert_eq!((runner.0, stats.warmup_reps), (3, 0));
        // Asked for more: warmup calls fill what the first call left (8 ms of 2 ms calls).
        let mut runner = Counting(0);
        let warm = config.clone().warmup_ms(10.0).max_reps(100);
        let stats = do_bench_after(&mut runner, &warm, started, Some(2.0)).unwrap();
        assert_eq!(stats.warmup_reps, 4);
        // Without a first call, one estimate run and one warmup run.
        let mut runner = Counting(0);
        do_bench_after(&mut runner, &config, started, None).unwrap();
        assert_eq!(runner.0, 5);
        // Without estimate_runs = 0 the first call is ignored: five estimate runs.
        let mut runner = Counting(0);
        let five = config.estimate_runs(None);
        do_bench_after(&mut runner, &five, started, Some(2.0)).unwrap();
        assert_eq!(runner.0, 9);
    }

    /// Set in the child that [`alone_in_a_process`] starts.
    const ALONE_ENV: &str = "TUNEBOX_TEST_ALONE";

    /// Whether this is the child of [`alone_in_a_process`]; in the parent, runs the test `name`
    /// of this executable in a child process and fails when it fails. The thread-time
    /// correction takes a rep during which other threads of the process ran for a
    /// multi-threaded kernel's (its wall time counts): the other tests' threads would make it so.
    fn alone_in_a_process(name: &str) -> bool {
        if std::env::var_os(ALONE_ENV).is_some() {
            return true;
        }
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env(ALONE_ENV, "1")
            .output()
            .expect("the test executable runs");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(output.status.success(), "{name} failed alone:\n{text}");
        assert!(
            text.contains("1 passed"),
            "{name} did not run alone:\n{text}"
        );
        false
    }

    /// A busy loop on the kernel's own CPU takes its CPU away for whole time slices: the wall
    /// times of the reps it preempted grow by the hog's slices, their thread CPU times do not.
    /// Run alone in a process: the other tests' threads must not make the reps look threaded.
    #[test]
    fn a_rep_preempted_by_a_busy_loop_on_its_cpu_counts_its_cpu_time() {
        if !alone_in_a_process(
            "do_bench::tests::a_rep_preempted_by_a_busy_loop_on_its_cpu_counts_its_cpu_time",
        ) {
            return;
        }
        // SAFETY: sched_getcpu takes nothing and only reads the calling thread's CPU.
        let cpu = usize::try_from(unsafe { libc::sched_getcpu() }).unwrap_or(0);
        pin_this_thread(Some(cpu));
        let config = TimingConfig::default()
            .warmup_ms(5.0)
            .rep_ms(150.0)
            .min_reps(40)
            .max_reps(400)
            .flush_cache(false);
        let wall = config.clone().clock(RepClock::Wall);
        let before = do_bench(&mut Spinner, &config).unwrap();
        let hog = Hog::on(cpu);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let corrected = do_bench(&mut Spinner, &config).unwrap();
        let walled = do_bench(&mut Spinner, &wall).unwrap();
        drop(hog);
        pin_this_thread(None);
        assert!(corrected.preempted_reps > 0, "{corrected:?}");
        assert_eq!(walled.preempted_reps, 0, "{walled:?}");
        // Sharing its CPU half and half, the kernel's wall time per rep grows; the corrected
        // time stays near the time measured before the hog (cache effects of the switches
        // aside: generous bounds, the machine may be busy).
        assert!(
            corrected.median_ms < 1.5 * before.median_ms,
            "{before:?} {corrected:?}"
        );
        assert!(
            walled.mean_ms > corrected.mean_ms,
            "{walled:?} {corrected:?}"
        );
    }

    #[test]
    fn noise_stopping_stops_early_when_quiet_and_at_the_time_limit_otherwise() {
        let config = TimingConfig::default()
            .min_reps(5)
            .max_reps(100_000)
            .max_noise(Some(0.01))
            .max_time_ms(Some(50.0));
        let mut quiet = Noisy {
            times: vec![1.0],
            next: 0,
        };
        let stats = do_bench(&mut quiet, &config).unwrap();
        assert_eq!((stats.stopped.as_str(), stats.reps), ("noise", 5));
        let mut noisy = Noisy {
            times: vec![1.0, 2.0],
            next: 0,
        };
        let stats = do_bench(&mut noisy, &config).unwrap();
        assert_eq!(stats.stopped, "time");
        let bad = config.max_noise(Some(0.0));
        assert!(
            do_bench(&mut quiet, &bad)
                .unwrap_err()
                .to_string()
                .contains("max_noise")
        );
    }

    /// A runner whose calls really take `ms` of wall time.
    struct Sleeper {
        ms: u64,
        calls: u32,
    }

    impl Runner for Sleeper {
        fn run(&mut self) -> Result<(), BenchError> {
            self.calls += 1;
            std::thread::sleep(Duration::from_millis(self.ms));
            Ok(())
        }
        fn flush(&mut self) -> Result<(), BenchError> {
            Ok(())
        }
    }

    #[test]
    fn a_budget_cuts_the_reps_instead_of_running_past_it() {
        // A 30 ms kernel asked for at least 10 reps: 5 estimate runs, warmup and 10 reps need
        // about 0.5 s; with a 400 ms budget the reps are cut, and the whole measurement (plus
        // one more call, the reserve for the final call) stays within the budget.
        let config = TimingConfig::default()
            .warmup_ms(25.0)
            .rep_ms(100.0)
            .min_reps(10)
            .budget_ms(Some(400.0));
        let mut runner = Sleeper { ms: 30, calls: 0 };
        let started = Instant::now();
        let stats = do_bench_within(&mut runner, &config, started).unwrap();
        runner.run().unwrap();
        let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
        assert_eq!(stats.stopped, "budget");
        assert!((1..10).contains(&stats.reps), "{}", stats.reps);
        // Sleeping overshoots a little, and a loaded machine more: a generous bound.
        assert!(elapsed_ms < 400.0 + 150.0, "{elapsed_ms} ms");

        // Time spent before do_bench (tensor setup, the first call) counts.
        // With 100 ms left the reps are cut; on a loaded machine, where a 30 ms sleep takes
        // 34 ms, the estimate alone can leave too little for two more calls, and saying so
        // (`DoesNotFit`) is as right: either way the early 300 ms counted.
        let late = Instant::now() - Duration::from_millis(300);
        let mut runner = Sleeper { ms: 30, calls: 0 };
        match do_bench_within(&mut runner, &config, late) {
            Ok(stats) => assert_eq!(stats.stopped, "budget"),
            Err(BenchError::DoesNotFit { budget_ms, .. }) => assert_eq!(budget_ms, 400.0),
            Err(other) => panic!("{other}"),
        }
        assert!(runner.calls < 5 + 10, "{}", runner.calls);

        // A budget too large to represent is none.
        let endless = config.clone().budget_ms(Some(1e300));
        let mut runner = Sleeper { ms: 1, calls: 0 };
        assert_eq!(do_bench(&mut runner, &endless).unwrap().stopped, "reps");

        // A budget that is ample changes nothing.
        let ample = config.clone().budget_ms(Some(60_000.0));
        let mut runner = Sleeper { ms: 2, calls: 0 };
        let stats = do_bench(&mut runner, &ample).unwrap();
        assert_eq!(stats.stopped, "reps");
        assert!(stats.reps >= 10);
    }

    #[test]
    fn a_slow_first_call_leaves_fast_reps_the_count_asked_for_within_the_budget() {
        // The CI run that found it: a 1 us kernel whose first call a loaded guest stretched to
        // ~0.4 s, under a 1.6 s budget, got 2 reps planned on that call. Its 2 ms reps show the
        // estimate wrong, and the count asked for (10 on a 400 ms estimate) fits easily.
        let config = TimingConfig::default()
            .warmup_ms(25.0)
            .rep_ms(100.0)
            .min_reps(10)
            .estimate_runs(Some(0))
            .budget_ms(Some(1600.0));
        let started = Instant::now() - Duration::from_millis(450);
        let mut runner = Counting(0);
        let stats = do_bench_after(&mut runner, &config, started, Some(400.0)).unwrap();
        assert_eq!(
            (stats.reps, stats.stopped.as_str()),
            (10, "reps"),
            "{stats:?}"
        );
        // Never more than the estimate asked for: 10 reps, not 100 ms of 2 ms reps.
        assert_eq!(runner.0, 10);

        // Without a planned count (noise stopping that never gets quiet enough), the room kept
        // for the final call was the estimate's 400 ms: 2 x 400 ms would end sampling when
        // 800 of the 1250 ms left remain, ~450 ms in. It is the reps' 2 ms now, and sampling
        // runs its 600 ms.
        let noisy = config
            .clone()
            .max_noise(Some(1e-9))
            .max_time_ms(Some(600.0))
            .budget_ms(Some(1700.0));
        let started = Instant::now() - Duration::from_millis(450);
        let mut runner = Counting(0);
        let stats = do_bench_after(&mut runner, &noisy, started, Some(400.0)).unwrap();
        assert_eq!(stats.stopped, "time", "{stats:?}");

        // Hot mode: the batch was sized on the 400 ms estimate (one call); refitted, it is
        // sized on the reps (1 ms of calls), so the reps stop timing one call at a time.
        let hot = config.clone().hot(true);
        let started = Instant::now() - Duration::from_millis(450);
        let mut runner = Quick(0);
        let stats = do_bench_after(&mut runner, &hot, started, Some(400.0)).unwrap();
        assert_eq!(
            (stats.reps, stats.stopped.as_str()),
            (10, "reps"),
            "{stats:?}"
        );
        assert!(runner.0 > 1000, "{} calls", runner.0);

        // Reps as slow as the estimate keep the cut: a 30 ms kernel, 30 ms first call.
        let slow = TimingConfig::default()
            .min_reps(10)
            .estimate_runs(Some(0))
            .budget_ms(Some(200.0));
        let mut runner = Sleeper { ms: 30, calls: 0 };
        let stats = do_bench_after(&mut runner, &slow, Instant::now(), Some(30.0)).unwrap();
        assert_eq!(stats.stopped, "budget", "{stats:?}");
        assert!((1..10).contains(&stats.reps), "{stats:?}");
    }

    /// A runner whose every fifth call takes 100 ms and the others nothing.
    struct Fitful(u32);

    impl Runner for Fitful {
        fn run(&mut self) -> Result<(), BenchError> {
            self.0 += 1;
            if self.0.is_multiple_of(5) {
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(())
        }
        fn flush(&mut self) -> Result<(), BenchError> {
            Ok(())
        }
    }

    #[test]
    fn warmup_stops_at_twice_its_time_whatever_the_estimate_planned() {
        // A fast first call plans 1000 warmup calls (25 ms of 0.01 ms calls), which take 20 s
        // at 100 ms every fifth: warmup stops at its first slow call past 50 ms.
        let config = TimingConfig::default()
            .warmup_ms(25.0)
            .rep_ms(0.03)
            .min_reps(3)
            .max_reps(1000)
            .estimate_runs(Some(0));
        let started = Instant::now();
        let mut runner = Fitful(0);
        let stats = do_bench_after(&mut runner, &config, started, Some(0.01)).unwrap();
        assert!(stats.warmup_reps < 20, "{stats:?}");
        // Generous: the 3 reps may meet a slow call.
        let took_ms = started.elapsed().as_secs_f64() * 1e3;
        assert!(took_ms < 1000.0, "{took_ms} ms: {stats:?}");
        // Within a budget, warmup keeps to its share: the 2 s budget of a 2.5 s timeout no
        // longer ends in warmup (the parent's kill, seen as a hang at warmup call 99).
        let budgeted = config.max_reps(250).budget_ms(Some(2000.0));
        let mut runner = Fitful(0);
        let started = Instant::now();
        do_bench_after(&mut runner, &budgeted, started, Some(0.01)).unwrap();
        let took_ms = started.elapsed().as_secs_f64() * 1e3;
        assert!(took_ms < 2000.0, "{took_ms} ms");
    }

    #[test]
    fn a_first_call_too_slow_for_the_budget_gets_a_second_opinion() {
        let config = TimingConfig::default().budget_ms(Some(1200.0));
        // Three more 400 ms calls do not fit the 750 ms left; one does: the second call takes
        // 2 ms, and that is the estimate to go on with.
        let started = Instant::now() - Duration::from_millis(450);
        let mut runner = Counting(0);
        let call_ms = check_first_call(&mut runner, &config, started, 400.0, 3).unwrap();
        assert_eq!(runner.0, 1);
        assert!((1.0..200.0).contains(&call_ms), "{call_ms}");
        // A first call that fits is not called again.
        let mut runner = Counting(0);
        let call_ms = check_first_call(&mut runner, &config, Instant::now(), 2.0, 3).unwrap();
        assert_eq!((runner.0, call_ms), (0, 2.0));
        // A kernel as slow the second time does not fit, one call later: 280 of 400 ms left
        // hold a second 120 ms call (with its quarter to spare), not two more.
        let tight = TimingConfig::default().budget_ms(Some(400.0));
        let started = Instant::now() - Duration::from_millis(120);
        let mut runner = Sleeper { ms: 120, calls: 0 };
        let err = check_first_call(&mut runner, &tight, started, 120.0, 3).unwrap_err();
        assert!(matches!(err, BenchError::DoesNotFit { .. }), "{err:?}");
        assert_eq!(runner.calls, 1);
        // Not even one more call fits (130 ms left, 150 needed): no second call.
        let started = Instant::now() - Duration::from_millis(270);
        let mut runner = Sleeper { ms: 120, calls: 0 };
        assert!(check_first_call(&mut runner, &tight, started, 120.0, 3).is_err());
        assert_eq!(runner.calls, 0);
    }

    #[test]
    fn a_budget_too_small_for_one_rep_and_the_final_call_is_an_error_that_says_what_fits() {
        let config = TimingConfig::default().budget_ms(Some(40.0));
        // 25 ms calls: one estimate run, then a rep and the final call would need 50 more.
        let mut runner = Sleeper { ms: 25, calls: 0 };
        let err = do_bench(&mut runner, &config).unwrap_err();
        assert_eq!(runner.calls, 1);
        let BenchError::DoesNotFit {
            call_ms,
            needed_ms,
            budget_ms,
        } = err
        else {
            panic!("expected DoesNotFit, got {err:?}");
        };
        assert!(
            call_ms >= 25.0 && needed_ms >= 75.0,
            "{call_ms} {needed_ms}"
        );
        assert_eq!(budget_ms, 40.0);
        assert!(
            err.to_string().contains("give it a timeout of at least"),
            "{err}"
        );

        // After the first call, a backend asks for room for three more.
        let started = Instant::now() - Duration::from_millis(30);
        assert!(check_budget(&config, started, 30.0, 3).is_err());
        assert!(check_budget(&config, Instant::now(), 10.0, 3).is_ok());
        let unlimited = TimingConfig::default();
        assert!(check_budget(&unlimited, started, 1e9, 3).is_ok());
    }

    #[test]
    fn no_flush_when_disabled() {
        let mut runner = Scripted::default();
        let config = TimingConfig::default()
            .flush_cache(false)
            .min_reps(3)
            .max_reps(3);
        do_bench(&mut runner, &config).unwrap();
        assert_eq!(runner.flushes, 0);
    }

    #[test]
    fn runner_error_ends_the_measurement() {
        let mut runner = Scripted {
            fail_after: Some(8),
            ..Scripted::default()
        };
        let err = do_bench(&mut runner, &TimingConfig::default()).unwrap_err();
        assert_eq!(
            err,
            BenchError::Failed {
                message: "boom".into()
            }
        );
    }

    #[test]
    fn invalid_configs_are_rejected_with_the_field_name() {
        let cases = [
            (TimingConfig::default().rep_ms(f64::NAN), "timing.rep_ms"),
            (TimingConfig::default().warmup_ms(-1.0), "timing.warmup_ms"),
            (
                TimingConfig::default().budget_ms(Some(0.0)),
                "timing.budget_ms",
            ),
            (TimingConfig::default().min_reps(0), "timing.min_reps"),
            (
                TimingConfig::default().min_reps(10).max_reps(2),
                "timing.max_reps",
            ),
        ];
        for (config, field) in cases {
            let err = do_bench(&mut Scripted::default(), &config).unwrap_err();
            assert!(err.to_string().contains(field), "{err} should name {field}");
        }
    }
}
