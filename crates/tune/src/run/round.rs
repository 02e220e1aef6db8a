//! Screening: rounds of lookup → pipeline → record → tell, until the strategy asks for no
//! more (brute force and random sampling ask for everything at once: one round).

use std::borrow::Cow;
use std::time::Duration;

use anyhow::Result;
use tunebox_cpu::CompileControl;

use super::compile_threads::{CompilePlan, Compiling};
use super::context::{Run, skipped_note};
use super::lookup::{Todo, lookup_cached};
use super::pipeline::{Measured, pipeline};
use super::race::{spare_window, window_request};
use super::spare::Spare;
use super::stage::Stage;
use crate::base::observer::ObserverExt;
use crate::manifest::metrics::Metrics;
use crate::results::{ChoiceResult, NotMeasured, Selection, ShardInfo, set_objective};
use crate::search::strategy::Strategy;
use crate::space::SearchSpace;
use tunebox_pool::Status;

impl Run<'_> {
    /// Measures `first` (the plan's selection), then what the strategy asks for next, each
    /// round told to the strategy, until it has no more or the run is stopped.
    pub(super) fn screen(&mut self, first: Vec<usize>) -> Result<()> {
        if let Some(shard) = self.shard {
            self.observer.note(&format!(
                "shard {shard}: {} of the {} choices",
                first.len(),
                self.space.len()
            ));
        }
        // One count for the whole run, across the rounds of an adaptive search.
        let planned = planned_total(&self.options.selection, self.space.len(), first.len());
        self.adaptive = planned > first.len();
        self.observer.planned(planned);
        let mut batch = first;
        loop {
            self.round(&batch)?;
            if self.should_stop() {
                // What the strategy would still have asked for was not measured either.
                let why = self.stop.reason();
                let left = unasked(self.strategy.as_mut(), &self.space, self.shard, why);
                self.ledger.not_measured.extend(left);
                break;
            }
            batch = ask(self.strategy.as_mut(), &self.space, self.shard);
            if batch.is_empty() {
                break;
            }
        }
        if self.adaptive
            && self.ledger.hits > 0
            && let Some(c) = &self.ledger.cache
        {
            self.observer.note(&skipped_note(self.ledger.hits, c));
        }
        if self.adaptive && self.ledger.resumed > 0 {
            self.observer
                .note(&super::resume::resumed_note(self.ledger.resumed));
        }
        Ok(())
    }

    /// One round: the cached lookup of `batch`, the pipeline for the rest, every result
    /// recorded, and the strategy told.
    fn round(&mut self, batch: &[usize]) -> Result<()> {
        let lookup = lookup_cached(&self.setup, &self.space, batch, self.ledger.cache.as_ref());
        let (mut todo, resumed) = self
            .ledger
            .take_cached(lookup, self.adaptive, self.observer);
        if !todo.is_empty() || !resumed.is_empty() {
            let all: Vec<Todo> = todo
                .iter()
                .cloned()
                .chain(resumed.iter().map(|r| r.todo.clone()))
                .collect();
            self.ready_to_measure(&all)?;
            // Resumed choices are measured in the rounds; one that no longer compiles is
            // measured from the start.
            todo.extend(self.ready_resumed(resumed));
        }
        if !todo.is_empty() {
            self.measure(&todo);
        }
        let objective = self.ledger.header.objective.as_ref();
        set_objective(&mut self.ledger.results[self.told..], objective);
        let manifest = self.setup.manifest;
        for result in &self.ledger.results[self.told..] {
            self.strategy
                .tell(result.index, &as_screened(result, &manifest.metrics));
        }
        self.told = self.ledger.results.len();
        Ok(())
    }

    /// The pipeline over `todo`, compiling as it measures; every outcome to the ledger.
    fn measure(&mut self, todo: &[Todo]) {
        let Some(measuring) = &self.measuring else {
            let why = self.stop.reason();
            self.ledger
                .not_measured
                .extend(todo.iter().map(|t| NotMeasured {
                    index: t.index,
                    choice: t.choice.clone(),
                    reason: why.to_owned(),
                }));
            return;
        };
        // Each compile has the manifest's deadline, and Ctrl-C kills the compilers at once
        // (they run in process groups of their own, so the terminal's SIGINT reaches only us).
        let (stop, observer) = (self.stop, self.observer);
        let cancel = || stop.poll(observer);
        // The CPUs this process may use (an affinity mask can hide some that sysfs lists).
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let workers = measuring.pool.size();
        let plan = CompilePlan::for_machine(&self.topology, cpus, workers);
        let control = CompileControl {
            timeout: self.setup.manifest.compile_timeout,
            cancel: Some(&cancel),
            ..CompileControl::default()
        };
        let stage = Stage {
            setup: &self.setup,
            pool: &measuring.pool,
            reference: measuring.reference.as_deref(),
            varied: measuring.varied.as_ref(),
            observer,
            stop,
            deadline: self.deadline,
        };
        // With rounds to come and compiles beside measuring, a worker waiting for the next
        // compile measures a first round's window of a choice screened before.
        let spare = Spare::for_round(todo.len());
        let rounds = self.setup.windows > 1;
        let compiling = Compiling {
            kernel_cache: self.kernel_cache.dir(),
            control: &control,
            say: !std::mem::replace(&mut self.compile_noted, true),
            plan,
            clock: &self.compile_clock,
            spare: (rounds && plan.overlap).then_some((&spare, measuring.windows_pool())),
            cuda: measuring.cuda_compilers.as_ref(),
        };
        let ledger = &mut self.ledger;
        let setup = &self.setup;
        let spare_windows = &mut self.spare_windows;
        let beside_compiles = &mut self.beside_compiles;
        pipeline(&stage, todo, Some(compiling), |measured| match measured {
            Measured::Choice(p, outcome) => {
                ledger.settle(&todo[p], outcome, observer);
                let index = todo[p].index;
                if rounds
                    && let Some(r) = ledger.results.iter().find(|r| r.index == index)
                    && r.status == Status::Ok
                    && !r.cached
                    && r.windows.as_ref().is_some_and(|w| w.medians_ms.len() == 1)
                    && let Some(request) = window_request(setup, r, 1, false)
                {
                    spare.offer(index, request);
                }
            }
            Measured::Spare {
                index,
                result,
                conditions,
            } => {
                *spare_windows += Duration::from_secs_f64(conditions.took_s);
                if let Some(r) = ledger.results.iter_mut().find(|r| r.index == index)
                    && spare_window(r, *result, conditions, setup, observer)
                {
                    *beside_compiles += 1;
                    // Its next round's window too, while the compiles leave time for it: the
                    // rounds after the last compile, when one CPU measures and the others
                    // idle, then hold fewer windows.
                    let windows = r.windows.as_ref().map_or(0, |w| w.medians_ms.len());
                    if windows < setup.windows
                        && r.windows.as_ref().is_some_and(|w| !w.confirmed())
                        && let Some(request) = window_request(setup, r, windows, false)
                    {
                        spare.offer(index, request);
                    }
                }
            }
        });
    }
}

