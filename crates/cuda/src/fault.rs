//! CUDA driver errors: their names, whether they leave the context unusable, and how they
//! become [`BenchError`]s.
//!
//! Everything here is a pure function of the error code, so the classification is tested on
//! machines without a GPU.

use tunebox_protocol::BenchError;

/// Whether a CUDA error leaves the context (and so the worker process) unusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stickiness {
    /// The context is corrupted: every later call fails with the same error, and only a new
    /// process can use the device again ("This leaves the process in an inconsistent state and
    /// any further CUDA work will return the same error", in the driver API's words). The worker
    /// answers and exits.
    Sticky,
    /// The call failed, the context is fine: report it and carry on in the same worker.
    Recoverable,
}

/// CUDA driver error codes and names (CUDA 13.0 `cuda.h`, `enum cudaError_enum`), with whether
/// each is sticky. Codes missing from this table are treated as sticky (see [`stickiness`]).
const ERRORS: &[(i32, &str, Stickiness)] = {
    use Stickiness::{Recoverable as R, Sticky as S};
    &[
        (1, "CUDA_ERROR_INVALID_VALUE", R),
        (2, "CUDA_ERROR_OUT_OF_MEMORY", R),
        (3, "CUDA_ERROR_NOT_INITIALIZED", R),
        // The driver is shutting down: nothing more can run in this process.
        (4, "CUDA_ERROR_DEINITIALIZED", S),
        (5, "CUDA_ERROR_PROFILER_DISABLED", R),
        (6, "CUDA_ERROR_PROFILER_NOT_INITIALIZED", R),
        (7, "CUDA_ERROR_PROFILER_ALREADY_STARTED", R),
        (8, "CUDA_ERROR_PROFILER_ALREADY_STOPPED", R),
        (34, "CUDA_ERROR_STUB_LIBRARY", R),
        (36, "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER", R),
        (46, "CUDA_ERROR_DEVICE_UNAVAILABLE", R),
        (100, "CUDA_ERROR_NO_DEVICE", R),
        (101, "CUDA_ERROR_INVALID_DEVICE", R),
        (102, "CUDA_ERROR_DEVICE_NOT_LICENSED", R),
        (200, "CUDA_ERROR_INVALID_IMAGE", R),
        (201, "CUDA_ERROR_INVALID_CONTEXT", R),
        (202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT", R),
        (205, "CUDA_ERROR_MAP_FAILED", R),
        (206, "CUDA_ERROR_UNMAP_FAILED", R),
        (207, "CUDA_ERROR_ARRAY_IS_MAPPED", R),
        (208, "CUDA_ERROR_ALREADY_MAPPED", R),
        (209, "CUDA_ERROR_NO_BINARY_FOR_GPU", R),
        (210, "CUDA_ERROR_ALREADY_ACQUIRED", R),
        (211, "CUDA_ERROR_NOT_MAPPED", R),
        (212, "CUDA_ERROR_NOT_MAPPED_AS_ARRAY", R),
        (213, "CUDA_ERROR_NOT_MAPPED_AS_POINTER", R),
        // An uncorrectable ECC error was detected during execution: the context is lost.
        (214, "CUDA_ERROR_ECC_UNCORRECTABLE", S),
        (215, "CUDA_ERROR_UNSUPPORTED_LIMIT", R),
        (216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE", R),
        (217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", R),
        (218, "CUDA_ERROR_INVALID_PTX", R),
        (219, "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT", R),
        // An uncorrectable NVLink error was detected during execution.
        (220, "CUDA_ERROR_NVLINK_UNCORRECTABLE", S),
        (221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", R),
        (222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", R),
        (223, "CUDA_ERROR_JIT_COMPILATION_DISABLED", R),
        (224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", R),
        (225, "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC", R),
        // A device exception contained by the GPU's error containment: "the process must be
        // terminated and relaunched".
        (226, "CUDA_ERROR_CONTAINED", S),
        (300, "CUDA_ERROR_INVALID_SOURCE", R),
        (301, "CUDA_ERROR_FILE_NOT_FOUND", R),
        (302, "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", R),
        (303, "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", R),
        (304, "CUDA_ERROR_OPERATING_SYSTEM", R),
        (400, "CUDA_ERROR_INVALID_HANDLE", R),
        (401, "CUDA_ERROR_ILLEGAL_STATE", R),
        (402, "CUDA_ERROR_LOSSY_QUERY", R),
        (500, "CUDA_ERROR_NOT_FOUND", R),
        (600, "CUDA_ERROR_NOT_READY", R),
        (700, "CUDA_ERROR_ILLEGAL_ADDRESS", S),
        (701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", R),
        // The kernel hit the display watchdog: "the context cannot be used".
        (702, "CUDA_ERROR_LAUNCH_TIMEOUT", S),
        (703, "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", R),
        (704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", R),
        (705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", R),
        (708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", R),
        // The context this worker uses is gone.
        (709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", S),
        (710, "CUDA_ERROR_ASSERT", S),
        (711, "CUDA_ERROR_TOO_MANY_PEERS", R),
        (712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", R),
        (713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", R),
        (714, "CUDA_ERROR_HARDWARE_STACK_ERROR", S),
        (715, "CUDA_ERROR_ILLEGAL_INSTRUCTION", S),
        (716, "CUDA_ERROR_MISALIGNED_ADDRESS", S),
        (717, "CUDA_ERROR_INVALID_ADDRESS_SPACE", S),
        (718, "CUDA_ERROR_INVALID_PC", S),
        (719, "CUDA_ERROR_LAUNCH_FAILED", S),
        (720, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", R),
        // A kernel exited with tensor memory still allocated: "the process must be terminated".
        (721, "CUDA_ERROR_TENSOR_MEMORY_LEAK", S),
        (800, "CUDA_ERROR_NOT_PERMITTED", R),
        (801, "CUDA_ERROR_NOT_SUPPORTED", R),
        (802, "CUDA_ERROR_SYSTEM_NOT_READY", R),
        (803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", R),
        (804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", R),
        (805, "CUDA_ERROR_MPS_CONNECTION_FAILED", R),
        // The connection to the MPS server broke mid-session.
        (806, "CUDA_ERROR_MPS_RPC_FAILURE", S),
        (807, "CUDA_ERROR_MPS_SERVER_NOT_READY", R),
        (808, "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED", R),
        (809, "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED", R),
        // "The MPS client has been terminated by the server": relaunch needed.
        (810, "CUDA_ERROR_MPS_CLIENT_TERMINATED", S),
        (811, "CUDA_ERROR_CDP_NOT_SUPPORTED", R),
        (812, "CUDA_ERROR_CDP_VERSION_MISMATCH", R),
        (900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", R),
        (901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", R),
        (902, "CUDA_ERROR_STREAM_CAPTURE_MERGE", R),
        (903, "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", R),
        (904, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", R),
        (905, "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", R),
        (906, "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", R),
        (907, "CUDA_ERROR_CAPTURED_EVENT", R),
        (908, "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", R),
        (909, "CUDA_ERROR_TIMEOUT", R),
        (910, "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", R),
        // "An async error has occurred in a device outside of CUDA": relaunch needed.
        (911, "CUDA_ERROR_EXTERNAL_DEVICE", S),
        (912, "CUDA_ERROR_INVALID_CLUSTER_SIZE", R),
        (913, "CUDA_ERROR_FUNCTION_NOT_LOADED", R),
        (914, "CUDA_ERROR_INVALID_RESOURCE_TYPE", R),
        (915, "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION", R),
        // A device exception during encryption key rotation: relaunch needed.
        (916, "CUDA_ERROR_KEY_ROTATION", S),
        (917, "CUDA_ERROR_STREAM_DETACHED", R),
        (918, "CUDA_ERROR_GRAPH_RECAPTURE_FAILURE", R),
        (999, "CUDA_ERROR_UNKNOWN", S),
    ]
};

/// Whether the CUDA driver error `code` leaves the context unusable.
///
/// Sticky: the device exceptions (700 illegal address, 710 assert, 714 hardware stack error,
/// 715 illegal instruction, 716 misaligned address, 717 invalid address space, 718 invalid PC,
/// 719 launch failed, 721 tensor memory leak), 702 launch timeout, 214 ECC and 220 NVLink
/// uncorrectable, 226 contained, 4 deinitialized, 709 context destroyed, 806/810 MPS failures,
/// 911 external device, 916 key rotation, 999 unknown — and any code this table does not know
/// (a newer driver's): a needless restart costs a few hundred ms, using a broken context costs
/// every later measurement. Everything else (invalid value, out of memory, launch out of
/// resources, invalid image, not found, …) is [`Stickiness::Recoverable`].
pub fn stickiness(code: i32) -> Stickiness {
    ERRORS
        .iter()
        .find(|(c, _, _)| *c == code)
        .map_or(Stickiness::Sticky, |(_, _, s)| *s)
}

/// `CUDA_ERROR_…` name of `code`, or `None` for a code this crate does not know.
pub fn error_name(code: i32) -> Option<&'static str> {
    ERRORS
        .iter()
        .find(|(c, _, _)| *c == code)
        .map(|(_, name, _)| *name)
}

/// A failed driver call: the error code and what was being done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CuError {
    /// The `CUresult`.
    pub(crate) code: i32,
    /// What the backend was doing, e.g. "waiting for kernel `matmul`".
    pub(crate) during: String,
}

impl CuError {
    pub(crate) fn new(code: i32, during: impl Into<String>) -> Self {
        Self {
            code,
            during: during.into(),
        }
    }

    pub(crate) fn is_sticky(&self) -> bool {
        stickiness(self.code) == Stickiness::Sticky
    }

    /// As a [`BenchError::DeviceFault`]; `description` is the driver's `cuGetErrorString`, when
    /// it could be had.
    pub(crate) fn into_bench_error(self, description: Option<String>) -> BenchError {
        device_fault(self.code, description.as_deref(), &self.during)
    }
}

/// The [`BenchError::DeviceFault`] for driver error `code` met while `during` (e.g. "waiting
/// for kernel `k`"), with the driver's own `description` when there is one.
pub(crate) fn device_fault(code: i32, description: Option<&str>, during: &str) -> BenchError {
    let name = error_name(code).map_or_else(|| format!("CUDA error {code}"), str::to_owned);
    let description = description.unwrap_or("no description from the driver");
    BenchError::DeviceFault {
        code,
        name,
        message: format!("{description} (while {during})"),
        sticky: stickiness(code) == Stickiness::Sticky,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_exceptions_are_sticky() {
        for code in [
            4, 214, 220, 226, 700, 702, 709, 710, 714, 715, 716, 717, 718, 719, 721, 999,
        ] {
            assert_eq!(stickiness(code), Stickiness::Sticky, "{code}");
        }
    }

    #[test]
    fn api_errors_are_recoverable() {
        for code in [
            1, 2, 100, 101, 200, 209, 218, 222, 400, 500, 600, 701, 720, 801, 909,
        ] {
            assert_eq!(stickiness(code), Stickiness::Recoverable, "{code}");
        }
    }

    #[test]
    fn unknown_codes_are_sticky_and_named_by_number() {
        assert_eq!(stickiness(12345), Stickiness::Sticky);
        assert_eq!(error_name(12345), None);
        let BenchError::DeviceFault { name, sticky, .. } = device_fault(12345, None, "x") else {
            panic!("not a device fault")
        };
        assert_eq!(name, "CUDA error 12345");
        assert!(sticky);
    }

    #[test]
    fn the_table_has_unique_codes_and_well_formed_names() {
        for (i, (code, name, _)) in ERRORS.iter().enumerate() {
            assert!(name.starts_with("CUDA_ERROR_"), "{name}");
            assert!(
                ERRORS[..i].iter().all(|(c, n, _)| c != code && n != name),
                "{code} {name} repeats"
            );
        }
        assert_eq!(error_name(700), Some("CUDA_ERROR_ILLEGAL_ADDRESS"));
        assert_eq!(error_name(710), Some("CUDA_ERROR_ASSERT"));
    }

    #[test]
    fn a_fault_ends_the_worker_only_when_sticky() {
        let fault = CuError::new(700, "waiting for kernel `k`")
            .into_bench_error(Some("an illegal memory access was encountered".into()));
        assert!(fault.ends_worker());
        assert_eq!(
            fault.to_string(),
            "device error 700 (CUDA_ERROR_ILLEGAL_ADDRESS): an illegal memory access was \
             encountered (while waiting for kernel `k`) (the context is lost; the worker restarts)"
        );
        let oom = CuError::new(2, "allocating tensor `A`").into_bench_error(None);
        assert!(!oom.ends_worker());
        assert!(
            oom.to_string().contains("CUDA_ERROR_OUT_OF_MEMORY"),
            "{oom}"
        );
    }
}
