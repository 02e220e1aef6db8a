//! Progress on stderr: indicatif bars on a terminal (counts, ETA, failures so far, best so far),
//! one plain line per finished choice otherwise (a batch job's log), nothing with `--quiet`.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tunebox_pool::Status;
use tunebox_tune::{Event, Observer};

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
#[derive(Debug)]
pub(crate) struct Progress {
    mode: Mode,
    bar: Mutex<Option<ProgressBar>>,
    total: AtomicUsize,
    done: AtomicUsize,
    failed: AtomicUsize,
    /// The best `ok` median so far and its choice.
    best: Mutex<Option<(f64, String)>>,
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
            best: Mutex::new(None),
        }
    }

    /// A line for the user (above the bar, if one is shown).
    pub(crate) fn note(&self, message: &str) {
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
        self.end_phase();
        self.total.store(total, Ordering::Relaxed);
        self.done.store(0, Ordering::Relaxed);
        self.failed.store(0, Ordering::Relaxed);
        match self.mode {
            Mode::Quiet => {}
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

    /// Ends the current phase, clearing its bar.
    pub(crate) fn end_phase(&self) {
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
            // Events of later versions.
            _ => {}
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.end_phase();
    }
}
