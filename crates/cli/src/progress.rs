//! Progress on stderr: indicatif bars on a terminal (counts, ETA, failures so far, best so far),
//! one plain line per finished choice otherwise (a batch job's log), nothing with `--quiet`.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tunebox_pool::Status;
use tunebox_tune::{Event, Observer, Phase};

use crate::table::format_time;

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Quiet,
    /// A line per event: stderr is not a terminal, or debug logs are on (`-v`), which a bar
    /// would garble.
    Lines,
    Bars,
}

/// The progress of a run, shared by the threads that report to it.
///
/// Benchmarking is counted over the whole run once the engine says how many choices it plans
/// (`Event::Planned`): an adaptive search's rounds of a few choices each then continue one bar
/// (one count, one ETA) instead of starting a `1/1` bar each, and cached choices count as done.
#[derive(Debug)]
pub(crate) struct Progress {
    mode: Mode,
    bar: Mutex<Option<ProgressBar>>,
    total: AtomicUsize,
    done: AtomicUsize,
    failed: AtomicUsize,
    /// The choices the whole run plans to finish (0: not said).
    planned: AtomicUsize,
    /// Benchmarking over the whole run has started (its bar or line is shown once).
    run_phase: std::sync::atomic::AtomicBool,
    /// The best `ok` median so far and its choice.
    best: Mutex<Option<(f64, String)>>,
    /// The warnings shown (`warning: …` notes, unless quiet), so that the end of the run need
    /// not say them again.
    warned: Mutex<Vec<String>>,
}

impl Progress {
    /// Bars when stderr is a terminal and neither `quiet` nor `verbose`.
    pub(crate) fn new(quiet: bool, verbose: bool) -> Progress {
        let mode = if quiet {
            Mode::Quiet
        } else if verbose || !std::io::stderr().is_terminal() {
            Mode::Lines
        } else {
            Mode::Bars
        };
        Progress {
            mode,
            bar: Mutex::new(None),
            total: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            failed: AtomicUsize::new(0),
            planned: AtomicUsize::new(0),
            run_phase: std::sync::atomic::AtomicBool::new(false),
            best: Mutex::new(None),
            warned: Mutex::new(Vec::new()),
        }
    }

    /// A line for the user (above the bar, if one is shown).
    pub(crate) fn note(&self, message: &str) {
        if self.mode != Mode::Quiet
            && let Some(warning) = message.strip_prefix("warning: ")
        {
            self.warned
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(warning.to_owned());
        }
        match self.mode {
            Mode::Quiet => {}
            Mode::Lines => eprintln!("tunebox: {message}"),
            Mode::Bars => match &*self.lock_bar() {
                Some(bar) => bar.println(format!("tunebox: {message}")),
                None => eprintln!("tunebox: {message}"),
            },
        }
    }

