//! Out-of-band pickle buffers (numpy arrays) as shared-memory payloads of their own.
//!
//! The Python side hands a buffer over as `(address, length)` of memory it holds alive for the
//! call (`tunebox._calls.addresses`): abi3 before CPython 3.11 has no buffer protocol, and this
//! spares the copy into a `bytes` object. Each buffer is copied once, into a shared-memory region
//! of its own that travels as a `u8` tensor of the request (or a `u8` output of the reply). The
//! receiving side does not copy it: a [`SharedView`] holds the mapping and gives Python its
//! address, which `tunebox._calls` wraps (ctypes) for the unpickled array to live on, writable,
//! as long as the array does. A region is mapped read-write (`MAP_SHARED`) on both sides; the
//! sender never reads a region again once sent, so the receiver's writes reach nobody.

use std::sync::{Mutex, PoisonError};

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyList};
use tunebox_protocol::{
    BenchError, BenchmarkRequest, Bytes, DType, Init, SharedBuffer, SharedData, TensorData,
    TensorSpec,
};

/// A buffer's address and length in bytes, as the Python side gives it.
pub(crate) type RawBuffer = (usize, usize);

/// The bytes of a buffer the Python side holds.
///
/// # Safety
///
/// `address..address + length` must be readable memory that stays alive and unchanged while
/// the returned slice is used: the caller holds the GIL and the Python objects that own it.
unsafe fn slice<'a>((address, length): RawBuffer) -> &'a [u8] {
    if length == 0 {
        return &[];
    }
    // SAFETY: the caller's contract above.
    unsafe { std::slice::from_raw_parts(address as *const u8, length) }
}

/// The buffers as `u8` tensors whose data is in shared memory, and the regions that hold them
/// (for [`keep_spare`] once the worker lets go of them).
///
/// # Safety
///
/// As [`slice`], for every buffer.
pub(crate) unsafe fn tensors(
    buffers: &[RawBuffer],
) -> PyResult<(Vec<TensorSpec>, Vec<SharedBuffer>)> {
    let mut specs = Vec::with_capacity(buffers.len());
    let mut regions = Vec::with_capacity(buffers.len());
    for (i, &buffer) in buffers.iter().enumerate() {
        // SAFETY: the caller's contract.
        let bytes = unsafe { slice(buffer) };
        let region = region_with(bytes).map_err(|e| PyOSError::new_err(e.to_string()))?;
        specs.push(
            TensorSpec::new(format!("buffer{i}"), DType::U8, [bytes.len() as u64])
                .data(region.share()),
        );
        regions.push(region);
    }
    Ok((specs, regions))
}

/// Request buffers at least this large go into a spare region when one of their size is free.
const SPARE_MIN_BYTES: usize = 1 << 20;

/// The most spare regions kept, and the most bytes they hold together.
const SPARE_MAX: usize = 4;
const SPARE_MAX_BYTES: usize = 512 << 20;

/// Regions of earlier requests' large buffers that their worker let go of (the oldest first).
///
/// Copying a buffer into a fresh region faults in every page of it (about 0.2 s for 256 MiB on
/// the 2-vCPU VM, against 0.02 s for the copy itself); a region whose pages are in place costs
/// the copy only. A spare is reused only when nothing in this process holds it any more (an
/// array the worker sent back by reference keeps it: `SharedBuffer::get_mut`) and its worker
/// said that nothing there does (the reply's release flags, see `serve`).
static SPARES: Mutex<Vec<SharedBuffer>> = Mutex::new(Vec::new());

/// A region holding a copy of `bytes`: a free spare of that size, or a fresh one.
fn region_with(bytes: &[u8]) -> std::io::Result<SharedBuffer> {
    if bytes.len() >= SPARE_MIN_BYTES {
        let mut spares = SPARES.lock().unwrap_or_else(PoisonError::into_inner);
        let free = spares
            .iter_mut()
            .position(|r| r.len() == bytes.len() && r.get_mut().is_some());
        if let Some(index) = free {
            let mut region = spares.remove(index);
            drop(spares);
            region
                .get_mut()
                .expect("no other handle: checked under the lock")
                .copy_from_slice(bytes);
            return Ok(region);
        }
    }
    SharedBuffer::from_slice(bytes)
}

