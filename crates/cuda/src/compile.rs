//! From a [`CudaKernel`] to a module image: NVRTC for sources (with the disk cache), or the
//! caller's PTX or cubin as they are.
//!
//! A source is compiled for the device's own architecture (`--gpu-architecture=sm_XY`) into a
//! **cubin** (`nvrtcGetCUBIN`), so that an NVRTC newer than the driver can never produce PTX the
//! driver's JIT refuses. When NVRTC does not know the device's architecture (a GPU newer than
//! NVRTC), it compiles PTX for the newest architecture it knows below it, which the driver's JIT
//! finishes. An `-arch`/`--gpu-architecture` option in the kernel's options (e.g. `sm_90a` for
//! Hopper's `wgmma`) replaces that choice.
//!
//! The entry is found through an NVRTC **name expression**: the kernel's name as written in the
//! source (`matmul`, `matmul<64, 32>`, `ns::kernel`) is lowered by NVRTC to the symbol in the
//! cubin, so `extern "C"` is not needed. For PTX and cubin inputs the entry is the symbol itself
//! (mangled, unless the kernel was `extern "C"`).

use std::ffi::{CStr, CString, c_char, c_int};
use std::ptr;

use cudarc::nvrtc::sys as nvrtc;
use tunebox_protocol::{BenchError, CudaCode, CudaKernel, Define};

use crate::CacheDir;
use crate::cache::{self, Artifact, ArtifactKey, KeyInputs};
use crate::driver::ImageKind;
use crate::probe;

/// The architecture NVRTC compiles for, and whether that yields a cubin or PTX.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// `--gpu-architecture=…` to add to the options, or `None` when the user gave one.
    pub(crate) option: Option<String>,
    /// The architecture, e.g. `sm_90` (part of the cache key).
    pub(crate) arch: String,
    /// Cubin for `sm_…`, PTX for `compute_…`.
    pub(crate) kind: ImageKind,
}

/// The target for a device of architecture `device_arch` (90 for compute capability 9.0),
/// given the user's `options` and the architectures NVRTC supports (`supported`, ascending).
pub(crate) fn target(options: &[String], device_arch: u32, supported: &[u32]) -> Target {
    if let Some(arch) = user_arch(options) {
        let kind = if arch.starts_with("compute_") {
            ImageKind::Ptx
        } else {
            ImageKind::Cubin
        };
        return Target {
            option: None,
            arch,
            kind,
        };
    }
    let (arch, kind) = if supported.is_empty() || supported.contains(&device_arch) {
        (format!("sm_{device_arch}"), ImageKind::Cubin)
    } else {
        let below = supported.iter().rev().find(|&&a| a <= device_arch);
        let arch = below.copied().unwrap_or(supported[0]);
        (format!("compute_{arch}"), ImageKind::Ptx)
    };
    Target {
        option: Some(format!("--gpu-architecture={arch}")),
        arch,
        kind,
    }
}

/// The architecture named by an `-arch=X`, `--gpu-architecture=X`, `-arch X` or
/// `--gpu-architecture X` option.
fn user_arch(options: &[String]) -> Option<String> {
    let mut options = options.iter();
    while let Some(option) = options.next() {
        for flag in ["--gpu-architecture", "-arch"] {
            if let Some(rest) = option.strip_prefix(flag) {
                if let Some(value) = rest.strip_prefix('=') {
                    return Some(value.to_owned());
                }
                if rest.is_empty() {
                    return options.next().cloned();
                }
            }
        }
    }
    None
}

/// The NVRTC options for `kernel` compiled for `target`: the architecture (unless the user gave
/// one), one `-DNAME=VALUE` per define, then the kernel's own options.
pub(crate) fn nvrtc_options(kernel: &CudaKernel, target: &Target) -> Vec<String> {
    target
        .option
        .iter()
        .cloned()
        .chain(
            kernel
                .defines
                .iter()
                .map(|d| format!("-D{}={}", d.name, d.value)),
        )
        .chain(kernel.options.iter().cloned())
        .collect()
}

