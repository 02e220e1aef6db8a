//! A choice's time over many short windows: the estimate, its interval, and the evidence.
//!
//! Interference (another process, a busy SMT sibling, a neighbour on the host, memory traffic
//! of another core) only ever slows a kernel down: a disturbed window's median is too high,
//! never too low. So a choice's time is the fastest of its windows' medians, not their mean:
//! [`Windows::estimate_ms`] stays put until every window is slowed, and moves by the in-window
//! noise alone otherwise (each window's median already sets aside a lucky or unlucky rep).
//! Every window counts, flagged disturbed ([`crate::results::interference::Conditions`]) or not: a
//! disturbed window can only raise its median, which the minimum ignores. The interval is a
//! bootstrap percentile interval of that estimate (90 %, 400 resamples of the windows, a fixed
//! seed per choice so that reports are reproducible); with one window, the window's own
//! p20-p80.

use serde::{Deserialize, Serialize};
use tunebox_protocol::TimingStats;

use crate::results::interference::Conditions;

/// The quantile of the windows' medians that estimates a choice's time: the fastest.
pub(crate) const ESTIMATE_QUANTILE: f64 = 0.0;
/// Bootstrap resamples for the interval.
const RESAMPLES: usize = 400;
/// Quiet windows a result needs before the results cache keeps it as final.
pub(crate) const SETTLED_WINDOWS: usize = 2;
/// Two windows agree when their medians are this close or closer, whatever their reps' noise
/// says ([`Windows::confirmed`]): about what a window's median moves between runs on a quiet
/// machine (the same 1 % as the race's ties).
pub(crate) const AGREE_AT_LEAST: f64 = 0.01;
/// Two windows never agree further apart than this, however noisy their reps: a window whose
/// reps spread that much says little, and another window is cheaper than a wrong rank.
pub(crate) const AGREE_AT_MOST: f64 = 0.03;
/// Standard errors two windows' medians may differ by and still agree (about 95 %).
const AGREE_Z: f64 = 2.0;

/// A choice's windows: each one's median and conditions, and what they add up to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Windows {
    /// Each window's median, ms, in the order measured (the first is the screening window).
    pub medians_ms: Vec<f64>,
    /// Each window's noise (by the same position): the relative standard error of its median,
    /// from its reps' spread (`1.2533 σ / √reps / median`; 0 when unknown, e.g. one rep, or
    /// results recorded before it was kept). What [`Windows::confirmed`] allows two windows
    /// to differ by.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub noise: Vec<f64>,
    /// Whether each window was disturbed (by the same position).
    pub disturbed: Vec<bool>,
    /// When each window ended, seconds since the Unix epoch (by the same position; empty in
    /// results recorded before it was kept): the windows of a run in the order they ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ended_s: Vec<f64>,
    /// The other CPUs' largest busy share in any window (0-1).
    #[serde(default)]
    pub worst_busy: f64,
    /// The estimate, ms: the fastest of the windows' medians.
    pub estimate_ms: f64,
    /// The estimate's 90 % interval, ms.
    pub interval_ms: [f64; 2],
    /// Windows measured again because they were disturbed.
    #[serde(default)]
    pub remeasured: usize,
    /// Its interval overlaps the best's (set when the run ranks).
    #[serde(default)]
    pub tie: bool,
}

impl Windows {
    /// The windows of a choice measured once: `stats`' median under `conditions`.
    pub(crate) fn first(stats: &TimingStats, conditions: Conditions) -> Windows {
        let mut w = Windows {
            medians_ms: Vec::new(),
            noise: Vec::new(),
            disturbed: Vec::new(),
            ended_s: Vec::new(),
            worst_busy: 0.0,
            estimate_ms: stats.median_ms,
            interval_ms: [stats.p20_ms, stats.p80_ms],
            remeasured: 0,
            tie: false,
        };
        w.push(stats.median_ms, median_noise(stats), conditions);
        w.interval_ms = [
            stats.p20_ms.min(stats.median_ms),
            stats.p80_ms.max(stats.median_ms),
        ];
        w
    }

