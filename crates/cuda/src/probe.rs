//! Finding libcuda and libnvrtc at run time, before cudarc touches them.
//!
//! cudarc (with `dynamic-loading`) opens each library on the first call into it and **panics**
//! when the library, or any one function, is missing. So before the first driver (or NVRTC)
//! call, this module opens the library exactly as cudarc will — the first name of
//! `cudarc::get_lib_name_candidates` that `dlopen` accepts — and checks that every function this
//! crate calls is there. Absence becomes [`BenchError::DriverUnavailable`] or
//! [`BenchError::CompilerUnavailable`], never a panic. The outcome is kept for the life of the
//! process (the libraries are process-wide), so each probe runs at most once.

use std::ffi::{c_char, c_int};
use std::sync::OnceLock;

use cudarc::driver::sys as cu;
use cudarc::nvrtc::sys as nvrtc;
use tunebox_protocol::BenchError;

use crate::fault::error_name;

/// The library reported as missing when no driver library opens at all.
pub(crate) const DRIVER_LIBRARY: &str = "libcuda.so.1";

/// Every driver function this crate calls (each `sys::cu…(` in its source; a unit test checks
/// the list against the source).
pub(crate) const DRIVER_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuGetErrorName",
    "cuGetErrorString",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetUuid_v2",
    "cuDeviceTotalMem_v2",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuCtxSynchronize",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamSynchronize",
    "cuEventCreate",
    "cuEventDestroy_v2",
    "cuEventRecord",
    "cuEventSynchronize",
    "cuEventElapsedTime_v2",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemsetD8Async",
    "cuMemsetD32Async",
    "cuModuleLoadDataEx",
    "cuModuleUnload",
    "cuModuleGetFunction",
    "cuFuncGetAttribute",
    "cuFuncSetAttribute",
    "cuLaunchKernel",
];

/// Driver functions used when present (a driver older than the one that introduced them still
/// works, with a check fewer).
pub(crate) const OPTIONAL_DRIVER_SYMBOLS: &[&str] = &[
    // CUDA 12.4+: the kernel's parameter layout, to check the argument count before launching.
    "cuFuncGetParamInfo",
];

/// Every NVRTC function this crate calls.
pub(crate) const NVRTC_SYMBOLS: &[&str] = &[
    "nvrtcVersion",
    "nvrtcGetErrorString",
    "nvrtcGetNumSupportedArchs",
    "nvrtcGetSupportedArchs",
    "nvrtcCreateProgram",
    "nvrtcDestroyProgram",
    "nvrtcAddNameExpression",
    "nvrtcCompileProgram",
    "nvrtcGetProgramLogSize",
    "nvrtcGetProgramLog",
    "nvrtcGetLoweredName",
    "nvrtcGetCUBINSize",
    "nvrtcGetCUBIN",
    "nvrtcGetPTXSize",
    "nvrtcGetPTX",
];

/// The driver, found and initialized (`cuInit` succeeded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Driver {
    /// The library name that opened, e.g. `libcuda.so.1`.
    pub(crate) library: String,
    /// `cuDriverGetVersion`, e.g. 13000 for CUDA 13.0.
    pub(crate) version: i32,
    /// Whether `cuFuncGetParamInfo` can be called.
    pub(crate) has_param_info: bool,
}

/// NVRTC, found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Nvrtc {
    /// The library name that opened, e.g. `libnvrtc.so.13`.
    pub(crate) library: String,
    /// `nvrtcVersion`: (major, minor).
    pub(crate) version: (i32, i32),
    /// `nvrtcGetSupportedArchs`: the `sm_XY` it can compile for, as `XY`, ascending.
    pub(crate) archs: Vec<u32>,
}

