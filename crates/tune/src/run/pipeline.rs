//! The pipeline of one round, compile and measure overlapped: C choices compile in the parent
//! (on the cores the workers leave) while those compiled before them are measured, in the
//! batch's order; CUDA choices compile in their workers first. [`super::measure()`] is this
//! pipeline with no compile threads (its C choices are compiled already).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tunebox_pool::{PoolError, Pull, Status, TuningProcessPool};
use tunebox_protocol::{BenchmarkRequest, Kernel};

use super::compile::{Compiled, judge_compile};
use super::compile_threads::{CompileJob, CompileOutcome, CompilePlan, Compiling};
use super::head_start::RaiseOnDrop;
use super::lookup::Todo;
use super::spare::Spare;
use super::stage::{Stage, lock};
use crate::base::observer::{ObserverExt, Phase};
use crate::measure::workers::{self, CudaCompilers, InOrder, Next};
use crate::results::interference::{Conditions, Watch};
use crate::results::windows::Windows;
use crate::results::{ChoiceResult, choices as plural};

/// What a pipeline measured, for its caller.
pub(crate) enum Measured {
    /// What became of the position of the batch.
    Choice(usize, Outcome),
    /// A spare window of the choice of stable index `index` ([`Spare`]), as the pool
    /// returned it.
    Spare {
        index: usize,
        result: Box<Result<tunebox_protocol::BenchmarkResult, tunebox_pool::PoolError>>,
        conditions: Conditions,
    },
}

/// What a worker of the pipeline measures: the position of a choice of the batch, or a spare
/// window of the choice of that stable index.
enum Job {
    Choice(usize),
    Spare(usize),
}

/// What became of one position of the batch.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// A result: measured, or failed to compile or prepare. `cacheable`: the results cache may
    /// keep it (not a transient failure); `files`: the headers its compile read (C); `left`:
    /// what its measurement left in its worker that could not be put back (the worker was
    /// replaced before the next choice).
    Done {
        result: Box<ChoiceResult>,
        cacheable: bool,
        files: Option<Vec<PathBuf>>,
        left: Vec<tunebox_protocol::Leftover>,
    },
    /// Not started, or killed by a stop: why (`interrupted`, `max_time`).
    Skipped(&'static str),
}

/// Runs `todo` through `stage`: CUDA choices are prepared (compiled) in the workers, C choices
/// compile as `compiling` says (`None`: they are compiled already), and every choice is
/// measured once its compile settles, in `todo`'s order, judged against the reference and
/// reported to the observer. `on_measured(Measured::Choice(position, outcome))` is called on
/// this thread for every position of `todo`, each measured result as it finishes, and
/// `on_measured(Measured::Spare { … })` for each spare window ([`Compiling::spare`]).
pub(crate) fn pipeline(
    stage: &Stage<'_>,
    todo: &[Todo],
    compiling: Option<Compiling<'_>>,
    mut on_measured: impl FnMut(Measured),
) {
    let cuda = compiling.as_ref().and_then(|c| c.cuda);
    let ready = prepare_cuda(stage, todo, cuda, &mut |p, outcome| {
        on_measured(Measured::Choice(p, outcome));
    });
    let (ready, c_todo) = split_c_choices(todo, ready, compiling.is_some());
    announce(stage, ready.len(), &c_todo, compiling.as_ref());
    let gate = measuring_order(todo.len(), &ready, &c_todo);
    let compiled: Mutex<Vec<(usize, CompileOutcome)>> = Mutex::new(Vec::new());
    let compiled_deps: Mutex<Vec<Option<Vec<PathBuf>>>> = Mutex::new(vec![None; todo.len()]);
    let mut measured = vec![false; todo.len()];
    let gate = &gate;
    let compiles_done = &AtomicBool::new(compiling.is_none() || c_todo.is_empty());
    std::thread::scope(|scope| {
        let compilers = compiling.as_ref().map(|c| {
            let job = CompileJob::new(stage, todo, &c_todo, &compiled, &compiled_deps, gate, c);
            scope.spawn(move || {
                // Set however the compile threads end (a panic included): measuring that waits
                // for the compiles must not wait forever.
                let _done = RaiseOnDrop(compiles_done);
                compile_all(&job, c.plan, gate);
            })
        });
        if !compiling.as_ref().is_some_and(|c| c.plan.overlap)
            && let Some(compilers) = compilers
        {
            let _ = compilers.join();
        }
        let measuring = Measuring {
            stage,
            todo,
            gate,
            compiled_deps: &compiled_deps,
            compiles_done,
            threaded: AtomicBool::new(false),
        };
        measuring.run(compiling.as_ref(), &mut measured, &mut on_measured);
    });
    stage.observer.end_phase();
    for p in ready {
        if !measured[p] {
            on_measured(Measured::Choice(p, Outcome::Skipped(stage.stop.reason())));
        }
    }
    compile_outcomes(
        stage,
        todo,
        &c_todo,
        &measured,
        compiled,
        &mut |p, outcome| {
            on_measured(Measured::Choice(p, outcome));
        },
    );
}