/// Checks what a kernel request must satisfy before anything is compiled or loaded.
///
/// # Errors
///
/// [`BenchError::InvalidRequest`]: an empty source, PTX or cubin; an empty entry; a define name
/// that is not a C identifier; a NUL byte in text the driver reads as a C string.
pub(crate) fn validate(kernel: &CudaKernel) -> Result<(), BenchError> {
    let invalid = |detail: String| Err(BenchError::InvalidRequest { detail });
    match &kernel.code {
        CudaCode::Source { text, name } if text.trim().is_empty() => {
            return invalid(format!("CUDA kernel `{name}` has an empty source"));
        }
        CudaCode::Ptx(text) if text.trim().is_empty() => {
            return invalid("the CUDA kernel's PTX is empty".into());
        }
        CudaCode::Cubin(bytes) if bytes.is_empty() => {
            return invalid("the CUDA kernel's cubin is empty".into());
        }
        _ => {}
    }
    if kernel.entry.trim().is_empty() {
        return invalid(
            "the CUDA kernel has an empty entry; set it to the name of the __global__ function"
                .into(),
        );
    }
    for define in &kernel.defines {
        if !Define::is_c_identifier(&define.name) {
            return invalid(format!(
                "define `{}` is not a C identifier (ASCII letters, digits and `_`, not starting \
                 with a digit)",
                define.name
            ));
        }
    }
    let texts = [&kernel.entry]
        .into_iter()
        .chain(kernel.options.iter())
        .chain(kernel.defines.iter().map(|d| &d.value));
    for text in texts {
        if text.contains('\0') {
            return invalid(format!("`{}` contains a NUL byte", text.escape_debug()));
        }
    }
    Ok(())
}

/// The module image of `kernel` for a device of architecture `device_arch`, and the name it is
/// known by in messages. Sources go through the cache (when there is one) and NVRTC.
///
/// # Errors
///
/// [`BenchError::InvalidRequest`] (see [`validate`]), [`BenchError::CompilerUnavailable`] when
/// a source needs NVRTC and there is none, [`BenchError::Compile`] with NVRTC's log.
pub(crate) fn artifact(
    kernel: &CudaKernel,
    device_arch: u32,
    cache: Option<&CacheDir>,
) -> Result<(Artifact, String), BenchError> {
    validate(kernel)?;
    let (text, name) = match &kernel.code {
        CudaCode::Ptx(text) => {
            let artifact = Artifact {
                kind: ImageKind::Ptx,
                image: text.as_bytes().to_vec(),
                lowered_name: kernel.entry.clone(),
            };
            return Ok((artifact, "PTX".into()));
        }
        CudaCode::Cubin(bytes) => {
            let artifact = Artifact {
                kind: ImageKind::Cubin,
                image: bytes.to_vec(),
                lowered_name: kernel.entry.clone(),
            };
            return Ok((artifact, "cubin".into()));
        }
        CudaCode::Source { text, name } => (text, name),
    };
    let compiler = probe::nvrtc()?;
    let target = target(&kernel.options, device_arch, &compiler.archs);
    let key = ArtifactKey::of(&KeyInputs {
        source: text,
        source_name: name,
        entry: &kernel.entry,
        defines: &kernel.defines,
        options: &kernel.options,
        nvrtc_version: compiler.version,
        arch: &target.arch,
    });
    if let Some(artifact) = cache.and_then(|c| cache::load(c, &key)) {
        log::debug!("cuda: cache hit for `{name}` ({})", key.0);
        return Ok((artifact, name.clone()));
    }
    let options = nvrtc_options(kernel, &target);
    let artifact = compile(text, name, &kernel.entry, &options, target.kind)?;
    if let Some(cache) = cache {
        cache::store(cache, &key, &artifact);
    }
    Ok((artifact, name.clone()))
}

/// `nvrtcGetCUBINSize` or `nvrtcGetPTXSize`.
type SizeFn = unsafe fn(nvrtc::nvrtcProgram, *mut usize) -> nvrtc::nvrtcResult;
/// `nvrtcGetCUBIN` or `nvrtcGetPTX`.
type GetFn = unsafe fn(nvrtc::nvrtcProgram, *mut c_char) -> nvrtc::nvrtcResult;

/// An NVRTC program, destroyed on drop.
struct Program(nvrtc::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by `nvrtcCreateProgram` and destroyed once, here.
        let _ = unsafe { nvrtc::nvrtcDestroyProgram(&mut self.0) };
    }
}

/// NVRTC's description of `result`.
fn describe(result: nvrtc::nvrtcResult) -> String {
    // SAFETY: NVRTC was probed (the caller holds `probe::nvrtc()`); the returned pointer is a
    // static NUL-terminated string (or null).
    let text = unsafe { nvrtc::nvrtcGetErrorString(result) };
    if text.is_null() {
        format!("{result:?}")
    } else {
        // SAFETY: see above.
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }
}

