//! Killing a worker from another thread, safely.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::pids::has_exited;

/// Kills the current worker of a [`TuningProcess`](crate::TuningProcess) from any thread, for
/// example while another thread is blocked in its `get`.
///
/// The kill is reported exactly once, by the handle's request in progress or its next one: a
/// `get` waiting on the killed worker, or a `put` that had not sent its request yet, returns
/// `ProcessError::WorkerCrashed` instead of silently starting a new worker; the request after
/// that starts a new worker.
///
/// Cloneable and `Send`. It never signals a process that has been reaped: the owning handle
/// clears the pid under the same lock before reaping, so a reused pid is never hit.
#[derive(Debug, Clone, Default)]
pub struct KillSwitch {
    pid: Arc<Mutex<Option<u32>>>,
    killed: Arc<AtomicBool>,
}

impl KillSwitch {
    /// SIGKILLs the worker, its process group and everything it started (its process tree; its
    /// cgroups are emptied when its owner reaps it), if a worker is running. Returns whether
    /// there was one to kill.
    pub fn kill(&self) -> bool {
        let pid = self.pid.lock().unwrap_or_else(PoisonError::into_inner);
        self.killed.store(true, Ordering::Release);
        if let Some(pid) = *pid {
            crate::containment::end_worker(pid);
            true
        } else {
            false
        }
    }

    /// The pid of the running worker, if any: `None` once it has exited, even before its owner
    /// reaps it.
    pub fn pid(&self) -> Option<u32> {
        // Under the lock: the owner clears the pid under it before reaping, so the pid checked
        // is still our unreaped child.
        let pid = self.pid.lock().unwrap_or_else(PoisonError::into_inner);
        pid.filter(|&pid| !has_exited(pid))
    }

    /// Whether a kill is yet to be reported by the handle; clears it, so that no request fails
    /// for it. A scheduler calls this when the task a kill was aimed at finished anyway.
    pub fn take_killed(&self) -> bool {
        self.killed.swap(false, Ordering::AcqRel)
    }

    /// Whether a kill is yet to be reported by the handle (without clearing it).
    pub(crate) fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Acquire)
    }

    /// Records the running worker's pid (`None`: no worker, or about to be reaped).
    pub(crate) fn set(&self, pid: Option<u32>) {
        *self.pid.lock().unwrap_or_else(PoisonError::into_inner) = pid;
    }
}
