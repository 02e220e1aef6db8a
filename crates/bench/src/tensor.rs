//! Host tensors allocated and initialized from a spec.

use std::alloc::{self, Layout};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tunebox_protocol::{
    BenchError, Bytes, DType, Element, Init, SharedData, TensorData, TensorSpec,
};

use crate::huge_map::{HUGE_PAGE, HugeMap, KeptContents};
use crate::private_map::{self, PrivateMap};

/// Alignment of every host tensor in bytes: a cache line, enough for any SIMD load.
const ALIGN: usize = 64;

/// Bytes of guard zone before and after every tensor (a multiple of [`ALIGN`]).
const GUARD: usize = 4096;

/// Tensors of at least this many bytes live in transparent huge pages (2 MiB, where the kernel
/// allows them): see [`HostTensor::allocate`].
const HUGE_PAGE_MIN: usize = 1 << 20;

/// What the guard zones hold; a kernel that writes there wrote out of its tensor's bounds.
const GUARD_BYTE: u8 = 0xDB;

/// A contiguous, 64-byte aligned host buffer holding one tensor, filled from its spec's
/// [`Init`], between two 4 KiB guard zones that [`HostTensor::check_bounds`] inspects: a kernel
/// that writes even one element past either end is caught. A tensor of 1 MiB or more starts on
/// a 2 MiB boundary and is advised into transparent huge pages, so that the cache sets its
/// lines map to (set by physical addresses) are the same in every worker and every run.
///
/// `Init::Random { seed }` produces the same bytes in every process for the same spec, so a
/// reference and a candidate measured in different workers see the same inputs.
///
/// [`HostTensor::map`] instead reads a caller's shared buffer in place, copying it only when
/// written (see there).
#[derive(Debug)]
pub struct HostTensor {
    name: String,
    dtype: DType,
    shape: Vec<u64>,
    init: Init,
    /// The spec's `output` and `reset` flags.
    output: bool,
    reset_each_call: bool,
    /// The spec's `contents`, kept for [`HostTensor::spec`].
    contents: Option<SharedData>,
    storage: Storage,
    /// The first element: `GUARD` bytes into an owned allocation, or the mapping's start.
    ptr: NonNull<u8>,
    len: usize,
    /// Set on every mutable access, for a caller that must know whether a tensor may have
    /// been written ([`HostTensor::watch_writes`]).
    written: Option<Arc<AtomicBool>>,
}

/// Where a tensor's bytes live.
#[derive(Debug)]
enum Storage {
    /// An allocation of `layout` starting at `base` (the front guard zone), owned.
    Owned { base: NonNull<u8>, layout: Layout },
    /// Whole huge pages of an anonymous mapping of its own, starting at its `base` (the front
    /// guard zone), owned: a tensor of [`HUGE_PAGE_MIN`] bytes or more.
    Huge(HugeMap),
    /// The caller's shared buffer, mapped in this process, read in place and never written.
    Mapped(
        #[expect(
            dead_code,
            reason = "keeps the mapping alive while `ptr` points into it"
        )]
        SharedData,
    ),
    /// The caller's shared buffer mapped copy-on-write between two guard pages
    /// ([`PrivateMap`]): read in place, and a write copies only the page it touches. Kept for
    /// the next request that maps the same buffer when the tensor is dropped.
    Private(PrivateMap),
    /// What a dropped tensor holds once its storage was handed back ([`PrivateMap::keep`]):
    /// never read.
    Released,
}

/// Tensors given as `Init::Data` of at least this many bytes are mapped copy-on-write
/// ([`PrivateMap`]) rather than copied: well past any last-level cache, where which physical
/// pages back a tensor averages out over its many pages. (Tensors given `contents` are mapped
/// whatever their size: the caller chose.)
const PRIVATE_DATA_MIN: usize = 64 << 20;

// SAFETY: the buffer is owned exclusively by this value (like a `Vec<u8>`); moving it to another
// thread moves that ownership.
unsafe impl Send for HostTensor {}

impl HostTensor {
    /// Allocates and initializes the tensor described by `spec`.
    ///
    /// With `contents` (of the spec's length), or `Init::Data` of 64 MiB or more, at least a
    /// page long, the tensor is instead the caller's buffer mapped copy-on-write (Linux): no
    /// copy, no generator pass, no fresh pages (its part page at the end, if any, is a copy
    /// of less than a page); a kernel that writes it gets
    /// private copies of the pages it writes, which [`HostTensor::is_pristine`] finds (from
    /// `/proc/self/pagemap`, comparing those pages only) and [`HostTensor::reset`] drops. Its
    /// guard zones are pages of their own around the mapping, checked as any tensor's. Where
    /// the buffer cannot be mapped so (another OS, no `/proc`), the tensor is allocated and
    /// filled as without them.
    ///
    /// # Errors
    ///
    /// [`BenchError::InvalidRequest`] when the size overflows or exceeds the machine's physical
    /// memory (the message gives the size it would need); [`BenchError::Failed`] when the
    /// allocation itself fails.
    pub fn allocate(spec: &TensorSpec) -> Result<Self, BenchError> {
        HostTensor::allocate_kept(spec, KeptContents::Zeroed)
    }

