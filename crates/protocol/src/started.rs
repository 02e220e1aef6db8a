//! Words a worker shares with its parent: the id of the last request the worker began, and how
//! far it got with it.

use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ipc_channel::ipc::IpcSharedMemory;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A few words of shared memory in which a worker records the id of each request as it takes it
/// off its channel, before running it, and then how far the measurement got
/// ([`Progress`]). It travels in [`Hello`](crate::Hello), so parent and worker map the same
/// page.
///
/// It is how the parent tells, after a worker died, whether the worker had begun the request
/// in flight: a request whose id the cell never reached was never started (the worker was
/// already exiting when it was sent, or died reading it), so it is no candidate's crash and
/// runs again on a fresh worker. The worker pays one atomic store per request; the parent reads
/// the cell only after a death, once the worker is reaped.
///
/// The progress words say, when the parent must kill a worker at a request's deadline, where the
/// request was: tensor setup, the first call, estimate run 3 of 5, timed rep 7 of 10, the final
/// call, and how long calls took. The worker pays a few atomic stores per call.
///
/// ```
/// use tunebox_protocol::StartedCell;
///
/// let cell = StartedCell::new()?;
/// assert_eq!(cell.last_started(), 0);
/// cell.record_start(7);
/// assert_eq!(cell.last_started(), 7);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct StartedCell {
    /// Owns the mapping `words` points into.
    memory: IpcSharedMemory,
    words: NonNull<[AtomicU64; WORDS]>,
}

/// Words of the cell: the started id, then the [`Progress`] of that request.
const WORDS: usize = 8;
const STARTED: usize = 0;
const PHASE: usize = 1;
const DONE: usize = 2;
const PLANNED: usize = 3;
const LAST_CALL_NS: usize = 4;
const ESTIMATE_NS: usize = 5;
const SINCE_START_US: usize = 6;

// SAFETY: `words` points into the mapping owned by `memory` (which is `Send` and `Sync`) and is
// only ever used as shared `&AtomicU64`s, which are `Send` and `Sync` themselves.
unsafe impl Send for StartedCell {}
// SAFETY: as above: every access goes through the atomic.
unsafe impl Sync for StartedCell {}

impl StartedCell {
    /// A fresh cell reading 0 (no request started), in a new shared-memory region.
    ///
    /// # Errors
    ///
    /// The region could not be created or mapped (out of memory or file descriptors).
    pub fn new() -> std::io::Result<StartedCell> {
        // ipc-channel asserts (panics) when memfd_create, ftruncate or mmap fail.
        let memory = panic::catch_unwind(AssertUnwindSafe(|| {
            IpcSharedMemory::from_byte(0, size_of::<[AtomicU64; WORDS]>())
        }))
        .map_err(|_| std::io::Error::other("could not create a 64-byte shared-memory region"))?;
        StartedCell::from_memory(memory).map_err(std::io::Error::other)
    }

    /// Wraps a region received from the other side, checking that it can hold the word.
    fn from_memory(mut memory: IpcSharedMemory) -> Result<StartedCell, String> {
        // SAFETY: this handle has a mapping of its own (ipc-channel maps a region anew when it
        // is created, received or cloned), and nothing else in this process refers to that
        // mapping; from now on its bytes are accessed only through the atomic below, never as
        // `[u8]`.
        let bytes = unsafe { memory.deref_mut() };
        let ptr = bytes.as_mut_ptr();
        let size = size_of::<[AtomicU64; WORDS]>();
        if bytes.len() < size || !(ptr as usize).is_multiple_of(align_of::<AtomicU64>()) {
            return Err(format!(
                "the started-request cell is {} bytes at {ptr:p}; it needs {size} aligned bytes",
                bytes.len()
            ));
        }
        let words = NonNull::new(ptr.cast::<[AtomicU64; WORDS]>())
            .ok_or_else(|| "the started-request cell is not mapped".to_owned())?;
        Ok(StartedCell { memory, words })
    }

    fn word(&self, index: usize) -> &AtomicU64 {
        // SAFETY: `words` is non-null, aligned and points at `WORDS` words of the mapping owned
        // by `self.memory`, which lives as long as `self` (moving the handle does not move the
        // mapping); the other process accesses those bytes only atomically too.
        let words = unsafe { self.words.as_ref() };
        &words[index]
    }

    /// A second handle on the same word (a second mapping of the region): the worker keeps one
    /// and sends the other in its `Hello`.
    ///
    /// # Errors
    ///
    /// The region could not be mapped again (out of memory or file descriptors).
    pub fn try_clone(&self) -> std::io::Result<StartedCell> {
        // Cloning ipc-channel's handle maps the region again (it asserts on failure); the
        // clone's bytes are not read here.
        let memory = panic::catch_unwind(AssertUnwindSafe(|| self.memory.clone()))
            .map_err(|_| std::io::Error::other("could not map the started-request cell again"))?;
        StartedCell::from_memory(memory).map_err(std::io::Error::other)
    }