/// `ready` (the positions left to measure) parted into those measured as they are and the C
/// choices that compile in the parent first (none when nothing compiles: `compiles` false).
fn split_c_choices(todo: &[Todo], ready: Vec<usize>, compiles: bool) -> (Vec<usize>, Vec<usize>) {
    if !compiles {
        return (ready, Vec::new());
    }
    let (c, rest): (Vec<usize>, Vec<usize>) = ready
        .iter()
        .partition(|&&p| matches!(todo[p].request.kernel, Kernel::C(_)));
    (rest, c)
}

/// Tells the observer that benchmarking starts (`ready` choices and the C choices `c_todo`)
/// and, where `compiling` says so, on how many threads those compile and whether measuring
/// overlaps them.
fn announce(stage: &Stage<'_>, ready: usize, c_todo: &[usize], compiling: Option<&Compiling<'_>>) {
    let workers = stage.pool.size();
    let plan = compiling.map(|c| c.plan);
    let compile_threads = plan.map_or(1, |p| p.threads().max(1));
    let overlap = plan.is_some_and(|p| p.overlap);
    stage.observer.phase(
        Phase::Benchmarking,
        ready + c_todo.len(),
        &format!(
            "benchmarking {} on {workers} worker(s), timeout {:?}…",
            plural(ready + c_todo.len()),
            stage.setup.timeout
        ),
    );
    if !c_todo.is_empty() && compiling.is_some_and(|c| c.say) {
        stage.observer.note(&format!(
            "compiling {} on {}{}…",
            plural(c_todo.len()),
            if compile_threads == 1 {
                "1 thread".to_owned()
            } else {
                format!("{compile_threads} threads")
            },
            if overlap {
                " while measuring"
            } else {
                ", then measuring"
            }
        ));
    }
}

/// The order in which the `len` positions of a batch are measured: those of `ready` and
/// `c_todo`, by position; `ready`'s are settled (measurable) at once, `c_todo`'s once they
/// compile.
fn measuring_order(len: usize, ready: &[usize], c_todo: &[usize]) -> InOrder {
    let mut measurable = vec![false; len];
    for &p in ready.iter().chain(c_todo) {
        measurable[p] = true;
    }
    let gate = InOrder::new((0..len).filter(|&p| measurable[p]).collect(), len);
    for &p in ready {
        gate.settle(p, true);
    }
    gate
}

/// Runs `job`'s compile threads to their end (`plan.foreground` at normal priority, at least
/// one, and `plan.background` in the background), then settles what `gate` still waits for.
fn compile_all(job: &CompileJob<'_>, plan: CompilePlan, gate: &InOrder) {
    std::thread::scope(|inner| {
        for _ in 0..plan.foreground.max(1) {
            inner.spawn(|| job.foreground());
        }
        for _ in 0..plan.background {
            inner.spawn(|| job.background());
        }
    });
    // Every compile thread is done (or panicked): nothing is left pending.
    gate.settle_rest(false);
}

