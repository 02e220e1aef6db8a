//! Rounds and the race for the top: after screening, every `ok` choice measured in this run
//! is measured again in rounds of short windows (order shuffled per round, one window at a
//! time, after every compile has finished), so that an episode of interference hits one
//! window of one choice rather than its result. A window in which other CPUs were busy or time
//! was stolen is measured again once at the end of its round, unless most of the round was
//! disturbed (a machine busy all along stays busy). Then the choices whose interval
//! overlaps the best's are raced: more rounds of them alone, until the intervals separate or
//! the race's time is spent. Each choice's time is the estimate over its windows
//! ([`crate::results::windows::Windows`]); the report says how sure the pick is.

use std::time::{Duration, Instant};

use tunebox_pool::{PoolError, Status};
use tunebox_protocol::{BenchmarkRequest, BenchmarkResult, TimingStats};

use super::context::Run;
use super::lookup::{Setup, window_timing};
use super::options::{DEFAULT_RACE_LIMIT, RACE_SHARE};
use crate::base::observer::{Observer, ObserverExt};
use crate::measure::workers;
use crate::results::interference::{self, Conditions};
use crate::results::windows::{Slowdowns, Windows};
use crate::results::{ChoiceResult, DRIFT_WARN, RunConditions, choices as plural};

/// How far apart two agreeing windows of a choice must lie to confirm its estimate, in rounds
/// of the run (a round: one window of every other choice in the rounds): see
/// [`Run::confirmed`].
const APART_ROUNDS: f64 = 0.5;
/// Most rounds the race adds after the base rounds.
const MAX_RACE_ROUNDS: usize = 8;
/// A contender whose estimate is within this share of the best's is not raced for itself:
/// picking either costs at most that much, less than a window's median moves between runs on a
/// quiet machine (~1 %), so more windows would spend time without making the pick better. It
/// keeps pace with the best while others race it ([`worth_racing`]).
const RACE_TIES_WITHIN: f64 = 0.01;
/// A round's window faster than this share of the choice's first window is measured again
/// with its outputs returned and judged as screening judges them, before it counts: an honest
/// kernel does not halve its time between windows, a kernel that behaves while screened and
/// skips its work later does.
const CHECK_FASTER_THAN: f64 = 0.5;
/// A round's probe (the fastest of three) this much slower than the run's fastest says the
/// machine slowed down by itself (frequency, a host neighbour), whatever /proc/stat says.
const SLOW_PROBE: f64 = 1.5;
/// Choices measured in two windows or more that the run needs before it settles any choice:
/// the largest spread of fewer says too little about how far a window can be off.
const SETTLE_EVIDENCE: usize = 3;
/// The round in which a choice far behind may be settled, on its fastest of the windows before
/// it (its screening window and its first round's). Not on the screening window alone: on a
/// 2-vCPU EPYC guest single screening windows ran 30-60 % slow while the choices measured
/// twice by then had spread only 6 %, and settling on them put the run's best choice among
/// the slow ones (worst-pair Spearman 0.83 and 0.88 in 2 of 15 runs of the main job, against
/// none below 0.95 without). Two windows a round apart are rarely both that slow.
const SETTLE_ROUND: usize = 2;

/// Whether windows that ended at `first` and `second` lie [`APART_ROUNDS`] rounds apart: that
/// many windows of the other `choices - 1` choices of the rounds each, of the run's windows
/// that `ended`, ended between them.
fn apart(first: f64, second: f64, ended: impl Iterator<Item = f64>, choices: usize) -> bool {
    let between = ended.filter(|&e| first < e && e < second).count();
    between as f64 >= APART_ROUNDS * choices.saturating_sub(1) as f64
}

/// Of `overlapping` (the best first, then the choices whose interval overlaps its own), the
/// best and those whose `estimate` is more than [`RACE_TIES_WITHIN`] above the best's, and,
/// while there are such, the ties (within it) with no more `windows` than the best; only the
/// best when there are none.
///
/// A tie left out while the best races others falls behind by sampling alone: an estimate
/// leans on the fastest windows, and the best, given a window every round, gets more of them.
/// On a busy 2-vCPU EPYC guest the main job's usual best, measured in 3 windows against the
/// runner-up's 5 (the two within 0.7 % in that run, 3.5 % apart in the run's four others),
/// lost the pick: 3.9-4.1 % regret in the pairs with that run.
fn worth_racing(
    overlapping: &[usize],
    estimate: impl Fn(usize) -> f64,
    windows: impl Fn(usize) -> usize,
) -> Vec<usize> {
    let Some(&best) = overlapping.first() else {
        return Vec::new();
    };
    let within = estimate(best) * (1.0 + RACE_TIES_WITHIN);
    let (ties, apart): (Vec<usize>, Vec<usize>) = overlapping[1..]
        .iter()
        .partition(|&&p| estimate(p) <= within);
    if apart.is_empty() {
        return vec![best];
    }
    let keeping_pace = ties.into_iter().filter(|&p| windows(p) <= windows(best));
    std::iter::once(best)
        .chain(apart)
        .chain(keeping_pace)
        .collect()
}