    /// Records that the request `id` has begun, with no progress yet (worker side).
    pub fn record_start(&self, id: u64) {
        self.word(PHASE).store(0, Ordering::Relaxed);
        self.word(STARTED).store(id, Ordering::Release);
    }

    /// The id of the last request the worker began; 0 before the first (parent side).
    pub fn last_started(&self) -> u64 {
        self.word(STARTED).load(Ordering::Acquire)
    }

    /// Records how far the request begun last has got (worker side).
    pub fn record_progress(&self, progress: &Progress) {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.word(DONE)
            .store(u64::from(progress.done), Ordering::Relaxed);
        self.word(PLANNED)
            .store(u64::from(progress.planned), Ordering::Relaxed);
        self.word(LAST_CALL_NS).store(
            progress.last_call.map_or(0, |d| ns(d).max(1)),
            Ordering::Relaxed,
        );
        self.word(ESTIMATE_NS).store(
            progress.estimate.map_or(0, |d| ns(d).max(1)),
            Ordering::Relaxed,
        );
        self.word(SINCE_START_US).store(
            u64::try_from(progress.since_start.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.word(PHASE)
            .store(progress.phase as u64, Ordering::Release);
    }

    /// How far request `id` got, if it is the request begun last and reported any progress
    /// (parent side; read it once the worker has stopped, or accept a slightly torn record).
    pub fn progress(&self, id: u64) -> Option<Progress> {
        if self.last_started() != id {
            return None;
        }
        let phase = Phase::from_word(self.word(PHASE).load(Ordering::Acquire))?;
        let duration = |word| match self.word(word).load(Ordering::Relaxed) {
            0 => None,
            ns => Some(Duration::from_nanos(ns)),
        };
        let count =
            |word| u32::try_from(self.word(word).load(Ordering::Relaxed)).unwrap_or(u32::MAX);
        Some(Progress {
            phase,
            done: count(DONE),
            planned: count(PLANNED),
            last_call: duration(LAST_CALL_NS),
            estimate: duration(ESTIMATE_NS),
            since_start: Duration::from_micros(self.word(SINCE_START_US).load(Ordering::Relaxed)),
        })
    }
}

impl fmt::Debug for StartedCell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StartedCell({})", self.last_started())
    }
}

impl Serialize for StartedCell {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Sends a descriptor of the region; no byte of it is read here.
        self.memory.serialize(serializer)
    }
}

/// Where a worker is in a request (what [`StartedCell::progress`] reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Phase {
    /// Loading the kernel and allocating and filling its tensors.
    Setup = 1,
    /// The first call, on fresh tensors (its outputs are the ones verified).
    FirstCall = 2,
    /// do_bench's estimate runs.
    Estimate = 3,
    /// Untimed warmup calls.
    Warmup = 4,
    /// Timed reps.
    Reps = 5,
    /// The call after the reps, on poisoned outputs.
    FinalCall = 6,
}

impl Phase {
    fn from_word(word: u64) -> Option<Phase> {
        [
            Phase::Setup,
            Phase::FirstCall,
            Phase::Estimate,
            Phase::Warmup,
            Phase::Reps,
            Phase::FinalCall,
        ]
        .into_iter()
        .find(|&p| p as u64 == word)
    }
}

/// How far a worker got with a request: its phase, the calls of that phase done and planned,
/// how long the last call and the estimate took, and when (since the request began) this was
/// recorded. Its `Display` says it for a person: `in timed rep 8 of 10 (calls took 150.0 ms in
/// the estimate, 912.0 ms the last one)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// The phase.
    pub phase: Phase,
    /// Calls of this phase that returned.
    pub done: u32,
    /// Calls this phase plans (0: not known, or a phase of one call).
    pub planned: u32,
    /// The last call's duration, once one returned.
    pub last_call: Option<Duration>,
    /// The estimate of one call, once the estimate runs are done.
    pub estimate: Option<Duration>,
    /// When this was recorded, counted from the start of the request.
    pub since_start: Duration,
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let of = |what: &str| {
            if self.planned > 0 {
                format!("in {what} {} of {}", self.done + 1, self.planned)
            } else {
                format!("in {what} {}", self.done + 1)
            }
        };
        match self.phase {
            Phase::Setup => write!(f, "while loading the kernel and setting up its tensors")?,
            Phase::FirstCall => write!(f, "in the first call of the kernel (no call returned)")?,
            Phase::Estimate => write!(f, "{}", of("estimate run"))?,
            Phase::Warmup => write!(f, "{}", of("warmup call"))?,
            Phase::Reps => write!(f, "{}", of("timed rep"))?,
            Phase::FinalCall => write!(f, "in the final call after the reps")?,
        }
        match (self.estimate, self.last_call) {
            (Some(estimate), Some(last)) => write!(
                f,
                " (calls took {} in the estimate, {} the last one)",
                short_duration(estimate),
                short_duration(last)
            ),
            (None, Some(last)) => write!(f, " (the last call took {})", short_duration(last)),
            _ => Ok(()),
        }
    }
}

