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
use std::time::{Duration, Instant};

/// A wake-up this much after the deadline it slept until says the watchdog itself was stopped
/// or starved; the timers due then are moved [`REPRIEVE`] later instead of killing.
const LATE: Duration = Duration::from_millis(500);

/// How long past a late wake-up the timers due then get ([`LATE`]): the waits they guard run
/// again and end their own timers well within it.
const REPRIEVE: Duration = Duration::from_secs(1);

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
    /// The timer's arming number (its key's second half: a late watchdog moves its deadline).
    id: Option<u64>,
    fired: Arc<AtomicBool>,
}

impl Armed {
    /// Whether the watchdog killed the worker.
    pub(crate) fn fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }

    /// The flag [`Armed::fired`] reads, for the next timer of the same wait ([`arm_with`]).
    pub(crate) fn flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.fired)
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        if let (Some(id), Some(watchdog)) = (self.id, WATCHDOG.get()) {
            // Under the lock: once this returns, the watchdog can no longer signal `pid`, so the
            // caller may reap it (and the pid may be reused) safely. A handful of timers are
            // armed at a time: a scan finds this one wherever its deadline moved.
            watchdog.lock().armed.retain(|key, _| key.1 != id);
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
    arm_with(pid, deadline, Arc::new(AtomicBool::new(false)))
}

/// As [`arm`], with the flag [`Armed::fired`] reads: timers armed one after another for the same
/// wait share one, so that a kill by the one being replaced is not lost.
pub(crate) fn arm_with(pid: u32, deadline: Instant, fired: Arc<AtomicBool>) -> Armed {
    let Some(watchdog) = watchdog() else {
        return Armed { id: None, fired };
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
        id: Some(key.1),
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

impl Timers {
    /// Moves every timer due by `until` to `until` (keeping their order).
    fn reprieve(&mut self, until: Instant) {
        let due: Vec<(Instant, u64)> = self
            .armed
            .range(..(until, 0))
            .map(|(key, _)| *key)
            .collect();
        for key in due {
            if let Some(target) = self.armed.remove(&key) {
                self.armed.insert((until, key.1), target);
            }
        }
    }
}

impl Watchdog {
    fn lock(&self) -> MutexGuard<'_, Timers> {
        self.timers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn run(&self) {
        let mut timers = self.lock();
        loop {
            let now = Instant::now();
            if timers
                .sleeping_until
                .is_some_and(|until| now.saturating_duration_since(until) > LATE)
            {
                // This thread was stopped or starved itself (Ctrl-Z, a debugger, a machine
                // swapping): so were, most likely, the threads whose waits these timers guard,
                // which have not had the time to end them. They get it now.
                timers.reprieve(now + REPRIEVE);
            }
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

    #[test]
    fn a_reprieve_moves_the_due_timers_and_keeps_the_later_ones() {
        let now = Instant::now();
        let mut timers = Timers::default();
        let target = || Target {
            pid: 1,
            fired: Arc::new(AtomicBool::new(false)),
        };
        for (i, after_ms) in [(1u64, 0u64), (2, 300), (3, 5000)] {
            timers
                .armed
                .insert((now + Duration::from_millis(after_ms), i), target());
        }
        let until = now + Duration::from_secs(1);
        timers.reprieve(until);
        let keys: Vec<(Instant, u64)> = timers.armed.keys().copied().collect();
        assert_eq!(
            keys,
            vec![(until, 1), (until, 2), (now + Duration::from_secs(5), 3)],
            "the two due by `until` moved to it in their order, the third kept"
        );
    }

    #[test]
    fn a_dropped_guard_disarms_its_timer_wherever_its_deadline_moved() {
        let mut sleeper = Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = sleeper.id();
        let armed = arm(pid, Instant::now() + Duration::from_secs(60));
        let watchdog = WATCHDOG.get().expect("armed above");
        {
            // As a reprieve moves it (only this timer: other tests' share the watchdog).
            let mut timers = watchdog.lock();
            let key = *timers
                .armed
                .iter()
                .find(|(_, t)| t.pid == pid)
                .expect("armed")
                .0;
            let target = timers.armed.remove(&key).expect("there");
            timers
                .armed
                .insert((key.0 + Duration::from_secs(60), key.1), target);
        }
        drop(armed);
        assert!(
            !watchdog.lock().armed.values().any(|t| t.pid == pid),
            "the moved timer is gone with its guard"
        );
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
    }

    use std::os::unix::process::CommandExt;
}