/// Keeps `region` (a request's buffer its worker let go of) for a later buffer of its size,
/// dropping the oldest spares beyond [`SPARE_MAX`] or [`SPARE_MAX_BYTES`]. Small regions are
/// dropped.
pub(crate) fn keep_spare(region: SharedBuffer) {
    if region.len() < SPARE_MIN_BYTES || region.len() > SPARE_MAX_BYTES {
        return;
    }
    let mut spares = SPARES.lock().unwrap_or_else(PoisonError::into_inner);
    spares.push(region);
    while spares.len() > SPARE_MAX
        || spares.iter().map(SharedBuffer::len).sum::<usize>() > SPARE_MAX_BYTES
    {
        spares.remove(0);
    }
}

/// Which of a request's buffers (`from_request`'s list) nothing in this worker holds any more,
/// as one byte each (1: let go of), checked after the handler returned and its reply's buffers
/// were copied or placed: a buffer the task kept (in a global, in an array it returned that the
/// reply still holds) is held.
pub(crate) fn released(list: &Bound<'_, PyList>) -> Vec<u8> {
    list.iter()
        .map(|item| {
            // SAFETY: `item` is a live object (we hold a reference and the GIL).
            let references = unsafe { pyo3::ffi::Py_REFCNT(item.as_ptr()) };
            // The list's reference and `item`'s own: nothing else holds the view.
            u8::from(item.is_instance_of::<SharedView>() && references <= 2)
        })
        .collect()
}

/// A received shared-memory buffer (or a part of one), handed to Python without a copy
/// (`tunebox._native.SharedView`): `address` and `nbytes` of the mapping, which lives as long
/// as this object.
#[pyclass(frozen, module = "tunebox._native")]
pub(crate) struct SharedView {
    memory: Held,
    /// The part of the mapping this view is: `offset..offset + len`.
    offset: usize,
    len: usize,
}

/// What keeps a mapping alive.
enum Held {
    /// A request's buffer, in the worker (or, sent back, in the parent).
    Request(SharedData),
    /// A reply's buffer, in the parent.
    Reply(Bytes),
}

impl SharedView {
    fn new(memory: Held) -> SharedView {
        let len = match &memory {
            Held::Request(data) => data.len(),
            Held::Reply(bytes) => bytes.len(),
        };
        SharedView {
            memory,
            offset: 0,
            len,
        }
    }

    fn bytes(&self) -> &[u8] {
        let all: &[u8] = match &self.memory {
            Held::Request(data) => data,
            Held::Reply(bytes) => bytes,
        };
        &all[self.offset..self.offset + self.len]
    }
}

#[pymethods]
impl SharedView {
    /// The address of the first byte. Writable memory: the mapping is `PROT_READ |
    /// PROT_WRITE`, `MAP_SHARED`, and no Rust reference to it is used once handed over.
    #[getter]
    fn address(&self) -> usize {
        self.bytes().as_ptr() as usize
    }

    /// The length in bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.bytes().len()
    }
}

/// The request's buffers in order: a [`SharedView`] each (an empty `bytearray` for an empty
/// one).
pub(crate) fn from_request<'py>(
    py: Python<'py>,
    request: &BenchmarkRequest,
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for tensor in &request.tensors {
        match &tensor.init {
            Init::Data(data) if !data.is_empty() => {
                list.append(SharedView::new(Held::Request(data.clone())))?
            }
            _ => list.append(PyByteArray::new(py, &[]))?,
        }
    }
    Ok(list)
}

/// Where each buffer of a reply is: [`Place::Sent`] for one that lies in a buffer of the
/// request (an array the task got and returns, written in place or not), which goes back as a
/// reference and is not copied; [`Place::Output`] for the others, copied into `u8` outputs of
/// the reply (in shared memory when large), in order.
///
/// # Safety
///
/// As [`slice`], for every buffer.
pub(crate) unsafe fn outputs(
    buffers: &[RawBuffer],
    request: &BenchmarkRequest,
) -> Result<(Vec<Place>, Vec<TensorData>), BenchError> {
    let mut places = Vec::with_capacity(buffers.len());
    let mut outputs = Vec::new();
    for &buffer in buffers {
        if let Some(place) = sent_place(buffer, request) {
            places.push(place);
            continue;
        }
        // SAFETY: the caller's contract.
        let bytes = unsafe { slice(buffer) };
        places.push(Place::Output);
        outputs.push(TensorData::new(
            format!("buffer{}", outputs.len()),
            DType::U8,
            vec![bytes.len() as u64],
            Bytes::copy_from_slice(bytes).map_err(|e| BenchError::Failed {
                message: e.to_string(),
            })?,
        ));
    }
    Ok((places, outputs))
}

