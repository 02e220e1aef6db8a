//! Byte payloads that keep every message small.

use std::fmt;
use std::ops::Deref;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;

use ipc_channel::ipc::IpcSharedMemory;
use serde::{Deserialize, Serialize};

use crate::held;

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
///
/// A worker whose parent reads its memory sends a large output as its address instead
/// ([`Bytes::output_copy`], the `held` module); the parent reads it with
/// [`Bytes::read_held`] before anything else reads the bytes: until then they read as empty.
#[derive(Clone, Serialize, Deserialize)]
pub struct Bytes {
    repr: Repr,
    /// The worker's own copy behind a [`Repr::Held`]: what it reads as there, kept alive
    /// until the worker's next request. Never sent.
    #[serde(skip)]
    held: Option<Arc<Vec<u8>>>,
}

#[derive(Clone, Serialize, Deserialize)]
enum Repr {
    /// Shared within the process, so that a clone of a large output the parent read out of a
    /// worker ([`Repr::Held`]) copies nothing.
    Inline(#[serde(with = "shared_vec")] Arc<Owned>),
    Shared(IpcSharedMemory),
    /// `len` bytes at `address` in the worker that sent them, held there until its next
    /// request.
    Held {
        address: u64,
        len: u64,
    },
}

impl Bytes {
    /// Takes `bytes`, moving them to shared memory if they are larger than [`INLINE_LIMIT`].
    ///
    /// # Errors
    ///
    /// The shared-memory region could not be created (out of memory or file descriptors).
    pub fn from_vec(bytes: Vec<u8>) -> std::io::Result<Bytes> {
        if bytes.len() <= INLINE_LIMIT {
            Ok(Bytes::inline(bytes))
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
            Ok(Bytes::inline(bytes.to_vec()))
        } else {
            shared(bytes)
        }
    }

    /// An empty payload.
    pub fn empty() -> Bytes {
        Bytes::inline(Vec::new())
    }

    /// Whether the bytes live in a shared-memory region.
    pub fn is_shared(&self) -> bool {
        matches!(self.repr, Repr::Shared(_))
    }

    /// A worker's copy of an output to return: as [`Bytes::copy_from_slice`], except that
    /// while the current request holds its outputs (the parent reads the worker's memory,
    /// [`crate::Request::hold_outputs`]) a large one is copied into private memory of the
    /// worker's and sent as its address, kept until the worker's next request.
    ///
    /// # Errors
    ///
    /// The copy's memory could not be made (out of memory, address space or file
    /// descriptors).
    pub fn output_copy(bytes: &[u8]) -> std::io::Result<Bytes> {
        if bytes.len() <= INLINE_LIMIT || !held::holding() {
            return Bytes::copy_from_slice(bytes);
        }
        held::hold(bytes).map(Bytes::held)
    }

    /// A worker's output to return, taken as it is: as [`Bytes::from_vec`], except that while
    /// the current request holds its outputs (see [`Bytes::output_copy`]) a large one is kept
    /// in the worker, without a copy, and sent as its address.
    ///
    /// # Errors
    ///
    /// As [`Bytes::from_vec`].
    pub fn output_from_vec(bytes: Vec<u8>) -> std::io::Result<Bytes> {
        if bytes.len() <= INLINE_LIMIT || !held::holding() {
            return Bytes::from_vec(bytes);
        }
        Ok(Bytes::held(held::hold_vec(bytes)))
    }

    /// Whether these are bytes a worker holds for the parent to read ([`Bytes::read_held`]);
    /// on the parent's side they read as empty until then.
    pub fn is_held(&self) -> bool {
        matches!(self.repr, Repr::Held { .. })
    }

