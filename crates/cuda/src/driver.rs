//! Thin owners of driver objects: context, stream, events, device memory, module, function.
//!
//! Each type owns one driver handle and releases it on drop; every call checks its `CUresult`
//! and turns a failure into a [`BenchError`] that says what was being done (see
//! [`crate::fault`]). The raw `cudarc::driver::sys` functions are called directly (not cudarc's
//! safe layer), so that nothing else is enqueued on the measuring stream — cudarc's safe layer
//! records events around launches to track buffers — and so that every function called is in
//! the probe's list ([`crate::probe::DRIVER_SYMBOLS`]).
//!
//! Only construct these after [`crate::probe::driver`] succeeded: before that, a call into
//! cudarc could panic on a missing library.

use std::ffi::{CStr, CString, c_int, c_uint, c_void};
use std::ptr;

use cudarc::driver::sys as cu;
use tunebox_protocol::BenchError;

use crate::fault::CuError;
use crate::probe::describe;

/// `Ok` for `CUDA_SUCCESS`, else the [`BenchError`] for a failure while `during()`.
pub(crate) fn check(
    result: cu::CUresult,
    during: impl FnOnce() -> String,
) -> Result<(), BenchError> {
    raw(result, during).map_err(|(e, description)| e.into_bench_error(Some(description)))
}

/// `Ok` for `CUDA_SUCCESS`, else the error and the driver's description of it.
pub(crate) fn raw(
    result: cu::CUresult,
    during: impl FnOnce() -> String,
) -> Result<(), (CuError, String)> {
    if result == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err((CuError::new(result as i32, during()), describe(result)))
    }
}

/// Logs a failure of a call made while releasing a resource (nothing else can be done then;
/// after a sticky fault every call fails).
fn released(result: cu::CUresult, what: &str) {
    if result != cu::CUresult::CUDA_SUCCESS {
        log::debug!("cuda: releasing {what} failed: {result:?}");
    }
}

/// The number of visible devices.
pub(crate) fn device_count() -> Result<u32, BenchError> {
    let mut count: c_int = 0;
    // SAFETY: `count` is a valid out-pointer; the driver is initialized (see module docs).
    check(unsafe { cu::cuDeviceGetCount(&mut count) }, || {
        "counting devices".into()
    })?;
    Ok(u32::try_from(count).unwrap_or(0))
}

/// One visible device (an ordinal and its handle).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Device {
    pub(crate) ordinal: u32,
    handle: cu::CUdevice,
}

impl Device {
    /// The device with this ordinal among the visible ones.
    pub(crate) fn get(ordinal: u32) -> Result<Self, BenchError> {
        let mut handle: cu::CUdevice = 0;
        let index = c_int::try_from(ordinal).unwrap_or(c_int::MAX);
        // SAFETY: `handle` is a valid out-pointer.
        check(unsafe { cu::cuDeviceGet(&mut handle, index) }, || {
            format!("opening device {ordinal}")
        })?;
        Ok(Self { ordinal, handle })
    }

    /// An integer attribute.
    pub(crate) fn attribute(&self, attribute: cu::CUdevice_attribute) -> Result<i32, BenchError> {
        let mut value: c_int = 0;
        // SAFETY: `value` is a valid out-pointer and `handle` came from `cuDeviceGet`.
        let result = unsafe { cu::cuDeviceGetAttribute(&mut value, attribute, self.handle) };
        check(result, || {
            format!("reading {attribute:?} of device {}", self.ordinal)
        })?;
        Ok(value)
    }

    /// The marketing name.
    pub(crate) fn name(&self) -> Result<String, BenchError> {
        let mut buffer = [0 as std::ffi::c_char; 256];
        // SAFETY: the driver writes at most `buffer.len()` bytes, NUL included.
        let result =
            unsafe { cu::cuDeviceGetName(buffer.as_mut_ptr(), buffer.len() as c_int, self.handle) };
        check(result, || {
            format!("reading the name of device {}", self.ordinal)
        })?;
        let last = buffer.len() - 1;
        buffer[last] = 0;
        // SAFETY: the buffer is NUL-terminated (forced above).
        let name = unsafe { CStr::from_ptr(buffer.as_ptr()) };
        Ok(name.to_string_lossy().into_owned())
    }

