//! The child born in a copy of this process: `clone3` straight into its cgroup where the
//! kernel allows it, else `fork`. For a child whose steps change its memory map
//! (`Launch::may_share_memory`), and on machines where a birth in shared memory cannot
//! keep `CLONE_INTO_CGROUP`.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// `CLONE_INTO_CGROUP` (`linux/sched.h`), not in every libc release.
pub(super) const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Set once `clone3` into a cgroup has been refused for good (no `clone3`, no
/// `CLONE_INTO_CGROUP`): later spawns fork at once.
pub(super) static CLONE3_REFUSED: AtomicBool = AtomicBool::new(false);

/// The kernel's `struct clone_args` (`linux/sched.h`), its size as of Linux 5.7.
#[repr(C)]
#[derive(Default)]
pub(super) struct CloneArgs {
    pub(super) flags: u64,
    pub(super) pidfd: u64,
    pub(super) child_tid: u64,
    pub(super) parent_tid: u64,
    pub(super) exit_signal: u64,
    pub(super) stack: u64,
    pub(super) stack_size: u64,
    pub(super) tls: u64,
    pub(super) set_tid: u64,
    pub(super) set_tid_size: u64,
    pub(super) cgroup: u64,
}

/// Which side of the birth this is, and whether the child was born in its cgroup.
pub(super) enum Birth {
    Child { born: bool },
    Parent { pid: u32, born: bool },
}

/// Makes the child: `clone3` into `cgroup` while the kernel allows it, else `fork`.
pub(super) fn birth(cgroup: Option<&OwnedFd>) -> io::Result<Birth> {
    if let Some(cgroup) = cgroup.filter(|_| !CLONE3_REFUSED.load(Ordering::Relaxed)) {
        let mut args = CloneArgs {
            flags: CLONE_INTO_CGROUP,
            exit_signal: libc::SIGCHLD as u64,
            cgroup: cgroup.as_raw_fd() as u64,
            ..CloneArgs::default()
        };
        // SAFETY: `clone3` without `CLONE_VM` is `fork` with arguments: the child gets a copy of
        // this thread on a copy of its stack and returns here with 0.
        let pid = unsafe {
            libc::syscall(
                libc::SYS_clone3,
                &mut args as *mut CloneArgs,
                std::mem::size_of::<CloneArgs>(),
            )
        };
        match pid {
            0 => return Ok(Birth::Child { born: true }),
            pid if pid > 0 => {
                return Ok(Birth::Parent {
                    pid: pid as u32,
                    born: true,
                });
            }
            _ => note_clone3_refusal(&io::Error::last_os_error()),
        }
    }
    // SAFETY: `fork` in a multi-threaded process: the child only makes system calls
    // (`child::in_child`) before `execve`.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Birth::Child { born: false }),
        pid => Ok(Birth::Parent {
            pid: pid as u32,
            born: false,
        }),
    }
}

/// Remembers a refusal of `clone3` into a cgroup: no `clone3`, no `CLONE_INTO_CGROUP` or an
/// older `clone_args` for good; anything else (a cgroup that takes no process) this once, and
/// the child's own join names it.
pub(super) fn note_clone3_refusal(error: &io::Error) {
    if matches!(
        error.raw_os_error(),
        Some(libc::ENOSYS | libc::EINVAL | libc::E2BIG | libc::EPERM)
    ) {
        CLONE3_REFUSED.store(true, Ordering::Relaxed);
    }
    log::debug!("clone3 into the worker's cgroup refused ({error}); the child joins it");
}