    /// Adds a window of median `median_ms` whose noise is not known, and estimates again
    /// (`seed`: the choice's, for the bootstrap).
    #[cfg(test)]
    pub(crate) fn add(&mut self, median_ms: f64, conditions: Conditions, seed: u64) {
        self.push(median_ms, 0.0, conditions);
        self.estimate(seed);
    }

    /// Adds the window `stats` measured, and estimates again (`seed`: the choice's).
    pub(crate) fn add_stats(&mut self, stats: &TimingStats, conditions: Conditions, seed: u64) {
        self.push(stats.median_ms, median_noise(stats), conditions);
        self.estimate(seed);
    }

    fn push(&mut self, median_ms: f64, noise: f64, conditions: Conditions) {
        // Results recorded before noise was kept have none: their windows' noise is unknown.
        self.noise.resize(self.medians_ms.len(), 0.0);
        self.noise.push(noise);
        self.medians_ms.push(median_ms);
        self.disturbed.push(conditions.disturbed);
        self.ended_s.push(conditions.ended_s);
        self.worst_busy = self.worst_busy.max(conditions.other_busy);
    }

    fn quiet(&self) -> impl Iterator<Item = f64> + '_ {
        self.medians_ms
            .iter()
            .zip(&self.disturbed)
            .filter(|(_, d)| !**d)
            .map(|(m, _)| *m)
    }

    /// Windows flagged disturbed.
    pub fn disturbed_count(&self) -> usize {
        self.disturbed.iter().filter(|d| **d).count()
    }

    /// Whether enough quiet windows back the estimate for the results cache to take it as
    /// final: [`SETTLED_WINDOWS`] of them, or every window of a choice measured in fewer.
    pub(crate) fn settled(&self) -> bool {
        let quiet = self.quiet().count();
        quiet >= 1 && quiet >= SETTLED_WINDOWS.min(self.medians_ms.len())
    }

    /// Estimates from every window: [`ESTIMATE_QUANTILE`] of their medians, and its bootstrap
    /// interval.
    pub(crate) fn estimate(&mut self, seed: u64) {
        let all = &self.medians_ms;
        if all.len() < 2 {
            return;
        }
        self.estimate_ms = quantile(all, ESTIMATE_QUANTILE);
        self.interval_ms = bootstrap(all, seed);
    }

    /// Whether the estimate is confirmed: its two fastest windows agree, within what their
    /// medians' noise explains (two standard errors of the difference), at least 1 % and at
    /// most 3 % apart. Interference only slows a
    /// window, so a lone fastest window may still be a slowed one (every window so far in a
    /// slow episode, or the only one); a second that agrees with it says the machine gave the
    /// same time twice, apart in time. Disturbed windows take no part: one slowed by another
    /// process (or, for a thread team, by a compile beside it) agrees with another slowed one
    /// as readily. `false` with fewer than two quiet windows.
    pub fn confirmed(&self) -> bool {
        self.agreeing_pair().is_some()
    }

    /// The two fastest windows, by position, when they agree as [`Windows::confirmed`] says.
    fn agreeing_pair(&self) -> Option<(usize, usize)> {
        let mut by_time: Vec<(usize, f64, f64)> = self
            .medians_ms
            .iter()
            .zip(self.noise.iter().chain(std::iter::repeat(&0.0)))
            .enumerate()
            .filter(|(i, _)| !self.disturbed.get(*i).copied().unwrap_or(false))
            .map(|(i, (&m, &n))| (i, m, n))
            .collect();
        if by_time.len() < 2 {
            return None;
        }
        by_time.sort_by(|a, b| a.1.total_cmp(&b.1));
        let ((i, fast, fast_noise), (j, next, next_noise)) = (by_time[0], by_time[1]);
        if fast.is_nan() || fast <= 0.0 {
            return None;
        }
        let allowed = (AGREE_Z * fast_noise.hypot(next_noise)).clamp(AGREE_AT_LEAST, AGREE_AT_MOST);
        (next / fast - 1.0 <= allowed).then_some((i, j))
    }

    /// When the two agreeing windows of [`Windows::confirmed`] ended (seconds since the Unix
    /// epoch), the earlier first: `None` when they do not agree, or their end is not known.
    /// Two windows taken close together share whatever slowed the machine then; their caller
    /// judges whether they lie far enough apart to confirm anything.
    pub(crate) fn agreeing_ended(&self) -> Option<(f64, f64)> {
        let (i, j) = self.agreeing_pair()?;
        let (a, b) = (*self.ended_s.get(i)?, *self.ended_s.get(j)?);
        (a > 0.0 && b > 0.0).then(|| (a.min(b), a.max(b)))
    }

    /// The largest ratio of a window's median to another's, less 1 (0.3: the slowest window
    /// is 30 % slower than the fastest); 0 with fewer than two windows.
    pub(crate) fn spread(&self) -> f64 {
        spread(&self.medians_ms)
    }

    /// Whether this interval and `other`'s overlap.
    pub fn overlaps(&self, other: &Windows) -> bool {
        self.interval_ms[0] <= other.interval_ms[1] && other.interval_ms[0] <= self.interval_ms[1]
    }
}

