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
#[non_exhaustive]
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
    /// The worker did not connect within the handshake timeout; it was killed. When the worker
    /// is the current executable, the message adds that its `main` may be doing something long
    /// instead of calling the worker entry point first.
    #[error(
        "worker {pid} did not connect within {after:?}; it was killed{}",
        if *own_executable { OWN_EXECUTABLE_HINT } else { "" }
    )]
    HandshakeTimeout {
        /// The handshake timeout.
        after: Duration,
        /// The pid the worker had.
        pid: u32,
        /// Whether the worker was the current executable (no worker configured).
        own_executable: bool,
    },
    /// The worker was started, but is a program that never reached the worker entry point
    /// (`tunebox_worker::run_if_worker`): it exited with
    /// [`EXIT_NO_WORKER_ENTRY`](tunebox_protocol::EXIT_NO_WORKER_ENTRY), because its `main`
    /// returned, or was about to start workers of its own, before calling it. Usually the
    /// default worker, the current executable, whose `main` forgot the call. Retrying cannot
    /// help; the message says what to change.
    #[error(
        "`{}` was started as a tunebox worker but never reached the worker entry point \
         (worker {pid}): {NO_WORKER_ENTRY_FIX}",
        path.display()
    )]
    NoWorkerEntry {
        /// The executable that was started as the worker.
        path: PathBuf,
        /// The pid it had.
        pid: u32,
    },
    /// The worker exited before connecting.
    #[error("worker {pid} exited before connecting: {}{}", describe_exit(*exit_code, *signal), quote(stderr_tail))]
    ExitedBeforeHandshake {
        /// The pid the worker had.
        pid: u32,
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
    #[error("timed out after {after:?}{}", describe_timeout(*after, *pid, progress.as_ref()))]
    Timeout {
        /// The pid the killed worker had.
        pid: u32,
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
    #[error("worker {pid} did not accept the request within {after:?}; it was killed")]
    SendTimeout {
        /// The pid the killed worker had.
        pid: u32,
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
    /// The worker died while serving a request. `stderr_tail` holds only what the worker
    /// wrote while serving it (from the moment it was sent), not an earlier task's output.
    #[error(
        "worker {pid} crashed: {}{}{}",
        describe_exit(*exit_code, *signal),
        lost_channel_hint(stderr_tail),
        quote(stderr_tail)
    )]
    WorkerCrashed {
        /// The pid the worker had.
        pid: u32,
        /// Exit code, if it exited.
        exit_code: Option<i32>,
        /// Signal number, if a signal killed it (11 = SIGSEGV, 6 = SIGABRT, 9 = SIGKILL).
        signal: Option<i32>,
        /// The end of what it wrote to stderr since the request was sent, when captured.
        stderr_tail: String,
    },
    /// A sandboxed worker was stopped by the kernel for something the sandbox forbids (a
    /// system call that reaches into another process, its CPU-time or file-size limit). Only
    /// this choice is lost; what the worker started died with it.
    #[error(
        "worker {pid} was stopped by the sandbox: {stop}{}",
        quote(stderr_tail)
    )]
    SandboxStop {
        /// The pid the worker had.
        pid: u32,
        /// What it did.
        stop: SandboxStop,
        /// The end of what it wrote to stderr since the request was sent, when captured.
        stderr_tail: String,
    },
    /// The worker died of an allocation its address-space limit refused
    /// (`ProcessConfig::memory_limit`, `Sandbox::memory`): at once, instead of swapping the
    /// machine until the timeout.
    #[error(
        "worker {pid} ran out of its memory limit ({} of address space, RLIMIT_AS); raise the \
         limit (ProcessConfig::memory_limit, [sandbox] memory) if the kernel needs more{}",
        crate::error::gib(*limit),
        quote(stderr_tail)
    )]
    OverMemoryLimit {
        /// The pid the worker had.
        pid: u32,
        /// The limit, in bytes.
        limit: u64,
        /// The end of what it wrote to stderr since the request was sent, when captured.
        stderr_tail: String,
    },
    /// The worker wrote more than its write limit while serving one request
    /// ([`ProcessConfig::write_limit`](crate::ProcessConfig::write_limit): to its stdout or
    /// stderr, a file or a pipe); it was killed then, rather than at the timeout. A kernel
    /// printing in a loop.
    #[error(
        "worker {pid} wrote {} during one task, past its limit of {}, and was killed: the \
         kernel prints or writes without end (a print in a loop?); print less, or raise the \
         limit (ProcessConfig::write_limit) if it must write that much",
        mib(*written),
        mib(*limit)
    )]
    WroteTooMuch {
        /// The pid the worker had.
        pid: u32,
        /// The bytes it wrote in the request, with the processes it ran and reaped meanwhile (a
        /// compiler's output counts; read every 100 ms: more than the limit).
        written: u64,
        /// The limit, in bytes.
        limit: u64,
    },
    /// The worker was stopped by job control (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU) while it
    /// served a request and stayed stopped for a second: a kernel that calls `raise(SIGSTOP)`,
    /// or reads the terminal. It was killed then, rather than at the timeout.
    #[error(
        "worker {pid} was stopped by {} and stayed stopped, so it was killed: did the kernel \
         raise the signal itself (raise(SIGSTOP), kill(0, ...)) or read the terminal (SIGTTIN)?",
        crate::exit::signal_name(*signal).map_or_else(|| format!("signal {signal}"), str::to_owned)
    )]
    Stopped {
        /// The pid the worker had.
        pid: u32,
        /// The signal that stopped it.
        signal: i32,
    },
    /// The worker sent something the protocol does not allow, or the channel broke; the worker
    /// was killed.
    #[error("protocol error{}: {detail}", pid.map(|p| format!(" (worker {p})")).unwrap_or_default())]
    Protocol {
        /// What was wrong.
        detail: String,
        /// The pid of the worker concerned, when there was one.
        pid: Option<u32>,
    },
    /// The task failed inside the worker, which lives on (a compile error, a bad request, a
    /// caught panic, …).
    #[error(transparent)]
    Remote(#[from] BenchError),
}

