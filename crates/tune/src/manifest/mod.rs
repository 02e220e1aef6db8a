//! The tuning manifest: a TOML file describing one kernel family, read and checked (or a FAIR
//! T1 file, converted: [`from_t1`]).
//!
//! One module per group of fields: [`raw`] (the file as serde reads it), [`kernel_tuner`]
//! (Kernel Tuner's names for tunebox's fields), [`source`] (kernel sources and compilers),
//! [`arguments`] (tensors, scalars, their order), [`params`] (the search space), [`timing`]
//! (reps and timeouts), [`verify`] (the reference and tolerance); [`Manifest::from_raw`] calls
//! one of each.
//!
//! The area `manifest` holds besides: [`launch`] (CUDA launch geometry), [`metrics`] (Kernel
//! Tuner's metrics), [`objective`] (what ranks the choices), [`headers`] (the local headers a
//! source includes) and [`formats`] (the community's files: FAIR T1 and T4, Kernel Tuner
//! caches). It imports the base and the search space; never results, search, measuring,
//! reporting or the run.

pub mod formats;
pub(crate) mod launch;
pub(crate) mod metrics;
pub(crate) mod objective;

mod arguments;
pub(crate) mod builder;
pub(crate) mod env;
pub(crate) mod files;
mod from_t1;
pub(crate) mod headers;
mod kernel_tuner;
mod params;
mod raw;
mod sandbox;
pub(crate) mod source;
pub(crate) mod timing;
mod verify;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use indexmap::IndexMap;
use tunebox_protocol::{Arg, Scalar, TensorSpec, TimingConfig};

use self::arguments::Arguments;
use self::files::ManifestFiles;
use self::raw::{RawManifest, misplaced_key_hint};
use self::source::parent_dir;
use self::timing::MAX_REPS;
use crate::manifest::launch::{Launch, RawLaunch};
use crate::manifest::metrics::Metrics;
use crate::manifest::objective::Objective;
use crate::space::{ParamValue, Restriction, SearchSpace, SpaceCount};

pub(crate) use self::env::WorkerEnv;
pub(crate) use self::source::compiler;
pub(crate) use self::source::{KernelSource, Language};
pub(crate) use self::verify::{Reference, Verify};

/// A manifest, read and validated: every path resolved, every source read.
#[derive(Debug)]
pub struct Manifest {
    /// The manifest's path, as given.
    pub(crate) path: PathBuf,
    /// `name`, or the file stem.
    pub(crate) name: String,
    pub(crate) kernel: KernelSource,
    pub(crate) tensors: Vec<TensorSpec>,
    pub(crate) scalars: Vec<Scalar>,
    /// The kernel's argument order (`args`, or Kernel Tuner's `[[arguments]]`); empty: every
    /// tensor, then every scalar.
    pub(crate) args: Vec<Arg>,
    pub(crate) params: IndexMap<String, Vec<ParamValue>>,
    pub(crate) restrictions: Vec<Restriction>,
    pub(crate) timing: TimingConfig,
    pub(crate) timeout: Duration,
    /// How long one compile of a C kernel (or the reference) may take before its compiler is
    /// killed: `compile_timeout_s`, else [`tunebox_cpu::DEFAULT_COMPILE_TIMEOUT`].
    pub(crate) compile_timeout: Duration,
    pub(crate) verify: Option<Verify>,
    /// Grid, block and shared memory of a CUDA kernel; for a C kernel in Kernel Tuner's names
    /// with a `problem_size`, Kernel Tuner's grid and block, which only give its `grid_size_*`
    /// and `block_size_*` macros ([`Launch::kernel_tuner_defines`]).
    pub(crate) launch: Option<Launch>,
    /// Written with Kernel Tuner's `tune_params` (or read from a T1 file): with a problem size,
    /// each choice's kernel gets Kernel Tuner's grid and block macros
    /// ([`Launch::kernel_tuner_defines`]), as Kernel Tuner's `prepare_kernel_string` defines
    /// them, and its grid is Kernel Tuner's.
    pub(crate) kernel_tuner_macros: bool,
    /// Named expressions over params, scalars and time, reported per choice.
    pub(crate) metrics: Metrics,
    /// What ranks the choices: the time, or a metric (`objective`).
    pub(crate) objective: Objective,
    /// What the user should know about how the file was read (a T1 field that is not used).
    pub(crate) notes: Vec<String>,
    /// Why the manifest can be listed but not tuned (a T1 file naming a source that is not
    /// there, a language or an argument tunebox cannot run); empty for a runnable manifest.
    pub(crate) unsupported: Vec<String>,
    /// `[sandbox]`: the sandbox its workers start in, if any.
    pub(crate) sandbox: Option<tunebox_process::Sandbox>,
    /// `[env]`: the user's variables the workers get beyond the default list.
    pub(crate) env: WorkerEnv,
}

impl Manifest {
    /// Reads and validates the manifest at `path`. `compiler` is the C compiler to use when the
    /// manifest names none (the caller passes `$CC` or `cc`).
    ///
    /// # Errors
    ///
    /// A message naming the file, the field and what to change: unreadable file, TOML syntax,
    /// unknown or missing keys, wrong types, bad dtypes or shapes, params without values,
    /// restrictions that do not parse or use unknown names, an unreadable or non-UTF-8 source.
    pub fn load(path: &Path, compiler: &str) -> crate::Result<Manifest> {
        Manifest::read(path, compiler).map_err(crate::TuneError::manifest)
    }

    /// What the user should know about how the file was read: the fields of a T1 file that
    /// tunebox does not use, and how it reads them.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The `max_process_uses` (benchmarks per worker before it is replaced; `None`: unlimited)
    /// of a run whose user gave none, as `tunebox tune` applies it: 1 for a C kernel, whose
    /// code runs in the worker's own process (floating-point modes, signal handlers, threads
    /// and memory it leaves behind would reach the next choice); unlimited for a CUDA kernel,
    /// which runs no host code of its own (a sticky fault still ends its worker, and each
    /// request frees its tensors and unloads its module), where a fresh process would cost a
    /// new CUDA context for every choice (0.4 s of a 0.48 s screening window on an H200) — as
    /// Inductor's `TuningProcess` and Kernel Tuner keep one process per GPU.
    pub fn default_max_process_uses(&self) -> Option<u64> {
        match self.kernel.language {
            Language::C => Some(1),
            Language::Cuda => None,
        }
    }

