//! A backend of scripted behaviours, for tests and `tunebox doctor`.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use tunebox_bench::{Backend, HostTensor, summarize};
use tunebox_protocol::{
    BenchError, BenchmarkRequest, BenchmarkResult, Bytes, DType, DiagnosticTask, Init, Kernel,
    TensorData, checksum,
};

/// Runs [`DiagnosticTask`]s: each reproduces one way a real candidate succeeds or fails (sleeps,
/// spins with signals blocked, hangs, aborts, segfaults, exits, panics, fails, echoes, floods its
/// output), so that every path of the process and pool crates is tested without a compiler or GPU.
///
/// A successful task's result has one rep whose time is the task's wall time, and returns the
/// request's tensors marked `output` as they were initialized (an identity kernel).
#[derive(Debug, Default, Clone)]
pub struct DiagnosticsBackend {
    /// What the last `Remember` kept.
    remembered: Bytes,
}

impl Backend for DiagnosticsBackend {
    fn name(&self) -> &'static str {
        "diagnostics"
    }

    fn benchmark(&mut self, request: &BenchmarkRequest) -> Result<BenchmarkResult, BenchError> {
        let Kernel::Diagnostic(task) = &request.kernel else {
            return Err(BenchError::InvalidRequest {
                detail: format!(
                    "the diagnostics backend got a `{}` kernel",
                    request.kernel.backend()
                ),
            });
        };
        let start = Instant::now();
        let mut outputs = match task {
            DiagnosticTask::Remember { bytes } => {
                self.remembered = bytes.clone();
                Vec::new()
            }
            DiagnosticTask::Recall => vec![bytes_output("recall", self.remembered.clone())],
            DiagnosticTask::Checksum => vec![checksums(request)?],
            other => run(other)?,
        };
        // Tensors marked `output` come back as initialized: an identity kernel, for round trips
        // of caller data.
        for spec in request.tensors.iter().filter(|t| t.output) {
            outputs.push(HostTensor::allocate(spec)?.to_data()?);
        }
        let elapsed_ms = start.elapsed().as_secs_f64() * 1e3;
        Ok(BenchmarkResult::new(summarize(&[elapsed_ms], 0)).with_outputs(outputs))
    }
}

/// No exit asked for in [`EXIT_AFTER_REPLY`].
const NO_EXIT: i64 = i64::MIN;

/// The exit status a `DiagnosticTask::ExitAfterReply` asked for, read by the work loop once the
/// reply is sent.
static EXIT_AFTER_REPLY: AtomicI64 = AtomicI64::new(NO_EXIT);

/// The exit status to `_exit` with now that the reply is sent, if a task asked for one.
pub(crate) fn take_exit_after_reply() -> Option<i32> {
    match EXIT_AFTER_REPLY.swap(NO_EXIT, Ordering::Relaxed) {
        NO_EXIT => None,
        code => i32::try_from(code).ok(),
    }
}

fn run(task: &DiagnosticTask) -> Result<Vec<TensorData>, BenchError> {
    match task {
        DiagnosticTask::Sleep { ms } => std::thread::sleep(Duration::from_millis(*ms)),
        DiagnosticTask::Spin { ms, block_signals } => spin(*ms, *block_signals),
        DiagnosticTask::Hang => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
        DiagnosticTask::Abort => std::process::abort(),
        DiagnosticTask::Segfault => segfault(),
        DiagnosticTask::Exit { code } => std::process::exit(*code),
        DiagnosticTask::ExitAfterReply { code } => {
            EXIT_AFTER_REPLY.store(i64::from(*code), Ordering::Relaxed);
        }
        DiagnosticTask::Panic { message } => panic!("{message}"),
        DiagnosticTask::Pid => {
            let bytes =
                Bytes::from_vec(std::process::id().to_string().into_bytes()).map_err(|e| {
                    BenchError::Failed {
                        message: e.to_string(),
                    }
                })?;
            return Ok(vec![bytes_output("pid", bytes)]);
        }
        DiagnosticTask::DeviceFault { code, sticky } => {
            return Err(BenchError::DeviceFault {
                code: *code,
                name: "DIAGNOSTIC_DEVICE_FAULT".into(),
                message: "a scripted device fault".into(),
                sticky: *sticky,
            });
        }
        DiagnosticTask::WriteToSockets { bytes } => write_to_sockets(bytes),
        DiagnosticTask::Leak { bytes } => {
            let len = usize::try_from(*bytes).map_err(|_| BenchError::InvalidRequest {
                detail: format!("cannot leak {bytes} bytes on this machine"),
            })?;
            // Written, so that the pages are really taken; never freed.
            std::mem::forget(vec![1u8; len]);
        }
        DiagnosticTask::FailIfExists { path } => {
            if std::path::Path::new(path).exists() {
                return Err(BenchError::Failed {
                    message: format!("{path} exists"),
                });
            }
        }
        DiagnosticTask::Fail { message } => {
            return Err(BenchError::Failed {
                message: message.clone(),
            });
        }
        DiagnosticTask::Echo { bytes } => return Ok(vec![bytes_output("echo", bytes.clone())]),
        DiagnosticTask::EnvVar { name } => {
            let value = std::env::var_os(name).unwrap_or_default();
            let bytes =
                Bytes::from_vec(value.into_encoded_bytes()).map_err(|e| BenchError::Failed {
                    message: e.to_string(),
                })?;
            return Ok(vec![bytes_output(name, bytes)]);
        }
        DiagnosticTask::Print {
            stdout_bytes,
            stderr_bytes,
        } => {
            write_raw(libc::STDOUT_FILENO, *stdout_bytes);
            write_raw(libc::STDERR_FILENO, *stderr_bytes);
        }
        DiagnosticTask::Remember { .. } | DiagnosticTask::Recall | DiagnosticTask::Checksum => {
            unreachable!("tasks that need the backend or the request are handled by the backend")
        }
        other => {
            return Err(BenchError::InvalidRequest {
                detail: format!("this worker does not know the diagnostic task {other:?}"),
            });
        }
    }
    Ok(Vec::new())
}

