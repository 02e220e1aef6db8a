//! Letting go of a window's large outputs off the engine's path.
//!
//! A verified window's outputs come back as shared-memory regions, two or more per output (the
//! first call's, the call on fresh inputs', any checked reps'). Dropping the last handle on a
//! region unmaps it and frees its pages: ~25 ms per 100 MiB on a 2-vCPU guest, measured
//! between a window's reply and the next request (docs/performance.md, "Issue 33, fifth
//! session"). On the thread that judged the window that time lies between one window and the
//! next; [`release`] hands large results to a thread of its own instead.

use std::sync::OnceLock;
use std::sync::mpsc::{self, Sender};

use tunebox_protocol::{BenchmarkResult, TensorData};

/// Results whose returned tensors hold fewer bytes than this are dropped at once: unmapping
/// them costs less than a look at the queue.
const BACKGROUND_MIN_BYTES: usize = 8 << 20;

/// What the releasing thread drops.
type Parcel = Box<dyn Send>;

/// Drops `result`, on the releasing thread when its returned tensors are large (at least
/// [`BACKGROUND_MIN_BYTES`]), else here.
pub(crate) fn release(result: BenchmarkResult) {
    let bytes = returned_bytes(&result);
    release_sized(result, bytes);
}

/// Drops `value`, which holds `bytes` of shared memory, on the releasing thread when that is at
/// least [`BACKGROUND_MIN_BYTES`]; here when it is less, or when the thread cannot be started.
fn release_sized<T: Send + 'static>(value: T, bytes: usize) {
    if bytes < BACKGROUND_MIN_BYTES {
        return;
    }
    if let Some(sender) = releaser() {
        // A send fails only when the thread has gone; the value then drops here.
        let _ = sender.send(Box::new(value));
    }
}

/// Bytes of every tensor `result` returned: its outputs, those after the reps, on fresh inputs
/// and of its checked reps.
fn returned_bytes(result: &BenchmarkResult) -> usize {
    let sum = |tensors: &[TensorData]| tensors.iter().map(|t| t.bytes.len()).sum::<usize>();
    sum(&result.outputs)
        + sum(&result.outputs_after_reps)
        + sum(&result.integrity.fresh_outputs)
        + result
            .integrity
            .checked_reps
            .iter()
            .map(|rep| sum(&rep.outputs))
            .sum::<usize>()
}

/// The queue of the releasing thread, started at the first large result; `None` when it could
/// not be started, or in a process forked from the one that started it (a fork has no copy of
/// the thread: what it queued would never be dropped).
fn releaser() -> Option<&'static Sender<Parcel>> {
    static RELEASER: OnceLock<Option<(u32, Sender<Parcel>)>> = OnceLock::new();
    let (started_in, sender) = RELEASER
        .get_or_init(|| {
            let (sender, parcels) = mpsc::channel::<Parcel>();
            std::thread::Builder::new()
                .name("tunebox-release".into())
                .spawn(move || parcels.into_iter().for_each(drop))
                .map_err(|e| log::debug!("tune: no releasing thread ({e}); results drop in place"))
                .ok()
                .map(|_| (std::process::id(), sender))
        })
        .as_ref()?;
    (*started_in == std::process::id()).then_some(sender)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tunebox_protocol::{Bytes, DType, TimingStats};

    /// Says, when dropped, which thread dropped it.
    struct Witness(Sender<Option<String>>);

    impl Drop for Witness {
        fn drop(&mut self) {
            let name = std::thread::current().name().map(str::to_owned);
            let _ = self.0.send(name);
        }
    }

    /// A large value is dropped by the releasing thread, a small one in place by the caller.
    #[test]
    fn large_values_drop_on_the_releasing_thread_small_ones_in_place() {
        let (sender, dropped_by) = mpsc::channel();
        release_sized(Witness(sender.clone()), BACKGROUND_MIN_BYTES);
        let large = dropped_by.recv_timeout(std::time::Duration::from_secs(60));
        assert_eq!(large.unwrap().as_deref(), Some("tunebox-release"));
        release_sized(Witness(sender), BACKGROUND_MIN_BYTES - 1);
        let small = dropped_by.recv_timeout(std::time::Duration::from_secs(60));
        assert_eq!(
            small.unwrap(),
            std::thread::current().name().map(str::to_owned)
        );
    }

    /// A process forked after the releasing thread started has no such thread: it drops in
    /// place rather than queue what nothing would drop.
    #[test]
    fn a_forked_process_drops_in_place() {
        let (sender, dropped_by) = mpsc::channel();
        release_sized(Witness(sender), BACKGROUND_MIN_BYTES);
        assert!(
            dropped_by
                .recv_timeout(std::time::Duration::from_secs(60))
                .is_ok()
        );
        assert!(releaser().is_some(), "started here");
        // SAFETY: the child only reads the initialized cell and its own pid, then `_exit`s
        // (no allocation, no lock another thread could hold).
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let code = if releaser().is_none() { 0 } else { 1 };
            // SAFETY: ends the forked child at once, running nothing of the parent's.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked, into a valid status word.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "the forked child found the parent's releasing thread (status {status})"
        );
    }

    /// A result's returned bytes count every tensor it returned.
    #[test]
    fn returned_bytes_count_outputs_fresh_outputs_and_checked_reps() {
        let tensor = |n: usize| {
            TensorData::new(
                "y",
                DType::U8,
                vec![n as u64],
                Bytes::from_vec(vec![1; n]).unwrap(),
            )
        };
        let mut result = BenchmarkResult::new(TimingStats::unmeasured());
        result.outputs = vec![tensor(100)];
        result.outputs_after_reps = vec![tensor(10)];
        result.integrity.fresh_outputs = vec![tensor(1)];
        result.integrity.checked_reps = vec![
            tunebox_protocol::CheckedRep::new(1, vec![tensor(1000)]),
            tunebox_protocol::CheckedRep::new(2, vec![tensor(10_000)]),
        ];
        assert_eq!(returned_bytes(&result), 11_111);
    }
}