    /// The sandbox the run's workers start in (`[sandbox]`), if any.
    pub fn sandbox(&self) -> Option<&tunebox_process::Sandbox> {
        self.sandbox.as_ref()
    }

    /// Runs the workers in `sandbox` (or not, with `None`), whatever `[sandbox]` says: what
    /// `tunebox tune --sandbox` does. [`Manifest::default_sandbox`] is the one it uses when the
    /// manifest has none.
    ///
    /// A sandbox that would let a worker read the expected outputs (a reference given as
    /// files) is kept, with a note that says so.
    pub fn with_sandbox(mut self, sandbox: Option<tunebox_process::Sandbox>) -> Manifest {
        let answer_notes = |m: &Manifest| {
            sandbox::answer_notes(m.verify.as_ref(), m.sandbox.as_ref())
                .unwrap_or_else(|e| vec![format!("warning: {e}")])
        };
        let before = answer_notes(&self);
        self.notes.retain(|n| !before.contains(n));
        self.sandbox = sandbox;
        let after = answer_notes(&self);
        self.notes.extend(after);
        self
    }

    /// The sandbox for this manifest's kernel with the defaults: the local headers of the
    /// kernel (and of a reference source) readable, nothing else of the manifest's folder, and
    /// for CUDA no address-space limit (the driver maps more virtual memory than the machine
    /// has).
    pub fn default_sandbox(&self) -> tunebox_process::Sandbox {
        sandbox::for_kernels(&kernel_sources(&self.kernel, self.verify.as_ref()))
    }

    /// Adds `env` to `[env]` (its values win), and says again which variables the kernel
    /// reads that do not reach the workers.
    pub(crate) fn add_env(&mut self, env: WorkerEnv) {
        let dropped =
            |m: &Manifest| env::dropped_notes(&m.kernel.source_name, &m.kernel.text, &m.env);
        let before = dropped(self);
        self.notes.retain(|n| !before.contains(n));
        self.env.extend(env);
        let after = dropped(self);
        self.notes.extend(after);
    }

    /// Why this manifest can be listed (`tunebox tune --list`) but not tuned: e.g. a T1 file
    /// whose kernel source is missing, whose language is not C or CUDA, or whose arguments
    /// tunebox cannot pass. Empty for a runnable manifest; [`crate::tune`] refuses the others
    /// with these reasons.
    pub fn unsupported(&self) -> &[String] {
        &self.unsupported
    }

    /// Reads and validates the manifest `text` (TOML, in tunebox's or Kernel Tuner's spelling,
    /// as a manifest file) as if it were the file at `path`, which need not exist: relative
    /// paths are resolved against its folder, and reports and the default results cache are
    /// named after it. The files it names are taken from `files` where given there (kernel
    /// sources, tensor data, expected outputs: nothing is written or read back), else read from
    /// disk. `compiler` is as for [`Manifest::load`]. What Python's `tune_kernel` calls: its
    /// arrays and source stay in memory.
    ///
    /// # Errors
    ///
    /// As [`Manifest::load`]; a file given in `files` whose size is not its tensor's dtype ×
    /// shape names the path it was given as.
    pub fn parse(
        text: &str,
        path: &Path,
        compiler: &str,
        files: &ManifestFiles,
    ) -> crate::Result<Manifest> {
        Manifest::from_toml(text, path, compiler, files).map_err(crate::TuneError::manifest)
    }

    pub(crate) fn read(path: &Path, compiler: &str) -> Result<Manifest> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the manifest {}", path.display()))?;
        // A JSON object is a FAIR T1 file (a TOML document cannot start with `{`).
        if text.trim_start().starts_with('{') {
            let raw = from_t1::to_raw(path)?;
            return Manifest::from_raw(raw, path, compiler, &ManifestFiles::new())
                .with_context(|| format!("invalid T1 file {}", path.display()));
        }
        Manifest::from_toml(&text, path, compiler, &ManifestFiles::new())
    }

    /// The manifest `text` (TOML) of the file at `path`, its files taken from `files` first.
    fn from_toml(
        text: &str,
        path: &Path,
        compiler: &str,
        files: &ManifestFiles,
    ) -> Result<Manifest> {
        let raw: RawManifest = toml::from_str(text).map_err(|e| {
            anyhow::anyhow!(
                "{}: {}{}",
                path.display(),
                e.to_string().trim_end(),
                misplaced_key_hint(&e.to_string())
            )
        })?;
        Manifest::from_raw(raw, path, compiler, files)
            .with_context(|| format!("invalid manifest {}", path.display()))
    }

    /// Checks `raw` (read from `path`) field group by field group, in the order errors are
    /// reported: the kernel, its arguments, the space, timing, launch, metrics, verification.
    fn from_raw(
        raw: RawManifest,
        path: &Path,
        compiler: &str,
        files: &ManifestFiles,
    ) -> Result<Manifest> {
        let mut raw = kernel_tuner::aliases(raw)?;
        let extras = raw.t1.take().map(|e| *e).unwrap_or_default();
        let dir = parent_dir(path);
        let raw_kernel = raw.kernel.take().unwrap_or_default();
        let kernel = source::kernel(raw_kernel, dir, compiler, extras.source_missing, files)?;
        let Arguments {
            tensors,
            scalars,
            args,
        } = Arguments::read(
            std::mem::take(&mut raw.tensors),
            std::mem::take(&mut raw.scalars),
            raw.args.take(),
            raw.seed.unwrap_or(0),
            dir,
            &extras.fills,
            files,
        )?;
        let params = params::params(raw.params.take())?;
        params::not_arguments(&params, &tensors, &scalars)?;
        let restrictions = params::restrictions(&raw.restrictions, &params)?;
        let mut notes = extras.notes;
        let timing = timing::timing(raw.timing.take(), raw.iterations)?;
        let (timeout, compile_timeout) = timing::timeouts(raw.timeout_s, raw.compile_timeout_s)?;
        let problem_size = raw.problem_size.as_deref();
        let kernel_tuner_macros = raw.kernel_tuner_macros;
        let launch = launch(
            kernel.language,
            (raw.launch.take(), &raw.launch_from_aliases),
            problem_size,
            (&params, kernel_tuner_macros),
            &mut notes,
        )?;
        let metrics = Metrics::parse(&raw.metrics, &params, &scalars, problem_size)?;
        let objective = objective::read(
            raw.objective.take(),
            raw.objective_higher_is_better,
            &metrics.names(),
            &mut notes,
        )?;
        let verify = raw
            .verify
            .take()
            .map(|v| verify::verify(v, dir, &params, &kernel, &tensors, problem_size, files))
            .transpose()?;
        let sandbox = sandbox::sandbox(
            raw.sandbox.take(),
            dir,
            &kernel_sources(&kernel, verify.as_ref()),
        )?;
        notes.extend(sandbox::answer_notes(verify.as_ref(), sandbox.as_ref())?);
        let env = env::env(raw.env.take())?;
        notes.extend(env::dropped_notes(&kernel.source_name, &kernel.text, &env));
        Ok(Manifest {
            path: path.to_owned(),
            name: name(raw.name, path),
            kernel,
            tensors,
            scalars,
            args,
            params,
            restrictions,
            timing,
            timeout,
            compile_timeout,
            verify,
            launch,
            kernel_tuner_macros,
            metrics,
            objective,
            notes,
            unsupported: extras.unsupported,
            sandbox,
            env,
        })
    }
}

