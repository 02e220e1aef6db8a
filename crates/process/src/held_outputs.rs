//! Large outputs read out of the worker's memory instead of sent as new shared-memory regions
//! (the protocol's `held` outputs, [`tunebox_protocol::Request::hold_outputs`]).
//!
//! Every benchmark request asks its worker to hold its large outputs while reads work. The
//! first read this process may not make (Yama's `ptrace_scope` 2 or 3, a seccomp filter, a
//! worker of another user) turns holding off for the rest of the process, and the request is
//! measured again with its outputs sent as regions: one window lost, once.

use std::sync::atomic::{AtomicBool, Ordering};

use tunebox_protocol::{ResponseBody, SpareBuffers};

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

/// Why the outputs a reply held could not be read.
#[derive(Debug)]
pub(crate) enum Unread {
    /// This process may not read the worker's memory (`EPERM`, `ENOSYS`): holding is now off
    /// for this process ([`enabled`]; the warning names the error); the request is measured
    /// again without it.
    Refused,
    /// The reply named memory the worker does not have, or more than this process can hold: a
    /// broken or lying worker, whose reply is garbled.
    Garbled(std::io::Error),
}

/// Reads the outputs a benchmark reply holds out of the worker `pid` (into buffers of `spare`
/// where it has them) and counts the CPU time this took as the worker's
/// (`Integrity::worker_cpu_ms`: the window's own work, not interference).
///
/// # Errors
///
/// [`Unread`]: the read was refused (holding is turned off) or the reply was garbled.
pub(crate) fn read(body: &mut ResponseBody, pid: u32, spare: &SpareBuffers) -> Result<(), Unread> {
    let ResponseBody::Benchmark(Ok(result)) = body else {
        return Ok(());
    };
    let before = thread_cpu_ms();
    match result.read_held(pid, spare) {
        Ok(()) => {
            if let Some(cpu) = result.integrity.worker_cpu_ms.as_mut() {
                *cpu += (thread_cpu_ms() - before).max(0.0);
            }
            Ok(())
        }
        Err(e) if refused(&e) => {
            REFUSED.store(true, Ordering::Relaxed);
            log::warn!(
                "may not read the outputs worker {pid} held ({e}); large outputs travel as \
                 shared-memory regions from now on (set {HELD_OUTPUTS_ENV}=off to skip the try)"
            );
            Err(Unread::Refused)
        }
        Err(e) => Err(Unread::Garbled(e)),
    }
}

/// The CPU time the calling thread has used, in ms.
fn thread_cpu_ms() -> f64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    now.tv_sec as f64 * 1e3 + now.tv_nsec as f64 / 1e6
}

/// Whether a failed read says this process may not read its workers' memory at all (rather
/// than that one reply named memory its worker does not have).
fn refused(error: &std::io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EPERM | libc::ENOSYS | libc::EACCES)
    )
}

#[cfg(test)]
mod tests {
    use tunebox_protocol::{BenchmarkResult, Bytes, DType, INLINE_LIMIT, TensorData, TimingStats};

    use super::*;

    /// A reply naming `len` held bytes at `address`: postcard writes held `Bytes` as its
    /// variant's index (2, after inline and shared) and the two numbers, as it writes this
    /// tuple.
    fn reply_holding(address: usize, len: usize) -> ResponseBody {
        let wire = postcard::to_allocvec(&(2u32, address as u64, len as u64)).unwrap();
        let held: Bytes = postcard::from_bytes(&wire).unwrap();
        assert!(held.is_held());
        let output = TensorData::new("c", DType::U8, vec![len as u64], held);
        let result =
            BenchmarkResult::new(TimingStats::from_samples(&[1.0], 0)).with_outputs(vec![output]);
        ResponseBody::Benchmark(Ok(result))
    }

    #[test]
    fn a_reply_naming_memory_the_worker_does_not_hold_is_garbled_and_leaves_holding_on() {
        // Memory this process maps but may not read: what a worker that lies about its outputs
        // (or unmapped them) names.
        let len = 2 * INLINE_LIMIT;
        // SAFETY: a fresh private mapping, unmapped below; nothing reads it.
        let unreadable = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(unreadable, libc::MAP_FAILED);
        let mut body = reply_holding(unreadable as usize, len);
        let error = read(&mut body, std::process::id(), &SpareBuffers::default()).unwrap_err();
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(unreadable, len) };
        assert!(matches!(error, Unread::Garbled(_)), "{error:?}");
        assert!(
            !REFUSED.load(Ordering::Relaxed),
            "one lying worker turns nothing off"
        );
    }

    #[test]
    fn only_a_permission_error_turns_holding_off() {
        for (errno, off) in [
            (libc::EPERM, true),
            (libc::ENOSYS, true),
            (libc::EFAULT, false),
            (libc::ESRCH, false),
        ] {
            assert_eq!(
                refused(&std::io::Error::from_raw_os_error(errno)),
                off,
                "errno {errno}"
            );
        }
    }
}