    /// As [`HostTensor::allocate`], for an output whose contents before the kernel's call
    /// nothing reads: the kernel overwrites it (verified on the requests that return it) and
    /// this request returns it not. A large one may then take a mapping an earlier request of
    /// this worker kept as that request left it, not zeroed (a `memset`, ~15 ms per GiB); fresh
    /// memory still reads as zeros, and an init other than zeros is still written. Its reps
    /// find the output as the call before left it either way (outputs are not restored between
    /// calls, as triton's do_bench).
    ///
    /// # Errors
    ///
    /// As [`HostTensor::allocate`].
    pub fn allocate_overwritten(spec: &TensorSpec) -> Result<Self, BenchError> {
        HostTensor::allocate_kept(spec, KeptContents::AsLeft)
    }

    fn allocate_kept(spec: &TensorSpec, kept: KeptContents) -> Result<Self, BenchError> {
        let len = checked_len(spec)?;
        if let Some(tensor) = HostTensor::map_private(spec, len) {
            return Ok(tensor);
        }
        // Guard zones on both sides; `len` stays the logical size. A large tensor takes whole
        // huge pages of a mapping of its own: which physical 4 KiB pages back a buffer changes
        // from process to process, and with them the cache sets its lines map to (caches are
        // physically indexed), so a kernel's conflict misses, and its time, would differ
        // between workers; within a 2 MiB page the mapping is the same every time. Mapped
        // directly rather than allocated: in a worker that serves many requests, the
        // allocator would hand a later tensor memory an earlier one used (faulted in small
        // pages, placed as that request left it), and a kernel's time would depend on which
        // requests the worker served before.
        let size = if len >= HUGE_PAGE_MIN {
            len.checked_add(2 * GUARD)
                .and_then(|s| s.checked_next_multiple_of(HUGE_PAGE))
        } else {
            len.checked_add(2 * GUARD)
        };
        let too_large = || BenchError::InvalidRequest {
            detail: format!("tensor `{}` is too large: {len} bytes", spec.name),
        };
        let out_of_memory = || BenchError::Failed {
            message: format!(
                "out of memory allocating {len} bytes for tensor `{}`",
                spec.name
            ),
        };
        let size = size.ok_or_else(too_large)?;
        let storage = if len >= HUGE_PAGE_MIN {
            HugeMap::kept_or_new(size, kept)
                .ok_or_else(out_of_memory)
                .map(Storage::Huge)?
        } else {
            let layout = Layout::from_size_align(size, ALIGN).map_err(|_| too_large())?;
            // SAFETY: `layout` has a non-zero size.
            let raw = unsafe { alloc::alloc_zeroed(layout) };
            let base = NonNull::new(raw).ok_or_else(out_of_memory)?;
            Storage::Owned { base, layout }
        };
        let base = match &storage {
            Storage::Owned { base, .. } => *base,
            Storage::Huge(map) => map.base,
            Storage::Mapped(_) | Storage::Private(_) | Storage::Released => {
                unreachable!("allocated just above")
            }
        };
        if let Init::Data(data) = &spec.init
            && data.len() != len
        {
            return Err(BenchError::InvalidRequest {
                detail: format!(
                    "tensor `{}`: its data has {} bytes, but {} × {:?} needs {len}",
                    spec.name,
                    data.len(),
                    spec.dtype.name(),
                    spec.shape
                ),
            });
        }
        // SAFETY: `GUARD < layout.size()`, so the result stays inside the allocation.
        let ptr = unsafe { base.add(GUARD) };
        let mut tensor = HostTensor {
            name: spec.name.clone(),
            dtype: spec.dtype,
            shape: spec.shape.clone(),
            init: spec.init.clone(),
            output: spec.output,
            reset_each_call: spec.reset,
            contents: spec.contents.clone(),
            storage,
            ptr,
            len,
            written: None,
        };
        tensor.front_guard_mut().fill(GUARD_BYTE);
        tensor.back_guard_mut().fill(GUARD_BYTE);
        // The allocation is zeroed already (fresh pages of a mapping read as zeros); writing
        // zeros again would only fault in every page.
        if !matches!(tensor.init, Init::Zeros) {
            tensor.reset();
        }
        Ok(tensor)
    }