/// What a sandboxed worker did that the kernel stopped it for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SandboxStop {
    /// A system call the sandbox's seccomp filter traps (SIGSYS): `ptrace`,
    /// `process_vm_readv`, `process_vm_writev`, `kcmp` or `pidfd_getfd`. `call` is the one the
    /// worker made, as its SIGSYS handler reported it on stderr (`None` when stderr was not
    /// captured, or the worker has no such handler). The report comes from inside the worker,
    /// so a candidate could forge it: it can misname the call, not undo the stop.
    ForbiddenSystemCall {
        /// The call, when the worker reported it.
        call: Option<SystemCall>,
    },
    /// Its CPU time passed `Sandbox::cpu_time` (SIGXCPU, or SIGKILL a second later).
    CpuTime,
    /// It wrote a file past `Sandbox::file_size` (SIGXFSZ).
    FileSize,
}

/// A system call a sandboxed worker was stopped for: its number on this architecture and,
/// when the sandbox traps it, its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SystemCall {
    /// The number, as in `libc::SYS_*`.
    pub number: i64,
    /// The name (`ptrace`), for the calls the sandbox traps.
    pub name: Option<&'static str>,
}

impl SystemCall {
    /// The call `number` names on this architecture.
    pub(crate) fn from_number(number: i64) -> SystemCall {
        SystemCall {
            number,
            name: crate::sandbox::trapped_name(number),
        }
    }

    /// The number in the last refused-call line of a worker's stderr
    /// ([`tunebox_protocol::REFUSED_SYSTEM_CALL_LINE`]).
    pub(crate) fn from_stderr(tail: &str) -> Option<SystemCall> {
        let rest = &tail[tail.rfind(tunebox_protocol::REFUSED_SYSTEM_CALL_LINE)?
            + tunebox_protocol::REFUSED_SYSTEM_CALL_LINE.len()..];
        let digits = rest.lines().next()?.trim();
        digits.parse().ok().map(SystemCall::from_number)
    }
}

impl std::fmt::Display for SystemCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.name {
            Some(name) => write!(f, "{name} (system call {})", self.number),
            None => write!(f, "system call {}", self.number),
        }
    }
}

impl std::fmt::Display for SandboxStop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SandboxStop::ForbiddenSystemCall { call: Some(call) } => {
                return write!(
                    f,
                    "it made a system call that reaches into another process, {call}, \
                     killed by SIGSYS"
                );
            }
            SandboxStop::ForbiddenSystemCall { call: None } => {
                "it made a system call that reaches into another process (ptrace, \
                 process_vm_readv/writev, kcmp or pidfd_getfd), killed by SIGSYS"
            }
            SandboxStop::CpuTime => "it used up its CPU-time limit (SIGXCPU)",
            SandboxStop::FileSize => "it wrote a file larger than its file-size limit (SIGXFSZ)",
        })
    }
}

/// `4 GiB`, `512 MiB`.
/// `bytes` in MiB with one decimal (`1026.3 MiB`): two sizes near each other stay apart.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

pub(crate) fn gib(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
    } else {
        format!("{} MiB", bytes >> 20)
    }
}

