//! The pipeline's compile threads: how many, at which priority, and how a foreground thread
//! takes over a compile that the machine starves in the background.
//!
//! Compiles overlap measuring where the machine allows it without disturbing a window
//! ([`CompilePlan::for_machine`]): *foreground* threads compile at normal priority on the CPUs
//! the workers leave, and *background* threads ([`tunebox_cpu::CompileControl::background`]:
//! `SCHED_IDLE`, nice 19) compile on the CPUs the workers measure on, getting only the time a
//! worker does not want (between windows, while its parent judges a result). A background
//! compile on a machine that something else keeps busy may get no CPU at all: it is then
//! killed ([`CpuError::CompileStarved`]) and handed to the foreground threads, first in line,
//! and the background threads stop, so that a run on a busy machine compiles as fast as with
//! foreground threads alone. A background thread takes a choice only while more are left than
//! there are foreground threads: the last ones, which the first windows may wait for, go to
//! the foreground.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use tunebox_cpu::{CacheDir, CompileControl, CpuError};
use tunebox_pool::Status;
use tunebox_pool::TuningProcessPool;

use super::lookup::Todo;
use super::spare::Spare;
use super::stage::{Stage, lock};
use crate::base::observer::ObserverExt;
use crate::measure::workers::{self, CudaCompilers, InOrder};
use crate::results::interference::BackgroundWork;
use crate::results::interference::Topology;

/// How many compile threads of each kind a run starts, and whether measuring overlaps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CompilePlan {
    /// Threads compiling at normal priority.
    pub foreground: usize,
    /// Threads compiling in the background (`SCHED_IDLE`, nice 19).
    pub background: usize,
    /// Whether measuring starts with the first choice compiled (else every compile finishes
    /// first, on every CPU).
    pub overlap: bool,
}

impl CompilePlan {
    /// The plan for a machine of `cpus` CPUs shaped as `topology`, `workers` workers measuring:
    ///
    /// - no core has SMT siblings and some CPU is left over: a foreground thread per CPU the
    ///   workers leave and a background one per worker, beside measuring. A background compile
    ///   gives up its CPU the moment a worker's thread wants it, and a foreground one on
    ///   another CPU shares only the machine's caches and memory with a window (measured on a
    ///   2-vCPU guest: within 2 % of an idle machine, 0.2-0.7 % at the median;
    ///   docs/performance.md); only where the kernel tells a starved background compile
    ///   ([`tunebox_cpu::can_compile_in_background`]; else foreground threads alone);
    /// - SMT: foreground threads on the CPUs outside every worker's core
    ///   ([`Topology::free_cpus`]), beside measuring; no background thread, since one on a
    ///   worker's SMT sibling would share its execution units whenever the sibling is idle;
    /// - otherwise (no CPU left over): every CPU compiles first, before any window.
    pub(crate) fn for_machine(topology: &Topology, cpus: usize, workers: usize) -> CompilePlan {
        let cpus = cpus.max(1);
        let left = cpus.saturating_sub(workers);
        let first = CompilePlan {
            foreground: cpus,
            background: 0,
            overlap: false,
        };
        if left == 0 {
            return first;
        }
        if !topology.has_smt() && tunebox_cpu::can_compile_in_background() {
            return CompilePlan {
                foreground: left,
                background: cpus - left,
                overlap: true,
            };
        }
        match topology.free_cpus(workers).min(left) {
            0 => first,
            free => CompilePlan {
                foreground: free,
                background: 0,
                overlap: true,
            },
        }
    }

    /// All threads.
    pub(crate) fn threads(&self) -> usize {
        self.foreground + self.background
    }
}

/// What compiling one C choice gave: `None` when it was not started (the run was stopped).
pub(crate) type CompileOutcome = Option<Result<Vec<PathBuf>, CpuError>>;

/// The compile threads' shared work: the positions to compile, and where outcomes go.
pub(crate) struct CompileJob<'j> {
    pub stage: &'j Stage<'j>,
    pub todo: &'j [Todo],
    pub c_todo: &'j [usize],
    pub compiled: &'j Mutex<Vec<(usize, CompileOutcome)>>,
    pub compiled_deps: &'j Mutex<Vec<Option<Vec<PathBuf>>>>,
    pub gate: &'j InOrder,
    pub compiling: &'j Compiling<'j>,
    queue: Mutex<Queue>,
    changed: Condvar,
}

/// The next position of `c_todo` to hand out, the positions starved in the background (for
/// the foreground, first), and the background compiles under way.
#[derive(Default)]
struct Queue {
    next: usize,
    starved: Vec<usize>,
    in_background: usize,
    /// A background compile was starved: the machine is busy, background threads stop.
    busy: bool,
}

