//! Where a measurement says how far it got, so that a parent that has to kill it at its
//! deadline can say where it was ([`Progress`]).
//!
//! A worker process installs one sink ([`install_progress_sink`]; it writes into the shared
//! [`StartedCell`](tunebox_protocol::StartedCell)); [`do_bench`](crate::do_bench) and the
//! backends report each phase and call ([`report_progress`]). Without a sink, reporting costs
//! one atomic load.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tunebox_protocol::{Phase, Progress};

/// What receives the progress of this process's measurements.
type Sink = Box<dyn Fn(&Progress) + Send + Sync>;

/// The process's sink, if one was installed.
static SINK: OnceLock<Sink> = OnceLock::new();

/// Sends every later [`report_progress`] of this process to `sink`. Only the first call installs one
/// (a process serves one parent); returns whether this one did.
pub fn install_progress_sink(sink: impl Fn(&Progress) + Send + Sync + 'static) -> bool {
    SINK.set(Box::new(sink)).is_ok()
}

/// Tells the sink (if any) that the request begun at `started` is in `phase`, with `done` of
/// `planned` calls of that phase returned (0 planned: unknown or one call), the last call
/// having taken `last_call` and the estimate `estimate`.
pub fn report_progress(
    started: Instant,
    phase: Phase,
    (done, planned): (u32, u32),
    last_call: Option<Duration>,
    estimate: Option<Duration>,
) {
    if let Some(sink) = SINK.get() {
        sink(&Progress {
            phase,
            done,
            planned,
            last_call,
            estimate,
            since_start: started.elapsed(),
        });
    }
}