/// Turns a crash of a sandboxed or memory-limited worker into what stopped it, when the exit
/// says so: SIGSYS, SIGXCPU (or SIGKILL past a CPU limit), SIGXFSZ under the sandbox; an
/// allocation failure quoted on stderr (Rust's `memory allocation of N bytes failed`, C++'s
/// `std::bad_alloc`) under a memory limit. Anything else is returned unchanged.
pub(crate) fn explain_crash(
    error: ProcessError,
    sandboxed: bool,
    memory_limit: Option<u64>,
) -> ProcessError {
    let ProcessError::WorkerCrashed {
        pid,
        signal,
        stderr_tail,
        exit_code,
    } = error
    else {
        return error;
    };
    let stop = match signal {
        Some(libc::SIGSYS) if sandboxed => Some(SandboxStop::ForbiddenSystemCall {
            call: SystemCall::from_stderr(&stderr_tail),
        }),
        Some(libc::SIGXCPU) if sandboxed => Some(SandboxStop::CpuTime),
        Some(libc::SIGXFSZ) if sandboxed => Some(SandboxStop::FileSize),
        _ => None,
    };
    if let Some(stop) = stop {
        return ProcessError::SandboxStop {
            pid,
            stop,
            stderr_tail,
        };
    }
    let allocation_failed = [
        "memory allocation of",
        "std::bad_alloc",
        "Cannot allocate memory",
    ]
    .iter()
    .any(|needle| stderr_tail.contains(needle));
    match memory_limit {
        Some(limit) if allocation_failed => ProcessError::OverMemoryLimit {
            pid,
            limit,
            stderr_tail,
        },
        _ => ProcessError::WorkerCrashed {
            pid,
            exit_code,
            signal,
            stderr_tail,
        },
    }
}

/// What to do about a program started as a worker that never reached the worker entry point.
const NO_WORKER_ENTRY_FIX: &str = "call `tunebox_worker::run_if_worker(...)` first thing in its \
     `main` (or `tunebox::run_if_worker` when using the facade crate), or point \
     ProcessConfig::worker / TUNEBOX_WORKER at a worker binary such as tunebox-worker";

/// Added to a handshake timeout when the worker is the current executable.
const OWN_EXECUTABLE_HINT: &str = "; the worker is this program's own executable (no \
     ProcessConfig::worker, no TUNEBOX_WORKER): if its `main` does something long before \
     serving, call `tunebox_worker::run_if_worker(...)` first thing in `main` (or \
     `tunebox::run_if_worker` when using the facade crate), or point ProcessConfig::worker / \
     TUNEBOX_WORKER at a worker binary such as tunebox-worker";

/// The line a process started as a worker prints to stderr when it is about to start workers
/// itself, or to exit, without having reached the worker entry point.
pub(crate) fn no_worker_entry_line() -> String {
    format!(
        "tunebox: this process was started as a tunebox worker but never reached the worker \
         entry point: {NO_WORKER_ENTRY_FIX}\n"
    )
}

impl ProcessError {
    /// The pid of the worker this error is about, when one was started: the pid it had (it is
    /// reaped by the time the error is returned, so the number may since have been reused).
    pub fn pid(&self) -> Option<u32> {
        match self {
            ProcessError::HandshakeTimeout { pid, .. }
            | ProcessError::NoWorkerEntry { pid, .. }
            | ProcessError::ExitedBeforeHandshake { pid, .. }
            | ProcessError::Timeout { pid, .. }
            | ProcessError::SendTimeout { pid, .. }
            | ProcessError::WorkerCrashed { pid, .. }
            | ProcessError::SandboxStop { pid, .. }
            | ProcessError::OverMemoryLimit { pid, .. }
            | ProcessError::WroteTooMuch { pid, .. }
            | ProcessError::Stopped { pid, .. } => Some(*pid),
            ProcessError::Protocol { pid, .. } => *pid,
            _ => None,
        }
    }

