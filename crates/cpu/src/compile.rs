//! Compiling a C kernel and its trampoline into a cached shared object.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::io::{self, Write as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use tunebox_protocol::{Arg, BenchmarkRequest, CKernel, DType, Define, ScalarKind};

use crate::cache::{self, KeyHasher};
use crate::subprocess::{self, Captured, Limits, Outcome};
use crate::{CacheDir, CpuError};

/// Symbol of the generated trampoline in every artifact.
pub(crate) const TRAMPOLINE_SYMBOL: &str = "tunebox_trampoline";

/// Flags added after the kernel's own, so they win: build a shared object, and turn the
/// diagnostics of a call that does not match the entry's prototype into errors (gcc 14 and clang
/// 16 already do; older ones only warn, and the kernel would then crash at run time instead).
const FIXED_FLAGS: [&str; 5] = [
    "-fPIC",
    "-shared",
    "-Werror=implicit-function-declaration",
    "-Werror=incompatible-pointer-types",
    "-Werror=int-conversion",
];

/// Bump when the artifact layout or the trampoline's contract changes, so that old cache entries
/// are never loaded by a new tunebox.
const KEY_VERSION: &str = "tunebox-cpu artifact v2";

/// At most this much compiler output is kept in an error (the first errors are the useful ones).
const MAX_LOG_BYTES: usize = subprocess::HEAD_BYTES;

/// How long [`compile`] lets the compiler run (probing its identity, then compiling, all
/// attempts together) before it kills it: two minutes, far more than a C kernel needs even on a
/// loaded machine, and short enough that a hung compiler does not hold a run for long.
pub const DEFAULT_COMPILE_TIMEOUT: Duration = Duration::from_secs(120);

/// Compilations tried before giving up on a header that changes while it is being compiled.
const BUILD_ATTEMPTS: usize = 3;

/// File timestamps come from a coarse clock (one kernel tick, up to 10 ms, behind the real time):
/// a file whose timestamp is this close before a compilation started may have been written after
/// the compiler read it.
const TIMESTAMP_SLACK: Duration = Duration::from_millis(20);

/// The arguments a kernel is called with: one pointer per tensor, one value per scalar, in an
/// order.
///
/// It decides the generated trampoline, so it is part of the cache key: compile with the
/// signature of the request you will run. The default order with `int64_t` scalars generates the
/// trampoline of earlier versions byte for byte, so their cache entries stay valid.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Signature {
    /// Element type of each tensor argument, by tensor index (`f32` is passed as `float *`, …).
    pub tensors: Vec<DType>,
    /// C type of each scalar argument, by scalar index.
    pub scalars: Vec<ScalarKind>,
    /// The order of the arguments ([`BenchmarkRequest::args`]); empty: every tensor, then every
    /// scalar.
    pub args: Vec<Arg>,
}

impl Signature {
    /// `tensors` pointer arguments of these element types, then `scalars` `int64_t`s.
    pub fn new(tensors: impl Into<Vec<DType>>, scalars: usize) -> Self {
        Self::with_scalars(tensors, vec![ScalarKind::I64; scalars])
    }

    /// `tensors` pointer arguments, then one scalar of each of these C types.
    pub fn with_scalars(
        tensors: impl Into<Vec<DType>>,
        scalars: impl Into<Vec<ScalarKind>>,
    ) -> Self {
        Self {
            tensors: tensors.into(),
            scalars: scalars.into(),
            args: Vec::new(),
        }
    }

    /// The same arguments in the order `args` (see [`BenchmarkRequest::args`]).
    pub fn args(mut self, args: impl Into<Vec<Arg>>) -> Self {
        self.args = args.into();
        self
    }

    /// The signature `request`'s kernel is called with: its tensors' dtypes, its scalars'
    /// kinds and its argument order (checked when compiling).
    pub fn of(request: &BenchmarkRequest) -> Self {
        Self {
            tensors: request.tensors.iter().map(|t| t.dtype).collect(),
            scalars: request.scalars.iter().map(|s| s.kind).collect(),
            args: request.args.clone(),
        }
    }
}

/// The language a [`CKernel`] is compiled as, decided by [`Language::of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Language {
    /// C: the source is compiled from a `.c` file.
    C,
    /// C++: the source is compiled from a `.cpp` file, and the trampoline is `extern "C"`.
    Cxx,
}

impl Language {
    /// C++ when the compiler is a C++ driver (its file name contains `++`: `g++`, `c++`,
    /// `clang++`, `x86_64-linux-gnu-g++-12`, also behind a launcher: `ccache g++`), the source
    /// name has a C++ extension (`.cpp`,
    /// `.cc`, `.cxx`, `.c++`, `.C`, `.hpp`), or the flags say `-x c++`; C otherwise. Kernel
    /// Tuner's `lang = "C"` with its default compiler `g++` is C++.
    pub fn of(kernel: &CKernel) -> Language {
        // Any program word of the command (`ccache g++`), not its flags (`cc -std=c11`).
        let cxx_driver = compiler_words(&kernel.compiler)
            .unwrap_or_else(|| vec![kernel.compiler.clone()])
            .iter()
            .filter(|word| !word.starts_with('-'))
            .any(|word| {
                Path::new(word)
                    .file_name()
                    .is_some_and(|name| name.to_string_lossy().contains("++"))
            });
        let extension = Path::new(&kernel.source_name)
            .extension()
            .map(|e| e.to_string_lossy().into_owned())
            .unwrap_or_default();
        let x_cxx = kernel.flags.iter().enumerate().any(|(i, flag)| {
            flag == "-xc++" || (flag == "-x" && kernel.flags.get(i + 1).is_some_and(|l| l == "c++"))
        });
        if cxx_driver
            || ["cpp", "cc", "cxx", "c++", "C", "hpp"].contains(&extension.as_str())
            || x_cxx
        {
            Language::Cxx
        } else {
            Language::C
        }
    }

    /// The extension of the file the compiler is given: `.c` or `.cpp`.
    fn suffix(self) -> &'static str {
        match self {
            Language::C => ".c",
            Language::Cxx => ".cpp",
        }
    }

    /// Flags added after the kernel's own: [`FIXED_FLAGS`] for C; for C++ only `-fPIC -shared`
    /// (the call's checks are C++'s own rules, and the C-only `-Werror=` options would draw a
    /// warning).
    fn fixed_flags(self) -> &'static [&'static str] {
        match self {
            Language::C => &FIXED_FLAGS,
            Language::Cxx => &FIXED_FLAGS[..2],
        }
    }
}

/// A compiled kernel in the cache: a shared object exporting
/// `void tunebox_trampoline(void *const *tensors, const int64_t *scalars)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    path: PathBuf,
    key: String,
    cached: bool,
    dependencies: Vec<PathBuf>,
}

impl Artifact {
    /// The shared object, `<cache dir>/<key>.so`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The cache key, `<base>-<deps>`: 64 hex digits of a blake3 hash over the compilation's
    /// inputs (source, defines, flags, compiler, CPU, trampoline), a `-`, then 64 of a blake3 hash
    /// over the paths and contents of every file the compiler read (the headers). See
    /// [`compile`]'s "Cache" section.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Whether the object was already in the cache, so no compiler ran.
    pub fn was_cached(&self) -> bool {
        self.cached
    }

