//! Resuming what a stop cut short: a run interrupted (Ctrl-C, a stop, `--max-time`) during its
//! rounds leaves choices measured in fewer windows than an uninterrupted run gives them. Their
//! lines in the results cache say so (`windows_complete: false`), and the same command run
//! again takes their windows so far from the cache and gives them the rest of their rounds,
//! instead of taking a screening window as final ([`super::lookup::Resumed`]).

use tunebox_cpu::CompileControl;
use tunebox_pool::Status;

use super::context::{Ledger, PendingLine, Run};
use super::lookup::{Resumed, Todo};
use crate::base::observer::{Observer, ObserverExt};
use crate::measure::workers;
use crate::results::{NotMeasured, choices as plural};

impl Ledger {
    /// Takes the choices a lookup found cut short: each result is kept (not `cached`: the run
    /// measures it further) and its line is written again once its rounds are done. Returns
    /// them, to be readied for their rounds ([`Run::ready_resumed`]).
    pub(super) fn take_resumed(
        &mut self,
        resumed: Vec<Resumed>,
        adaptive: bool,
        observer: &dyn Observer,
    ) -> Vec<Resumed> {
        if resumed.is_empty() {
            return resumed;
        }
        self.resumed += resumed.len();
        // Progress counts them as done: their screening is.
        observer.cached(resumed.len());
        if !adaptive {
            observer.note(&resumed_note(resumed.len()));
        }
        for r in &resumed {
            self.written.insert(r.todo.key.clone());
            self.pending.push(PendingLine {
                index: r.todo.index,
                key: r.todo.key.clone(),
                windows: r.windows,
            });
            self.keep(r.result.clone());
        }
        resumed
    }
}

/// `resuming 9 choices whose rounds were cut short …`.
pub(super) fn resumed_note(n: usize) -> String {
    format!(
        "resuming {} whose rounds were cut short: their windows so far come from the results \
         cache, the rest of their rounds follow",
        plural(n)
    )
}

impl Run<'_> {
    /// Readies the resumed choices for their rounds: a C choice is compiled in the parent (a
    /// cache hit, normally; a kernel cache private to this run holds nothing yet), as the
    /// rounds' workers only load. One that does not compile now is dropped from the resumed
    /// and returned, to be measured from the start (which says why it fails).
    pub(super) fn ready_resumed(&mut self, resumed: Vec<Resumed>) -> Vec<Todo> {
        let (stop, observer) = (self.stop, self.observer);
        let cancel = || stop.poll(observer);
        let control = CompileControl {
            timeout: self.setup.manifest.compile_timeout,
            cancel: Some(&cancel),
            ..CompileControl::default()
        };
        let mut again = Vec::new();
        for r in resumed {
            if stop.requested() {
                break;
            }
            if workers::precompile(&r.todo.request, self.kernel_cache.dir(), &control).is_err()
                && !stop.requested()
            {
                self.ledger.results.retain(|x| x.index != r.todo.index);
                self.ledger.pending.retain(|p| p.index != r.todo.index);
                again.push(r.todo);
            }
        }
        again
    }

    /// The stable indices of the `ok` results at `contenders` (positions in the results) whose
    /// rounds a stop cut short: measured in fewer windows than the rounds give, their estimate
    /// neither confirmed (two windows agreeing end a choice's rounds early) nor settled at
    /// screening (`settled`, by position). None when the run was not stopped.
    pub(super) fn rounds_cut_short(&self, contenders: &[usize], settled: &[bool]) -> Vec<usize> {
        if !self.should_stop() {
            return Vec::new();
        }
        let windows = self.setup.windows;
        contenders
            .iter()
            .filter(|&&p| !settled.get(p).copied().unwrap_or(false))
            .map(|&p| &self.ledger.results[p])
            .filter(|r| {
                r.status == Status::Ok
                    && r.windows
                        .as_ref()
                        .is_some_and(|w| w.medians_ms.len() < windows && !w.confirmed())
            })
            .map(|r| r.index)
            .collect()
    }

    /// The results whose rounds were cut short, as the report lists them (with why).
    pub(super) fn unfinished(&self) -> Vec<NotMeasured> {
        let reason = self.stop.reason();
        let mut unfinished: Vec<NotMeasured> = self
            .ledger
            .results
            .iter()
            .filter(|r| self.ledger.unfinished.contains(&r.index))
            .map(|r| NotMeasured {
                index: r.index,
                choice: r.choice.clone(),
                reason: reason.to_owned(),
            })
            .collect();
        unfinished.sort_by_key(|n| n.index);
        unfinished
    }
}