/// The driver, probed and initialized once per process.
///
/// # Errors
///
/// [`BenchError::DriverUnavailable`] when no driver library opens, one lacks a function this
/// crate calls (a driver older than CUDA 13.0), or `cuInit` fails (no device, a stub library).
pub(crate) fn driver() -> Result<&'static Driver, BenchError> {
    static DRIVER: OnceLock<Result<Driver, BenchError>> = OnceLock::new();
    DRIVER
        .get_or_init(probe_driver)
        .as_ref()
        .map_err(Clone::clone)
}

/// NVRTC, probed once per process.
///
/// # Errors
///
/// [`BenchError::CompilerUnavailable`] when no NVRTC library opens or one lacks a function this
/// crate calls.
pub(crate) fn nvrtc() -> Result<&'static Nvrtc, BenchError> {
    static NVRTC: OnceLock<Result<Nvrtc, BenchError>> = OnceLock::new();
    NVRTC
        .get_or_init(probe_nvrtc)
        .as_ref()
        .map_err(Clone::clone)
}

/// The first of cudarc's candidate names for `name` that opens, as cudarc itself picks it, with
/// the symbols of `required` and which of `optional` it has; or why none would do.
struct Opened {
    library: String,
    optional: Vec<bool>,
}

enum OpenError {
    /// No candidate opened: the names tried and the loader's message for the usual name.
    NotFound { tried: Vec<String>, message: String },
    /// The library opened but lacks a required function.
    MissingSymbol { library: String, symbol: String },
}

fn open(
    name: &str,
    usual: &str,
    required: &[&str],
    optional: &[&str],
) -> Result<Opened, OpenError> {
    let candidates = cudarc::get_lib_name_candidates(name);
    let mut usual_message = None;
    for candidate in &candidates {
        // SAFETY: opening a shared library runs its initializers. These are the libraries cudarc
        // would open for the same calls (the same names, in the same order); opening them is what
        // this backend exists for, and the worker process is the isolation boundary.
        match unsafe { libloading::Library::new(candidate) } {
            Ok(library) => {
                for symbol in required {
                    // SAFETY: only the symbol's presence is checked; the pointer is never
                    // called or dereferenced.
                    if unsafe { library.get::<*const ()>(symbol.as_bytes()) }.is_err() {
                        return Err(OpenError::MissingSymbol {
                            library: candidate.clone(),
                            symbol: (*symbol).to_owned(),
                        });
                    }
                }
                let optional = optional
                    .iter()
                    // SAFETY: as above, presence only.
                    .map(|symbol| unsafe { library.get::<*const ()>(symbol.as_bytes()) }.is_ok())
                    .collect();
                // Keep the library loaded for the life of the process: cudarc opens the same one
                // and never closes it, so nothing is lost, and no initializer runs twice.
                std::mem::forget(library);
                return Ok(Opened {
                    library: candidate.clone(),
                    optional,
                });
            }
            Err(e) if candidate == usual => usual_message = Some(with_sources(&e)),
            Err(_) => {}
        }
    }
    let mut tried: Vec<String> = Vec::new();
    for candidate in candidates {
        if candidate != usual && !tried.contains(&candidate) {
            tried.push(candidate);
        }
    }
    Err(OpenError::NotFound {
        message: usual_message.unwrap_or_else(|| format!("{usual}: not found")),
        tried,
    })
}