    /// The files the compiler read besides the kernel's source (headers, `-include`d files),
    /// as it named them (a header found through a relative `-I` is relative to the working
    /// directory of the compile), in its order: the list the key's `<deps>` hash covers. A
    /// caller that keeps results of this object (tunebox's results cache) can hash these files
    /// later to learn, without compiling, whether the object would still be the same.
    pub fn dependencies(&self) -> &[PathBuf] {
        &self.dependencies
    }
}

/// How long a compilation may run and when to give it up: the deadline, cancellation and process
/// group of the compiler that [`compile_with`] runs.
///
/// [`Default`] is [`DEFAULT_COMPILE_TIMEOUT`], no cancellation, and a process group of the
/// compiler's own, which is what [`compile`] uses.
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::time::Duration;
/// use tunebox_cpu::CompileControl;
///
/// let stop = AtomicBool::new(false); // raised by a Ctrl-C handler, say
/// let cancel = || stop.load(Ordering::Relaxed);
/// let control = CompileControl {
///     timeout: Duration::from_secs(30),
///     cancel: Some(&cancel),
///     ..CompileControl::default()
/// };
/// # let _ = control;
/// ```
#[derive(Clone, Copy)]
pub struct CompileControl<'a> {
    /// The longest the compiler may run, counted from the call of [`compile_with`] and covering
    /// the `--version` probe and every compile attempt: when it passes, the compiler is killed
    /// and the call returns [`CpuError::CompileTimeout`]. `Duration::MAX` never times out.
    pub timeout: Duration,
    /// Checked before the compiler starts and every 25 ms while it runs; when it returns `true`
    /// the compiler is killed and the call returns [`CpuError::CompileCancelled`]. Meant for a
    /// stop flag (Ctrl-C, a time budget); it must be cheap.
    pub cancel: Option<&'a (dyn Fn() -> bool + Sync)>,
    /// Whether the compiler runs in a process group of its own (`true`, the default) or in the
    /// caller's.
    ///
    /// In its own group, a Ctrl-C at the terminal reaches only the caller (which decides, and
    /// cancels), a deadline or cancellation kills the whole group (a wrapper script and what it
    /// started, the compiler driver and its `cc1`), and the compiler is armed with
    /// `PR_SET_PDEATHSIG` to die with the calling process. Choose `false` in a process that
    /// leads a group its parent kills as a whole (a tunebox worker): the compiler is then killed
    /// with it, while a deadline here kills only the compiler process itself, leaving what it
    /// started to that group kill.
    pub own_process_group: bool,
}

impl Default for CompileControl<'_> {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_COMPILE_TIMEOUT,
            cancel: None,
            own_process_group: true,
        }
    }
}

impl std::fmt::Debug for CompileControl<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompileControl")
            .field("timeout", &self.timeout)
            .field("cancel", &self.cancel.map(|_| "Fn() -> bool"))
            .field("own_process_group", &self.own_process_group)
            .finish()
    }
}

impl CompileControl<'_> {
    fn limits(&self, start: Instant) -> Limits<'_> {
        Limits {
            deadline: start.checked_add(self.timeout),
            cancel: self.cancel,
            own_group: self.own_process_group,
        }
    }
}

/// Compiles `kernel`, called with `signature`, into a shared object in `cache`, or finds it there.
///
/// # What is compiled
///
/// One translation unit: `#line 1 "<source_name>"`, the kernel's source, then a generated
/// trampoline (under `#line 1 "<tunebox trampoline>"`):
///
/// ```c
/// void tunebox_trampoline(void *const *tensors, const int64_t *scalars) {
///     entry((float *)tensors[0], (double *)tensors[1], scalars[0]);
/// }
/// ```
///
/// The arguments follow the signature's order ([`Signature::args`]: Kernel Tuner's argument
/// list, scalars before tensors included). Each scalar travels in an 8-byte slot and is passed
/// as its C type: `scalars[i]` (`int64_t`), `(int32_t)scalars[i]`, or a `float` / `double`
/// copied out of the slot; an [`Arg::Untyped`] tensor is passed as `tensors[i]` (`void *`).
///
/// The trampoline calls the entry through the entry's own prototype, so C's argument conversions
/// apply (a `const float *` parameter accepts a `float *`, a `double` scalar becomes a `float`
/// parameter), and the compiler checks the call:
/// with `-Werror=incompatible-pointer-types -Werror=int-conversion
/// -Werror=implicit-function-declaration` a wrong arity, a wrong pointer type or a missing entry
/// is a compile error, not a crash. Every artifact is called through this one C signature, so
/// there is no limit on the number of arguments (this supersedes the "arity dispatch up to 16" of
/// the original issue). Compiler messages about the kernel cite `source_name` and its own line
/// numbers.
///
/// A C++ kernel ([`Language::of`]: a C++ compiler such as `g++`, a `.cpp` source name, or
/// `-x c++`) is compiled from a `.cpp` file, its trampoline is `extern "C"`, and an untyped
/// tensor converts to the parameter's pointer type through a template conversion (C++ has no
/// implicit conversion from `void *`); only `-fPIC -shared` are added, C++'s own rules check
/// the call.
///
/// The command is `<compiler> <flags…> -D<NAME>=<VALUE>… -fPIC -shared -Werror=… -MD -MF
/// <tmp>.d -o <tmp>.so <tmp>.c`, run with the working directory of the caller (so relative `-I`
/// flags resolve there). `-MD -MF` (gcc and clang have both) makes the compiler list every file it
/// read; a compiler that writes no such list is refused ([`CpuError::NoDependencies`]).
///
/// # Cache
///
/// Lookups work like ccache's "direct mode". The *base key* is a blake3 hash of the source,
/// source name, entry, defines, flags, compiler command, compiler identity (the first lines of
/// `<compiler> --version`, run once per compiler per process), the host CPU (model name and
/// feature flags from `/proc/cpuinfo`, so `-march=native` objects are never shared between
/// different CPUs through a shared home) and the trampoline. The headers are not known before
/// compiling, so they are tracked in two files per base key:
///
/// - `<cache>/<base>.deps`, the dependency manifest: the lists of files (headers, `-include`d
///   files, …) that the compiler read, from its `-MD` output, for the last few compilations of
///   this base key (at most 8, the most recent first), as the compiler named them: a header found
///   through a relative `-I` is listed relative to the working directory.
/// - `<cache>/<base>-<deps>.so`, one artifact per variant, where `<deps>` is a blake3 hash of
///   the listed paths and of the contents of those files. Variants coexist: a header edited and
///   then restored finds its first artifact again without compiling.
///
/// A lookup reads the manifest and, for each list, hashes the files as they are now (each at
/// most once, typically 10 to 30 small headers); when `<base>-<deps>.so` exists no compiler runs
/// ([`Artifact::was_cached`]), which is what a worker sees after the parent has precompiled. A
/// missing or corrupt manifest, a listed file that is gone or unreadable, or a hash with no
/// artifact is a miss: the kernel is compiled, the object renamed into place, then the manifest
/// rewritten with the new list first. So editing a header, adding an `#include` to it, or
/// deleting it (then the compiler reports the missing file) always recompiles.
///
/// A header that changes while it is being compiled (its modification or status-change time falls
/// within the compilation) is not recorded: the kernel is compiled again, up to three times, then
/// [`CpuError::DependencyChanged`]. Like ccache's direct mode, a lookup does not notice a *new*
/// file that would now be found earlier on the include path (e.g. a `vadd.h` created in an
/// earlier `-I` directory than the one the cached build used), nor files the compiler reads
/// without reporting them (`.incbin` data in inline assembly); change a define or flag, or clear
/// the cache, in those cases. A `-MMD` among the kernel's flags makes the compiler leave system
/// headers out of its list, so they are then not tracked.
///
/// Each artifact's blake3 hash is recorded in `<cache>/<base>-<deps>.so.blake3` when it is built,
/// and a lookup loads an artifact only when its contents still match: a truncated, damaged or
/// tampered object (or one without a record) is rebuilt, never loaded. The cache directory must
/// belong to the user and be writable only by them ([`CpuError::CacheDir`] otherwise), since the
/// objects in it are loaded and run.
///
/// Every file is written to a temporary file in the cache directory and renamed into place, so
/// concurrent compilations of one kernel (threads or processes) never expose a partial object or
/// manifest. Putting an object, its hash record and the manifest in place is serialized by an
/// advisory lock (`flock`) on the cache directory, held for those few renames only (not while
/// compiling): of concurrent builds of one variant the first is kept, and no manifest list is
/// lost. Temporary files are removed on every path.
///
/// Safe to call from many threads at once (e.g. with rayon).
///
/// # Errors
///
/// - [`CpuError::EmptySource`], [`CpuError::EmptyEntry`], [`CpuError::InvalidEntry`],
///   [`CpuError::InvalidDefine`], [`CpuError::InvalidArguments`]: the kernel description or
///   the signature's argument order is unusable; nothing was run.
/// - [`CpuError::CompilerNotFound`] / [`CpuError::CompilerSpawn`]: the compiler could not be run.
/// - [`CpuError::Compile`]: the compiler rejected the kernel; carries the command line and output.
/// - [`CpuError::NoDependencies`]: the compiler wrote no dependency list (no `-MD -MF` support).
/// - [`CpuError::DependencyChanged`]: a file the kernel includes kept changing during compilation.
/// - [`CpuError::CacheDir`] / [`CpuError::Io`]: the cache directory could not be used (or is
///   writable by others), or a file
///   the kernel includes could not be read after compiling.
/// - [`CpuError::CompileTimeout`]: the compiler (or its `--version` probe) ran past
///   [`DEFAULT_COMPILE_TIMEOUT`] and was killed; see [`compile_with`].
pub fn compile(
    kernel: &CKernel,
    signature: &Signature,
    cache: &CacheDir,
) -> Result<Artifact, CpuError> {
    compile_with(kernel, signature, cache, &CompileControl::default())
}

