//! CUDA kernels and GPU descriptions.

use serde::{Deserialize, Serialize};

use crate::{Bytes, Define};

/// A CUDA kernel for the worker's `cuda` backend.
///
/// The kernel is launched as `entry<<<grid, block, shared_mem_bytes>>>(tensor_0, …, tensor_n,
/// scalar_0, …, scalar_m)`: each tensor as a device pointer to its element type, each scalar as
/// a 64-bit integer (a kernel taking an `int` reads its low 32 bits, which is the value for any
/// scalar below 2^31 on these little-endian machines).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CudaKernel {
    /// The code.
    pub code: CudaCode,
    /// The `__global__` function to launch. For C++ sources it is looked up through NVRTC's
    /// name expressions, so it need not be `extern "C"`.
    pub entry: String,
    /// `-DNAME=VALUE` defines: the choice's parameters (sources only).
    pub defines: Vec<Define>,
    /// Extra NVRTC options, e.g. `["--use_fast_math", "-std=c++17"]` (sources only). The
    /// device's architecture (`--gpu-architecture=sm_XY`) is always added.
    pub options: Vec<String>,
    /// Grid, block and dynamic shared memory of every launch.
    pub launch: LaunchConfig,
}

/// What a [`CudaKernel`] is made of.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum CudaCode {
    /// CUDA C++ source, compiled by NVRTC for the device's own architecture into a cubin.
    Source {
        /// The source text.
        text: String,
        /// Name shown for it in compiler messages (usually its path).
        name: String,
    },
    /// PTX text, loaded by the driver (which compiles it for the device).
    Ptx(String),
    /// A compiled cubin for the device's architecture.
    Cubin(Bytes),
}

/// The geometry of a launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchConfig {
    /// Blocks in x, y, z.
    pub grid: [u32; 3],
    /// Threads per block in x, y, z.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
}

/// One GPU, as a worker's backend sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Index among the worker's visible devices.
    pub index: u32,
    /// Marketing name, e.g. `NVIDIA H200`.
    pub name: String,
    /// `GPU-…` UUID.
    pub uuid: String,
    /// Compute capability, major and minor.
    pub compute_capability: (u32, u32),
    /// Global memory in bytes.
    pub total_memory_bytes: u64,
    /// L2 cache in bytes.
    pub l2_cache_bytes: u64,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Peak SM clock in kHz.
    pub clock_khz: u32,
    /// Peak memory clock in kHz.
    pub memory_clock_khz: u32,
}

/// What a worker can do: its backends and the devices they see (`RequestBody::Probe`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// The worker's backends.
    pub backends: Vec<String>,
    /// Devices, per backend that has any (`"cuda"`).
    pub devices: Vec<DeviceInfo>,
    /// Backends that could not list their devices, and why (no driver, …).
    pub unavailable: Vec<(String, crate::BenchError)>,
}
