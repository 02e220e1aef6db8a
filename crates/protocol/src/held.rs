//! Outputs a worker keeps in its own memory for the parent to read, instead of copying them into
//! a new shared-memory region.
//!
//! A new region costs its size in page faults: every 4 KiB page of it is faulted in, zeroed and
//! charged before the copy lands (~0.25 s for a 288 MiB output on a 2-vCPU EPYC guest, most of
//! a screening window of Kernel Tuner's `vector_add`). A copy into private memory backed by
//! transparent huge pages, read by the parent with `process_vm_readv` (one kernel copy, no page
//! tables of the worker's to fill), took that screening window from ~630 to ~400 ms
//! (docs/performance.md, "Issue 33, eighth session").
//!
//! The worker side: the parent says per request whether it reads ([`Request::hold_outputs`]);
//! the worker then [`hold`]s each large output copy, which [`crate::Bytes`] sends as its address
//! and length, and keeps every held copy until its next request
//! ([`hold_outputs_for_request`]). The parent side: [`crate::BenchmarkResult::read_held`] reads
//! them out of the worker process before anything else is sent to it.
//!
//! [`Request::hold_outputs`]: crate::Request::hold_outputs

use std::collections::TryReserveError;
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// Whether the current request's large outputs are held ([`hold`]) rather than sent as
/// shared-memory regions: the request's [`crate::Request::hold_outputs`].
static HOLDING: AtomicBool = AtomicBool::new(false);

/// The copies held for the parent since the last request began.
static HELD: Mutex<Vec<Arc<Vec<u8>>>> = Mutex::new(Vec::new());

/// Transparent huge pages are asked for (`MADV_HUGEPAGE`) for the whole pages of this size
/// inside a buffer: a 2 MiB page is zeroed in one fault instead of 512.
const HUGE_PAGE: usize = 2 << 20;

/// Begins a request in a worker: drops the copies held for the parent's last read (the parent
/// reads them before it sends anything else) and holds this request's large outputs when
/// `holding` (the request's [`crate::Request::hold_outputs`]).
pub fn hold_outputs_for_request(holding: bool) {
    HELD.lock().unwrap_or_else(PoisonError::into_inner).clear();
    HOLDING.store(holding, Ordering::Release);
}

/// Whether the current request's large outputs are held for the parent to read.
pub(crate) fn holding() -> bool {
    HOLDING.load(Ordering::Acquire)
}

/// A held copy of `bytes` (in huge pages where large), kept alive until the next
/// [`hold_outputs_for_request`].
///
/// # Errors
///
/// The copy's memory could not be had.
pub(crate) fn hold(bytes: &[u8]) -> io::Result<Arc<Vec<u8>>> {
    let mut copy = huge_buffer(bytes.len()).map_err(io::Error::other)?;
    copy.extend_from_slice(bytes);
    Ok(hold_vec(copy))
}

/// `bytes` held as they are (no copy), kept alive until the next [`hold_outputs_for_request`].
pub(crate) fn hold_vec(bytes: Vec<u8>) -> Arc<Vec<u8>> {
    let held = Arc::new(bytes);
    HELD.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(held.clone());
    held
}

/// Most buffers a reader keeps for its next reads ([`SpareBuffers`]).
const SPARE_BUFFERS: usize = 4;

/// The share of the machine's memory a reader's spare buffers may hold together: a pool of
/// several workers reading 1 GiB outputs keeps no more than this each.
const SPARE_MEMORY_SHARE: u64 = 16;

/// The bytes a reader's spare buffers may hold together: [`SPARE_MEMORY_SHARE`] of the
/// machine's memory (1 GiB where it cannot be read).
fn spare_bytes_limit() -> usize {
    static LIMIT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        let memory = crate::physical_memory_bytes().unwrap_or(16 << 30);
        usize::try_from(memory / SPARE_MEMORY_SHARE).unwrap_or(usize::MAX)
    })
}