/// The measuring side of a pipeline: the batch, the order its positions are released in, and
/// the headers each C choice's compile read.
struct Measuring<'m> {
    stage: &'m Stage<'m>,
    todo: &'m [Todo],
    gate: &'m InOrder,
    compiled_deps: &'m Mutex<Vec<Option<Vec<PathBuf>>>>,
    /// Every compile thread has ended.
    compiles_done: &'m AtomicBool,
    /// A window's kernel started threads of its own ([`Measuring::team_beside_compiles`]):
    /// nothing more is measured beside the compiles.
    threaded: AtomicBool,
}

impl Measuring<'_> {
    /// Measures every position `gate` releases (and spare windows while the next one
    /// compiles) on the stage's workers, marking each in `measured` and handing its outcome
    /// to `on_measured` as it finishes.
    fn run(
        &self,
        compiling: Option<&Compiling<'_>>,
        measured: &mut [bool],
        on_measured: &mut impl FnMut(Measured),
    ) {
        let stage = self.stage;
        let watch = Arc::new(Watch::new(compiling.map(|c| c.clock)));
        let spare = compiling.and_then(|c| c.spare);
        let next = || {
            if self.threaded.load(Ordering::Acquire) && !self.compiles_done.load(Ordering::Acquire)
            {
                self.gate.wait(SPARE_POLL);
                return Pull::Wait(Duration::ZERO);
            }
            next_job(stage, self.gate, self.todo, spare)
        };
        tunebox_pool::run_pulled(
            stage.pool.size(),
            &watch,
            next,
            |job, result, conditions| {
                let mut conditions = conditions.unwrap_or_default();
                // Its team shared the CPUs with a compile: not a quiet window.
                conditions.disturbed |= self.team_beside_compiles(&result);
                match job {
                    Job::Choice(p) => {
                        measured[p] = true;
                        on_measured(Measured::Choice(p, self.outcome(p, result, conditions)));
                    }
                    Job::Spare(index) => on_measured(Measured::Spare {
                        index,
                        result: Box::new(result),
                        conditions,
                    }),
                }
            },
        );
    }

    /// Whether `result`'s kernel started threads of its own (OpenMP, a thread pool) while
    /// compiles still ran. A compile takes a CPU its threads want (a two-thread histogram's
    /// windows beside one took 1.5-2.7 times its later windows' time), so the first such window
    /// stops the handing out of windows until the compiles end, which then have every CPU.
    fn team_beside_compiles(
        &self,
        result: &Result<tunebox_protocol::BenchmarkResult, PoolError>,
    ) -> bool {
        if self.compiles_done.load(Ordering::Acquire) {
            return false;
        }
        let started = result
            .as_ref()
            .ok()
            .and_then(|r| r.integrity.threads_started);
        if started.unwrap_or(0) == 0 {
            return false;
        }
        if !self.threaded.swap(true, Ordering::AcqRel) {
            self.stage.observer.note(
                "the kernel starts threads of its own: the rest is measured once the compiles \
                 have ended, so that no compile takes a CPU from its threads",
            );
        }
        true
    }

    /// The outcome of measuring position `p`: judged, with the headers its compile read.
    fn outcome(
        &self,
        p: usize,
        result: Result<tunebox_protocol::BenchmarkResult, tunebox_pool::PoolError>,
        conditions: Conditions,
    ) -> Outcome {
        match measured_outcome(self.stage, &self.todo[p], result, conditions) {
            Outcome::Done {
                result,
                cacheable,
                files: _,
                left,
            } => Outcome::Done {
                result,
                cacheable,
                files: lock(self.compiled_deps)[p].clone(),
                left,
            },
            skipped => skipped,
        }
    }
}

