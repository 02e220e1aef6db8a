//! Everything a sandboxed (or memory-limited) worker needs, built before `fork`, and the
//! async-signal-safe steps that put it in place between `fork` and `exec`.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::cgroup::Cgroup;
use super::filters::{self, Filters};
use super::rules::{self, Paths};
use super::{DEVICES, NVIDIA_DEVICE_PREFIX, SYSTEM_READ, Sandbox, SandboxSupport};

/// What the child applies between `fork` and `exec`; everything in it was made before `fork`,
/// so applying allocates nothing and takes no lock.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// `(resource, soft, hard)`.
    rlimits: Vec<(libc::__rlimit_resource_t, u64, u64)>,
    /// `cgroup.procs` of the worker's cgroup, to write `0` (this process) to.
    cgroup_procs: Option<CString>,
    /// `unshare` flags for the network namespace (0: none).
    unshare: libc::c_int,
    /// `uid_map` and `gid_map` lines, when the namespace is a new user namespace.
    id_maps: Option<(CString, CString)>,
    /// Whether to set `no_new_privs`, Landlock and seccomp at all.
    sandboxed: bool,
    /// Whether to set W^X (`PR_SET_MDWE`).
    write_xor_execute: bool,
    landlock: Option<OwnedFd>,
    filters: Option<FiltersBox>,
}

/// seccompiler's programs are plain data; a newtype to give them a `Debug`.
struct FiltersBox(Filters);

impl std::fmt::Debug for FiltersBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} seccomp programs", self.0.programs.len())
    }
}

/// What outlives the spawn: the worker's cgroup and scratch folder, removed when dropped.
#[derive(Debug, Default)]
pub(crate) struct Guard {
    pub(crate) cgroup: Option<Cgroup>,
    pub(crate) scratch: Option<PathBuf>,
}

impl Guard {
    /// The processes in the worker's cgroup other than `worker` itself: what it started and
    /// left running (a daemon that left its process group and session included). Empty
    /// without a cgroup.
    pub(crate) fn strays(&self, worker: u32) -> Vec<u32> {
        self.cgroup
            .as_ref()
            .map(|c| c.processes().into_iter().filter(|&p| p != worker).collect())
            .unwrap_or_default()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        // The cgroup first: it kills what is left running, which may hold files in the scratch.
        self.cgroup.take();
        if let Some(scratch) = self.scratch.take() {
            let _ = std::fs::remove_dir_all(scratch);
        }
    }
}

/// What a spawn needs to know to prepare a worker.
pub(crate) struct Request<'a> {
    pub(crate) sandbox: Option<&'a Sandbox>,
    /// `ProcessConfig::memory_limit`, which applies with or without the sandbox.
    pub(crate) memory_limit: Option<u64>,
    pub(crate) exe: &'a Path,
    /// The worker's environment as configured (what it will see).
    pub(crate) env: &'a dyn Fn(&str) -> Option<OsString>,
}

/// Builds what the child applies, and what the parent keeps; `None` when there is nothing to
/// apply (no sandbox, no memory limit). The returned scratch folder becomes the worker's
/// `TMPDIR`.
///
/// # Errors
///
/// A path the sandbox was told to allow that cannot be opened, a scratch folder or ruleset
/// that cannot be made.
pub(crate) fn prepare(request: &Request<'_>) -> io::Result<Option<(Prepared, Guard)>> {
    let memory = match (request.memory_limit, request.sandbox.and_then(|s| s.memory)) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let mut prepared = Prepared {
        rlimits: Vec::new(),
        cgroup_procs: None,
        unshare: 0,
        id_maps: None,
        sandboxed: false,
        write_xor_execute: false,
        landlock: None,
        filters: None,
    };
    if let Some(bytes) = memory {
        prepared.rlimits.push((libc::RLIMIT_AS, bytes, bytes));
    }
    let Some(sandbox) = request.sandbox else {
        return Ok((!prepared.rlimits.is_empty()).then(|| (prepared, Guard::default())));
    };
    let support = SandboxSupport::probe();
    let mut guard = Guard::default();
    prepared.sandboxed = true;
    prepared.write_xor_execute = sandbox.write_xor_execute && support.write_xor_execute;

    if let Some(limit) = sandbox.cpu_time {
        let secs = limit.as_secs().max(1);
        prepared.rlimits.push((libc::RLIMIT_CPU, secs, secs + 1));
    }
    if let Some(bytes) = sandbox.file_size {
        prepared.rlimits.push((libc::RLIMIT_FSIZE, bytes, bytes));
    }
    if let Some(tasks) = sandbox.tasks {
        match support
            .pids_cgroup
            .as_deref()
            .map(|b| Cgroup::create(b, tasks))
        {
            Some(Ok(cgroup)) => {
                prepared.cgroup_procs = Some(cgroup.procs.clone());
                guard.cgroup = Some(cgroup);
            }
            failed => {
                if let Some(Err(e)) = failed {
                    log::warn!("sandbox: no cgroup for the worker ({e}); using RLIMIT_NPROC");
                }
                if !support.root {
                    prepared.rlimits.push((libc::RLIMIT_NPROC, tasks, tasks));
                }
            }
        }
    }
    if !sandbox.network {
        if support.net_namespace {
            prepared.unshare = libc::CLONE_NEWNET;
        } else if support.user_namespace {
            prepared.unshare = libc::CLONE_NEWUSER | libc::CLONE_NEWNET;
            // SAFETY: `getuid`/`getgid` have no preconditions.
            let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
            prepared.id_maps = Some((
                CString::new(format!("{uid} {uid} 1")).map_err(io::Error::other)?,
                CString::new(format!("{gid} {gid} 1")).map_err(io::Error::other)?,
            ));
        }
    }

    let scratch = make_scratch()?;
    guard.scratch = Some(scratch.clone());
    if support.landlock_abi > 0 {
        let paths = paths(sandbox, request, &scratch)?;
        prepared.landlock = rules::create(&paths, sandbox.network).map_err(io::Error::other)?;
    }
    if support.seccomp {
        let filters =
            filters::compile(sandbox.network, std::process::id()).map_err(io::Error::other)?;
        prepared.filters = Some(FiltersBox(filters));
    }
    Ok(Some((prepared, guard)))
}