/// [`compile`] with a deadline and a cancellation check: the compiler is killed when
/// `control.timeout` has passed since this call began, or as soon as `control.cancel` returns
/// `true`.
///
/// The compiler runs with stdin from `/dev/null`; its stdout and stderr are read on two threads
/// of their own into bounded buffers (the first 64 KiB, for [`CpuError::Compile`], and the last
/// 4 KiB, for [`CpuError::CompileTimeout`]), so a chatty compiler cannot block on a full pipe.
/// Every wait is bounded: the compiler's exit is awaited on a pidfd in slices of 25 ms, so the
/// kill lands within about 25 ms of the deadline or the cancellation (plus the time to reap it
/// and to read what it printed last, at most 0.5 s more when a process that left its process
/// group holds its output open). A killed compiler is reaped before this returns; in its own
/// process group (the default, see [`CompileControl::own_process_group`]) everything it started
/// is SIGKILLed with it, so nothing is left running.
///
/// The `<compiler> --version` probe runs under the same deadline. Probes are memoized per
/// compiler for the life of the process, and so is a probe that timed out: later calls with a
/// timeout no longer than that one fail at once with [`CpuError::CompileTimeout`] rather than
/// waiting for the same hang again (a call with a longer timeout probes again). A cancelled
/// probe is not memoized.
///
/// # Errors
///
/// Those of [`compile`], and:
///
/// - [`CpuError::CompileTimeout`]: the deadline passed; the compiler was killed. Carries the
///   command and the compiler's last output.
/// - [`CpuError::CompileCancelled`]: `control.cancel` returned `true`; the compiler, if it had
///   started, was killed.
///
/// # Panics
///
/// Never on its own account; a panic in `control.cancel` propagates, after which the compiler is
/// left to the process group and parent-death rules above.
pub fn compile_with(
    kernel: &CKernel,
    signature: &Signature,
    cache: &CacheDir,
    control: &CompileControl<'_>,
) -> Result<Artifact, CpuError> {
    validate(kernel)?;
    let language = Language::of(kernel);
    let limits = control.limits(Instant::now());
    let trampoline = trampoline(&kernel.entry, signature, language).map_err(|detail| {
        CpuError::InvalidArguments {
            source_name: kernel.source_name.clone(),
            detail,
        }
    })?;
    let identity = compiler_identity(&kernel.compiler, control.timeout, &limits)?;
    let base = cache_key(kernel, language, &trampoline, &identity, host_cpu());
    let dir = cache.ensure()?;
    if let Some((key, path, dependencies)) = cache::lookup(dir, &base) {
        log::debug!(
            "cpu: cache hit for `{}`: {}",
            kernel.source_name,
            path.display()
        );
        return Ok(Artifact {
            path,
            key,
            cached: true,
            dependencies,
        });
    }
    let (key, path, dependencies) = build(
        kernel,
        language,
        &trampoline,
        dir,
        &base,
        control.timeout,
        &limits,
    )?;
    Ok(Artifact {
        path,
        key,
        cached: false,
        dependencies,
    })
}

