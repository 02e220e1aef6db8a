//! What a run tells its caller while it runs: notes, phases, and each choice as it finishes.
//!
//! The engine never writes to a terminal; the `tunebox` CLI turns these events into progress
//! bars (or one line per choice in a batch log), and a service can turn them into log records or
//! messages of its own.

use std::collections::HashMap;

use tunebox_pool::Status;

/// A phase of a run with a known number of steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Phase {
    /// Compiling and measuring the choices the results cache does not have.
    Benchmarking,
    /// Re-measuring the best choices with more reps (`refine`).
    Refining,
}

impl Phase {
    /// Its name in progress output: `benchmarking`, `refining`.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Benchmarking => "benchmarking",
            Phase::Refining => "refining",
        }
    }
}

/// One thing a run reports, in the order it happens.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A line for the user: what starts, what was skipped, a warning (the CLI prints it as
    /// `tunebox: {line}`).
    Note(&'a str),
    /// A phase of `total` choices starts; `description` says what in one line (the CLI prints
    /// it when it shows no bar).
    PhaseStarted {
        /// Which phase.
        phase: Phase,
        /// The choices it will finish (some may instead be left unmeasured when it stops).
        total: usize,
        /// What starts, e.g. `benchmarking 12 choices on 1 worker(s), timeout 60s…`.
        description: &'a str,
    },
    /// A choice finished: compiled and failed, or measured (and verified).
    ChoiceFinished {
        /// The choice's label (`BLOCK=32 UNROLL=4`).
        label: &'a str,
        /// Its status.
        status: Status,
        /// Its median in ms, when it was measured.
        median_ms: Option<f64>,
    },
    /// The current phase ended.
    PhaseEnded,
    /// The run will finish about `total` choices, cached ones included: all it selected, or
    /// for an adaptive search that asks a few at a time, its budget (at most the space). Sent
    /// once, before the first phase, so that progress can count the whole run: an adaptive
    /// search starts a [`Phase::Benchmarking`] of a few choices each round.
    Planned {
        /// The choices the run expects to finish.
        total: usize,
    },
    /// `count` choices were taken from the results cache instead of being measured, or resumed
    /// from it (their screening window cached, their rounds cut short by an earlier run's
    /// stop): their screening is done (sent each round that has some; only the first says so
    /// in a [`Event::Note`]).
    Cached {
        /// How many.
        count: usize,
    },
}

/// Receives a run's [`Event`]s, and may ask it to stop.
///
/// Called from the run's threads (compile threads too), so it must be `Sync`; each call should
/// return quickly, as the run waits for it. `()` ignores every event and never stops a run.
pub trait Observer: Sync {
    /// Called for each event as it happens.
    fn on_event(&self, event: Event<'_>);

    /// Whether the run should stop now: polled wherever the run polls its [`Stop`] (before
    /// each choice starts, while compiles run, between rounds of the strategy), often, so it
    /// must be cheap. Once it answers `true` the run raises its [`Stop`], and ends as a
    /// stopped run does: the choices being measured are killed, and the report lists what
    /// was not measured (`"interrupted"`), the choices the strategy had yet to ask for
    /// included. Default: never.
    ///
    /// [`Stop`]: crate::Stop
    fn should_stop(&self) -> bool {
        false
    }
}

impl Observer for () {
    fn on_event(&self, _event: Event<'_>) {}
}

/// What a warning of the engine is about: a run says each kind once ([`Warnings`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum WarningKind {
    /// The results cache cannot be written (a full or read-only file system, no permission):
    /// every later write fails the same way, and the report counts the results not kept.
    ResultsCache,
    /// The kernel cache cannot be used: the run compiles into a private temporary folder.
    KernelCache,
    /// A choice left something behind in a reused worker (descriptors, threads, processes,
    /// memory), which was replaced: the report's notes name every choice that did.
    LeftBehind,
}

/// The warnings of one run, each kind said once: the first of a kind goes to the observer as
/// a `warning: …` note; later ones of that kind are only counted (a full disk fails every
/// write of a run alike, and saying so each time buries the table under one message).
#[derive(Debug, Default)]
pub(crate) struct Warnings {
    said: HashMap<WarningKind, usize>,
}

impl Warnings {
    /// Says `message` as a warning of `kind` unless one of that kind was said; whether it was
    /// said now.
    pub(crate) fn warn(
        &mut self,
        observer: &dyn Observer,
        kind: WarningKind,
        message: &str,
    ) -> bool {
        let count = self.said.entry(kind).or_default();
        *count += 1;
        if *count == 1 {
            observer.note(&format!("warning: {message}"));
        }
        *count == 1
    }

    /// How many warnings of `kind` the run had, said or not.
    #[cfg(test)]
    pub(crate) fn count(&self, kind: WarningKind) -> usize {
        self.said.get(&kind).copied().unwrap_or(0)
    }
}

/// Convenience wrappers the engine reports through.
pub(crate) trait ObserverExt {
    fn note(&self, message: &str);
    fn phase(&self, phase: Phase, total: usize, description: &str);
    fn finished(&self, label: &str, status: Status, median_ms: Option<f64>);
    fn end_phase(&self);
    fn planned(&self, total: usize);
    fn cached(&self, count: usize);
}

impl<O: Observer + ?Sized> ObserverExt for O {
    fn note(&self, message: &str) {
        self.on_event(Event::Note(message));
    }

    fn phase(&self, phase: Phase, total: usize, description: &str) {
        self.on_event(Event::PhaseStarted {
            phase,
            total,
            description,
        });
    }

    fn finished(&self, label: &str, status: Status, median_ms: Option<f64>) {
        self.on_event(Event::ChoiceFinished {
            label,
            status,
            median_ms,
        });
    }

    fn end_phase(&self) {
        self.on_event(Event::PhaseEnded);
    }

    fn planned(&self, total: usize) {
        self.on_event(Event::Planned { total });
    }

    fn cached(&self, count: usize) {
        self.on_event(Event::Cached { count });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    #[derive(Default)]
    struct Notes(Mutex<Vec<String>>);

    impl Observer for Notes {
        fn on_event(&self, event: Event<'_>) {
            if let Event::Note(note) = event {
                self.0.lock().unwrap().push(note.to_owned());
            }
        }
    }

    #[test]
    fn each_kind_of_warning_is_said_once_and_counted() {
        let notes = Notes::default();
        let mut warnings = Warnings::default();
        assert!(warnings.warn(&notes, WarningKind::ResultsCache, "the disk is full"));
        assert!(!warnings.warn(&notes, WarningKind::ResultsCache, "the disk is full; again"));
        assert!(warnings.warn(&notes, WarningKind::KernelCache, "read-only"));
        assert_eq!(
            *notes.0.lock().unwrap(),
            ["warning: the disk is full", "warning: read-only"]
        );
        assert_eq!(warnings.count(WarningKind::ResultsCache), 2);
        assert_eq!(warnings.count(WarningKind::LeftBehind), 0);
    }
}