/// `error` and its sources, joined by `: ` (libloading keeps the loader's message in the
/// source).
fn with_sources(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

fn probe_driver() -> Result<Driver, BenchError> {
    let unavailable = |library: &str, detail: String| BenchError::DriverUnavailable {
        library: library.to_owned(),
        detail,
    };
    let opened = match open(
        "cuda",
        DRIVER_LIBRARY,
        DRIVER_SYMBOLS,
        OPTIONAL_DRIVER_SYMBOLS,
    ) {
        Ok(opened) => opened,
        Err(OpenError::NotFound { tried, message }) => {
            log::debug!("cuda: no driver library; tried {}", tried.join(", "));
            return Err(unavailable(
                DRIVER_LIBRARY,
                format!(
                    "{message} (nor under {} other names). No NVIDIA driver is installed \
                     here; the cuda backend needs one (R580 or newer, CUDA 13.0)",
                    tried.len()
                ),
            ));
        }
        Err(OpenError::MissingSymbol { library, symbol }) => {
            return Err(unavailable(
                &library,
                format!(
                    "it has no `{symbol}`: this driver is older than the CUDA 13.0 driver (R580) \
                     the cuda backend needs; update the NVIDIA driver"
                ),
            ));
        }
    };
    // SAFETY: every driver symbol this crate calls was found above, so cudarc's loader will not
    // panic. `cuInit(0)` has no preconditions.
    let init = unsafe { cu::cuInit(0) };
    if init != cu::CUresult::CUDA_SUCCESS {
        let code = init as i32;
        return Err(unavailable(
            &opened.library,
            format!(
                "cuInit failed with {} ({}): {}{}",
                error_name(code).unwrap_or("an unknown error"),
                code,
                describe(init),
                visible_devices_hint(init, std::env::var("CUDA_VISIBLE_DEVICES").ok().as_deref())
            ),
        ));
    }
    let mut version: c_int = 0;
    // SAFETY: `version` is a valid out-pointer.
    let _ = unsafe { cu::cuDriverGetVersion(&mut version) };
    log::debug!("cuda: driver {} (CUDA {version})", opened.library);
    Ok(Driver {
        library: opened.library,
        version,
        has_param_info: opened.optional[0],
    })
}

fn probe_nvrtc() -> Result<Nvrtc, BenchError> {
    let opened = match open("nvrtc", "libnvrtc.so.13", NVRTC_SYMBOLS, &[]) {
        Ok(opened) => opened,
        Err(OpenError::NotFound { tried, message }) => {
            log::debug!("cuda: no NVRTC library; tried {}", tried.join(", "));
            return Err(BenchError::CompilerUnavailable {
                detail: format!(
                    "{message} (nor under {} other names). Install the CUDA toolkit's \
                     NVRTC (libnvrtc.so.13) and put its directory on \
                     LD_LIBRARY_PATH, or pass PTX or a cubin instead of source",
                    tried.len()
                ),
            });
        }
        Err(OpenError::MissingSymbol { library, symbol }) => {
            return Err(BenchError::CompilerUnavailable {
                detail: format!("{library} has no `{symbol}`: use NVRTC from CUDA 12 or newer"),
            });
        }
    };
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: every NVRTC symbol this crate calls was found above; the out-pointers are valid.
    let _ = unsafe { nvrtc::nvrtcVersion(&mut major, &mut minor) };
    let mut count: c_int = 0;
    // SAFETY: as above.
    let _ = unsafe { nvrtc::nvrtcGetNumSupportedArchs(&mut count) };
    let mut archs = vec![0 as c_int; usize::try_from(count).unwrap_or(0)];
    if !archs.is_empty() {
        // SAFETY: `archs` has room for the `count` entries NVRTC writes.
        let _ = unsafe { nvrtc::nvrtcGetSupportedArchs(archs.as_mut_ptr()) };
    }
    let mut archs: Vec<u32> = archs
        .into_iter()
        .filter_map(|a| u32::try_from(a).ok())
        .filter(|&a| a > 0)
        .collect();
    archs.sort_unstable();
    log::debug!(
        "cuda: NVRTC {}.{} ({}), archs {archs:?}",
        major,
        minor,
        opened.library
    );
    Ok(Nvrtc {
        library: opened.library,
        version: (major, minor),
        archs,
    })
}

/// The driver's description of `result` (`cuGetErrorString`), or a placeholder.
pub(crate) fn describe(result: cu::CUresult) -> String {
    let mut text: *const c_char = std::ptr::null();
    // SAFETY: only called once the driver library was found with `cuGetErrorString`; `text` is a
    // valid out-pointer. On success it points to a static NUL-terminated string.
    let ok = unsafe { cu::cuGetErrorString(result, &mut text) } == cu::CUresult::CUDA_SUCCESS;
    if ok && !text.is_null() {
        // SAFETY: see above: a static C string owned by the driver.
        unsafe { std::ffi::CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    } else {
        "no description from the driver".to_owned()
    }
}

/// What to check when `cuInit` fails with `init` under `CUDA_VISIBLE_DEVICES=value`: only for
/// "no device" (100) and "invalid device" (101), and only with the variable set. The driver
/// hides every device it names out of range, by an unknown UUID, or more than once, and those
/// after the first invalid one (an H200 machine answered `1`, `0,0` and `GPU-00000000-bad` with
/// errors 100 and 101). Other failures (a driver mismatch, 803 and 804) are not the variable's.
fn visible_devices_hint(init: cu::CUresult, value: Option<&str>) -> String {
    let hidden = matches!(
        init,
        cu::CUresult::CUDA_ERROR_NO_DEVICE | cu::CUresult::CUDA_ERROR_INVALID_DEVICE
    );
    match value.filter(|_| hidden) {
        Some(value) => format!(
            "; CUDA_VISIBLE_DEVICES={value:?} may hide every GPU: it names GPUs by index from 0 \
             or by UUID (`nvidia-smi -L` lists them), each once, and one out of range, unknown \
             or repeated hides it and those after it"
        ),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_cu_init_names_cuda_visible_devices_when_it_is_set() {
        let no_device = cu::CUresult::CUDA_ERROR_NO_DEVICE;
        assert_eq!(visible_devices_hint(no_device, None), "");
        let mismatch = cu::CUresult::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH;
        assert_eq!(
            visible_devices_hint(mismatch, Some("0")),
            "",
            "not the variable's"
        );
        let hint = visible_devices_hint(cu::CUresult::CUDA_ERROR_INVALID_DEVICE, Some("0,0"));
        assert!(hint.contains("CUDA_VISIBLE_DEVICES=\"0,0\""), "{hint}");
        assert!(hint.contains("nvidia-smi -L"), "{hint}");
    }

    /// Every `sys::cu…(` and `nvrtc::nvrtc…(` call in this crate's source is in the probe's lists,
    /// so that no call can reach a missing symbol (and cudarc's panic).
    #[test]
    fn every_called_function_is_probed() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
        let mut checked = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            for (module, lists) in [
                ("cu::", [DRIVER_SYMBOLS, OPTIONAL_DRIVER_SYMBOLS]),
                ("nvrtc::", [NVRTC_SYMBOLS, &[]]),
            ] {
                for (i, _) in text.match_indices(module) {
                    let rest = &text[i + module.len()..];
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    // Calls only: not types (`cu::CUresult`) or paths.
                    if !(name.starts_with("cu") || name.starts_with("nvrtc"))
                        || !rest[name.len()..].starts_with('(')
                    {
                        continue;
                    }
                    assert!(
                        lists.iter().any(|l| l.contains(&name.as_str())),
                        "{}: `{name}` is called but not probed",
                        path.display()
                    );
                    checked += 1;
                }
            }
        }
        assert!(
            checked > 30,
            "only {checked} calls found: is the scan broken?"
        );
    }

    /// This machine has no NVIDIA driver (CI has none): the probe says so, without panicking.
    #[test]
    fn no_driver_is_an_error_not_a_panic() {
        if open("cuda", DRIVER_LIBRARY, &[], &[]).is_ok() {
            eprintln!("a CUDA driver library is present; skipping the no-driver check");
            return;
        }
        let err = driver().unwrap_err();
        let BenchError::DriverUnavailable { library, detail } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(library, DRIVER_LIBRARY);
        assert!(detail.contains("libcuda.so"), "{detail}");
        assert!(detail.contains("NVIDIA driver"), "{detail}");
        // The outcome is kept: the same error again.
        assert_eq!(driver().unwrap_err(), err);
    }
}
