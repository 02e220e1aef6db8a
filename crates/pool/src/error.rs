//! Errors of the pool and of the candidates it runs.

use tunebox_process::ProcessError;
use tunebox_protocol::BenchError;

use crate::Status;

/// Why the pool could not produce a candidate's result, or could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PoolError {
    /// The candidate's request failed on its worker: a task error, a timeout, a crash, … (see
    /// [`ProcessError`]). The pool replaced the worker where needed and went on.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// The pool was shut down before the task finished (it was queued, or its worker was killed
    /// by the shutdown), or `submit` was called after shutdown.
    #[error("the pool was shut down")]
    ShutDown,
    /// The task was cancelled through its handle.
    #[error("the task was cancelled")]
    Cancelled,
    /// No worker can be started any more (each failed to start several times in a row); the
    /// last start-up error is the source.
    #[error("no worker can be started")]
    Unavailable {
        /// Why the last worker could not start.
        #[source]
        source: ProcessError,
    },
    /// A pool needs at least one worker.
    #[error("a pool needs at least one worker; {requested} were requested")]
    NoWorkers {
        /// The number requested.
        requested: usize,
    },
    /// More devices were requested than `CUDA_VISIBLE_DEVICES` exposes.
    #[error(
        "{requested} devices were requested but only {visible} are visible (CUDA_VISIBLE_DEVICES)"
    )]
    NotEnoughDevices {
        /// Devices requested.
        requested: usize,
        /// Devices visible.
        visible: usize,
    },
    /// `CUDA_VISIBLE_DEVICES` hides every device, so a GPU pool has nothing to run on.
    #[error(
        "CUDA_VISIBLE_DEVICES hides every device; set it to the GPUs to use, or use Devices::Cpu"
    )]
    NoDevices,
    /// `CUDA_VISIBLE_DEVICES` is unset and the probe worker lists no GPU: none of its backends
    /// has devices (a worker with only task kinds and `diagnostics` has none to list, or the
    /// `cuda` backend found no GPU), so a pool of `Devices::Visible` / `FirstVisible` has
    /// nothing to pin its workers to.
    #[error(
        "Devices::Visible found no GPU: CUDA_VISIBLE_DEVICES is unset and the worker's backends \
         ({}) list no device{}; use Devices::Cpu(n) for workers not pinned to a GPU, or a worker \
         with the cuda backend on a machine with a GPU",
        backends.join(", "),
        if backends.iter().any(|b| b == "cuda") { " (its cuda backend sees no GPU)" } else { " (it has no GPU backend)" }
    )]
    NoGpuInWorker {
        /// The backends of the probe worker.
        backends: Vec<String>,
    },
    /// A device is named twice, in `CUDA_VISIBLE_DEVICES` (where the CUDA driver then hides
    /// every device) or in `Devices::List`. A pool runs one worker per GPU, so that no two
    /// workers measure on the same device; tokens are neither deduplicated nor shared.
    #[error(
        "device {token} is named twice ({place}); a pool runs one worker per GPU and CUDA hides \
         every device when CUDA_VISIBLE_DEVICES repeats one: name each GPU once (to share a GPU \
         between workers on purpose, use Devices::Cpu(n) and set CUDA_VISIBLE_DEVICES in the \
         process config's env)"
    )]
    RepeatedDevice {
        /// The repeated token, as written the second time.
        token: String,
        /// Where: `CUDA_VISIBLE_DEVICES` or `Devices::List`.
        place: &'static str,
    },
    /// A timeout of zero: every task would be killed the moment it reached its worker. `place`
    /// says whose: the pool's (`PoolConfig::timeout`) or one request's (`Pull::Request`).
    #[error(
        "a timeout of zero ({place}) would kill every task as it starts; give the longest a task \
         may take (the pool's default is 60 s)"
    )]
    ZeroTimeout {
        /// Where the zero was given: `PoolConfig::timeout` or `Pull::Request::timeout`.
        place: &'static str,
    },
    /// The caller's [`WindowHook`](crate::WindowHook) panicked around this request: its result
    /// is lost (a panic in `after` comes once the worker has answered); the worker, the pool
    /// and the other requests carry on.
    #[error("the window hook panicked around this request: {message}")]
    HookPanicked {
        /// The panic's message.
        message: String,
    },
    /// `CUDA_VISIBLE_DEVICES` is unset and a probe worker could not count the GPUs.
    #[error(
        "CUDA_VISIBLE_DEVICES is unset and the GPUs could not be counted ({reason}); set \
         CUDA_VISIBLE_DEVICES, or use Devices::List or Devices::Cpu"
    )]
    DeviceCountUnknown {
        /// Why the probe worker saw no GPU.
        reason: String,
    },
}

