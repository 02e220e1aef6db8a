//! Stage 6 of a run, refining (early elimination, `--refine K`): the best `K` choices are
//! measured again with 4× the reps and ranked by that, so that a lucky screening measurement
//! does not win.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use tunebox_pool::{Pull, Status, TuningProcessPool, run_pulled};
use tunebox_protocol::{BenchmarkRequest, Kernel, TimingConfig};

use super::context::{Ledger, Run, start_measuring};
use super::lookup::cached;
use super::options::REFINE_FACTOR;
use crate::base::error_line;
use crate::base::observer::{Observer, ObserverExt, Phase};
use crate::measure::workers;
use crate::results::fingerprint;
use crate::results::interference::Watch;
use crate::results::windows::Windows;
use crate::results::{ChoiceResult, choices as plural};

/// Most timed reps a refined measurement may ask for.
const MAX_REPS: u32 = 1_000_000;

/// The manifest's timing, stretched for a refined measurement.
pub(crate) fn refined_timing(timing: &TimingConfig) -> TimingConfig {
    let scale = |reps: u32| ((f64::from(reps) * REFINE_FACTOR) as u32).clamp(1, MAX_REPS);
    let mut refined = timing.clone();
    refined.rep_ms *= REFINE_FACTOR;
    if timing.min_reps == timing.max_reps {
        refined.min_reps = scale(timing.min_reps);
    }
    refined.max_reps = scale(timing.max_reps).max(refined.min_reps);
    refined.max_time_ms = timing.max_time_ms.map(|t| t * REFINE_FACTOR);
    refined
}

/// The timeout of a refined measurement: its work, and so its time, grows with
/// [`REFINE_FACTOR`] (and cache flushes can stretch the reps to 10x `rep_ms`).
pub(crate) fn refine_timeout(timeout: Duration) -> Duration {
    timeout.mul_f64(REFINE_FACTOR)
}

/// The note for a choice whose refined measurement `failed`: it keeps its screening result.
fn refine_failed_note(failed: &ChoiceResult, cached: bool) -> String {
    let why = failed
        .error
        .as_deref()
        .map(error_line::short_error_line)
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| failed.status.to_string());
    format!(
        "refine of {} failed{} ({}: {why}); kept its screening result (ranked as unrefined)",
        failed.choice.label(),
        if cached { " (results cache)" } else { "" },
        failed.status
    )
}

impl Run<'_> {
    /// Re-measures the `top` best `ok` results with [`refined_timing`] and [`refine_timeout`]
    /// (from the cache when it has them), replacing their results and keeping the screening
    /// median. A choice whose re-measurement fails keeps its screening result, with a note.
    pub(super) fn refine(&mut self, top: usize) -> Result<()> {
        let timeout = refine_timeout(self.setup.timeout);
        let todo = self.refine_cached(top, timeout)?;
        if todo.is_empty() || !self.refine_pool(timeout)? {
            return Ok(());
        }
        let workers = self.options.workers.clamp(1, todo.len());
        let measuring = self.measuring.as_ref().expect("started by refine_pool");
        let (observer, stop) = (self.observer, self.stop);
        observer.phase(
            Phase::Refining,
            todo.len(),
            &format!(
                "re-measuring the best {} with {REFINE_FACTOR}x rep_ms, timeout {timeout:?}…",
                plural(todo.len())
            ),
        );
        let ledger = &mut self.ledger;
        let notes = &mut self.notes;
        let setup = &self.setup;
        let requests = todo.iter().map(|(_, request, _)| request);
        run_pulled(
            workers,
            &Arc::new(Watch::default()),
            one_by_one(requests, &measuring.pool, timeout, || stop.poll(observer)),
            |i, result, conditions| {
                let conditions = conditions.unwrap_or_default();
                if matches!(&result, Err(e) if workers::is_transient(e)) {
                    return; // The screening result stands.
                }
                let (p, _, key) = &todo[i];
                let screen = ledger.results[*p].median_ms();
                let mut refined = workers::judge(
                    ledger.results[*p].index,
                    ledger.results[*p].choice.clone(),
                    result,
                    measuring.reference.as_deref(),
                    measuring.varied.as_ref(),
                    setup.manifest,
                    &setup.device,
                );
                observer.finished(&refined.choice.label(), refined.status, refined.median_ms());
                refined.screen_median_ms = screen;
                if let Some(stats) = &refined.stats {
                    refined.windows = Some(Windows::first(stats, conditions));
                }
                if let Some(note) = ledger.record_refined(refined, key, timeout, observer) {
                    notes.push(note);
                }
            },
        );
        observer.end_phase();
        Ok(())
    }

    /// Takes the refined results the cache holds for the best `top`; returns the rest to
    /// measure: (position in the results, request, key).
    fn refine_cached(
        &mut self,
        top: usize,
        timeout: Duration,
    ) -> Result<Vec<(usize, BenchmarkRequest, String)>> {
        let setup = &self.setup;
        let mut todo = Vec::new();
        for p in refine_order(&self.ledger.results, top) {
            let screen = self.ledger.results[p].median_ms();
            let choice = self.ledger.results[p].choice.clone();
            let mut request = workers::request(
                setup.manifest,
                &setup.manifest.kernel,
                setup.manifest.launch.as_ref(),
                &choice,
            )?;
            request.timing = refined_timing(&request.timing);
            let key = fingerprint::key(
                &setup.hash,
                &setup.device,
                &request,
                &choice.label(),
                setup.max_process_uses,
                setup.manifest.sandbox(),
            );
            let check = matches!(request.kernel, Kernel::C(_)).then_some(&setup.deps_check);
            let index = self.ledger.results[p].index;
            let cache = self.ledger.cache.as_ref();
            let hit = cached(cache, (&key, check), setup, timeout, index, &choice);
            if hit.is_some()
                && let Some(c) = self.ledger.cache.as_mut()
                && let Err(e) = c.adopt(&key)
            {
                self.ledger.warnings.warn(
                    self.observer,
                    crate::base::observer::WarningKind::ResultsCache,
                    &format!("{e:#}"),
                );
            }
            // A refined line is complete as written (one window, no rounds).
            match hit.map(|hit| hit.result) {
                Some(mut refined) if refined.status == Status::Ok => {
                    refined.screen_median_ms = screen;
                    self.ledger.results[p] = refined;
                }
                Some(failed) => self.notes.push(refine_failed_note(&failed, true)),
                None => todo.push((p, request, key)),
            }
        }
        Ok(todo)
    }

    /// Readies the pool refined choices are measured in, each with its own `timeout`: the
    /// screening pool, alone (the reused workers of later windows are shut down), or, when
    /// every choice came from the cache, a pool started now. `false`: the run was stopped.
    fn refine_pool(&mut self, timeout: Duration) -> Result<bool> {
        let started = match self.measuring.as_mut() {
            Some(screening) => {
                if let Some(warm) = screening.warm.take() {
                    warm.shutdown(Duration::from_millis(500));
                }
                Ok(())
            }
            None => {
                let workers = self.options.workers.max(1);
                start_measuring(self, workers, timeout).map(|b| self.measuring = Some(b))
            }
        };
        match started {
            Ok(()) if self.stop.poll(self.observer) => Ok(false),
            Ok(()) => Ok(true),
            Err(_) if self.stop.requested() => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// A source for [`run_pulled`] that hands out `requests` in order (each job its position), on
/// `pool` with `timeout`, until they are all handed out or `stop` says so.
fn one_by_one<'p, 'r: 'p>(
    requests: impl Iterator<Item = &'r BenchmarkRequest>,
    pool: &'p TuningProcessPool,
    timeout: Duration,
    stop: impl Fn() -> bool,
) -> impl FnMut() -> Pull<'p, usize> {
    let mut requests = requests.enumerate();
    move || match requests.next() {
        Some((job, request)) if !stop() => Pull::Request {
            job,
            pool,
            request: request.clone(),
            timeout: Some(timeout),
        },
        _ => Pull::Done,
    }
}

