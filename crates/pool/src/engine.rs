//! The machinery under both pool faces: worker threads, each owning one `TuningProcess`, pulling
//! tasks from one queue.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tunebox_process::{KillSwitch, ProcessConfig, ProcessError, TuningProcess};
use tunebox_protocol::{BenchError, BenchmarkRequest, BenchmarkResult, Leftover};

use crate::PoolError;
use crate::contents::Contents;

/// Consecutive start-up failures after which a worker slot gives up.
const MAX_START_FAILURES: u32 = 3;

/// How long idle workers may take to exit cleanly when a pool is dropped.
const DROP_GRACE: Duration = Duration::from_millis(200);

/// How long a thread about to sleep (a worker thread waiting for a task, a caller waiting for a
/// result) first watches for what it waits for, yielding its CPU in between. Waking a sleeping
/// thread on another CPU costs 50-90 µs on some VMs; a task submitted or finished within this
/// window is picked up without that wake-up. The cost is at most this much CPU time per wait.
const SPIN: Duration = Duration::from_micros(50);

/// Watches `ready` for up to [`SPIN`], yielding between looks. Returns whether it became true.
fn spin_until(ready: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if ready() {
            return true;
        }
        if start.elapsed() >= SPIN {
            return false;
        }
        std::thread::yield_now();
    }
}

/// The outcome of one task.
pub(crate) type TaskResult = Result<BenchmarkResult, PoolError>;

/// What runs a task's measurement on its worker thread: given the measurement, it may do
/// something just before and just after it ([`crate::WindowHook`]), and returns its result.
pub(crate) type Around = Box<dyn FnOnce(&mut dyn FnMut() -> TaskResult) -> TaskResult + Send>;

/// The result slot of one task, shared by the worker that runs it and the handle that waits.
pub(crate) struct Completion {
    outcome: Mutex<Outcome>,
    ready: Condvar,
    /// Set once the outcome is `Ready`, readable without the lock.
    done: AtomicBool,
    cancelled: AtomicBool,
    /// Told the task's index when it completes (`benchmark_with` progress).
    notify: Option<(Sender<usize>, usize)>,
}

#[expect(
    clippy::large_enum_variant,
    reason = "one per task, resolved once; boxing the result would allocate per task"
)]
enum Outcome {
    Pending,
    Ready(TaskResult),
    Taken,
}

