//! Killing a worker from another thread, safely.

use std::sync::{Arc, Mutex, PoisonError};

use rustix::process::Signal;

use crate::worker::{signal_group, signal_process};

/// Kills the current worker of a [`TuningProcess`](crate::TuningProcess) from any thread, for
/// example while another thread is blocked in its `get`: that `get` then returns
/// `ProcessError::WorkerCrashed` (killed by SIGKILL) and the next request starts a new worker.
///
/// Cloneable and `Send`. It never signals a process that has been reaped: the owning handle
/// clears the pid under the same lock before reaping, so a reused pid is never hit.
#[derive(Debug, Clone, Default)]
pub struct KillSwitch {
    pid: Arc<Mutex<Option<u32>>>,
}

impl KillSwitch {
    /// SIGKILLs the worker's process group, if a worker is running. Returns whether there was
    /// one to kill.
    pub fn kill(&self) -> bool {
        let pid = self.pid.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(pid) = *pid {
            signal_group(pid, Signal::KILL);
            signal_process(pid, Signal::KILL);
            true
        } else {
            false
        }
    }

    /// The pid of the running worker, if any.
    pub fn pid(&self) -> Option<u32> {
        *self.pid.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records the running worker's pid (`None`: no worker, or about to be reaped).
    pub(crate) fn set(&self, pid: Option<u32>) {
        *self.pid.lock().unwrap_or_else(PoisonError::into_inner) = pid;
    }
}