/// How much slower than each choice's fastest window the run's windows ran: what says how
/// far a choice measured in few windows may still be from its own fastest time on a machine
/// whose speed drifts (every one of its windows in a slow stretch).
///
/// Taken from the run itself: over the choices with at least two windows after the first
/// (the screening window is left out, as in [`drift`]), each of those windows' median over
/// the choice's fastest, less 1. Windows of one choice are taken apart in time (rounds,
/// shuffled), so each is a draw of the machine's speed at the time.
#[derive(Debug, Clone, Default)]
pub(crate) struct Slowdowns {
    /// Sorted, ascending (0: a choice's fastest window).
    sorted: Vec<f64>,
}

/// Slowdowns the run must have seen before [`Slowdowns::floor`] widens anything.
const SLOWDOWNS_MIN: usize = 8;
/// The chance [`Slowdowns::floor`] leaves that a choice is faster still.
const FLOOR_RISK: f64 = 0.05;

impl Slowdowns {
    /// The slowdowns of `windows` (see [`Slowdowns`]).
    pub(crate) fn of<'a>(windows: impl Iterator<Item = &'a Windows>) -> Slowdowns {
        let mut sorted: Vec<f64> = windows
            .filter(|w| w.medians_ms.len() > DRIFT_MIN_WINDOWS)
            .flat_map(|w| {
                let rounds = &w.medians_ms[1..];
                let fastest = rounds.iter().copied().fold(f64::INFINITY, f64::min);
                rounds
                    .iter()
                    .filter(move |_| fastest > 0.0 && fastest.is_finite())
                    .map(move |&m| m / fastest - 1.0)
            })
            .filter(|s| s.is_finite())
            .collect();
        sorted.sort_by(f64::total_cmp);
        Slowdowns { sorted }
    }

    /// The fastest `w`'s choice may plausibly run, ms: its estimate, less the slowdown that
    /// all of its `k` windows would exceed together with a chance of only [`FLOOR_RISK`]
    /// (each window independently slowed by more than `d` with the run's share `p(d)`, so all
    /// `k` with `p(d)^k`). Many windows: about the estimate; one or two on a drifting machine:
    /// well below it. The estimate itself until the run has seen [`SLOWDOWNS_MIN`] slowdowns.
    pub(crate) fn floor(&self, w: &Windows) -> f64 {
        let k = w.medians_ms.len().max(1) as f64;
        if self.sorted.len() < SLOWDOWNS_MIN {
            return w.estimate_ms;
        }
        let exceeded_by_all = FLOOR_RISK.powf(1.0 / k);
        let slowdown = quantile(&self.sorted, 1.0 - exceeded_by_all).max(0.0);
        w.estimate_ms / (1.0 + slowdown)
    }
}

/// Windows after the first a choice needs before its spread counts toward [`drift`].
const DRIFT_MIN_WINDOWS: usize = 2;