    /// The 16 bytes of the device's UUID.
    pub(crate) fn uuid(&self) -> Result<[u8; 16], BenchError> {
        // SAFETY: `CUuuid` is a plain byte array; all zeros is a valid value.
        let mut uuid: cu::CUuuid = unsafe { std::mem::zeroed() };
        // SAFETY: `uuid` is a valid out-pointer.
        let result = unsafe { cu::cuDeviceGetUuid_v2(&mut uuid, self.handle) };
        check(result, || {
            format!("reading the UUID of device {}", self.ordinal)
        })?;
        Ok(uuid.bytes.map(|b| b as u8))
    }

    /// Global memory in bytes.
    pub(crate) fn total_memory(&self) -> Result<u64, BenchError> {
        let mut bytes: usize = 0;
        // SAFETY: `bytes` is a valid out-pointer.
        let result = unsafe { cu::cuDeviceTotalMem_v2(&mut bytes, self.handle) };
        check(result, || {
            format!("reading the memory size of device {}", self.ordinal)
        })?;
        Ok(bytes as u64)
    }
}

/// The device's primary context, retained (and released on drop).
#[derive(Debug)]
pub(crate) struct Context {
    device: Device,
    handle: cu::CUcontext,
}

impl Context {
    /// Retains `device`'s primary context and makes it current on this thread.
    pub(crate) fn retain(device: Device) -> Result<Self, BenchError> {
        let mut handle: cu::CUcontext = ptr::null_mut();
        // SAFETY: `handle` is a valid out-pointer and the device handle is valid.
        let result = unsafe { cu::cuDevicePrimaryCtxRetain(&mut handle, device.handle) };
        check(result, || {
            format!("creating a context on device {}", device.ordinal)
        })?;
        let context = Self { device, handle };
        context.bind()?;
        Ok(context)
    }

    /// Makes the context current on the calling thread. Every entry point of the backend calls
    /// this first: the driver's current context is per thread.
    pub(crate) fn bind(&self) -> Result<(), BenchError> {
        // SAFETY: `handle` is a retained primary context, alive until `self` drops.
        check(unsafe { cu::cuCtxSetCurrent(self.handle) }, || {
            format!(
                "making the context of device {} current",
                self.device.ordinal
            )
        })
    }

    pub(crate) fn device(&self) -> Device {
        self.device
    }

    /// Waits for everything enqueued on every stream of the context, which must be current
    /// (`cuCtxSynchronize`: device-wide, where [`Stream::synchronize`] waits for one stream);
    /// `during` names it in an error.
    pub(crate) fn synchronize(&self, during: impl FnOnce() -> String) -> Result<(), BenchError> {
        // SAFETY: takes no arguments; the context (alive while `self` is) is current, as every
        // entry point of the backend makes it.
        check(unsafe { cu::cuCtxSynchronize() }, during)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context was retained once by `retain`; this is the matching release.
        released(
            unsafe { cu::cuDevicePrimaryCtxRelease_v2(self.device.handle) },
            "the primary context",
        );
    }
}

/// A non-blocking stream (no implicit synchronization with the legacy default stream): every
/// copy, memset, launch and event of a measurement goes on it, in order.
#[derive(Debug)]
pub(crate) struct Stream {
    handle: cu::CUstream,
}

impl Stream {
    pub(crate) fn new() -> Result<Self, BenchError> {
        let mut handle: cu::CUstream = ptr::null_mut();
        // SAFETY: `handle` is a valid out-pointer; a context is current.
        let result = unsafe {
            cu::cuStreamCreate(
                &mut handle,
                cu::CUstream_flags::CU_STREAM_NON_BLOCKING as c_uint,
            )
        };
        check(result, || "creating a stream".into())?;
        Ok(Self { handle })
    }

    /// Waits for everything enqueued so far; `during` names it in an error.
    pub(crate) fn synchronize(&self, during: impl FnOnce() -> String) -> Result<(), BenchError> {
        // SAFETY: the stream is alive.
        check(unsafe { cu::cuStreamSynchronize(self.handle) }, during)
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: created by `new`, destroyed once here.
        released(unsafe { cu::cuStreamDestroy_v2(self.handle) }, "a stream");
    }
}

/// A timing event.
#[derive(Debug)]
pub(crate) struct Event {
    handle: cu::CUevent,
}

impl Event {
    pub(crate) fn new() -> Result<Self, BenchError> {
        let mut handle: cu::CUevent = ptr::null_mut();
        // SAFETY: `handle` is a valid out-pointer; a context is current. Default flags: the
        // event records timestamps.
        let result = unsafe {
            cu::cuEventCreate(&mut handle, cu::CUevent_flags::CU_EVENT_DEFAULT as c_uint)
        };
        check(result, || "creating a timing event".into())?;
        Ok(Self { handle })
    }