impl<'j> CompileJob<'j> {
    pub(crate) fn new(
        stage: &'j Stage<'j>,
        todo: &'j [Todo],
        c_todo: &'j [usize],
        compiled: &'j Mutex<Vec<(usize, CompileOutcome)>>,
        compiled_deps: &'j Mutex<Vec<Option<Vec<PathBuf>>>>,
        gate: &'j InOrder,
        compiling: &'j Compiling<'j>,
    ) -> CompileJob<'j> {
        CompileJob {
            stage,
            todo,
            c_todo,
            compiled,
            compiled_deps,
            gate,
            compiling,
            queue: Mutex::new(Queue::default()),
            changed: Condvar::new(),
        }
    }

    /// A foreground thread: compiles the positions starved in the background, then the next
    /// ones, until none is left and no background compile may still hand one back.
    pub(crate) fn foreground(&self) {
        loop {
            let p = {
                let mut queue = self.lock_queue();
                loop {
                    if !queue.starved.is_empty() {
                        break queue.starved.remove(0);
                    }
                    if let Some(&p) = self.c_todo.get(queue.next) {
                        queue.next += 1;
                        break p;
                    }
                    if queue.in_background == 0 {
                        return;
                    }
                    queue = self
                        .changed
                        .wait(queue)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            };
            let outcome = self.compile(p, false);
            self.settle(p, outcome);
        }
    }

    /// A background thread: compiles positions while more are left than there are foreground
    /// threads, until the machine turns out busy (a compile starved: it goes back to the
    /// foreground threads).
    pub(crate) fn background(&self) {
        let foreground = self.compiling.plan.foreground;
        loop {
            let p = {
                let mut queue = self.lock_queue();
                let left = self.c_todo.len().saturating_sub(queue.next);
                if queue.busy || left <= foreground {
                    return;
                }
                let p = self.c_todo[queue.next];
                queue.next += 1;
                queue.in_background += 1;
                p
            };
            let outcome = self.compile(p, true);
            let starved = matches!(outcome, Some(Err(CpuError::CompileStarved { .. })));
            {
                let mut queue = self.lock_queue();
                queue.in_background -= 1;
                if starved {
                    log::debug!(
                        "the compile of {} starved in the background: the foreground takes it",
                        self.todo[p].choice.label()
                    );
                    queue.starved.push(p);
                    queue.busy = true;
                }
                self.changed.notify_all();
            }
            if starved {
                return;
            }
            self.settle(p, outcome);
        }
    }

    /// Compiles position `p` (unless the run was stopped), in the background or not.
    fn compile(&self, p: usize, background: bool) -> CompileOutcome {
        if self.stage.should_stop() {
            return None;
        }
        let control = CompileControl {
            background,
            ..*self.compiling.control
        };
        let _running = self.compiling.clock.start();
        Some(workers::precompile(
            &self.todo[p].request,
            self.compiling.kernel_cache,
            &control,
        ))
    }

    /// Settles the gate's position `p` with `outcome` (the files it read first, so before it is
    /// measured); a compile that fails is reported now.
    fn settle(&self, p: usize, outcome: CompileOutcome) {
        if let Some(Ok(deps)) = &outcome {
            lock(self.compiled_deps)[p] = Some(deps.clone());
        }
        self.gate.settle(p, matches!(outcome, Some(Ok(_))));
        if let Some(Err(e)) = &outcome
            && !matches!(e, CpuError::CompileCancelled { .. })
        {
            let status = if workers::compile_timeout_message(e).is_some() {
                Status::Timeout
            } else {
                Status::CompileError
            };
            self.stage
                .observer
                .finished(&self.todo[p].choice.label(), status, None);
        }
        lock(self.compiled).push((p, outcome));
    }

    fn lock_queue(&self) -> MutexGuard<'_, Queue> {
        lock(&self.queue)
    }
}

/// How the pipeline compiles the C choices it is given.
pub(crate) struct Compiling<'c> {
    pub kernel_cache: &'c CacheDir,
    pub control: &'c CompileControl<'c>,
    /// Say what compiles where (once a run, not every round of an adaptive search).
    pub say: bool,
    /// The compile threads, and whether measuring overlaps them.
    pub plan: CompilePlan,
    /// The compile threads' time, so that a window beside them can tell them from
    /// interference ([`crate::results::interference::Watch`]).
    pub clock: &'c Arc<BackgroundWork>,
    /// Windows a worker measures while the next choice in order is still compiling (the
    /// rounds' first windows of choices screened before: [`Spare`]), and the pool they are
    /// measured in (the rounds' own); `None`: it waits.
    pub spare: Option<(&'c Spare, &'c TuningProcessPool)>,
    /// Where a batch of CUDA choices compiles when it has more choices than the stage has
    /// workers; `None`: on the stage's workers.
    pub cuda: Option<&'c CudaCompilers>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cores(cores: &[&[usize]]) -> Topology {
        Topology {
            cores: cores.iter().map(|c| c.to_vec()).collect(),
        }
    }

    #[test]
    fn compiles_overlap_measuring_where_the_machine_allows_it() {
        let plan = |foreground, background, overlap| CompilePlan {
            foreground,
            background,
            overlap,
        };
        // Where the kernel tells a starved background compile (else none in the background).
        let bg = usize::from(tunebox_cpu::can_compile_in_background());
        // Two CPUs, one worker: one compile beside it, one in its CPU's spare time.
        let two = cores(&[&[0], &[1]]);
        assert_eq!(CompilePlan::for_machine(&two, 2, 1), plan(1, bg, true));
        // As many workers as CPUs, or one CPU: compiles first.
        assert_eq!(CompilePlan::for_machine(&two, 2, 2), plan(2, 0, false));
        assert_eq!(
            CompilePlan::for_machine(&cores(&[&[0]]), 1, 1),
            plan(1, 0, false)
        );
        // Sixteen CPUs, two workers.
        let many: Vec<Vec<usize>> = (0..16).map(|c| vec![c]).collect();
        let many = Topology { cores: many };
        assert_eq!(
            CompilePlan::for_machine(&many, 16, 2),
            plan(14, 2 * bg, true)
        );
        // SMT: two cores of two; one worker holds a core, the other core compiles, nothing
        // in the background (it would run on the worker's sibling).
        let smt = cores(&[&[0, 2], &[1, 3]]);
        assert_eq!(CompilePlan::for_machine(&smt, 4, 1), plan(2, 0, true));
        // One core of two threads (a 2-vCPU cloud instance): compiles first.
        let one_core = cores(&[&[0, 1]]);
        assert_eq!(CompilePlan::for_machine(&one_core, 2, 1), plan(2, 0, false));
        assert_eq!(plan(14, 2, true).threads(), 16);
    }
}