/// Buffers the reads of one reader (a `TuningProcess`) filled, back once the last handle to
/// their bytes dropped: the next read of as many bytes fills one again, its pages already
/// there, instead of a new buffer whose every page is faulted in and zeroed first (two reads of
/// ~288 MiB per screening window of Kernel Tuner's `vector_add`; figures in
/// docs/performance.md, "Issue 33, fifteenth session"). At most four, holding at most a
/// sixteenth of the machine's memory together, the oldest dropped first; they go with the
/// reader (clones share them).
#[derive(Debug, Clone, Default)]
pub struct SpareBuffers(Arc<Mutex<Vec<Vec<u8>>>>);

/// Where a buffer read for a reader goes back ([`SpareHandle::give_back`]); nowhere once the
/// reader is gone.
pub(crate) struct SpareHandle(Weak<Mutex<Vec<Vec<u8>>>>);

impl SpareHandle {
    /// Keeps `buffer` for a later read of its reader, if the reader is still there.
    pub(crate) fn give_back(&self, buffer: Vec<u8>) {
        let Some(spare) = self.0.upgrade() else {
            return;
        };
        let mut spare = spare.lock().unwrap_or_else(PoisonError::into_inner);
        spare.push(buffer);
        let held = |spare: &[Vec<u8>]| spare.iter().map(Vec::capacity).sum::<usize>();
        while spare.len() > SPARE_BUFFERS || held(&spare) > spare_bytes_limit() {
            spare.remove(0);
        }
    }
}

impl SpareBuffers {
    /// A spare buffer of exactly `len` bytes' room, emptied, if there is one.
    fn take(&self, len: usize) -> Option<Vec<u8>> {
        let mut spare = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let at = spare.iter().position(|b| b.capacity() == len)?;
        let mut buffer = spare.swap_remove(at);
        buffer.clear();
        Some(buffer)
    }

    /// Where a buffer read for this reader goes back ([`SpareHandle::give_back`]).
    pub(crate) fn handle(&self) -> SpareHandle {
        SpareHandle(Arc::downgrade(&self.0))
    }

