//! The sandbox a worker can be started in, for candidates nobody has read.
//!
//! [`Sandbox`] is the switch and its allowances; [`SandboxSupport`] says what this kernel offers
//! and which protections are missing. `prepare` builds everything before `fork` (the Landlock
//! ruleset, the seccomp programs, the rlimits; the worker's cgroups come from `containment`)
//! and `apply` only makes system calls with it between `fork` and `exec`, where nothing may
//! allocate or lock.

mod apply;
mod filters;
mod rules;
mod support;

use std::path::PathBuf;
use std::time::Duration;

/// For tests that join a cgroup the way a worker does.
#[cfg(test)]
pub(crate) use apply::write_file;
pub(crate) use apply::{Request, apply, prepare};
pub(crate) use filters::trapped_name;
pub use support::SandboxSupport;

/// What a sandboxed worker may do; a builder. `ProcessConfig::sandbox(Some(Sandbox::new()))`
/// switches it on.
///
/// A sandboxed worker starts (set up between `fork` and `exec` in tunebox-process's one spawn
/// path):
/// - without network: in a new network namespace (as root directly, otherwise in a new user
///   namespace when unprivileged ones are allowed), and with a seccomp filter that refuses
///   sockets of any family but `AF_UNIX` (the worker's channel) and io_uring, which would
///   bypass it;
/// - with a file system limited by Landlock to read-only system paths (`/usr`, `/lib*`, `/bin`,
///   `/sbin`, `/etc`, `/opt`, `/proc`, `/sys`), the worker's own folder, the files of tunebox's
///   cache (`TUNEBOX_CACHE_DIR`, else `$XDG_CACHE_HOME/tunebox` or `~/.cache/tunebox`) by name
///   only — read-only, so a candidate cannot plant an artefact another choice loads, and not
///   listable, so it cannot browse the other choices' kernels — the [`read`](Sandbox::read)
///   paths (folders or single files), and read-write: a private scratch folder (its working
///   directory and `TMPDIR`, removed with the worker), a
///   few devices (`/dev/null`, `/dev/zero`, `/dev/full`, `/dev/urandom`, `/dev/random`, the
///   NVIDIA and DRI device files) and the [`write`](Sandbox::write) paths; TCP bind and connect
///   refused (Landlock ABI 4), abstract unix sockets and signals to processes outside the
///   sandbox refused (ABI 6);
/// - with `no_new_privs` and a seccomp filter that traps (SIGSYS; the worker dies of it, and
///   `SandboxStop::ForbiddenSystemCall` names the call) `ptrace`,
///   `process_vm_readv`/`process_vm_writev`, `kcmp` and `pidfd_getfd`, and refuses
///   (`EPERM`) new namespaces, mounts, `bpf`, `perf_event_open`, `userfaultfd`, keyrings,
///   module loading and `kill(-1)` / `kill(parent)`;
/// - with limits: address space ([`memory`](Sandbox::memory), default the machine's
///   physical memory, so an allocation larger than the machine fails at once), CPU time
///   ([`cpu_time`](Sandbox::cpu_time), default none: the parent's timeout bounds wall time),
///   tasks (processes and threads, [`tasks`](Sandbox::tasks), default 256 or 8 per CPU, in a
///   cgroup of its own when one can be made, so a fork bomb stops there and every process it
///   made is killed with the worker) and file size ([`file_size`](Sandbox::file_size),
///   default 1 GiB);
/// - with W^X ([`write_xor_execute`](Sandbox::write_xor_execute), Linux 6.3+): memory that was
///   writable never becomes executable.
///
/// Where the kernel lacks a feature, the worker starts without that protection and
/// [`SandboxSupport::missing`] names it; nothing is pretended.
///
/// ```
/// use tunebox_process::{ProcessConfig, Sandbox};
///
/// let sandbox = Sandbox::new()
///     .read("/data/weights")
///     .memory(Some(8 << 30))
///     .tasks(Some(64));
/// let config = ProcessConfig::new().sandbox(Some(sandbox));
/// assert!(config.sandbox_value().is_some());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub(crate) network: bool,
    pub(crate) read: Vec<PathBuf>,
    pub(crate) write: Vec<PathBuf>,
    pub(crate) memory: Option<u64>,
    pub(crate) cpu_time: Option<Duration>,
    pub(crate) tasks: Option<u64>,
    pub(crate) file_size: Option<u64>,
    pub(crate) write_xor_execute: bool,
}

impl Default for Sandbox {
    fn default() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        Sandbox {
            network: false,
            read: Vec::new(),
            write: Vec::new(),
            memory: tunebox_protocol::physical_memory_bytes(),
            cpu_time: None,
            tasks: Some((8 * cpus).max(256)),
            file_size: Some(1 << 30),
            write_xor_execute: true,
        }
    }
}

impl Sandbox {
    /// The defaults above: no network, system paths read-only, a private scratch folder,
    /// address space up to the machine's physical memory, 256 tasks (8 per CPU on larger
    /// machines), files up to 1 GiB, no CPU-time limit.
    pub fn new() -> Self {
        Self::default()
    }

