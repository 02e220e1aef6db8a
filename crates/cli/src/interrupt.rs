//! Ctrl-C (SIGINT) and SIGTERM: the first stops the run cleanly — no new choice starts, the
//! pool is shut down (busy workers are killed and reaped), and the results so far are written —
//! the second exits at once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tunebox_pool::TuningProcessPool;

/// The exit status of a run stopped by a signal (128 + SIGINT), as shells report it.
pub(crate) const EXIT_INTERRUPTED: u8 = 130;

/// How long idle workers get to exit when the run is stopped.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(200);

/// The run's stop flag and the pool to shut down when it is raised.
#[derive(Debug, Default)]
pub(crate) struct Stop {
    stopped: AtomicBool,
    signals: AtomicUsize,
    pool: Mutex<Option<Arc<TuningProcessPool>>>,
}

impl Stop {
    /// Whether a signal asked the run to stop.
    pub(crate) fn requested(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Shuts `pool` down if a signal arrives while it is registered (and at once if one
    /// already has).
    pub(crate) fn watch(&self, pool: Arc<TuningProcessPool>) {
        *self.pool.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&pool));
        if self.requested() {
            pool.shutdown(SHUTDOWN_GRACE);
        }
    }

    /// Stops watching the pool.
    pub(crate) fn unwatch(&self) {
        self.pool.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    fn signal(&self) {
        if self.signals.fetch_add(1, Ordering::SeqCst) > 0 {
            eprintln!("\ntunebox: interrupted again; exiting now");
            std::process::exit(i32::from(EXIT_INTERRUPTED));
        }
        eprintln!(
            "\ntunebox: interrupted; stopping the workers and writing the results so far \
             (again to exit at once)"
        );
        self.stopped.store(true, Ordering::SeqCst);
        let pool = self.pool.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(pool) = pool {
            pool.shutdown(SHUTDOWN_GRACE);
        }
    }
}

/// The process's stop flag, with the signal handler installed on first use. Without a handler
/// (another part of the process installed one) the flag is never raised and the signals keep
/// their default action.
pub(crate) fn stop() -> Arc<Stop> {
    static STOP: OnceLock<Arc<Stop>> = OnceLock::new();
    STOP.get_or_init(|| {
        let stop = Arc::new(Stop::default());
        let handler = Arc::clone(&stop);
        if let Err(e) = ctrlc::set_handler(move || handler.signal()) {
            log::warn!("cannot handle Ctrl-C ({e}); an interrupted run loses its table");
        }
        stop
    })
    .clone()
}