/// One `u64` checksum per tensor initialized from caller data, read straight from the mapping.
fn checksums(request: &BenchmarkRequest) -> Result<TensorData, BenchError> {
    let sums: Vec<u8> = request
        .tensors
        .iter()
        .filter_map(|t| match &t.init {
            Init::Data(data) => Some(checksum(data)),
            _ => None,
        })
        .flat_map(u64::to_ne_bytes)
        .collect();
    let count = sums.len() as u64 / 8;
    let bytes = Bytes::from_vec(sums).map_err(|e| BenchError::Failed {
        message: e.to_string(),
    })?;
    Ok(TensorData::new("checksum", DType::I64, vec![count], bytes))
}

fn bytes_output(name: &str, bytes: Bytes) -> TensorData {
    TensorData::new(name, DType::U8, vec![bytes.len() as u64], bytes)
}

/// Busy-waits `ms` ms, optionally with SIGTERM, SIGINT and SIGALRM blocked, like native code that
/// ignores every polite request to stop.
fn spin(ms: u64, block_signals: bool) {
    // `None`: so far away that it never comes.
    let deadline = Instant::now().checked_add(Duration::from_millis(ms));
    let guard = block_signals.then(SignalBlock::new);
    while deadline.is_none_or(|deadline| Instant::now() < deadline) {
        std::hint::spin_loop();
    }
    drop(guard);
}

/// Blocks SIGTERM, SIGINT and SIGALRM on this thread until dropped.
struct SignalBlock {
    previous: libc::sigset_t,
}

impl SignalBlock {
    fn new() -> Self {
        // SAFETY: `sigset_t` is plain data; both sets are initialized by `sigemptyset` before use
        // and only passed by pointer to the libc functions that fill or read them.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut previous: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigemptyset(&mut previous);
            for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGALRM] {
                libc::sigaddset(&mut set, signal);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut previous);
            SignalBlock { previous }
        }
    }
}

impl Drop for SignalBlock {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `new` on the same thread (the guard is not Send:
        // `sigset_t` is plain data, but the guard lives only inside `spin`).
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, std::ptr::null_mut());
        }
    }
}

/// Dies of SIGSEGV. The default action is restored first: the Rust runtime's SIGSEGV handler only
/// reports stack overflows and would otherwise swallow a raised (not faulted) signal.
fn segfault() -> ! {
    // SAFETY: resetting a signal disposition to its default and raising it are async-signal-safe
    // calls with valid arguments; the process terminates.
    unsafe {
        libc::signal(libc::SIGSEGV, libc::SIG_DFL);
        libc::raise(libc::SIGSEGV);
    }
    unreachable!("SIGSEGV with its default action terminates the process")
}

/// Writes `bytes` into every open socket descriptor below 1024, once each, ignoring errors.
fn write_to_sockets(bytes: &[u8]) {
    for fd in 3..1024 {
        // SAFETY: `fstat` only fills `stat`, a plain struct; an unused descriptor is EBADF.
        let is_socket = unsafe {
            let mut stat: libc::stat = std::mem::zeroed();
            libc::fstat(fd, &mut stat) == 0 && stat.st_mode & libc::S_IFMT == libc::S_IFSOCK
        };
        if is_socket {
            // SAFETY: `bytes` is a live buffer of `bytes.len()` bytes; writing to a socket we do
            // not own is the point of this task, and errors are ignored.
            let _ =
                unsafe { libc::send(fd, bytes.as_ptr().cast(), bytes.len(), libc::MSG_DONTWAIT) };
        }
    }
}

/// Writes `count` bytes of text to `fd` with raw `write(2)`, bypassing Rust's buffering.
fn write_raw(fd: libc::c_int, mut count: u64) {
    let chunk = [b'x'; 8192];
    let mut line = chunk;
    line[chunk.len() - 1] = b'\n';
    while count > 0 {
        let n = count.min(line.len() as u64) as usize;
        // SAFETY: `line` is a live buffer of at least `n` bytes.
        let written = unsafe { libc::write(fd, line.as_ptr().cast(), n) };
        if written <= 0 {
            // EPIPE, a closed descriptor or a full disk: stop writing, the task still succeeds.
            break;
        }
        count -= written as u64;
    }
}
