//! How to start a worker.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tunebox_protocol::BenchmarkRequest;

use crate::Sandbox;
use crate::environment::{Inheritance, locate};

/// Environment variable naming the worker executable when [`ProcessConfig::worker`] is not set.
pub const WORKER_PATH_ENV: &str = "TUNEBOX_WORKER";

/// The size past which [`Output::File`] sends the next worker's stream to `/dev/null`, and the
/// default [`ProcessConfig::write_limit`] of one request: 1 GiB, far more than any kernel's
/// diagnostics, far less than a disk.
pub const FILE_OUTPUT_LIMIT: u64 = 1 << 30;

/// Where a worker's stdout or stderr goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// The parent's own stream.
    Inherit,
    /// Discarded (`/dev/null`).
    Null,
    /// Appended to a file (created if missing). A worker started once the file holds
    /// [`FILE_OUTPUT_LIMIT`] bytes or more writes to `/dev/null` instead, so that candidates
    /// printing without end cannot fill the disk worker after worker; one worker is killed
    /// once a request of its wrote past [`ProcessConfig::write_limit`].
    File(PathBuf),
    /// Read by a parent thread into a ring buffer keeping the last `tail_bytes` bytes, which crash
    /// errors quote. The child can never block on a full pipe.
    Capture {
        /// How many trailing bytes to keep.
        tail_bytes: usize,
    },
}

/// What a worker runs right after it starts, before serving requests (TVM's `initializer`):
/// load a library, create a device context, fill a cache, set up state for later requests.
///
/// It is a [`BenchmarkRequest`] whose result is discarded; an error, crash or timeout is
/// `ProcessError::InitializerFailed`.
#[derive(Debug, Clone)]
pub struct InitRequest {
    pub(crate) request: BenchmarkRequest,
    pub(crate) timeout: Duration,
}

impl InitRequest {
    /// Runs `request` on each new worker, with a 60 s timeout.
    pub fn new(request: BenchmarkRequest) -> Self {
        InitRequest {
            request,
            timeout: Duration::from_secs(60),
        }
    }

    /// How long the initializer may run.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// A device the worker is pinned to: the value of its `CUDA_VISIBLE_DEVICES`, verbatim (an index
/// such as `0`, a `GPU-…` UUID or a `MIG-…` identifier).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeviceToken(String);

impl DeviceToken {
    /// The token as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for DeviceToken {
    fn from(token: &str) -> Self {
        DeviceToken(token.to_owned())
    }
}

impl From<String> for DeviceToken {
    fn from(token: String) -> Self {
        DeviceToken(token)
    }
}

impl std::fmt::Display for DeviceToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// How to start (and restart) a worker; a builder.
///
/// ```
/// use std::time::Duration;
/// use tunebox_process::{Output, ProcessConfig};
///
/// let config = ProcessConfig::new()
///     .worker("target/release/tunebox-worker")
///     .env("OMP_NUM_THREADS", "1")
///     .stdout(Output::Null)
///     .stderr(Output::Capture { tail_bytes: 16 * 1024 })
///     .handshake_timeout(Duration::from_secs(10));
/// assert_eq!(config.handshake_timeout_value(), Duration::from_secs(10));
/// ```
#[derive(Debug, Clone)]
pub struct ProcessConfig {
    pub(crate) worker: Option<PathBuf>,
    pub(crate) args: Vec<OsString>,
    pub(crate) env: Vec<(OsString, OsString)>,
    pub(crate) inherit: Inheritance,
    pub(crate) device: Option<DeviceToken>,
    pub(crate) stdout: Output,
    pub(crate) stderr: Output,
    pub(crate) handshake_timeout: Duration,
    pub(crate) send_timeout: Duration,
    pub(crate) maximum_process_uses: Option<u64>,
    pub(crate) initializer: Option<InitRequest>,
    pub(crate) sandbox: Option<Sandbox>,
    pub(crate) memory_limit: Option<u64>,
    pub(crate) scratch: bool,
    pub(crate) check_children: Option<bool>,
    pub(crate) write_limit: Option<u64>,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        ProcessConfig {
            worker: None,
            args: Vec::new(),
            env: Vec::new(),
            inherit: Inheritance::default(),
            device: None,
            stdout: Output::Inherit,
            stderr: Output::Capture {
                tail_bytes: 64 * 1024,
            },
            handshake_timeout: Duration::from_secs(30),
            send_timeout: Duration::from_secs(10),
            maximum_process_uses: None,
            initializer: None,
            sandbox: None,
            memory_limit: None,
            scratch: false,
            check_children: None,
            write_limit: Some(FILE_OUTPUT_LIMIT),
        }
    }
}