fn io_err(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> CpuError + use<> {
    let path = path.to_path_buf();
    move |source| CpuError::Io {
        action,
        path,
        source,
    }
}

/// Compiles into temporary files in `dir`, then renames the object to `<base>-<deps>.so` and
/// records the files the compiler read in the manifest of `base`. Returns the artifact's key,
/// path and those files.
fn build(
    kernel: &CKernel,
    language: Language,
    trampoline: &str,
    dir: &Path,
    base: &str,
    timeout: Duration,
    limits: &Limits<'_>,
) -> Result<(String, PathBuf, Vec<PathBuf>), CpuError> {
    let temp = |suffix: &str| {
        tempfile::Builder::new()
            .prefix(".tunebox-")
            .suffix(suffix)
            .tempfile_in(dir)
    };

    let mut source_file =
        temp(language.suffix()).map_err(io_err("create a temporary source file in", dir))?;
    source_file
        .write_all(combined_source(kernel, trampoline).as_bytes())
        .map_err(io_err("write the kernel source to", source_file.path()))?;
    // Closed before the compiler reads it; removed when dropped, on every path.
    let source_path = source_file.into_temp_path();

    let mut changed = None;
    for attempt in 1..=BUILD_ATTEMPTS {
        if let Some(Changed {
            stamp: Some(stamp), ..
        }) = &changed
        {
            // Start the next attempt late enough that an unchanged file passes.
            let ready = *stamp + TIMESTAMP_SLACK;
            if let Ok(wait) = ready.duration_since(SystemTime::now()) {
                std::thread::sleep(wait.min(TIMESTAMP_SLACK));
            }
        }
        // Both removed when dropped, on every path (the object only if not persisted).
        let object_path = temp(".so")
            .map_err(io_err("create a temporary object file in", dir))?
            .into_temp_path();
        let depfile_path = temp(".d")
            .map_err(io_err("create a temporary dependency file in", dir))?
            .into_temp_path();

        let mut args: Vec<String> = kernel.flags.clone();
        args.extend(
            kernel
                .defines
                .iter()
                .map(|d| format!("-D{}={}", d.name, d.value)),
        );
        args.extend(language.fixed_flags().iter().map(|f| (*f).to_owned()));
        args.extend(["-MD".into(), "-MF".into()]);
        args.push(depfile_path.to_string_lossy().into_owned());
        args.push("-o".into());
        args.push(object_path.to_string_lossy().into_owned());
        args.push(source_path.to_string_lossy().into_owned());
        let (program, mut command_args) = compiler_command(&kernel.compiler)?;
        command_args.extend(args);
        let args = command_args;
        let command = render_command(&program, &args);
        log::debug!("cpu: compiling `{}`: {command}", kernel.source_name);

        let started = SystemTime::now();
        let outcome = subprocess::run(Command::new(&program).args(&args), limits)
            .map_err(|e| spawn_error(&program, e))?;
        let (status, output) = finished(outcome, &command, timeout)?;
        if !status.success() {
            return Err(CpuError::Compile {
                command,
                log: compiler_log(status, &output),
                dependencies: read_dependencies(kernel, &depfile_path, &source_path)
                    .unwrap_or_default(),
            });
        }
        let deps = read_dependencies(kernel, &depfile_path, &source_path)?;
        match digest_dependencies(&deps, started)? {
            Ok(digests) => {
                let key = cache::artifact_key(
                    base,
                    &cache::deps_hash(deps.iter().map(PathBuf::as_path).zip(digests)),
                );
                let path = cache::artifact_path(dir, &key);
                // The object with its recorded hash (a lookup loads an object only when its
                // recorded hash matches, so a truncated or tampered one is rebuilt, never
                // loaded), then the manifest, under the cache directory's lock.
                cache::publish(dir, base, &path, object_path, deps.clone())?;
                return Ok((key, path, deps));
            }
            Err(change) => {
                // Usually a file saved just before the run (a generator, an editor): the retry
                // settles it, so this is no news for the user; giving up is an error.
                log::debug!(
                    "cpu: `{}`, included by `{}`, changed while it was compiled, or just before \
                     (attempt {attempt} of {BUILD_ATTEMPTS})",
                    change.path.display(),
                    kernel.source_name
                );
                changed = Some(change);
            }
        }
    }
    let path = changed.map(|c| c.path).unwrap_or_default();
    Err(CpuError::DependencyChanged {
        source_name: kernel.source_name.clone(),
        path,
    })
}

/// A dependency that changed while the compiler may have been reading it.
#[derive(Debug)]
struct Changed {
    path: PathBuf,
    /// Its newest timestamp, if it still exists.
    stamp: Option<SystemTime>,
}

/// The files the compiler read, from the dependency file it wrote, without the temporary source
/// itself and without repeats, in the compiler's order.
fn read_dependencies(
    kernel: &CKernel,
    depfile: &Path,
    source: &Path,
) -> Result<Vec<PathBuf>, CpuError> {
    let no_deps = || CpuError::NoDependencies {
        compiler: kernel.compiler.clone(),
        path: depfile.to_path_buf(),
    };
    let text = match std::fs::read(depfile) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(no_deps()),
        Err(e) => {
            return Err(io_err(
                "read the dependency list the C compiler wrote to",
                depfile,
            )(e));
        }
    };
    let mut deps = parse_depfile(&text).ok_or_else(no_deps)?;
    let before = deps.len();
    deps.retain(|d| d != source);
    if deps.len() == before {
        log::warn!(
            "cpu: the dependency list of `{}` does not name its source `{}`",
            kernel.source_name,
            source.display()
        );
    }
    let mut seen = HashSet::new();
    deps.retain(|d| seen.insert(d.clone()));
    Ok(deps)
}

/// The digest of each of `deps`' contents, in order; `Err(Changed)` when one was modified (or
/// its status changed) at or after `started` (less [`TIMESTAMP_SLACK`]) and before its digest
/// was taken, or is gone, since then the object may have been built from other contents.
/// Timestamps after the check (a clock ahead of ours) are not a change.
fn digest_dependencies(
    deps: &[PathBuf],
    started: SystemTime,
) -> Result<Result<Vec<blake3::Hash>, Changed>, CpuError> {
    let since = started.checked_sub(TIMESTAMP_SLACK).unwrap_or(started);
    let mut digests = Vec::with_capacity(deps.len());
    let mut stamps = Vec::with_capacity(deps.len());
    for path in deps {
        let gone = || Changed {
            path: path.clone(),
            stamp: None,
        };
        let digest = match cache::file_digest(path) {
            Ok(digest) => digest,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Err(gone())),
            Err(e) => return Err(io_err("read the included file", path)(e)),
        };
        let metadata = match std::fs::metadata(path) {
            Ok(metadata) => metadata,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Err(gone())),
            Err(e) => return Err(io_err("read the status of", path)(e)),
        };
        digests.push(digest);
        stamps.push(newest_stamp(&metadata));
    }
    let checked = SystemTime::now();
    for (path, stamp) in deps.iter().zip(stamps) {
        if stamp >= since && stamp <= checked {
            return Ok(Err(Changed {
                path: path.clone(),
                stamp: Some(stamp),
            }));
        }
    }
    Ok(Ok(digests))
}

/// The later of a file's modification and status-change times.
fn newest_stamp(metadata: &std::fs::Metadata) -> SystemTime {
    let at = |secs: i64, nanos: i64| {
        let (Ok(secs), Ok(nanos)) = (u64::try_from(secs), u32::try_from(nanos)) else {
            return SystemTime::UNIX_EPOCH;
        };
        SystemTime::UNIX_EPOCH + Duration::new(secs, nanos)
    };
    at(metadata.mtime(), metadata.mtime_nsec()).max(at(metadata.ctime(), metadata.ctime_nsec()))
}

/// The prerequisites of the first rule of a Makefile-style dependency file as gcc and clang write
/// it for `-MD`: `target…: prerequisite… \` continued over lines. The targets end at the first
/// `:` followed by white space or the end of the line (a `:` inside a path, as in a cache directory
/// named `a:b`, is followed by more of the path). Decodes the escapes of both compilers: `\ ` is a
/// space inside a name (and `2n+1` backslashes before a space are `n` backslashes and a space),
/// `\#` is `#`, `$$` is `$`; a backslash before a newline continues the line. Other rules (from a
/// user's `-MP`) are ignored. `None` when there is no rule.
pub(crate) fn parse_depfile(text: &[u8]) -> Option<Vec<PathBuf>> {
    let mut tokens: Vec<Vec<u8>> = Vec::new();
    let mut token = Vec::new();
    let mut in_targets = true;
    fn end_token(token: &mut Vec<u8>, tokens: &mut Vec<Vec<u8>>) {
        if !token.is_empty() {
            tokens.push(std::mem::take(token));
        }
    }
    let mut i = 0;
    while i < text.len() {
        match text[i] {
            b'\\' => {
                let run = text[i..].iter().take_while(|&&b| b == b'\\').count();
                let next = text.get(i + run).copied();
                match next {
                    Some(b' ' | b'\t') => {
                        token.extend(std::iter::repeat_n(b'\\', run / 2));
                        if run % 2 == 1 {
                            token.extend(next);
                        } else {
                            end_token(&mut token, &mut tokens);
                        }
                        i += run + 1;
                    }
                    Some(b'#') => {
                        token.extend(std::iter::repeat_n(b'\\', run - 1));
                        token.push(b'#');
                        i += run + 1;
                    }
                    Some(b'\n') => {
                        token.extend(std::iter::repeat_n(b'\\', run - 1));
                        end_token(&mut token, &mut tokens);
                        i += run + 1;
                    }
                    Some(b'\r') if text.get(i + run + 1) == Some(&b'\n') => {
                        token.extend(std::iter::repeat_n(b'\\', run - 1));
                        end_token(&mut token, &mut tokens);
                        i += run + 2;
                    }
                    _ => {
                        token.extend(std::iter::repeat_n(b'\\', run));
                        i += run;
                    }
                }
            }
            b'$' if text.get(i + 1) == Some(&b'$') => {
                token.push(b'$');
                i += 2;
            }
            b' ' | b'\t' | b'\r' => {
                end_token(&mut token, &mut tokens);
                i += 1;
            }
            b'\n' => {
                end_token(&mut token, &mut tokens);
                if !in_targets {
                    break;
                }
                i += 1;
            }
            b':' if in_targets
                && matches!(text.get(i + 1), None | Some(b' ' | b'\t' | b'\r' | b'\n')) =>
            {
                end_token(&mut token, &mut tokens);
                tokens.clear();
                in_targets = false;
                i += 1;
            }
            b => {
                token.push(b);
                i += 1;
            }
        }
    }
    end_token(&mut token, &mut tokens);
    (!in_targets).then(|| tokens.into_iter().map(cache::path_from_bytes).collect())
}