/// What a round's window that needed checking came to ([`Run::check_window`]).
enum WindowCheck {
    /// The choice failed: its result now.
    Failed(Box<ChoiceResult>),
    /// Measured again with its outputs checked, and passed: the window that counts.
    Checked(Box<TimingStats>, Conditions),
    /// The check could not be measured (the run was stopped, no worker started): neither
    /// window counts.
    Dropped,
}

/// What the rounds counted.
#[derive(Debug, Default)]
struct Tally {
    windows: usize,
    disturbed: usize,
    remeasured: usize,
    raced: usize,
    settled: usize,
    settle_margin: f64,
    confirmed_early: usize,
    probes: Vec<Duration>,
}

/// What settling a choice at screening is judged by, from the windows of the run's `ok`
/// choices: the best estimate, every choice's estimate (sorted), and the largest spread
/// between any choice's fastest and slowest window among those measured twice or more.
#[derive(Debug, Clone)]
struct Settling {
    best_ms: f64,
    estimates: Vec<f64>,
    margin: f64,
    evidence: usize,
}

impl Settling {
    /// From the windows of the `ok` choices measured in this run.
    fn of<'w>(windows: impl Iterator<Item = &'w crate::Windows>) -> Settling {
        let mut s = Settling {
            best_ms: f64::INFINITY,
            estimates: Vec::new(),
            margin: 0.0,
            evidence: 0,
        };
        for w in windows {
            s.best_ms = s.best_ms.min(w.estimate_ms);
            s.estimates.push(w.estimate_ms);
            if w.medians_ms.len() >= 2 {
                s.margin = s.margin.max(w.spread());
                s.evidence += 1;
            }
        }
        s.estimates.sort_by(f64::total_cmp);
        s
    }

    /// The margin a window may be off by, as far as this run can tell, once it has measured
    /// half its choices twice or more (and at least [`SETTLE_EVIDENCE`]): the largest spread
    /// of fewer says too little about how far a window can be off.
    fn margin(&self) -> Option<f64> {
        let needed = SETTLE_EVIDENCE.max(self.estimates.len().div_ceil(2));
        (self.evidence >= needed && self.best_ms.is_finite()).then_some(self.margin)
    }

    /// Whether a choice whose fastest window so far took `screening_ms` is settled: no later
    /// window could change its rank. Interference only slows a window, so as far as this run
    /// can tell the choice's time lies in `[screening_ms / (1 + margin), screening_ms]`: it is
    /// settled when that trails the best by more than the margin and no other choice's
    /// estimate lies within the margin of it either (then more windows would only move it
    /// among choices it does not change places with). On a machine whose windows spread
    /// little, far choices settle; on one whose speed drifts, none does.
    fn settles(&self, screening_ms: f64) -> bool {
        let Some(m) = self.margin() else {
            return false;
        };
        if screening_ms <= self.best_ms * (1.0 + m) {
            return false;
        }
        let (low, high) = (screening_ms / (1.0 + m), screening_ms * (1.0 + m));
        // Itself, and nobody else, within the margin.
        self.estimates
            .iter()
            .filter(|&&e| low <= e && e <= high)
            .count()
            <= 1
    }
}

