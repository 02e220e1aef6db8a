//! The Landlock ruleset of a sandboxed worker, created before `fork` (its paths opened, the
//! ruleset made), enforced in the child with one `landlock_restrict_self` call.

use std::os::fd::OwnedFd;
use std::path::PathBuf;

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, Ruleset, RulesetAttr, RulesetCreatedAttr, Scope,
    path_beneath_rules,
};

/// The newest Landlock ABI whose rights tunebox handles. ABI 9's `ResolveUnix` (connecting to a
/// pathname unix socket) is left out: the worker must reach its parent's bootstrap socket.
const ABI_HANDLED: ABI = ABI::V8;

/// Where a worker may go.
#[derive(Debug, Default)]
pub(crate) struct Paths {
    /// Read and execute.
    pub(crate) read: Vec<PathBuf>,
    /// Read and execute files whose names are known; no directory beneath may be listed.
    pub(crate) read_by_name: Vec<PathBuf>,
    /// Read, write, create, remove.
    pub(crate) write: Vec<PathBuf>,
    /// Device files: read, write, ioctl.
    pub(crate) devices: Vec<PathBuf>,
}

/// Creates the ruleset (best effort: rights this kernel lacks are dropped, and
/// `SandboxSupport::missing` says so); `None` without Landlock.
pub(crate) fn create(paths: &Paths, network: bool) -> Result<Option<OwnedFd>, String> {
    let e = |e: landlock::RulesetError| format!("landlock: {e}");
    let mut ruleset = Ruleset::default()
        .handle_access(AccessFs::from_all(ABI_HANDLED))
        .map_err(e)?
        .scope(Scope::from_all(ABI_HANDLED))
        .map_err(e)?;
    if !network {
        ruleset = ruleset
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(e)?;
    }
    let read = AccessFs::from_read(ABI_HANDLED);
    let device: BitFlags<AccessFs> =
        AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev;
    let created = ruleset
        .create()
        .map_err(e)?
        .add_rules(path_beneath_rules(&paths.read, read))
        .map_err(e)?
        .add_rules(path_beneath_rules(
            &paths.read_by_name,
            AccessFs::ReadFile | AccessFs::Execute,
        ))
        .map_err(e)?
        .add_rules(path_beneath_rules(
            &paths.write,
            AccessFs::from_all(ABI_HANDLED),
        ))
        .map_err(e)?
        .add_rules(path_beneath_rules(&paths.devices, device))
        .map_err(e)?;
    Ok(Option::<OwnedFd>::from(created))
}

/// Enforces the ruleset `fd` on the calling thread (and what it execs). Async-signal-safe: one
/// system call. `no_new_privs` must be set already.
pub(crate) fn enforce(fd: &OwnedFd) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: `landlock_restrict_self(fd, 0)` takes a ruleset descriptor we own and no pointer.
    let r = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0u32) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