/// How far the machine's speed drifted during a run, by what its choices' windows show: the
/// median, over `windows` with at least two windows after the first each, of the slowest of
/// those windows' medians over the fastest, less 1 (0.25: a choice's slowest window is
/// typically 25 % slower than its fastest); 0 with none. The first (screening) window is left
/// out: it warms up, and with several workers it runs beside another one, so it differs from
/// the rounds' windows for reasons of tunebox's own. On a steady machine only the noise of a
/// window's median is left (a few %); the 2-vCPU VM, whose vCPU switches between a
/// fast and a slow mode for seconds at a time, gave 0.10-0.33 in 20 idle runs of the main
/// job, with nothing else running and nothing in `/proc/stat` to show it
/// (docs/performance.md). Measured from the run itself, so it holds on any machine, and costs
/// nothing.
pub(crate) fn drift<'a>(windows: impl Iterator<Item = &'a Windows>) -> f64 {
    let spreads: Vec<f64> = windows
        .filter(|w| w.medians_ms.len() > DRIFT_MIN_WINDOWS)
        .map(|w| spread(&w.medians_ms[1..]))
        .collect();
    // The true median (two choices: the mean of their spreads, not the larger).
    let median = quantile(&spreads, 0.5);
    if median.is_nan() { 0.0 } else { median }
}

/// The relative standard error of a window's median, from its reps: `1.2533 σ / √reps`, over
/// the median (the asymptotic error of a sample median of a normal population); 0 for a
/// window of one rep or a median of 0.
fn median_noise(stats: &TimingStats) -> f64 {
    if stats.reps < 2
        || stats.median_ms.is_nan()
        || stats.median_ms <= 0.0
        || !stats.stddev_ms.is_finite()
    {
        return 0.0;
    }
    1.2533 * stats.stddev_ms / f64::from(stats.reps).sqrt() / stats.median_ms
}

/// The slowest of `medians` over the fastest, less 1; 0 when they are not all positive.
fn spread(medians: &[f64]) -> f64 {
    let slowest = medians.iter().copied().fold(f64::NAN, f64::max);
    let fastest = medians.iter().copied().fold(f64::NAN, f64::min);
    if fastest > 0.0 {
        slowest / fastest - 1.0
    } else {
        0.0
    }
}

/// The `q` quantile of `values` (linear interpolation between order statistics, numpy's
/// default); NaN for none.
pub(crate) fn quantile(values: &[f64], q: f64) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo as f64)
}