    /// The tensor of `spec`, reading a caller's shared buffer (`Init::Data`) in place instead
    /// of copying it: a 64 MiB input costs no copy and no page faults in a worker that has
    /// mapped the buffer before. The first mutable access ([`HostTensor::bytes_mut`],
    /// [`HostTensor::as_mut_slice`], [`HostTensor::as_mut_ptr`]) copies it into an allocation
    /// of its own, as [`HostTensor::allocate`] makes, so the caller's buffer is never written.
    /// A mapped tensor has no guard zones ([`HostTensor::check_bounds`] has nothing to check
    /// until it is copied), and its pages are the mapping's, not huge pages. Other inits are
    /// [`HostTensor::allocate`]d.
    ///
    /// # Errors
    ///
    /// As [`HostTensor::allocate`].
    pub fn map(spec: &TensorSpec) -> Result<Self, BenchError> {
        let Init::Data(data) = &spec.init else {
            return HostTensor::allocate(spec);
        };
        let len = checked_len(spec)?;
        if data.len() != len || len == 0 {
            return HostTensor::allocate(spec);
        }
        let ptr = NonNull::new(data.as_ptr().cast_mut()).ok_or_else(|| BenchError::Failed {
            message: format!("tensor `{}`: its shared buffer is not mapped", spec.name),
        })?;
        Ok(HostTensor {
            name: spec.name.clone(),
            dtype: spec.dtype,
            shape: spec.shape.clone(),
            init: spec.init.clone(),
            output: spec.output,
            reset_each_call: spec.reset,
            contents: spec.contents.clone(),
            storage: Storage::Mapped(data.clone()),
            ptr,
            len,
            written: None,
        })
    }

    /// `spec`'s tensor as a copy-on-write mapping of its `contents`, or of its `Init::Data`
    /// when that is large; `None` when it has neither or they cannot be mapped so.
    fn map_private(spec: &TensorSpec, len: usize) -> Option<HostTensor> {
        let source = match (&spec.contents, &spec.init) {
            (Some(contents), _) => contents,
            (None, Init::Data(data)) if len >= PRIVATE_DATA_MIN => data,
            _ => return None,
        };
        if source.len() != len || GUARD != private_map::page_size() {
            return None;
        }
        let map = PrivateMap::kept_or_new(source, GUARD)?;
        let mut tensor = HostTensor {
            name: spec.name.clone(),
            dtype: spec.dtype,
            shape: spec.shape.clone(),
            init: spec.init.clone(),
            output: spec.output,
            reset_each_call: spec.reset,
            contents: spec.contents.clone(),
            ptr: map.data(),
            len,
            storage: Storage::Private(map),
            written: None,
        };
        tensor.front_guard_mut().fill(GUARD_BYTE);
        tensor.back_guard_mut().fill(GUARD_BYTE);
        Some(tensor)
    }

    /// Makes the tensor hold `contents` (exactly its length) instead, at the same address:
    /// a copy-on-write tensor maps them in place of its pages (no copy), any other copies
    /// them. Later [`HostTensor::reset`]s of a copy-on-write tensor restore these contents;
    /// the last verification call's fresh inputs are put in so.
    ///
    /// # Errors
    ///
    /// [`BenchError::InvalidRequest`] naming the tensor when `contents` has another length.
    pub fn refill(&mut self, contents: &SharedData) -> Result<(), BenchError> {
        if contents.len() != self.len {
            return Err(BenchError::InvalidRequest {
                detail: format!(
                    "tensor `{}`: its fresh contents have {} bytes, not {}",
                    self.name,
                    contents.len(),
                    self.len
                ),
            });
        }
        if let Storage::Private(map) = &mut self.storage
            && map.remap(contents)
        {
            if let Some(written) = &self.written {
                written.store(true, Ordering::Relaxed);
            }
            return Ok(());
        }
        self.bytes_mut().copy_from_slice(contents);
        Ok(())
    }

    /// Whether the tensor reads the caller's shared buffer copy-on-write (see
    /// [`HostTensor::allocate`]).
    pub fn is_copy_on_write(&self) -> bool {
        matches!(self.storage, Storage::Private(_))
    }

    /// Whether the tensor still reads the caller's shared buffer in place ([`HostTensor::map`]).
    pub fn is_mapped(&self) -> bool {
        matches!(self.storage, Storage::Mapped(_))
    }

    /// Whether the spec marks the tensor as an output.
    pub fn is_output(&self) -> bool {
        self.output
    }

    /// Whether the spec asks for the tensor to be reset before every call (`reset = true`).
    pub fn resets_each_call(&self) -> bool {
        self.reset_each_call
    }

    /// The spec the tensor was made from (without its `fresh_contents`, which only the last
    /// verification call reads, from the request).
    pub fn spec(&self) -> TensorSpec {
        let mut spec = TensorSpec::new(self.name.clone(), self.dtype, self.shape.clone())
            .init(self.init.clone());
        spec.output = self.output;
        spec.reset = self.reset_each_call;
        spec.contents = self.contents.clone();
        spec
    }

