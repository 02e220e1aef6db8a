//! Ctrl-C (SIGINT) and SIGTERM: the first stops the run cleanly — no new choice starts, the
//! pool is shut down (busy workers are killed and reaped), and the results so far are written —
//! a later one exits at once. A second signal within [`SAME_INTERRUPT`] of the first is the same
//! interrupt: coreutils' `timeout -s INT` signals tunebox and then its process group, and a
//! Ctrl-C in a terminal reaches tunebox directly and through a wrapper script.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tunebox_tune::Stop;

/// The exit status of a run stopped by a signal (128 + SIGINT), as shells report it.
pub(crate) const EXIT_INTERRUPTED: u8 = 130;

/// Signals this soon after the first are taken as the same interrupt, and ignored.
const SAME_INTERRUPT: Duration = Duration::from_secs(1);

/// The run's stop flag, and when the first signal arrived.
#[derive(Debug, Default)]
struct Signals {
    stop: Arc<Stop>,
    /// When the first signal arrived.
    first: OnceLock<Instant>,
}

impl Signals {
    /// Records a signal arriving at `now`: `None` for the first, `Some(false)` for one within
    /// [`SAME_INTERRUPT`] of it (the same interrupt, ignored), `Some(true)` for a later one
    /// (exit at once).
    fn second_signal(&self, now: Instant) -> Option<bool> {
        match self.first.get() {
            Some(first) => Some(now.saturating_duration_since(*first) >= SAME_INTERRUPT),
            None => {
                // Signals are handled one at a time, on the handler's thread.
                let _ = self.first.set(now);
                None
            }
        }
    }

    fn signal(&self) {
        match self.second_signal(Instant::now()) {
            Some(true) => {
                eprintln!("\ntunebox: interrupted again; exiting now");
                std::process::exit(i32::from(EXIT_INTERRUPTED));
            }
            Some(false) => return,
            None => {}
        }
        eprintln!(
            "\ntunebox: interrupted; stopping the workers and writing the results so far \
             (again to exit at once)"
        );
        self.stop.request();
    }
}

/// The process's stop flag, with the signal handler installed on first use. Without a handler
/// (another part of the process installed one) the flag is never raised and the signals keep
/// their default action.
pub(crate) fn stop() -> Arc<Stop> {
    static STOP: OnceLock<Arc<Stop>> = OnceLock::new();
    STOP.get_or_init(|| {
        let signals = Signals::default();
        let stop = Arc::clone(&signals.stop);
        if let Err(e) = ctrlc::set_handler(move || signals.signal()) {
            log::warn!("cannot handle Ctrl-C ({e}); an interrupted run loses its table");
        }
        stop
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_signal_at_once_is_the_same_interrupt() {
        let stop = Signals::default();
        let t0 = Instant::now();
        assert_eq!(stop.second_signal(t0), None);
        // `timeout -s INT`: the child, then its process group, microseconds apart.
        assert_eq!(
            stop.second_signal(t0 + Duration::from_micros(50)),
            Some(false)
        );
        assert_eq!(
            stop.second_signal(t0 + Duration::from_millis(900)),
            Some(false)
        );
        // Pressed again, later: exit now.
        assert_eq!(stop.second_signal(t0 + Duration::from_secs(2)), Some(true));
    }
}