/// The next job of a pipeline's free worker: the next choice in order once it has compiled,
/// on the stage's pool; while it compiles, a spare window if one is due, on the spare's pool,
/// else a short wait ([`SPARE_POLL`], ended at once by a compile settling) and
/// [`Pull::Wait`], so that the results that landed meanwhile are handled before the next look;
/// [`Pull::Done`] once every choice is handed out or the run stops.
fn next_job<'p>(
    stage: &Stage<'p>,
    gate: &InOrder,
    todo: &[Todo],
    spare: Option<(&Spare, &'p TuningProcessPool)>,
) -> Pull<'p, Job> {
    if stage.should_stop() {
        return Pull::Done;
    }
    let measure = |job, pool, request| Pull::Request {
        job,
        pool,
        request,
        timeout: None,
    };
    match gate.try_next() {
        Next::Ready(p) => {
            if let Some((spare, _)) = spare {
                spare.handed();
            }
            measure(Job::Choice(p), stage.pool, todo[p].request.clone())
        }
        Next::Done => Pull::Done,
        Next::Pending => {
            if let Some((spare, pool)) = spare
                && let Some((index, request)) = spare.take()
            {
                return measure(Job::Spare(index), pool, request);
            }
            gate.wait(SPARE_POLL);
            Pull::Wait(Duration::ZERO)
        }
    }
}

/// How long a worker with nothing to measure waits before it looks again for a compiled
/// choice or a spare window (a compile settling wakes it at once).
const SPARE_POLL: Duration = Duration::from_millis(5);

/// Prepares the CUDA choices of `todo` in workers (a compiler can crash too): spread over the
/// `compilers`' workers when there are more choices than the stage has workers, else over the
/// stage's pool; those that fail are outcomes at once. Returns the positions left to measure.
fn prepare_cuda(
    stage: &Stage<'_>,
    todo: &[Todo],
    compilers: Option<&CudaCompilers>,
    on_outcome: &mut impl FnMut(usize, Outcome),
) -> Vec<usize> {
    let mut ready: Vec<usize> = (0..todo.len()).collect();
    let cuda: Vec<usize> = (0..todo.len())
        .filter(|&p| matches!(todo[p].request.kernel, Kernel::Cuda(_)))
        .collect();
    if cuda.is_empty() {
        return ready;
    }
    let batch: Vec<BenchmarkRequest> = cuda.iter().map(|&p| todo[p].request.clone()).collect();
    for (&p, outcome) in cuda.iter().zip(prepare_batch(stage, &batch, compilers)) {
        let Err(e) = outcome else { continue };
        ready.retain(|&q| q != p);
        if workers::is_transient(&e) {
            on_outcome(p, Outcome::Skipped(stage.stop.reason()));
            continue;
        }
        let t = &todo[p];
        let result = ChoiceResult::failed(
            t.index,
            t.choice.clone(),
            e.status(),
            format!("{:#}", anyhow::Error::new(e)),
            &stage.setup.device,
        );
        on_outcome(
            p,
            Outcome::Done {
                result: Box::new(result),
                cacheable: true,
                files: None,
                left: Vec::new(),
            },
        );
    }
    ready
}

