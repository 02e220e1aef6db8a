//! `TuningProcess`: the parent's handle on one worker.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tunebox_protocol::{
    BenchError, BenchmarkRequest, BenchmarkResult, Leftover, MAX_INLINE_REQUEST_BYTES,
    MAX_SHARED_PAYLOADS, Probe, Request, RequestBody, ResponseBody, SpareBuffers, Task,
    TaskRequest, WORKER_USES_ENV, decode_output,
};

use crate::child::{ReceiveFailure, Received, SendFailure, Worker};
use crate::exit::describe_exit;
use crate::exit_watch::{self, Wake};
use crate::handshake;
use crate::pids::{deadline_after, exit_parts};
use crate::{InitRequest, KillSwitch, ProcessConfig, ProcessError};

/// How long a worker that closed its channel may take to be reaped before it is killed.
const DEATH_GRACE: Duration = Duration::from_secs(1);

/// How long a worker retired after `maximum_process_uses` may take to exit before it is killed.
const RETIRE_GRACE: Duration = Duration::from_millis(100);

/// Requests whose inline payload exceeds this are sent with a guard (see `Worker::send`): with
/// another message queued they might not fit in the socket buffer at once.
const UNGUARDED_SEND_BYTES: usize = 32 * 1024;

/// A request sent and not yet answered.
struct Pending {
    id: u64,
    /// Kept (shared, not copied) to send it again if the worker dies before beginning it.
    body: Arc<RequestBody>,
    /// Whether it may be sent to a fresh worker once more: not after a first resend, never for
    /// the initializer (whose failure is reported as such).
    resend: bool,
    /// Sent with a guard whatever else is queued (large inline payload).
    large: bool,
    /// Counts toward `maximum_process_uses` (benchmark requests).
    is_use: bool,
    /// When it was handed to a worker (again, for a resend), after the parent's own work
    /// before the send: the parent's clock, which the worker's is checked against.
    sent: Instant,
    /// The worker's and this thread's waits for a CPU when it was sent (the clock check).
    waits: Option<crate::clock::WaitMark>,
}

/// What a request is for, which decides how it is resent and counted.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Purpose {
    /// A benchmark: counts toward `maximum_process_uses`.
    Use,
    /// A ping, probe or prepare.
    Other,
    /// The initializer of a fresh worker: never resent.
    Init,
}

/// Which of a dead worker's stderr a crash error quotes.
#[derive(Clone, Copy)]
enum Quote {
    /// All of it the ring holds: a death while idle is no request's crash.
    Whole,
    /// None: a request not sent yet (the kill switch fired first).
    Nothing,
}

/// One isolated worker process, as Inductor's `TuningProcess` and TVM's `PopenWorker`.
///
/// Requests go out with [`put`](TuningProcess::put); [`get`](TuningProcess::get) waits for the
/// reply with a deadline the parent enforces itself. A worker that crashes, times out or breaks
/// the protocol is killed (whole process group) and reaped before the error is returned, and the
/// next `put` starts a fresh one. Dropping the handle kills and reaps the worker.
///
/// A request is only ever blamed for a death it could have caused: the worker records each
/// request as it begins it (in shared memory, no extra message), and a request sent to a worker
/// that died before beginning it (one that ended itself right after its previous reply, say) is
/// sent once more, to a fresh worker, instead of being reported as a crash.
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use tunebox_process::{ProcessConfig, ProcessError, TuningProcess};
/// use tunebox_protocol::{BenchmarkRequest, DiagnosticTask, Kernel};
///
/// let mut worker = TuningProcess::spawn(ProcessConfig::new().worker("target/release/tunebox-worker"))?;
/// let sleep = BenchmarkRequest::new(Kernel::Diagnostic(DiagnosticTask::Sleep { ms: 10 }));
/// let result = worker.benchmark(sleep, Duration::from_secs(5))?;
/// assert!(result.stats.median_ms >= 10.0);
///
/// let crash = BenchmarkRequest::new(Kernel::Diagnostic(DiagnosticTask::Segfault));
/// let err = worker.benchmark(crash, Duration::from_secs(5)).unwrap_err();
/// assert!(matches!(err, ProcessError::WorkerCrashed { signal: Some(11), .. }));
/// # Ok::<(), ProcessError>(())
/// ```
pub struct TuningProcess {
    config: ProcessConfig,
    worker: Option<Worker>,
    next_id: u64,
    /// The request `get` waits for.
    pending: Option<Pending>,
    starts: u64,
    /// Knows the running worker's pid; cleared before the worker is reaped.
    switch: KillSwitch,
    /// Called when a worker exits while nothing waits on it (see `on_worker_exit`).
    on_exit: Option<Wake>,
    /// The pid of the last worker started (0 before the first), for errors about a worker
    /// already taken out.
    last_pid: u32,
    /// What the last reply said its request left behind in the worker.
    left_behind: Vec<Leftover>,
    /// How long the parent waited for the last reply, from the send to the worker that
    /// answered it to the start of the receive call that took the reply
    /// ([`Received::polled_at`](crate::child::Received)), and the waits for a CPU meanwhile:
    /// what the clock check holds the worker's clock to. The parent's own work before the send
    /// and after the reply (decoding it, reading held outputs, looking for strays) is not the
    /// worker's time.
    answered: Option<(Duration, crate::clock::Sched)>,
    /// The current worker was left damaged (a leftover not restored): replace it before the
    /// next request.
    damaged: bool,
    /// Processes in the sandboxed worker's cgroup when the pending request was sent: left by
    /// an earlier request (killed then), so never charged to this one.
    strays_before: Vec<u32>,
    /// Buffers large outputs read out of this handle's workers filled, for the next reads
    /// (they go with the handle).
    spare_outputs: SpareBuffers,
}