fn validate(kernel: &CKernel) -> Result<(), CpuError> {
    let source_name = || kernel.source_name.clone();
    if kernel.source.trim().is_empty() {
        return Err(CpuError::EmptySource {
            source_name: source_name(),
        });
    }
    if kernel.entry.is_empty() {
        return Err(CpuError::EmptyEntry {
            source_name: source_name(),
        });
    }
    if !Define::is_c_identifier(&kernel.entry) {
        return Err(CpuError::InvalidEntry {
            source_name: source_name(),
            entry: kernel.entry.clone(),
        });
    }
    if let Some(define) = kernel
        .defines
        .iter()
        .find(|d| !Define::is_c_identifier(&d.name))
    {
        return Err(CpuError::InvalidDefine {
            source_name: source_name(),
            name: define.name.clone(),
        });
    }
    if kernel.compiler.trim().is_empty() {
        return Err(CpuError::CompilerNotFound {
            compiler: kernel.compiler.clone(),
        });
    }
    Ok(())
}

fn c_type(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "float",
        DType::F64 => "double",
        DType::I32 => "int32_t",
        DType::I64 => "int64_t",
        DType::U8 => "uint8_t",
    }
}

/// The C trampoline that calls `entry` with `signature`'s arguments in its order, one per line
/// so that a diagnostic points at the offending argument. Every scalar travels in an 8-byte slot
/// of `scalars` ([`Scalar::slot`](tunebox_protocol::Scalar::slot)): an `int64_t` is the slot, an
/// `int32_t` its cast, a `float` or `double` copied out of it. For C++ the trampoline is
/// `extern "C"` (so that its symbol is not mangled), and an untyped tensor converts to the
/// parameter's pointer type through a template conversion.
///
/// The default order with `int64_t` scalars, in C, gives the text of earlier versions byte for
/// byte (their cache keys hash it).
///
/// # Errors
///
/// The argument order does not name each tensor and scalar exactly once ([`Arg::resolve`]).
pub(crate) fn trampoline(
    entry: &str,
    signature: &Signature,
    language: Language,
) -> Result<String, String> {
    let order = Arg::resolve(
        &signature.args,
        signature.tensors.len(),
        signature.scalars.len(),
    )?;
    let mut args = String::new();
    let mut locals = String::new();
    let mut untyped = false;
    for arg in order {
        let sep = if args.is_empty() { "" } else { "," };
        let i = arg.index() as usize;
        let _ = match arg {
            Arg::Tensor(_) => write!(
                args,
                "{sep}\n        ({} *)tensors[{i}]",
                c_type(signature.tensors[i])
            ),
            Arg::Untyped(_) if language == Language::Cxx => {
                untyped = true;
                write!(args, "{sep}\n        tunebox_untyped{{tensors[{i}]}}")
            }
            Arg::Untyped(_) => write!(args, "{sep}\n        tensors[{i}]"),
            Arg::Scalar(_) => match signature.scalars[i] {
                ScalarKind::I64 => write!(args, "{sep}\n        scalars[{i}]"),
                ScalarKind::I32 => write!(args, "{sep}\n        (int32_t)scalars[{i}]"),
                kind @ (ScalarKind::F32 | ScalarKind::F64) => {
                    let _ = write!(
                        locals,
                        "    {c} tunebox_scalar_{i};\n    \
                         __builtin_memcpy(&tunebox_scalar_{i}, &scalars[{i}], sizeof \
                         tunebox_scalar_{i});\n",
                        c = kind.c_type()
                    );
                    write!(args, "{sep}\n        tunebox_scalar_{i}")
                }
            },
        };
    }
    let (linkage, helper) = match language {
        Language::C => ("", ""),
        Language::Cxx => ("extern \"C\" ", if untyped { CXX_UNTYPED } else { "" }),
    };
    Ok(format!(
        "#line 1 \"<tunebox trampoline>\"\n\
         #include <stdint.h>\n\
         {helper}\
         {linkage}__attribute__((visibility(\"default\")))\n\
         void {TRAMPOLINE_SYMBOL}(void *const *tensors, const int64_t *scalars);\n\
         {linkage}void {TRAMPOLINE_SYMBOL}(void *const *tensors, const int64_t *scalars) {{\n    \
             (void)tensors;\n    \
             (void)scalars;\n\
         {locals}    \
             {entry}({args});\n\
         }}\n"
    ))
}

/// C++ has no implicit conversion from `void *`: an untyped tensor converts to whatever pointer
/// type the parameter has through this template.
const CXX_UNTYPED: &str = "struct tunebox_untyped {\n    \
    void *pointer;\n    \
    template <typename T> operator T *() const { return static_cast<T *>(pointer); }\n\
};\n";

/// The translation unit: the user's source under its own name and line numbers, then the
/// trampoline.
fn combined_source(kernel: &CKernel, trampoline: &str) -> String {
    let mut text = format!("#line 1 \"{}\"\n", c_string_body(&kernel.source_name));
    text.push_str(&kernel.source);
    if !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(trampoline);
    text
}

/// `s` escaped for the inside of a C string literal; control characters become `?`.
fn c_string_body(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            c if c.is_control() => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// The base key: everything known about a compilation before running it (not the headers).
pub(crate) fn cache_key(
    kernel: &CKernel,
    language: Language,
    trampoline: &str,
    compiler_identity: &str,
    host_cpu: &str,
) -> String {
    let mut h = KeyHasher::new();
    h.field(KEY_VERSION)
        .field(&kernel.source)
        .field(&kernel.source_name)
        .field(&kernel.entry)
        .field((kernel.defines.len() as u64).to_le_bytes());
    for define in &kernel.defines {
        h.field(&define.name).field(&define.value);
    }
    h.list(kernel.flags.iter().map(String::as_str))
        .list(language.fixed_flags().iter().copied())
        .field(&kernel.compiler)
        .field(compiler_identity)
        .field(host_cpu)
        .field(trampoline);
    h.finish()
}

/// The words of a compiler command as make users write `CC`: `cc`, `/usr/bin/gcc-12`,
/// `ccache cc`, `cc -std=c11`, `"/opt/my tools/cc" -m64` (split as a POSIX shell splits words,
/// quotes and backslashes included). A path to an existing file is one word even with spaces in
/// it. `None` when the quotes do not balance.
pub(crate) fn compiler_words(compiler: &str) -> Option<Vec<String>> {
    if Path::new(compiler).is_file() {
        return Some(vec![compiler.to_owned()]);
    }
    shlex::split(compiler)
}

/// The program and leading arguments of the compiler command `compiler` ([`compiler_words`]).
fn compiler_command(compiler: &str) -> Result<(String, Vec<String>), CpuError> {
    let Some(mut words) = compiler_words(compiler) else {
        return Err(CpuError::CompilerSpawn {
            compiler: compiler.to_owned(),
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                "its quotes do not balance (the compiler command is split into words as a shell \
                 splits CC)",
            ),
        });
    };
    if words.is_empty() {
        return Err(CpuError::CompilerNotFound {
            compiler: String::new(),
        });
    }
    let program = words.remove(0);
    Ok((program, words))
}

