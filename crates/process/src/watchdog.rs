//! A process-wide watchdog that SIGKILLs a worker whose parent-side wait overran its deadline.
//!
//! Most waits enforce their own deadline (`try_recv_timeout`). Two cannot: a send blocked on a
//! worker that stopped reading, and a receive blocked in `recvmsg` because the worker wrote a
//! partial or garbled message into its channel (ipc-channel reads the rest of a message without a
//! timeout). For those, the caller arms the watchdog; if the wait is still going at the deadline,
//! the watchdog kills the worker's process group, which closes its end of the socket and fails
//! the blocked call.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Instant;

/// The armed timers, by deadline then arming order.
#[derive(Default)]
struct Timers {
    armed: BTreeMap<(Instant, u64), Target>,
    next: u64,
    /// The deadline the watchdog thread sleeps until (`None`: it sleeps until woken).
    sleeping_until: Option<Instant>,
}

struct Target {
    pid: u32,
    fired: Arc<AtomicBool>,
}

struct Watchdog {
    timers: Mutex<Timers>,
    wake: Condvar,
}

/// A pending kill; dropping it disarms the watchdog.
pub(crate) struct Armed {
    key: Option<(Instant, u64)>,
    fired: Arc<AtomicBool>,
}

impl Armed {
    /// Whether the watchdog killed the worker.
    pub(crate) fn fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        if let (Some(key), Some(watchdog)) = (self.key, WATCHDOG.get()) {
            // Under the lock: once this returns, the watchdog can no longer signal `pid`, so the
            // caller may reap it (and the pid may be reused) safely.
            watchdog.lock().armed.remove(&key);
        }
    }
}

static WATCHDOG: OnceLock<Watchdog> = OnceLock::new();

/// Kills the process group led by `pid` at `deadline`, unless the returned guard is dropped first.
///
/// The caller must not reap `pid` while the guard lives (dropping the guard first makes that
/// safe). If the watchdog thread cannot be started, the guard is inert: the wait it protects
/// still has its own timeout in all but the pathological cases above.
pub(crate) fn arm(pid: u32, deadline: Instant) -> Armed {
    let fired = Arc::new(AtomicBool::new(false));
    let Some(watchdog) = watchdog() else {
        return Armed { key: None, fired };
    };
    let mut timers = watchdog.lock();
    timers.next += 1;
    let key = (deadline, timers.next);
    timers.armed.insert(
        key,
        Target {
            pid,
            fired: fired.clone(),
        },
    );
    // Wake the thread only when this deadline is earlier than the one it sleeps until: with
    // deadlines that keep moving later (the usual case), arming costs no context switch.
    if timers.sleeping_until.is_none_or(|until| deadline < until) {
        watchdog.wake.notify_one();
    }
    Armed {
        key: Some(key),
        fired,
    }
}

fn watchdog() -> Option<&'static Watchdog> {
    if let Some(watchdog) = WATCHDOG.get() {
        return Some(watchdog);
    }
    let watchdog = WATCHDOG.get_or_init(|| Watchdog {
        timers: Mutex::new(Timers::default()),
        wake: Condvar::new(),
    });
    static STARTED: OnceLock<bool> = OnceLock::new();
    let started = *STARTED.get_or_init(|| {
        std::thread::Builder::new()
            .name("tunebox-watchdog".into())
            .spawn(move || watchdog.run())
            .map_err(|e| log::warn!("no watchdog thread: {e}"))
            .is_ok()
    });
    started.then_some(watchdog)
}

impl Watchdog {
    fn lock(&self) -> MutexGuard<'_, Timers> {
        self.timers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn run(&self) {
        let mut timers = self.lock();
        loop {
            let now = Instant::now();
            while let Some(entry) = timers.armed.first_entry() {
                if entry.key().0 > now {
                    break;
                }
                let target = entry.remove();
                target.fired.store(true, Ordering::Release);
                log::debug!("watchdog: killing worker {} at its deadline", target.pid);
                crate::containment::end_worker(target.pid);
            }
            let next = timers.armed.first_key_value().map(|(key, _)| key.0);
            timers.sleeping_until = next;
            timers = match next {
                Some(deadline) => {
                    self.wake
                        .wait_timeout(timers, deadline.saturating_duration_since(now))
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => self
                    .wake
                    .wait(timers)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use std::process::Command;
    use std::time::Duration;

    use super::*;

    #[test]
    fn fires_at_the_deadline_and_not_when_disarmed() {
        let mut sleeper = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let disarmed = arm(sleeper.id(), Instant::now() + Duration::from_millis(50));
        drop(disarmed);
        std::thread::sleep(Duration::from_millis(150));
        assert!(
            sleeper.try_wait().unwrap().is_none(),
            "a disarmed timer fired"
        );

        let start = Instant::now();
        let armed = arm(sleeper.id(), Instant::now() + Duration::from_millis(100));
        let status = sleeper.wait().unwrap();
        assert!(armed.fired());
        assert!(start.elapsed() >= Duration::from_millis(100));
        assert!(start.elapsed() < Duration::from_secs(5));
        assert!(!status.success());
    }

    use std::os::unix::process::CommandExt;
}