impl TuningProcess {
    /// Starts a worker now, completes the handshake and runs the initializer.
    ///
    /// # Errors
    ///
    /// [`ProcessError::Spawn`], [`ProcessError::ExitedBeforeHandshake`],
    /// [`ProcessError::HandshakeTimeout`], [`ProcessError::ProtocolMismatch`],
    /// [`ProcessError::Protocol`] or [`ProcessError::InitializerFailed`]; the child, if any, has
    /// been reaped.
    pub fn spawn(config: ProcessConfig) -> Result<TuningProcess, ProcessError> {
        let mut process = TuningProcess::lazy(config);
        process.ensure_started()?;
        Ok(process)
    }

    /// A handle whose worker starts on the first [`put`](TuningProcess::put) or
    /// [`ping`](TuningProcess::ping).
    pub fn lazy(config: ProcessConfig) -> TuningProcess {
        // The worker skips its state checks after its last use (see `WORKER_USES_ENV`); set
        // either way, so that a value inherited from this process's environment never counts.
        let uses = match config.maximum_process_uses {
            Some(uses) => {
                let init = u64::from(config.initializer.is_some());
                uses.saturating_add(init).to_string()
            }
            None => "unlimited".to_owned(),
        };
        let config = config.env(WORKER_USES_ENV, uses);
        TuningProcess {
            config,
            worker: None,
            next_id: 0,
            pending: None,
            starts: 0,
            switch: KillSwitch::default(),
            on_exit: None,
            last_pid: 0,
            left_behind: Vec::new(),
            answered: None,
            damaged: false,
            strays_before: Vec::new(),
            spare_outputs: SpareBuffers::default(),
        }
    }

    /// Sends a benchmark request; its reply is what the next [`get`](TuningProcess::get)
    /// returns. First starts a worker if there is none (never started, crashed, timed out,
    /// killed) or replaces the current one if it has served `maximum_process_uses` requests. A reply to
    /// an earlier request that was never collected is discarded when it arrives.
    ///
    /// `put` never blocks indefinitely: a request that may not fit in the socket buffer, or that
    /// queues behind an uncollected one, is sent with a guard, and a worker that does not take it
    /// within the config's `send_timeout` is killed ([`ProcessError::SendTimeout`]).
    ///
    /// # Errors
    ///
    /// [`ProcessError::RequestTooLarge`] or [`ProcessError::TooManyBuffers`] before anything is
    /// sent; the start-up errors of [`spawn`](TuningProcess::spawn) (a worker found dead is
    /// replaced, and the request sent to the new one); [`ProcessError::WorkerCrashed`] only when
    /// a [`KillSwitch`] killed the worker; [`ProcessError::SendTimeout`].
    pub fn put(&mut self, request: BenchmarkRequest) -> Result<(), ProcessError> {
        self.check_sendable(&request)?;
        let large = request.inline_bytes() > UNGUARDED_SEND_BYTES;
        self.send_as(
            RequestBody::Benchmark(Box::new(request)),
            large,
            Purpose::Use,
        )
    }

