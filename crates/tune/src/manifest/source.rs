//! Kernel sources and their compilers: the language, the flags (relative paths made the
//! manifest's), the compiler (`$CC`, `$CXX`, or the manifest's), the source text.

use std::path::Path;

use anyhow::{Context, Result, bail, ensure};
use tunebox_protocol::Define;

use super::files::ManifestFiles;
use super::raw::RawKernel;

/// Compiler flags when the manifest's kernel does not set `flags`.
pub(super) const DEFAULT_FLAGS: [&str; 2] = ["-O3", "-march=native"];

/// The C compiler: `$CC`, else `cc`.
pub fn compiler() -> String {
    std::env::var("CC")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .unwrap_or_else(|| "cc".into())
}

/// The C++ compiler, for C++ sources whose manifest names no compiler: `$CXX`, else `g++`
/// (Kernel Tuner's default for `lang = "C"`).
pub(super) fn cxx_compiler() -> String {
    std::env::var("CXX")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .unwrap_or_else(|| "g++".into())
}

/// The language of a kernel source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Language {
    /// C, compiled by the system compiler and run on the CPU.
    C,
    /// CUDA C++, compiled by NVRTC in a worker and run on a GPU.
    Cuda,
}

/// A kernel source and how to compile and call it.
#[derive(Debug, Clone)]
pub(crate) struct KernelSource {
    /// The path as written in the manifest (shown in compiler messages).
    pub source_name: String,
    /// The resolved path.
    pub path: std::path::PathBuf,
    /// The source text.
    pub text: String,
    /// The directory holding the source, put on the include path.
    pub dir: std::path::PathBuf,
    /// Whether the source lies outside the manifest's folder (allowed, and reported).
    pub outside: bool,
    pub entry: String,
    pub language: Language,
    /// C compiler flags, or NVRTC options for CUDA.
    pub flags: Vec<String>,
    pub compiler: String,
}

impl KernelSource {
    /// A source that is not read yet (a T1 file's missing `KernelFile`: the manifest can be
    /// listed, and [`Manifest::unsupported`] says why it cannot run).
    fn unread(
        dir: &Path,
        source: &Path,
        entry: String,
        language: Language,
        flags: Vec<String>,
        compiler: String,
    ) -> KernelSource {
        let path = dir.join(source);
        KernelSource {
            source_name: source.display().to_string(),
            dir: parent_dir(&path).to_owned(),
            path,
            outside: false,
            text: String::new(),
            entry,
            language,
            flags,
            compiler,
        }
    }

    /// The source `source` (relative to `dir`), from `files` when given there, else read.
    #[allow(clippy::too_many_arguments)] // the fields of a source, as the manifest gives them
    pub(super) fn read(
        dir: &Path,
        source: &Path,
        entry: String,
        language: Language,
        flags: Vec<String>,
        compiler: String,
        field: &str,
        files: &ManifestFiles,
    ) -> Result<KernelSource> {
        let path = dir.join(source);
        let bytes = match files.get(source) {
            Some(given) => given.to_vec(),
            None => std::fs::read(&path).with_context(|| {
                format!(
                    "{field}.source: cannot read {} (paths are relative to the manifest)",
                    path.display()
                )
            })?,
        };
        let text = String::from_utf8(bytes).map_err(|e| {
            anyhow::anyhow!(
                "{field}.source: {} is not UTF-8 text (invalid byte at offset {})",
                path.display(),
                e.utf8_error().valid_up_to()
            )
        })?;
        ensure!(
            !text.trim().is_empty(),
            "{field}.source: {} is empty",
            path.display()
        );
        ensure!(
            Define::is_c_identifier(&entry),
            "{field}.entry = {entry:?}: it must be the name of a C function"
        );
        let outside = match (path.canonicalize(), dir.canonicalize()) {
            (Ok(file), Ok(root)) => !file.starts_with(root),
            _ => false,
        };
        let dir = parent_dir(&path);
        let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
        Ok(KernelSource {
            source_name: source.display().to_string(),
            path: path.clone(),
            outside,
            text,
            dir,
            entry,
            language,
            flags,
            compiler,
        })
    }
}

/// The manifest's `[kernel]` (Kernel Tuner's top-level names already moved there): the source
/// (read, unless `unread`: a T1 file's missing source), its language, its flags with relative
/// paths made absolute against the manifest's folder `dir`, and its compiler (`c_compiler`
/// when it names none). The source is taken from `files` when given there.
pub(super) fn kernel(
    raw: RawKernel,
    dir: &Path,
    c_compiler: &str,
    unread: bool,
    files: &ManifestFiles,
) -> Result<KernelSource> {
    let source = raw.source.clone().context(
        "kernel.source is missing: name the kernel's source file, e.g. [kernel] source = \
         \"kernels/matmul.c\" (or Kernel Tuner's top-level kernel_source = \"…\")",
    )?;
    let entry = raw.entry.clone().context(
        "kernel.entry is missing: name the function to call, e.g. [kernel] entry = \"matmul\" \
         (or Kernel Tuner's top-level kernel_name = \"…\")",
    )?;
    let language = language_of(&source, raw.language.as_deref())?;
    let compiler = raw.compiler.clone();
    let flags = resolve_paths(kernel_flags(raw, language)?, dir, language);
    let compiler = compiler.unwrap_or_else(|| default_compiler(&source, &flags, c_compiler));
    Ok(if unread {
        KernelSource::unread(dir, &source, entry, language, flags, compiler)
    } else {
        KernelSource::read(
            dir, &source, entry, language, flags, compiler, "kernel", files,
        )?
    })
}

