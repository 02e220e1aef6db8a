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

/// The buffers as `u8` tensors whose data is in shared memory.
///
/// # Safety
///
/// As [`slice`], for every buffer.
pub(crate) unsafe fn tensors(buffers: &[RawBuffer]) -> PyResult<Vec<TensorSpec>> {
    let mut specs = Vec::with_capacity(buffers.len());
    for (i, &buffer) in buffers.iter().enumerate() {
        // SAFETY: the caller's contract.
        let bytes = unsafe { slice(buffer) };
        let shared =
            SharedBuffer::from_slice(bytes).map_err(|e| PyOSError::new_err(e.to_string()))?;
        specs.push(
            TensorSpec::new(format!("buffer{i}"), DType::U8, [bytes.len() as u64])
                .data(shared.share()),
        );
    }
    Ok(specs)
}

/// A received shared-memory buffer, handed to Python without a copy
/// (`tunebox._native.SharedView`): `address` and `nbytes` of the mapping, which lives as long
/// as this object.
#[pyclass(frozen, module = "tunebox._native")]
pub(crate) struct SharedView {
    memory: Held,
}

/// What keeps a mapping alive.
enum Held {
    /// A request's buffer, in the worker.
    Request(SharedData),
    /// A reply's buffer, in the parent.
    Reply(Bytes),
}

impl SharedView {
    fn bytes(&self) -> &[u8] {
        match &self.memory {
            Held::Request(data) => data,
            Held::Reply(bytes) => bytes,
        }
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
            Init::Data(data) if !data.is_empty() => list.append(SharedView {
                memory: Held::Request(data.clone()),
            })?,
            _ => list.append(PyByteArray::new(py, &[]))?,
        }
    }
    Ok(list)
}

/// The buffers as `u8` outputs of a reply.
///
/// # Safety
///
/// As [`slice`], for every buffer.
pub(crate) unsafe fn outputs(buffers: &[RawBuffer]) -> Result<Vec<TensorData>, BenchError> {
    let mut outputs = Vec::with_capacity(buffers.len());
    for (i, &buffer) in buffers.iter().enumerate() {
        // SAFETY: the caller's contract.
        let bytes = unsafe { slice(buffer) };
        outputs.push(TensorData {
            name: format!("buffer{i}"),
            dtype: DType::U8,
            shape: vec![bytes.len() as u64],
            bytes: Bytes::copy_from_slice(bytes).map_err(|e| BenchError::Failed {
                message: e.to_string(),
            })?,
        });
    }
    Ok(outputs)
}

/// A reply's buffers in order: a [`SharedView`] for each one in shared memory, a `bytearray`
/// (copied) for each small one sent inline.
pub(crate) fn from_outputs<'py>(
    py: Python<'py>,
    outputs: &[TensorData],
) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for output in outputs {
        if output.bytes.is_shared() {
            // A clone maps the same pages again: no copy.
            list.append(SharedView {
                memory: Held::Reply(output.bytes.clone()),
            })?;
        } else {
            list.append(PyByteArray::new(py, &output.bytes))?;
        }
    }
    Ok(list)
}
