//! Everything that can go wrong with one worker process.

use std::path::PathBuf;
use std::time::Duration;

use tunebox_protocol::{BenchError, Phase, Progress, short_duration};

use crate::exit::describe_exit;

/// What went wrong with a request or the worker that serves it.
///
/// The variants tell the three outcomes that Inductor's and TVM's workers blur apart:
/// [`Remote`](ProcessError::Remote) (the task failed, the worker lives),
/// [`Timeout`](ProcessError::Timeout) (the parent killed the worker at the deadline) and
/// [`WorkerCrashed`](ProcessError::WorkerCrashed) (the worker died by itself).
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The worker executable could not be started (missing, not executable, out of resources).
    #[error("could not start the worker `{}`", path.display())]
    Spawn {
        /// The executable that was run.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The worker did not connect within the handshake timeout; it was killed.
    #[error("the worker did not connect within {after:?}; it was killed")]
    HandshakeTimeout {
        /// The handshake timeout.
        after: Duration,
    },
    /// The worker exited before connecting.
    #[error("the worker exited before connecting: {}{}", describe_exit(*exit_code, *signal), quote(stderr_tail))]
    ExitedBeforeHandshake {
        /// Exit code, if it exited.
        exit_code: Option<i32>,
        /// Signal number, if a signal killed it.
        signal: Option<i32>,
        /// The end of its stderr, when captured.
        stderr_tail: String,
    },
    /// The worker speaks another protocol version.
    #[error(
        "protocol version mismatch: the worker `{}` speaks {worker}, this parent speaks {parent}; \
         use a worker from the same tunebox release",
        path.display()
    )]
    ProtocolMismatch {
        /// The worker executable.
        path: PathBuf,
        /// The worker's version, when it said (a worker that refused to start does not).
        worker: String,
        /// Ours.
        parent: u32,
    },
    /// The request did not finish within its timeout; the worker's process group was SIGKILLed and
    /// reaped before this was returned. The message says where the request was, when the
    /// backend reported its progress (`timed out after 2s in the first call of the kernel (no
    /// call returned); …`), and what to change.
    #[error("timed out after {after:?}{}", describe_timeout(*after, progress.as_ref()))]
    Timeout {
        /// The timeout that expired.
        after: Duration,
        /// How far the request got, as the worker last recorded it (`None`: the backend
        /// reports no progress, or the request had not begun).
        progress: Option<Progress>,
    },
    /// The request carries more inline data (source text, names, flags) than one message may;
    /// nothing was sent.
    #[error(
        "the request carries {bytes} bytes inline, more than the {limit} one message may carry; \
         move code into a header next to the source and #include it"
    )]
    RequestTooLarge {
        /// Inline bytes of the request.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The request carries more shared-memory buffers than one message can pass (each is a file
    /// descriptor); nothing was sent.
    #[error(
        "the request carries more shared buffers than one message can pass (at most {limit}); \
         pack several tensors into one buffer or split the request"
    )]
    TooManyBuffers {
        /// The most one request may carry.
        limit: usize,
    },
    /// The worker did not take a request within the send timeout (it stopped reading); it was
    /// killed.
    #[error("the worker did not accept the request within {after:?}; it was killed")]
    SendTimeout {
        /// The send timeout.
        after: Duration,
    },
    /// The initializer failed on a fresh worker (task error, crash or timeout); the worker was
    /// killed. The next request tries again with a new worker.
    #[error("the worker's initializer failed: {message}")]
    InitializerFailed {
        /// What went wrong.
        message: String,
    },
    /// The worker died while serving a request.
    #[error("the worker crashed: {}{}", describe_exit(*exit_code, *signal), quote(stderr_tail))]
    WorkerCrashed {
        /// Exit code, if it exited.
        exit_code: Option<i32>,
        /// Signal number, if a signal killed it (11 = SIGSEGV, 6 = SIGABRT, 9 = SIGKILL).
        signal: Option<i32>,
        /// The end of its stderr, when captured.
        stderr_tail: String,
    },
    /// The worker sent something the protocol does not allow, or the channel broke; the worker
    /// was killed.
    #[error("protocol error: {detail}")]
    Protocol {
        /// What was wrong.
        detail: String,
    },
    /// The task failed inside the worker, which lives on (a compile error, a bad request, a
    /// caught panic, …).
    #[error(transparent)]
    Remote(#[from] BenchError),
}

impl ProcessError {
    /// Whether the worker is gone after this error (it crashed, timed out or broke the protocol),
    /// as opposed to a task error that left it serving.
    pub fn worker_lost(&self) -> bool {
        !matches!(self, ProcessError::Remote(_))
    }

    /// The task's own error, when the worker lived to report one ([`ProcessError::Remote`]):
    /// a compile error, a bad launch, a caught panic, a device fault, … `None` for every fault
    /// of the worker or the transport (timeout, crash, spawn, protocol, initializer).
    pub fn bench_error(&self) -> Option<&BenchError> {
        match self {
            ProcessError::Remote(error) => Some(error),
            _ => None,
        }
    }
}

/// ` — stderr:\n<tail>` when there is a tail.
fn quote(tail: &str) -> String {
    if tail.trim().is_empty() {
        String::new()
    } else {
        format!("\n--- worker stderr (tail) ---\n{}", tail.trim_end())
    }
}

/// ` in timed rep 3 of 10 (…); the worker was killed; what to change`, for a timeout that
/// expired `after` the request was sent.
fn describe_timeout(after: Duration, progress: Option<&Progress>) -> String {
    let Some(progress) = progress else {
        return "; the worker was killed".into();
    };
    // How long the call in progress had run: the record is written just before each call.
    let stuck = after.saturating_sub(progress.since_start);
    let typical = progress.last_call.max(progress.estimate);
    let hung = match (progress.phase, typical) {
        (Phase::Setup | Phase::FirstCall, _) | (_, None) => true,
        (_, Some(typical)) => stuck > typical * 4,
    };
    let advice = if hung {
        match typical {
            Some(typical) => format!(
                "this call ran for about {} where calls took {}: the kernel hangs at this \
                 call",
                short_duration(stuck),
                short_duration(typical)
            ),
            None => "the kernel hangs, or one call takes longer than the timeout: give it a \
                     longer timeout if it is just slow"
                .into(),
        }
    } else {
        "calls became slower than the estimate the reps were fitted to (a loaded machine, or a \
         kernel whose time varies): a longer timeout leaves more room"
            .into()
    };
    format!(" {progress}; the worker was killed; {advice}")
}