impl Run<'_> {
    /// The rounds, then the race (see the module's docs); records what they saw in
    /// [`Run::conditions`], and each `ok` result's estimate, interval and tie.
    pub(super) fn race(&mut self) {
        let load_start = interference::load_average();
        let mut tally = Tally::default();
        let contenders: Vec<usize> = self
            .ledger
            .results
            .iter()
            .enumerate()
            .filter(|(_, r)| r.status == Status::Ok && r.windows.is_some() && !r.cached)
            .map(|(p, _)| p)
            .collect();
        for r in &self.ledger.results {
            if let Some(w) = &r.windows
                && !r.cached
            {
                tally.windows += w.medians_ms.len();
                tally.disturbed += w.disturbed_count();
            }
        }
        let rounds = self.setup.windows.saturating_sub(1);
        // Choices from the results cache count as rivals: a run resumed after a stop gives
        // the choices cut short their rounds, even one alone (`resume.rs`).
        let rivals = self
            .ledger
            .results
            .iter()
            .filter(|r| r.status == Status::Ok && r.windows.is_some())
            .count();
        let mut settled = vec![false; self.ledger.results.len()];
        if rounds > 0
            && !contenders.is_empty()
            && rivals > 1
            && self.measuring.is_some()
            && !self.should_stop()
        {
            self.observer.note(&format!(
                "measuring {} again in {rounds} rounds of short windows (shuffled, one at a \
                 time)…",
                plural(contenders.len())
            ));
            let started = Instant::now();
            for round in 1..=rounds {
                if self.should_stop() {
                    break;
                }
                let due: Vec<usize> = contenders
                    .iter()
                    .copied()
                    .filter(|&p| !settled[p] && self.needs_window(p, round))
                    .collect();
                if due.is_empty() {
                    break;
                }
                let settle = (round == SETTLE_ROUND).then_some(&mut settled[..]);
                self.window_round(&due, round, &mut tally, settle);
            }
            tally.settled = settled.iter().filter(|s| **s).count();
            tally.confirmed_early = contenders
                .iter()
                .filter(|&&p| {
                    let r = &self.ledger.results[p];
                    r.status == Status::Ok
                        && r.windows
                            .as_ref()
                            .is_some_and(|w| self.confirmed(w) && w.medians_ms.len() < 1 + rounds)
                })
                .count();
            let budget = self.options.race.unwrap_or_else(|| {
                (started.elapsed() + self.spare_windows)
                    .mul_f64(RACE_SHARE)
                    .min(DEFAULT_RACE_LIMIT)
            });
            // Fixed reps (Kernel Tuner's `iterations`) are a choice's reps in all, which the
            // rounds' windows share: a race would add more.
            let timing = &self.setup.manifest().timing;
            if timing.min_reps != timing.max_reps {
                self.race_for_the_top(budget, &mut tally);
            }
        }
        self.ledger.unfinished = self.rounds_cut_short(&contenders, &settled);
        self.mark_ties();
        self.conditions = Some(self.summary(tally, load_start));
        if let Some(c) = &self.conditions
            && c.busy
        {
            self.observer.note(&format!(
                "warning: the machine was busy while measuring: {} of {} windows disturbed \
                 (other CPUs busy or time stolen), {} measured again; {}",
                c.disturbed, c.windows, c.remeasured, c.confidence
            ));
        } else if let Some(c) = self.conditions.as_ref().filter(|c| c.drifted()) {
            self.observer.note(&format!(
                "warning: the machine's speed drifted while measuring: a choice's windows \
                 differ by {:.0} % (the median over choices), with no other work seen; choices \
                 less than that apart may trade places on a second run",
                c.drift * 100.0
            ));
        }
    }

    /// Rounds of the choices whose interval overlaps the best's, until none does or `budget`
    /// is spent.
    fn race_for_the_top(&mut self, budget: Duration, tally: &mut Tally) {
        let started = Instant::now();
        let mut raced = vec![false; self.ledger.results.len()];
        for extra in 0..MAX_RACE_ROUNDS {
            if self.should_stop() || started.elapsed() >= budget {
                break;
            }
            let racing = self.worth_racing();
            if racing.len() < 2 {
                break;
            }
            if extra == 0 {
                self.observer.note(&format!(
                    "racing {} whose intervals overlap the best's…",
                    plural(racing.len())
                ));
            }
            for &p in &racing {
                raced[p] = true;
            }
            self.window_round(&racing, self.setup.windows, tally, None);
        }
        tally.raced = raced.iter().filter(|r| **r).count();
    }

    /// Whether the result at `p` needs a window in `round` (from 1): it is `ok`, has at most
    /// `round` windows, and its estimate is not confirmed yet ([`Run::confirmed`]).
    fn needs_window(&self, p: usize, round: usize) -> bool {
        let r = &self.ledger.results[p];
        r.status == Status::Ok
            && r.windows
                .as_ref()
                .is_some_and(|w| w.medians_ms.len() <= round && !self.confirmed(w))
    }

    /// Whether `w`'s estimate is confirmed: its two fastest windows agree
    /// ([`crate::Windows::confirmed`]) and lie apart in time, with at least half a round of
    /// other windows of the run between them ([`APART_ROUNDS`]). Windows taken one after the
    /// other share whatever slowed the machine then (a slow stretch of a drifting vCPU lasts
    /// seconds): the last choice screened, its spare window right after, agreed at 30 % above
    /// its time in other runs and was never measured again. Apart by the run's own rounds, not
    /// by a time any one machine's drift suggests.
    fn confirmed(&self, w: &Windows) -> bool {
        let Some((first, second)) = w.agreeing_ended() else {
            return false;
        };
        let results = &self.ledger.results;
        let in_rounds = results
            .iter()
            .filter(|r| r.status == Status::Ok && r.windows.is_some() && !r.cached)
            .count();
        let ended = results
            .iter()
            .filter(|r| !r.cached)
            .filter_map(|r| r.windows.as_ref())
            .flat_map(|o| o.ended_s.iter().copied());
        apart(first, second, ended, in_rounds)
    }

    /// How settling at screening stands now ([`Settling`]), from the `ok` results measured in
    /// this run.
    fn settling(&self) -> Settling {
        Settling::of(
            self.ledger
                .results
                .iter()
                .filter(|r| r.status == Status::Ok && !r.cached)
                .filter_map(|r| r.windows.as_ref()),
        )
    }

    /// The best and the contenders that could still beat it, whose estimate is more than
    /// [`RACE_TIES_WITHIN`] above it (measured in this run, best first); only the best when
    /// there are none. A contender could beat the best when its interval overlaps the best's,
    /// or when the fastest it may plausibly run, by how much slower than their fastest the
    /// run's windows ran ([`Slowdowns::floor`]: few windows on a drifting machine may all have
    /// been slow), is below the best's interval.
    fn worth_racing(&self) -> Vec<usize> {
        let results = &self.ledger.results;
        let slowdowns = Slowdowns::of(
            results
                .iter()
                .filter(|r| r.status == Status::Ok)
                .filter_map(|r| r.windows.as_ref()),
        );
        let could_beat = |w: &Windows, best: &Windows| {
            w.overlaps(best) || slowdowns.floor(w) <= best.interval_ms[1]
        };
        worth_racing(
            &self.reaching_best(false, could_beat),
            |p| results[p].median_ms().unwrap_or(f64::INFINITY),
            |p| {
                results[p]
                    .windows
                    .as_ref()
                    .map_or(0, |w| w.medians_ms.len())
            },
        )
    }

    /// The positions of the `ok` results with windows whose interval overlaps the best's (the
    /// best included), best first; those from the results cache only `with_cached`.
    fn overlapping_best(&self, with_cached: bool) -> Vec<usize> {
        self.reaching_best(with_cached, Windows::overlaps)
    }

    /// The positions of the `ok` results whose windows `reach(windows, best's windows)`
    /// (the best included), best first; those from the results cache only `with_cached`.
    fn reaching_best(
        &self,
        with_cached: bool,
        reach: impl Fn(&Windows, &Windows) -> bool,
    ) -> Vec<usize> {
        let results = &self.ledger.results;
        let ok = |p: &usize| {
            let r = &results[*p];
            r.status == Status::Ok && r.windows.is_some() && (with_cached || !r.cached)
        };
        let mut ranked: Vec<usize> = (0..results.len()).filter(ok).collect();
        ranked.sort_by(|&a, &b| {
            let m = |p: usize| results[p].median_ms().unwrap_or(f64::INFINITY);
            m(a).total_cmp(&m(b))
        });
        let Some(&best) = ranked.first() else {
            return Vec::new();
        };
        let best_w = results[best].windows.as_ref().expect("filtered");
        ranked
            .into_iter()
            .filter(|&p| {
                p == best
                    || results[p]
                        .windows
                        .as_ref()
                        .is_some_and(|w| reach(w, best_w))
            })
            .collect()
    }

    /// One round: a window of each of `positions`, in an order shuffled for `round`; windows
    /// found disturbed are measured once more at the round's end. With `settle` (round
    /// [`SETTLE_ROUND`]), a choice measured in one window per round so far whose fastest
    /// window trails the best by more than the run's windows have ever differed
    /// ([`Settling`]) is settled instead (marked there, by position) and not measured again.
    fn window_round(
        &mut self,
        positions: &[usize],
        round: usize,
        tally: &mut Tally,
        mut settle: Option<&mut [bool]>,
    ) {
        let mut order = positions.to_vec();
        let seed = self.options.selection.seed ^ (round as u64).wrapping_mul(0x9E37_79B9);
        fastrand::Rng::with_seed(seed).shuffle(&mut order);
        // The choice measured longest ago first (ties in the shuffled order): a choice's
        // windows then lie about a round apart, not one right after the other.
        let last_ended = |p: usize| {
            self.ledger.results[p]
                .windows
                .as_ref()
                .and_then(|w| w.ended_s.last().copied())
                .unwrap_or(0.0)
        };
        order.sort_by(|&a, &b| last_ended(a).total_cmp(&last_ended(b)));
        let probe = (0..3).map(|_| interference::speed_probe()).min();
        tally.probes.extend(probe);
        let (mut again, mut measured) = (Vec::new(), 0usize);
        let mut settling = self.settling();
        for p in order {
            if self.should_stop() {
                return;
            }
            if let Some(settled) = settle.as_deref_mut()
                && !settled[p]
                && let Some(fastest) = self.ledger.results[p]
                    .windows
                    .as_ref()
                    .filter(|w| w.medians_ms.len() == round)
                    .and_then(|w| w.medians_ms.iter().copied().min_by(f64::total_cmp))
                && settling.settles(fastest)
            {
                settled[p] = true;
                tally.settle_margin = tally.settle_margin.max(settling.margin);
                continue;
            }
            let outcome = self.window(p, round, tally);
            settling = self.settling();
            match outcome {
                Some(true) => again.push(p),
                Some(false) => {}
                None => continue,
            }
            measured += 1;
        }
        // An episode passes; a machine busy all round long stays busy: measuring its windows
        // again would only double the time (their estimate is the fastest window).
        if again.len() * 2 > measured {
            return;
        }
        for p in again {
            // Measured again once: a window stays disturbed on a machine that stays busy.
            if self.should_stop() || tally.remeasured * 2 > tally.windows {
                return;
            }
            tally.remeasured += 1;
            if let Some(w) = self.ledger.results[p].windows.as_mut() {
                w.remeasured += 1;
            }
            self.window(p, round, tally);
        }
    }

    /// Measures one window of the result at position `p`: `Some(disturbed)` when it gave a
    /// time, `None` when it failed (a failure that says something about the choice replaces
    /// its result) or a stop killed it.
    fn window(&mut self, p: usize, round: usize, tally: &mut Tally) -> Option<bool> {
        let request = self.window_request(&self.ledger.results[p], round, false)?;
        let (result, mut conditions) = self.measure_window(&request, false)?;
        let mut result = result.map(|measured| measured.stats);
        if let Ok(stats) = &result
            && let Some(check) = self.check_window(p, round, &request, stats.median_ms)
        {
            match check {
                WindowCheck::Failed(failed) => {
                    say_failed_in_round(self.observer, &failed, round);
                    self.ledger.results[p] = *failed;
                    return None;
                }
                WindowCheck::Checked(checked, around) => {
                    (result, conditions) = (Ok(*checked), around);
                }
                WindowCheck::Dropped => return None,
            }
        }
        let r = &mut self.ledger.results[p];
        match result {
            Ok(measured) if measured.median_ms.is_finite() => {
                tally.windows += 1;
                tally.disturbed += usize::from(conditions.disturbed);
                add_window(r, &measured, conditions);
                Some(conditions.disturbed)
            }
            Ok(_) => None,
            Err(e) if workers::is_transient(&e) => None,
            Err(e) => {
                fail_in_round(r, round, e, &self.setup.device, self.observer);
                None
            }
        }
    }

    /// One window of `request`, and the conditions around it: in the workers of later windows
    /// ([`workers::Measuring::windows_pool`]: reused ones by default), or in a fresh worker
    /// with `fresh`; `None` without a pool.
    fn measure_window(
        &self,
        request: &BenchmarkRequest,
        fresh: bool,
    ) -> Option<(Result<BenchmarkResult, PoolError>, Conditions)> {
        let measuring = self.measuring.as_ref()?;
        let pool = if fresh {
            &measuring.pool
        } else {
            measuring.windows_pool()
        };
        Some(Conditions::around(None, || {
            workers::benchmark_one(pool, request)
        }))
    }

    /// What a round's window of the result at `p` that took `median_ms` must pass before it
    /// counts, as screening's did: `None` when it passes as it is. Below the physical floor
    /// of the outputs it names ([`crate::measure::integrity::below_floor_of`]), the choice is
    /// `suspicious`. Faster than [`CHECK_FASTER_THAN`] of its first window, it is measured
    /// again with its outputs returned and judged as screening judges (verified, after-reps
    /// and fresh-input checks, the floor): a failure is the choice's result, a pass is the
    /// window that counts.
    fn check_window(
        &self,
        p: usize,
        round: usize,
        request: &BenchmarkRequest,
        median_ms: f64,
    ) -> Option<WindowCheck> {
        let r = &self.ledger.results[p];
        let failed = |status: Status, why: String| {
            Some(WindowCheck::Failed(Box::new(ChoiceResult::failed(
                r.index,
                r.choice.clone(),
                status,
                format!("in round {round}: {why}"),
                &self.setup.device,
            ))))
        };
        let floor_bytes = workers::floor_bytes(self.setup.manifest);
        if let Some(why) =
            crate::measure::integrity::below_floor_of(median_ms, floor_bytes, &request.timing)
        {
            return failed(Status::Suspicious, why);
        }
        let first = r.windows.as_ref()?.medians_ms.first().copied()?;
        if median_ms >= first * CHECK_FASTER_THAN {
            return None;
        }
        let checked_request = self.window_request(r, round, true)?;
        // Measured again to be judged as screening judges: in a fresh worker, as screening.
        let (result, conditions) = self.measure_window(&checked_request, true)?;
        if matches!(&result, Err(e) if workers::is_transient(e)) {
            // Stopped, or no worker: the window is dropped, as a failed window is.
            return Some(WindowCheck::Dropped);
        }
        let measuring = self.measuring.as_ref()?;
        let judged = workers::judge(
            r.index,
            r.choice.clone(),
            result,
            measuring.reference.as_deref(),
            measuring.varied.as_ref(),
            self.setup.manifest,
            &self.setup.device,
        );
        match (judged.status, judged.stats) {
            (Status::Ok, Some(stats)) => Some(WindowCheck::Checked(Box::new(stats), conditions)),
            (status, _) => failed(
                status,
                format!(
                    "a window took {median_ms:.4} ms, under half its first window's {first:.4} \
                     ms; measured again with its outputs checked: {}",
                    judged.error.unwrap_or_else(|| status.to_string())
                ),
            ),
        }
    }

    /// The request of one window of `result` in `round`: its screening request with the
    /// window's share of the timing, and no outputs (screening verified them) unless
    /// `outputs`.
    fn window_request(
        &self,
        result: &ChoiceResult,
        round: usize,
        outputs: bool,
    ) -> Option<BenchmarkRequest> {
        window_request(&self.setup, result, round, outputs)
    }

    /// Marks each `ok` result whose interval overlaps the best's as tied with it, and
    /// recomputes metrics at the estimate.
    fn mark_ties(&mut self) {
        let tied = self.overlapping_best(true);
        let manifest = self.setup.manifest;
        for (p, r) in self.ledger.results.iter_mut().enumerate() {
            if let Some(median) = r.median_ms()
                && r.windows.is_some()
                && !r.cached
            {
                r.metrics = manifest.metrics.evaluate(&r.choice, median);
            }
            if let Some(w) = r.windows.as_mut() {
                w.tie = tied.len() > 1 && tied.contains(&p);
            }
        }
    }

    /// The rounds' figures, and how sure the pick is in words.
    fn summary(&self, tally: Tally, load_start: Option<f64>) -> RunConditions {
        let fastest = tally.probes.iter().min().copied();
        let slowest = tally.probes.iter().max().copied();
        let probe_ratio = match (fastest, slowest) {
            (Some(f), Some(s)) if !f.is_zero() => s.as_secs_f64() / f.as_secs_f64(),
            _ => 1.0,
        };
        let busy = tally.disturbed * 10 > tally.windows.max(1) || probe_ratio > SLOW_PROBE;
        let tied = self.overlapping_best(true);
        let ties = tied.len().saturating_sub(1);
        let results = &self.ledger.results;
        // Cached results count too: their windows are as measured, and a run taken whole
        // from the cache must not sound surer than the run that measured it.
        let drift = crate::results::windows::drift(
            results
                .iter()
                .filter(|r| r.status == Status::Ok)
                .filter_map(|r| r.windows.as_ref()),
        );
        RunConditions {
            rounds: self.setup.windows.saturating_sub(1),
            windows: tally.windows,
            disturbed: tally.disturbed,
            remeasured: tally.remeasured,
            raced: tally.raced,
            settled: tally.settled,
            settle_margin: tally.settle_margin,
            confirmed_early: tally.confirmed_early,
            beside_compiles: self.beside_compiles,
            probe_ratio,
            drift,
            load: [
                load_start.unwrap_or(f64::NAN),
                interference::load_average().unwrap_or(f64::NAN),
            ],
            busy,
            confidence: self.confidence(&tied, busy, drift),
            ties,
        }
    }

    /// How sure the pick is: tied with how many, or how far ahead of the next (and whether
    /// that is less than the run's `drift`).
    fn confidence(&self, tied: &[usize], busy: bool, drift: f64) -> String {
        let results = &self.ledger.results;
        let Some(&best) = tied.first() else {
            return "no choice was measured in windows".to_owned();
        };
        let w = results[best].windows.as_ref().expect("windows");
        let n = w.medians_ms.len();
        let best_ms = w.estimate_ms;
        let mut text = if tied.len() > 1 {
            let worst = tied
                .iter()
                .filter_map(|&p| results[p].median_ms())
                .fold(best_ms, f64::max);
            format!(
                "tied with {} (intervals overlap, within {:.1} %)",
                plural(tied.len() - 1),
                (worst / best_ms - 1.0) * 100.0
            )
        } else {
            let next = results
                .iter()
                .filter(|r| r.status == Status::Ok && r.index != results[best].index)
                .filter_map(ChoiceResult::median_ms)
                .fold(f64::INFINITY, f64::min);
            if next.is_finite() {
                let gap = next / best_ms - 1.0;
                // Ahead by less than the machine drifted: a second run may well pick another.
                let word = if !busy && drift > DRIFT_WARN && gap < drift {
                    "ahead"
                } else {
                    "sure"
                };
                format!(
                    "{word}: its interval over {n} windows lies below every other's (next best \
                     +{:.1} %)",
                    gap * 100.0
                )
            } else {
                format!("the only choice measured ok ({n} windows)")
            }
        };
        if busy {
            text.push_str("; the machine was busy, so less sure than it looks");
        } else if drift > DRIFT_WARN {
            text.push_str(&format!(
                "; the machine's speed drifted by {:.0} % across windows, so less sure than it \
                 looks",
                drift * 100.0
            ));
        }
        text
    }
}

