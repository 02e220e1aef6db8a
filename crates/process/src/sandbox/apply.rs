//! Everything a sandboxed (or memory-limited) worker needs, built before `fork`, and the
//! async-signal-safe steps that put it in place between `fork` and `exec`.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::filters::{self, Filters};
use super::rules::{self, Paths};
use crate::containment::{Enclosure, WorkerCgroups};

use super::{DEVICES, NVIDIA_DEVICE_PREFIX, SYSTEM_READ, Sandbox, SandboxSupport};

/// What the child applies between `fork` and `exec`; everything in it was made before `fork`,
/// so applying allocates nothing and takes no lock.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// `(resource, soft, hard)`.
    rlimits: Vec<(libc::__rlimit_resource_t, u64, u64)>,
    /// The `cgroup.procs` of each of the worker's cgroups, to write `0` (this process) to.
    cgroup_procs: Vec<CString>,
    /// Which of them a child born in its cgroup (`CLONE_INTO_CGROUP`) is in already.
    birth_procs: Option<usize>,
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

/// What a spawn needs to know to prepare a worker.
pub(crate) struct Request<'a> {
    pub(crate) sandbox: Option<&'a Sandbox>,
    /// `ProcessConfig::memory_limit`, which applies with or without the sandbox.
    pub(crate) memory_limit: Option<u64>,
    pub(crate) exe: &'a Path,
    /// The worker's environment as configured (what it will see).
    pub(crate) env: &'a dyn Fn(&str) -> Option<OsString>,
    /// The worker's cgroups (which it joins) and scratch folder (required with a sandbox).
    pub(crate) enclosure: &'a Enclosure,
}

impl Prepared {
    /// Whether [`apply`] may run in a child that shares this process's memory until its
    /// `execve` (`launch::Launch::may_share_memory`): W^X (`PR_SET_MDWE`) is a flag of the
    /// memory map, which this process would get too, and the kernel refuses a new namespace's
    /// `unshare` to a process whose memory another shares. Everything else it sets belongs to
    /// the child (its credentials, limits, cgroups, seccomp filters).
    pub(crate) fn may_share_memory(&self) -> bool {
        !self.write_xor_execute && self.unshare == 0
    }
}

/// Builds what the child applies: joining the worker's cgroups, and the sandbox's and memory
/// limit's steps.
///
/// # Errors
///
/// A path the sandbox was told to allow that cannot be opened, a sandbox without a scratch
/// folder, a ruleset that cannot be made.
pub(crate) fn prepare(request: &Request<'_>) -> io::Result<Prepared> {
    let memory = match (request.memory_limit, request.sandbox.and_then(|s| s.memory)) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    let cgroups = request.enclosure.cgroups();
    let mut prepared = Prepared {
        rlimits: Vec::new(),
        cgroup_procs: cgroups.map(|c| c.procs().to_vec()).unwrap_or_default(),
        birth_procs: cgroups.and_then(WorkerCgroups::birth_procs),
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
        return Ok(prepared);
    };
    let support = SandboxSupport::probe();
    prepared.sandboxed = true;
    prepared.write_xor_execute = sandbox.write_xor_execute && support.write_xor_execute;

    if let Some(limit) = sandbox.cpu_time {
        let secs = limit.as_secs().max(1);
        prepared.rlimits.push((libc::RLIMIT_CPU, secs, secs + 1));
    }
    if let Some(bytes) = sandbox.file_size {
        prepared.rlimits.push((libc::RLIMIT_FSIZE, bytes, bytes));
    }
    let limited = cgroups.is_some_and(|c| c.limits_tasks(crate::containment::bases()));
    if let Some(tasks) = sandbox.tasks
        && !limited
        && !support.root
    {
        prepared.rlimits.push((libc::RLIMIT_NPROC, tasks, tasks));
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

    let scratch = request
        .enclosure
        .scratch()
        .map(crate::scratch::Scratch::path)
        .ok_or_else(|| io::Error::other("a sandboxed worker needs a scratch folder"))?;
    if support.landlock_abi > 0 {
        let paths = paths(sandbox, request, scratch)?;
        prepared.landlock = rules::create(&paths, sandbox.network).map_err(io::Error::other)?;
    }
    if support.seccomp {
        let filters =
            filters::compile(sandbox.network, std::process::id()).map_err(io::Error::other)?;
        prepared.filters = Some(FiltersBox(filters));
    }
    Ok(prepared)
}

/// The Landlock paths: system paths, the worker's folder, tunebox's cache (files by name), the
/// allowances.
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
    // Made now if missing: the parent may compile into it after this worker started. Files by
    // name only: a worker finds its own kernel by its key, and cannot list the others (nor
    // anything else kept there).
    if let Some(cache) =
        tunebox_protocol::cache_root(request.env).filter(|c| std::fs::create_dir_all(c).is_ok())
    {
        paths.read_by_name.push(cache);
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
/// Async-signal-safe: only system calls (`prctl` (child subreaper, `no_new_privs`, W^X),
/// `open`/`write`/`close` of prepared paths, `setrlimit`, `unshare`,
/// `landlock_restrict_self`, `seccomp`) on memory made before `fork`; no allocation, no lock.
/// The order matters: the worker becomes a child subreaper before it can run anything, the
/// cgroups are joined and the user namespace mapped while `/proc` and the cgroup files are
/// still writable, Landlock is enforced before seccomp (which would refuse nothing it needs,
/// but stays last so that every later call is filtered).
pub(crate) fn apply(prepared: &Prepared, born_in_cgroup: bool) -> io::Result<()> {
    // Kept across `execve`: what the worker starts and orphans is handed to it, not to init
    // (`containment::tree`).
    // SAFETY: `PR_SET_CHILD_SUBREAPER` takes integers only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    for (i, procs) in prepared.cgroup_procs.iter().enumerate() {
        if !(born_in_cgroup && prepared.birth_procs == Some(i)) {
            write_file(procs, b"0")?;
        }
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

/// `open(path, O_WRONLY)`, one `write`, `close`. Async-signal-safe, and made as bare system
/// calls: glibc's wrappers of these are cancellation points, which mark the calling thread's
/// cancellation state, and in a child born in this process's memory that thread's state is
/// the spawning thread's (`posix_spawn` uses their `_nocancel` forms for the same reason).
pub(crate) fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: `path` is a NUL-terminated string that lives through the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::O_WRONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: writes `bytes.len()` bytes from a live slice to the descriptor just opened.
    let written = unsafe { libc::syscall(libc::SYS_write, fd, bytes.as_ptr(), bytes.len()) };
    let error = io::Error::last_os_error();
    // SAFETY: closes the descriptor this function opened.
    unsafe { libc::syscall(libc::SYS_close, fd) };
    if written == bytes.len() as libc::c_long {
        Ok(())
    } else {
        Err(error)
    }
}
