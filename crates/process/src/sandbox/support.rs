//! What this kernel offers a sandbox, probed once per process.

use std::path::PathBuf;
use std::sync::OnceLock;

use super::Sandbox;
use crate::containment::{self, Containment};

/// What the running kernel and this process can set up for a [`Sandbox`], probed once per
/// process ([`SandboxSupport::probe`]); [`missing`](SandboxSupport::missing) names the
/// protections a sandbox would lack here, for a run's header and `tunebox doctor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSupport {
    /// The Landlock ABI version (0: no Landlock; 1: files; 4: + TCP; 6: + abstract unix
    /// sockets and signals).
    pub landlock_abi: i32,
    /// Whether seccomp filters can be installed.
    pub seccomp: bool,
    /// Whether this process may create a network namespace directly (it is root, or holds
    /// `CAP_SYS_ADMIN`).
    pub net_namespace: bool,
    /// Whether an unprivileged user namespace (with a network namespace in it) can be created.
    pub user_namespace: bool,
    /// The cgroup folder under which a worker's own cgroup with a `pids.max` can be made.
    pub pids_cgroup: Option<PathBuf>,
    /// How the processes a worker starts are held, so that none outlives it (with or without
    /// the sandbox).
    pub containment: Containment,
    /// Whether this process runs as root, which `RLIMIT_NPROC` does not bind.
    pub root: bool,
    /// Whether the kernel has W^X per process (`PR_SET_MDWE`, Linux 6.3+).
    pub write_xor_execute: bool,
}

impl SandboxSupport {
    /// Probes the kernel once (a Landlock version query, `PR_GET_SECCOMP`, a forked child that
    /// tries `unshare`, a cgroup made and removed) and returns the same answer afterwards.
    pub fn probe() -> &'static SandboxSupport {
        static SUPPORT: OnceLock<SandboxSupport> = OnceLock::new();
        SUPPORT.get_or_init(|| {
            // SAFETY: `geteuid` has no preconditions.
            let root = unsafe { libc::geteuid() } == 0;
            SandboxSupport {
                landlock_abi: landlock_abi(),
                seccomp: seccomp_available(),
                net_namespace: unshare_works(libc::CLONE_NEWNET),
                user_namespace: unshare_works(libc::CLONE_NEWUSER | libc::CLONE_NEWNET),
                pids_cgroup: containment::bases().pids().map(Into::into),
                containment: Containment::probe(),
                root,
                write_xor_execute: mdwe_available(),
            }
        })
    }

    /// The protections `sandbox` asks for that this kernel or process cannot give, one
    /// sentence each (empty when every one is in place).
    pub fn missing(&self, sandbox: &Sandbox) -> Vec<String> {
        let mut missing = Vec::new();
        if self.landlock_abi == 0 {
            missing.push(
                "no Landlock in this kernel (Linux 5.13+ with landlock in `lsm=`): workers can \
                 read and write every file this user can"
                    .to_owned(),
            );
        } else {
            if self.landlock_abi < 4 && !sandbox.network {
                missing.push(format!(
                    "Landlock ABI {} has no TCP rules (ABI 4, Linux 6.7): the network is \
                     refused by the namespace and seccomp only",
                    self.landlock_abi
                ));
            }
            if self.landlock_abi < 6 {
                missing.push(format!(
                    "Landlock ABI {} cannot scope signals (ABI 6, Linux 6.12): a worker can \
                     signal this user's other processes, except the parent and kill(-1), \
                     which seccomp refuses",
                    self.landlock_abi
                ));
            }
        }
        if !self.seccomp {
            missing.push(
                "no seccomp: ptrace, process_vm_readv/writev and non-unix sockets are not \
                 refused"
                    .to_owned(),
            );
        }
        if !sandbox.network && !self.net_namespace && !self.user_namespace {
            missing.push(
                "no network namespace (not root, and unprivileged user namespaces are off): \
                 the network is refused by seccomp (sockets other than AF_UNIX) only"
                    .to_owned(),
            );
        }
        if sandbox.write_xor_execute && !self.write_xor_execute {
            missing.push(
                "no W^X (PR_SET_MDWE, Linux 6.3+): a worker can make writable memory \
                 executable and run code it wrote"
                    .to_owned(),
            );
        }
        if sandbox.tasks.is_some() && self.pids_cgroup.is_none() {
            missing.push(if self.root {
                "no pids cgroup can be made and root is not bound by RLIMIT_NPROC: the task \
                 limit is not enforced (a fork bomb runs until the request's timeout)"
                    .to_owned()
            } else {
                "no pids cgroup can be made: the task limit is RLIMIT_NPROC, per worker only \
                 inside a user namespace (Linux 5.14+), else shared by all of this user's \
                 processes"
                    .to_owned()
            });
        }
        if self.containment == Containment::Subreaper {
            missing.push(
                "no cgroup can be made: what a worker starts is held through its process tree \
                 (a child subreaper), which a worker that dies by itself (a crash) hands to \
                 init: a daemon it left outside its process group then outlives it"
                    .to_owned(),
            );
        }
        missing
    }
}

/// The Landlock ABI version, 0 without Landlock.
fn landlock_abi() -> i32 {
    // SAFETY: `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)` only returns
    // the ABI version (or fails with ENOSYS/EOPNOTSUPP); it creates nothing.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    i32::try_from(version).unwrap_or(0).max(0)
}

/// Whether this kernel has seccomp (`PR_GET_SECCOMP` answers rather than failing EINVAL).
fn seccomp_available() -> bool {
    // SAFETY: `PR_GET_SECCOMP` only reads this thread's seccomp mode.
    unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 }
}

/// Whether this kernel has `PR_SET_MDWE` (`PR_GET_MDWE` answers rather than failing EINVAL).
fn mdwe_available() -> bool {
    // SAFETY: `PR_GET_MDWE` only reads this process's memory-deny-write-execute flags.
    unsafe { libc::prctl(libc::PR_GET_MDWE, 0, 0, 0, 0) >= 0 }
}

/// Whether a forked child can `unshare(flags)`. The child makes two system calls only
/// (`unshare`, `_exit`), which is all a child of a multi-threaded process may do.
fn unshare_works(flags: libc::c_int) -> bool {
    // SAFETY: the child runs only async-signal-safe system calls and exits with `_exit`.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return false;
    }
    if pid == 0 {
        // SAFETY: as above; `_exit` never returns.
        unsafe {
            let ok = libc::unshare(flags) == 0;
            libc::_exit(if ok { 0 } else { 1 });
        }
    }
    let mut status = 0;
    loop {
        // SAFETY: waits for our own child, `status` is a live local.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        if r < 0 && std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return false;
        }
    }
    libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}
