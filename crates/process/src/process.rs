//! `TuningProcess`: the parent's handle on one worker.

use std::time::{Duration, Instant};

use ipc_channel::{IpcError, TryRecvError};
use tunebox_protocol::{BenchmarkRequest, BenchmarkResult, Request, RequestBody, ResponseBody};

use crate::handshake;
use crate::worker::{Worker, exit_parts};
use crate::{ProcessConfig, ProcessError};

/// How long a worker that closed its channel may take to be reaped before it is killed.
const DEATH_GRACE: Duration = Duration::from_secs(1);

/// One isolated worker process, as Inductor's `TuningProcess` and TVM's `PopenWorker`.
///
/// Requests go out with [`put`](TuningProcess::put); [`get`](TuningProcess::get) waits for the
/// reply with a deadline the parent enforces itself. A worker that crashes, times out or breaks
/// the protocol is killed (whole process group) and reaped before the error is returned, and the
/// next `put` starts a fresh one. Dropping the handle kills and reaps the worker.
///
/// # Example
///
/// ```no_run
/// use std::time::Duration;
/// use tunebox_process::{ProcessConfig, ProcessError, TuningProcess};
/// use tunebox_protocol::{BenchmarkRequest, DiagnosticTask, Kernel};
///
/// let mut worker = TuningProcess::spawn(ProcessConfig::new().worker("tunebox-worker"))?;
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
    /// The id `get` waits for.
    pending: Option<u64>,
    starts: u64,
}

impl TuningProcess {
    /// Starts a worker now and completes the handshake.
    ///
    /// # Errors
    ///
    /// [`ProcessError::Spawn`], [`ProcessError::ExitedBeforeHandshake`],
    /// [`ProcessError::HandshakeTimeout`], [`ProcessError::ProtocolMismatch`] or
    /// [`ProcessError::Protocol`]; the child, if any, has been reaped.
    pub fn spawn(config: ProcessConfig) -> Result<TuningProcess, ProcessError> {
        let mut process = TuningProcess::lazy(config);
        process.ensure_started()?;
        Ok(process)
    }

    /// A handle whose worker starts on the first [`put`](TuningProcess::put).
    pub fn lazy(config: ProcessConfig) -> TuningProcess {
        TuningProcess {
            config,
            worker: None,
            next_id: 0,
            pending: None,
            starts: 0,
        }
    }

    /// Sends a benchmark request; its reply is what the next [`get`](TuningProcess::get)
    /// returns. Starts a worker first if there is none (never started, crashed, timed out,
    /// killed) or if the current one reached `maximum_uses`. A reply to an earlier request that
    /// was never collected is discarded.
    ///
    /// # Errors
    ///
    /// The start-up errors of [`spawn`](TuningProcess::spawn); [`ProcessError::WorkerCrashed`]
    /// when the worker died just before the send.
    pub fn put(&mut self, request: BenchmarkRequest) -> Result<(), ProcessError> {
        let retire = self
            .worker
            .as_ref()
            .zip(self.config.maximum_uses)
            .is_some_and(|(worker, max)| worker.uses >= max);
        if retire {
            log::debug!("worker reached maximum_uses; replacing it");
            self.shutdown(Duration::from_millis(100));
        }
        self.send(RequestBody::Benchmark(Box::new(request)))?;
        if let Some(worker) = &mut self.worker {
            worker.uses += 1;
        }
        Ok(())
    }

    /// Waits up to `timeout` for the reply to the last [`put`](TuningProcess::put).
    ///
    /// # Errors
    ///
    /// - [`ProcessError::Remote`]: the task failed; the worker lives.
    /// - [`ProcessError::Timeout`]: no reply in time; the worker's process group was SIGKILLed
    ///   and reaped before this returns, however the worker behaves (blocked signals, native
    ///   spin).
    /// - [`ProcessError::WorkerCrashed`]: the worker died; reported as soon as its channel closes,
    ///   with its exit code or signal and its stderr tail.
    /// - [`ProcessError::Protocol`]: no request is pending, or the worker sent a malformed reply
    ///   (it is killed).
    pub fn get(&mut self, timeout: Duration) -> Result<BenchmarkResult, ProcessError> {
        match self.receive(timeout)? {
            ResponseBody::Benchmark(result) => result.map_err(ProcessError::Remote),
            other => {
                Err(self.protocol_violation(format!("expected a benchmark reply, got {other:?}")))
            }
        }
    }

    /// [`put`](TuningProcess::put) then [`get`](TuningProcess::get).
    ///
    /// # Errors
    ///
    /// Those of `put` and `get`.
    pub fn benchmark(
        &mut self,
        request: BenchmarkRequest,
        timeout: Duration,
    ) -> Result<BenchmarkResult, ProcessError> {
        self.put(request)?;
        self.get(timeout)
    }