impl Ledger {
    /// A refined result: cached under its refined `key` (measured with `timeout`), with the
    /// headers of its screening line; kept in place of the screening result when `ok`, else
    /// the screening result stands and the note says why.
    pub(super) fn record_refined(
        &mut self,
        refined: ChoiceResult,
        key: &str,
        timeout: Duration,
        observer: &dyn Observer,
    ) -> Option<String> {
        self.cache_line(&refined, key, timeout, true, observer);
        if refined.status == Status::Ok {
            self.keep(refined);
            None
        } else {
            // A choice that was ok keeps its rank: the screening result stands.
            Some(refine_failed_note(&refined, false))
        }
    }
}

/// Stage 6: which results to refine: the positions in `results` of the `top` fastest `ok`
/// ones that were measured, fastest first (equal medians: lower index first).
pub fn refine_order(results: &[ChoiceResult], top: usize) -> Vec<usize> {
    let mut best: Vec<usize> = (0..results.len())
        .filter(|&p| results[p].status == Status::Ok && results[p].stats.is_some())
        .collect();
    best.sort_by(|&a, &b| {
        let (a, b) = (&results[a], &results[b]);
        a.median_ms()
            .unwrap_or(f64::INFINITY)
            .total_cmp(&b.median_ms().unwrap_or(f64::INFINITY))
            .then(a.index.cmp(&b.index))
    });
    best.truncate(top);
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(index: usize, status: Status, median: Option<f64>) -> ChoiceResult {
        let choice = crate::space::Choice::new(
            [("X".to_owned(), crate::space::ParamValue::Int(index as i64))]
                .into_iter()
                .collect(),
        );
        let mut r = ChoiceResult::failed(index, choice, status, String::new(), "cpu");
        r.stats = median.map(|m| tunebox_protocol::TimingStats::unmeasured().with_median_ms(m));
        r
    }

    #[test]
    fn refine_takes_the_fastest_ok_results_first() {
        let results = [
            result(0, Status::Ok, Some(3.0)),
            result(1, Status::Wrong, Some(0.1)),
            result(2, Status::Ok, Some(1.0)),
            result(3, Status::Ok, None),
            result(4, Status::Ok, Some(2.0)),
            result(5, Status::Ok, Some(1.0)),
            result(6, Status::Timeout, None),
        ];
        // Wrong, unmeasured and failed choices are never refined; ties go to the lower index.
        assert_eq!(refine_order(&results, 3), [2, 5, 4]);
        assert_eq!(refine_order(&results, 10), [2, 5, 4, 0]);
        assert!(refine_order(&results, 0).is_empty());
        assert!(refine_order(&[], 5).is_empty());
    }

    #[test]
    fn refined_timing_stretches_the_budget() {
        let t = TimingConfig::default();
        let r = refined_timing(&t);
        assert_eq!(r.rep_ms, 4.0 * t.rep_ms);
        assert_eq!(r.min_reps, t.min_reps);
        assert_eq!(r.max_reps, 4 * t.max_reps);
        // Kernel Tuner's fixed iterations: four times as many.
        let fixed = TimingConfig::default().min_reps(7).max_reps(7);
        let r = refined_timing(&fixed);
        assert_eq!((r.min_reps, r.max_reps), (28, 28));
        // Four times the work gets four times the time.
        assert_eq!(
            refine_timeout(Duration::from_millis(2500)),
            Duration::from_secs(10)
        );
    }
}