    /// Enqueues the event on `stream`.
    pub(crate) fn record(&self, stream: &Stream) -> Result<(), BenchError> {
        // SAFETY: both handles are alive.
        let result = unsafe { cu::cuEventRecord(self.handle, stream.handle) };
        check(result, || "recording a timing event".into())
    }

    /// Waits until the event has happened; `during` names the work it follows in an error (this
    /// is where a kernel's fault shows).
    pub(crate) fn synchronize(&self, during: impl FnOnce() -> String) -> Result<(), BenchError> {
        // SAFETY: the event is alive.
        check(unsafe { cu::cuEventSynchronize(self.handle) }, during)
    }

    /// Milliseconds from `start` to `self`, both recorded and completed.
    pub(crate) fn elapsed_since(&self, start: &Event) -> Result<f64, BenchError> {
        let mut ms: f32 = 0.0;
        // SAFETY: both events are alive and were recorded; `ms` is a valid out-pointer.
        let result = unsafe { cu::cuEventElapsedTime_v2(&mut ms, start.handle, self.handle) };
        check(result, || "reading the time between two events".into())?;
        Ok(f64::from(ms))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: created by `new`, destroyed once here.
        released(unsafe { cu::cuEventDestroy_v2(self.handle) }, "an event");
    }
}

/// Device memory (`cuMemAlloc`), freed on drop.
#[derive(Debug)]
pub(crate) struct DeviceBuffer {
    ptr: cu::CUdeviceptr,
    len: usize,
}

impl DeviceBuffer {
    /// `len` bytes (at least 1 is allocated, so that even an empty tensor has a valid pointer);
    /// `what` names the buffer in an error.
    pub(crate) fn alloc(len: usize, what: &str) -> Result<Self, BenchError> {
        let mut ptr: cu::CUdeviceptr = 0;
        // SAFETY: `ptr` is a valid out-pointer; a context is current.
        check(unsafe { cu::cuMemAlloc_v2(&mut ptr, len.max(1)) }, || {
            format!("allocating {len} bytes of device memory for {what}")
        })?;
        Ok(Self { ptr, len })
    }

    /// The device address, to pass to a kernel.
    pub(crate) fn ptr(&self) -> cu::CUdeviceptr {
        self.ptr
    }

    /// Enqueues a copy of `bytes` (exactly [`DeviceBuffer::len`] of them) into the buffer.
    ///
    /// The copy reads `bytes` when the stream gets to it; pageable host memory is staged by the
    /// driver before this returns, but the caller keeps `bytes` alive and unchanged until the
    /// stream is synchronized all the same.
    pub(crate) fn upload(
        &self,
        stream: &Stream,
        bytes: &[u8],
        what: &str,
    ) -> Result<(), BenchError> {
        assert_eq!(bytes.len(), self.len, "upload of the wrong size");
        if bytes.is_empty() {
            return Ok(());
        }
        // SAFETY: the buffer holds `len` bytes, `bytes` is `len` bytes long and outlives the
        // copy (see above), and both the buffer and the stream are alive.
        let result = unsafe {
            cu::cuMemcpyHtoDAsync_v2(self.ptr, bytes.as_ptr().cast(), bytes.len(), stream.handle)
        };
        check(result, || format!("copying {what} to the device"))
    }

    /// Copies the buffer into a new vector, synchronizing the stream first and after.
    pub(crate) fn download(&self, stream: &Stream, what: &str) -> Result<Vec<u8>, BenchError> {
        let mut bytes = vec![0u8; self.len];
        if !bytes.is_empty() {
            // SAFETY: `bytes` has room for `len` bytes, and stays alive and untouched until the
            // stream is synchronized just below.
            let result = unsafe {
                cu::cuMemcpyDtoHAsync_v2(
                    bytes.as_mut_ptr().cast(),
                    self.ptr,
                    self.len,
                    stream.handle,
                )
            };
            check(result, || format!("copying {what} from the device"))?;
        }
        stream.synchronize(|| format!("copying {what} from the device"))?;
        Ok(bytes)
    }