/// Where a reply's buffer is (see [`outputs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// The next of the reply's outputs.
    Output,
    /// Bytes `offset..offset + len` of the request's buffer `tensor`.
    Sent {
        tensor: usize,
        offset: usize,
        len: usize,
    },
}

impl Place {
    const BYTES: usize = 24;

    /// The places as bytes: per place `tensor + 1` (0 for an output), `offset`, `len`, each a
    /// little-endian `u64`.
    pub(crate) fn encode(places: &[Place]) -> Vec<u8> {
        let mut out = Vec::with_capacity(places.len() * Place::BYTES);
        for place in places {
            let (tensor, offset, len) = match *place {
                Place::Output => (0, 0, 0),
                Place::Sent {
                    tensor,
                    offset,
                    len,
                } => (tensor as u64 + 1, offset as u64, len as u64),
            };
            for word in [tensor, offset, len] {
                out.extend_from_slice(&word.to_le_bytes());
            }
        }
        out
    }

    /// What [`Place::encode`] wrote.
    ///
    /// # Errors
    ///
    /// A length that is not a whole number of places.
    pub(crate) fn decode(bytes: &[u8]) -> Result<Vec<Place>, String> {
        if !bytes.len().is_multiple_of(Place::BYTES) {
            return Err("malformed tunebox Python payload: buffer places".into());
        }
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize;
        Ok(bytes
            .chunks_exact(Place::BYTES)
            .map(|c| match word(&c[..8]) {
                0 => Place::Output,
                tensor => Place::Sent {
                    tensor: tensor - 1,
                    offset: word(&c[8..16]),
                    len: word(&c[16..]),
                },
            })
            .collect())
    }
}

/// The request buffer that `buffer` lies in, if any (the worker's mapping of it: the addresses
/// its [`SharedView`]s handed out).
fn sent_place((address, length): RawBuffer, request: &BenchmarkRequest) -> Option<Place> {
    if length == 0 {
        return None;
    }
    request
        .tensors
        .iter()
        .enumerate()
        .find_map(|(tensor, spec)| match &spec.init {
            Init::Data(data) => {
                let start = data.as_ptr() as usize;
                let inside = address >= start && address + length <= start + data.len();
                inside.then(|| Place::Sent {
                    tensor,
                    offset: address - start,
                    len: length,
                })
            }
            _ => None,
        })
}

/// A reply's buffers in order, as `places` says: a [`SharedView`] of the parent's own buffer
/// for one the worker sent back from the request (`sent`: the request's buffers, kept by the
/// parent), a [`SharedView`] for each output in shared memory, a `bytearray` (copied) for each
/// small output sent inline.
pub(crate) fn from_outputs<'py>(
    py: Python<'py>,
    places: &[Place],
    outputs: &[TensorData],
    sent: &[Option<SharedData>],
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    let mut outputs = outputs.iter();
    for place in places {
        match *place {
            Place::Sent {
                tensor,
                offset,
                len,
            } => {
                let data = sent
                    .get(tensor)
                    .and_then(Option::as_ref)
                    .filter(|d| offset.checked_add(len).is_some_and(|end| end <= d.len()))
                    .ok_or_else(|| {
                        PyOSError::new_err("the worker named a buffer the request did not have")
                    })?;
                list.append(SharedView {
                    memory: Held::Request(data.clone()),
                    offset,
                    len,
                })?;
            }
            Place::Output => {
                let output = outputs.next().ok_or_else(|| {
                    PyOSError::new_err("the worker's reply lacks one of its buffers")
                })?;
                if output.bytes.is_shared() {
                    // A clone maps the same pages again: no copy.
                    list.append(SharedView::new(Held::Reply(output.bytes.clone())))?;
                } else {
                    list.append(PyByteArray::new(py, &output.bytes))?;
                }
            }
        }
    }
    Ok(list)
}
