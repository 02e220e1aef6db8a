//! Large outputs read out of the worker's memory instead of sent as new shared-memory regions
//! (the protocol's `held` outputs, [`tunebox_protocol::Request::hold_outputs`]).
//!
//! Every benchmark request asks its worker to hold its large outputs while reads work. The
//! first read this process may not make (Yama's `ptrace_scope` 2 or 3, a seccomp filter, a
//! worker of another user) turns holding off for the rest of the process, and the request is
//! measured again with its outputs sent as regions: one window lost, once.

use std::sync::atomic::{AtomicBool, Ordering};

use tunebox_protocol::ResponseBody;

/// The environment variable that turns held outputs off (`off`): every large output then
/// travels as a shared-memory region, as before protocol 13.
pub const HELD_OUTPUTS_ENV: &str = "TUNEBOX_HELD_OUTPUTS";

/// Set once a read failed: no later request of this process holds its outputs.
static REFUSED: AtomicBool = AtomicBool::new(false);

/// Whether benchmark requests ask their worker to hold their large outputs.
pub(crate) fn enabled() -> bool {
    !REFUSED.load(Ordering::Relaxed)
        && std::env::var_os(HELD_OUTPUTS_ENV).is_none_or(|v| v != "off")
}

/// Reads the outputs a benchmark reply holds out of the worker `pid` and counts the CPU time
/// this took as the worker's (`Integrity::worker_cpu_ms`: the window's own work, not
/// interference). A failed read turns holding off for this process ([`enabled`]).
///
/// # Errors
///
/// The read failed; the caller measures the request again without held outputs.
pub(crate) fn read(body: &mut ResponseBody, pid: u32) -> std::io::Result<()> {
    let ResponseBody::Benchmark(Ok(result)) = body else {
        return Ok(());
    };
    match result.read_held(pid) {
        Ok(ms) => {
            if let Some(cpu) = result.integrity.worker_cpu_ms.as_mut() {
                *cpu += ms;
            }
            Ok(())
        }
        Err(e) => {
            REFUSED.store(true, Ordering::Relaxed);
            log::warn!(
                "could not read the outputs worker {pid} held ({e}); large outputs travel as \
                 shared-memory regions from now on (set {HELD_OUTPUTS_ENV}=off to skip the try)"
            );
            Err(e)
        }
    }
}