    /// How many buffers are kept now.
    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Whether none is kept now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Reads `len` bytes at `address` in process `pid` with `process_vm_readv`, into a buffer of
/// `spare` of that size if there is one, else new memory of this process backed by huge pages
/// where it is large.
///
/// # Errors
///
/// The read failed: the process is gone (`ESRCH`), this process may not read it (`EPERM`: Yama's
/// `ptrace_scope` of 2 or 3, another user, a non-dumpable process, a seccomp filter), the
/// range is not mapped there (`EFAULT`), or the read came back short.
pub(crate) fn read(
    pid: u32,
    address: u64,
    len: usize,
    spare: &SpareBuffers,
) -> io::Result<Vec<u8>> {
    // The length comes from the worker: one that cannot be had is its error, not the parent's
    // abort.
    let mut buffer = match spare.take(len) {
        Some(buffer) => buffer,
        None => huge_buffer(len).map_err(|e| {
            io::Error::other(format!(
                "cannot hold {len} bytes the worker says it holds at {address:#x}: {e}"
            ))
        })?,
    };
    let mut done = 0;
    while done < len {
        let local = libc::iovec {
            // SAFETY: `done < len <= capacity`: the pointer stays inside the allocation.
            iov_base: unsafe { buffer.as_mut_ptr().add(done) }.cast(),
            iov_len: len - done,
        };
        let remote = libc::iovec {
            iov_base: (address + done as u64) as *mut libc::c_void,
            iov_len: len - done,
        };
        let pid = libc::pid_t::try_from(pid).map_err(io::Error::other)?;
        // SAFETY: `local` is `len - done` writable bytes of `buffer`'s spare capacity; the
        // remote iovec is only read by the kernel, in the other process.
        let read = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
        match read {
            n if n < 0 => return Err(io::Error::last_os_error()),
            0 => {
                return Err(io::Error::other(format!(
                    "read {done} of {len} bytes at {address:#x} in process {pid}"
                )));
            }
            n => done += n as usize,
        }
    }
    // SAFETY: the kernel wrote all `len` bytes (`done == len`).
    unsafe { buffer.set_len(len) };
    Ok(buffer)
}

/// An empty buffer with room for `len` bytes, transparent huge pages asked for the whole 2 MiB
/// pages inside it (advice only: a kernel without them gives small pages).
fn huge_buffer(len: usize) -> Result<Vec<u8>, TryReserveError> {
    let mut buffer = Vec::new();
    buffer.try_reserve_exact(len)?;
    let start = buffer.as_ptr() as usize;
    let first = start.next_multiple_of(HUGE_PAGE);
    let last = (start + buffer.capacity()) / HUGE_PAGE * HUGE_PAGE;
    if last > first {
        // SAFETY: `[first, last)` lies inside the allocation; advice changes no contents.
        unsafe {
            libc::madvise(
                first as *mut libc::c_void,
                last - first,
                libc::MADV_HUGEPAGE,
            )
        };
    }
    Ok(buffer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_copy_reads_back_through_process_vm_readv() {
        let bytes: Vec<u8> = (0..3 * HUGE_PAGE + 5).map(|i| (i % 251) as u8).collect();
        let copy = hold(&bytes).unwrap();
        assert_eq!(&copy[..], &bytes[..]);
        let spare = SpareBuffers::default();
        let read = read(
            std::process::id(),
            copy.as_ptr() as u64,
            bytes.len(),
            &spare,
        )
        .unwrap();
        assert_eq!(read, bytes);
    }

    #[test]
    fn a_length_no_memory_holds_is_an_error_not_an_abort() {
        let spare = SpareBuffers::default();
        let error = read(std::process::id(), 4096, usize::MAX / 2, &spare).unwrap_err();
        assert!(error.to_string().contains("cannot hold"), "{error}");
    }

    #[test]
    fn an_unmapped_address_is_an_error_not_a_short_buffer() {
        let error = read(std::process::id(), 8, 4096, &SpareBuffers::default()).unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EFAULT), "{error}");
    }
}

#[cfg(test)]
mod read_tests {
    use super::SpareBuffers;
    use crate::{BenchmarkResult, Bytes, DType, INLINE_LIMIT, TensorData, TimingStats};