/// The 5th and 95th percentiles of the estimate over bootstrap resamples of `values`.
fn bootstrap(values: &[f64], seed: u64) -> [f64; 2] {
    let mut rng = fastrand::Rng::with_seed(seed ^ 0x0074_756E_6562_6F78);
    let mut estimates = Vec::with_capacity(RESAMPLES);
    let mut sample = vec![0.0; values.len()];
    for _ in 0..RESAMPLES {
        for s in sample.iter_mut() {
            *s = values[rng.usize(..values.len())];
        }
        estimates.push(quantile(&sample, ESTIMATE_QUANTILE));
    }
    [quantile(&estimates, 0.05), quantile(&estimates, 0.95)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quiet() -> Conditions {
        Conditions::default()
    }

    fn busy() -> Conditions {
        Conditions {
            other_busy: 1.0,
            steal: 0.0,
            disturbed: true,
            ended_s: 0.0,
            took_s: 0.0,
        }
    }

    fn stats(median: f64) -> TimingStats {
        TimingStats::unmeasured()
            .with_median_ms(median)
            .with_p20_ms(median * 0.99)
            .with_p80_ms(median * 1.01)
    }

    #[test]
    fn quantiles_interpolate_as_numpy() {
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0], 0.25), 1.75);
        assert_eq!(quantile(&[4.0, 1.0], 0.5), 2.5);
        assert_eq!(quantile(&[3.0], 0.25), 3.0);
        assert!(quantile(&[], 0.5).is_nan());
    }

    /// The one-sidedness at work: windows slowed by an episode (undetected, so they are not
    /// left out) move the mean and the median of the windows, not the estimate.
    #[test]
    fn slow_windows_do_not_move_the_estimate() {
        let mut w = Windows::first(&stats(3.2), quiet());
        for m in [3.21, 7.3, 3.19, 7.2, 3.2, 3.22, 7.4] {
            w.add(m, quiet(), 1);
        }
        let median = quantile(&w.medians_ms, 0.5);
        assert!(median > 3.2, "{median}");
        assert!((w.estimate_ms - 3.2).abs() < 0.02, "{w:?}");
        assert!(w.interval_ms[0] <= w.estimate_ms && w.estimate_ms <= w.interval_ms[1]);
        assert!(w.interval_ms[1] < 3.5, "{w:?}");
        assert!(w.settled());
    }

    fn windows_of(medians: &[f64]) -> Windows {
        let mut w = Windows::first(&stats(medians[0]), quiet());
        for &m in &medians[1..] {
            w.add(m, quiet(), 1);
        }
        w
    }

    /// On a drifting machine (a third of windows 25 % slow), two agreeing windows are not
    /// enough to rule a choice out: its floor lies below a rival 10 % faster. Eight windows
    /// are, and on a steady machine two are.
    #[test]
    fn a_choice_measured_in_few_windows_may_be_faster_than_its_estimate() {
        let drifting: Vec<Windows> = (0..6)
            .map(|_| windows_of(&[9.0, 2.0, 2.5, 2.0, 2.5, 2.0, 2.0]))
            .collect();
        let slowdowns = Slowdowns::of(drifting.iter());
        let two = windows_of(&[3.3, 3.3]);
        assert_eq!(two.estimate_ms, 3.3);
        assert!(slowdowns.floor(&two) < 3.0, "{}", slowdowns.floor(&two));
        let eight = windows_of(&[3.3; 8]);
        assert!(slowdowns.floor(&eight) > 3.2, "{}", slowdowns.floor(&eight));
        let steady: Vec<Windows> = (0..6)
            .map(|_| windows_of(&[9.0, 2.0, 2.01, 2.0, 2.02, 2.0, 2.0]))
            .collect();
        assert!(Slowdowns::of(steady.iter()).floor(&two) > 3.2);
        // Too few slowdowns seen: the estimate stands.
        assert_eq!(Slowdowns::of(drifting[..1].iter()).floor(&two), 3.3);
    }

    /// The VM idle: most choices saw both its fast and its slow mode (+27 %) in their
    /// rounds' windows; the first (screening) window does not count.
    #[test]
    fn the_drift_is_what_a_choices_windows_show() {
        let drifting = [
            windows_of(&[9.0, 2.60, 3.30, 2.62, 3.31]),
            windows_of(&[3.10, 3.12, 3.95, 3.90]),
            windows_of(&[1.0, 4.70, 4.72, 5.97, 4.71]),
            windows_of(&[3.3, 3.3]),
        ];
        let d = drift(drifting.iter());
        assert!((d - 0.27).abs() < 0.01, "{d}");
        let steady = [
            windows_of(&[2.0, 2.6, 2.62, 2.61]),
            windows_of(&[3.1, 3.12, 3.15]),
        ];
        assert!(
            drift(steady.iter()) < 0.02,
            "a slow first window is not drift"
        );
        // Two choices: the median is the mean of their spreads, not the larger.
        let two = [windows_of(&[1.0, 1.0, 1.2]), windows_of(&[1.0, 1.0, 2.0])];
        assert!((drift(two.iter()) - 0.6).abs() < 1e-9);
        assert_eq!(
            drift(drifting[3..].iter()),
            0.0,
            "one later window tells nothing"
        );
        assert_eq!(drift(std::iter::empty()), 0.0);
    }

    #[test]
    fn a_disturbed_window_only_raises_its_median_and_two_quiet_ones_settle() {
        let mut w = Windows::first(&stats(6.0), busy());
        assert!(!w.settled());
        w.add(3.0, quiet(), 1);
        // One quiet window: the fastest stands, but it is not enough to settle.
        assert_eq!(w.estimate_ms, 3.0);
        assert!(!w.settled());
        w.add(3.1, quiet(), 1);
        assert!(w.settled());
        assert_eq!(w.disturbed_count(), 1);
        assert_eq!(w.estimate_ms, 3.0);
        assert!(w.interval_ms[0] <= 3.0 && w.interval_ms[1] <= 6.0, "{w:?}");
        // Measured once, one quiet window settles.
        assert!(Windows::first(&stats(1.0), quiet()).settled());
    }

    /// Slowed in all but one window (a neighbour's memory traffic through most of the run,
    /// which /proc/stat may not even see), a choice keeps its time.
    #[test]
    fn one_window_in_the_clear_is_enough() {
        let mut w = Windows::first(&stats(7.4), quiet());
        w.add(5.36, quiet(), 3);
        w.add(6.7, quiet(), 3);
        assert_eq!(w.estimate_ms, 5.36);
    }

    /// An estimate is confirmed once two windows agree within their reps' noise (at least
    /// 1 %, at most 3 %), whichever windows they are; one slowed window does not confirm.
    #[test]
    fn two_windows_that_agree_confirm_the_estimate() {
        let noisy = |median: f64, stddev: f64, reps: u32| {
            stats(median)
                .with_median_ms(median)
                .with_stddev_ms(stddev)
                .with_reps(reps)
        };
        let mut w = Windows::first(&noisy(5.0, 0.0, 3), quiet());
        assert!(!w.confirmed(), "one window");
        // Slowed by an episode at screening, then the clean time: not yet.
        w.add_stats(&noisy(3.6, 0.0, 3), quiet(), 1);
        assert!(!w.confirmed());
        // A second clean window 0.5 % away: confirmed (the 1 % floor).
        w.add_stats(&noisy(3.618, 0.0, 3), quiet(), 1);
        assert!(w.confirmed());
        // Noisy reps widen what agrees: 2.4 % apart with a 1 % standard error each.
        let mut w = Windows::first(&noisy(3.0, 0.048, 4), quiet());
        w.add_stats(&noisy(3.072, 0.049, 4), quiet(), 1);
        assert!(w.noise[0] > 0.009 && w.noise[0] < 0.011, "{:?}", w.noise);
        assert!(w.confirmed());
        // ... but never beyond 3 %, however noisy.
        let mut w = Windows::first(&noisy(3.0, 1.0, 4), quiet());
        w.add_stats(&noisy(3.1, 1.0, 4), quiet(), 1);
        assert!(!w.confirmed());
        // Windows recorded without their noise agree within the floor.
        let w = windows_of(&[3.0, 3.02]);
        assert!(w.confirmed() && w.noise.iter().all(|n| *n == 0.0));
        // A disturbed window confirms nothing, however well it agrees (a two-thread kernel's
        // window beside a compile, 5.88 ms, and a second slow one, 5.72 ms, where its quiet
        // windows took 3.05 ms).
        let disturbed = Conditions {
            disturbed: true,
            ..quiet()
        };
        let mut w = Windows::first(&noisy(5.88, 0.0, 3), disturbed);
        w.add_stats(&noisy(5.72, 0.0, 3), quiet(), 1);
        assert!(!w.confirmed());
        w.add_stats(&noisy(5.75, 0.0, 3), quiet(), 2);
        assert!(w.confirmed(), "two quiet windows agree");
    }

    /// The two agreeing windows are named by when they ended, the earlier first, for the run
    /// to judge whether they lie apart; none when they disagree or their ends are unknown.
    #[test]
    fn the_agreeing_windows_say_when_they_ended() {
        let at = |s: f64| Conditions {
            ended_s: s,
            ..quiet()
        };
        let mut w = Windows::first(&stats(3.0), at(10.0));
        w.add_stats(&stats(3.9), at(11.0), 1);
        assert_eq!(w.agreeing_ended(), None, "3.0 and 3.9 disagree");
        w.add_stats(&stats(2.99), at(12.0), 1);
        assert_eq!(w.agreeing_ended(), Some((10.0, 12.0)));
        assert_eq!(
            windows_of(&[3.0, 3.0]).agreeing_ended(),
            None,
            "no end recorded"
        );
    }

    #[test]
    fn intervals_overlap_or_separate() {
        let mut a = Windows::first(&stats(1.0), quiet());
        let mut b = Windows::first(&stats(1.005), quiet());
        assert!(a.overlaps(&b));
        for m in [1.0, 1.001, 0.999] {
            a.add(m, quiet(), 1);
        }
        for m in [1.5, 1.51, 1.49] {
            b.add(m, quiet(), 2);
        }
        assert!(!a.overlaps(&b), "{a:?} {b:?}");
    }
}
