//! The CUDA backend of tunebox: compile CUDA kernels with NVRTC into cached cubins, launch them
//! on a GPU and time them with CUDA events, in a worker that survives their faults.
//!
//! [`CudaBackend`] is the worker's [`Backend`](tunebox_bench::Backend) for
//! [`Kernel::Cuda`](tunebox_protocol::Kernel::Cuda) requests (`tunebox-worker` registers it next
//! to the cpu backend). The driver (libcuda) and NVRTC (libnvrtc) are loaded at run time through
//! cudarc's `dynamic-loading`, after a probe: a machine without them gets
//! [`BenchError::DriverUnavailable`](tunebox_protocol::BenchError::DriverUnavailable) or
//! [`BenchError::CompilerUnavailable`](tunebox_protocol::BenchError::CompilerUnavailable), never
//! a panic, and constructing the backend touches neither.
//!
//! - **Compile**: a source is compiled by NVRTC for the device's own architecture into a cubin,
//!   with the choice's defines as `-DNAME=VALUE` and the entry found through an NVRTC name
//!   expression (so C++ kernels need no `extern "C"`); PTX and cubins are loaded as given.
//!   Cubins are cached in a [`CacheDir`] (`$TUNEBOX_CACHE_DIR/cuda`).
//! - **Launch**: tensors are allocated on the device and uploaded from
//!   [`HostTensor`](tunebox_bench::HostTensor)s (the same bytes as every backend's), passed as
//!   device pointers followed by the scalars as 64-bit integers; the launch configuration is
//!   checked against [`DeviceLimits`] and the kernel's [`FunctionLimits`] first
//!   ([`validate_launch`]).
//! - **Measure**: [`do_bench`](tunebox_bench::do_bench) with CUDA events around each launch on
//!   one stream, the L2 flushed (a buffer of twice its size cleared) before every cold rep, or
//!   batches of back-to-back launches in hot mode.
//! - **Faults**: driver errors become
//!   [`BenchError::DeviceFault`](tunebox_protocol::BenchError::DeviceFault), `sticky` when the
//!   context is lost ([`stickiness`]); the worker exits after answering a sticky one.
//!
//! Neighbours: `tunebox-protocol` (the request and error types), `tunebox-bench` (the timing
//! loop and host tensors), `tunebox-worker` (which registers the backend). See `docs/gpu.md` in
//! the repository.
//!
//! # Example
//!
//! ```no_run
//! use tunebox_bench::Backend;
//! use tunebox_cuda::CudaBackend;
//! use tunebox_protocol::{BenchmarkRequest, CudaKernel, DType, TensorSpec};
//!
//! let source = r#"
//!     __global__ void scale(const float *x, float *y, long long n) {
//!         long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
//!         if (i < n) y[i] = FACTOR * x[i];
//!     }"#;
//! let n: u32 = 1 << 20;
//! let kernel = CudaKernel::new(source, "scale")
//!     .define("FACTOR", "2.0f")
//!     .grid([n / 256, 1, 1])
//!     .block([256, 1, 1]);
//! let request = BenchmarkRequest::new(kernel)
//!     .tensor(TensorSpec::new("x", DType::F32, [u64::from(n)]).random(1))
//!     .tensor(TensorSpec::new("y", DType::F32, [u64::from(n)]).output())
//!     .scalar("n", i64::from(n));
//! let mut backend = CudaBackend::new();
//! println!("{:?}", backend.devices()?);
//! let result = backend.benchmark(&request)?;
//! println!("median {:.4} ms over {} reps", result.stats.median_ms, result.stats.reps);
//! # Ok::<(), tunebox_protocol::BenchError>(())
//! ```
#![deny(missing_docs)]

mod backend;
mod cache;
mod compile;
mod device;
mod driver;
mod fault;
mod integrity;
mod launch;
mod probe;
mod tensors;
mod timing;

pub use backend::CudaBackend;
pub use device::DeviceLimits;
pub use fault::{Stickiness, error_name, stickiness};
pub use launch::{FunctionLimits, LaunchPlan, validate_launch};
pub use tunebox_bench::CacheDir;
pub use tunebox_protocol::CACHE_DIR_ENV;

#[cfg(test)]
mod tests {
    /// A worker may move its backends to another thread: the backend binds its context to the
    /// calling thread on every call.
    #[test]
    fn the_backend_is_send() {
        fn send<T: Send>() {}
        send::<crate::CudaBackend>();
    }
}