    /// Waits up to `timeout` for the reply to the last [`put`](TuningProcess::put).
    ///
    /// # Errors
    ///
    /// - [`ProcessError::Remote`]: the task failed; the worker lives.
    /// - [`ProcessError::Timeout`]: no reply in time; the worker's process group was SIGKILLed
    ///   and reaped before this returns, however the worker behaves (blocked signals, native
    ///   spin).
    /// - [`ProcessError::WorkerCrashed`]: the worker died while running the request; reported
    ///   as soon as its channel closes, with its exit code or signal and its stderr tail. A reply
    ///   it sent before dying is still returned. A worker that died *before beginning* the
    ///   request is no crash of it: the request is sent once more, to a fresh worker, and
    ///   `timeout` counts again from then (so the start-up errors of
    ///   [`spawn`](TuningProcess::spawn) can come from here too).
    /// - [`ProcessError::Protocol`]: no request is pending, or the worker sent a malformed reply
    ///   (it is killed).
    pub fn get(&mut self, timeout: Duration) -> Result<BenchmarkResult, ProcessError> {
        let response = self.receive(timeout)?;
        let answered = self.answered.take();
        match response {
            ResponseBody::Benchmark(result) => {
                let strays = self.kill_strays(&result);
                result
                    .and_then(|r| {
                        let parent = answered.map(|(took, _)| took);
                        let sched = answered.map(|(_, sched)| sched).unwrap_or_default();
                        crate::clock::check_worker_clock(r, parent, sched)
                    })
                    .and_then(|r| no_strays(r, &strays))
                    .map(|mut result| {
                        result.left_behind = self.left_behind.clone();
                        result
                    })
                    .map_err(|e| self.remote(e))
            }
            other => {
                Err(self.protocol_violation(format!("expected a benchmark reply, got {other:?}")))
            }
        }
    }

    /// What the request of the last reply left behind in its worker, as the worker found after
    /// it (`BenchmarkResult::left_behind` carries the same for a measurement; this also serves
    /// a task that failed). Restorable state was put back; when a leftover is not `restored`,
    /// the worker is replaced before the next request. Empty when the last reply said nothing,
    /// or no reply came (a crash, a timeout).
    pub fn left_behind(&self) -> &[Leftover] {
        &self.left_behind
    }

    /// Does everything `benchmark` would before measuring (compile into the cache, load, check
    /// the launch), as a worker's backend defines it: compiles spread over a pool's workers
    /// ahead of the measurements.
    ///
    /// # Errors
    ///
    /// As [`benchmark`](TuningProcess::benchmark).
    pub fn prepare(
        &mut self,
        request: BenchmarkRequest,
        timeout: Duration,
    ) -> Result<(), ProcessError> {
        self.check_sendable(&request)?;
        let large = request.inline_bytes() > UNGUARDED_SEND_BYTES;
        self.send_as(
            RequestBody::Prepare(Box::new(request)),
            large,
            Purpose::Other,
        )?;
        match self.receive(timeout)? {
            ResponseBody::Prepared(result) => result.map_err(|e| self.remote(e)),
            other => {
                Err(self.protocol_violation(format!("expected a prepare reply, got {other:?}")))
            }
        }
    }

    /// The worker's backends and the devices they see (`tunebox devices`, and how a GPU pool
    /// counts the GPUs when `CUDA_VISIBLE_DEVICES` is unset). Starts the worker if needed.
    ///
    /// # Errors
    ///
    /// As [`ping`](TuningProcess::ping).
    pub fn probe(&mut self, timeout: Duration) -> Result<Probe, ProcessError> {
        self.send_as(RequestBody::Probe, false, Purpose::Other)?;
        match self.receive(timeout)? {
            ResponseBody::Probe(probe) => Ok(probe),
            other => Err(self.protocol_violation(format!("expected a probe reply, got {other:?}"))),
        }
    }

    /// A task error from the worker. One that retires the worker also ends it now, so the next
    /// request starts a fresh one at once: after a sticky device fault the worker answers, then
    /// exits, and is reaped; after work the candidate left running it is killed at once, with
    /// everything it started (its cgroups, else its process tree, which it still holds as their
    /// subreaper while it lives).
    fn remote(&mut self, error: BenchError) -> ProcessError {
        if error.retires_worker()
            && let Some(mut worker) = self.take_worker()
        {
            if error.ends_worker() {
                worker.wait_or_kill(DEATH_GRACE);
            } else {
                worker.kill();
            }
            self.pending = None;
        }
        ProcessError::Remote(error)
    }

    /// [`put`](TuningProcess::put) then [`get`](TuningProcess::get). Unless the request sets
    /// its own `timing.budget_ms`, it gets 80 % of `timeout`
    /// ([`TimingConfig::fit_to_timeout`](tunebox_protocol::TimingConfig::fit_to_timeout)): the
    /// worker fits warmup and reps into that, so a slow kernel is measured with fewer reps
    /// instead of timing out; only a call that hangs (or alone outlasts the budget) times out.
    ///
    /// # Errors
    ///
    /// Those of `put` and `get`.
    pub fn benchmark(
        &mut self,
        mut request: BenchmarkRequest,
        timeout: Duration,
    ) -> Result<BenchmarkResult, ProcessError> {
        request.timing.fit_to_timeout(timeout);
        self.put(request)?;
        self.get(timeout)
    }