impl Completion {
    fn new(notify: Option<(Sender<usize>, usize)>) -> Arc<Completion> {
        Arc::new(Completion {
            outcome: Mutex::new(Outcome::Pending),
            ready: Condvar::new(),
            done: AtomicBool::new(false),
            cancelled: AtomicBool::new(false),
            notify,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Outcome> {
        self.outcome.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stores the result unless one is there already (the first resolution wins).
    fn resolve(&self, result: TaskResult) {
        let mut outcome = self.lock();
        if matches!(*outcome, Outcome::Pending) {
            *outcome = Outcome::Ready(result);
            self.done.store(true, Ordering::Release);
            drop(outcome);
            self.ready.notify_all();
            if let Some((tx, index)) = &self.notify {
                // The receiver may be gone (the caller gave up); nothing to tell then.
                let _ = tx.send(*index);
            }
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// Waits until `deadline` (`None`: forever) and takes the result.
    pub(crate) fn take(&self, deadline: Option<Instant>) -> Option<TaskResult> {
        spin_until(|| self.is_done());
        let mut outcome = self.lock();
        loop {
            match std::mem::replace(&mut *outcome, Outcome::Taken) {
                Outcome::Ready(result) => return Some(result),
                Outcome::Taken => panic!("a task's result is taken once, by its handle"),
                Outcome::Pending => *outcome = Outcome::Pending,
            }
            outcome = match deadline {
                None => self
                    .ready
                    .wait(outcome)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let now = Instant::now();
                    if now >= deadline {
                        return None;
                    }
                    self.ready
                        .wait_timeout(outcome, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
    }

    /// Applies `f` to the result without taking it; `None` while pending.
    pub(crate) fn peek<R>(&self, f: impl FnOnce(&TaskResult) -> R) -> Option<R> {
        match &*self.lock() {
            Outcome::Ready(result) => Some(f(result)),
            _ => None,
        }
    }
}

struct Task {
    request: BenchmarkRequest,
    timeout: Duration,
    completion: Arc<Completion>,
    /// Prepare (compile, load) instead of measuring; resolves with an empty result.
    prepare: bool,
    /// Run around the measurement on the worker thread (not for a prepare).
    around: Option<Around>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Open,
    /// Run what is queued, then stop.
    Draining,
    /// Stop now: queued tasks are resolved `ShutDown`, running ones killed.
    Closed,
}

struct State {
    /// Tasks not yet taken by a worker. `Shared::queued` mirrors its length.
    queue: VecDeque<Task>,
    phase: Phase,
    /// Worker threads still able to run tasks.
    live: usize,
    /// Why the last worker gave up, once none is left.
    unavailable: Option<GaveUp>,
    /// How long idle workers get to exit cleanly when the pool stops.
    grace: Duration,
}

/// One worker's presence in the shared state: what it runs and how to kill it.
struct Slot {
    kill: KillSwitch,
    running: Mutex<Option<Arc<Completion>>>,
    /// Set (from the exit-watcher thread) when the slot's worker exited by itself: the slot's
    /// thread then reaps and replaces it, even while idle.
    exited: AtomicBool,
}

/// What a worker thread does next.
#[expect(
    clippy::large_enum_variant,
    reason = "returned once per task and unpacked at once; boxing would allocate per task"
)]
enum Next {
    Run(Task),
    /// Its worker exited while idle: reap and replace it.
    Replace,
    Stop,
}

pub(crate) struct Shared {
    state: Mutex<State>,
    work: Condvar,
    /// The queue's length, readable without the lock (spinning workers watch it).
    queued: AtomicUsize,
    /// Set when the pool starts to stop, readable without the lock.
    stopping: AtomicBool,
    slots: Vec<Slot>,
    timeout: Duration,
}

/// Worker threads and the queue they serve.
pub(crate) struct Engine {
    shared: Arc<Shared>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    /// The large inputs made once for every request ([`Contents::attach`]), shared with the
    /// pools started beside this one ([`Engine::contents`]).
    contents: Arc<Contents>,
}

impl Engine {
    /// Starts one worker per config (all in parallel) and a thread to serve each.
    ///
    /// # Errors
    ///
    /// The first start-up error; every worker that did start is killed and reaped.
    pub(crate) fn start(
        configs: Vec<ProcessConfig>,
        timeout: Duration,
        contents: Arc<Contents>,
    ) -> Result<Engine, PoolError> {
        if configs.is_empty() {
            return Err(PoolError::NoWorkers { requested: 0 });
        }
        let processes = start_all(configs)?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                phase: Phase::Open,
                live: processes.len(),
                unavailable: None,
                grace: DROP_GRACE,
            }),
            work: Condvar::new(),
            queued: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
            slots: processes
                .iter()
                .map(|p| Slot {
                    kill: p.kill_switch(),
                    running: Mutex::new(None),
                    exited: AtomicBool::new(false),
                })
                .collect(),
            timeout,
        });
        let mut threads = Vec::with_capacity(processes.len());
        for (index, mut process) in processes.into_iter().enumerate() {
            let watcher: Weak<Shared> = Arc::downgrade(&shared);
            process.on_worker_exit(move || {
                if let Some(shared) = watcher.upgrade() {
                    shared.worker_exited(index);
                }
            });
            let worker_shared = shared.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("tunebox-pool-{index}"))
                .spawn(move || serve(&worker_shared, index, process));
            match spawned {
                Ok(thread) => threads.push(thread),
                Err(e) => {
                    // The process was moved into the failed closure and dropped (killed); the
                    // slot simply never serves.
                    log::warn!("no thread for pool worker {index}: {e}");
                    shared.lose_worker(GaveUp {
                        reason: format!("no thread for worker {index}: {e}"),
                        no_worker_entry: None,
                    });
                }
            }
        }
        if threads.is_empty() {
            return Err(PoolError::NoWorkers {
                requested: shared.slots.len(),
            });
        }
        Ok(Engine {
            shared,
            threads: Mutex::new(threads),
            contents,
        })
    }

    pub(crate) fn size(&self) -> usize {
        self.shared.slots.len()
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.shared.timeout
    }

    pub(crate) fn worker_pids(&self) -> Vec<Option<u32>> {
        self.shared.slots.iter().map(|s| s.kill.pid()).collect()
    }

    /// The large inputs this engine makes once, for a pool started beside it to share.
    pub(crate) fn contents(&self) -> &Arc<Contents> {
        &self.contents
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Queues a task, its large generated inputs given the pool's shared contents first
    /// ([`Contents::attach`]: made on the first request that needs them).
    ///
    /// # Errors
    ///
    /// [`PoolError::ShutDown`] after shutdown; [`PoolError::Unavailable`] when no worker is
    /// left. Nothing is queued or started then.
    pub(crate) fn submit(
        &self,
        mut request: BenchmarkRequest,
        timeout: Option<Duration>,
        notify: Option<(Sender<usize>, usize)>,
        around: Option<Around>,
    ) -> Result<Arc<Completion>, PoolError> {
        self.contents.attach(&mut request);
        self.submit_task(request, timeout, notify, around, false)
    }

    /// Queues a task that prepares `request` (compile, load) without measuring it; it resolves
    /// with [`prepared`].
    pub(crate) fn submit_prepare(
        &self,
        request: BenchmarkRequest,
        timeout: Option<Duration>,
    ) -> Result<Arc<Completion>, PoolError> {
        self.submit_task(request, timeout, None, None, true)
    }

    fn submit_task(
        &self,
        request: BenchmarkRequest,
        timeout: Option<Duration>,
        notify: Option<(Sender<usize>, usize)>,
        around: Option<Around>,
        prepare: bool,
    ) -> Result<Arc<Completion>, PoolError> {
        let completion = Completion::new(notify);
        let mut state = self.shared.lock();
        if state.phase != Phase::Open {
            return Err(PoolError::ShutDown);
        }
        if let Some(reason) = &state.unavailable {
            return Err(reason.error());
        }
        state.queue.push_back(Task {
            request,
            timeout: timeout.unwrap_or(self.shared.timeout),
            completion: completion.clone(),
            prepare,
            around,
        });
        self.shared
            .queued
            .store(state.queue.len(), Ordering::Release);
        drop(state);
        self.shared.work.notify_one();
        Ok(completion)
    }

    /// Stops the pool. With `drain`, queued tasks still run; otherwise they are resolved
    /// `ShutDown` and running tasks are killed (and resolved `ShutDown`). Idle workers are asked
    /// to exit and given `grace`. Returns once every worker thread has ended and every worker
    /// process is reaped, also when another thread is shutting the pool down at the same time
    /// (the later caller waits for the earlier one's joins). Idempotent.
    pub(crate) fn shutdown(&self, drain: bool, grace: Duration) {
        let abandoned = {
            let mut state = self.shared.lock();
            state.grace = grace;
            self.shared.stopping.store(true, Ordering::Release);
            if drain && state.phase == Phase::Open {
                state.phase = Phase::Draining;
                VecDeque::new()
            } else if !drain {
                state.phase = Phase::Closed;
                self.shared.queued.store(0, Ordering::Release);
                std::mem::take(&mut state.queue)
            } else {
                VecDeque::new()
            }
        };
        self.shared.work.notify_all();
        for task in abandoned {
            task.completion.resolve(Err(PoolError::ShutDown));
        }
        if !drain {
            for slot in &self.shared.slots {
                if slot
                    .running
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .is_some()
                {
                    slot.kill.kill();
                }
            }
        }
        // Joined under the lock: a concurrent shutdown (or the drop after it) waits here until
        // every thread has ended and reaped its worker, instead of finding the list empty and
        // returning while workers still run.
        let mut threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        for thread in threads.drain(..) {
            // A worker thread never panics on its own; if one did, the pool is still stopped.
            let _ = thread.join();
        }
    }
}

impl Drop for Engine {
    /// Stops at once: queued tasks resolve `ShutDown`, running ones are killed, every worker is
    /// reaped. Takes no lock that a caller's code could hold.
    fn drop(&mut self) {
        self.shutdown(false, DROP_GRACE);
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What the worker thread of slot `index` does next: run a task, replace its worker (which
    /// exited while idle), or stop.
    fn next_task(&self, index: usize) -> Next {
        let exited = &self.slots[index].exited;
        let mut state = self.lock();
        loop {
            match state.phase {
                Phase::Closed => return Next::Stop,
                Phase::Draining if state.queue.is_empty() => return Next::Stop,
                _ => {}
            }
            // Before taking a task: a task must not be handed to a dead worker.
            if exited.swap(false, Ordering::AcqRel) {
                return Next::Replace;
            }
            if let Some(task) = state.queue.pop_front() {
                self.queued.store(state.queue.len(), Ordering::Release);
                return Next::Run(task);
            }
            // Watch for a task (or a shutdown) for a moment before going to sleep.
            drop(state);
            let woke = spin_until(|| {
                self.queued.load(Ordering::Acquire) > 0
                    || self.stopping.load(Ordering::Acquire)
                    || exited.load(Ordering::Acquire)
            });
            state = self.lock();
            if !woke
                && state.queue.is_empty()
                && state.phase == Phase::Open
                && !exited.load(Ordering::Acquire)
            {
                state = self
                    .work
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
        }
    }

    /// Called from the exit-watcher thread: the worker of slot `index` exited by itself. Its
    /// thread wakes (if idle) to reap and replace it.
    fn worker_exited(&self, index: usize) {
        if let Some(slot) = self.slots.get(index) {
            slot.exited.store(true, Ordering::Release);
        }
        // Taking the lock orders this with a worker thread that looked at the flag and is about
        // to wait: it either saw the flag or is waiting by the time of the notification.
        drop(self.lock());
        self.work.notify_all();
    }

    fn closed(&self) -> bool {
        self.lock().phase == Phase::Closed
    }

    /// A worker gave up; when none is left, every queued task fails.
    fn lose_worker(&self, reason: GaveUp) {
        let abandoned = {
            let mut state = self.lock();
            state.live = state.live.saturating_sub(1);
            if state.live > 0 {
                return;
            }
            state.unavailable = Some(reason.clone());
            self.queued.store(0, Ordering::Release);
            std::mem::take(&mut state.queue)
        };
        for task in abandoned {
            task.completion.resolve(Err(reason.error()));
        }
    }

    /// Cancels a task: removed from the queue if it is still there, its worker killed if it is
    /// running. Returns whether the task was still pending.
    pub(crate) fn cancel(&self, completion: &Arc<Completion>) -> bool {
        if completion.is_done() {
            return false;
        }
        completion.cancelled.store(true, Ordering::Release);
        let queued = {
            let mut state = self.lock();
            let position = state
                .queue
                .iter()
                .position(|t| Arc::ptr_eq(&t.completion, completion));
            let removed = position.and_then(|p| state.queue.remove(p));
            self.queued.store(state.queue.len(), Ordering::Release);
            removed
        };
        if queued.is_none() {
            for slot in &self.slots {
                let running = slot.running.lock().unwrap_or_else(PoisonError::into_inner);
                if running.as_ref().is_some_and(|r| Arc::ptr_eq(r, completion)) {
                    slot.kill.kill();
                }
            }
        }
        completion.resolve(Err(PoolError::Cancelled));
        true
    }
}

/// What a prepare task resolves with: nothing was measured.
pub(crate) fn prepared() -> BenchmarkResult {
    BenchmarkResult::new(
        tunebox_protocol::TimingStats::unmeasured().with_stopped("prepared".into()),
    )
}

/// Why a worker slot gave up starting workers: what every task then fails with.
#[derive(Clone)]
struct GaveUp {
    reason: String,
    /// The worker was a program without the worker entry point (`ProcessError::NoWorkerEntry`):
    /// its path and pid.
    no_worker_entry: Option<(PathBuf, u32)>,
}

impl GaveUp {
    /// Slot `index` gave up after `failures` start-up failures in a row, the last being `error`.
    fn new(index: usize, failures: u32, error: &ProcessError) -> GaveUp {
        GaveUp {
            reason: format!(
                "worker {index} failed to start {failures} times in a row; last error: {error}"
            ),
            no_worker_entry: match error {
                ProcessError::NoWorkerEntry { path, pid } => Some((path.clone(), *pid)),
                _ => None,
            },
        }
    }

    /// `PoolError::Unavailable`, with the start-up error as its source.
    fn error(&self) -> PoolError {
        PoolError::Unavailable {
            source: match &self.no_worker_entry {
                Some((path, pid)) => ProcessError::NoWorkerEntry {
                    path: path.clone(),
                    pid: *pid,
                },
                None => ProcessError::Protocol {
                    detail: self.reason.clone(),
                    pid: None,
                },
            },
        }
    }
}

/// Starts every worker in parallel; on any failure, the others are dropped (killed, reaped).
fn start_all(configs: Vec<ProcessConfig>) -> Result<Vec<TuningProcess>, PoolError> {
    let started: Vec<Result<TuningProcess, ProcessError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = configs
            .iter()
            .map(|config| {
                let spawned = std::thread::Builder::new()
                    .name("tunebox-pool-start".into())
                    .spawn_scoped(scope, || TuningProcess::spawn(config.clone()));
                (config, spawned)
            })
            .collect();
        handles
            .into_iter()
            .map(|(config, handle)| match handle {
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                // No thread to be had: start it here.
                Err(_) => TuningProcess::spawn(config.clone()),
            })
            .collect()
    });
    started
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .map_err(PoolError::from)
}

/// Measures `request` on `process`. A task that fails for lack of a resource (descriptors,
/// memory, threads) in a worker that earlier tasks used, which the worker then reports with the
/// likely culprit (a `resources` leftover), is measured once more in a fresh worker: its own
/// failure only if it fails there too. The retried result keeps the first attempt's report in
/// its `left_behind`. A task the clock check finds `suspicious` ([`is_clock_alarm`]) is
/// measured once more too (in a fresh worker where workers are not reused), and that verdict
/// stands.
fn benchmark(
    process: &mut TuningProcess,
    request: BenchmarkRequest,
    timeout: Duration,
) -> Result<BenchmarkResult, ProcessError> {
    let again = request.clone();
    let error = match process.benchmark(request, timeout) {
        Err(error @ ProcessError::Remote(_)) => error,
        other => return other,
    };
    if is_clock_alarm(&error) {
        log::warn!("{error}; measuring the task once more, whose verdict stands");
        process.ensure_running()?;
        return process.benchmark(again, timeout);
    }
    let Some(exhausted) = process
        .left_behind()
        .iter()
        .find(|l| l.what == "resources" && !l.restored)
        .cloned()
    else {
        return Err(error);
    };
    log::info!("{exhausted}; measuring the task again in a fresh worker");
    process.ensure_running()?;
    let mut result = process.benchmark(again, timeout)?;
    let detail = format!("{}; measured again in a fresh worker", exhausted.detail);
    result
        .left_behind
        .insert(0, Leftover::new(exhausted.what, detail, exhausted.restored));
    Ok(result)
}

/// Whether `error` is the clock check's verdict (`suspicious`, `clock`): the worker's clock saw
/// much less time pass than the parent's. A thread stalled by a heavily loaded machine in a way
/// the scheduler's statistics do not count can raise it for an honest task (seen once in a
/// test suite run beside two busy loops per CPU), and on the reference it would fail the whole
/// run; a task that slows or replaces its clock raises it every time.
fn is_clock_alarm(error: &ProcessError) -> bool {
    matches!(error, ProcessError::Remote(BenchError::Suspicious { check, .. }) if check == "clock")
}

/// Runs `measure` inside the caller's `around` (a [`crate::WindowHook`]). A hook that panics
/// costs this request its result ([`PoolError::HookPanicked`]), not the worker thread: the
/// pool and the other requests carry on.
fn hooked(around: Around, measure: &mut dyn FnMut() -> TaskResult) -> TaskResult {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| around(measure))).unwrap_or_else(
        |panic| {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            Err(PoolError::HookPanicked { message })
        },
    )
}

/// A worker thread: keeps its process ready, runs tasks one at a time.
fn serve(shared: &Shared, index: usize, mut process: TuningProcess) {
    let slot = &shared.slots[index];
    let mut failures = 0;
    loop {
        if shared.closed() {
            break;
        }
        // Whatever the watcher said about the worker so far, `ensure_running` now deals with.
        slot.exited.store(false, Ordering::Release);
        // Replace a crashed, timed-out, retired or idle-killed worker now, before the next task
        // arrives.
        if let Err(e) = process.ensure_running() {
            failures += 1;
            log::warn!("pool worker {index} could not start ({failures} in a row): {e}");
            // A program without the worker entry point fails the same way every time.
            let hopeless = matches!(e, ProcessError::NoWorkerEntry { .. });
            if hopeless || failures >= MAX_START_FAILURES {
                shared.lose_worker(GaveUp::new(index, failures, &e));
                return;
            }
            std::thread::sleep(Duration::from_millis(20 << failures));
            continue;
        }
        failures = 0;
        let task = match shared.next_task(index) {
            Next::Run(task) => task,
            Next::Replace => continue,
            Next::Stop => break,
        };
        *slot.running.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(task.completion.clone());
        // A cancel that raced with the hand-over already resolved the task; a shutdown that
        // did is resolved here. One that comes later kills the worker through the kill switch,
        // which fails the request even if it was not sent yet.
        let result = if task.completion.is_done() {
            None
        } else if shared.closed() {
            Some(Err(PoolError::ShutDown))
        } else {
            Some(if task.prepare {
                process
                    .prepare(task.request, task.timeout)
                    .map(|()| prepared())
                    .map_err(PoolError::from)
            } else {
                let mut request = Some(task.request);
                let mut measure = || {
                    let request = request.take().expect("a task is measured once");
                    benchmark(&mut process, request, task.timeout).map_err(PoolError::from)
                };
                match task.around {
                    Some(around) => hooked(around, &mut measure),
                    None => measure(),
                }
            })
        };
        {
            let mut running = slot.running.lock().unwrap_or_else(PoisonError::into_inner);
            *running = None;
            // A kill aimed at this task that lost the race with its reply must not fail the
            // next task; the killed worker is replaced before then all the same.
            slot.kill.take_killed();
        }
        let Some(result) = result else { continue };
        let lost = |e: &PoolError| matches!(e, PoolError::Process(e) if e.worker_lost());
        let result = match result {
            Err(e) if lost(&e) && task.completion.cancelled.load(Ordering::Acquire) => {
                Err(PoolError::Cancelled)
            }
            Err(e) if lost(&e) && shared.closed() => Err(PoolError::ShutDown),
            other => other,
        };
        task.completion.resolve(result);
    }
    // Idle (or drained): exit cleanly. A killed worker is reaped here too.
    let grace = shared.lock().grace;
    let _ = process.shutdown(grace);
}