/// Compiles `text` with NVRTC: `entry` as a name expression, `options` as given; returns the
/// cubin or PTX (per `kind`) and the entry's lowered name. Only call after `probe::nvrtc()`
/// succeeded.
fn compile(
    text: &str,
    name: &str,
    entry: &str,
    options: &[String],
    kind: ImageKind,
) -> Result<Artifact, BenchError> {
    let command = format!("nvrtc {} {name}", options.join(" "));
    let failed = |step: &str, result: nvrtc::nvrtcResult| BenchError::Failed {
        message: format!("NVRTC failed {step} `{name}`: {}", describe(result)),
    };
    let c = CInputs::new(text, name, entry, options)?;
    let option_ptrs: Vec<*const c_char> = c.options.iter().map(|o| o.as_ptr()).collect();

    let program =
        Program::create(&c.text, &c.name).map_err(|r| failed("to create a program for", r))?;
    program
        .add_name_expression(&c.entry)
        .map_err(|r| failed("to add the entry's name expression to", r))?;
    // SAFETY: the program is alive; `option_ptrs` holds `options.len()` NUL-terminated strings
    // that outlive the call.
    let compiled = unsafe {
        nvrtc::nvrtcCompileProgram(program.0, option_ptrs.len() as c_int, option_ptrs.as_ptr())
    };
    let log = program_log(&program);
    if compiled != nvrtc::nvrtcResult::NVRTC_SUCCESS {
        let log = if log.is_empty() {
            describe(compiled)
        } else {
            log
        };
        return Err(BenchError::Compile { command, log });
    }
    if !log.is_empty() {
        log::debug!("cuda: NVRTC said about `{name}`:\n{log}");
    }
    let lowered_name = program
        .lowered_name(&c.entry)
        .map_err(|result| BenchError::Compile {
            command,
            log: format!(
                "the entry `{entry}` is not a __global__ function of `{name}` ({})",
                describe(result)
            ),
        })?;
    let image = program
        .image(kind)
        .map_err(|r| failed("to give the compiled image of", r))?;
    if image.is_empty() {
        return Err(BenchError::Failed {
            message: format!("NVRTC produced an empty image for `{name}`"),
        });
    }
    Ok(Artifact {
        kind,
        image,
        lowered_name,
    })
}

/// What NVRTC is given, as C strings.
struct CInputs {
    text: CString,
    name: CString,
    entry: CString,
    options: Vec<CString>,
}

impl CInputs {
    /// The source `text`, the program's `name`, the `entry` and the `options` as C strings;
    /// an invalid request when one holds a NUL byte.
    fn new(text: &str, name: &str, entry: &str, options: &[String]) -> Result<Self, BenchError> {
        let invalid = |what: &str| BenchError::InvalidRequest {
            detail: format!("the {what} of CUDA kernel `{name}` contains a NUL byte"),
        };
        Ok(CInputs {
            text: CString::new(text).map_err(|_| invalid("source"))?,
            name: CString::new(name).map_err(|_| invalid("name"))?,
            entry: CString::new(entry).map_err(|_| invalid("entry"))?,
            options: options
                .iter()
                .map(|o| CString::new(o.as_str()))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| invalid("options"))?,
        })
    }
}

impl Program {
    /// A program of the source `text` named `name`, with no headers; NVRTC's result when it
    /// cannot be created.
    fn create(text: &CStr, name: &CStr) -> Result<Program, nvrtc::nvrtcResult> {
        let mut handle: nvrtc::nvrtcProgram = ptr::null_mut();
        // SAFETY: `text` and `name` are NUL-terminated and outlive the program (NVRTC copies
        // them anyway); no headers are passed (count 0, null arrays).
        let result = unsafe {
            nvrtc::nvrtcCreateProgram(
                &mut handle,
                text.as_ptr(),
                name.as_ptr(),
                0,
                ptr::null(),
                ptr::null(),
            )
        };
        if result != nvrtc::nvrtcResult::NVRTC_SUCCESS {
            return Err(result);
        }
        Ok(Program(handle))
    }

    /// Adds `entry` as a name expression, so that its lowered name can be asked for once the
    /// program is compiled.
    fn add_name_expression(&self, entry: &CStr) -> Result<(), nvrtc::nvrtcResult> {
        // SAFETY: the program is alive; `entry` is NUL-terminated.
        let result = unsafe { nvrtc::nvrtcAddNameExpression(self.0, entry.as_ptr()) };
        if result != nvrtc::nvrtcResult::NVRTC_SUCCESS {
            return Err(result);
        }
        Ok(())
    }