impl PoolError {
    /// The pid of the worker this error is about, when there is one (a crash, a timeout, a
    /// start-up failure, …; see [`ProcessError::pid`]), also for
    /// [`Unavailable`](PoolError::Unavailable) through its source.
    pub fn pid(&self) -> Option<u32> {
        match self {
            PoolError::Process(e) | PoolError::Unavailable { source: e } => e.pid(),
            _ => None,
        }
    }

    /// What became of the candidate, in one word: the classification that the CLI's `status`,
    /// [`Status::of`] and TVM's [`StatusKind`](crate::StatusKind) (via [`Status::kind`]) all
    /// use.
    ///
    /// - [`Status::CompileError`] when the worker answered `BenchError::Compile`;
    /// - [`Status::Timeout`] when the task timed out (its worker was killed), or one call
    ///   exceeded the request's budget (`BenchError::DoesNotFit`);
    /// - [`Status::Crashed`] when its worker died (a signal, an exit, or an allocation its
    ///   memory limit refused: `ProcessError::OverMemoryLimit`), was killed for writing past
    ///   its write limit (`ProcessError::WroteTooMuch`) or for staying stopped by job control
    ///   (`ProcessError::Stopped`), or a sticky
    ///   `BenchError::DeviceFault` lost the GPU context (the worker exits after answering);
    /// - [`Status::Error`] for everything else (another task error, a worker that could not
    ///   start, a broken protocol, a shutdown, a cancellation).
    pub fn status(&self) -> Status {
        let PoolError::Process(error) = self else {
            return Status::Error;
        };
        match error.bench_error() {
            Some(BenchError::Compile { .. }) => Status::CompileError,
            Some(BenchError::DoesNotFit { .. }) => Status::Timeout,
            Some(BenchError::Suspicious { .. }) => Status::Suspicious,
            Some(fault) if fault.ends_worker() => Status::Crashed,
            Some(_) => Status::Error,
            None => match error {
                ProcessError::Timeout { .. } => Status::Timeout,
                ProcessError::WorkerCrashed { .. }
                | ProcessError::OverMemoryLimit { .. }
                | ProcessError::WroteTooMuch { .. }
                | ProcessError::Stopped { .. } => Status::Crashed,
                ProcessError::SandboxStop { .. } => Status::Suspicious,
                _ => Status::Error,
            },
        }
    }

    /// The task's own error, reported by a worker that lived to answer (a compile error, a bad
    /// launch, a caught panic, a device fault, …); `None` for a timeout, a crash, a start-up or
    /// pool error.
    pub fn bench_error(&self) -> Option<&BenchError> {
        match self {
            PoolError::Process(error) => error.bench_error(),
            _ => None,
        }
    }

    /// Whether [`status`](PoolError::status) is [`Status::Timeout`].
    pub fn is_timeout(&self) -> bool {
        self.status() == Status::Timeout
    }

    /// Whether [`status`](PoolError::status) is [`Status::Crashed`].
    pub fn is_crash(&self) -> bool {
        self.status() == Status::Crashed
    }
}
impl Status {
    /// The classification of a pool result before verification: `Ok` for a measurement, else
    /// [`PoolError::status`].
    pub fn of<T>(result: &Result<T, PoolError>) -> Status {
        match result {
            Ok(_) => Status::Ok,
            Err(e) => e.status(),
        }
    }
}