/// The request of one window of `result` in `round`: its screening request with the window's
/// share of `setup`'s timing, returning no outputs (screening verified them) unless `outputs`
/// or the choice wrote an input in the windows before (`mutated_inputs`): a window that
/// returns none looks for written inputs only after its reps, and measures them again when it
/// finds one, which a window whose budget its reps fill has no time for; one that returns
/// outputs looks after its first call.
/// Its outputs stay outputs: not restored before every call as inputs the kernel wrote are (a
/// `memset` of each output per call; docs/performance.md, "Issue 33, seventh session"), nor
/// mapped from shared contents.
pub(super) fn window_request(
    setup: &Setup<'_>,
    result: &ChoiceResult,
    round: usize,
    outputs: bool,
) -> Option<BenchmarkRequest> {
    let manifest = setup.manifest;
    let mut request = workers::request(
        manifest,
        &manifest.kernel,
        manifest.launch.as_ref(),
        &result.choice,
    )
    .ok()?;
    request.timing = window_timing(&request.timing, setup.windows, round);
    request.timing.return_outputs = outputs || !result.mutated_inputs.is_empty();
    Some(request)
}

/// Adds the window `measured` measured under `conditions` to `r`: its windows and estimate,
/// and its reps, fastest and slowest over every window (the median is the estimate; mean,
/// p20, p80 and stddev stay the screening window's).
fn add_window(r: &mut ChoiceResult, measured: &TimingStats, conditions: Conditions) {
    let seed = r.index as u64;
    if let (Some(w), Some(stats)) = (r.windows.as_mut(), r.stats.as_mut()) {
        w.add_stats(measured, conditions, seed);
        stats.reps += measured.reps;
        stats.min_ms = stats.min_ms.min(measured.min_ms);
        stats.max_ms = stats.max_ms.max(measured.max_ms);
    }
}