    /// The lowered (mangled) name of the name expression `entry` of the compiled program;
    /// NVRTC's result when it has none.
    fn lowered_name(&self, entry: &CStr) -> Result<String, nvrtc::nvrtcResult> {
        let mut lowered: *const c_char = ptr::null();
        // SAFETY: the program is alive and compiled; `entry` is the expression added before
        // compiling; `lowered` is a valid out-pointer, and the string it receives lives as long
        // as the program (copied below, before the program drops).
        let result = unsafe { nvrtc::nvrtcGetLoweredName(self.0, entry.as_ptr(), &mut lowered) };
        if result != nvrtc::nvrtcResult::NVRTC_SUCCESS || lowered.is_null() {
            return Err(result);
        }
        // SAFETY: see above.
        Ok(unsafe { CStr::from_ptr(lowered) }
            .to_string_lossy()
            .into_owned())
    }

    /// The compiled image as `kind` says (a PTX text without its terminating NUL).
    fn image(&self, kind: ImageKind) -> Result<Vec<u8>, nvrtc::nvrtcResult> {
        let mut size = 0usize;
        let (size_fn, get_fn): (SizeFn, GetFn) = match kind {
            ImageKind::Cubin => (nvrtc::nvrtcGetCUBINSize, nvrtc::nvrtcGetCUBIN),
            ImageKind::Ptx => (nvrtc::nvrtcGetPTXSize, nvrtc::nvrtcGetPTX),
        };
        // SAFETY: the program is alive and compiled; `size` is a valid out-pointer.
        let result = unsafe { size_fn(self.0, &mut size) };
        if result != nvrtc::nvrtcResult::NVRTC_SUCCESS {
            return Err(result);
        }
        let mut image = vec![0u8; size];
        // SAFETY: `image` has room for the `size` bytes NVRTC writes.
        let result = unsafe { get_fn(self.0, image.as_mut_ptr().cast()) };
        if result != nvrtc::nvrtcResult::NVRTC_SUCCESS {
            return Err(result);
        }
        if kind == ImageKind::Ptx {
            // NVRTC counts the terminating NUL; the artifact keeps the text only.
            while image.last() == Some(&0) {
                image.pop();
            }
        }
        Ok(image)
    }
}

/// The program's log, trimmed (empty when there is none).
fn program_log(program: &Program) -> String {
    let mut size = 0usize;
    // SAFETY: the program is alive; `size` is a valid out-pointer.
    if unsafe { nvrtc::nvrtcGetProgramLogSize(program.0, &mut size) }
        != nvrtc::nvrtcResult::NVRTC_SUCCESS
        || size == 0
    {
        return String::new();
    }
    let mut log = vec![0u8; size];
    // SAFETY: `log` has room for the `size` bytes (NUL included) NVRTC writes.
    if unsafe { nvrtc::nvrtcGetProgramLog(program.0, log.as_mut_ptr().cast()) }
        != nvrtc::nvrtcResult::NVRTC_SUCCESS
    {
        return String::new();
    }
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    String::from_utf8_lossy(&log[..end]).trim().to_owned()
}

#[cfg(test)]
mod tests {
    use tunebox_protocol::{Define, LaunchConfig};

    use super::*;

    fn kernel(code: CudaCode) -> CudaKernel {
        let mut kernel = CudaKernel::from_code(code, "k").launch(LaunchConfig::new([1; 3], [1; 3]));
        kernel.defines = vec![Define::new("BM", "64")];
        kernel.options = vec!["--use_fast_math".into()];
        kernel
    }

    fn source(text: &str) -> CudaCode {
        CudaCode::Source {
            text: text.into(),
            name: "k.cu".into(),
        }
    }

    #[test]
    fn the_device_arch_gives_a_cubin() {
        let t = target(&[], 90, &[75, 80, 86, 89, 90, 100, 120]);
        assert_eq!(t.option.as_deref(), Some("--gpu-architecture=sm_90"));
        assert_eq!((t.arch.as_str(), t.kind), ("sm_90", ImageKind::Cubin));
        // NVRTC did not say what it supports: trust the device's arch.
        assert_eq!(target(&[], 90, &[]).arch, "sm_90");
    }