impl ProcessConfig {
    /// Defaults: worker from [`WORKER_PATH_ENV`] or the current executable, stdout inherited,
    /// stderr captured (last 64 KiB), 30 s handshake timeout, 10 s send timeout, unlimited uses,
    /// no initializer.
    pub fn new() -> Self {
        Self::default()
    }

    /// The worker executable. Without it, [`WORKER_PATH_ENV`] is used, and without that the
    /// current executable, which must then call `tunebox_worker::run_if_worker` first thing in
    /// `main` (the `tunebox` CLI does).
    pub fn worker(mut self, path: impl Into<PathBuf>) -> Self {
        self.worker = Some(path.into());
        self
    }

    /// Arguments passed to the worker executable.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args = args.into_iter().map(|a| a.as_ref().to_owned()).collect();
        self
    }

    /// Sets an environment variable in the worker (only there: the parent's environment is never
    /// modified). tunebox's own bootstrap variables take precedence.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Passes the parent's variable `name` on to the worker, if it is set. Without this a worker
    /// inherits only [`INHERITED_ENV`](crate::INHERITED_ENV) and the prefixes of
    /// [`INHERITED_ENV_PREFIXES`](crate::INHERITED_ENV_PREFIXES) (the system, the compiler,
    /// CUDA, locale, logging, tunebox's own), so that secrets in the parent's environment never
    /// reach code under test.
    pub fn inherit_env(mut self, name: impl AsRef<OsStr>) -> Self {
        self.inherit.extra.push(name.as_ref().to_owned());
        self
    }

    /// Passes the parent's whole environment on to the worker, as `std::process::Command` does
    /// (TVM's and Inductor's workers do this too). Off by default; see
    /// [`ProcessConfig::inherit_env`].
    pub fn inherit_all_env(mut self, all: bool) -> Self {
        self.inherit.all = all;
        self
    }

    /// Pins the worker to a device: it gets `CUDA_VISIBLE_DEVICES=<token>`, on every restart.
    /// `None` leaves the variable as inherited.
    pub fn device(mut self, device: Option<DeviceToken>) -> Self {
        self.device = device;
        self
    }

    /// Where the worker's stdout goes (default: inherited).
    pub fn stdout(mut self, output: Output) -> Self {
        self.stdout = output;
        self
    }

    /// Where the worker's stderr goes (default: captured, last 64 KiB).
    pub fn stderr(mut self, output: Output) -> Self {
        self.stderr = output;
        self
    }

    /// The bytes a worker may write while it serves one request (`write` and its kin, to any
    /// descriptor: its stdout and stderr, a file, a pipe) before the parent kills it
    /// ([`ProcessError::WroteTooMuch`](crate::ProcessError::WroteTooMuch)): a kernel printing
    /// in a loop ends then, not at its timeout, and fills no disk. Default
    /// [`FILE_OUTPUT_LIMIT`] (1 GiB); `None`: no limit. Read from the worker's `/proc/<pid>/io`
    /// every 100 ms while the parent waits, so a flood overshoots it by what 100 ms write;
    /// where that file cannot be read, nothing is limited.
    pub fn write_limit(mut self, bytes: Option<u64>) -> Self {
        self.write_limit = bytes;
        self
    }

    /// The bytes a worker may write while it serves one request ([`ProcessConfig::write_limit`]).
    pub fn write_limit_value(&self) -> Option<u64> {
        self.write_limit
    }

    /// How long a starting worker may take to connect (default 30 s).
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.handshake_timeout = timeout;
        self
    }

    /// How long a worker may take to accept a request that does not fit in the socket buffer,
    /// or that queues behind an uncollected one, before it is killed (default 10 s). This is
    /// what keeps `put` from blocking forever on a worker that stopped reading.
    pub fn send_timeout(mut self, timeout: Duration) -> Self {
        self.send_timeout = timeout;
        self
    }

    /// Runs `init` on every freshly started worker, before its first request (TVM's
    /// `initializer`). It does not count as a use. When it fails, the worker is killed and the
    /// request that needed it gets `ProcessError::InitializerFailed`.
    pub fn initializer(mut self, init: InitRequest) -> Self {
        self.initializer = Some(init);
        self
    }

    /// Replace the worker after this many benchmark requests, as TVM's `maximum_process_uses`;
    /// `None` (the default) never does.
    pub fn maximum_process_uses(mut self, uses: Option<u64>) -> Self {
        self.maximum_process_uses = uses;
        self
    }

    /// Starts workers in `sandbox` (no network, Landlock, seccomp, limits; see [`Sandbox`]);
    /// `None` (the default) starts them as ordinary processes.
    pub fn sandbox(mut self, sandbox: Option<Sandbox>) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// The most address space a worker may map, in bytes (`RLIMIT_AS`), with or without the
    /// sandbox (with it, the smaller of this and [`Sandbox::memory`]): an allocation past it
    /// fails at once, and a worker that dies of it is reported as
    /// [`ProcessError::OverMemoryLimit`](crate::ProcessError::OverMemoryLimit) instead of
    /// swapping the machine until its timeout. `None` (the default): unlimited.
    pub fn memory_limit(mut self, bytes: Option<u64>) -> Self {
        self.memory_limit = bytes;
        self
    }

    /// Starts each worker in a private scratch folder of its own (mode 0700, under the parent's
    /// temporary directory): its working directory and `TMPDIR`, removed with it. A candidate
    /// that looks around its working directory then finds nothing of the caller's (the
    /// manifest's folder, an answers file beside it). Default `false`: workers start in the
    /// parent's working directory, as TVM's and Inductor's do; the sandbox always gives one.
    /// A relative `TUNEBOX_CACHE_DIR` is made absolute for the worker.
    pub fn scratch(mut self, on: bool) -> Self {
        self.scratch = on;
        self
    }

    /// Whether workers start in a scratch folder of their own ([`ProcessConfig::scratch`], or
    /// the sandbox).
    pub fn scratch_value(&self) -> bool {
        self.scratch || self.sandbox.is_some()
    }

    /// After each benchmark reply, looks for processes the worker started and left running
    /// (in its cgroups, which no change of session or process group hides from; without
    /// cgroups, among its descendants: it is a child subreaper, so a daemon that double-forked
    /// is one), kills them, and turns the reply into `BenchError::Suspicious`
    /// (`children_after_call`): the parent's own look, out of a candidate's reach. Default: on
    /// with a sandbox, off otherwise (a worker that runs Python callables may keep helper
    /// processes between tasks on purpose).
    pub fn check_children(mut self, on: bool) -> Self {
        self.check_children = Some(on);
        self
    }

    /// Whether the parent looks for processes left running after each reply
    /// ([`ProcessConfig::check_children`]).
    pub fn check_children_value(&self) -> bool {
        self.check_children.unwrap_or(self.sandbox.is_some())
    }

    /// The sandbox workers start in, if any.
    pub fn sandbox_value(&self) -> Option<&Sandbox> {
        self.sandbox.as_ref()
    }

    /// The address-space limit of a worker: [`ProcessConfig::memory_limit`], or the sandbox's
    /// when smaller.
    pub fn memory_limit_value(&self) -> Option<u64> {
        match (
            self.memory_limit,
            self.sandbox.as_ref().and_then(|s| s.memory),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The configured handshake timeout.
    pub fn handshake_timeout_value(&self) -> Duration {
        self.handshake_timeout
    }

    /// The device the worker is pinned to.
    pub fn device_value(&self) -> Option<&DeviceToken> {
        self.device.as_ref()
    }

    /// The executable a worker is started from: [`ProcessConfig::worker`], else
    /// [`WORKER_PATH_ENV`], else the current executable. A path with a `/` is used as given; a
    /// bare name is looked up in the absolute directories of `PATH`, never in the current
    /// directory.
    ///
    /// # Errors
    ///
    /// `NotFound` when a bare name is on no absolute `PATH` entry (the message says what to
    /// write instead); the I/O error of `std::env::current_exe` when that is needed and fails.
    pub fn resolve_worker(&self) -> std::io::Result<PathBuf> {
        let path_var = std::env::var_os("PATH");
        if let Some(path) = &self.worker {
            return locate(path, "ProcessConfig::worker", path_var.as_deref());
        }
        if let Some(path) = std::env::var_os(WORKER_PATH_ENV).filter(|p| !p.is_empty()) {
            return locate(Path::new(&path), WORKER_PATH_ENV, path_var.as_deref());
        }
        std::env::current_exe()
    }

    /// Whether the worker is the current executable: neither [`ProcessConfig::worker`] nor
    /// [`WORKER_PATH_ENV`] names one.
    pub(crate) fn worker_is_current_exe(&self) -> bool {
        self.worker.is_none() && std::env::var_os(WORKER_PATH_ENV).is_none_or(|p| p.is_empty())
    }

    /// What [`ProcessConfig::resolve_worker`] starts from, for messages: the configured path,
    /// else [`WORKER_PATH_ENV`]'s value, else `<current executable>`.
    pub(crate) fn worker_description(&self) -> PathBuf {
        self.worker
            .clone()
            .or_else(|| {
                std::env::var_os(WORKER_PATH_ENV)
                    .filter(|p| !p.is_empty())
                    .map(PathBuf::from)
            })
            .unwrap_or_else(|| "<current executable>".into())
    }
}