    /// Holds the process's holding switch for one test: the tests of this module run in
    /// parallel, and each turns it on and off.
    fn holding(on: bool) -> std::sync::MutexGuard<'static, ()> {
        static SWITCH: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let guard = SWITCH
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        super::hold_outputs_for_request(on);
        guard
    }

    /// `bytes` as the parent receives them: encoded and decoded, the worker's copy left behind.
    fn sent(bytes: &Bytes) -> Bytes {
        postcard::from_bytes(&postcard::to_allocvec(bytes).unwrap()).unwrap()
    }

    /// Held bytes as the parent receives them naming `len` bytes at `address` (postcard writes
    /// the held variant as its index, 2, and the two numbers, as it writes this tuple).
    fn held_at(address: u64, len: usize) -> Bytes {
        postcard::from_bytes(&postcard::to_allocvec(&(2u32, address, len as u64)).unwrap()).unwrap()
    }

    fn tensor(bytes: Bytes) -> TensorData {
        TensorData::new("c", DType::U8, vec![bytes.len() as u64], bytes)
    }

    #[test]
    fn held_outputs_are_read_once_per_copy_and_then_read_as_themselves() {
        let data: Vec<u8> = (0..4 * INLINE_LIMIT + 3).map(|i| (i % 253) as u8).collect();
        let switch = holding(true);
        let held = Bytes::output_copy(&data).unwrap();
        let small = Bytes::output_copy(&data[..8]).unwrap();
        super::hold_outputs_for_request(false);
        drop(switch);
        assert!(held.is_held() && !small.is_held());
        assert_eq!(&held[..], &data[..], "the worker reads its own copy");
        let received = sent(&held);
        assert!(received.is_held());
        assert!(received.is_empty(), "unread held bytes read as empty");
        let mut result = BenchmarkResult::new(TimingStats::from_samples(&[1.0], 0))
            .with_outputs(vec![tensor(received.clone())])
            .with_outputs_after_reps(vec![tensor(received)]);
        result
            .read_held(std::process::id(), &SpareBuffers::default())
            .unwrap();
        for output in result.outputs.iter().chain(&result.outputs_after_reps) {
            assert!(!output.bytes.is_held());
            assert_eq!(&output.bytes[..], &data[..]);
        }
        drop(held);
    }

    #[test]
    fn a_buffer_handed_over_is_held_without_a_copy_and_reads_back() {
        let data: Vec<u8> = (0..3 * INLINE_LIMIT).map(|i| (i % 7) as u8).collect();
        let at = data.as_ptr() as u64;
        let switch = holding(true);
        let held = Bytes::output_from_vec(data.clone()).unwrap();
        let moved = Bytes::output_from_vec(data).unwrap();
        super::hold_outputs_for_request(false);
        drop(switch);
        assert!(held.is_held() && moved.is_held());
        let mut received = sent(&moved);
        assert_eq!(
            received,
            held_at(at, 3 * INLINE_LIMIT),
            "the buffer itself, no copy"
        );
        received
            .read_held(std::process::id(), &SpareBuffers::default())
            .unwrap();
        assert_eq!(&received[..], &held[..]);
    }

    /// A buffer a read filled comes back to its reader when the last clone of its bytes
    /// drops, and the next read of its size fills it again, every byte.
    #[test]
    fn a_read_buffer_serves_the_next_read_of_its_size() {
        let len = 2 * INLINE_LIMIT + 17;
        let first_data = vec![1u8; len];
        let second_data: Vec<u8> = (0..len).map(|i| (i % 13) as u8).collect();
        let switch = holding(true);
        let first_held = Bytes::output_copy(&first_data).unwrap();
        let second_held = Bytes::output_copy(&second_data).unwrap();
        let other_size = Bytes::output_copy(&second_data[1..]).unwrap();
        super::hold_outputs_for_request(false);
        drop(switch);
        let spare = SpareBuffers::default();
        let pid = std::process::id();

        let mut first = sent(&first_held);
        first.read_held(pid, &spare).unwrap();
        let at = first.as_ptr();
        let clone = first.clone();
        drop(first);
        assert!(spare.is_empty(), "a clone still reads it");
        drop(clone);
        assert_eq!(spare.len(), 1);

        let mut smaller = sent(&other_size);
        smaller.read_held(pid, &spare).unwrap();
        assert_ne!(smaller.as_ptr(), at, "another size: a buffer of its own");
        assert_eq!(spare.len(), 1);

        let mut second = sent(&second_held);
        second.read_held(pid, &spare).unwrap();
        assert_eq!(second.as_ptr(), at, "the same buffer, filled again");
        assert_eq!(&second[..], &second_data[..]);
        assert!(spare.is_empty());
    }

    #[test]
    fn a_read_that_fails_leaves_the_bytes_held_and_says_why() {
        let data = vec![7u8; 2 * INLINE_LIMIT];
        let switch = holding(true);
        let held = Bytes::output_copy(&data).unwrap();
        super::hold_outputs_for_request(false);
        drop(switch);
        let mut received = sent(&held);
        // A pid no process has: the read fails as a worker that is gone would.
        let error = received
            .read_held(u32::MAX >> 2, &SpareBuffers::default())
            .unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ESRCH), "{error}");
        assert!(received.is_held());
    }
}