    /// Whether the worker died of a signal that another process sends to end a process
    /// (SIGKILL, SIGTERM, SIGHUP, SIGINT: the system's out-of-memory killer, a person, a script)
    /// rather than of a fault of its own, or stayed stopped by job control (`Stopped`: a
    /// kernel's `raise(SIGSTOP)` looks the same as a person's `kill -STOP` or a scheduler
    /// suspending the job): what such a crash says about the candidate is unsure (a results
    /// cache keeps it not, so that a later run measures it again). tunebox's own kills are
    /// `Timeout` or a pool's cancellation, not this.
    pub fn killed_from_outside(&self) -> bool {
        matches!(
            self,
            ProcessError::WorkerCrashed {
                signal: Some(signal),
                ..
            } if crate::exit::sent_from_outside(*signal)
        ) || matches!(self, ProcessError::Stopped { .. })
    }

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

/// What a worker that panicked in ipc-channel (its channel's descriptors closed or replaced
/// under it: `close(3)`, `dup2` over them, a closed stdout that the next shared-memory region
/// took the number of) died of, when its stderr says so; empty otherwise. Such a crash quoted
/// only an assertion in ipc-channel's source, which reads as a fault of tunebox's.
fn lost_channel_hint(tail: &str) -> &'static str {
    if tail.contains("ipc-channel") || tail.contains("ipc_channel") {
        ": it lost its channel to tunebox (did the kernel close or replace file descriptors \
         it does not own, its standard streams included?)"
    } else {
        ""
    }
}

/// ` — stderr:\n<tail>` when there is a tail.
///
/// At most [`QUOTED_LINES`] lines are quoted, the last ones (a worker may write thousands before
/// it dies); the error's `stderr_tail` field keeps all that was captured.
fn quote(tail: &str) -> String {
    let tail = tail.trim_end();
    if tail.trim().is_empty() {
        return String::new();
    }
    let mut text = String::from("\n--- worker stderr (tail) ---\n");
    text.push_str(&crate::capture::quote_lines(tail, QUOTED_LINES).join("\n"));
    text
}

/// Most lines of a worker's stderr that an error message quotes.
const QUOTED_LINES: usize = 20;