    /// Reads bytes the worker `pid` holds ([`Bytes::is_held`]) out of its memory with
    /// `process_vm_readv` (into huge pages where large), so that they read as themselves;
    /// other bytes are left as they are.
    ///
    /// # Errors
    ///
    /// The read failed: the worker is gone, this process may not read its memory (Yama's
    /// `ptrace_scope` 2 or 3, another user, a seccomp filter), or the range is not mapped
    /// there. The bytes are left held.
    ///
    /// The read fills a buffer of `spare` when one of its size is there, and its buffer goes
    /// back to `spare` when the last clone of these bytes drops (while `spare` lives).
    pub fn read_held(&mut self, pid: u32, spare: &held::SpareBuffers) -> std::io::Result<()> {
        if self.held.is_some() {
            return Ok(());
        }
        if let Repr::Held { address, len } = self.repr {
            let len = usize::try_from(len).map_err(std::io::Error::other)?;
            *self = Bytes::owned(held::read(pid, address, len, spare)?, Some(spare.handle()));
        }
        Ok(())
    }

    /// Bytes the worker holds (`copy`, registered until its next request), sent as where
    /// they lie.
    fn held(copy: Arc<Vec<u8>>) -> Bytes {
        Bytes {
            repr: Repr::Held {
                address: copy.as_ptr() as u64,
                len: copy.len() as u64,
            },
            held: Some(copy),
        }
    }

    fn inline(bytes: Vec<u8>) -> Bytes {
        Bytes::owned(bytes, None)
    }

    /// `bytes` of this process, going `back` to a reader's spare buffers when the last clone
    /// drops.
    fn owned(bytes: Vec<u8>, back: Option<held::SpareHandle>) -> Bytes {
        Bytes {
            repr: Repr::Inline(Arc::new(Owned { bytes, back })),
            held: None,
        }
    }
}

fn shared(bytes: &[u8]) -> std::io::Result<Bytes> {
    // ipc-channel asserts (panics) when memfd_create, ftruncate or mmap fail; that is a resource
    // error here, not a bug.
    panic::catch_unwind(AssertUnwindSafe(|| IpcSharedMemory::from_bytes(bytes)))
        .map(|memory| Bytes {
            repr: Repr::Shared(memory),
            held: None,
        })
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
        match (&self.repr, &self.held) {
            (Repr::Inline(owned), _) => owned.bytes.as_slice(),
            (Repr::Shared(memory), _) => memory,
            (Repr::Held { .. }, Some(copy)) => copy.as_slice(),
            (Repr::Held { .. }, None) => &[],
        }
    }
}

/// Equal when the contents are, wherever they live. Held bytes not yet read on the parent's
/// side equal only held bytes at the same address of the same length.
impl PartialEq for Bytes {
    fn eq(&self, other: &Self) -> bool {
        match (&self.repr, &self.held, &other.repr, &other.held) {
            (Repr::Held { .. }, None, _, _) | (_, _, Repr::Held { .. }, None) => {
                matches!((&self.repr, &other.repr), (
                    Repr::Held { address: a, len: n },
                    Repr::Held { address: b, len: m },
                ) if a == b && n == m)
            }
            _ => **self == **other,
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
        let place = match self.repr {
            Repr::Inline(_) => "inline",
            Repr::Shared(_) => "shared",
            Repr::Held { .. } => "held by the worker",
        };
        write!(f, "Bytes({} bytes, {place})", self.len())
    }
}

impl Default for Bytes {
    fn default() -> Self {
        Bytes::empty()
    }
}

/// Bytes of this process's own, shared by the clones of a [`Bytes`]. A buffer a read of held
/// outputs filled goes back to its reader's spare buffers when the last clone drops
/// ([`held::SpareBuffers`]).
struct Owned {
    bytes: Vec<u8>,
    back: Option<held::SpareHandle>,
}

impl Drop for Owned {
    fn drop(&mut self) {
        if let Some(back) = &self.back {
            back.give_back(std::mem::take(&mut self.bytes));
        }
    }
}

/// `Arc<Owned>` on the wire as a byte string, as `serde_bytes` writes a `Vec<u8>`.
mod shared_vec {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serializer};

    use super::Owned;

    pub(super) fn serialize<S: Serializer>(bytes: &Arc<Owned>, to: S) -> Result<S::Ok, S::Error> {
        serde_bytes::serialize(bytes.bytes.as_slice(), to)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(from: D) -> Result<Arc<Owned>, D::Error> {
        serde_bytes::ByteBuf::deserialize(from).map(|b| {
            Arc::new(Owned {
                bytes: b.into_vec(),
                back: None,
            })
        })
    }
}
