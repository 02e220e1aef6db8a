//! Interrupting a run: a flag any thread may raise (a signal handler, a GUI's cancel button, a
//! service's deadline), which also shuts down the pools the run is measuring with, so that busy
//! workers are killed at once rather than at the end of their choice.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tunebox_pool::TuningProcessPool;

use crate::base::observer::Observer;

/// How long idle workers get to exit when the run is stopped.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(200);

/// A run's stop flag, and the pools to shut down when it is raised.
///
/// Raise it with [`Stop::request`] from any thread; the run then starts no new choice, kills
/// the choices being measured (their workers are shut down and reaped), and returns a
/// [`Report`](crate::Report) of what finished, with `info.interrupted` set and the rest listed
/// as not measured (`"interrupted"`). Nothing finished is lost: results are cached as they
/// finish.
#[derive(Debug, Default)]
pub struct Stop {
    stopped: AtomicBool,
    pools: Mutex<Vec<Arc<TuningProcessPool>>>,
}

impl Stop {
    /// A flag that is not raised.
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Whether the run was asked to stop.
    pub(crate) fn requested(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Whether the run should stop: requested here, or asked for by `observer`
    /// ([`Observer::should_stop`], which then raises this flag, as [`Stop::request`] does).
    pub(crate) fn poll(&self, observer: &dyn Observer) -> bool {
        if !self.requested() && observer.should_stop() {
            self.request();
        }
        self.requested()
    }

    /// Whether the run should start nothing more: [`Stop::poll`], or `deadline` (`--max-time`)
    /// has passed.
    pub(crate) fn reached(&self, observer: &dyn Observer, deadline: Option<Instant>) -> bool {
        self.poll(observer) || deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Why a choice was not started: `interrupted` when a stop was asked for, else `max_time`
    /// (the time budget ran out).
    pub(crate) fn reason(&self) -> &'static str {
        if self.requested() {
            "interrupted"
        } else {
            "max_time"
        }
    }

    /// Asks the run to stop: no new choice starts, and the pools measuring now are shut down
    /// (busy workers are killed and reaped, with a grace of 200 ms for idle ones). Idempotent;
    /// it never blocks on a worker for longer than that grace (per pool).
    pub fn request(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let pools = self.lock().clone();
        for pool in pools {
            pool.shutdown(SHUTDOWN_GRACE);
        }
    }

    /// Shuts `pool` down if a stop is requested while it is registered (and at once if one
    /// already was), in place of the pools registered before (the run has moved on from them).
    pub(crate) fn watch(&self, pool: Arc<TuningProcessPool>) {
        self.lock().clear();
        self.watch_beside(pool);
    }

    /// As [`Stop::watch`], keeping the pools registered before: a pool that measures beside
    /// them.
    pub(crate) fn watch_beside(&self, pool: Arc<TuningProcessPool>) {
        self.lock().push(Arc::clone(&pool));
        if self.requested() {
            pool.shutdown(SHUTDOWN_GRACE);
        }
    }

    /// Stops watching the pools.
    pub(crate) fn unwatch(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Arc<TuningProcessPool>>> {
        self.pools.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_seen_and_idempotent() {
        let stop = Stop::new();
        assert!(!stop.requested());
        stop.request();
        stop.request();
        assert!(stop.requested());
        stop.unwatch();
    }

    /// Asks to stop once it has been polled `after` times.
    struct StopAfter(std::sync::atomic::AtomicUsize);

    impl Observer for StopAfter {
        fn on_event(&self, _event: crate::Event<'_>) {}

        fn should_stop(&self) -> bool {
            self.0.fetch_sub(1, Ordering::SeqCst) <= 1
        }
    }

    #[test]
    fn an_observer_that_asks_to_stop_raises_the_flag() {
        let stop = Stop::new();
        assert!(!stop.poll(&()));
        let observer = StopAfter(std::sync::atomic::AtomicUsize::new(2));
        assert!(!stop.poll(&observer));
        assert!(!stop.requested());
        assert!(stop.poll(&observer));
        assert!(stop.requested());
        // Raised for good: the observer is not asked again.
        assert!(stop.poll(&()));
    }
}