fn spawn_error(compiler: &str, source: io::Error) -> CpuError {
    if source.kind() == io::ErrorKind::NotFound {
        CpuError::CompilerNotFound {
            compiler: compiler.to_owned(),
        }
    } else {
        CpuError::CompilerSpawn {
            compiler: compiler.to_owned(),
            source,
        }
    }
}

/// The exit status and output of a compiler that exited by itself; the error for one that was
/// killed at the deadline (`timeout`) or cancelled.
fn finished(
    outcome: Outcome,
    command: &str,
    timeout: Duration,
) -> Result<(ExitStatus, Captured), CpuError> {
    match outcome {
        Outcome::Exited { status, output } => Ok((status, output)),
        Outcome::TimedOut { output, late } => {
            log::debug!(
                "cpu: killed `{command}` at its {timeout:?} deadline; reaped {late:?} after it"
            );
            Err(CpuError::CompileTimeout {
                command: command.to_owned(),
                after: timeout,
                log: last_output(&output),
            })
        }
        Outcome::Cancelled => Err(CpuError::CompileCancelled {
            command: command.to_owned(),
        }),
    }
}

/// What [`compiler_identity`] learned about a compiler.
#[derive(Debug, Clone)]
enum Probe {
    /// The first lines of its `--version`.
    Identity(String),
    /// `--version` ran past a deadline of `after` and was killed, after printing `log`.
    Hung { after: Duration, log: String },
}

/// The first two lines of `<compiler> --version` (what the cache keys hold of a compiler), run
/// within `control`'s timeout and cancel check and memoized per compiler name for the life of
/// the process: a compiler that hangs on `--version` costs one deadline, not one per choice.
///
/// # Errors
///
/// [`CpuError::CompilerNotFound`] / [`CpuError::CompilerSpawn`]: it could not be run;
/// [`CpuError::CompileTimeout`] / [`CpuError::CompileCancelled`]: it did not answer in time.
pub fn compiler_version(compiler: &str, control: &CompileControl<'_>) -> Result<String, CpuError> {
    compiler_identity(compiler, control.timeout, &control.limits(Instant::now()))
}

/// The first two lines of `<compiler> --version`, memoized per compiler name for the life of the
/// process (the lock is held while probing, so each compiler is probed once), run within
/// `limits` (whose deadline is `timeout` after the compile began). A probe that timed out is
/// memoized too, and answers every later call whose timeout is no longer than its own.
fn compiler_identity(
    compiler: &str,
    timeout: Duration,
    limits: &Limits<'_>,
) -> Result<String, CpuError> {
    static PROBES: Mutex<BTreeMap<String, Probe>> = Mutex::new(BTreeMap::new());
    let (program, mut args) = compiler_command(compiler)?;
    args.push("--version".to_owned());
    let command = render_command(&program, &args);
    let hung = |after, log: &str| CpuError::CompileTimeout {
        command: command.clone(),
        after,
        log: log.to_owned(),
    };
    let mut probes = PROBES.lock().unwrap_or_else(PoisonError::into_inner);
    match probes.get(compiler) {
        Some(Probe::Identity(identity)) => return Ok(identity.clone()),
        Some(Probe::Hung { after, log }) if timeout <= *after => return Err(hung(*after, log)),
        Some(Probe::Hung { .. }) | None => {}
    }
    let outcome = subprocess::run(Command::new(&program).args(&args), limits)
        .map_err(|e| spawn_error(&program, e))?;
    let (status, output) = match finished(outcome, &command, timeout) {
        Ok(exited) => exited,
        Err(CpuError::CompileTimeout { after, log, .. }) => {
            probes.insert(
                compiler.to_owned(),
                Probe::Hung {
                    after,
                    log: log.clone(),
                },
            );
            return Err(hung(after, &log));
        }
        Err(e) => return Err(e),
    };
    let text = if output.stdout.is_blank() {
        output.stderr.head().0
    } else {
        output.stdout.head().0
    };
    let mut identity: String = String::from_utf8_lossy(text)
        .lines()
        .take(2)
        .collect::<Vec<_>>()
        .join("\n");
    if !status.success() {
        log::warn!(
            "cpu: `{compiler} --version` failed ({status}); cached kernels will not notice a \
             compiler upgrade"
        );
        let _ = write!(identity, "\n{status}");
    }
    probes.insert(compiler.to_owned(), Probe::Identity(identity.clone()));
    Ok(identity)
}

/// The host CPU as `/proc/cpuinfo` describes it, read once per process.
fn host_cpu() -> &'static str {
    static HOST_CPU: OnceLock<String> = OnceLock::new();
    HOST_CPU.get_or_init(|| {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        cpu_description(&cpuinfo)
    })
}

/// The architecture, the first core's model (x86 `model name`; arm `CPU implementer/part/…`)
/// and its feature flags (a hypervisor can mask features of an identically named model).
pub(crate) fn cpu_description(cpuinfo: &str) -> String {
    let field = |key: &str| {
        cpuinfo.lines().find_map(|line| {
            let (k, v) = line.split_once(':')?;
            (k.trim() == key).then(|| v.trim())
        })
    };
    let mut description = std::env::consts::ARCH.to_owned();
    for key in [
        "model name",
        "CPU implementer",
        "CPU variant",
        "CPU part",
        "flags",
        "Features",
    ] {
        if let Some(value) = field(key) {
            let _ = write!(description, "\n{key}: {value}");
        }
    }
    description
}

/// `compiler args…`, quoted for a POSIX shell so it can be pasted.
fn render_command(compiler: &str, args: &[String]) -> String {
    std::iter::once(compiler)
        .chain(args.iter().map(String::as_str))
        .map(shell_quote)
        .collect::<Vec<_>>()
        .join(" ")
}