/// A duration with four significant digits in the unit that fits: `1.234 s`, `150.0 ms`,
/// `2.100 µs`, `450.0 ns` ([`short_ms`] of its milliseconds).
pub fn short_duration(duration: Duration) -> String {
    short_ms(duration.as_secs_f64() * 1e3)
}

/// A time given in ms, with four significant digits and the unit that fits: `12.35 s`,
/// `3.699 ms`, `812.3 µs`, `45.20 ns` (below 1 ns, three decimals); a non-finite value as
/// `NaN ms`. What tables and error messages show; JSON keeps ms.
pub fn short_ms(ms: f64) -> String {
    if !ms.is_finite() {
        return format!("{ms} ms");
    }
    let (value, unit) = match ms.abs() {
        m if m >= 1e3 => (ms / 1e3, "s"),
        m if m >= 1.0 => (ms, "ms"),
        m if m >= 1e-3 => (ms * 1e3, "µs"),
        _ => (ms * 1e6, "ns"),
    };
    let magnitude = if value == 0.0 {
        0
    } else {
        value.abs().log10().floor() as i32
    };
    let decimals = (3 - magnitude).clamp(0, 3) as usize;
    format!("{value:.decimals$} {unit}")
}

impl<'de> Deserialize<'de> for StartedCell {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let memory = IpcSharedMemory::deserialize(deserializer)?;
        StartedCell::from_memory(memory).map_err(D::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use ipc_channel::ipc;

    use super::*;

    #[test]
    fn every_handle_and_every_copy_sent_sees_the_same_word() {
        let worker = StartedCell::new().unwrap();
        let kept = worker.try_clone().unwrap();
        let (tx, rx) = ipc::channel::<StartedCell>().unwrap();
        tx.send(worker).unwrap();
        let parent = rx.recv().unwrap();
        assert_eq!(parent.last_started(), 0);
        kept.record_start(41);
        assert_eq!(parent.last_started(), 41);
        kept.record_start(42);
        assert_eq!(parent.last_started(), 42);
        assert_eq!(format!("{parent:?}"), "StartedCell(42)");
    }

    #[test]
    fn progress_belongs_to_the_request_begun_last() {
        let worker = StartedCell::new().unwrap();
        let parent = worker.try_clone().unwrap();
        worker.record_start(5);
        assert_eq!(parent.progress(5), None, "no progress recorded yet");
        let progress = Progress {
            phase: Phase::Reps,
            done: 7,
            planned: 10,
            last_call: Some(Duration::from_micros(912_000)),
            estimate: Some(Duration::from_micros(150_000)),
            since_start: Duration::from_millis(4_100),
        };
        worker.record_progress(&progress);
        assert_eq!(parent.progress(5), Some(progress));
        assert_eq!(
            progress.to_string(),
            "in timed rep 8 of 10 (calls took 150.0 ms in the estimate, 912.0 ms the last one)"
        );
        assert_eq!(short_duration(Duration::from_nanos(2_100)), "2.100 µs");
        assert_eq!(short_duration(Duration::from_millis(1_234)), "1.234 s");
        assert_eq!(short_duration(Duration::from_nanos(450)), "450.0 ns");
        assert_eq!(short_duration(Duration::ZERO), "0.000 ns");
        assert_eq!(parent.progress(4), None, "another request's");
        // A new request starts with no progress.
        worker.record_start(6);
        assert_eq!(parent.progress(6), None);
        let first = Progress {
            phase: Phase::FirstCall,
            done: 0,
            planned: 0,
            last_call: None,
            estimate: None,
            since_start: Duration::from_millis(3),
        };
        worker.record_progress(&first);
        assert_eq!(
            parent.progress(6).unwrap().to_string(),
            "in the first call of the kernel (no call returned)"
        );
    }

    #[test]
    fn a_region_too_small_for_the_word_is_refused() {
        let (tx, rx) = ipc::channel::<IpcSharedMemory>().unwrap();
        tx.send(IpcSharedMemory::from_byte(0, 4)).unwrap();
        let error = StartedCell::from_memory(rx.recv().unwrap()).unwrap_err();
        assert!(error.contains("needs 64 aligned bytes"), "{error}");
    }
}