    /// Allows the network (no new network namespace, sockets of every family).
    pub fn network(mut self, allowed: bool) -> Self {
        self.network = allowed;
        self
    }

    /// Allows reading (and executing) everything under `path`, a folder or a single file.
    pub fn read(mut self, path: impl Into<PathBuf>) -> Self {
        self.read.push(path.into());
        self
    }

    /// Allows reading and writing everything under `path`.
    pub fn write(mut self, path: impl Into<PathBuf>) -> Self {
        self.write.push(path.into());
        self
    }

    /// The most address space a worker may map, in bytes (`RLIMIT_AS`); `None`: unlimited
    /// (needed for CUDA workers, whose driver reserves more virtual memory than the machine has).
    pub fn memory(mut self, bytes: Option<u64>) -> Self {
        self.memory = bytes;
        self
    }

    /// The most CPU time a worker may use (`RLIMIT_CPU`, all its threads, counted over its life):
    /// SIGXCPU at the limit, SIGKILL a second later. `None`: unlimited.
    pub fn cpu_time(mut self, limit: Option<Duration>) -> Self {
        self.cpu_time = limit;
        self
    }

    /// The most tasks (processes and threads) a worker and everything it starts may have at
    /// once: a cgroup's `pids.max` when tunebox can make one, else `RLIMIT_NPROC`. `None`:
    /// unlimited.
    pub fn tasks(mut self, limit: Option<u64>) -> Self {
        self.tasks = limit;
        self
    }

    /// The largest file a worker may write, in bytes (`RLIMIT_FSIZE`: SIGXFSZ past it). `None`:
    /// unlimited.
    pub fn file_size(mut self, bytes: Option<u64>) -> Self {
        self.file_size = bytes;
        self
    }

    /// W^X: memory that was writable never becomes executable (`PR_SET_MDWE` with
    /// `PR_MDWE_REFUSE_EXEC_GAIN`, Linux 6.3+): `mmap` of anonymous memory that is both
    /// writable and executable, and `mprotect` adding `PROT_EXEC`, fail with `EACCES`, so a
    /// candidate cannot write machine code (a patched harness, a shellcode) and run it. Loading
    /// shared objects from files still works; a JIT (or a library that asks for an executable
    /// stack) does not. Default on; off where the runtime needs it (CUDA workers, see
    /// `tunebox-tune`'s `[sandbox] write_xor_execute`). A kernel without it is named by
    /// [`SandboxSupport::missing`].
    pub fn write_xor_execute(mut self, on: bool) -> Self {
        self.write_xor_execute = on;
        self
    }

    /// Whether W^X is asked for.
    pub fn write_xor_execute_value(&self) -> bool {
        self.write_xor_execute
    }

    /// Whether the network is allowed.
    pub fn network_value(&self) -> bool {
        self.network
    }

    /// The address-space limit, in bytes.
    pub fn memory_value(&self) -> Option<u64> {
        self.memory
    }

    /// The CPU-time limit.
    pub fn cpu_time_value(&self) -> Option<Duration> {
        self.cpu_time
    }

    /// The task limit.
    pub fn tasks_value(&self) -> Option<u64> {
        self.tasks
    }

    /// The file-size limit, in bytes.
    pub fn file_size_value(&self) -> Option<u64> {
        self.file_size
    }

    /// Whether a worker in this sandbox could read the existing file `path`: it lies under a
    /// system path, a [`read`](Sandbox::read) or [`write`](Sandbox::write) allowance, or this
    /// process's tunebox cache (whose files a worker opens by name). The worker's own folder
    /// (its executable's) is not known here and not counted. For a caller that must keep a
    /// file from every worker (the expected outputs of a run).
    pub fn reaches(&self, path: &std::path::Path) -> bool {
        let Ok(path) = path.canonicalize() else {
            return false;
        };
        let cache = tunebox_protocol::cache_root(|name| std::env::var_os(name));
        SYSTEM_READ
            .iter()
            .map(PathBuf::from)
            .chain(self.read.iter().cloned())
            .chain(self.write.iter().cloned())
            .chain(cache)
            .filter_map(|root| root.canonicalize().ok())
            .any(|root| path.starts_with(root))
    }

    /// The extra read-only paths.
    pub fn read_paths(&self) -> &[PathBuf] {
        &self.read
    }

    /// The extra read-write paths.
    pub fn write_paths(&self) -> &[PathBuf] {
        &self.write
    }
}

/// Read-only system paths every sandboxed worker may read and execute, when they exist.
pub(crate) const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/bin",
    "/sbin",
    "/etc",
    "/opt",
    "/proc",
    "/sys",
    "/nix/store",
];

/// Device files a sandboxed worker may read and write, when they exist. The NVIDIA and DRI
/// ones are matched by prefix under `/dev`.
pub(crate) const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/dri",
];

/// The prefix of the NVIDIA device files in `/dev`.
pub(crate) const NVIDIA_DEVICE_PREFIX: &str = "nvidia";
