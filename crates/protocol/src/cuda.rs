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
#[non_exhaustive]
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

impl CudaKernel {
    /// Name compiler messages show for a source given to [`CudaKernel::new`].
    pub const DEFAULT_SOURCE_NAME: &'static str = "kernel.cu";

    /// The `__global__` function `entry` of the CUDA C++ `source` text (compiled by NVRTC),
    /// named `kernel.cu` in messages, with no defines, no extra options, and one block of one
    /// thread ([`LaunchConfig::default`]): set [`grid`](CudaKernel::grid) and
    /// [`block`](CudaKernel::block).
    ///
    /// ```
    /// use tunebox_protocol::CudaKernel;
    ///
    /// let n = 1u32 << 20;
    /// let kernel = CudaKernel::new("__global__ void add(float *x) { x[0] += 1; }", "add")
    ///     .define("BLOCK", 256)
    ///     .option("--use_fast_math")
    ///     .grid([n / 256, 1, 1])
    ///     .block([256, 1, 1]);
    /// assert_eq!(kernel.launch.grid, [4096, 1, 1]);
    /// assert_eq!(kernel.launch.shared_mem_bytes, 0);
    /// ```
    pub fn new(source: impl Into<String>, entry: impl Into<String>) -> Self {
        Self::from_code(
            CudaCode::Source {
                text: source.into(),
                name: Self::DEFAULT_SOURCE_NAME.into(),
            },
            entry,
        )
    }

    /// The function `entry` of `code` (source, PTX or cubin), with the defaults of
    /// [`CudaKernel::new`].
    pub fn from_code(code: CudaCode, entry: impl Into<String>) -> Self {
        CudaKernel {
            code,
            entry: entry.into(),
            defines: Vec::new(),
            options: Vec::new(),
            launch: LaunchConfig::default(),
        }
    }

    /// Appends the define `-DNAME=VALUE`, `value` as its `Display` text (sources only).
    pub fn define(mut self, name: impl Into<String>, value: impl std::fmt::Display) -> Self {
        self.defines.push(Define::new(name, value.to_string()));
        self
    }

    /// Appends one NVRTC option, e.g. `--use_fast_math` (sources only).
    pub fn option(mut self, option: impl Into<String>) -> Self {
        self.options.push(option.into());
        self
    }

    /// Renames the source in compiler messages (sources only; usually its path).
    pub fn source_name(mut self, source_name: impl Into<String>) -> Self {
        if let CudaCode::Source { name, .. } = &mut self.code {
            *name = source_name.into();
        }
        self
    }

    /// Blocks in x, y, z.
    pub fn grid(mut self, grid: [u32; 3]) -> Self {
        self.launch.grid = grid;
        self
    }

    /// Threads per block in x, y, z.
    pub fn block(mut self, block: [u32; 3]) -> Self {
        self.launch.block = block;
        self
    }

    /// Dynamic shared memory per block, in bytes (default 0).
    pub fn shared_mem_bytes(mut self, bytes: u32) -> Self {
        self.launch.shared_mem_bytes = bytes;
        self
    }

    /// Replaces the whole launch geometry.
    pub fn launch(mut self, launch: LaunchConfig) -> Self {
        self.launch = launch;
        self
    }
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
#[non_exhaustive]
pub struct LaunchConfig {
    /// Blocks in x, y, z.
    pub grid: [u32; 3],
    /// Threads per block in x, y, z.
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// `grid` blocks of `block` threads, without dynamic shared memory.
    pub fn new(grid: [u32; 3], block: [u32; 3]) -> Self {
        LaunchConfig {
            grid,
            block,
            shared_mem_bytes: 0,
        }
    }
}

setters!(LaunchConfig {
    grid => grid: [u32; 3],
    block => block: [u32; 3],
    shared_mem_bytes => shared_mem_bytes: u32,
});

impl Default for LaunchConfig {
    /// One block of one thread, without dynamic shared memory.
    fn default() -> Self {
        LaunchConfig::new([1, 1, 1], [1, 1, 1])
    }
}

/// One GPU, as a worker's backend sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
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

impl DeviceInfo {
    /// The device `index` called `name`, every other figure empty or zero: set them with the
    /// `with_*` setters (a backend of one's own describing its device).
    pub fn new(index: u32, name: impl Into<String>) -> DeviceInfo {
        DeviceInfo {
            index,
            name: name.into(),
            uuid: String::new(),
            compute_capability: (0, 0),
            total_memory_bytes: 0,
            l2_cache_bytes: 0,
            sm_count: 0,
            clock_khz: 0,
            memory_clock_khz: 0,
        }
    }
}

setters!(DeviceInfo {
    with_uuid => uuid: String,
    with_compute_capability => compute_capability: (u32, u32),
    with_total_memory_bytes => total_memory_bytes: u64,
    with_l2_cache_bytes => l2_cache_bytes: u64,
    with_sm_count => sm_count: u32,
    with_clock_khz => clock_khz: u32,
    with_memory_clock_khz => memory_clock_khz: u32,
});

/// What a worker can do: its backends and the devices they see (`RequestBody::Probe`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Probe {
    /// The worker's backends.
    pub backends: Vec<String>,
    /// Devices, per backend that has any (`"cuda"`).
    pub devices: Vec<DeviceInfo>,
    /// Backends that could not list their devices, and why (no driver, …).
    pub unavailable: Vec<(String, crate::BenchError)>,
}

impl Probe {
    /// A worker with `backends` that sees no device and had no backend fail to list its
    /// devices.
    pub fn new(backends: Vec<String>) -> Probe {
        Probe {
            backends,
            devices: Vec::new(),
            unavailable: Vec::new(),
        }
    }
}

setters!(Probe {
    with_devices => devices: Vec<DeviceInfo>,
    with_unavailable => unavailable: Vec<(String, crate::BenchError)>,
});