    #[test]
    fn a_device_newer_than_nvrtc_gets_ptx_for_the_newest_arch_below() {
        let t = target(&[], 130, &[75, 80, 90, 120]);
        assert_eq!(t.option.as_deref(), Some("--gpu-architecture=compute_120"));
        assert_eq!(t.kind, ImageKind::Ptx);
        // Older than anything NVRTC knows: its oldest (the JIT will refuse it if it cannot).
        assert_eq!(target(&[], 60, &[75, 80]).arch, "compute_75");
    }

    #[test]
    fn the_users_arch_wins() {
        for options in [
            vec!["--gpu-architecture=sm_90a".to_owned()],
            vec!["-arch=sm_90a".to_owned()],
            vec!["-arch".to_owned(), "sm_90a".to_owned()],
            vec![
                "-O3".to_owned(),
                "--gpu-architecture".to_owned(),
                "sm_90a".to_owned(),
            ],
        ] {
            let t = target(&options, 90, &[90]);
            assert_eq!(t.option, None, "{options:?}");
            assert_eq!((t.arch.as_str(), t.kind), ("sm_90a", ImageKind::Cubin));
        }
        let t = target(&["-arch=compute_90".to_owned()], 90, &[90]);
        assert_eq!(t.kind, ImageKind::Ptx);
        // Not an arch option.
        assert_eq!(target(&["-archive".to_owned()], 90, &[90]).arch, "sm_90");
    }

    #[test]
    fn options_are_arch_then_defines_then_the_users() {
        let k = kernel(source("x"));
        let t = target(&k.options, 80, &[80]);
        assert_eq!(
            nvrtc_options(&k, &t),
            ["--gpu-architecture=sm_80", "-DBM=64", "--use_fast_math"]
        );
    }

    #[test]
    fn requests_are_checked_before_compiling() {
        let message = |k: &CudaKernel| validate(k).unwrap_err().to_string();
        assert!(message(&kernel(source(" \n"))).contains("`k.cu` has an empty source"));
        assert!(message(&kernel(CudaCode::Ptx(String::new()))).contains("PTX is empty"));
        let empty = tunebox_protocol::Bytes::empty();
        assert!(message(&kernel(CudaCode::Cubin(empty))).contains("cubin is empty"));
        let mut k = kernel(source("x"));
        k.entry = " ".into();
        assert!(message(&k).contains("empty entry"));
        let mut k = kernel(source("x"));
        k.defines.push(Define::new("1X", "2"));
        assert!(message(&k).contains("define `1X` is not a C identifier"));
        let mut k = kernel(source("x"));
        k.options.push("a\0b".into());
        assert!(message(&k).contains("NUL"));
        validate(&kernel(source("x"))).unwrap();
    }

    #[test]
    fn ptx_and_cubins_need_no_compiler() {
        let (ptx, origin) =
            artifact(&kernel(CudaCode::Ptx(".version 8.0".into())), 90, None).unwrap();
        assert_eq!((ptx.kind, origin.as_str()), (ImageKind::Ptx, "PTX"));
        assert_eq!(ptx.lowered_name, "k");
        let cubin = tunebox_protocol::Bytes::from_vec(b"\x7fELF".to_vec()).unwrap();
        let (cubin, _) = artifact(&kernel(CudaCode::Cubin(cubin)), 90, None).unwrap();
        assert_eq!(cubin.image, b"\x7fELF");
    }

    // NVRTC itself, without a GPU: these run wherever libnvrtc is on the loader path (the GPU
    // machine; or LD_LIBRARY_PATH=<pip's nvidia/cu13/lib> here).

    const NEEDS_NVRTC: &str = "needs libnvrtc";

    fn compile_for_hopper(
        text: &str,
        entry: &str,
        defines: &[(&str, &str)],
        cache: Option<&CacheDir>,
    ) -> Result<Artifact, BenchError> {
        let mut k = kernel(source(text));
        k.entry = entry.into();
        k.options.clear();
        k.defines = defines.iter().map(|(n, v)| Define::new(*n, *v)).collect();
        artifact(&k, 90, cache).map(|(artifact, _)| artifact)
    }