    /// Runs one task of a kind defined outside tunebox ([`Task`]) and returns its typed result:
    /// [`benchmark`](TuningProcess::benchmark) for `task` (encoded into a
    /// [`Kernel::Task`](tunebox_protocol::Kernel::Task) request, its budget fitted to
    /// `timeout`), then the reply decoded as `T::Output`. The worker needs the task's backend
    /// (`tunebox_worker::Registry::with_task` in its `main`).
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use serde::{Deserialize, Serialize};
    /// # use tunebox_process::{ProcessConfig, TuningProcess};
    /// # use tunebox_protocol::Task;
    /// #[derive(Serialize, Deserialize)]
    /// struct Square(u64);
    /// impl Task for Square {
    ///     const BACKEND: &'static str = "squares";
    ///     type Output = u64;
    /// }
    ///
    /// // A worker binary whose registry has `with_task(|Square(n), _| Ok(n * n))`.
    /// let mut worker = TuningProcess::spawn(ProcessConfig::new().worker("target/release/my-worker"))?;
    /// assert_eq!(worker.run_task(Square(12), Duration::from_secs(5))?, 144);
    /// # Ok::<(), tunebox_process::ProcessError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// Those of [`benchmark`](TuningProcess::benchmark): a task error of the backend is
    /// [`ProcessError::Remote`] (as is a task that cannot be encoded, a worker without the
    /// task's backend — `BenchError::UnknownBackend` names those it has — and a reply that does
    /// not decode as `T::Output`); a crash or timeout is told apart as for any request.
    pub fn run_task<T: Task>(
        &mut self,
        task: impl Into<TaskRequest<T>>,
        timeout: Duration,
    ) -> Result<T::Output, ProcessError> {
        let request = task.into().encode()?;
        let result = self.benchmark(request, timeout)?;
        Ok(decode_output::<T>(&result)?)
    }

    /// Round trip of a `Ping`, starting the worker if needed. Returns the round-trip time. Any
    /// uncollected benchmark reply is abandoned.
    ///
    /// # Errors
    ///
    /// As [`get`](TuningProcess::get), and the start-up errors.
    pub fn ping(&mut self, timeout: Duration) -> Result<Duration, ProcessError> {
        let start = Instant::now();
        self.send_as(RequestBody::Ping, false, Purpose::Other)?;
        match self.receive(timeout)? {
            ResponseBody::Pong => Ok(start.elapsed()),
            other => Err(self.protocol_violation(format!("expected Pong, got {other:?}"))),
        }
    }

    /// Whether a worker process is running now (started and not exited).
    pub fn alive(&mut self) -> bool {
        // Looks without reaping: the kill switch must be cleared before the worker is reaped.
        self.worker.as_ref().is_some_and(|w| !w.has_exited())
    }

    /// The pid of the current worker, if one is running: `None` once it has exited, even
    /// before this handle reaps it (on its next request or `ensure_running`).
    pub fn pid(&self) -> Option<u32> {
        self.worker
            .as_ref()
            .filter(|w| !w.has_exited())
            .map(|w| w.pid)
    }

    /// Calls `wake` as soon as a worker of this handle (the current one and every later one)
    /// exits by itself, for example killed from outside while idle, so that an owner that is
    /// not waiting on it can reap and replace it at once with
    /// [`ensure_running`](TuningProcess::ensure_running) instead of at the next request (a pool
    /// does this for its idle workers). Workers this handle ends itself (timeout, kill,
    /// retirement) usually do not call it, but may; `wake` must tolerate a call for nothing.
    ///
    /// `wake` runs on a process-wide watcher thread (one pidfd per worker): it must be quick
    /// and must not block. Replaces an earlier `wake`. On systems without pidfds (Linux before
    /// 5.3) it is never called.
    pub fn on_worker_exit(&mut self, wake: impl Fn() + Send + Sync + 'static) {
        let wake: Wake = Arc::new(wake);
        if let Some(worker) = &mut self.worker {
            worker.watch = exit_watch::watch(worker.pid, wake.clone());
        }
        self.on_exit = Some(wake);
    }

    /// How many times a worker was started after the first.
    pub fn restarts(&self) -> u64 {
        self.starts.saturating_sub(1)
    }

    /// The configuration workers are started with.
    pub fn config(&self) -> &ProcessConfig {
        &self.config
    }

