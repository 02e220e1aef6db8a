//! Process ids and groups of our children: signalling them, reaping them, their exit statuses,
//! and the deadlines of the waits on them.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};

/// `now + duration`, saturating far in the future instead of overflowing.
pub(crate) fn deadline_after(duration: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(duration)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

pub(crate) fn pid(raw: u32) -> Option<Pid> {
    i32::try_from(raw).ok().and_then(Pid::from_raw)
}

/// Whether our child `raw` has exited, without reaping it. The caller must make sure `raw` is
/// not reaped meanwhile (it owns the child, or holds the lock its owner clears before reaping).
pub(crate) fn has_exited(raw: u32) -> bool {
    pid(raw).is_some_and(|p| {
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        matches!(
            rustix::process::waitid(WaitId::Pid(p), options),
            Ok(Some(_))
        )
    })
}

/// The signal that stopped child `raw` (SIGSTOP, SIGTSTP, SIGTTIN, SIGTTOU), while it stays
/// stopped; `None` while it runs, after it exited, or when it is no child of this process. A
/// ptrace stop (a debugger) is not reported. Leaves the stop to be reported again (`NOWAIT`).
pub(crate) fn stop_signal(raw: u32) -> Option<i32> {
    let options = WaitIdOptions::STOPPED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    rustix::process::waitid(WaitId::Pid(pid(raw)?), options)
        .ok()
        .flatten()
        .and_then(|status| status.stopping_signal())
}

/// Sends `signal` to the process group led by `leader`.
pub(crate) fn signal_group(leader: u32, signal: Signal) {
    if let Some(pid) = pid(leader) {
        // ESRCH (the group is already empty) is the expected outcome after a clean exit.
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

/// Sends `signal` to the process `raw`.
pub(crate) fn signal_process(raw: u32, signal: Signal) {
    if let Some(pid) = pid(raw) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// `(exit_code, signal)` of an exit status.
pub(crate) fn exit_parts(status: Option<ExitStatus>) -> (Option<i32>, Option<i32>) {
    match status {
        Some(status) => (status.code(), status.signal()),
        None => (None, None),
    }
}
