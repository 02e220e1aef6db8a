//! Compiling a C kernel and its trampoline into a cached shared object.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use tunebox_protocol::{CKernel, Define};

use crate::cache::{self, KeyHasher};
use crate::depfile::{Changed, TIMESTAMP_SLACK, digest_dependencies, read_dependencies};
use crate::error::io_err;
use crate::subprocess::{self, Limits};
use crate::toolchain::{
    Language, compiler_command, compiler_identity, compiler_log, finished, host_cpu,
    render_command, spawn_error,
};
use crate::trampoline::{Signature, combined_source, trampoline};
use crate::{CacheDir, CpuError};

/// Bump when the artifact layout or the trampoline's contract changes, so that old cache entries
/// are never loaded by a new tunebox.
const KEY_VERSION: &str = "tunebox-cpu artifact v3";

/// The target the dependency file names (`-MT`), the same for every build, so that the file's
/// text depends on what was compiled only (compiler caches such as ccache restore it as is).
const DEPFILE_TARGET: &str = "tunebox-kernel.o";

/// How long [`compile`] lets the compiler run (probing its identity, then compiling, all
/// attempts together) before it kills it: two minutes, far more than a C kernel needs even on a
/// loaded machine, and short enough that a hung compiler does not hold a run for long.
pub const DEFAULT_COMPILE_TIMEOUT: Duration = Duration::from_secs(120);

/// Compilations tried before giving up on a header that changes while it is being compiled.
const BUILD_ATTEMPTS: usize = 3;

/// A compiled kernel in the cache: a shared object exporting
/// `void tunebox_trampoline(void *const *tunebox_tensors, const int64_t *tunebox_scalars)`.
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
    /// Whether the compiler runs in the background (`false`, the default, runs it as any
    /// process): at the lowest priority the kernel has (`SCHED_IDLE`, and nice 19 so that its
    /// time shows as `nice` in `/proc/stat`), so that it only ever gets a CPU that nothing else
    /// wants. A benchmark measuring beside it keeps its CPU: the scheduler preempts a
    /// `SCHED_IDLE` process as soon as another one wakes on that CPU. Best effort: where the
    /// kernel refuses either setting, the compiler runs as it would have.
    ///
    /// A background compiler may get no CPU at all on a machine kept busy by work of normal
    /// priority: one that waits for a CPU and gets almost none for a while is killed, and the
    /// call returns [`CpuError::CompileStarved`], for the caller to compile it again in the
    /// foreground. Where the kernel cannot tell ([`can_compile_in_background`] is `false`),
    /// choose `false`.
    pub background: bool,
}

impl Default for CompileControl<'_> {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_COMPILE_TIMEOUT,
            cancel: None,
            own_process_group: true,
            background: false,
        }
    }
}

impl std::fmt::Debug for CompileControl<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompileControl")
            .field("timeout", &self.timeout)
            .field("cancel", &self.cancel.map(|_| "Fn() -> bool"))
            .field("own_process_group", &self.own_process_group)
            .field("background", &self.background)
            .finish()
    }
}

/// Whether compiles can run in the background ([`CompileControl::background`]) here: the
/// kernel says how long a process waited for a CPU (`/proc/<pid>/schedstat`), which is how a
/// starved background compile is told from a slow one.
pub fn can_compile_in_background() -> bool {
    crate::subprocess::can_watch_starvation()
}