/// The kernel's source, and the reference's when that is a separate source: what a sandboxed
/// worker compiles or loads.
fn kernel_sources<'a>(
    kernel: &'a KernelSource,
    verify: Option<&'a Verify>,
) -> Vec<&'a KernelSource> {
    let reference = verify.and_then(|v| match &v.reference {
        Reference::Source(source, _) => Some(source.as_ref()),
        Reference::Choice(_) | Reference::Outputs(_) => None,
    });
    std::iter::once(kernel).chain(reference).collect()
}

/// The search space of a manifest (TOML) or of a FAIR T1 file (`.json`: its tuning parameters
/// and conditions), without planning a run: what `tunebox tune --count` and `--replay` build.
///
/// # Errors
///
/// [`crate::TuneError::Manifest`]: the file cannot be read or is invalid, or a restriction raises.
pub fn load_space(path: &std::path::Path) -> crate::Result<SearchSpace> {
    space_of_file(path, |params, restrictions| {
        SearchSpace::new(params, restrictions)
    })
}

/// Counts the valid choices of the space of a manifest or FAIR T1 file (as [`load_space`]
/// reads it) without listing them, telling `progress` the fraction done (0.0 to 1.0) now and
/// then: what `tunebox tune --count` prints (see [`crate::count_space`]).
///
/// # Errors
///
/// As [`load_space`].
pub fn count_file(
    path: &std::path::Path,
    progress: &mut dyn FnMut(f64),
) -> crate::Result<SpaceCount> {
    space_of_file(path, |params, restrictions| {
        crate::space::count_parsed(params, restrictions, progress)
    })
}

/// Reads the params and restrictions of a manifest or T1 file and hands them to `then`.
fn space_of_file<T>(
    path: &std::path::Path,
    then: impl FnOnce(&IndexMap<String, Vec<ParamValue>>, &[Restriction]) -> Result<T>,
) -> crate::Result<T> {
    if path.extension().is_some_and(|e| e == "json") {
        let t1 = crate::manifest::formats::T1File::read(path)
            .map_err(|e| crate::TuneError::manifest(anyhow::Error::new(e)))?;
        let conditions = t1.conditions();
        let params = t1.tune_params();
        let run = || then(&params, &params::restrictions(&conditions, &params)?);
        return run().map_err(crate::TuneError::manifest);
    }
    let manifest = Manifest::load(path, &compiler())?;
    then(&manifest.params, &manifest.restrictions)
        .with_context(|| format!("invalid manifest {}", path.display()))
        .map_err(crate::TuneError::manifest)
}

/// The kernel's launch geometry: `[launch]` (with `problem_size`) for a CUDA kernel. A C
/// kernel is launched by no grid, but written in Kernel Tuner's names (`kernel_tuner`) with a
/// `problem_size` it gets Kernel Tuner's grid and block, with `grid_div_x/y/z`
/// (`from_aliases`), for the `grid_size_*` and `block_size_*` macros Kernel Tuner defines
/// before every kernel, C included (a problem size they cannot be computed from leaves them
/// out, with a note); otherwise `grid_div_x/y/z` are ignored with a note.
fn launch(
    language: Language,
    (raw, from_aliases): (Option<RawLaunch>, &[&str]),
    problem_size: Option<&[toml::Value]>,
    (params, kernel_tuner): (&IndexMap<String, Vec<ParamValue>>, bool),
    notes: &mut Vec<String>,
) -> Result<Option<Launch>> {
    let from = |launch: Option<RawLaunch>| {
        Launch::from_raw(
            launch.unwrap_or_default(),
            problem_size,
            params,
            kernel_tuner,
        )
    };
    match (language, raw) {
        (Language::Cuda, launch) => Ok(Some(from(launch).context("launch")?)),
        // Only Kernel Tuner's fields made it (no `[launch]` of its own).
        (Language::C, launch)
            if kernel_tuner
                && problem_size.is_some()
                && (launch.is_none() || !from_aliases.is_empty()) =>
        {
            Ok(from(launch)
                .map_err(|e| {
                    notes.push(format!(
                        "Kernel Tuner's grid_size_* and block_size_* macros are not defined: \
                         {e:#}"
                    ));
                })
                .ok())
        }
        (Language::C, Some(_)) if !from_aliases.is_empty() => {
            notes.push(format!(
                "{} ignored: a C kernel has no grid (with Kernel Tuner's tune_params and a \
                 problem_size, they give its grid_size_* macros, as Kernel Tuner defines them)",
                from_aliases.join(", "),
            ));
            Ok(None)
        }
        (Language::C, Some(_)) => bail!(
            "launch: [launch] (grid, block, shared memory) applies to CUDA kernels, and this \
             kernel is C; remove [launch], or give the CUDA source with kernel.language = \
             \"cuda\""
        ),
        (Language::C, None) => Ok(None),
    }
}

/// The manifest's `name`, else its file stem.
fn name(given: Option<String>, path: &Path) -> String {
    given.unwrap_or_else(|| {
        path.file_stem()
            .map_or_else(|| "kernel".into(), |s| s.to_string_lossy().into_owned())
    })
}

#[cfg(test)]
mod tests {
    use tunebox_protocol::Init;

    use super::source::resolve_paths;
    use super::*;