/// `result` as its screening window measured it: what a strategy is told. A result from the
/// results cache carries its estimate over every window of the run that cached it, which the
/// strategy of that run never saw (the rounds come after the search); told that instead, a
/// re-run of an adaptive search would ask for other choices and measure them again.
fn as_screened<'a>(result: &'a ChoiceResult, metrics: &Metrics) -> Cow<'a, ChoiceResult> {
    let Some(windows) = result.windows.as_ref().filter(|w| w.medians_ms.len() > 1) else {
        return Cow::Borrowed(result);
    };
    let first = windows.medians_ms[0];
    let mut screened = result.clone();
    if let Some(w) = screened.windows.as_mut() {
        w.estimate_ms = first;
    }
    screened.metrics = metrics.evaluate(&screened.choice, first);
    Cow::Owned(screened)
}

/// The strategy's next choices, as many as it names, that `shard` owns.
pub(super) fn ask(
    strategy: &mut dyn Strategy,
    space: &SearchSpace,
    shard: Option<ShardInfo>,
) -> Vec<usize> {
    strategy
        .ask(space, usize::MAX)
        .into_iter()
        .filter(|&i| space.contains(i) && space.owns(shard, i))
        .collect()
}

/// The choices `strategy` would still ask for, that `shard` owns, told nothing more: those a
/// stopped run never got to (at most as many as the space has).
fn unasked(
    strategy: &mut dyn Strategy,
    space: &SearchSpace,
    shard: Option<ShardInfo>,
    reason: &str,
) -> Vec<NotMeasured> {
    let mut left = Vec::new();
    let mut asked = 0usize;
    while asked < space.len() {
        let batch = strategy.ask(space, usize::MAX);
        if batch.is_empty() {
            break;
        }
        asked = asked.saturating_add(batch.len());
        left.extend(
            batch
                .into_iter()
                .filter(|&i| space.owns(shard, i))
                .filter_map(|index| {
                    Some(NotMeasured {
                        index,
                        choice: space.choice(index)?,
                        reason: reason.to_owned(),
                    })
                }),
        );
    }
    left
}

/// About how many choices a run finishes, cached ones included: what the strategy asked for
/// at once, or for an adaptive search asking a few at a time, its budget (at most the space).
fn planned_total(selection: &Selection, space: usize, first_batch: usize) -> usize {
    match selection.budget {
        Some(budget) if budget > first_batch => budget.min(space),
        _ => first_batch,
    }
}
