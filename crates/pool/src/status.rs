//! The outcome of one candidate, in one word: [`Status`] (the CLI's) and [`StatusKind`]
//! (TVM's), one derived from the other so that they always agree.

/// What became of a candidate, as reported by `tunebox tune` (`status` in its JSON).
///
/// This is the one classification of outcomes: [`PoolError::status`](crate::PoolError::status) decides it for an error,
/// and TVM's coarser [`StatusKind`] is derived from it ([`Status::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Status {
    /// Measured (and, when verified, correct).
    Ok,
    /// Its outputs differ from the reference's.
    Wrong,
    /// It did not compile.
    CompileError,
    /// It failed inside a worker that lived on (bad request, load error, caught panic, …), or
    /// its worker could not be started.
    Error,
    /// Its worker died (signal or exit).
    Crashed,
    /// It exceeded its timeout and its worker was killed.
    Timeout,
    /// Its measurement cannot be trusted: an integrity check caught it cheating the harness
    /// (`BenchError::Suspicious`: work left running after its call, a clock that disagrees with
    /// the parent's, a time below the physical floor), or the sandbox stopped it. Never ranked.
    Suspicious,
}

impl Status {
    /// TVM's coarser view: `Ok` and `Wrong` (a task that produced a result) are
    /// [`StatusKind::Complete`], `CompileError` and `Error` are [`StatusKind::Exception`],
    /// `Crashed` and `Timeout` keep their names.
    pub fn kind(self) -> StatusKind {
        match self {
            Status::Ok | Status::Wrong => StatusKind::Complete,
            Status::CompileError | Status::Error | Status::Suspicious => StatusKind::Exception,
            Status::Crashed => StatusKind::Crashed,
            Status::Timeout => StatusKind::Timeout,
        }
    }

    /// The name used in reports and JSON: `ok`, `wrong`, `compile_error`, `error`, `crashed`,
    /// `timeout`, `suspicious`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Wrong => "wrong",
            Status::CompileError => "compile_error",
            Status::Error => "error",
            Status::Crashed => "crashed",
            Status::Timeout => "timeout",
            Status::Suspicious => "suspicious",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a task ended, as TVM's `StatusKind` (plus `Crashed`, which TVM folds into its
/// exceptions): [`Status`] in four words, so that both always agree (a sticky device fault is
/// `Crashed`, a kernel too slow for its budget `Timeout`, in both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatusKind {
    /// The task produced a result.
    Complete,
    /// The task failed: a compile error, an error inside the worker, a cancellation, a
    /// shutdown, a worker that could not start.
    Exception,
    /// The task exceeded its timeout (its worker was killed), or one call of its kernel
    /// exceeded its budget (`BenchError::DoesNotFit`).
    Timeout,
    /// The task's worker died while running it, or lost its GPU context (a sticky
    /// `BenchError::DeviceFault`).
    Crashed,
}

impl From<Status> for StatusKind {
    fn from(status: Status) -> Self {
        status.kind()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tunebox_process::ProcessError;
    use tunebox_protocol::BenchError;

    use super::*;
    use crate::PoolError;

    fn remote(error: BenchError) -> PoolError {
        PoolError::Process(ProcessError::Remote(error))
    }

    fn fault(sticky: bool) -> PoolError {
        remote(BenchError::DeviceFault {
            code: 700,
            name: "CUDA_ERROR_ILLEGAL_ADDRESS".into(),
            message: "illegal address".into(),
            sticky,
        })
    }

    #[test]
    fn status_and_status_kind_agree_on_every_failure() {
        let cases = [
            (
                remote(BenchError::Compile {
                    command: "cc".into(),
                    log: "error".into(),
                }),
                Status::CompileError,
                StatusKind::Exception,
            ),
            (fault(true), Status::Crashed, StatusKind::Crashed),
            (fault(false), Status::Error, StatusKind::Exception),
            (
                remote(BenchError::DoesNotFit {
                    call_ms: 10.0,
                    needed_ms: 10.0,
                    budget_ms: 5.0,
                }),
                Status::Timeout,
                StatusKind::Timeout,
            ),
            (
                PoolError::Process(ProcessError::Timeout {
                    after: Duration::from_secs(1),
                    pid: 42,
                    progress: None,
                }),
                Status::Timeout,
                StatusKind::Timeout,
            ),
            (
                PoolError::Process(ProcessError::WorkerCrashed {
                    pid: 42,
                    exit_code: None,
                    signal: Some(11),
                    stderr_tail: String::new(),
                }),
                Status::Crashed,
                StatusKind::Crashed,
            ),
            (
                PoolError::Process(ProcessError::OverMemoryLimit {
                    pid: 42,
                    limit: 1 << 30,
                    stderr_tail: "memory allocation of 2147483648 bytes failed".into(),
                }),
                Status::Crashed,
                StatusKind::Crashed,
            ),
            (
                PoolError::Process(ProcessError::WroteTooMuch {
                    pid: 42,
                    written: 5 << 30,
                    limit: 1 << 30,
                }),
                Status::Crashed,
                StatusKind::Crashed,
            ),
            (
                PoolError::Process(ProcessError::Stopped {
                    pid: 42,
                    signal: 19, // SIGSTOP
                }),
                Status::Crashed,
                StatusKind::Crashed,
            ),
            (PoolError::ShutDown, Status::Error, StatusKind::Exception),
        ];
        for (error, status, kind) in cases {
            assert_eq!(error.status(), status, "{error}");
            assert_eq!(StatusKind::from(error.status()), kind, "{error}");
            assert_eq!(Status::of::<()>(&Err(error)), status);
        }
        assert_eq!(Status::of(&Ok::<_, PoolError>(())), Status::Ok);
        assert_eq!(Status::Wrong.kind(), StatusKind::Complete);
    }

    #[test]
    fn bench_error_is_the_task_s_own_error_only() {
        assert!(matches!(
            fault(true).bench_error(),
            Some(BenchError::DeviceFault { code: 700, .. })
        ));
        let crash = PoolError::Process(ProcessError::WorkerCrashed {
            pid: 43,
            exit_code: Some(1),
            signal: None,
            stderr_tail: String::new(),
        });
        assert!(crash.bench_error().is_none());
        assert!(PoolError::Cancelled.bench_error().is_none());
    }
}