/// The kernel's flags as written: `flags` (or Kernel Tuner's `compiler_options`) for C, else
/// [`DEFAULT_FLAGS`]; NVRTC's `options` (or `compiler_options`) for CUDA, else none.
fn kernel_flags(raw: RawKernel, language: Language) -> Result<Vec<String>> {
    Ok(match language {
        Language::C => {
            ensure!(
                raw.options.is_none(),
                "kernel.options: NVRTC options apply to CUDA kernels; a C kernel takes `flags`"
            );
            ensure!(
                raw.flags.is_none() || raw.compiler_options.is_none(),
                "kernel.flags and compiler_options: give the C compiler's flags once"
            );
            raw.flags
                .or(raw.compiler_options)
                .unwrap_or_else(|| DEFAULT_FLAGS.iter().map(|f| (*f).to_owned()).collect())
        }
        Language::Cuda => {
            ensure!(
                raw.flags.is_none() && raw.compiler.is_none(),
                "kernel.flags / kernel.compiler: a CUDA kernel is compiled by NVRTC; give its \
                 options as `options = [\"--use_fast_math\"]`"
            );
            ensure!(
                raw.options.is_none() || raw.compiler_options.is_none(),
                "kernel.options and compiler_options: give the NVRTC options once"
            );
            raw.options.or(raw.compiler_options).unwrap_or_default()
        }
    })
}

/// A source's language: `given` (`"c"` or `"cuda"`, any case, as Kernel Tuner's `lang`), else by
/// the source's extension.
pub(super) fn language_of(source: &Path, given: Option<&str>) -> Result<Language> {
    match given.map(str::to_ascii_lowercase).as_deref() {
        Some("c") => Ok(Language::C),
        Some("cuda") => Ok(Language::Cuda),
        Some(_) => bail!(
            "kernel.language = {:?}: use \"c\" or \"cuda\"",
            given.unwrap_or_default()
        ),
        None => Ok(match source.extension().and_then(|e| e.to_str()) {
            Some("cu" | "cuh") => Language::Cuda,
            _ => Language::C,
        }),
    }
}

/// Flags of the compiler that take a path, as a separate word or joined (`-Idir`): C (gcc and
/// clang) and NVRTC (which also takes `--include-path=dir`).
const C_PATH_FLAGS: [&str; 7] = [
    "-I",
    "-iquote",
    "-isystem",
    "-idirafter",
    "-include",
    "-imacros",
    "-L",
];
const CUDA_PATH_FLAGS: [&str; 4] = ["-I", "--include-path", "-include", "--pre-include"];

/// `flags` with every relative path they name (`-Iinclude`, `-I include`, `-isystem x`,
/// `--include-path=x`, …) made absolute against the manifest's folder `dir`, as the manifest's
/// other paths are, so that a run from another directory compiles the same thing.
pub(super) fn resolve_paths(flags: Vec<String>, dir: &Path, language: Language) -> Vec<String> {
    let names: &[&str] = match language {
        Language::C => &C_PATH_FLAGS,
        Language::Cuda => &CUDA_PATH_FLAGS,
    };
    let base = dir
        .canonicalize()
        .or_else(|_| std::path::absolute(dir))
        .unwrap_or_else(|_| dir.to_owned());
    let resolve = |path: &str| -> String {
        if path.is_empty() || Path::new(path).is_absolute() {
            path.to_owned()
        } else {
            base.join(path).display().to_string()
        }
    };
    let mut out = Vec::with_capacity(flags.len());
    let mut next_is_path = false;
    for flag in flags {
        if std::mem::take(&mut next_is_path) {
            out.push(resolve(&flag));
            continue;
        }
        if names.contains(&flag.as_str()) {
            next_is_path = true;
            out.push(flag);
            continue;
        }
        let joined = names.iter().find_map(|name| {
            let rest = flag.strip_prefix(name)?;
            match rest.strip_prefix('=') {
                Some(path) if name.starts_with("--") => Some(format!("{name}={}", resolve(path))),
                _ if name.starts_with("--") || rest.is_empty() => None,
                // `-I` and `-L` take their path joined; the long `-i…` forms too.
                _ => Some(format!("{name}{}", resolve(rest))),
            }
        });
        out.push(joined.unwrap_or(flag));
    }
    out
}

/// The compiler of a kernel whose manifest names none: `c_compiler` (`$CC`, else `cc`) for C,
/// and `$CXX`, else `g++`, for a C++ source (`.cpp`, `.cc`, `.cxx`, `.c++`, `.C`, `.hpp`, or
/// `-x c++` in its flags), as Kernel Tuner's `lang = "C"` compiles C++ with `g++`: a C driver
/// compiles C++ but does not link the C++ runtime.
fn default_compiler(source: &Path, flags: &[String], c_compiler: &str) -> String {
    let probe = tunebox_protocol::CKernel::new("", "")
        .source_name(source.display().to_string())
        .compiler("cc")
        .flags(flags.iter().cloned());
    match tunebox_cpu::Language::of(&probe) {
        tunebox_cpu::Language::Cxx => cxx_compiler(),
        tunebox_cpu::Language::C => c_compiler.to_owned(),
    }
}

/// The directory holding `path`: `.` for a bare file name.
pub(super) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}
