//! What a device is ([`DeviceInfo`]) and what it allows ([`DeviceLimits`]).

use cudarc::driver::sys::CUdevice_attribute as A;
use tunebox_protocol::{BenchError, DeviceInfo};

use crate::driver::Device;

/// The limits of one device that a launch configuration must respect, read from the driver's
/// device attributes. [`validate_launch`](crate::validate_launch) checks a launch against them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Compute capability (major, minor), e.g. (9, 0) for an H100/H200.
    pub compute_capability: (u32, u32),
    /// Most threads in one block (1024 on every current GPU).
    pub max_threads_per_block: u32,
    /// Most threads per block in x, y, z (1024, 1024, 64).
    pub max_block_dim: [u32; 3],
    /// Most blocks per grid in x, y, z (2^31 - 1, 65535, 65535).
    pub max_grid_dim: [u32; 3],
    /// Shared memory per block, in bytes, without opting in (48 KiB).
    pub max_shared_per_block: u32,
    /// Shared memory per block, in bytes, with the opt-in attribute (227 KiB on Hopper).
    pub max_shared_per_block_optin: u32,
    /// 32-bit registers available to one block (65536).
    pub max_registers_per_block: u32,
    /// Threads per warp (32).
    pub warp_size: u32,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// L2 cache in bytes.
    pub l2_cache_bytes: u64,
}

impl DeviceLimits {
    /// The limits of a typical Hopper GPU (H100/H200: compute capability 9.0, 132 SMs, 50 MiB
    /// of L2), for tests and examples.
    pub fn hopper() -> Self {
        Self {
            compute_capability: (9, 0),
            max_threads_per_block: 1024,
            max_block_dim: [1024, 1024, 64],
            max_grid_dim: [i32::MAX as u32, 65535, 65535],
            max_shared_per_block: 48 * 1024,
            max_shared_per_block_optin: 227 * 1024,
            max_registers_per_block: 65536,
            warp_size: 32,
            sm_count: 132,
            l2_cache_bytes: 50 << 20,
        }
    }

    /// The `XY` of `sm_XY`: compute capability 9.0 is 90.
    pub fn arch(&self) -> u32 {
        self.compute_capability.0 * 10 + self.compute_capability.1
    }
}

/// Reads the limits of `device`.
pub(crate) fn limits(device: &Device) -> Result<DeviceLimits, BenchError> {
    let get = |attribute| -> Result<u32, BenchError> {
        Ok(u32::try_from(device.attribute(attribute)?).unwrap_or(0))
    };
    Ok(DeviceLimits {
        compute_capability: (
            get(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            get(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        ),
        max_threads_per_block: get(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        max_block_dim: [
            get(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
            get(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
            get(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
        ],
        max_grid_dim: [
            get(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
            get(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
            get(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
        ],
        max_shared_per_block: get(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
        max_shared_per_block_optin: get(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
        max_registers_per_block: get(A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK)?,
        warp_size: get(A::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
        sm_count: get(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        l2_cache_bytes: u64::from(get(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)?),
    })
}

/// Describes `device` for `tunebox devices` and the pool.
pub(crate) fn info(device: &Device) -> Result<DeviceInfo, BenchError> {
    let limits = limits(device)?;
    // Clock attributes are deprecated in CUDA 13 and may be refused by a future driver: report
    // 0 then rather than failing the whole listing.
    let clock = |attribute| {
        device
            .attribute(attribute)
            .ok()
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(0)
    };
    Ok(DeviceInfo::new(device.ordinal, device.name()?)
        .with_uuid(format_uuid(&device.uuid()?))
        .with_compute_capability(limits.compute_capability)
        .with_total_memory_bytes(device.total_memory()?)
        .with_l2_cache_bytes(limits.l2_cache_bytes)
        .with_sm_count(limits.sm_count)
        .with_clock_khz(clock(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE))
        .with_memory_clock_khz(clock(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)))
}

/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as `nvidia-smi -L` and `CUDA_VISIBLE_DEVICES`
/// write it.
pub(crate) fn format_uuid(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_read_as_nvidia_smi_writes_them() {
        let bytes = [
            0x8a, 0x1f, 0x6d, 0x2e, 0x3b, 0x4c, 0x5d, 0x6e, 0x7f, 0x80, 0x91, 0xa2, 0xb3, 0xc4,
            0xd5, 0xe6,
        ];
        assert_eq!(
            format_uuid(&bytes),
            "GPU-8a1f6d2e-3b4c-5d6e-7f80-91a2b3c4d5e6"
        );
    }

    #[test]
    fn arch_of_a_compute_capability() {
        assert_eq!(DeviceLimits::hopper().arch(), 90);
        let ampere = DeviceLimits {
            compute_capability: (8, 6),
            ..DeviceLimits::hopper()
        };
        assert_eq!(ampere.arch(), 86);
    }
}