    /// A flag that every later mutable access to this tensor sets (a `TaskContext` uses it to
    /// tell whether a timed closure may write its inputs).
    pub fn watch_writes(&mut self) -> Arc<AtomicBool> {
        self.written
            .get_or_insert_with(|| Arc::new(AtomicBool::new(false)))
            .clone()
    }

    /// Before a mutable access: notes it, and copies a mapped tensor into an allocation of its
    /// own.
    ///
    /// # Panics
    ///
    /// When the copy cannot be allocated (the worker answers the panic as the task's error).
    fn make_writable(&mut self) {
        if let Some(written) = &self.written {
            written.store(true, Ordering::Relaxed);
        }
        if self.is_mapped() {
            let owned = HostTensor::allocate(&self.spec())
                .unwrap_or_else(|e| panic!("copying mapped tensor `{}`: {e}", self.name));
            let mut owned = owned;
            owned.written = self.written.take();
            *self = owned;
        }
        if let Storage::Private(map) = &self.storage {
            map.forget_look();
        }
    }

    /// The tensor's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the tensor holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes, in native byte order.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` points to `len` initialized (zeroed, then filled) bytes inside the
        // allocation owned by `self`, borrowed shared for the returned lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutably (a mapped tensor is copied first: [`HostTensor::map`]).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.make_writable();
        // SAFETY: as in `bytes`, and `&mut self` makes the borrow exclusive; the storage is
        // owned (made so just above), never the caller's mapping.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// The elements, as a slice of `T`: a task backend reads its inputs this way.
    ///
    /// # Errors
    ///
    /// [`BenchError::InvalidRequest`] naming the tensor when its dtype is not `T`'s.
    pub fn as_slice<T: Element>(&self) -> Result<&[T], BenchError> {
        self.check_element::<T>()?;
        // SAFETY: `ptr` is 64-byte aligned and points to `len` initialized bytes, a whole number
        // of `T`s (the dtype is `T`'s); every bit pattern is a valid `T` (plain numbers), and
        // the borrow of `self` keeps the buffer alive and unchanged.
        Ok(unsafe {
            std::slice::from_raw_parts(self.ptr.as_ptr().cast::<T>(), self.len / size_of::<T>())
        })
    }