    /// Starts a phase of `total` steps (`compiling`, `benchmarking`, `refining`); without a bar,
    /// `line` says what starts.
    pub(crate) fn phase(&self, name: &str, total: usize, line: &str) {
        let planned = self.planned.load(Ordering::Relaxed);
        let whole_run = planned > 0 && name == Phase::Benchmarking.name();
        if whole_run && self.run_phase.load(Ordering::Relaxed) {
            // A later round of the same run: the bar (or the line) goes on.
            return;
        }
        self.clear_bar();
        self.run_phase.store(whole_run, Ordering::Relaxed);
        if whole_run {
            // Cached choices before the first round count as done.
            self.total.store(planned, Ordering::Relaxed);
        } else {
            self.total.store(total, Ordering::Relaxed);
            self.done.store(0, Ordering::Relaxed);
            self.failed.store(0, Ordering::Relaxed);
        }
        let round = total;
        let total = self.total.load(Ordering::Relaxed);
        match self.mode {
            Mode::Quiet => {}
            Mode::Lines if whole_run && planned > round => eprintln!(
                "tunebox: {line} (the first round of a search of up to {planned} choices)"
            ),
            Mode::Lines => eprintln!("tunebox: {line}"),
            Mode::Bars => {
                let bar =
                    ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr())
                        .with_style(
                            ProgressStyle::with_template(
                                "{prefix:>12} [{bar:24}] {pos}/{len} {elapsed_precise} (ETA {eta}) \
                         {wide_msg}",
                            )
                            .expect("the template is valid")
                            .progress_chars("=> "),
                        )
                        .with_prefix(name.to_owned());
                bar.set_position(self.done.load(Ordering::Relaxed).min(total) as u64);
                bar.enable_steady_tick(Duration::from_millis(200));
                *self.lock_bar() = Some(bar);
            }
        }
    }

    /// One choice finished with `status` (and its median, when measured).
    pub(crate) fn finished(&self, label: &str, status: Status, median_ms: Option<f64>) {
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        let failed = if status == Status::Ok {
            self.failed.load(Ordering::Relaxed)
        } else {
            self.failed.fetch_add(1, Ordering::Relaxed) + 1
        };
        let best = {
            let mut best = self.best.lock().unwrap_or_else(|e| e.into_inner());
            if let (Status::Ok, Some(median)) = (status, median_ms)
                && best.as_ref().is_none_or(|(b, _)| median < *b)
            {
                *best = Some((median, label.to_owned()));
            }
            best.clone()
        };
        match self.mode {
            Mode::Quiet => {}
            Mode::Lines => {
                let total = self.total.load(Ordering::Relaxed);
                let width = total.to_string().len();
                let outcome = match (status, median_ms) {
                    (Status::Ok, Some(median)) => format_time(median),
                    (status, Some(median)) => format!("{status} ({})", format_time(median)),
                    (status, None) => status.to_string(),
                };
                eprintln!("  [{done:>width$}/{total}] {label} {outcome}");
            }
            Mode::Bars => {
                if let Some(bar) = &*self.lock_bar() {
                    bar.inc(1);
                    let mut message = Vec::new();
                    if failed > 0 {
                        message.push(format!("{failed} failed"));
                    }
                    if let Some((median, label)) = best {
                        message.push(format!("best {} {label}", format_time(median)));
                    }
                    bar.set_message(message.join(" · "));
                }
            }
        }
    }

    /// Ends the current phase, clearing its bar; the run's benchmarking bar stays until the
    /// next phase (refining) or the end of the run, as rounds of an adaptive search follow.
    pub(crate) fn end_phase(&self) {
        if !self.run_phase.load(Ordering::Relaxed) {
            self.clear_bar();
        }
    }

    /// `count` choices came from the results cache: done, without a line each.
    pub(crate) fn cached(&self, count: usize) {
        self.done.fetch_add(count, Ordering::Relaxed);
        if let Some(bar) = &*self.lock_bar() {
            bar.inc(count as u64);
        }
    }

    /// Whether a warning shown during the run said `text`.
    pub(crate) fn warned(&self, text: &str) -> bool {
        self.warned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|w| w.contains(text))
    }

    fn clear_bar(&self) {
        self.run_phase.store(false, Ordering::Relaxed);
        if let Some(bar) = self.lock_bar().take() {
            bar.finish_and_clear();
        }
    }

    fn lock_bar(&self) -> std::sync::MutexGuard<'_, Option<ProgressBar>> {
        self.bar.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Observer for Progress {
    fn on_event(&self, event: Event<'_>) {
        match event {
            Event::Note(message) => self.note(message),
            Event::PhaseStarted {
                phase,
                total,
                description,
            } => self.phase(phase.name(), total, description),
            Event::ChoiceFinished {
                label,
                status,
                median_ms,
            } => self.finished(label, status, median_ms),
            Event::PhaseEnded => self.end_phase(),
            Event::Planned { total } => self.planned.store(total, Ordering::Relaxed),
            Event::Cached { count } => self.cached(count),
            // Events of later versions.
            _ => {}
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear_bar();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bars() -> Progress {
        let mut progress = Progress::new(false, false);
        progress.mode = Mode::Bars;
        progress
    }

    fn bar_state(progress: &Progress) -> Option<(u64, Option<u64>)> {
        progress
            .lock_bar()
            .as_ref()
            .map(|b| (b.position(), b.length()))
    }

    /// Rounds of one choice each continue one bar of the planned length; cached choices count.
    #[test]
    fn an_adaptive_search_continues_one_bar() {
        let progress = bars();
        progress.on_event(Event::Planned { total: 5 });
        progress.on_event(Event::Cached { count: 2 });
        for round in 0..3 {
            progress.phase("benchmarking", 1, "benchmarking 1 choice…");
            progress.finished(&format!("X={round}"), Status::Ok, Some(1.0));
            progress.end_phase();
        }
        assert_eq!(bar_state(&progress), Some((5, Some(5))));
        // Refining is a phase of its own.
        progress.phase("refining", 2, "refining 2 choices…");
        assert_eq!(bar_state(&progress), Some((0, Some(2))));
        progress.end_phase();
        assert_eq!(bar_state(&progress), None);
    }

    /// Without a plan, each phase is its own bar, as before.
    #[test]
    fn phases_without_a_plan_are_bars_of_their_own() {
        let progress = bars();
        progress.phase("benchmarking", 3, "benchmarking 3 choices…");
        progress.finished("X=1", Status::Crashed, None);
        assert_eq!(bar_state(&progress), Some((1, Some(3))));
        progress.end_phase();
        assert_eq!(bar_state(&progress), None);
    }
}