impl CompileControl<'_> {
    fn limits(&self, start: Instant) -> Limits<'_> {
        Limits {
            deadline: start.checked_add(self.timeout),
            cancel: self.cancel,
            own_group: self.own_process_group,
            background: self.background,
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
/// void tunebox_trampoline(void *const *tunebox_tensors, const int64_t *tunebox_scalars) {
///     entry((float *)tunebox_tensors[0], (double *)tunebox_tensors[1], tunebox_scalars[0]);
/// }
/// ```
///
/// The arguments follow the signature's order ([`Signature::args`]: Kernel Tuner's argument
/// list, scalars before tensors included). Each scalar travels in an 8-byte slot and is passed
/// as its C type: `tunebox_scalars[i]` (`int64_t`), `(int32_t)tunebox_scalars[i]`, or a
/// `float` / `double` copied out of the slot; an
/// [`Arg::Untyped`](tunebox_protocol::Arg::Untyped) tensor is passed as `tunebox_tensors[i]`
/// (`void *`). The trampoline names only `tunebox_` identifiers, so that no macro or param of
/// the kernel's (`-DT=4`) reaches into it.
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
/// Compiling and linking are two commands, as a build system runs them, so that a compiler
/// launcher such as ccache (`CC="ccache cc"`) can cache the compile (it never caches a command
/// that compiles and links at once):
///
/// - `<compiler> <flags…> -D<NAME>=<VALUE>… -fPIC -Werror=… -c -MD -MF <tmp>.d -MT
///   tunebox-kernel.o -o <tmp>.o <cache>/src/<base>.c`, run with the working directory of the
///   caller (so relative `-I` flags resolve there). The source (the kernel with its trampoline)
///   is written once per base key under a stable name, so that a compiler cache sees the same
///   file again. `-MD -MF` (gcc and clang have both) makes the compiler list every file it
///   read; a compiler that writes no such list is refused ([`CpuError::NoDependencies`]).
/// - `<compiler> <flags…> -fPIC -shared -o <tmp>.so <tmp>.o`, the flags without those that only
///   preprocessing or compiling reads (`-D`, `-U`, `-I`, `-include`, `-x`, the
///   `-M` family, …), so that `-fopenmp`, `-l`, `-L`, `-Wl,…` and `-O` still reach the link.
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
    let identity = match &kernel.compiler_identity {
        Some(identity) => identity.clone(),
        None => compiler_identity(&kernel.compiler, control.timeout, &limits)?,
    };
    let base = cache_key(kernel, language, &trampoline, &identity, host_cpu());
    let dir = cache::ensure(cache)?;
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
) -> Result<Built, CpuError> {
    let source_path = stable_source(dir, base, language, &combined_source(kernel, trampoline))?;
    let build = Build {
        kernel,
        language,
        dir,
        base,
        timeout,
        limits,
        source_path: &source_path,
    };
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
        match build.attempt()? {
            Ok(built) => return Ok(built),
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

/// A built artifact: its key, its path and the files the compiler read.
type Built = (String, PathBuf, Vec<PathBuf>);

/// One kernel's build: what it compiles, where, within which limits.
struct Build<'b> {
    kernel: &'b CKernel,
    language: Language,
    dir: &'b Path,
    base: &'b str,
    timeout: Duration,
    limits: &'b Limits<'b>,
    /// The combined source, in the cache's `src` folder.
    source_path: &'b Path,
}

impl Build<'_> {
    /// One attempt: compiles and links into temporary files (all removed when dropped, on every
    /// path; the shared object only if not published), then publishes the object under the key
    /// of the files the compiler read; or, when one of them changed meanwhile, that change.
    fn attempt(&self) -> Result<Result<Built, Changed>, CpuError> {
        let (kernel, dir, limits, timeout) = (self.kernel, self.dir, self.limits, self.timeout);
        let object_path = self.temp(".so", "create a temporary object file in")?;
        let compiled_path = self.temp(".o", "create a temporary object file in")?;
        let depfile_path = self.temp(".d", "create a temporary dependency file in")?;
        let args = self.compile_args(&depfile_path, &compiled_path);
        let started = SystemTime::now();
        run_compiler(kernel, "compiling", args, limits, timeout).map_err(|e| match e {
            CpuError::Compile { command, log, .. } => CpuError::Compile {
                command,
                log,
                dependencies: read_dependencies(kernel, &depfile_path, self.source_path)
                    .unwrap_or_default(),
            },
            other => other,
        })?;
        let mut args = link_flags(&kernel.flags);
        args.extend(["-fPIC".into(), "-shared".into(), "-o".into()]);
        args.push(object_path.to_string_lossy().into_owned());
        args.push(compiled_path.to_string_lossy().into_owned());
        run_compiler(kernel, "linking", args, limits, timeout)?;
        let deps = read_dependencies(kernel, &depfile_path, self.source_path)?;
        let digests = match digest_dependencies(&deps, started)? {
            Ok(digests) => digests,
            Err(change) => return Ok(Err(change)),
        };
        let key = cache::artifact_key(
            self.base,
            &cache::deps_hash(deps.iter().map(PathBuf::as_path).zip(digests)),
        );
        let path = cache::artifact_path(dir, &key);
        // The object with its recorded hash (a lookup loads an object only when its recorded
        // hash matches, so a truncated or tampered one is rebuilt, never loaded), then the
        // manifest, under the cache directory's lock.
        cache::publish(dir, self.base, &path, object_path, deps.clone())?;
        Ok(Ok((key, path, deps)))
    }

    /// A temporary file ending in `suffix` in the cache directory (`action`: what the error
    /// says could not be done).
    fn temp(&self, suffix: &str, action: &'static str) -> Result<tempfile::TempPath, CpuError> {
        Ok(tempfile::Builder::new()
            .prefix(".tunebox-")
            .suffix(suffix)
            .tempfile_in(self.dir)
            .map_err(io_err(action, self.dir))?
            .into_temp_path())
    }

    /// The compile step's arguments: the kernel's flags and defines, the language's fixed
    /// flags (not `-shared`), a dependency file at `depfile`, the object at `compiled`, then
    /// the source.
    fn compile_args(&self, depfile: &Path, compiled: &Path) -> Vec<String> {
        let kernel = self.kernel;
        let mut args: Vec<String> = kernel.flags.clone();
        args.extend(
            kernel
                .defines
                .iter()
                .map(|d| format!("-D{}={}", d.name, d.value)),
        );
        args.extend(
            self.language
                .fixed_flags()
                .iter()
                .filter(|f| **f != "-shared")
                .map(|f| (*f).to_owned()),
        );
        args.extend(["-c".into(), "-MD".into(), "-MF".into()]);
        args.push(depfile.to_string_lossy().into_owned());
        args.extend(["-MT".into(), DEPFILE_TARGET.into(), "-o".into()]);
        args.push(compiled.to_string_lossy().into_owned());
        args.push(self.source_path.to_string_lossy().into_owned());
        args
    }
}