    /// Round trip of a `Ping`, starting the worker if needed. Returns the round-trip time.
    ///
    /// # Errors
    ///
    /// As [`get`](TuningProcess::get), and the start-up errors.
    pub fn ping(&mut self, timeout: Duration) -> Result<Duration, ProcessError> {
        let start = Instant::now();
        self.send(RequestBody::Ping)?;
        match self.receive(timeout)? {
            ResponseBody::Pong => Ok(start.elapsed()),
            other => Err(self.protocol_violation(format!("expected Pong, got {other:?}"))),
        }
    }

    /// Whether a worker process is running now (started and not exited).
    pub fn alive(&mut self) -> bool {
        self.worker
            .as_mut()
            .is_some_and(|w| matches!(w.child.try_wait(), Ok(None)))
    }

    /// The pid of the current worker, if one is running.
    pub fn pid(&self) -> Option<u32> {
        self.worker.as_ref().map(|w| w.pid)
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

    /// SIGKILLs the worker's process group and reaps it. A pending request is forgotten. The
    /// next `put` starts a new worker. Does nothing when no worker runs.
    pub fn kill(&mut self) {
        if let Some(mut worker) = self.worker.take() {
            worker.kill();
        }
        self.pending = None;
    }

    /// Asks the worker to exit, waits up to `grace` for it, then kills it; reaps it in every case.
    /// Idempotent; a later `put` starts a new worker.
    pub fn shutdown(&mut self, grace: Duration) {
        if let Some(mut worker) = self.worker.take() {
            let id = self.next_id();
            if worker
                .requests
                .send(Request {
                    id,
                    body: RequestBody::Shutdown,
                })
                .is_ok()
            {
                worker.wait_or_kill(grace);
            } else {
                worker.kill();
            }
        }
        self.pending = None;
    }

    fn ensure_started(&mut self) -> Result<&mut Worker, ProcessError> {
        if self.worker.is_none() {
            let worker = handshake::start(&self.config)?;
            self.starts += 1;
            log::debug!("worker started, pid {}", worker.pid);
            self.worker = Some(worker);
        }
        Ok(self.worker.as_mut().expect("a worker was just started"))
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    fn send(&mut self, body: RequestBody) -> Result<(), ProcessError> {
        let id = self.next_id();
        self.pending = None;
        let worker = self.ensure_started()?;
        if let Err(e) = worker.requests.send(Request { id, body }) {
            // The worker's end is closed: it died while idle (or was killed from outside).
            let error = self.crashed();
            log::debug!("send failed ({e}); {error}");
            return Err(error);
        }
        self.pending = Some(id);
        Ok(())
    }

    /// Waits for the reply to the pending request, discarding stale ones.
    fn receive(&mut self, timeout: Duration) -> Result<ResponseBody, ProcessError> {
        let Some(pending) = self.pending else {
            return Err(ProcessError::Protocol {
                detail: "get() without a pending request: call put() first".into(),
            });
        };
        let Some(worker) = self.worker.as_mut() else {
            return Err(ProcessError::Protocol {
                detail: "no worker: the pending request was lost".into(),
            });
        };
        let deadline = Instant::now() + timeout;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match worker.responses.try_recv_timeout(remaining) {
                Ok(response) if response.id == pending => {
                    self.pending = None;
                    return Ok(response.body);
                }
                Ok(stale) => log::debug!("discarding stale reply {}", stale.id),
                Err(TryRecvError::Empty) => {
                    if Instant::now() < deadline {
                        continue;
                    }
                    self.kill();
                    return Err(ProcessError::Timeout { after: timeout });
                }
                Err(TryRecvError::IpcError(IpcError::Disconnected)) => return Err(self.crashed()),
                Err(TryRecvError::IpcError(e)) => {
                    return Err(self.protocol_violation(format!("unreadable reply: {e}")));
                }
            }
        }
    }

    /// Reaps a worker whose channel closed and describes its death.
    fn crashed(&mut self) -> ProcessError {
        self.pending = None;
        let Some(mut worker) = self.worker.take() else {
            return ProcessError::Protocol {
                detail: "no worker".into(),
            };
        };
        let status = worker.wait_or_kill(DEATH_GRACE);
        let (exit_code, signal) = exit_parts(status);
        ProcessError::WorkerCrashed {
            exit_code,
            signal,
            stderr_tail: worker.stderr_tail(),
        }
    }

    fn protocol_violation(&mut self, detail: String) -> ProcessError {
        self.kill();
        ProcessError::Protocol { detail }
    }
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
            .field("pending", &self.pending)
            .finish_non_exhaustive()
    }
}