fn shell_quote(arg: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_=./,:+@%^".contains(c);
    if !arg.is_empty() && arg.chars().all(plain) {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// The compiler's stderr then stdout, at most [`MAX_LOG_BYTES`] of it.
fn compiler_log(status: ExitStatus, output: &Captured) -> String {
    let (stderr, stderr_more) = output.stderr.head();
    let (stdout, stdout_more) = output.stdout.head();
    let mut log = String::from_utf8_lossy(stderr).into_owned();
    let mut dropped = stderr_more;
    if output.stdout.is_blank() {
        dropped += stdout_more;
    } else {
        if !log.is_empty() && !log.ends_with('\n') {
            log.push('\n');
        }
        log.push_str(&String::from_utf8_lossy(stdout));
        dropped += stdout_more;
    }
    if log.trim().is_empty() && dropped == 0 {
        return format!("the compiler exited with {status} and printed nothing");
    }
    if log.len() > MAX_LOG_BYTES {
        let mut cut = MAX_LOG_BYTES;
        while !log.is_char_boundary(cut) {
            cut -= 1;
        }
        dropped += log.len() - cut;
        log.truncate(cut);
    }
    if dropped > 0 {
        let _ = write!(log, "\n[… {dropped} more bytes of compiler output]");
    }
    log
}

/// The last lines a killed compiler printed: the end of its stderr, then of its stdout (each at
/// most 4 KiB, from the start of a line, after `[…]` when earlier output was dropped), or a note
/// that it printed nothing.
fn last_output(output: &Captured) -> String {
    let mut parts: Vec<String> = Vec::new();
    for capture in [&output.stderr, &output.stdout] {
        if capture.is_blank() {
            continue;
        }
        let (tail, cut) = capture.tail();
        let text = String::from_utf8_lossy(tail);
        let text = if cut {
            // A cut tail starts mid-line: begin at the next whole line, if there is one.
            let whole = match text.split_once('\n') {
                Some((_, rest)) if !rest.trim().is_empty() => rest,
                _ => &text,
            };
            format!("[…]\n{}", whole.trim_end())
        } else {
            text.trim_end().to_owned()
        };
        parts.push(text);
    }
    if parts.is_empty() {
        return "(it printed nothing)".to_owned();
    }
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tunebox_protocol::Define;

    fn kernel() -> CKernel {
        CKernel {
            source: "void k(float *a) { a[0] = 1; }".into(),
            source_name: "k.c".into(),
            entry: "k".into(),
            defines: vec![Define::new("BLOCK", "32")],
            flags: vec!["-O2".into()],
            compiler: "cc".into(),
        }
    }

    #[test]
    fn trampoline_casts_tensors_and_passes_scalars() {
        let text = trampoline(
            "add",
            &Signature::new([DType::F32, DType::U8], 2),
            Language::C,
        )
        .unwrap();
        assert!(
            text.contains(
                "void tunebox_trampoline(void *const *tensors, const int64_t *scalars) {"
            )
        );
        assert!(text.contains(
            "    add(\n        (float *)tensors[0],\n        (uint8_t *)tensors[1],\n        \
             scalars[0],\n        scalars[1]);\n"
        ));
        assert!(
            trampoline("nop", &Signature::new([], 0), Language::C)
                .unwrap()
                .contains("    nop();\n")
        );
    }

    /// The text of tunebox 0.x's trampoline (before argument orders and scalar kinds), which
    /// existing cache keys hash: the default order must still give it byte for byte.
    #[test]
    fn default_order_keeps_the_old_trampoline_text() {
        let old = "#line 1 \"<tunebox trampoline>\"\n#include <stdint.h>\n\
                   __attribute__((visibility(\"default\")))\n\
                   void tunebox_trampoline(void *const *tensors, const int64_t *scalars);\n\
                   void tunebox_trampoline(void *const *tensors, const int64_t *scalars) {\n    \
                   (void)tensors;\n    (void)scalars;\n    add(\n        (float *)tensors[0],\n        \
                   (uint8_t *)tensors[1],\n        scalars[0],\n        scalars[1]);\n}\n";
        let signature = Signature::new([DType::F32, DType::U8], 2);
        assert_eq!(trampoline("add", &signature, Language::C).unwrap(), old);
        // The default order given explicitly is the same signature's text, so the same key.
        let explicit = signature.clone().args([
            Arg::Tensor(0),
            Arg::Tensor(1),
            Arg::Scalar(0),
            Arg::Scalar(1),
        ]);
        assert_eq!(trampoline("add", &explicit, Language::C).unwrap(), old);
    }

    #[test]
    fn trampoline_follows_the_order_and_the_scalar_kinds() {
        let signature = Signature::with_scalars(
            [DType::F32, DType::F64],
            [
                ScalarKind::I32,
                ScalarKind::F32,
                ScalarKind::F64,
                ScalarKind::I64,
            ],
        )
        .args([
            Arg::Scalar(0),
            Arg::Tensor(1),
            Arg::Scalar(1),
            Arg::Untyped(0),
            Arg::Scalar(2),
            Arg::Scalar(3),
        ]);
        let text = trampoline("k", &signature, Language::C).unwrap();
        assert!(
            text.contains(
                "    float tunebox_scalar_1;\n    __builtin_memcpy(&tunebox_scalar_1, \
                 &scalars[1], sizeof tunebox_scalar_1);\n"
            ) && text.contains("    double tunebox_scalar_2;\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "    k(\n        (int32_t)scalars[0],\n        (double *)tensors[1],\n        \
                 tunebox_scalar_1,\n        tensors[0],\n        tunebox_scalar_2,\n        \
                 scalars[3]);\n"
            ),
            "{text}"
        );
        assert!(!text.contains("extern"), "{text}");
        let cxx = trampoline("k", &signature, Language::Cxx).unwrap();
        assert!(
            cxx.contains("extern \"C\" void tunebox_trampoline(")
                && cxx.contains("struct tunebox_untyped {")
                && cxx.contains("        tunebox_untyped{tensors[0]},\n"),
            "{cxx}"
        );
    }

    #[test]
    fn compiler_commands_are_split_like_cc() {
        let words = |c: &str| compiler_words(c).unwrap();
        assert_eq!(words("cc"), ["cc"]);
        assert_eq!(words("ccache cc"), ["ccache", "cc"]);
        assert_eq!(words(" cc  -std=c11 "), ["cc", "-std=c11"]);
        assert_eq!(words("'/opt/my cc/gcc' -m64"), ["/opt/my cc/gcc", "-m64"]);
        assert_eq!(compiler_words("cc 'x"), None);
        let dir = tempfile::tempdir().unwrap();
        let spaced = dir.path().join("my cc");
        std::fs::write(&spaced, "").unwrap();
        let spaced = spaced.to_string_lossy().into_owned();
        assert_eq!(words(&spaced), std::slice::from_ref(&spaced));
        assert_eq!(
            compiler_command("ccache cc -O1").unwrap(),
            ("ccache".to_owned(), vec!["cc".to_owned(), "-O1".to_owned()])
        );
    }

    #[test]
    fn a_bad_order_is_refused() {
        let signature = Signature::new([DType::F32], 1);
        let err =
            |args: &[Arg]| trampoline("k", &signature.clone().args(args), Language::C).unwrap_err();
        let twice = err(&[Arg::Tensor(0), Arg::Scalar(0), Arg::Untyped(0)]);
        assert!(twice.contains("tensor 0 is given twice"), "{twice}");
        let missing = err(&[Arg::Tensor(0)]);
        assert!(missing.contains("scalar 0 is missing"), "{missing}");
        let range = err(&[Arg::Tensor(0), Arg::Scalar(1)]);
        assert!(
            range.contains(
                "argument 1 of the argument order is scalar 1, but the request has 1 \
                            scalars"
            ),
            "{range}"
        );
    }

    #[test]
    fn language_from_compiler_extension_or_flags() {
        let with = |compiler: &str, name: &str, flags: &[&str]| {
            let mut k = kernel();
            k.compiler = compiler.into();
            k.source_name = name.into();
            k.flags = flags.iter().map(|f| (*f).to_owned()).collect();
            Language::of(&k)
        };
        assert_eq!(with("cc", "k.c", &[]), Language::C);
        assert_eq!(with("ccache g++", "k.c", &[]), Language::Cxx);
        assert_eq!(with("cc -std=c11", "k.c", &[]), Language::C);
        assert_eq!(with("ccache cc -DX=\"a++\"", "k.c", &[]), Language::C);
        assert_eq!(with("/usr/bin/gcc-12", "dir.cpp/k.c", &[]), Language::C);
        assert_eq!(with("g++", "k.c", &[]), Language::Cxx);
        assert_eq!(with("/opt/bin/clang++-17", "k", &[]), Language::Cxx);
        assert_eq!(with("cc", "k.cpp", &[]), Language::Cxx);
        assert_eq!(with("cc", "k.c", &["-x", "c++"]), Language::Cxx);
        assert_eq!(with("cc", "k.c", &["-xc++"]), Language::Cxx);
    }

    #[test]
    fn source_keeps_user_lines_and_escapes_the_name() {
        let mut k = kernel();
        k.source_name = "dir\\a \"b\"\n.c".into();
        let text = combined_source(&k, "T");
        assert!(
            text.starts_with("#line 1 \"dir\\\\a \\\"b\\\"?.c\"\nvoid k"),
            "{text}"
        );
        assert!(text.ends_with("}\nT"));
    }

    #[test]
    fn key_covers_every_input() {
        let base = kernel();
        let t = trampoline("k", &Signature::new([DType::F32], 0), Language::C).unwrap();
        let key = cache_key(&base, Language::C, &t, "gcc 12", "cpu A");
        assert_eq!(key.len(), 64);
        assert_eq!(key, cache_key(&base, Language::C, &t, "gcc 12", "cpu A"));
        let variants: [fn(&mut CKernel); 6] = [
            |k| k.source.push(' '),
            |k| k.source_name = "other.c".into(),
            |k| k.defines[0].value = "64".into(),
            |k| k.defines.push(Define::new("X", "1")),
            |k| k.flags.push("-march=native".into()),
            |k| k.compiler = "clang".into(),
        ];
        for change in variants {
            let mut k = base.clone();
            change(&mut k);
            assert_ne!(
                cache_key(&k, Language::C, &t, "gcc 12", "cpu A"),
                key,
                "{k:?}"
            );
        }
        assert_ne!(cache_key(&base, Language::C, &t, "gcc 13", "cpu A"), key);
        assert_ne!(cache_key(&base, Language::C, &t, "gcc 12", "cpu B"), key);
        let t2 = trampoline("k", &Signature::new([DType::F64], 0), Language::C).unwrap();
        assert_ne!(cache_key(&base, Language::C, &t2, "gcc 12", "cpu A"), key);
        // Field boundaries matter: moving a character between two fields changes the key.
        let mut a = base.clone();
        a.flags = vec!["-O".into(), "2".into()];
        let mut b = base.clone();
        b.flags = vec!["-O2".into()];
        assert_ne!(
            cache_key(&a, Language::C, &t, "i", "c"),
            cache_key(&b, Language::C, &t, "i", "c")
        );
    }

    #[test]
    fn validation() {
        let check = |change: fn(&mut CKernel)| {
            let mut k = kernel();
            change(&mut k);
            validate(&k).unwrap_err()
        };
        assert!(matches!(
            check(|k| k.source = " \n".into()),
            CpuError::EmptySource { .. }
        ));
        assert!(matches!(
            check(|k| k.entry.clear()),
            CpuError::EmptyEntry { .. }
        ));
        assert!(matches!(
            check(|k| k.entry = "f(); x".into()),
            CpuError::InvalidEntry { .. }
        ));
        assert!(matches!(
            check(|k| k.entry = "1f".into()),
            CpuError::InvalidEntry { .. }
        ));
        assert!(matches!(
            check(|k| k.defines[0].name = "A=B".into()),
            CpuError::InvalidDefine { .. }
        ));
        assert!(matches!(
            check(|k| k.compiler.clear()),
            CpuError::CompilerNotFound { .. }
        ));
        assert!(validate(&kernel()).is_ok());
    }

    #[test]
    fn cpu_description_reads_x86_and_arm() {
        let x86 = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu avx2\n\
                   processor\t: 1\nmodel name\t: AMD EPYC 7B13\n";
        let d = cpu_description(x86);
        assert!(
            d.contains("model name: AMD EPYC 7B13") && d.contains("flags: fpu avx2"),
            "{d}"
        );
        let arm =
            "processor\t: 0\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n";
        let d = cpu_description(arm);
        assert!(
            d.contains("CPU part: 0xd0c") && d.contains("Features: fp asimd"),
            "{d}"
        );
        assert_ne!(cpu_description(x86), cpu_description(arm));
    }

    fn paths(names: &[&str]) -> Vec<PathBuf> {
        names.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn depfile_as_gcc_writes_it() {
        // gcc 12, for a cache directory and an include directory named `a b#c$d:e`.
        let text =
            b"a\\ b\\#c$$d:e/o\\ x.so: a\\ b\\#c$$d:e/src\\ x.c /usr/include/stdc-predef.h \\\n \
                     /usr/include/stdint.h \\\n /usr/include/features.h a\\ b\\#c$$d:e/v\\ h.h\n";
        assert_eq!(
            parse_depfile(text).unwrap(),
            paths(&[
                "a b#c$d:e/src x.c",
                "/usr/include/stdc-predef.h",
                "/usr/include/stdint.h",
                "/usr/include/features.h",
                "a b#c$d:e/v h.h",
            ])
        );
    }

    #[test]
    fn depfile_edge_cases() {
        // CRLF line ends and continuations; several targets; no trailing newline.
        assert_eq!(
            parse_depfile(b"t1 t2: a.c \\\r\n  b.h\r\n").unwrap(),
            paths(&["a.c", "b.h"])
        );
        assert_eq!(
            parse_depfile(b"t: a.c b.h").unwrap(),
            paths(&["a.c", "b.h"])
        );
        // Phony rules from a user's `-MP` are not prerequisites.
        assert_eq!(
            parse_depfile(b"t: a.c b.h\n\nb.h:\n").unwrap(),
            paths(&["a.c", "b.h"])
        );
        // Backslashes: 2n+1 before a space are n and a space, 2n end the name after n; others
        // are literal; `\#` is `#`.
        assert_eq!(
            parse_depfile(b"t: a\\\\\\ b c\\\\ d\\e f\\#g\n").unwrap(),
            paths(&["a\\ b", "c\\", "d\\e", "f#g"])
        );
        // A single `$` is literal; `$$` is one.
        assert_eq!(parse_depfile(b"t: $a $$b\n").unwrap(), paths(&["$a", "$b"]));
        // A target with no prerequisites; no rule at all.
        assert_eq!(parse_depfile(b"t:\n").unwrap(), paths(&[]));
        assert_eq!(parse_depfile(b""), None);
        assert_eq!(parse_depfile(b"just words\n"), None);
        assert_eq!(parse_depfile(b"c:/no/separator\n"), None);
        // Non-UTF-8 names survive.
        assert_eq!(
            parse_depfile(b"t: caf\xe9.h\n").unwrap(),
            vec![cache::path_from_bytes(b"caf\xe9.h".to_vec())]
        );
    }

    #[test]
    fn commands_are_shell_quoted() {
        let args = ["-O3".to_owned(), "-DNAME=a b".to_owned(), "it's".to_owned()];
        assert_eq!(
            render_command("cc", &args),
            r"cc -O3 '-DNAME=a b' 'it'\''s'"
        );
    }
}