/// The scratch folder path a worker gets as `TMPDIR`.
pub(crate) fn scratch_of(guard: &Guard) -> Option<&Path> {
    guard.scratch.as_deref()
}

/// A fresh private folder under the parent's temporary directory (mode 0700).
fn make_scratch() -> io::Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tunebox-scratch-{}-{n}", std::process::id()));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    Ok(dir)
}

/// The Landlock paths: system paths, the worker's folder, tunebox's cache, the allowances.
fn paths(sandbox: &Sandbox, request: &Request<'_>, scratch: &Path) -> io::Result<Paths> {
    let mut paths = Paths::default();
    paths
        .read
        .extend(SYSTEM_READ.iter().map(PathBuf::from).filter(|p| p.exists()));
    let exe = request
        .exe
        .canonicalize()
        .unwrap_or_else(|_| request.exe.to_owned());
    if let Some(dir) = exe.parent() {
        paths.read.push(dir.to_owned());
    }
    // Made now if missing: the parent may compile into it after this worker started.
    if let Some(cache) =
        tunebox_protocol::cache_root(request.env).filter(|c| std::fs::create_dir_all(c).is_ok())
    {
        paths.read.push(cache);
    }
    for path in &sandbox.read {
        paths.read.push(allowed(path, "read")?);
    }
    paths.write.push(scratch.to_owned());
    for path in &sandbox.write {
        paths.write.push(allowed(path, "write")?);
    }
    paths
        .devices
        .extend(DEVICES.iter().map(PathBuf::from).filter(|p| p.exists()));
    if let Ok(entries) = std::fs::read_dir("/dev") {
        paths.devices.extend(
            entries
                .flatten()
                .filter(|e| {
                    e.file_name()
                        .as_bytes()
                        .starts_with(NVIDIA_DEVICE_PREFIX.as_bytes())
                })
                .map(|e| e.path()),
        );
    }
    Ok(paths)
}

/// An allowance's path, which must exist.
fn allowed(path: &Path, what: &str) -> io::Result<PathBuf> {
    path.canonicalize().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "the sandbox's {what} allowance `{}` cannot be opened: {e}",
                path.display()
            ),
        )
    })
}

/// Puts `prepared` in place in the child, between `fork` and `exec`.
///
/// Async-signal-safe: only system calls (`open`/`write`/`close` of prepared paths, `setrlimit`,
/// `unshare`, `prctl` (`no_new_privs`, W^X), `landlock_restrict_self`, `seccomp`) on memory
/// made before `fork`; no
/// allocation, no lock. The order matters: the cgroup is joined and the user namespace mapped
/// while `/proc` and the cgroup files are still writable, Landlock is enforced before seccomp
/// (which would refuse nothing it needs, but stays last so that every later call is filtered).
pub(crate) fn apply(prepared: &Prepared) -> io::Result<()> {
    if let Some(procs) = &prepared.cgroup_procs {
        write_file(procs, b"0")?;
    }
    for &(resource, soft, hard) in &prepared.rlimits {
        let limit = libc::rlimit {
            rlim_cur: soft,
            rlim_max: hard,
        };
        // SAFETY: `setrlimit` reads the struct it is given, a live local.
        if unsafe { libc::setrlimit(resource, &limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    if prepared.unshare != 0 {
        // SAFETY: `unshare` takes flags only; the child is single-threaded, as a new user
        // namespace requires.
        if unsafe { libc::unshare(prepared.unshare) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if let Some((uid_map, gid_map)) = &prepared.id_maps {
            write_file(c"/proc/self/setgroups", b"deny")?;
            write_file(c"/proc/self/uid_map", uid_map.as_bytes())?;
            write_file(c"/proc/self/gid_map", gid_map.as_bytes())?;
        }
    }
    if !prepared.sandboxed {
        return Ok(());
    }
    // SAFETY: `PR_SET_NO_NEW_PRIVS` takes integers only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if prepared.write_xor_execute {
        // Kept across `execve` and inherited by every process the worker forks (no
        // `PR_MDWE_NO_INHERIT`).
        let flags = libc::PR_MDWE_REFUSE_EXEC_GAIN as libc::c_ulong;
        // SAFETY: `PR_SET_MDWE` takes integers only.
        if unsafe { libc::prctl(libc::PR_SET_MDWE, flags, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    if let Some(fd) = &prepared.landlock {
        rules::enforce(fd)?;
    }
    if let Some(filters) = &prepared.filters {
        filters::install(&filters.0)?;
    }
    Ok(())
}

/// `open(path, O_WRONLY)`, one `write`, `close`. Async-signal-safe.
fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is a NUL-terminated string that lives through the call.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: writes `bytes.len()` bytes from a live slice to the descriptor just opened.
    let written = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
    let error = io::Error::last_os_error();
    // SAFETY: closes the descriptor this function opened.
    unsafe { libc::close(fd) };
    if written == bytes.len() as isize {
        Ok(())
    } else {
        Err(error)
    }
}
