//! Caller-owned shared-memory buffers: large inputs written once, sent by handle.

use std::fmt;
use std::ops::Deref;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ipc_channel::ipc::IpcSharedMemory;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A shared-memory region the caller creates once, writes in place, and hands to any number of
/// requests by handle ([`SharedBuffer::share`]): only a file descriptor crosses the socket, so a
/// 256 MiB input costs the same to send as an empty one, and reusing the buffer avoids faulting
/// in fresh pages for every request.
///
/// Workers only read a shared buffer (a tensor initialized from it gets its own copy), so the
/// caller's view stays the caller's. [`SharedBuffer::get_mut`] refuses while a request still
/// holds a handle.
///
/// ```
/// use tunebox_protocol::SharedBuffer;
///
/// let mut buffer = SharedBuffer::new(4)?;
/// buffer.get_mut().expect("no request holds it yet").copy_from_slice(&[1, 2, 3, 4]);
/// let handle = buffer.share();
/// assert_eq!(&*handle, &[1, 2, 3, 4]);
/// assert!(buffer.get_mut().is_none(), "a request holds a handle");
/// drop(handle);
/// assert!(buffer.get_mut().is_some());
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct SharedBuffer {
    memory: Arc<IpcSharedMemory>,
    id: u64,
}

/// Source of [`SharedBuffer`] ids, unique within a process.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl SharedBuffer {
    /// A zero-filled region of `len` bytes (zero-length buffers work and use no memory).
    ///
    /// # Errors
    ///
    /// The region could not be created or mapped (out of memory or file descriptors).
    pub fn new(len: usize) -> std::io::Result<SharedBuffer> {
        create(len, || IpcSharedMemory::from_byte(0, len))
    }

    /// A region holding a copy of `bytes`.
    ///
    /// # Errors
    ///
    /// As [`SharedBuffer::new`].
    pub fn from_slice(bytes: &[u8]) -> std::io::Result<SharedBuffer> {
        create(bytes.len(), || IpcSharedMemory::from_bytes(bytes))
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.memory.len()
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.memory.is_empty()
    }

    /// The contents.
    pub fn as_slice(&self) -> &[u8] {
        &self.memory
    }

    /// The contents, to write in place; `None` while a [`SharedData`] handle of this buffer
    /// exists (a request that may still be read by a worker).
    pub fn get_mut(&mut self) -> Option<&mut [u8]> {
        let memory = Arc::get_mut(&mut self.memory)?;
        // SAFETY: `Arc::get_mut` proves no other handle to this mapping exists in this process;
        // workers never write to shared buffers (they copy what they need), so this is the only
        // writer, and the borrow of `self` makes it the only reference while it lives.
        Some(unsafe { memory.deref_mut() })
    }

    /// A read-only handle for a request (for example `Init::Data`). Cheap: no copy, no new
    /// mapping.
    pub fn share(&self) -> SharedData {
        SharedData {
            memory: self.memory.clone(),
            id: self.id,
        }
    }
}

impl fmt::Debug for SharedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedBuffer({} bytes)", self.len())
    }
}

/// A read-only handle to a [`SharedBuffer`]'s contents, as requests carry it. Reads as a
/// `&[u8]`; crosses the process boundary as a file descriptor, with the buffer's id so that a
/// worker can keep using the mapping it already has for the same buffer (no page faults on
/// reuse).
#[derive(Clone)]
pub struct SharedData {
    memory: Arc<IpcSharedMemory>,
    id: u64,
}

impl SharedData {
    /// The id of the buffer this handle shares, unique among the buffers of the process that
    /// created it.
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl PartialEq for SharedData {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Deref for SharedData {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.memory
    }
}

impl fmt::Debug for SharedData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedData({} bytes)", self.len())
    }
}

impl Serialize for SharedData {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        (self.id, &*self.memory).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for SharedData {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        <(u64, IpcSharedMemory)>::deserialize(deserializer).map(|(id, memory)| SharedData {
            memory: Arc::new(memory),
            id,
        })
    }
}

/// A quick checksum of `bytes`: the wrapping sum of its little-endian `u64` words, then of its
/// remaining bytes. What `DiagnosticTask::Checksum` returns, so callers can check a round trip.
pub fn checksum(bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(8);
    let mut sum = words
        .by_ref()
        .map(|w| u64::from_le_bytes(w.try_into().expect("8-byte chunks")))
        .fold(0u64, u64::wrapping_add);
    for &b in words.remainder() {
        sum = sum.wrapping_add(u64::from(b));
    }
    sum
}

/// Runs ipc-channel's constructor, which asserts (panics) when `memfd_create`, `ftruncate` or
/// `mmap` fail: a resource error here, not a bug.
fn create(len: usize, make: impl FnOnce() -> IpcSharedMemory) -> std::io::Result<SharedBuffer> {
    panic::catch_unwind(AssertUnwindSafe(make))
        .map(|memory| SharedBuffer {
            memory: Arc::new(memory),
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        })
        .map_err(|_| {
            std::io::Error::other(format!(
                "could not create a shared-memory region of {len} bytes (out of memory or file \
                 descriptors?)"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_length_buffers_work() {
        let mut buffer = SharedBuffer::new(0).unwrap();
        assert!(buffer.is_empty());
        assert_eq!(buffer.get_mut().unwrap().len(), 0);
        assert!(buffer.share().is_empty());
    }

    #[test]
    fn writes_in_place_are_seen_by_handles() {
        let mut buffer = SharedBuffer::new(1 << 20).unwrap();
        buffer.get_mut().unwrap()[12345] = 7;
        let handle = buffer.share();
        assert_eq!(handle[12345], 7);
        assert_eq!(handle.clone().len(), 1 << 20);
    }
}
