//! Tensors on the device: allocated from a spec, initialized from a host copy, restored,
//! poisoned and read back.

use tunebox_bench::HostTensor;
use tunebox_protocol::{BenchError, Bytes, Init, TensorData, TensorSpec};

use crate::driver::{DeviceBuffer, Stream};

/// One tensor of a request: its device memory and the host tensor holding its initial contents
/// (which the kernel never sees, so it stays pristine: restoring is one upload).
#[derive(Debug)]
pub(crate) struct DeviceTensor {
    spec: TensorSpec,
    host: HostTensor,
    buffer: DeviceBuffer,
}

impl DeviceTensor {
    /// Allocates the tensor on the host (initialized deterministically from the spec, as in every
    /// backend) and on the device, and enqueues the device's initialization on `stream`.
    ///
    /// # Errors
    ///
    /// [`BenchError::InvalidRequest`] for a spec that cannot be allocated on the host; a
    /// [`BenchError::DeviceFault`] (out of memory, …) from the device.
    pub(crate) fn new(spec: &TensorSpec, stream: &Stream) -> Result<Self, BenchError> {
        let host = HostTensor::allocate(spec)?;
        let buffer = DeviceBuffer::alloc(host.len(), &format!("tensor `{}`", spec.name))?;
        let tensor = Self {
            spec: spec.clone(),
            host,
            buffer,
        };
        tensor.reset(stream)?;
        Ok(tensor)
    }

    /// The spec it was made from.
    pub(crate) fn spec(&self) -> &TensorSpec {
        &self.spec
    }

    /// The device address passed to the kernel.
    pub(crate) fn device_ptr(&self) -> u64 {
        self.buffer.ptr()
    }

    /// Enqueues putting the initial contents back (a memset for zeros, else an upload of the
    /// host copy).
    pub(crate) fn reset(&self, stream: &Stream) -> Result<(), BenchError> {
        let what = format!("tensor `{}`", self.spec.name);
        if matches!(self.spec.init, Init::Zeros) {
            self.buffer.fill(stream, 0, &what)
        } else {
            self.buffer.upload(stream, self.host.bytes(), &what)
        }
    }

    /// Enqueues replacing the contents with `host`'s (the same length: a fresh draw of the same
    /// spec), without changing what [`reset`](Self::reset) puts back.
    pub(crate) fn upload(&self, host: &HostTensor, stream: &Stream) -> Result<(), BenchError> {
        self.buffer.upload(
            stream,
            host.bytes(),
            &format!("fresh inputs of tensor `{}`", self.spec.name),
        )
    }

    /// Enqueues filling the tensor with `0xFF` bytes (NaN for floats, -1 for signed integers).
    pub(crate) fn poison(&self, stream: &Stream) -> Result<(), BenchError> {
        self.buffer
            .fill(stream, 0xFF, &format!("tensor `{}`", self.spec.name))
    }

    /// The tensor's current contents (waits for the stream).
    pub(crate) fn read(&self, stream: &Stream) -> Result<Vec<u8>, BenchError> {
        self.buffer
            .download(stream, &format!("tensor `{}`", self.spec.name))
    }

    /// Whether the contents still equal the initial contents (waits for the stream).
    pub(crate) fn is_pristine(&self, stream: &Stream) -> Result<bool, BenchError> {
        Ok(self.read(stream)? == self.host.bytes())
    }

    /// The contents as [`TensorData`] to return to the parent (waits for the stream).
    pub(crate) fn to_data(&self, stream: &Stream) -> Result<TensorData, BenchError> {
        let bytes = Bytes::output_from_vec(self.read(stream)?).map_err(|e| BenchError::Failed {
            message: format!("cannot return output `{}`: {e}", self.spec.name),
        })?;
        Ok(TensorData::new(
            self.spec.name.clone(),
            self.spec.dtype,
            self.spec.shape.clone(),
            bytes,
        ))
    }
}