    /// The elements, as a mutable slice of `T`.
    ///
    /// # Errors
    ///
    /// As [`HostTensor::as_slice`].
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T], BenchError> {
        self.check_element::<T>()?;
        self.make_writable();
        // SAFETY: as in `as_slice`, and `&mut self` makes the borrow exclusive.
        Ok(unsafe {
            std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast::<T>(), self.len / size_of::<T>())
        })
    }

    fn check_element<T: Element>(&self) -> Result<(), BenchError> {
        if self.dtype == T::DTYPE {
            Ok(())
        } else {
            Err(BenchError::InvalidRequest {
                detail: format!(
                    "tensor `{}` holds {} elements, not {}",
                    self.name,
                    self.dtype.name(),
                    T::DTYPE.name()
                ),
            })
        }
    }

    /// Pointer to the first element, to pass to a kernel. Valid while `self` lives (a mapped
    /// tensor is copied first: [`HostTensor::map`]).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.make_writable();
        self.ptr.as_ptr()
    }

    /// Checks the guard zones around the tensor, which only a kernel writing out of bounds
    /// changes.
    ///
    /// # Errors
    ///
    /// [`BenchError::OutOfBounds`] naming the tensor, the side and how far from the tensor the
    /// first changed byte lies.
    pub fn check_bounds(&self) -> Result<(), BenchError> {
        if self.is_mapped() {
            // Never written: nothing around it can have been either.
            return Ok(());
        }
        let after = self.back_guard().iter().position(|&b| b != GUARD_BYTE);
        let before = self.front_guard().iter().rposition(|&b| b != GUARD_BYTE);
        let detail = match (after, before) {
            (None, None) => return Ok(()),
            (Some(at), _) => format!(
                "the kernel wrote past its end: byte {at} after the last of its {} bytes changed",
                self.len
            ),
            (None, Some(at)) => format!(
                "the kernel wrote before its start: byte {} before the first changed",
                GUARD - at
            ),
        };
        Err(BenchError::OutOfBounds {
            tensor: self.name.clone(),
            detail,
        })
    }

    /// The start of the owned allocation (only called on owned tensors: `check_bounds` and
    /// `allocate` return before for mapped ones).
    fn base(&self) -> NonNull<u8> {
        match &self.storage {
            Storage::Owned { base, .. } => *base,
            Storage::Huge(map) => map.base,
            Storage::Private(map) => map.base(),
            Storage::Mapped(_) => unreachable!("mapped tensors have no guard zones"),
            Storage::Released => unreachable!("a released tensor is being dropped"),
        }
    }

    fn front_guard(&self) -> &[u8] {
        // SAFETY: the first `GUARD` bytes of the allocation, initialized at allocation.
        unsafe { std::slice::from_raw_parts(self.base().as_ptr(), GUARD) }
    }

    fn back_guard(&self) -> &[u8] {
        // SAFETY: the `GUARD` bytes after the tensor, the end of the allocation.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(self.len), GUARD) }
    }

    fn front_guard_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `front_guard`, borrowed exclusively through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.base().as_ptr(), GUARD) }
    }

    fn back_guard_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `back_guard`, borrowed exclusively through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(self.len), GUARD) }
    }

    /// Fills the tensor with `0xFF` bytes: NaN for floats, -1 for signed integers, 255 for bytes.
    /// Values a correct kernel overwrites and a verification never mistakes for a result.
    pub fn poison(&mut self) {
        self.bytes_mut().fill(0xFF);
    }

    /// A copy of the contents, to send back to the parent: into shared memory when large, or
    /// held in the worker's memory for the parent to read when the request says so
    /// ([`Bytes::output_copy`]).
    ///
    /// # Errors
    ///
    /// [`BenchError::Failed`] when the copy's memory cannot be made.
    pub fn to_data(&self) -> Result<TensorData, BenchError> {
        let bytes = Bytes::output_copy(self.bytes()).map_err(|e| BenchError::Failed {
            message: format!("cannot return output `{}`: {e}", self.name),
        })?;
        Ok(TensorData::new(
            self.name.clone(),
            self.dtype,
            self.shape.clone(),
            bytes,
        ))
    }

    /// Writes the spec's initial contents again (for `reset` tensors and restored inputs). A
    /// mapped tensor holds them already.
    pub fn reset(&mut self) {
        if self.is_mapped() {
            return;
        }
        if let Storage::Private(map) = &self.storage {
            // Dropping the private copies of written pages reads the caller's again.
            map.drop_written();
            return;
        }
        let init = std::mem::replace(&mut self.init, Init::Zeros);
        // SAFETY: the storage is owned (checked above): `len` bytes at `ptr`, borrowed
        // exclusively through `&mut self`. Not `bytes_mut`: putting the initial contents back
        // is no write of the task's.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) };
        init.fill(self.dtype, bytes);
        self.init = init;
    }

    /// Whether the contents still equal the spec's initial contents (to detect a kernel that
    /// writes an input). Costs one pass over the tensor (and a regeneration for random ones);
    /// a copy-on-write tensor ([`HostTensor::allocate`]) compares only the pages written.
    pub fn is_pristine(&self) -> bool {
        if self.is_mapped() {
            return true;
        }
        if let Storage::Private(map) = &self.storage {
            // Only the pages the process wrote can differ from the caller's.
            return map.unchanged();
        }
        match &self.init {
            Init::Zeros => self.bytes().iter().all(|&b| b == 0),
            Init::Data(data) => **data == *self.bytes(),
            init => {
                let mut fresh = vec![0u8; self.len];
                init.fill(self.dtype, &mut fresh);
                fresh == self.bytes()
            }
        }
    }
}

impl Drop for HostTensor {
    fn drop(&mut self) {
        match std::mem::replace(&mut self.storage, Storage::Released) {
            // Kept for the next request that maps the same buffer, restored.
            Storage::Private(map) => map.keep(),
            Storage::Owned { base, layout } => {
                // SAFETY: `base` was returned by `alloc_zeroed(layout)` and is freed only here.
                unsafe { alloc::dealloc(base.as_ptr(), layout) }
            }
            // A large one kept for the next tensor of its size, or unmapped.
            Storage::Huge(map) => map.keep(),
            // A mapped buffer is the caller's.
            Storage::Mapped(_) | Storage::Released => {}
        }
    }
}

/// The spec's size in bytes, refused when it overflows or cannot fit in this machine's memory.
fn checked_len(spec: &TensorSpec) -> Result<usize, BenchError> {
    let invalid = |detail: String| BenchError::InvalidRequest { detail };
    let bytes = spec.byte_len().ok_or_else(|| {
        invalid(format!(
            "tensor `{}` with shape {:?} has more bytes than fit in 64 bits",
            spec.name, spec.shape
        ))
    })?;
    if let Some(physical) = physical_memory_bytes()
        && bytes > physical
    {
        return Err(invalid(format!(
            "tensor `{}` ({} {:?}) needs {bytes} bytes ({:.1} GiB) but this machine has {:.1} GiB \
             of memory; reduce its shape",
            spec.name,
            spec.dtype.name(),
            spec.shape,
            bytes as f64 / GIB,
            physical as f64 / GIB,
        )));
    }
    usize::try_from(bytes).map_err(|_| invalid(format!("tensor `{}` is too large", spec.name)))
}

const GIB: f64 = (1u64 << 30) as f64;