    /// The captured stdout of the current worker (empty unless stdout is `Output::Capture`).
    pub fn stdout_tail(&self) -> String {
        self.worker
            .as_ref()
            .map(Worker::stdout_tail)
            .unwrap_or_default()
    }

    /// The captured stderr of the current worker (empty unless stderr is `Output::Capture`).
    pub fn stderr_tail(&self) -> String {
        self.worker
            .as_ref()
            .map(Worker::stderr_tail)
            .unwrap_or_default()
    }

    /// SIGKILLs the worker's process group and reaps it. A pending request is forgotten. The
    /// next `put` starts a new worker. Does nothing when no worker runs.
    pub fn kill(&mut self) {
        if let Some(mut worker) = self.take_worker() {
            worker.kill();
        }
        self.pending = None;
    }

    /// Asks the worker to exit, waits up to `grace` for it, then SIGKILLs its process group;
    /// reaps it in every case. Idempotent: without a worker it does nothing. A later `put`
    /// starts a new worker.
    ///
    /// # Errors
    ///
    /// [`ProcessError::WorkerCrashed`] when the worker had already died (for example killed from
    /// outside while idle) before it could be asked; it is reaped all the same.
    pub fn shutdown(&mut self, grace: Duration) -> Result<(), ProcessError> {
        self.pending = None;
        let Some(worker) = self.worker.as_mut() else {
            return Ok(());
        };
        // Its exit is expected: nobody needs waking for it.
        worker.watch = None;
        self.next_id += 1;
        let shutdown = Request::new(self.next_id, RequestBody::Shutdown);
        // Without cgroups, what it started must be killed while its process tree holds them.
        worker.enclosure.prepare_exit(worker.pid);
        if worker.send(shutdown, Some(grace)).is_ok() {
            let mut worker = self.take_worker().expect("checked above");
            worker.wait_or_kill(grace);
            Ok(())
        } else {
            Err(self.crashed(Quote::Whole))
        }
    }

    /// Refuses, before anything is sent, a request no single message can carry.
    fn check_sendable(&self, request: &BenchmarkRequest) -> Result<(), ProcessError> {
        let inline = request.inline_bytes();
        if inline > MAX_INLINE_REQUEST_BYTES {
            return Err(ProcessError::RequestTooLarge {
                bytes: inline,
                limit: MAX_INLINE_REQUEST_BYTES,
            });
        }
        if request.shared_payloads() > MAX_SHARED_PAYLOADS {
            return Err(ProcessError::TooManyBuffers {
                limit: MAX_SHARED_PAYLOADS,
            });
        }
        Ok(())
    }

    /// A handle that kills the current (and any future) worker of this process from another
    /// thread. See [`KillSwitch`].
    pub fn kill_switch(&self) -> KillSwitch {
        self.switch.clone()
    }

