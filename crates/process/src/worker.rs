//! A live worker process: its channels, its process group, and how it ends.

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use ipc_channel::ipc::{IpcReceiver, IpcSender};
use rustix::process::{Pid, Signal};
use tunebox_protocol::{Request, Response};

use crate::capture::Tail;

/// How long to wait for a dead worker's stderr pipe to reach its end before quoting it.
const TAIL_GRACE: Duration = Duration::from_millis(100);

/// One running worker process.
pub(crate) struct Worker {
    pub(crate) child: Child,
    pub(crate) pid: u32,
    pub(crate) requests: IpcSender<Request>,
    pub(crate) responses: IpcReceiver<Response>,
    pub(crate) stderr: Option<Tail>,
    pub(crate) stdout: Option<Tail>,
    /// Benchmark requests sent to this process.
    pub(crate) uses: u64,
}

impl Worker {
    /// SIGKILLs the worker's whole process group and reaps the worker. Returns its exit status.
    pub(crate) fn kill(&mut self) -> Option<ExitStatus> {
        kill_group(&mut self.child)
    }

    /// Waits up to `timeout` for the worker to exit by itself; kills it after that.
    pub(crate) fn wait_or_kill(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    // The leader is gone; helpers it started in its group go with it.
                    signal_group(self.pid, Signal::KILL);
                    return Some(status);
                }
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_micros(500));
                }
                _ => return self.kill(),
            }
        }
    }

    /// The captured stderr tail, including what a dying worker wrote last.
    pub(crate) fn stderr_tail(&self) -> String {
        self.stderr
            .as_ref()
            .map(|t| t.text(TAIL_GRACE))
            .unwrap_or_default()
    }

    /// The captured stdout tail.
    pub(crate) fn stdout_tail(&self) -> String {
        self.stdout
            .as_ref()
            .map(|t| t.text(TAIL_GRACE))
            .unwrap_or_default()
    }
}

/// SIGKILLs the process group led by `child` and reaps `child`.
pub(crate) fn kill_group(child: &mut Child) -> Option<ExitStatus> {
    signal_group(child.id(), Signal::KILL);
    // Also signal the leader directly: if it already left its group (setsid), the group kill
    // missed it.
    let _ = child.kill();
    child.wait().ok()
}

fn signal_group(leader: u32, signal: Signal) {
    if let Some(pid) = i32::try_from(leader).ok().and_then(Pid::from_raw) {
        // ESRCH (the group is already empty) is the expected outcome after a clean exit.
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

/// `(exit_code, signal)` of an exit status.
pub(crate) fn exit_parts(status: Option<ExitStatus>) -> (Option<i32>, Option<i32>) {
    match status {
        Some(status) => (status.code(), status.signal()),
        None => (None, None),
    }
}