    #[test]
    #[ignore = "needs libnvrtc"]
    fn nvrtc_compiles_cpp_kernels_to_cubins_by_name_expression() {
        let _ = NEEDS_NVRTC;
        let text = "template <int N> __global__ void scale(float *y) { y[threadIdx.x] *= N; }\n\
                    namespace ns { __global__ void plain(float *y) { y[0] = BM; } }\n";
        let artifact = compile_for_hopper(text, "scale<4>", &[("BM", "64")], None).unwrap();
        assert_eq!(artifact.kind, ImageKind::Cubin);
        assert!(artifact.image.starts_with(b"\x7fELF"), "not a cubin");
        assert_eq!(artifact.lowered_name, "_Z5scaleILi4EEvPf");
        let plain = compile_for_hopper(text, "ns::plain", &[("BM", "64")], None).unwrap();
        assert_eq!(plain.lowered_name, "_ZN2ns5plainEPf");
    }

    #[test]
    #[ignore = "needs libnvrtc"]
    fn nvrtc_errors_carry_the_options_and_a_log_naming_the_line() {
        let text =
            "extern \"C\" __global__ void k(float *y) {\n    y[0] = 1.0f\n    y[1] = 2.0f;\n}\n";
        let Err(BenchError::Compile { command, log }) =
            compile_for_hopper(text, "k", &[("BM", "64")], None)
        else {
            panic!("expected a compile error")
        };
        assert_eq!(command, "nvrtc --gpu-architecture=sm_90 -DBM=64 k.cu");
        assert!(log.contains("k.cu(3)"), "{log}");
        assert!(log.contains("error"), "{log}");
        // An entry that is not a kernel of the source.
        let err = compile_for_hopper("__global__ void k() {}", "nope", &[], None).unwrap_err();
        assert!(matches!(err, BenchError::Compile { .. }), "{err:?}");
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[test]
    #[ignore = "needs libnvrtc"]
    fn nvrtc_results_are_cached() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CacheDir::new(dir.path().join("cuda"));
        let text = "extern \"C\" __global__ void k(float *y) { y[0] = BM; }";
        let first = compile_for_hopper(text, "k", &[("BM", "1")], Some(&cache)).unwrap();
        let files: Vec<_> = std::fs::read_dir(cache.path()).unwrap().collect();
        assert_eq!(files.len(), 1);
        // The second compilation is the file: replace it and see the replacement come back.
        let path = files[0].as_ref().unwrap().path();
        let key = ArtifactKey(path.file_stem().unwrap().to_str().unwrap().to_owned());
        let marked = Artifact {
            lowered_name: "marked".into(),
            ..first.clone()
        };
        cache::store(&cache, &key, &marked);
        let second = compile_for_hopper(text, "k", &[("BM", "1")], Some(&cache)).unwrap();
        assert_eq!(second, marked);
        // Another define is another key: compiled afresh.
        let other = compile_for_hopper(text, "k", &[("BM", "2")], Some(&cache)).unwrap();
        assert_eq!(other.lowered_name, "k");
        assert_eq!(std::fs::read_dir(cache.path()).unwrap().count(), 2);
    }

    #[test]
    #[ignore = "needs libnvrtc"]
    fn nvrtc_compiles_the_examples() {
        // The repository's examples, or (in the GPU bundle) those next to the working directory.
        let dirs = [
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/kernels"),
            "examples/kernels",
        ];
        let read = |name: &str| {
            dirs.iter()
                .find_map(|dir| std::fs::read_to_string(format!("{dir}/{name}")).ok())
                .unwrap_or_else(|| panic!("examples/kernels/{name} not found"))
        };
        let matmul = read("matmul.cu");
        for (bx, by, wm, wn, tk) in [
            ("16", "16", "1", "1", "16"),
            ("32", "8", "4", "4", "16"),
            ("32", "16", "4", "2", "32"),
        ] {
            let defines = [
                ("block_size_x", bx),
                ("block_size_y", by),
                ("WM", wm),
                ("WN", wn),
                ("TILE_K", tk),
            ];
            let artifact = compile_for_hopper(&matmul, "matmul", &defines, None)
                .unwrap_or_else(|e| panic!("{defines:?}: {e}"));
            assert_eq!(artifact.lowered_name, "matmul");
        }
        let faults = read("faults.cu");
        for mode in ["0", "1", "2", "3", "4", "5", "6", "8"] {
            compile_for_hopper(&faults, "faulty", &[("MODE", mode)], None)
                .unwrap_or_else(|e| panic!("MODE {mode}: {e}"));
        }
        let err = compile_for_hopper(&faults, "faulty", &[("MODE", "7")], None).unwrap_err();
        assert!(
            err.to_string().contains("does not compile (on purpose)"),
            "{err}"
        );
    }
}