    /// Makes sure a worker is running and can take a request: replaces one that reached
    /// `maximum_process_uses` or died, and starts one (with its initializer) if there is none. A pool
    /// calls this right after a task, so the next task does not pay the start-up.
    ///
    /// # Errors
    ///
    /// The start-up errors of [`spawn`](TuningProcess::spawn).
    pub fn ensure_running(&mut self) -> Result<(), ProcessError> {
        let exhausted = self
            .worker
            .as_ref()
            .zip(self.config.maximum_process_uses)
            .is_some_and(|(worker, max)| worker.uses >= max);
        if self.damaged && self.worker.is_some() {
            log::info!(
                "worker {} was left damaged by its last task ({}); replacing it",
                self.last_pid,
                self.left_behind
                    .iter()
                    .filter(|l| !l.restored)
                    .map(Leftover::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            let _ = self.shutdown(RETIRE_GRACE);
        } else if exhausted {
            log::debug!("worker reached maximum_process_uses; replacing it");
            // The retired worker's exit status is of no interest.
            let _ = self.shutdown(RETIRE_GRACE);
        } else if self.worker.as_ref().is_some_and(Worker::has_exited) {
            // Looked at without reaping: `crashed` clears the kill switch first, then reaps.
            let error = self.crashed(Quote::Whole);
            log::warn!("worker died while idle: {error}");
        }
        self.ensure_started().map(drop)
    }

    /// Takes the worker out, clearing the kill switch first so it can never signal a reaped pid,
    /// and ending its exit watch (the caller is about to reap it).
    fn take_worker(&mut self) -> Option<Worker> {
        self.switch.set(None);
        let mut worker = self.worker.take()?;
        worker.watch = None;
        Some(worker)
    }

    /// Starts a worker if there is none, and runs the initializer on it.
    fn ensure_started(&mut self) -> Result<&mut Worker, ProcessError> {
        if self.worker.is_none() {
            self.damaged = false;
            let worker = handshake::start(&self.config)?;
            self.starts += 1;
            self.last_pid = worker.pid;
            log::debug!("worker started, pid {}", worker.pid);
            self.switch.set(Some(worker.pid));
            let mut worker = worker;
            if let Some(wake) = &self.on_exit {
                worker.watch = exit_watch::watch(worker.pid, wake.clone());
            }
            self.worker = Some(worker);
            if let Some(init) = self.config.initializer.clone() {
                self.initialize(&init)?;
            }
        }
        Ok(self.worker.as_mut().expect("a worker was just started"))
    }

    /// Runs the initializer on the fresh worker. A failure kills the worker and is
    /// [`ProcessError::InitializerFailed`]; the next request tries again with a new worker.
    fn initialize(&mut self, init: &InitRequest) -> Result<(), ProcessError> {
        let result = self
            .send_as(
                RequestBody::Benchmark(Box::new(init.request.clone())),
                true,
                Purpose::Init,
            )
            .and_then(|()| self.receive(init.timeout));
        let message = match result {
            Ok(ResponseBody::Benchmark(Ok(_))) => return Ok(()),
            Ok(ResponseBody::Benchmark(Err(e))) => e.to_string(),
            Ok(other) => format!("unexpected reply {other:?}"),
            Err(e) => e.to_string(),
        };
        self.kill();
        Err(ProcessError::InitializerFailed { message })
    }

    /// Sends `body` as a new request, the one `get` then waits for, first starting or
    /// replacing the worker as needed.
    fn send_as(
        &mut self,
        body: RequestBody,
        large: bool,
        purpose: Purpose,
    ) -> Result<(), ProcessError> {
        // A request queued behind an uncollected one may wait for the worker to finish it.
        let queued = self.pending.is_some();
        if self.switch.take_killed() {
            // A kill through the KillSwitch is reported to this request, not papered over by
            // starting a new worker for it.
            self.pending = None;
            return Err(match self.worker {
                // This request was not sent: nothing the worker wrote is its output.
                Some(_) => self.crashed(Quote::Nothing),
                None => ProcessError::WorkerCrashed {
                    pid: self.last_pid,
                    exit_code: None,
                    signal: Some(9),
                    stderr_tail: String::new(),
                },
            });
        }
        if !queued {
            // Replaces a worker that reached maximum_process_uses or died while idle (killed from
            // outside, say): nothing was lost, so this request goes to a fresh one.
            self.ensure_running()?;
        }
        self.pending = None;
        self.ensure_started()?;
        let request = Pending {
            id: 0,
            body: Arc::new(body),
            resend: purpose != Purpose::Init,
            large,
            is_use: purpose == Purpose::Use,
            // Both set by `transmit`, at the send.
            sent: Instant::now(),
            waits: None,
        };
        self.transmit(request, queued)
    }

    /// Sends `request` under a new id to the current worker and makes it the pending one. A
    /// worker found dead is replaced and the request sent to the new one (see `recover`).
    fn transmit(&mut self, mut request: Pending, queued: bool) -> Result<(), ProcessError> {
        let guard = (request.large || queued).then_some(self.config.send_timeout);
        self.next_id += 1;
        request.id = self.next_id;
        let worker = self.worker.as_mut().expect("started by the caller");
        if request.is_use && self.config.check_children_value() {
            // What an earlier request left running (after its reply was checked) is killed
            // before this one runs beside it, and not charged to it.
            let strays = worker.enclosure.kill_strays(worker.pid);
            if !strays.is_empty() {
                log::info!(
                    "killed {} process(es) an earlier request left in worker {} (pids {strays:?})",
                    strays.len(),
                    worker.pid
                );
            }
            self.strays_before = strays;
        }
        let message = Request::shared(request.id, request.body.clone())
            .holding_outputs(request.is_use && crate::held_outputs::enabled());
        // The clock check's start: after the parent's own work for the request.
        request.waits = crate::clock::WaitMark::for_request(&request.body, worker.pid);
        request.sent = Instant::now();
        match worker.send(message, guard) {
            Ok(()) => {
                if request.is_use {
                    worker.uses += 1;
                }
                self.pending = Some(request);
                Ok(())
            }
            Err(SendFailure::Closed) => {
                // The worker is gone: it cannot have begun this request.
                self.pending = Some(request);
                self.recover()
            }
            Err(SendFailure::TimedOut) => {
                let pid = worker.pid;
                self.kill();
                Err(ProcessError::SendTimeout {
                    pid,
                    after: self.config.send_timeout,
                })
            }
        }
    }

    /// The worker died while `pending` was outstanding. Reaps it; then, if it had not begun the
    /// request (the id it recorded last is an earlier one) and the request may be resent,
    /// starts a fresh worker and sends the request there (`Ok`: it is pending again).
    /// Otherwise the death is the request's crash.
    fn recover(&mut self) -> Result<(), ProcessError> {
        let pending = self.pending.take();
        // A kill through the switch is reported by the request it hit.
        let killed = self.switch.take_killed();
        let Some(mut worker) = self.take_worker() else {
            return Err(ProcessError::Protocol {
                detail: "no worker".into(),
                pid: None,
            });
        };
        let status = worker.wait_or_kill(DEATH_GRACE);
        let (exit_code, signal) = exit_parts(status);
        // Read after the reap: the worker can no longer write it.
        let last_started = worker.started.last_started();
        let pending = match pending {
            Some(pending) if pending.resend && !killed && last_started < pending.id => pending,
            _ => {
                return Err(self.explain(ProcessError::WorkerCrashed {
                    pid: worker.pid,
                    exit_code,
                    signal,
                    stderr_tail: worker.request_stderr_tail(),
                }));
            }
        };
        log::debug!(
            "worker {} {} before beginning request {} (it began {last_started} last); sending \
             the request to a fresh worker",
            worker.pid,
            describe_exit(exit_code, signal),
            pending.id,
        );
        drop(worker);
        self.ensure_started()?;
        self.transmit(
            Pending {
                resend: false,
                ..pending
            },
            false,
        )
    }

    /// Waits for the reply to the pending request.
    fn receive(&mut self, timeout: Duration) -> Result<ResponseBody, ProcessError> {
        self.left_behind.clear();
        loop {
            let (Some(pending), Some(worker)) = (self.pending.as_ref(), self.worker.as_ref())
            else {
                return Err(ProcessError::Protocol {
                    detail: "get() without a pending request: call put() first".into(),
                    pid: None,
                });
            };
            match worker.receive(
                pending.id,
                deadline_after(timeout),
                self.config.write_limit_value(),
            ) {
                Ok(Received {
                    mut response,
                    polled_at,
                }) => {
                    let pid = worker.pid;
                    // The parent's clock stops at the reply, before its decoding.
                    let answered = (
                        polled_at.saturating_duration_since(pending.sent),
                        pending
                            .waits
                            .as_ref()
                            .map(|w| w.since(pid))
                            .unwrap_or_default(),
                    );
                    if !self.read_held(&mut response.body, pid)? {
                        continue;
                    }
                    self.pending = None;
                    self.answered = Some(answered);
                    self.damaged |= response.left_behind.iter().any(|l| !l.restored);
                    self.left_behind = response.left_behind;
                    return Ok(response.body);
                }
                // Resent to a fresh worker when the dead one never began it: wait again. A
                // worker the kill switch froze (SIGSTOP, then SIGKILL) is that kill, not a
                // stop of its own.
                Err(ReceiveFailure::Closed) => self.recover()?,
                Err(ReceiveFailure::Stopped(_)) if self.switch.is_killed() => self.recover()?,
                Err(failure) => return Err(self.wait_failed(failure, timeout)),
            }
        }
    }

    /// The error of a wait for a reply that ended without one (`failure`, not `Closed`: a
    /// timeout, a garbled or stuck message, a worker writing past its limit); the worker is
    /// killed.
    fn wait_failed(&mut self, failure: ReceiveFailure, timeout: Duration) -> ProcessError {
        let pid = self.worker.as_ref().map_or(0, |w| w.pid);
        match failure {
            ReceiveFailure::TimedOut => {
                let progress = match (self.worker.as_ref(), self.pending.as_ref()) {
                    (Some(worker), Some(pending)) => worker.started.progress(pending.id),
                    _ => None,
                };
                self.kill();
                ProcessError::Timeout {
                    pid,
                    after: timeout,
                    progress,
                }
            }
            ReceiveFailure::WroteTooMuch(written) => {
                self.kill();
                ProcessError::WroteTooMuch {
                    pid,
                    written,
                    limit: self.config.write_limit_value().unwrap_or(u64::MAX),
                }
            }
            ReceiveFailure::Stopped(signal) => {
                self.kill();
                ProcessError::Stopped { pid, signal }
            }
            ReceiveFailure::Garbled(e) => self.protocol_violation(format!("unreadable reply: {e}")),
            ReceiveFailure::Stuck | ReceiveFailure::Closed => self.protocol_violation(
                "a partial or garbled message stayed in the worker's channel (did the kernel \
                 write to file descriptors it does not own?); the worker was killed"
                    .into(),
            ),
        }
    }

    /// Reads the outputs the reply `body` of worker `pid` holds out of its memory
    /// (`held_outputs`). Returns `false` when the read was refused: holding is off now and the
    /// pending request was sent again, its outputs to come as regions.
    ///
    /// # Errors
    ///
    /// [`ProcessError::Protocol`] for a reply naming memory its worker does not hold (the worker
    /// is killed); the errors of sending the request again.
    fn read_held(&mut self, body: &mut ResponseBody, pid: u32) -> Result<bool, ProcessError> {
        match crate::held_outputs::read(body, pid, &self.spare_outputs) {
            Ok(()) => Ok(true),
            Err(crate::held_outputs::Unread::Garbled(e)) => Err(self.protocol_violation(format!(
                "the reply names outputs the worker does not hold: {e}"
            ))),
            Err(crate::held_outputs::Unread::Refused) => {
                let pending = self
                    .pending
                    .take()
                    .expect("a reply answers a pending request");
                self.transmit(pending, false)?;
                Ok(false)
            }
        }
    }

    /// Reaps a worker whose channel closed and describes its death, quoting its stderr as
    /// `quote` says.
    fn crashed(&mut self, quote: Quote) -> ProcessError {
        self.pending = None;
        // A kill through the switch is reported by this error.
        self.switch.take_killed();
        let Some(mut worker) = self.take_worker() else {
            return ProcessError::Protocol {
                detail: "no worker".into(),
                pid: None,
            };
        };
        let status = worker.wait_or_kill(DEATH_GRACE);
        let (exit_code, signal) = exit_parts(status);
        self.explain(ProcessError::WorkerCrashed {
            pid: worker.pid,
            exit_code,
            signal,
            stderr_tail: match quote {
                Quote::Whole => worker.stderr_tail(),
                Quote::Nothing => String::new(),
            },
        })
    }

    /// Kills the processes the worker left running after the reply `result` (in its cgroups,
    /// which no process group or session change hides from, else among its descendants: it is a
    /// child subreaper, so a daemon that double-forked is one), frozen first where the freezer
    /// is, so that none forks meanwhile; returns their pids. Done when the parent looks after
    /// every reply ([`ProcessConfig::check_children`]), and whenever the worker itself reports
    /// `children_after_call`: what it saw must not keep running (and be blamed on every later
    /// request of this worker). The worker lives on.
    fn kill_strays(&self, result: &Result<BenchmarkResult, BenchError>) -> Vec<u32> {
        let Some(worker) = self.worker.as_ref() else {
            return Vec::new();
        };
        let reported = matches!(
            result,
            Err(BenchError::Suspicious { check, .. }) if check == "children_after_call"
        );
        if !(reported || self.config.check_children_value()) {
            return Vec::new();
        }
        let mut strays = worker.enclosure.kill_strays(worker.pid);
        // Those left before the request was sent are an earlier request's, not this one's.
        strays.retain(|pid| !self.strays_before.contains(pid));
        strays
    }

    /// A crash as what stopped it, under the sandbox or a memory limit.
    fn explain(&self, crash: ProcessError) -> ProcessError {
        crate::error::explain_crash(
            crash,
            self.config.sandbox.is_some(),
            self.config.memory_limit_value(),
        )
    }

    fn protocol_violation(&mut self, detail: String) -> ProcessError {
        let pid = self.worker.as_ref().map(|w| w.pid);
        self.kill();
        ProcessError::Protocol { detail, pid }
    }
}

/// Fails with [`BenchError::Suspicious`] (`children_after_call`) when `strays` (what
/// [`TuningProcess::kill_strays`] found after the reply) is not empty.
fn no_strays(result: BenchmarkResult, strays: &[u32]) -> Result<BenchmarkResult, BenchError> {
    if strays.is_empty() {
        return Ok(result);
    }
    Err(BenchError::Suspicious {
        check: "children_after_call".into(),
        seen: format!(
            "{} process(es) the candidate started were still running after its reply (pids \
             {strays:?}); they were killed",
            strays.len()
        ),
    })
}

impl Drop for TuningProcess {
    /// Kills the worker's process group and reaps it.
    fn drop(&mut self) {
        self.kill();
    }
}

impl std::fmt::Debug for TuningProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TuningProcess")
            .field("pid", &self.pid())
            .field("restarts", &self.restarts())
            .field("pending", &self.pending.as_ref().map(|p| p.id))
            .finish_non_exhaustive()
    }
}