    /// Writes `manifest` and a kernel source into a temporary directory and loads it.
    fn load(manifest: &str) -> Result<Manifest> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("k.c"), "void k(float *x) { x[0] = 1; }\n").unwrap();
        std::fs::write(dir.path().join("bad.c"), b"\xff\xfe not utf-8").unwrap();
        let path = dir.path().join("m.toml");
        std::fs::write(&path, manifest).unwrap();
        Manifest::read(&path, "cc")
    }

    const KERNEL: &str = "[kernel]\nsource = \"k.c\"\nentry = \"k\"\n";

    fn error(manifest: &str) -> String {
        format!("{:#}", load(manifest).unwrap_err())
    }

    #[test]
    fn a_c_kernel_gets_a_fresh_worker_per_choice_by_default() {
        assert_eq!(load(KERNEL).unwrap().default_max_process_uses(), Some(1));
    }

    #[test]
    fn a_sandbox_table_switches_the_sandbox_on_with_its_allowances() {
        assert!(load(KERNEL).unwrap().sandbox().is_none());
        let m = load(&format!("{KERNEL}[sandbox]\n")).unwrap();
        let sandbox = m.sandbox().expect("on");
        assert!(!sandbox.network_value());
        assert!(
            sandbox.read_paths().is_empty(),
            "nothing of the manifest's folder: {:?}",
            sandbox.read_paths()
        );
        assert!(sandbox.write_xor_execute_value(), "W^X by default for C");
        let m = load(&format!(
            "{KERNEL}[sandbox]\nnetwork = true\nread = [\".\"]\nmemory_mb = 0\ntasks = 8\n\
             cpu_time_s = 3\nfile_size_mb = 2\nwrite_xor_execute = false\n"
        ))
        .unwrap();
        let sandbox = m.sandbox().unwrap();
        assert!(sandbox.network_value());
        assert_eq!(sandbox.memory_value(), None);
        assert_eq!(sandbox.tasks_value(), Some(8));
        assert_eq!(sandbox.cpu_time_value(), Some(Duration::from_secs(3)));
        assert_eq!(sandbox.file_size_value(), Some(2 << 20));
        assert!(!sandbox.write_xor_execute_value());
        assert!(
            load(&format!("{KERNEL}[sandbox]\nenabled = false\n"))
                .unwrap()
                .sandbox()
                .is_none()
        );
        let missing = error(&format!("{KERNEL}[sandbox]\nwrite = [\"out\"]\n"));
        assert!(
            missing.contains("sandbox.write: `out` does not exist"),
            "{missing}"
        );
        let unknown = error(&format!("{KERNEL}[sandbox]\nnetwrk = true\n"));
        assert!(unknown.contains("netwrk"), "{unknown}");
    }

    #[test]
    fn minimal_manifest_gets_defaults() {
        let m = load(KERNEL).unwrap();
        assert_eq!(m.name, "m");
        assert_eq!(m.kernel.flags, ["-O3", "-march=native"]);
        assert_eq!(m.kernel.compiler, "cc");
        assert_eq!(m.timeout, Duration::from_secs(60));
        assert_eq!(m.compile_timeout, Duration::from_secs(120));
        assert_eq!(m.timing, TimingConfig::default());
        assert!(m.params.is_empty() && m.verify.is_none());
    }

    #[test]
    fn full_manifest() {
        let m = load(&format!(
            "name = \"x\"\nseed = 5\ntimeout_s = 2.5\ncompile_timeout_s = 0.5\nrestrictions = [\"A * B <= 8\"]\n{KERNEL}\
             flags = [\"-O2\"]\n\
             [[tensors]]\nname = \"x\"\ndtype = \"f64\"\nshape = [4, 2]\n\
             [[tensors]]\nname = \"y\"\ndtype = \"i32\"\nshape = [3]\ninit = \"zeros\"\noutput = true\n\
             [[scalars]]\nname = \"n\"\nvalue = 8\n\
             [params]\nA = [1, 2, 4]\nB = [2, 4]\n\
             [timing]\nwarmup_ms = 5\nrep_ms = 20\n\
             [verify]\natol = 0.5\nreference = {{ choice = {{ A = 1, B = 2 }} }}\n"
        ))
        .unwrap();
        assert_eq!(m.name, "x");
        assert_eq!(m.timeout, Duration::from_millis(2500));
        assert_eq!(m.compile_timeout, Duration::from_millis(500));
        assert_eq!(m.tensors[0].init, Init::Random { seed: 5 });
        assert_eq!(m.tensors[0].shape, [4, 2]);
        assert!(m.tensors[1].output);
        assert_eq!(m.scalars[0].value, 8);
        assert_eq!(m.params["A"].len(), 3);
        assert_eq!(m.restrictions.len(), 1);
        assert_eq!((m.timing.warmup_ms, m.timing.rep_ms), (5.0, 20.0));
        let verify = m.verify.unwrap();
        assert_eq!(verify.tolerance.atol, 0.5);
        assert!(matches!(verify.reference, Reference::Choice(_)));
    }

    /// The sandbox lets a worker read the headers the kernel and the reference source include,
    /// file by file, and nothing else of the manifest's folder (the expected outputs beside
    /// them, the results cache, the manifest).
    #[test]
    fn the_sandbox_reads_the_kernels_headers_not_their_folder() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        write(
            "k.c",
            "#include \"common.h\"\nvoid k(float *x) { x[0] = ONE; }\n",
        );
        write("common.h", "#include \"inc/one.h\"\n");
        std::fs::create_dir(dir.path().join("inc")).unwrap();
        write("inc/one.h", "#define ONE 1\n");
        write(
            "ref.c",
            "#include \"ref.h\"\nvoid k(float *x) { x[0] = 1; }\n",
        );
        write("ref.h", "\n");
        write("answers.bin", "secret");
        write(
            "m.toml",
            "[kernel]\nsource = \"k.c\"\nentry = \"k\"\n\
             [[tensors]]\nname = \"x\"\ndtype = \"f32\"\nshape = [4]\noutput = true\n\
             [verify]\nreference = { source = \"ref.c\" }\n[sandbox]\n",
        );
        let m = Manifest::load(&dir.path().join("m.toml"), "cc").unwrap();
        let canonical = |name: &str| dir.path().join(name).canonicalize().unwrap();
        let mut read = m.sandbox().unwrap().read_paths().to_vec();
        read.sort();
        let mut headers = vec![
            canonical("common.h"),
            canonical("inc/one.h"),
            canonical("ref.h"),
        ];
        headers.sort();
        assert_eq!(read, headers);
        let sandbox = m.default_sandbox();
        assert!(!sandbox.reaches(&dir.path().join("answers.bin")));
        assert!(!sandbox.reaches(&dir.path().join("m.toml")));
        assert!(sandbox.reaches(&dir.path().join("ref.h")));
    }

    /// Expected outputs as files: the run says which protection it lacks (memoization cannot
    /// be caught against one fixed input) and how to get it; without a sandbox, that workers
    /// can read the files; and a sandbox that would let them is refused (a table) or noted
    /// (`--sandbox`).
    #[test]
    fn expected_outputs_as_files_say_what_they_cannot_protect() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("k.c"), "void k(float *y) {}\n").unwrap();
        std::fs::write(dir.path().join("y.bin"), [0u8; 16]).unwrap();
        let path = dir.path().join("m.toml");
        let load = |extra: &str| {
            std::fs::write(
                &path,
                format!(
                    "[kernel]\nsource = \"k.c\"\nentry = \"k\"\n[[tensors]]\nname = \"y\"\n\
                     dtype = \"f32\"\nshape = [4]\noutput = true\n\
                     [verify]\nreference = {{ outputs = {{ y = \"y.bin\" }} }}\n{extra}"
                ),
            )
            .unwrap();
            Manifest::load(&path, "cc")
        };
        let plain = load("").unwrap();
        let memo = |m: &Manifest| {
            m.notes()
                .iter()
                .any(|n| n.contains("give a reference kernel"))
        };
        let readable = |m: &Manifest| {
            m.notes()
                .iter()
                .any(|n| n.contains("can read the expected"))
        };
        assert!(memo(&plain) && readable(&plain), "{:?}", plain.notes());
        let sandboxed = load("[sandbox]\n").unwrap();
        assert!(
            memo(&sandboxed) && !readable(&sandboxed),
            "{:?}",
            sandboxed.notes()
        );
        // Asking for checked reps against expected outputs is refused, naming the fix.
        let err = format!("{:#}", load("checked_reps = 2\n").unwrap_err());
        assert!(
            err.contains("verify.checked_reps = 2") && err.contains("give a reference kernel"),
            "{err}"
        );
        assert!(load("checked_reps = 0\n").is_ok());
        let err = format!("{:#}", load("[sandbox]\nread = [\".\"]\n").unwrap_err());
        assert!(
            err.contains("y.bin") && err.contains("narrow the allowance"),
            "{err}"
        );
        // `--sandbox` on a plain manifest: the note about reading goes, the other stays.
        let default = plain.default_sandbox();
        let switched = plain.with_sandbox(Some(default));
        assert!(
            memo(&switched) && !readable(&switched),
            "{:?}",
            switched.notes()
        );
        let widened = switched.with_sandbox(Some(tunebox_process::Sandbox::new().read(dir.path())));
        assert!(
            widened
                .notes()
                .iter()
                .any(|n| n.starts_with("warning:") && n.contains("y.bin")),
            "{:?}",
            widened.notes()
        );
    }

    #[test]
    fn cuda_kernels_by_extension_with_kernel_tuner_launch() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("k.cu"),
            "extern \"C\" __global__ void k(float *x) {}\n",
        )
        .unwrap();
        let path = dir.path().join("m.toml");
        let write = |text: &str| std::fs::write(&path, text).unwrap();
        write(
            "problem_size = [1000]\n[kernel]\nsource = \"k.cu\"\nentry = \"k\"\noptions = [\"-std=c++17\"]\n\
             [params]\nblock_size_x = [128, 256]\n",
        );
        let m = Manifest::load(&path, "cc").unwrap();
        assert_eq!(m.kernel.language, Language::Cuda);
        assert_eq!(m.kernel.flags, ["-std=c++17"]);
        assert_eq!(
            m.default_max_process_uses(),
            None,
            "a CUDA choice keeps its worker"
        );
        assert_eq!(
            crate::measure::workers::floor_bytes(&m),
            0,
            "the host's write bandwidth holds no GPU kernel to a floor"
        );
        let choices = crate::space::choices(&m.params, &m.restrictions).unwrap();
        let launch = m.launch.as_ref().unwrap().config(&choices[1]).unwrap();
        assert_eq!((launch.block, launch.grid), ([256, 1, 1], [4, 1, 1]));

        write("[kernel]\nsource = \"k.cu\"\nentry = \"k\"\nflags = [\"-O3\"]\n");
        let err = format!("{:#}", Manifest::load(&path, "cc").unwrap_err());
        assert!(err.contains("give its options as `options"), "{err}");
        write("[kernel]\nsource = \"k.cu\"\nentry = \"k\"\n");
        let err = format!("{:#}", Manifest::load(&path, "cc").unwrap_err());
        assert!(err.contains("problem_size"), "{err}");
        write("[kernel]\nsource = \"k.cu\"\nentry = \"k\"\nlanguage = \"hip\"\n");
        let err = format!("{:#}", Manifest::load(&path, "cc").unwrap_err());
        assert!(err.contains("use \"c\" or \"cuda\""), "{err}");
    }

    #[test]
    fn kernel_tuner_names() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("k.c"), "void k(float *x, float *y) {}\n").unwrap();
        std::fs::write(dir.path().join("y.bin"), [0u8; 16]).unwrap();
        let path = dir.path().join("m.toml");
        let load = |text: &str| {
            std::fs::write(&path, text).unwrap();
            Manifest::load(&path, "cc")
        };
        let tensors = "[[tensors]]\nname = \"x\"\ndtype = \"f32\"\nshape = [4]\n\
                       [[tensors]]\nname = \"y\"\ndtype = \"f32\"\nshape = [4]\n\
                       [[scalars]]\nname = \"n\"\nvalue = 4\n";
        let kt = "kernel_name = \"k\"\nkernel_source = \"k.c\"\nlang = \"C\"\n\
                  compiler_options = [\"-O1\"]\niterations = 7\natol = 0.5\n";
        let m = load(&format!(
            "{kt}answer = [\"\", \"y.bin\", \"\"]\n[tune_params]\nA = [1, 2]\n\
             [metrics]\n\"GB/s\" = \"8 * n / time\"\n{tensors}"
        ))
        .unwrap();
        assert_eq!(
            (m.kernel.entry.as_str(), m.kernel.language),
            ("k", Language::C)
        );
        assert_eq!(m.kernel.flags, ["-O1"]);
        assert_eq!((m.timing.min_reps, m.timing.max_reps), (7, 7));
        assert_eq!(m.params["A"].len(), 2);
        assert_eq!(m.metrics.names(), ["GB/s"]);
        assert!(m.tensors[1].output && !m.tensors[0].output);
        let verify = m.verify.unwrap();
        assert_eq!(verify.tolerance.atol, 0.5);
        // Kernel Tuner counts a NaN where the answer has one as equal.
        assert!(verify.tolerance.equal_nan);
        assert!(matches!(verify.reference, Reference::Outputs(ref o) if o[0].name == "y"));
        // The table form, and a reference choice.
        let m = load(&format!(
            "{kt}answer = {{ y = \"y.bin\" }}\n[tune_params]\nA = [1]\n{tensors}"
        ))
        .unwrap();
        assert!(matches!(m.verify.unwrap().reference, Reference::Outputs(_)));
        let with_output = tensors.replace(
            "shape = [4]\n[[scalars]]",
            "shape = [4]\noutput = true\n[[scalars]]",
        );
        let m = load(&format!(
            "{kt}answer = {{ choice = {{ A = 1 }} }}\n[tune_params]\nA = [1, 2]\n{with_output}"
        ))
        .unwrap();
        let verify = m.verify.unwrap();
        assert!(matches!(verify.reference, Reference::Choice(_)));
        let cases = [
            (
                format!("{kt}[params]\nA = [1]\n[tune_params]\nA = [1]\n{tensors}"),
                "params and tune_params",
            ),
            (
                format!("{kt}[kernel]\nentry = \"k\"\n{tensors}"),
                "kernel_name: given both",
            ),
            (
                format!("{kt}answer = {{ z = \"y.bin\" }}\n{tensors}"),
                "answer.z: there is no tensor `z`",
            ),
            (
                format!("{kt}answer = [\"\", \"\", \"y.bin\"]\n{tensors}"),
                "answer[2] = \"y.bin\": argument 2 is the scalar `n`",
            ),
            // One entry per kernel argument (x, y, n), no fewer and no more.
            (
                format!("{kt}answer = [\"y.bin\"]\n{tensors}"),
                "answer: 1 entry given, 3 expected",
            ),
            (
                format!("{kt}answer = [\"\", \"y.bin\"]\n{tensors}"),
                "answer: 2 entries given, 3 expected",
            ),
            (
                format!("{kt}answer = [\"\", \"y.bin\", \"\", \"\"]\n{tensors}"),
                "answer: 4 entries given, 3 expected",
            ),
            (
                format!("{kt}answer = [\"\", \"y.bin\", 4]\n{tensors}"),
                "answer[2] = 4: give answer as a table",
            ),
            (
                format!("{kt}answer = 3\n{tensors}"),
                "give answer as a table",
            ),
            (
                format!("{kt}[timing]\nmin_reps = 3\n{tensors}"),
                "iterations and timing.min_reps",
            ),
            (
                "kernel_name = \"k\"\natol = 1\n".to_string(),
                "a top-level atol goes with answer",
            ),
            (
                "kernel_source = \"k.c\"\n".to_string(),
                "kernel.entry is missing",
            ),
            (
                format!(
                    "{}[metrics]\nx = \"time * Q\"\n{tensors}",
                    kt.replace("atol = 0.5\n", "")
                ),
                "metrics.x = \"time * Q\": `Q` is not a param",
            ),
        ];
        for (text, expected) in cases {
            let err = format!("{:#}", load(&text).unwrap_err());
            assert!(
                err.contains(expected),
                "{text}\n  gave: {err}\n  wanted: {expected}"
            );
        }
    }

    #[test]
    fn typed_scalars_argument_orders_and_their_errors() {
        let tensors = "[[tensors]]\nname = \"x\"\ndtype = \"f32\"\nshape = [4]\n";
        let m = load(&format!(
            "args = [\"n\", \"x\", \"a\", \"b\"]\n{KERNEL}{tensors}\
             [[scalars]]\nname = \"n\"\ntype = \"i32\"\nvalue = 4\n\
             [[scalars]]\nname = \"a\"\nvalue = 0.5\n\
             [[scalars]]\nname = \"b\"\ntype = \"f32\"\nvalue = 2\n"
        ))
        .unwrap();
        assert_eq!(m.scalars[0], Scalar::i32("n", 4));
        assert_eq!(m.scalars[1], Scalar::f64("a", 0.5));
        assert_eq!(m.scalars[2], Scalar::f32("b", 2.0));
        assert_eq!(
            m.args,
            [
                Arg::Scalar(0),
                Arg::Tensor(0),
                Arg::Scalar(1),
                Arg::Scalar(2)
            ]
        );
        // The default order written out is the default order; `c_type = "void"` is untyped.
        let m = load(&format!(
            "args = [\"x\", \"n\"]\n{KERNEL}{tensors}[[scalars]]\nname = \"n\"\nvalue = 4\n"
        ))
        .unwrap();
        assert!(m.args.is_empty());
        let m = load(&format!(
            "{KERNEL}{tensors}c_type = \"void\"\n[[scalars]]\nname = \"n\"\nvalue = 4\n"
        ))
        .unwrap();
        assert_eq!(m.args, [Arg::Untyped(0), Arg::Scalar(0)]);
        let scalar = |line: &str| format!("{KERNEL}{tensors}[[scalars]]\nname = \"n\"\n{line}\n");
        let cases = [
            (
                scalar("value = 0.5\ntype = \"i32\""),
                "an i32 scalar takes an integer",
            ),
            (
                scalar("value = 1\ntype = \"int\""),
                "type = \"int\": use one of i32, i64",
            ),
            (
                scalar("value = 4294967296\ntype = \"i32\""),
                "does not fit in an int32_t",
            ),
            (scalar("value = \"4\""), "give a number"),
            (
                format!("args = [\"x\", \"m\"]\n{}", scalar("value = 1")),
                "args[1] = \"m\": there is no tensor or scalar `m` (they are: x, n)",
            ),
            (
                format!("args = [\"x\", \"x\", \"n\"]\n{}", scalar("value = 1")),
                "args[1] = \"x\" repeats args[0]",
            ),
            (
                format!("args = [\"x\"]\n{}", scalar("value = 1")),
                "args: `n` is missing",
            ),
            (
                format!("{KERNEL}{tensors}c_type = \"vfloat\"\n"),
                "tensors[0].c_type = \"vfloat\": the only C type to give is \"void\"",
            ),
            (
                format!(
                    "kernel_name = \"k\"\nkernel_source = \"k.c\"\n{tensors}\
                     [[arguments]]\nname = \"n\"\nvalue = 1\n"
                ),
                "arguments: Kernel Tuner's argument list gives every tensor and scalar",
            ),
            (
                "kernel_name = \"k\"\nkernel_source = \"k.c\"\n\
                 [[arguments]]\nname = \"n\"\nvalue = 1\nshape = [1]\n"
                    .to_string(),
                "arguments[0]: unknown field `shape`",
            ),
        ];
        for (text, expected) in cases {
            let err = error(&text);
            assert!(
                err.contains(expected),
                "{text}\n  gave: {err}\n  wanted: {expected}"
            );
        }
    }

    #[test]
    fn relative_paths_in_flags_are_the_manifests() {
        let dir = Path::new("/m");
        let flags = |f: &[&str], language| {
            resolve_paths(f.iter().map(|s| (*s).to_owned()).collect(), dir, language)
        };
        assert_eq!(
            flags(
                &[
                    "-O3", "-Iinc", "-I", "a/b", "-I/abs", "-isystem", "sys", "-include", "pre.h",
                    "-Lx"
                ],
                Language::C
            ),
            [
                "-O3", "-I/m/inc", "-I", "/m/a/b", "-I/abs", "-isystem", "/m/sys", "-include",
                "/m/pre.h", "-L/m/x"
            ]
        );
        assert_eq!(
            flags(
                &["--include-path=inc", "-I", "x", "-std=c++17"],
                Language::Cuda
            ),
            ["--include-path=/m/inc", "-I", "/m/x", "-std=c++17"]
        );
    }

    #[test]
    fn kernel_tuner_examples_match_the_tunebox_ones() {
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let load = |name: &str| Manifest::load(&examples.join(name), "cc").unwrap();
        let choices = |m: &Manifest| crate::space::choices(&m.params, &m.restrictions).unwrap();
        for (kt, native) in [
            ("matmul-cpu-kt.toml", "matmul-cpu.toml"),
            ("matmul-cuda-kt.toml", "matmul-cuda.toml"),
        ] {
            let (kt, native) = (load(kt), load(native));
            assert_eq!(choices(&kt), choices(&native));
            assert_eq!(kt.kernel.flags, native.kernel.flags);
            assert_eq!(kt.kernel.language, native.kernel.language);
            assert_eq!((kt.timing.min_reps, kt.timing.max_reps), (7, 7));
            assert_eq!(kt.metrics.names(), ["GFLOP/s"]);
            if let (Some(a), Some(b)) = (&kt.launch, &native.launch) {
                for choice in choices(&kt) {
                    assert_eq!(a.config(&choice).unwrap(), b.config(&choice).unwrap());
                }
            }
        }
    }

    #[test]
    fn errors_name_the_field_and_the_fix() {
        let cases = [
            ("", "missing [kernel]"),
            (&format!("{KERNEL}colour = 1\n"), "unknown field `colour`"),
            (
                &format!("{KERNEL}[[tensors]]\nname = \"x\"\ndtype = \"f16\"\nshape = [1]\n"),
                "tensors[0].dtype = \"f16\": unknown dtype; use one of f32, f64, i32, i64, u8",
            ),
            (
                &format!("{KERNEL}[[tensors]]\nname = \"x\"\ndtype = \"f32\"\nshape = [4, -1]\n"),
                "every dimension must be at least 1",
            ),
            (
                &format!("{KERNEL}[[tensors]]\nname = \"x\"\ndtype = \"f32\"\nshape = [0]\n"),
                "every dimension must be at least 1",
            ),
            (
                &format!("{KERNEL}[[tensors]]\nname = \"x\"\ndtype = \"f32\"\nshape = \"big\"\n"),
                "invalid type",
            ),
            (
                &format!(
                    "{KERNEL}[[tensors]]\nname = \"x\"\ndtype = \"f32\"\nshape = [1]\ninit = \"rand\"\n"
                ),
                "init = \"rand\"",
            ),
            (
                &format!("{KERNEL}[params]\nBM = []\n"),
                "params.BM has no values",
            ),
            (&format!("{KERNEL}[params]\nBM = [[1]]\n"), "params.BM[0]"),
            (
                &format!("restrictions = [\"BM <\"]\n{KERNEL}[params]\nBM = [1]\n"),
                "restrictions[0]",
            ),
            (
                &format!("restrictions = [\"BX < 4\"]\n{KERNEL}[params]\nBM = [1]\n"),
                "`BX` is not a param",
            ),
            (
                "[kernel]\nsource = \"missing.c\"\nentry = \"k\"\n",
                "cannot read",
            ),
            ("[kernel]\nsource = \"bad.c\"\nentry = \"k\"\n", "not UTF-8"),
            (
                "[kernel]\nsource = \"k.c\"\nentry = \"k-1\"\n",
                "must be the name of a C function",
            ),
            (&format!("timeout_s = 0\n{KERNEL}"), "timeout_s = 0"),
            (&format!("timeout_s = 1e30\n{KERNEL}"), "at most 604800"),
            (
                &format!("compile_timeout_s = -1\n{KERNEL}"),
                "compile_timeout_s = -1: it must be a number of seconds above 0",
            ),
            (
                &format!("compile_timeout_s = 1e30\n{KERNEL}"),
                "compile_timeout_s = 1000000000000000000000000000000: it must",
            ),
            (
                &format!("{KERNEL}compile_timeout_s = 5\n"),
                "`compile_timeout_s` is a top-level key",
            ),
            (
                &format!("{KERNEL}[timing]\nmin_reps = 5\nmax_reps = 4000000000\n"),
                "at most 1000000 reps",
            ),
            (
                &format!("{KERNEL}[params]\nA = [1, 2, 1]\n"),
                "params.A[2] = 1 repeats params.A[0]",
            ),
            (
                &format!("{KERNEL}[params]\nA = [1]\n[timing]\nrep_ms = 5\ntimeout_s = 2\n"),
                "must come before the first [table]",
            ),
            (
                &format!("{KERNEL}[timing]\nrep_ms = -1\n"),
                "timing.rep_ms = -1",
            ),
            (
                &format!(
                    "{KERNEL}[[tensors]]\nname = \"y\"\ndtype = \"f32\"\nshape = [1]\n[verify]\nreference = {{ source = \"k.c\" }}\n"
                ),
                "no tensor has `output = true`",
            ),
            (
                &format!(
                    "{KERNEL}[[tensors]]\nname = \"y\"\ndtype = \"f32\"\nshape = [1]\noutput = true\n[params]\nA = [1]\n[verify]\nreference = {{ choice = {{ B = 1 }} }}\n"
                ),
                "`B` is not a param",
            ),
            (
                &format!(
                    "{KERNEL}[[tensors]]\nname = \"y\"\ndtype = \"f32\"\nshape = [1]\noutput = true\n[verify]\nreference = {{ }}\n"
                ),
                "give one of `choice",
            ),
            (
                &format!(
                    "{KERNEL}[[tensors]]\nname = \"y\"\ndtype = \"f32\"\nshape = [1]\n[[tensors]]\nname = \"y\"\ndtype = \"f32\"\nshape = [1]\n"
                ),
                "also the name of tensors[0]",
            ),
            (
                &format!(
                    "{KERNEL}[[tensors]]\nname = \"y\"\ndtype = \"f32\"\nshape = [4294967296, 4294967296]\n"
                ),
                "more than 2^64 bytes",
            ),
        ];
        for (manifest, expected) in cases {
            let message = error(manifest);
            assert!(
                message.contains(expected),
                "{manifest:?}\n  gave: {message}\n  wanted: {expected}"
            );
        }
    }

    /// A manifest with a scalar `n`, a param `BX` and a metric over both.
    fn kt_like(extra: &str) -> String {
        format!(
            "{extra}\n{KERNEL}[[tensors]]\nname = \"x\"\ndtype = \"f32\"\nshape = [4]\n\
             [[scalars]]\nname = \"n\"\nvalue = 4\n[params]\nBX = [1, 2]\n\
             [metrics]\n\"GFLOP/s\" = \"n * BX / time\"\n"
        )
    }

    #[test]
    fn the_objective_is_kernel_tuners() {
        let m = load(&kt_like(
            "objective = \"GFLOP/s\"\nobjective_higher_is_better = true",
        ))
        .unwrap();
        assert_eq!(m.objective.name, "GFLOP/s");
        assert!(m.objective.higher_is_better);
        assert!(m.notes.is_empty(), "{:?}", m.notes);
        // Kernel Tuner's default direction is lower-first: kept, and said.
        let m = load(&kt_like("objective = \"GFLOP/s\"")).unwrap();
        assert!(!m.objective.higher_is_better);
        assert!(
            m.notes[0].contains("objective_higher_is_better = true"),
            "{:?}",
            m.notes
        );
        assert!(load(&kt_like("")).unwrap().objective.is_time());
        let message = error(&kt_like("objective = \"GB/s\""));
        assert!(message.contains("its metrics are GFLOP/s"), "{message}");
    }

    #[test]
    fn grid_div_of_a_c_kernel_without_a_problem_size_is_ignored() {
        let m = load(&kt_like("grid_div_x = [\"BX\"]")).unwrap();
        assert!(m.launch.is_none());
        assert!(
            m.notes.iter().any(|n| n.contains("grid_div_x ignored")),
            "{:?}",
            m.notes
        );
        // A [launch] the user wrote is still refused, saying what to do.
        let message = error(&kt_like("[launch]\nblock = [32, 1, 1]"));
        assert!(message.contains("remove [launch]"), "{message}");
    }

    #[test]
    fn a_c_kernel_in_kernel_tuners_names_gets_its_grid_and_block_macros() {
        let fields = "grid_div_x = [\"BX\"]\nproblem_size = [\"2 ** 14\", 3]";
        // In tunebox's own names (`params`), a C kernel has no grid: nothing is defined.
        let native = load(&kt_like(fields)).unwrap();
        assert!(native.launch.is_none() && !native.kernel_tuner_macros);
        let m = load(&kt_like(fields).replace("[params]", "[tune_params]")).unwrap();
        assert!(m.kernel_tuner_macros);
        assert!(m.notes.is_empty(), "{:?}", m.notes);
        let choice = crate::space::Choice::new([("BX".to_owned(), ParamValue::Int(2))].into());
        let text = m.launch.unwrap().kernel_tuner_define_texts(&choice);
        assert_eq!(
            text,
            [
                "block_size_x=256",
                "block_size_y=1",
                "block_size_z=1",
                "grid_size_x=8192",
                "grid_size_y=3",
                "grid_size_z=1"
            ]
        );
        // A problem size over a scalar is no grid Kernel Tuner computes: no macros, a note.
        let m = load(&kt_like("problem_size = [\"n // 2\"]").replace("[params]", "[tune_params]"))
            .unwrap();
        assert!(m.launch.is_none());
        assert!(
            m.notes.iter().any(|n| n.contains("macros are not defined")),
            "{:?}",
            m.notes
        );
    }

    #[test]
    fn a_problem_size_may_be_one_value_as_in_kernel_tuner() {
        let one = |size: &str| {
            let text = kt_like(&format!("problem_size = {size}"))
                .replace("n * BX / time", "problem_size_x");
            let m = load(&text).unwrap_or_else(|e| panic!("{size}: {e:#}"));
            let choice = crate::space::SearchSpace::new(&m.params, &m.restrictions)
                .unwrap()
                .choice(0)
                .unwrap();
            m.metrics.evaluate(&choice, 1.0)["GFLOP/s"]
        };
        assert_eq!(one("\"2 ** 14\""), 16384.0);
        assert_eq!(one("1000"), 1000.0);
        assert_eq!(one("[\"2 ** 4\", 3]"), 16.0);
    }

    #[test]
    fn a_param_named_as_an_argument_is_refused() {
        let message = error(&kt_like("").replace("BX = [1, 2]", "n = [1, 2]"));
        assert!(
            message.contains("params.n: `n` is also the name of a scalar argument"),
            "{message}"
        );
        let message = error(&kt_like("").replace("BX = [1, 2]", "x = [1, 2]"));
        assert!(message.contains("tensor argument"), "{message}");
    }

    #[test]
    fn a_lambda_restriction_is_told_what_to_write() {
        let message = error(&kt_like("restrictions = [\"lambda p: p['BX'] * 2 <= 4\"]"));
        assert!(
            message.contains("a Python lambda") && message.contains("\"BX * 2 <= 4\""),
            "{message}"
        );
        let message = error(&kt_like("restrictions = [\"lambda BX: BX > 1\"]"));
        assert!(message.contains("\"BX > 1\""), "{message}");
    }
}