    /// Enqueues setting every byte to `value`.
    pub(crate) fn fill(&self, stream: &Stream, value: u8, what: &str) -> Result<(), BenchError> {
        // SAFETY: the range is the buffer's own; buffer and stream are alive.
        let result = unsafe { cu::cuMemsetD8Async(self.ptr, value, self.len, stream.handle) };
        check(result, || format!("filling {what} with {value:#04x}"))
    }

    /// Enqueues setting the first `len / 4` 32-bit words to `value` (the L2 flush).
    pub(crate) fn fill_words(&self, stream: &Stream, value: u32) -> Result<(), BenchError> {
        // SAFETY: `len / 4` words fit in the buffer; the allocation is 256-byte aligned, as
        // `cuMemsetD32` requires 4; buffer and stream are alive.
        let result = unsafe { cu::cuMemsetD32Async(self.ptr, value, self.len / 4, stream.handle) };
        check(result, || "clearing the L2 flush buffer".into())
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: allocated by `alloc`, freed once here. Work still using it was synchronized by
        // the owner (a measurement synchronizes its stream before returning).
        released(unsafe { cu::cuMemFree_v2(self.ptr) }, "device memory");
    }
}

/// What a module is loaded from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ImageKind {
    /// A cubin (ELF) for the device's architecture.
    Cubin,
    /// PTX text, compiled by the driver's JIT on load.
    Ptx,
}

/// A loaded module, unloaded on drop.
#[derive(Debug)]
pub(crate) struct Module {
    handle: cu::CUmodule,
}

/// Size of the JIT's error log buffer.
const JIT_LOG_BYTES: usize = 16 * 1024;

impl Module {
    /// Loads `image` (a cubin, or PTX text). A failure is [`BenchError::Load`] naming `origin`
    /// with the driver's message and, for PTX, the JIT's log — or a sticky
    /// [`BenchError::DeviceFault`] when the context is already lost.
    pub(crate) fn load(image: &[u8], kind: ImageKind, origin: &str) -> Result<Self, BenchError> {
        // PTX must be NUL-terminated; a cubin is read by its ELF headers.
        let owned;
        let image = match kind {
            ImageKind::Ptx if image.last() != Some(&0) => {
                owned = [image, &[0]].concat();
                &owned[..]
            }
            _ => image,
        };
        let mut log = vec![0u8; JIT_LOG_BYTES];
        let mut options = [
            cu::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
            cu::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        ];
        // Option values travel as pointer-sized words: the buffer, then its size.
        let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), JIT_LOG_BYTES as *mut c_void];
        let mut handle: cu::CUmodule = ptr::null_mut();
        // SAFETY: `image` is a complete cubin or NUL-terminated PTX that outlives the call; the
        // two options and their values match (a writable buffer of JIT_LOG_BYTES bytes, and that
        // size); `handle` is a valid out-pointer; a context is current.
        let result = unsafe {
            cu::cuModuleLoadDataEx(
                &mut handle,
                image.as_ptr().cast(),
                options.len() as c_uint,
                options.as_mut_ptr(),
                values.as_mut_ptr(),
            )
        };
        raw(result, || format!("loading the module of `{origin}`")).map_err(
            |(e, description)| {
                if e.is_sticky() {
                    return e.into_bench_error(Some(description));
                }
                let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
                let jit_log = String::from_utf8_lossy(&log[..end]).trim().to_owned();
                let name = crate::fault::error_name(e.code).unwrap_or("CUDA error");
                let mut detail = format!("{name} ({}): {description}", e.code);
                if !jit_log.is_empty() {
                    detail.push('\n');
                    detail.push_str(&jit_log);
                }
                BenchError::Load {
                    path: origin.to_owned(),
                    detail,
                }
            },
        )?;
        Ok(Self { handle })
    }

    /// The kernel `name` (a lowered, i.e. mangled or `extern "C"`, name).
    pub(crate) fn function(&self, name: &str, origin: &str) -> Result<Function, BenchError> {
        let c_name = CString::new(name).map_err(|_| BenchError::InvalidRequest {
            detail: format!("the entry `{name}` contains a NUL byte"),
        })?;
        let mut handle: cu::CUfunction = ptr::null_mut();
        // SAFETY: the module is alive; `c_name` is NUL-terminated; `handle` is an out-pointer.
        let result = unsafe { cu::cuModuleGetFunction(&mut handle, self.handle, c_name.as_ptr()) };
        raw(result, || format!("looking up kernel `{name}`")).map_err(|(e, description)| {
            if e.is_sticky() {
                e.into_bench_error(Some(description))
            } else {
                BenchError::Load {
                    path: origin.to_owned(),
                    detail: format!(
                        "no kernel `{name}` in the module ({}): a kernel compiled from C++ \
                         without `extern \"C\"` has a mangled name; give the entry as written in \
                         the source (NVRTC lowers it) or as the mangled name for PTX and cubins",
                        crate::fault::error_name(e.code).unwrap_or("CUDA error")
                    ),
                }
            }
        })?;
        Ok(Function {
            handle,
            name: name.to_owned(),
        })
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: loaded by `load`, unloaded once here, after every launch of its functions was
        // synchronized (the owner synchronizes before dropping).
        released(unsafe { cu::cuModuleUnload(self.handle) }, "a module");
    }
}