/// Replaces `r` with its failure in a later window: a choice that crashes, hangs or errs in a
/// round is not a choice to pick.
fn fail_in_round(
    r: &mut ChoiceResult,
    round: usize,
    error: PoolError,
    device: &str,
    observer: &dyn Observer,
) {
    let failed = ChoiceResult::failed(
        r.index,
        r.choice.clone(),
        error.status(),
        format!("in round {round}: {:#}", anyhow::Error::new(error)),
        device,
    );
    say_failed_in_round(observer, &failed, round);
    *r = failed;
}

/// Tells `observer` that a choice screening had finished failed in round `round`: a note, not
/// another finished choice (the progress counted it at screening; counting it again read
/// `[5/4]`).
fn say_failed_in_round(observer: &dyn Observer, failed: &ChoiceResult, round: usize) {
    observer.note(&format!(
        "{} failed in round {round} ({}); that is its result now",
        failed.choice.label(),
        failed.status
    ));
}

/// A round's window of `r` measured beside the compiles ([`super::spare`]), the next of its
/// windows (the first round's after screening, then the next round's): counted as the rounds
/// count theirs, unless it would need checking (below the physical floor of its outputs, or
/// under half its first window: [`CHECK_FASTER_THAN`]), in which case it is dropped and the
/// choice keeps its place in the rounds, which check. A failure is the choice's result, as in
/// a round. Whether the window counted.
pub(super) fn spare_window(
    r: &mut ChoiceResult,
    result: Result<BenchmarkResult, PoolError>,
    conditions: Conditions,
    setup: &Setup<'_>,
    observer: &dyn Observer,
) -> bool {
    let Some(round) = r
        .windows
        .as_ref()
        .map(|w| w.medians_ms.len())
        .filter(|&n| r.status == Status::Ok && n >= 1)
    else {
        return false;
    };
    match result {
        Ok(measured) => {
            let stats = measured.stats;
            let first = r.windows.as_ref().map_or(0.0, |w| w.medians_ms[0]);
            let timing = window_timing(&setup.manifest.timing, setup.windows, round);
            let needs_check = !stats.median_ms.is_finite()
                || stats.median_ms < first * CHECK_FASTER_THAN
                || crate::measure::integrity::below_floor_of(
                    stats.median_ms,
                    workers::floor_bytes(setup.manifest),
                    &timing,
                )
                .is_some();
            if !needs_check {
                add_window(r, &stats, conditions);
            }
            !needs_check
        }
        Err(e) if workers::is_transient(&e) => false,
        Err(e) => {
            fail_in_round(r, round, e, &setup.device, observer);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn windows(medians: &[f64]) -> crate::Windows {
        let stats = |m: f64| {
            TimingStats::unmeasured()
                .with_median_ms(m)
                .with_p20_ms(m)
                .with_p80_ms(m)
        };
        let mut w = crate::Windows::first(&stats(medians[0]), Default::default());
        for &m in &medians[1..] {
            w.add_stats(&stats(m), Default::default(), 1);
        }
        w
    }

    /// A choice measured once settles only when neither the best nor any other choice lies
    /// within the largest spread the run's windows have shown: its rank cannot change.
    #[test]
    fn a_choice_settles_at_screening_only_where_no_window_could_move_its_rank() {
        // Four choices measured twice, spreading at most 5 %; four more measured once.
        let measured = [
            windows(&[3.0, 3.05]),
            windows(&[3.3, 3.2]),
            windows(&[4.0, 4.1]),
            windows(&[4.41, 4.2]),
            windows(&[12.0]),
            windows(&[6.0]),
            windows(&[6.1]),
            windows(&[3.1]),
        ];
        let settling = Settling::of(measured.iter());
        assert!((settling.margin().unwrap() - 0.05).abs() < 1e-9);
        // Far behind, nobody within 5 %: settled.
        assert!(settling.settles(12.0));
        // Far behind, but 6.0 and 6.1 could trade places: neither settles.
        assert!(!settling.settles(6.0) && !settling.settles(6.1));
        // Within the margin of the best: it could still win.
        assert!(!settling.settles(3.1));
        // Too few choices measured twice (three of eight): nothing settles.
        let early = Settling::of(measured[1..].iter());
        assert_eq!(early.margin(), None);
        assert!(!early.settles(12.0));
        // A drifting machine (one choice's windows 47 % apart): 12 ms still settles, alone and
        // far; 5.3 ms, with 4.0 and 5.0 within 47 % of it, does not.
        let drifting = [
            windows(&[3.0, 4.4]),
            windows(&[4.0, 4.1]),
            windows(&[5.0, 5.1]),
            windows(&[12.0]),
            windows(&[5.3]),
        ];
        let settling = Settling::of(drifting.iter());
        assert!(settling.settles(12.0));
        assert!(!settling.settles(5.3));
    }

    /// A round's window returns no outputs, unless asked or the choice wrote an input in the
    /// windows before: then it looks for written inputs after its first call rather than
    /// measuring its reps again once it finds one after them, which a window whose reps fill
    /// its budget has no time for.
    #[test]
    fn a_choice_that_wrote_an_input_gets_windows_that_return_outputs() {
        use tunebox_protocol::{DType, TensorSpec};
        let manifest = crate::Manifest::builder("k")
            .c_source(
                "k.c",
                "void k(float *x, float *y) { y[0] = x[0] * X; }",
                "k",
            )
            .compiler("cc")
            .tensor(TensorSpec::new("x", DType::F32, [1]))
            .tensor(TensorSpec::new("y", DType::F32, [1]).output())
            .param("X", [1, 2])
            .verify_against_choice([("X", 1)])
            .build()
            .unwrap();
        let setup = Setup::new(&manifest, "test-cpu", None, Some(1));
        let choice = crate::Choice::new(indexmap::IndexMap::from([("X".into(), 2.into())]));
        let mut result = ChoiceResult::failed(0, choice, Status::Ok, String::new(), "test-cpu");
        let returns = |r: &ChoiceResult, outputs: bool| {
            window_request(&setup, r, 1, outputs)
                .expect("a request")
                .timing
                .return_outputs
        };
        assert!(!returns(&result, false));
        assert!(returns(&result, true));
        result.mutated_inputs = vec!["x".into()];
        assert!(returns(&result, false));
    }

    /// Two agreeing windows confirm a choice's time only with half a round of the run's other
    /// windows between them; one after the other they share the machine's slow stretch.
    #[test]
    fn agreeing_windows_confirm_only_when_apart_by_half_a_round() {
        // Eleven choices in the rounds: five windows of others between is half a round.
        let ended = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 2.0];
        assert!(
            !apart(1.05, 1.15, ended.iter().copied(), 11),
            "back to back"
        );
        assert!(
            !apart(1.05, 1.45, ended.iter().copied(), 11),
            "four between"
        );
        assert!(apart(1.05, 1.55, ended.iter().copied(), 11), "five between");
        // With one other choice, any window of it between will do; alone, no window is needed.
        assert!(apart(1.05, 1.15, ended.iter().copied(), 2));
        assert!(apart(1.05, 1.06, ended.iter().copied(), 1));
    }

    #[test]
    fn contenders_within_a_percent_of_the_best_are_raced_only_to_keep_pace() {
        let estimates = [3.20, 3.21, 3.30, 3.50];
        let estimate = |p: usize| estimates[p];
        let windows = |counts: [usize; 4]| move |p: usize| counts[p];
        // 3.21 is within 1 % of 3.20: a tie no more windows make worth breaking for itself,
        // but with no more windows than the best, it races beside it while others race.
        let even = windows([4, 4, 4, 4]);
        assert_eq!(worth_racing(&[0, 1, 2, 3], estimate, even), [0, 2, 3, 1]);
        let ahead = windows([4, 5, 4, 4]);
        assert_eq!(worth_racing(&[0, 1, 2, 3], estimate, ahead), [0, 2, 3]);
        // Ties alone: the race is over.
        assert_eq!(worth_racing(&[0, 1], estimate, even), [0]);
        assert_eq!(worth_racing(&[], estimate, even), Vec::<usize>::new());
    }
}