/// Total physical memory from `/proc/meminfo`, or `None` where it cannot be read
/// ([`tunebox_protocol::physical_memory_bytes`], which the parent's sizes use too).
pub fn physical_memory_bytes() -> Option<u64> {
    tunebox_protocol::physical_memory_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(dtype: DType, shape: &[u64], init: Init) -> TensorSpec {
        TensorSpec::new("t", dtype, shape.to_vec()).init(init)
    }

    #[test]
    fn writes_just_outside_a_tensor_are_caught_on_either_side() {
        for shape in [&[1u64][..], &[3], &[1000]] {
            let mut t = HostTensor::allocate(&spec(DType::F32, shape, Init::Ones)).unwrap();
            assert_eq!(t.as_mut_ptr() as usize % ALIGN, 0);
            t.check_bounds().unwrap();
            t.bytes_mut().fill(7);
            t.check_bounds().expect("writes inside are fine");
            let len = t.len();
            // SAFETY: the guard zones are part of the allocation; this plays a buggy kernel.
            unsafe { *t.as_mut_ptr().add(len) = 0 };
            let err = t.check_bounds().unwrap_err();
            assert!(
                matches!(&err, BenchError::OutOfBounds { tensor, detail }
                    if tensor == "t" && detail.contains("past its end: byte 0 after")),
                "{err}"
            );
            let mut t = HostTensor::allocate(&spec(DType::F32, shape, Init::Zeros)).unwrap();
            // SAFETY: as above, one element before the start.
            unsafe { *t.as_mut_ptr().sub(4) = 1 };
            let err = t.check_bounds().unwrap_err();
            assert!(
                err.to_string().contains("before its start: byte 4 before"),
                "{err}"
            );
        }
    }

    #[test]
    fn typed_slices_check_the_dtype() {
        let mut t = HostTensor::allocate(&spec(DType::F32, &[2, 3], Init::Ones)).unwrap();
        assert_eq!(t.as_slice::<f32>().unwrap(), &[1.0; 6]);
        t.as_mut_slice::<f32>().unwrap()[5] = 7.5;
        assert_eq!(t.as_slice::<f32>().unwrap()[5], 7.5);
        let err = t.as_slice::<i32>().unwrap_err().to_string();
        assert!(
            err.contains("tensor `t` holds f32 elements, not i32"),
            "{err}"
        );
        let empty = HostTensor::allocate(&spec(DType::I64, &[0], Init::Zeros)).unwrap();
        assert!(empty.as_slice::<i64>().unwrap().is_empty());
    }

    #[test]
    fn init_kinds() {
        let zeros = HostTensor::allocate(&spec(DType::F32, &[3, 4], Init::Zeros)).unwrap();
        assert_eq!(zeros.len(), 48);
        assert!(zeros.bytes().iter().all(|&b| b == 0));
        let ones = HostTensor::allocate(&spec(DType::I64, &[5], Init::Ones)).unwrap();
        assert_eq!(ones.bytes()[..8], 1i64.to_ne_bytes());
        assert_eq!(ones.bytes()[32..], 1i64.to_ne_bytes());
        assert_eq!(ones.to_data().unwrap().shape, vec![5]);
    }

    #[test]
    fn random_is_reproducible_and_in_range() {
        let s = spec(DType::F64, &[1000], Init::Random { seed: 7 });
        let a = HostTensor::allocate(&s).unwrap();
        let b = HostTensor::allocate(&s).unwrap();
        assert_eq!(a.bytes(), b.bytes());
        let other = HostTensor::allocate(&spec(DType::F64, &[1000], Init::Random { seed: 8 }));
        assert_ne!(a.bytes(), other.unwrap().bytes());
        for chunk in a.bytes().chunks_exact(8) {
            let v = f64::from_ne_bytes(chunk.try_into().unwrap());
            assert!((-1.0..1.0).contains(&v), "{v}");
        }
    }

    #[test]
    fn data_init_copies_the_callers_bytes_and_checks_the_size() {
        let mut buffer = tunebox_protocol::SharedBuffer::new(8).unwrap();
        buffer
            .get_mut()
            .unwrap()
            .copy_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0]);
        let mut t =
            HostTensor::allocate(&spec(DType::I32, &[2], Init::Data(buffer.share()))).unwrap();
        assert_eq!(t.bytes(), &[1, 0, 0, 0, 2, 0, 0, 0]);
        assert!(t.is_pristine());
        t.bytes_mut()[0] = 9;
        assert!(!t.is_pristine());
        t.reset();
        assert!(t.is_pristine());
        let err =
            HostTensor::allocate(&spec(DType::I32, &[3], Init::Data(buffer.share()))).unwrap_err();
        assert!(
            err.to_string()
                .contains("has 8 bytes, but i32 × [3] needs 12"),
            "{err}"
        );
    }

    #[test]
    fn random_tensors_know_when_they_were_written() {
        let mut t =
            HostTensor::allocate(&spec(DType::F32, &[64], Init::Random { seed: 3 })).unwrap();
        assert!(t.is_pristine());
        t.bytes_mut()[5] ^= 1;
        assert!(!t.is_pristine());
        t.reset();
        assert!(t.is_pristine());
    }

    /// A random f32 tensor of `shape`, its contents made once, and the same spec given them.
    fn random_with_contents(
        shape: &[u64],
        seed: u64,
    ) -> (TensorSpec, tunebox_protocol::SharedBuffer, TensorSpec) {
        let random = spec(DType::F32, shape, Init::Random { seed });
        let made = random.make_contents().unwrap();
        let mut with = random.clone();
        with.contents = Some(made.share());
        (random, made, with)
    }

    #[test]
    fn tensors_given_contents_map_them_copy_on_write() {
        let (random, made, with) = random_with_contents(&[1 << 16], 11);
        let mut t = HostTensor::allocate(&with).unwrap();
        assert!(t.is_copy_on_write());
        let generated = HostTensor::allocate(&random).unwrap();
        assert!(!generated.is_copy_on_write());
        assert_eq!(t.bytes(), generated.bytes(), "the same bytes either way");
        assert!(t.is_pristine());
        t.check_bounds().unwrap();
        // A kernel writing its input writes a private copy: the caller's stays as it was.
        let ptr = t.as_mut_ptr();
        // SAFETY: inside the tensor; plays a kernel that writes its input.
        unsafe { *ptr.add(70_000) ^= 1 };
        assert!(!t.is_pristine());
        assert_eq!(made.as_slice(), generated.bytes());
        t.reset();
        assert!(t.is_pristine());
        assert_eq!(t.bytes(), generated.bytes());
        // Its guard zones catch writes out of bounds as any tensor's.
        let len = t.len();
        // SAFETY: the guard page after the mapping is part of the reservation.
        unsafe { *t.as_mut_ptr().add(len) = 0 };
        assert!(matches!(
            t.check_bounds(),
            Err(BenchError::OutOfBounds { .. })
        ));
        // Contents of another length are not used: the tensor is filled from its init.
        let short = {
            let mut v = spec(DType::F32, &[1 << 15], Init::Random { seed: 11 });
            v.contents = Some(made.share());
            v
        };
        let t = HostTensor::allocate(&short).unwrap();
        assert!(!t.is_copy_on_write());
        assert_eq!(t.bytes(), &generated.bytes()[..1 << 17]);
    }

    /// A tensor whose size ends within a page (most do) maps its contents too, its last part
    /// page a copy: written, it is found and restored; the guard right after it holds.
    #[test]
    fn a_tensor_ending_within_a_page_maps_its_contents_too() {
        let (random, _made, with) = random_with_contents(&[(1 << 16) + 25], 13);
        let mut t = HostTensor::allocate(&with).unwrap();
        assert!(t.is_copy_on_write());
        let generated = HostTensor::allocate(&random).unwrap();
        assert_eq!(t.bytes(), generated.bytes());
        assert!(t.is_pristine());
        t.check_bounds().unwrap();
        let len = t.len();
        assert_ne!(len % private_map::page_size(), 0);
        // SAFETY: the tensor's last byte, in its copied tail.
        unsafe { *t.as_mut_ptr().add(len - 1) ^= 1 };
        assert!(!t.is_pristine());
        t.reset();
        assert!(t.is_pristine());
        assert_eq!(t.bytes(), generated.bytes());
        t.check_bounds().unwrap();
        // SAFETY: the first byte after the tensor, in its back guard zone.
        unsafe { *t.as_mut_ptr().add(len) = 0 };
        assert!(matches!(
            t.check_bounds(),
            Err(BenchError::OutOfBounds { .. })
        ));
    }

    /// A worker that serves many requests maps a large input once: a tensor of the same
    /// contents made after one is dropped reads the kept mapping, as the caller's buffer
    /// again whatever the first one wrote, guards included.
    #[test]
    fn a_dropped_tensors_mapping_serves_the_next_request_restored() {
        let (_, made, with) = random_with_contents(&[1 << 16], 12);
        let mut first = HostTensor::allocate(&with).unwrap();
        let address = first.as_mut_ptr();
        let len = first.len();
        // SAFETY: inside the tensor, and one byte into its back guard: a kernel that writes its
        // input and past it.
        unsafe {
            *address.add(1_000) ^= 1;
            *address.add(len) = 0;
        }
        drop(first);
        let mut again = HostTensor::allocate(&with).unwrap();
        assert!(again.is_copy_on_write());
        assert_eq!(again.as_mut_ptr(), address, "the kept mapping");
        assert!(again.is_pristine());
        assert_eq!(again.bytes(), made.as_slice());
        again.check_bounds().unwrap();
    }

    /// A task that leaves its input read-only or with no access at all (an `mprotect` in a
    /// library's destructor, say) does not leave it so for the next request that maps the same
    /// buffer: the kept mapping is made readable and writable again, guards included.
    #[test]
    fn a_kept_mapping_gets_its_protection_back() {
        let (_, made, with) = random_with_contents(&[(1 << 16) + 7], 14);
        for protection in [libc::PROT_NONE, libc::PROT_READ] {
            let mut first = HostTensor::allocate(&with).unwrap();
            let address = first.as_mut_ptr();
            let page = private_map::page_size();
            // The whole reservation: front guard, data, tail and back guard.
            let (start, bytes) = (address as usize - page, first.len().next_multiple_of(page));
            // SAFETY: the pages of the tensor's own reservation, which nothing else uses: a
            // task changing their protection.
            let done =
                unsafe { libc::mprotect(start as *mut libc::c_void, bytes + 2 * page, protection) };
            assert_eq!(done, 0);
            drop(first);
            let mut again = HostTensor::allocate(&with).unwrap();
            assert!(again.is_pristine());
            assert_eq!(again.bytes(), made.as_slice());
            again.check_bounds().unwrap();
            let len = again.len();
            // SAFETY: inside the tensor: a kernel that writes its input.
            unsafe { *again.as_mut_ptr().add(len / 2) ^= 1 };
            again.reset();
            assert!(again.is_pristine());
        }
    }

    /// A task that maps something else over its input (or unmaps part of it) does not hand
    /// that to the next request of the same buffer: the mapping is not kept.
    #[test]
    fn a_mapping_a_task_replaced_or_cut_is_not_kept() {
        let (_, made, with) = random_with_contents(&[1 << 16], 15);
        let page = private_map::page_size();
        for unmap in [false, true] {
            let mut first = HostTensor::allocate(&with).unwrap();
            let at = first.as_mut_ptr().wrapping_add(4 * page);
            // SAFETY: four pages inside the tensor's own reservation, which nothing else
            // uses: a task replacing them with zeros of its own, or unmapping them.
            let done = unsafe {
                if unmap {
                    libc::munmap(at.cast(), 4 * page)
                } else {
                    let m = libc::mmap(
                        at.cast(),
                        4 * page,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                        -1,
                        0,
                    );
                    if m == libc::MAP_FAILED { -1 } else { 0 }
                }
            };
            assert_eq!(done, 0);
            drop(first);
            let again = HostTensor::allocate(&with).unwrap();
            assert!(again.is_pristine(), "unmap {unmap}");
            assert_eq!(again.bytes(), made.as_slice(), "unmap {unmap}");
            again.check_bounds().unwrap();
        }
    }

    #[test]
    fn poison_is_nan_for_floats() {
        let mut t = HostTensor::allocate(&spec(DType::F32, &[4], Init::Ones)).unwrap();
        t.poison();
        let first = f32::from_ne_bytes(t.bytes()[..4].try_into().unwrap());
        assert!(first.is_nan());
    }

    #[test]
    fn empty_and_aligned() {
        let mut t = HostTensor::allocate(&spec(DType::U8, &[0, 10], Init::Ones)).unwrap();
        assert!(t.is_empty());
        assert_eq!(t.as_mut_ptr() as usize % ALIGN, 0);
    }

    #[test]
    fn large_tensors_sit_at_the_same_place_in_a_huge_page() {
        // 1 MiB and more: the allocation starts on a 2 MiB boundary, so the data (after the
        // front guard) has the same offset in its huge page in every process.
        for elements in [1 << 18, 3 << 19] {
            let mut t =
                HostTensor::allocate(&spec(DType::F32, &[elements], Init::Random { seed: 3 }))
                    .unwrap();
            assert_eq!(t.as_mut_ptr() as usize % HUGE_PAGE, GUARD);
            // Filled after the zeroing that faults the pages in.
            assert!(t.bytes().iter().any(|&b| b != 0));
            t.check_bounds().unwrap();
        }
        // Smaller ones keep the plain alignment.
        let mut small = HostTensor::allocate(&spec(DType::F32, &[1000], Init::Zeros)).unwrap();
        assert_eq!(small.as_mut_ptr() as usize % ALIGN, 0);
        assert!(small.bytes().iter().all(|&b| b == 0));
    }

    #[test]
    fn huge_shapes_fail_before_allocating() {
        let err =
            HostTensor::allocate(&spec(DType::F32, &[1 << 40, 1 << 30], Init::Zeros)).unwrap_err();
        assert!(err.to_string().contains("64 bits"), "{err}");
        let err =
            HostTensor::allocate(&spec(DType::F32, &[1 << 20, 1 << 20], Init::Zeros)).unwrap_err();
        assert!(
            err.to_string().contains("needs 4398046511104 bytes"),
            "{err}"
        );
    }
}