/// A kernel in a loaded [`Module`]. The handle is valid while that module is loaded: keep both
/// in one place and drop the function first.
#[derive(Debug)]
pub(crate) struct Function {
    handle: cu::CUfunction,
    name: String,
}

impl Function {
    /// The kernel's (lowered) name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// An integer attribute (registers, static shared memory, max threads per block, …).
    pub(crate) fn attribute(&self, attribute: cu::CUfunction_attribute) -> Result<i32, BenchError> {
        let mut value: c_int = 0;
        // SAFETY: the function's module is loaded; `value` is a valid out-pointer.
        let result = unsafe { cu::cuFuncGetAttribute(&mut value, attribute, self.handle) };
        check(result, || {
            format!("reading {attribute:?} of kernel `{}`", self.name)
        })?;
        Ok(value)
    }

    /// Sets an attribute (the dynamic shared memory opt-in above 48 KiB).
    pub(crate) fn set_attribute(
        &self,
        attribute: cu::CUfunction_attribute,
        value: i32,
    ) -> Result<(), BenchError> {
        // SAFETY: the function's module is loaded.
        let result = unsafe { cu::cuFuncSetAttribute(self.handle, attribute, value) };
        check(result, || {
            format!("setting {attribute:?} of kernel `{}` to {value}", self.name)
        })
    }

    /// The size in bytes of each parameter, from `cuFuncGetParamInfo` (CUDA 12.4+); `None` when
    /// the driver cannot tell.
    pub(crate) fn parameter_sizes(&self) -> Option<Vec<usize>> {
        let mut sizes = Vec::new();
        // A kernel has at most 32764 bytes of parameters, so this bound is never reached by a
        // real kernel.
        for index in 0..4096 {
            let (mut offset, mut size) = (0usize, 0usize);
            // SAFETY: the function's module is loaded; the out-pointers are valid. Only called
            // when the probe found the symbol.
            let result =
                unsafe { cu::cuFuncGetParamInfo(self.handle, index, &mut offset, &mut size) };
            match result {
                cu::CUresult::CUDA_SUCCESS => sizes.push(size),
                // Past the last parameter.
                cu::CUresult::CUDA_ERROR_INVALID_VALUE => return Some(sizes),
                _ => return None,
            }
        }
        None
    }

    /// Enqueues one launch on `stream`. `params` holds one pointer per kernel parameter, each to
    /// the parameter's value.
    ///
    /// # Safety
    ///
    /// `params` must have one valid pointer per parameter of the kernel, each pointing to at
    /// least as many readable bytes as that parameter's size; device pointers passed that way
    /// must point to live allocations (what the kernel does with them is the kernel's own
    /// behaviour, and the worker process is the isolation boundary for it).
    pub(crate) unsafe fn launch(
        &self,
        grid: [u32; 3],
        block: [u32; 3],
        shared_mem_bytes: u32,
        stream: &Stream,
        params: &mut [*mut c_void],
    ) -> Result<(), BenchError> {
        // A kernel without parameters gets a null array rather than a dangling pointer.
        let params = if params.is_empty() {
            ptr::null_mut()
        } else {
            params.as_mut_ptr()
        };
        // SAFETY: the caller guarantees `params`; the function's module is loaded; the stream
        // is alive. `extra` is null: parameters travel through `params` only.
        let result = unsafe {
            cu::cuLaunchKernel(
                self.handle,
                grid[0],
                grid[1],
                grid[2],
                block[0],
                block[1],
                block[2],
                shared_mem_bytes,
                stream.handle,
                params,
                ptr::null_mut(),
            )
        };
        check(result, || format!("launching kernel `{}`", self.name))
    }
}
