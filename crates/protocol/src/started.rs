//! A word a worker shares with its parent: the id of the last request the worker began.

use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use ipc_channel::ipc::IpcSharedMemory;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Eight bytes of shared memory in which a worker records the id of each request as it takes it
/// off its channel, before running it. It travels in [`Hello`](crate::Hello), so parent and
/// worker map the same page.
///
/// It is how the parent tells, after a worker died, whether the worker had begun the request
/// in flight: a request whose id the cell never reached was never started (the worker was
/// already exiting when it was sent, or died reading it), so it is no candidate's crash and
/// runs again on a fresh worker. The worker pays one atomic store per request; the parent reads
/// the cell only after a death, once the worker is reaped.
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
    /// Owns the mapping `word` points into.
    memory: IpcSharedMemory,
    word: NonNull<AtomicU64>,
}

// SAFETY: `word` points into the mapping owned by `memory` (which is `Send` and `Sync`) and is
// only ever used as a shared `&AtomicU64`, which is `Send` and `Sync` itself.
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
            IpcSharedMemory::from_byte(0, size_of::<AtomicU64>())
        }))
        .map_err(|_| std::io::Error::other("could not create an 8-byte shared-memory region"))?;
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
        if bytes.len() < size_of::<AtomicU64>()
            || !(ptr as usize).is_multiple_of(align_of::<AtomicU64>())
        {
            return Err(format!(
                "the started-request cell is {} bytes at {ptr:p}; it needs 8 aligned bytes",
                bytes.len()
            ));
        }
        let word = NonNull::new(ptr.cast::<AtomicU64>())
            .ok_or_else(|| "the started-request cell is not mapped".to_owned())?;
        Ok(StartedCell { memory, word })
    }

    fn word(&self) -> &AtomicU64 {
        // SAFETY: `word` is non-null, aligned and points at 8 bytes of the mapping owned by
        // `self.memory`, which lives as long as `self` (moving the handle does not move the
        // mapping); the other process accesses those bytes only atomically too.
        unsafe { self.word.as_ref() }
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

    /// Records that the request `id` has begun (worker side).
    pub fn record_start(&self, id: u64) {
        self.word().store(id, Ordering::Release);
    }

    /// The id of the last request the worker began; 0 before the first (parent side).
    pub fn last_started(&self) -> u64 {
        self.word().load(Ordering::Acquire)
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
    fn a_region_too_small_for_the_word_is_refused() {
        let (tx, rx) = ipc::channel::<IpcSharedMemory>().unwrap();
        tx.send(IpcSharedMemory::from_byte(0, 4)).unwrap();
        let error = StartedCell::from_memory(rx.recv().unwrap()).unwrap_err();
        assert!(error.contains("needs 8 aligned bytes"), "{error}");
    }
}