/// Prepares `batch` on the `compilers`' workers when it has more choices than the stage has
/// workers, else on the stage's pool; saying where. What fails on the compilers' workers is
/// prepared again on the stage's pool, whose verdict counts: a compile or launch error comes
/// back the same, while one of the compilers' own (a GPU out of memory for their contexts, a
/// device in exclusive-process mode) must not be kept as the choice's result. When they cannot
/// start, the stage's pool prepares everything.
fn prepare_batch(
    stage: &Stage<'_>,
    batch: &[BenchmarkRequest],
    compilers: Option<&CudaCompilers>,
) -> Vec<Result<(), PoolError>> {
    let say = |workers: usize, why: &str| {
        stage.observer.note(&format!(
            "compiling {} on {workers} worker(s){why}…",
            plural(batch.len())
        ));
    };
    let wide = compilers
        .filter(|_| !stage.stop.requested())
        .and_then(|c| Some((c, c.workers_for(batch.len(), stage.pool.size())?)));
    let Some((compilers, workers)) = wide else {
        say(stage.pool.size(), "");
        return stage.pool.prepare(batch);
    };
    say(workers, "");
    let mut prepared = match compilers.prepare(batch, workers, stage.stop) {
        Ok(prepared) => prepared,
        Err(e) => {
            say(
                stage.pool.size(),
                &format!(" instead (the compile workers could not start: {e})"),
            );
            return stage.pool.prepare(batch);
        }
    };
    let failed: Vec<usize> = (0..batch.len()).filter(|&i| prepared[i].is_err()).collect();
    if !failed.is_empty() {
        let again: Vec<BenchmarkRequest> = failed.iter().map(|&i| batch[i].clone()).collect();
        for (i, outcome) in failed.into_iter().zip(stage.pool.prepare(&again)) {
            prepared[i] = outcome;
        }
    }
    prepared
}

/// What a measurement of `todo` means: a judged result (not cacheable when the failure says
/// nothing about the choice), or nothing when a stop killed it. An `ok` result carries its
/// first window: its median and the conditions it was measured under.
pub(crate) fn measured_outcome(
    stage: &Stage<'_>,
    todo: &Todo,
    result: Result<tunebox_protocol::BenchmarkResult, tunebox_pool::PoolError>,
    conditions: Conditions,
) -> Outcome {
    let transient = matches!(&result, Err(e) if workers::is_transient(e));
    if transient && stage.stop.requested() {
        return Outcome::Skipped("interrupted");
    }
    let left: Vec<tunebox_protocol::Leftover> = result
        .as_ref()
        .map(|r| {
            r.left_behind
                .iter()
                .filter(|l| !l.restored)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let mut r = workers::judge(
        todo.index,
        todo.choice.clone(),
        result,
        stage.reference,
        stage.varied,
        stage.setup.manifest,
        &stage.setup.device,
    );
    if let (Status::Ok, Some(stats)) = (r.status, &r.stats) {
        r.windows = Some(Windows::first(stats, conditions));
    }
    stage
        .observer
        .finished(&r.choice.label(), r.status, r.median_ms());
    Outcome::Done {
        result: Box::new(r),
        cacheable: !transient,
        files: None,
        left,
    }
}

/// The outcomes of the C choices that were not measured: a compile failure is a result; one
/// compiled but never measured, or never compiled, was not started.
fn compile_outcomes(
    stage: &Stage<'_>,
    todo: &[Todo],
    c_todo: &[usize],
    measured: &[bool],
    compiled: Mutex<Vec<(usize, CompileOutcome)>>,
    on_outcome: &mut impl FnMut(usize, Outcome),
) {
    let mut outcomes = compiled.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut reported = vec![false; todo.len()];
    for (p, _) in &outcomes {
        reported[*p] = true;
    }
    outcomes.extend(c_todo.iter().filter(|&&p| !reported[p]).map(|&p| (p, None)));
    outcomes.sort_by_key(|(p, _)| *p);
    for (p, outcome) in outcomes {
        let outcome = match outcome {
            Some(Ok(_)) if measured[p] => continue,
            Some(Ok(_)) | None => Outcome::Skipped(stage.stop.reason()),
            Some(Err(e)) => match judge_compile(stage.setup, &todo[p], Err(e)) {
                // Killed by Ctrl-C: says nothing about the choice.
                Compiled::Ready { .. } | Compiled::Cancelled => Outcome::Skipped("interrupted"),
                // Cached with the headers read before the error (none when one was missing:
                // then the next run compiles it again).
                Compiled::Failed {
                    result,
                    cacheable,
                    dependencies,
                } => Outcome::Done {
                    result,
                    cacheable,
                    files: Some(dependencies),
                    left: Vec::new(),
                },
            },
        };
        on_outcome(p, outcome);
    }
}
