//! A worker stopped by job control: a kernel that calls `raise(SIGSTOP)` (or is sent SIGTSTP,
//! or reads a terminal from the background: SIGTTIN) sits stopped until its timeout, 30-60 s
//! later, reported as a hang. The parent asks the kernel for the worker's stop while it waits
//! for the reply, and a worker still stopped [`STOPPED_GRACE`] after it was first seen so is
//! killed, its stop named; as a stop sent from outside (a person's `kill -STOP`, a scheduler
//! suspending the job) looks the same, the error is not kept by a results cache
//! (`ProcessError::killed_from_outside`). Ctrl-Z in the terminal stops the parent, not the
//! worker (it leads its own process group), and the parent does not look while stopped. The
//! kill switch freezes a worker with SIGSTOP before it kills it: that stop is the kill's
//! (`TuningProcess` reports the kill).

use std::time::{Duration, Instant};

use crate::pids::stop_signal;

/// How often a waiting receive asks whether the worker is stopped.
const STOP_CHECK: Duration = Duration::from_millis(100);

/// How long a worker may stay stopped before it is killed: a stop shorter than this (a
/// supervisor's pause) is forgotten.
pub(crate) const STOPPED_GRACE: Duration = Duration::from_secs(1);

/// Whether a worker stayed stopped, looked at every [`STOP_CHECK`] while a receive waits.
pub(crate) struct StopWatch {
    pid: u32,
    checked: Option<Instant>,
    /// When the worker was first seen stopped (since it last ran).
    stopped_since: Option<Instant>,
}

impl StopWatch {
    /// Watches worker `pid`, from the first look on.
    pub(crate) fn start(pid: u32) -> StopWatch {
        StopWatch {
            pid,
            checked: None,
            stopped_since: None,
        }
    }

    /// The signal that stopped the worker, once it has been stopped for [`STOPPED_GRACE`];
    /// asked at most every [`STOP_CHECK`].
    pub(crate) fn stopped_too_long(&mut self, now: Instant) -> Option<i32> {
        if self
            .checked
            .is_some_and(|c| now.duration_since(c) < STOP_CHECK)
        {
            return None;
        }
        self.checked = Some(now);
        self.judge(stop_signal(self.pid), now)
    }

    /// The stop seen at `now` (`signal`), judged against the first look that saw it.
    fn judge(&mut self, signal: Option<i32>, now: Instant) -> Option<i32> {
        let Some(signal) = signal else {
            self.stopped_since = None;
            return None;
        };
        let since = *self.stopped_since.get_or_insert(now);
        (now.duration_since(since) >= STOPPED_GRACE).then_some(signal)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_that_lasts_its_grace_is_reported_and_one_that_ends_is_forgotten() {
        let mut watch = StopWatch::start(0);
        let t0 = Instant::now();
        assert_eq!(watch.judge(Some(19), t0), None, "just stopped");
        assert_eq!(watch.judge(Some(19), t0 + STOPPED_GRACE / 2), None);
        assert_eq!(watch.judge(None, t0 + STOPPED_GRACE), None, "continued");
        assert_eq!(
            watch.judge(Some(19), t0 + STOPPED_GRACE * 2),
            None,
            "a new stop"
        );
        assert_eq!(watch.judge(Some(19), t0 + STOPPED_GRACE * 3), Some(19));
    }

    #[test]
    fn a_stopped_child_is_seen_with_its_signal_and_a_running_one_is_not() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        assert_eq!(stop_signal(pid), None);
        crate::pids::signal_process(pid, rustix::process::Signal::STOP);
        let deadline = Instant::now() + Duration::from_secs(10);
        while stop_signal(pid).is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(stop_signal(pid), Some(libc::SIGSTOP));
        crate::pids::signal_process(pid, rustix::process::Signal::CONT);
        let deadline = Instant::now() + Duration::from_secs(10);
        while stop_signal(pid).is_some() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(stop_signal(pid), None, "continued");
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