/// ` in timed rep 3 of 10 (…); the worker was killed; what to change`, for a timeout that
/// expired `after` the request was sent.
fn describe_timeout(after: Duration, pid: u32, progress: Option<&Progress>) -> String {
    let Some(progress) = progress else {
        return format!("; worker {pid} was killed");
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
    format!(" {progress}; worker {pid} was killed; {advice}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_in_the_channel_says_the_kernel_broke_its_descriptors() {
        let panicked = |tail: &str| ProcessError::WorkerCrashed {
            pid: 7,
            exit_code: Some(101),
            signal: None,
            stderr_tail: tail.into(),
        };
        let lost = panicked(
            "tunebox-worker: panicked at /r/ipc-channel-0.23.1/src/platform/unix/mod.rs:193:13:\n\
             assertion failed: thread::panicking() || result == 0",
        )
        .to_string();
        assert!(
            lost.starts_with(
                "worker 7 crashed: exited with code 101: it lost its channel to tunebox (did the \
                 kernel close or replace file descriptors it does not own"
            ),
            "{lost}"
        );
        let other = panicked("thread 'main' panicked at src/kernel.rs:1:1").to_string();
        assert!(!other.contains("lost its channel"), "{other}");
    }

    #[test]
    fn a_signal_another_process_sends_is_said_and_told_apart() {
        let killed = |signal| ProcessError::WorkerCrashed {
            pid: 7,
            exit_code: None,
            signal: Some(signal),
            stderr_tail: String::new(),
        };
        assert!(killed(libc::SIGKILL).killed_from_outside());
        assert!(killed(libc::SIGTERM).killed_from_outside());
        assert!(!killed(libc::SIGSEGV).killed_from_outside());
        assert!(!killed(libc::SIGABRT).killed_from_outside());
        assert!(
            killed(libc::SIGKILL)
                .to_string()
                .contains("out-of-memory killer"),
            "{}",
            killed(libc::SIGKILL)
        );
    }

    #[test]
    fn errors_about_a_worker_name_its_pid() {
        let crashed = ProcessError::WorkerCrashed {
            pid: 4242,
            exit_code: None,
            signal: Some(11),
            stderr_tail: String::new(),
        };
        assert_eq!(
            crashed.to_string(),
            "worker 4242 crashed: killed by signal 11 (SIGSEGV)"
        );
        assert_eq!(crashed.pid(), Some(4242));
        let timeout = ProcessError::Timeout {
            pid: 4243,
            after: Duration::from_secs(2),
            progress: None,
        };
        assert_eq!(
            timeout.to_string(),
            "timed out after 2s; worker 4243 was killed"
        );
        let protocol = ProcessError::Protocol {
            detail: "no worker".into(),
            pid: None,
        };
        assert_eq!(protocol.to_string(), "protocol error: no worker");
        assert_eq!(protocol.pid(), None);
    }

    #[test]
    fn a_crash_quotes_the_last_lines_of_a_long_stderr() {
        let tail: String = (0..500).map(|i| format!("line {i}\n")).collect();
        let crashed = ProcessError::WorkerCrashed {
            pid: 1,
            exit_code: Some(1),
            signal: None,
            stderr_tail: tail.clone(),
        };
        let message = crashed.to_string();
        assert!(message.contains("[… 480 earlier lines left out]"));
        assert!(message.ends_with("line 480\nline 481\nline 482\nline 483\nline 484\nline 485\nline 486\nline 487\nline 488\nline 489\nline 490\nline 491\nline 492\nline 493\nline 494\nline 495\nline 496\nline 497\nline 498\nline 499"));
        assert!(!message.contains("line 479\n"));
        let ProcessError::WorkerCrashed { stderr_tail, .. } = crashed else {
            unreachable!()
        };
        assert_eq!(stderr_tail, tail, "the field keeps everything");
    }

    #[test]
    fn a_memory_limit_death_says_the_fix_before_quoting_stderr() {
        let message = ProcessError::OverMemoryLimit {
            pid: 7,
            limit: 1 << 30,
            stderr_tail: "memory allocation of 2147483648 bytes failed\n".into(),
        }
        .to_string();
        let advice = "; raise the limit (ProcessConfig::memory_limit, [sandbox] memory) if the \
                      kernel needs more\n--- worker stderr (tail) ---\nmemory allocation";
        assert!(message.contains(advice), "{message}");
        assert!(!message.contains("  "), "{message}");
    }

    #[test]
    fn sandboxed_crashes_say_what_stopped_them() {
        let crash = |signal, tail: &str| ProcessError::WorkerCrashed {
            pid: 5,
            exit_code: None,
            signal: Some(signal),
            stderr_tail: tail.into(),
        };
        let sys = explain_crash(crash(libc::SIGSYS, ""), true, None);
        assert!(matches!(
            sys,
            ProcessError::SandboxStop {
                stop: SandboxStop::ForbiddenSystemCall { call: None },
                ..
            }
        ));
        assert!(sys.to_string().contains("ptrace"), "{sys}");
        // The worker's SIGSYS handler names the call; the last line counts.
        let line = tunebox_protocol::REFUSED_SYSTEM_CALL_LINE;
        let tail = format!("{line}1\nnoise\n{line}{}\n", libc::SYS_process_vm_readv);
        let named = explain_crash(crash(libc::SIGSYS, &tail), true, None);
        let ProcessError::SandboxStop {
            stop: SandboxStop::ForbiddenSystemCall { call: Some(call) },
            ..
        } = named
        else {
            panic!("{named:?}")
        };
        assert_eq!(call.name, Some("process_vm_readv"));
        assert!(
            named
                .to_string()
                .contains(&format!("process_vm_readv (system call {})", call.number)),
            "{named}"
        );
        let unknown = explain_crash(crash(libc::SIGSYS, &format!("{line}99999\n")), true, None);
        assert!(
            unknown.to_string().contains("system call 99999"),
            "{unknown}"
        );
        // Outside the sandbox SIGSYS is an ordinary crash.
        assert!(matches!(
            explain_crash(crash(libc::SIGSYS, ""), false, None),
            ProcessError::WorkerCrashed { .. }
        ));
        let oom = explain_crash(
            crash(
                libc::SIGABRT,
                "memory allocation of 4294967296 bytes failed\n",
            ),
            false,
            Some(1 << 30),
        );
        assert!(
            oom.to_string()
                .contains("ran out of its memory limit (1.0 GiB"),
            "{oom}"
        );
        assert!(matches!(
            explain_crash(crash(libc::SIGXFSZ, ""), true, None),
            ProcessError::SandboxStop {
                stop: SandboxStop::FileSize,
                ..
            }
        ));
    }

    #[test]
    fn a_missing_worker_entry_names_the_fix() {
        let err = ProcessError::NoWorkerEntry {
            path: "/bin/tool".into(),
            pid: 7,
        };
        let message = err.to_string();
        assert!(message.starts_with("`/bin/tool` was started as a tunebox worker"));
        assert!(
            message.contains("tunebox_worker::run_if_worker(...)"),
            "{message}"
        );
        assert!(message.contains("tunebox::run_if_worker"), "{message}");
        assert!(message.contains("TUNEBOX_WORKER"), "{message}");
        let timeout = |own_executable| ProcessError::HandshakeTimeout {
            after: Duration::from_secs(30),
            pid: 8,
            own_executable,
        };
        assert_eq!(
            timeout(false).to_string(),
            "worker 8 did not connect within 30s; it was killed"
        );
        assert!(
            timeout(true)
                .to_string()
                .contains("call `tunebox_worker::run_if_worker(...)` first thing in `main`")
        );
    }
}