/// Runs the kernel's compiler command with `args` (`step` says which, for the log).
///
/// # Errors
///
/// The compiler cannot be run, runs past the deadline, or fails ([`CpuError::Compile`], with
/// no dependencies: the caller adds those it knows).
fn run_compiler(
    kernel: &CKernel,
    step: &str,
    args: Vec<String>,
    limits: &Limits<'_>,
    timeout: Duration,
) -> Result<(), CpuError> {
    let (program, mut command_args) = compiler_command(&kernel.compiler)?;
    command_args.extend(args);
    let command = render_command(&program, &command_args);
    log::debug!("cpu: {step} `{}`: {command}", kernel.source_name);
    let outcome = subprocess::run(Command::new(&program).args(&command_args), limits)
        .map_err(|e| spawn_error(&program, e))?;
    let (status, output) = finished(outcome, &command, timeout)?;
    if !status.success() {
        return Err(CpuError::Compile {
            command,
            log: compiler_log(status, &output),
            dependencies: Vec::new(),
        });
    }
    Ok(())
}

/// The source compiled for base key `base`: `<dir>/src/<base><suffix>`, written once (to a
/// temporary file renamed into place, so concurrent builds see a whole file) and kept, so that
/// every build of that key compiles the same file, as a compiler cache needs.
///
/// # Errors
///
/// [`CpuError::Io`]: the folder or the file cannot be written.
fn stable_source(
    dir: &Path,
    base: &str,
    language: Language,
    text: &str,
) -> Result<PathBuf, CpuError> {
    let sources = dir.join("src");
    let path = sources.join(format!("{base}{}", language.suffix()));
    if std::fs::read(&path).is_ok_and(|old| old == text.as_bytes()) {
        return Ok(path);
    }
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
        .create(&sources)
        .map_err(io_err("create the kernel sources folder", &sources))?;
    let mut file = tempfile::Builder::new()
        .prefix(".tunebox-")
        .suffix(language.suffix())
        .tempfile_in(&sources)
        .map_err(io_err("create a temporary source file in", &sources))?;
    file.write_all(text.as_bytes())
        .map_err(io_err("write the kernel source to", file.path()))?;
    file.persist(&path)
        .map_err(|e| io_err("move the kernel source to", &path)(e.error))?;
    Ok(path)
}

/// The kernel's flags that still mean something when linking objects: without those that only
/// preprocessing or compiling reads (`-D`, `-U`, `-I` and the other include-path options,
/// `-include`, `-imacros`, `-x`, the `-M` dependency options, `-c`, `-E`, `-S`), each with its
/// separate argument when it has one (`-I dir`, `-include h.h`, `-x c++`).
pub(crate) fn link_flags(flags: &[String]) -> Vec<String> {
    /// Options whose value may be the next argument.
    const WITH_VALUE: [&str; 12] = [
        "-D",
        "-U",
        "-I",
        "-include",
        "-imacros",
        "-isystem",
        "-iquote",
        "-idirafter",
        "-x",
        "-MF",
        "-MT",
        "-MQ",
    ];
    /// Prefixes of options that only preprocessing or compiling reads.
    const COMPILE_ONLY: [&str; 9] = [
        "-D",
        "-U",
        "-I",
        "-include",
        "-imacros",
        "-isystem",
        "-iquote",
        "-idirafter",
        "-x",
    ];
    let mut kept = Vec::with_capacity(flags.len());
    let mut words = flags.iter();
    while let Some(flag) = words.next() {
        if WITH_VALUE.contains(&flag.as_str()) {
            words.next();
            continue;
        }
        let dependency_option = flag.starts_with("-M") && !flag.starts_with("-Wl");
        if dependency_option
            || ["-c", "-E", "-S"].contains(&flag.as_str())
            || COMPILE_ONLY.iter().any(|p| flag.starts_with(p))
        {
            continue;
        }
        kept.push(flag.clone());
    }
    kept
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

/// What [`compiler_version`] (or a compile) already found for `compiler` in this process, without
/// running anything: `None` when it was never asked, or did not answer in time. For a parent
/// that compiled its kernels and hands the identity to its workers
/// ([`CKernel::compiler_identity`](tunebox_protocol::CKernel::compiler_identity)).
pub fn known_compiler_version(compiler: &str) -> Option<String> {
    crate::toolchain::known_identity(compiler)
}

/// The kernel the unit tests of this crate's compile modules build from.
#[cfg(test)]
pub(crate) fn test_kernel() -> CKernel {
    let mut kernel = CKernel::new("void k(float *a) { a[0] = 1; }", "k").source_name("k.c");
    kernel.defines = vec![tunebox_protocol::Define::new("BLOCK", "32")];
    kernel.flags = vec!["-O2".into()];
    kernel
}

#[cfg(test)]
mod tests {
    use super::test_kernel as kernel;
    use tunebox_protocol::DType;

    use super::*;

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
}
