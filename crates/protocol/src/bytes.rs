//! Byte payloads that keep every message small.

use std::fmt;
use std::ops::Deref;
use std::panic::{self, AssertUnwindSafe};

use ipc_channel::ipc::IpcSharedMemory;
use serde::{Deserialize, Serialize};

/// Payloads up to this many bytes travel inside the message; larger ones as shared memory.
pub const INLINE_LIMIT: usize = 16 * 1024;

/// Most bytes of inline data (source text, names, flags) one request may carry. Everything larger
/// travels as shared memory, so that a message always fits in one socket buffer: ipc-channel
/// fragments a larger message over a side channel whose send can block until the peer reads,
/// even after the peer died.
pub const MAX_INLINE_REQUEST_BYTES: usize = 128 * 1024;

/// Most shared-memory payloads one message may carry: ipc-channel passes each as a file
/// descriptor, and one message carries at most 64.
pub const MAX_SHARED_PAYLOADS: usize = 60;

/// Bytes that cross the process boundary inline when small (up to [`INLINE_LIMIT`]) and as a
/// shared-memory region when larger, so that a message never needs more than one socket
/// buffer. Reads as a `&[u8]`.
///
/// ```
/// use tunebox_protocol::{Bytes, INLINE_LIMIT};
///
/// let small = Bytes::from_vec(vec![1, 2, 3]).unwrap();
/// assert!(!small.is_shared());
/// let large = Bytes::copy_from_slice(&vec![7u8; INLINE_LIMIT + 1]).unwrap();
/// assert!(large.is_shared());
/// assert_eq!(large.len(), INLINE_LIMIT + 1);
/// assert_eq!(large[0], 7);
/// ```
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct Bytes(Repr);

#[derive(Clone, PartialEq, Serialize, Deserialize)]
enum Repr {
    Inline(#[serde(with = "serde_bytes")] Vec<u8>),
    Shared(IpcSharedMemory),
}

impl Bytes {
    /// Takes `bytes`, moving them to shared memory if they are larger than [`INLINE_LIMIT`].
    ///
    /// # Errors
    ///
    /// The shared-memory region could not be created (out of memory or file descriptors).
    pub fn from_vec(bytes: Vec<u8>) -> std::io::Result<Bytes> {
        if bytes.len() <= INLINE_LIMIT {
            Ok(Bytes(Repr::Inline(bytes)))
        } else {
            shared(&bytes)
        }
    }

    /// Copies `bytes`, into shared memory if they are larger than [`INLINE_LIMIT`] (one copy).
    ///
    /// # Errors
    ///
    /// The shared-memory region could not be created (out of memory or file descriptors).
    pub fn copy_from_slice(bytes: &[u8]) -> std::io::Result<Bytes> {
        if bytes.len() <= INLINE_LIMIT {
            Ok(Bytes(Repr::Inline(bytes.to_vec())))
        } else {
            shared(bytes)
        }
    }

    /// An empty payload.
    pub fn empty() -> Bytes {
        Bytes(Repr::Inline(Vec::new()))
    }

    /// Whether the bytes live in a shared-memory region.
    pub fn is_shared(&self) -> bool {
        matches!(self.0, Repr::Shared(_))
    }
}

fn shared(bytes: &[u8]) -> std::io::Result<Bytes> {
    // ipc-channel asserts (panics) when memfd_create, ftruncate or mmap fail; that is a resource
    // error here, not a bug.
    panic::catch_unwind(AssertUnwindSafe(|| IpcSharedMemory::from_bytes(bytes)))
        .map(|memory| Bytes(Repr::Shared(memory)))
        .map_err(|_| {
            std::io::Error::other(format!(
                "could not create a shared-memory region of {} bytes (out of memory or file \
                 descriptors?)",
                bytes.len()
            ))
        })
}

impl Deref for Bytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            Repr::Inline(bytes) => bytes,
            Repr::Shared(memory) => memory,
        }
    }
}

impl PartialEq<[u8]> for Bytes {
    fn eq(&self, other: &[u8]) -> bool {
        **self == *other
    }
}

impl PartialEq<Vec<u8>> for Bytes {
    fn eq(&self, other: &Vec<u8>) -> bool {
        **self == **other
    }
}

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let place = if self.is_shared() { "shared" } else { "inline" };
        write!(f, "Bytes({} bytes, {place})", self.len())
    }
}

impl Default for Bytes {
    fn default() -> Self {
        Bytes::empty()
    }
}
