//! A live worker process: its channels, its process group, and how it ends.

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ipc_channel::ipc::{IpcReceiver, IpcSender};
use ipc_channel::{IpcError, TryRecvError};
use rustix::process::{Pid, Signal};
use tunebox_protocol::{Request, Response, ResponseBody};

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
    /// Benchmark requests sent to this process (the initializer excluded).
    pub(crate) uses: u64,
}

/// Why a send did not complete.
pub(crate) enum SendFailure {
    /// The worker's end is closed: it died.
    Closed,
    /// The worker did not take the message in time; its process group was SIGKILLed.
    TimedOut,
}

/// Why no awaited response arrived.
pub(crate) enum ReceiveFailure {
    /// The deadline passed.
    TimedOut,
    /// The worker's end is closed: it died.
    Closed,
    /// A message could not be decoded.
    Garbled(String),
}

impl Worker {
    /// Sends `request`. With `guard`, the send runs on a helper thread and the worker's process
    /// group is SIGKILLed if it has not taken the message within `guard`, which makes the send
    /// fail: a worker that stopped reading can never block the caller. Unguarded sends are for
    /// messages that fit in the socket buffer of a worker with nothing else queued.
    pub(crate) fn send(
        &self,
        request: Request,
        guard: Option<Duration>,
    ) -> Result<(), SendFailure> {
        let Some(limit) = guard else {
            return self.requests.send(request).map_err(|_| SendFailure::Closed);
        };
        let requests = &self.requests;
        std::thread::scope(|scope| {
            let (done, finished) = mpsc::channel();
            let sender = std::thread::Builder::new()
                .name("tunebox-send".into())
                .spawn_scoped(scope, move || {
                    let _ = done.send(requests.send(request).is_ok());
                });
            if sender.is_err() {
                // Without a helper thread the send could block forever: report the worker as
                // unusable (the caller kills and replaces it).
                return Err(SendFailure::Closed);
            }
            match finished.recv_timeout(limit) {
                Ok(true) => Ok(()),
                Ok(false) | Err(mpsc::RecvTimeoutError::Disconnected) => Err(SendFailure::Closed),
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    // Killing the worker closes its socket, which fails the blocked send; the
                    // scope then joins the sender thread.
                    signal_group(self.pid, Signal::KILL);
                    let _ = rustix::process::kill_process(pid(self.pid), Signal::KILL);
                    Err(SendFailure::TimedOut)
                }
            }
        })
    }

    /// Waits until `deadline` for the response to request `id`, discarding responses to other
    /// (earlier, abandoned) requests.
    pub(crate) fn receive(
        &self,
        id: u64,
        deadline: Instant,
    ) -> Result<ResponseBody, ReceiveFailure> {
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match self.responses.try_recv_timeout(remaining) {
                Ok(response) if response.id == id => return Ok(response.body),
                Ok(stale) => log::debug!("pid {}: discarding stale reply {}", self.pid, stale.id),
                // ipc-channel polls with millisecond granularity: check the clock, not the error.
                Err(TryRecvError::Empty) if Instant::now() < deadline => {}
                Err(TryRecvError::Empty) => return Err(ReceiveFailure::TimedOut),
                Err(TryRecvError::IpcError(IpcError::Disconnected)) => {
                    return Err(ReceiveFailure::Closed);
                }
                Err(TryRecvError::IpcError(e)) => {
                    return Err(ReceiveFailure::Garbled(e.to_string()));
                }
            }
        }
    }

    /// SIGKILLs the worker's whole process group and reaps the worker. Returns its exit status.
    pub(crate) fn kill(&mut self) -> Option<ExitStatus> {
        kill_group(&mut self.child)
    }

    /// Waits up to `timeout` for the worker to exit by itself; kills it after that. Either way
    /// the process group is SIGKILLed (helpers the worker started go with it) and the worker is
    /// reaped.
    pub(crate) fn wait_or_kill(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
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
    // Also signal the leader directly: if it left its group (setsid), the group kill missed it.
    let _ = child.kill();
    child.wait().ok()
}

fn pid(raw: u32) -> Pid {
    i32::try_from(raw)
        .ok()
        .and_then(Pid::from_raw)
        .expect("a child's pid is a positive i32")
}

fn signal_group(leader: u32, signal: Signal) {
    // ESRCH (the group is already empty) is the expected outcome after a clean exit.
    let _ = rustix::process::kill_process_group(pid(leader), signal);
}

/// `(exit_code, signal)` of an exit status.
pub(crate) fn exit_parts(status: Option<ExitStatus>) -> (Option<i32>, Option<i32>) {
    match status {
        Some(status) => (status.code(), status.signal()),
        None => (None, None),
    }
}
