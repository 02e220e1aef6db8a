//! The tuning manifest: a TOML file describing one kernel family, read and checked (or a FAIR
//! T1 file, converted: [`t1`]).

mod builder;
mod t1;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use indexmap::IndexMap;
use serde::Deserialize;
use tunebox_pool::Tolerance;
use tunebox_protocol::{
    Arg, Bytes, CacheFlush, DType, Define, Init, Scalar, ScalarKind, SharedBuffer, SharedData,
    TensorData, TensorSpec, TimingConfig,
};

use crate::launch::{Launch, RawLaunch};
use crate::metrics::Metrics;
use crate::space::{Choice, ParamValue, Restriction};

pub use self::builder::ManifestBuilder;

/// Per-choice timeout when the manifest does not set `timeout_s`.
const DEFAULT_TIMEOUT_S: f64 = 60.0;
/// Least time the reference gets when `verify.timeout_s` is not set.
const DEFAULT_REFERENCE_TIMEOUT_S: f64 = 60.0;
/// Longest per-choice timeout (and compile timeout): a week.
pub const MAX_TIMEOUT_S: f64 = 7.0 * 24.0 * 3600.0;
/// Most timed reps (and warmup calls) one choice may ask for.
const MAX_REPS: u32 = 1_000_000;
/// Compiler flags when the manifest's kernel does not set `flags`.
const DEFAULT_FLAGS: [&str; 2] = ["-O3", "-march=native"];

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
    /// Grid, block and shared memory (CUDA kernels only).
    pub(crate) launch: Option<Launch>,
    /// Named expressions over params, scalars and time, reported per choice.
    pub(crate) metrics: Metrics,
    /// What the user should know about how the file was read (a T1 field that is not used).
    pub(crate) notes: Vec<String>,
    /// Why the manifest can be listed but not tuned (a T1 file naming a source that is not
    /// there, a language or an argument tunebox cannot run); empty for a runnable manifest.
    pub(crate) unsupported: Vec<String>,
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
    pub path: PathBuf,
    /// The source text.
    pub text: String,
    /// The directory holding the source, put on the include path.
    pub dir: PathBuf,
    /// Whether the source lies outside the manifest's folder (allowed, and reported).
    pub outside: bool,
    pub entry: String,
    pub language: Language,
    /// C compiler flags, or NVRTC options for CUDA.
    pub flags: Vec<String>,
    pub compiler: String,
}

/// How choices are checked.
#[derive(Debug)]
pub(crate) struct Verify {
    pub tolerance: Tolerance,
    pub reference: Reference,
    /// The reference run's own timeout (`verify.timeout_s`); `None`: see
    /// [`Verify::reference_timeout`].
    pub timeout: Option<Duration>,
}

impl Verify {
    /// The deadline of the one reference call: `verify.timeout_s`, else the per-choice
    /// `timeout` but at least [`DEFAULT_REFERENCE_TIMEOUT_S`] (a naive reference is often far
    /// slower than the choices it checks).
    pub(crate) fn reference_timeout(&self, timeout: Duration) -> Duration {
        self.timeout
            .unwrap_or_else(|| timeout.max(Duration::from_secs_f64(DEFAULT_REFERENCE_TIMEOUT_S)))
    }
}

/// What produces the reference outputs.
#[derive(Debug)]
pub(crate) enum Reference {
    /// A choice of the kernel itself.
    Choice(Choice),
    /// A separate source with the same signature (C on the CPU, or CUDA with its own launch;
    /// `None`: the kernel's launch without params).
    Source(Box<KernelSource>, Option<Box<Launch>>),
    /// The expected outputs, read from files (the caller's answer).
    Outputs(Vec<TensorData>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    name: Option<String>,
    seed: Option<u64>,
    timeout_s: Option<f64>,
    compile_timeout_s: Option<f64>,
    #[serde(default)]
    restrictions: Vec<String>,
    kernel: Option<RawKernel>,
    #[serde(default)]
    tensors: Vec<RawTensor>,
    #[serde(default)]
    scalars: Vec<RawScalar>,
    /// The kernel's argument order: names of tensors and scalars, each once.
    args: Option<Vec<String>>,
    params: Option<IndexMap<String, Vec<toml::Value>>>,
    timing: Option<RawTiming>,
    verify: Option<RawVerify>,
    /// Kernel Tuner's problem size: one to three integers or expressions (CUDA kernels; also
    /// `problem_size_x/y/z` in metrics).
    problem_size: Option<Vec<toml::Value>>,
    launch: Option<RawLaunch>,
    /// Named expressions over params, scalars and `time` (ms), shown as extra columns.
    #[serde(default)]
    metrics: IndexMap<String, String>,
    // Kernel Tuner's names (`tune_kernel` arguments), as aliases of the fields above.
    /// `params`.
    tune_params: Option<IndexMap<String, Vec<toml::Value>>>,
    /// `kernel.entry`.
    kernel_name: Option<String>,
    /// `kernel.source`.
    kernel_source: Option<PathBuf>,
    /// `kernel.language`.
    lang: Option<String>,
    /// `kernel.flags` (C) or `kernel.options` (CUDA).
    compiler_options: Option<Vec<String>>,
    /// Kernel Tuner's argument list: tensors and scalars in the kernel's order (`[[arguments]]`).
    arguments: Option<Vec<toml::Value>>,
    /// `verify.reference`: output files, a reference choice, or a reference source.
    answer: Option<toml::Value>,
    /// `verify.atol` with `answer` (Kernel Tuner's default: 1e-6).
    atol: Option<f64>,
    /// Timed reps per choice: `timing.min_reps = timing.max_reps = iterations`.
    iterations: Option<u32>,
    /// `launch.grid_div_x/y/z`.
    grid_div_x: Option<toml::Value>,
    grid_div_y: Option<toml::Value>,
    grid_div_z: Option<toml::Value>,
    /// What a T1 file adds that TOML cannot say (never in a TOML manifest).
    #[serde(skip)]
    t1: Option<Box<t1::Extras>>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawKernel {
    #[serde(alias = "kernel_source")]
    source: Option<PathBuf>,
    #[serde(alias = "kernel_name")]
    entry: Option<String>,
    /// `"c"` or `"cuda"`; by default from the extension (`.cu`, `.cuh`: CUDA).
    #[serde(alias = "lang")]
    language: Option<String>,
    flags: Option<Vec<String>>,
    /// NVRTC options (CUDA).
    options: Option<Vec<String>>,
    /// Kernel Tuner's name for `flags` (C) or `options` (CUDA).
    compiler_options: Option<Vec<String>>,
    compiler: Option<String>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct RawTensor {
    name: String,
    dtype: String,
    shape: Vec<i64>,
    /// `"random"` (default), `"zeros"`, `"ones"`, or `{ file = "path" }`.
    init: Option<toml::Value>,
    #[serde(default)]
    output: bool,
    #[serde(default)]
    reset: bool,
    /// `"void"`: passed untyped ([`Arg::Untyped`]), for pointer types a dtype cannot name.
    c_type: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScalar {
    name: String,
    /// An integer, or a float for the float types.
    value: toml::Value,
    /// `"i32"`, `"i64"`, `"f32"` or `"f64"`; without it an integer is `i64` and a float `f64`.
    #[serde(rename = "type")]
    kind: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTiming {
    warmup_ms: Option<f64>,
    rep_ms: Option<f64>,
    min_reps: Option<u32>,
    max_reps: Option<u32>,
    flush_cache: Option<bool>,
    hot: Option<bool>,
    max_noise: Option<f64>,
    max_time_ms: Option<f64>,
    cache_flush: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVerify {
    rtol: Option<f64>,
    atol: Option<f64>,
    /// numpy's `equal_nan`: a NaN matches a NaN.
    equal_nan: Option<bool>,
    timeout_s: Option<f64>,
    reference: RawReference,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawReference {
    choice: Option<IndexMap<String, toml::Value>>,
    source: Option<PathBuf>,
    entry: Option<String>,
    flags: Option<Vec<String>>,
    outputs: Option<IndexMap<String, PathBuf>>,
    /// The reference's own launch (a CUDA reference source whose geometry differs).
    launch: Option<RawLaunch>,
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
        Manifest::read(path, compiler).map_err(crate::Error::manifest)
    }

    /// What the user should know about how the file was read: the fields of a T1 file that
    /// tunebox does not use, and how it reads them.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Why this manifest can be listed (`tunebox tune --list`) but not tuned: e.g. a T1 file
    /// whose kernel source is missing, whose language is not C or CUDA, or whose arguments
    /// tunebox cannot pass. Empty for a runnable manifest; [`crate::tune`] refuses the others
    /// with these reasons.
    pub fn unsupported(&self) -> &[String] {
        &self.unsupported
    }

    pub(crate) fn read(path: &Path, compiler: &str) -> Result<Manifest> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the manifest {}", path.display()))?;
        // A JSON object is a FAIR T1 file (a TOML document cannot start with `{`).
        if text.trim_start().starts_with('{') {
            let raw = t1::to_raw(path)?;
            return Manifest::from_raw(raw, path, compiler)
                .with_context(|| format!("invalid T1 file {}", path.display()));
        }
        let raw: RawManifest = toml::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "{}: {}{}",
                path.display(),
                e.to_string().trim_end(),
                misplaced_key_hint(&e.to_string())
            )
        })?;
        Manifest::from_raw(raw, path, compiler)
            .with_context(|| format!("invalid manifest {}", path.display()))
    }

    fn from_raw(raw: RawManifest, path: &Path, compiler: &str) -> Result<Manifest> {
        let mut raw = kernel_tuner_aliases(raw)?;
        let mut extras = raw.t1.take().map(|e| *e).unwrap_or_default();
        let dir = parent_dir(path);
        let raw_kernel = raw.kernel.take().unwrap_or_default();
        let source = raw_kernel.source.clone().context(
            "kernel.source is missing: name the kernel's source file, e.g. [kernel] source = \
             \"kernels/matmul.c\" (or Kernel Tuner's top-level kernel_source = \"…\")",
        )?;
        let entry = raw_kernel.entry.clone().context(
            "kernel.entry is missing: name the function to call, e.g. [kernel] entry = \"matmul\" \
             (or Kernel Tuner's top-level kernel_name = \"…\")",
        )?;
        let language = language_of(&source, raw_kernel.language.as_deref())?;
        let flags = match language {
            Language::C => {
                ensure!(
                    raw_kernel.options.is_none(),
                    "kernel.options: NVRTC options apply to CUDA kernels; a C kernel takes `flags`"
                );
                ensure!(
                    raw_kernel.flags.is_none() || raw_kernel.compiler_options.is_none(),
                    "kernel.flags and compiler_options: give the C compiler's flags once"
                );
                raw_kernel
                    .flags
                    .or(raw_kernel.compiler_options)
                    .unwrap_or_else(|| DEFAULT_FLAGS.iter().map(|f| (*f).to_owned()).collect())
            }
            Language::Cuda => {
                ensure!(
                    raw_kernel.flags.is_none() && raw_kernel.compiler.is_none(),
                    "kernel.flags / kernel.compiler: a CUDA kernel is compiled by NVRTC; give its \
                     options as `options = [\"--use_fast_math\"]`"
                );
                ensure!(
                    raw_kernel.options.is_none() || raw_kernel.compiler_options.is_none(),
                    "kernel.options and compiler_options: give the NVRTC options once"
                );
                raw_kernel
                    .options
                    .or(raw_kernel.compiler_options)
                    .unwrap_or_default()
            }
        };
        let flags = resolve_paths(flags, dir, language);
        let compiler = raw_kernel
            .compiler
            .unwrap_or_else(|| default_compiler(&source, &flags, compiler));
        let kernel = if extras.source_missing {
            KernelSource::unread(dir, &source, entry, language, flags, compiler)
        } else {
            KernelSource::read(dir, &source, entry, language, flags, compiler, "kernel")?
        };
        let seed = raw.seed.unwrap_or(0);
        let untyped = raw
            .tensors
            .iter()
            .enumerate()
            .map(|(i, t)| match t.c_type.as_deref() {
                None => Ok(false),
                Some("void") => Ok(true),
                Some(other) => bail!(
                    "tensors[{i}].c_type = {other:?}: the only C type to give is \"void\" (pass \
                     the pointer untyped, for parameter types a dtype cannot name such as \
                     `vfloat *`); leave it out to pass the dtype's pointer type"
                ),
            })
            .collect::<Result<Vec<bool>>>()?;
        let tensors = std::mem::take(&mut raw.tensors)
            .into_iter()
            .enumerate()
            .map(|(i, t)| tensor(i, t, seed, dir))
            .collect::<Result<Vec<_>>>()?;
        let tensors = t1::fill_constants(tensors, &extras.fills)?;
        let total: u64 = tensors
            .iter()
            .map(|t| t.byte_len().unwrap_or(u64::MAX))
            .fold(0u64, u64::saturating_add);
        if let Some(memory) = tunebox_bench::physical_memory_bytes()
            && total > memory
        {
            let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
            bail!(
                "tensors: together they need {total} bytes ({:.1} GiB), more than this machine's \
                 {:.1} GiB of memory; reduce their shapes",
                gib(total),
                gib(memory)
            );
        }
        for (i, t) in tensors.iter().enumerate() {
            if let Some(first) = tensors[..i].iter().position(|u| u.name == t.name) {
                bail!(
                    "tensors[{i}].name: `{}` is also the name of tensors[{first}]",
                    t.name
                );
            }
        }
        let scalars: Vec<Scalar> = std::mem::take(&mut raw.scalars)
            .into_iter()
            .enumerate()
            .map(|(i, s)| scalar(i, s))
            .collect::<Result<_>>()?;
        let args = arg_order(raw.args.take(), &tensors, &untyped, &scalars)?;
        let mut params = IndexMap::new();
        for (name, values) in raw.params.take().unwrap_or_default() {
            ensure!(
                Define::is_c_identifier(&name),
                "params.{name}: a parameter name must be a C identifier (it becomes -D{name}=…)"
            );
            ensure!(
                !values.is_empty(),
                "params.{name} has no values; give it at least one, e.g. {name} = [1]"
            );
            let values = values
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    ParamValue::from_toml(v).with_context(|| format!("params.{name}[{i}]"))
                })
                .collect::<Result<Vec<_>>>()?;
            for (i, value) in values.iter().enumerate() {
                if let Some(first) = values[..i].iter().position(|v| v == value) {
                    bail!(
                        "params.{name}[{i}] = {value} repeats params.{name}[{first}]; each value \
                         would be measured twice"
                    );
                }
            }
            params.insert(name, values);
        }
        let restrictions = raw
            .restrictions
            .iter()
            .enumerate()
            .map(|(i, text)| {
                Restriction::parse(text, &params).with_context(|| format!("restrictions[{i}]"))
            })
            .collect::<Result<Vec<_>>>()?;
        let timing = timing(raw.timing.take(), raw.iterations)?;
        let timeout_s = raw.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S);
        ensure!(
            timeout_s.is_finite() && timeout_s > 0.0 && timeout_s <= MAX_TIMEOUT_S,
            "timeout_s = {timeout_s}: it must be a number of seconds above 0 and at most \
             {MAX_TIMEOUT_S} (a week)"
        );
        let compile_timeout_s = raw
            .compile_timeout_s
            .unwrap_or(tunebox_cpu::DEFAULT_COMPILE_TIMEOUT.as_secs_f64());
        ensure!(
            compile_timeout_s.is_finite()
                && compile_timeout_s > 0.0
                && compile_timeout_s <= MAX_TIMEOUT_S,
            "compile_timeout_s = {compile_timeout_s}: it must be a number of seconds above 0 and \
             at most {MAX_TIMEOUT_S} (a week)"
        );
        let launch = match (language, raw.launch.take()) {
            (Language::Cuda, launch) => Some(
                Launch::from_raw(
                    launch.unwrap_or_default(),
                    raw.problem_size.as_deref(),
                    &params,
                )
                .context("launch")?,
            ),
            (Language::C, Some(_)) => {
                bail!("launch: [launch] applies to CUDA kernels; this kernel is C")
            }
            (Language::C, None) => None,
        };
        let metrics = Metrics::parse(&raw.metrics, &params, &scalars, raw.problem_size.as_deref())?;
        let verify = raw
            .verify
            .take()
            .map(|v| {
                verify(
                    v,
                    dir,
                    &params,
                    &kernel,
                    &tensors,
                    raw.problem_size.as_deref(),
                )
            })
            .transpose()?;
        let name = raw.name.unwrap_or_else(|| {
            path.file_stem()
                .map_or_else(|| "kernel".into(), |s| s.to_string_lossy().into_owned())
        });
        Ok(Manifest {
            path: path.to_owned(),
            name,
            kernel,
            tensors,
            scalars,
            args,
            params,
            restrictions,
            timing,
            timeout: Duration::from_secs_f64(timeout_s),
            compile_timeout: Duration::from_secs_f64(compile_timeout_s),
            verify,
            launch,
            metrics,
            notes: std::mem::take(&mut extras.notes),
            unsupported: std::mem::take(&mut extras.unsupported),
        })
    }
}

/// Moves Kernel Tuner's spellings (`tune_params`, `kernel_name`, `kernel_source`, `lang`,
/// `compiler_options`, `answer` + `atol`, `grid_div_x/y/z`, `problem_size` in `[launch]`) to
/// tunebox's fields, refusing a field given both ways.
fn kernel_tuner_aliases(mut raw: RawManifest) -> Result<RawManifest> {
    if let Some(arguments) = raw.arguments.take() {
        ensure!(
            raw.tensors.is_empty() && raw.scalars.is_empty() && raw.args.is_none(),
            "arguments: Kernel Tuner's argument list gives every tensor and scalar in the \
             kernel's order; give it instead of [[tensors]], [[scalars]] and args, not with them"
        );
        let mut order = Vec::with_capacity(arguments.len());
        for (i, argument) in arguments.into_iter().enumerate() {
            let toml::Value::Table(table) = argument else {
                bail!(
                    "arguments[{i}] = {argument}: give each argument as a table, a tensor \
                     ({{ name = \"y\", dtype = \"f32\", shape = [1024] }}) or a scalar \
                     ({{ name = \"n\", type = \"i32\", value = 1024 }})"
                );
            };
            let what = |e: toml::de::Error| {
                anyhow::anyhow!("arguments[{i}]: {}", e.to_string().trim_end())
            };
            if table.contains_key("value") {
                let scalar: RawScalar = toml::Value::Table(table).try_into().map_err(what)?;
                order.push(scalar.name.clone());
                raw.scalars.push(scalar);
            } else {
                let tensor: RawTensor = toml::Value::Table(table).try_into().map_err(what)?;
                order.push(tensor.name.clone());
                raw.tensors.push(tensor);
            }
        }
        raw.args = Some(order);
    }
    if let Some(tune_params) = raw.tune_params.take() {
        ensure!(
            raw.params.is_none(),
            "params and tune_params: give the parameters once (tune_params is Kernel Tuner's name \
             for params)"
        );
        raw.params = Some(tune_params);
    }
    let top_level = raw.kernel_name.is_some()
        || raw.kernel_source.is_some()
        || raw.lang.is_some()
        || raw.compiler_options.is_some();
    match (&mut raw.kernel, top_level) {
        (None, false) => bail!(
            "missing [kernel]: name the source and the function, e.g.\n  [kernel]\n  source = \
             \"kernels/matmul.c\"\n  entry = \"matmul\"\n(or Kernel Tuner's top-level \
             kernel_source and kernel_name)"
        ),
        (Some(kernel), true) => {
            for (field, given, taken) in [
                (
                    "kernel_name",
                    raw.kernel_name.is_some(),
                    kernel.entry.is_some(),
                ),
                (
                    "kernel_source",
                    raw.kernel_source.is_some(),
                    kernel.source.is_some(),
                ),
                ("lang", raw.lang.is_some(), kernel.language.is_some()),
                (
                    "compiler_options",
                    raw.compiler_options.is_some(),
                    kernel.flags.is_some()
                        || kernel.options.is_some()
                        || kernel.compiler_options.is_some(),
                ),
            ] {
                ensure!(
                    !(given && taken),
                    "{field}: given both at the top level and in [kernel]; give it once"
                );
            }
            kernel.entry = kernel.entry.take().or(raw.kernel_name.take());
            kernel.source = kernel.source.take().or(raw.kernel_source.take());
            kernel.language = kernel.language.take().or(raw.lang.take());
            kernel.compiler_options = kernel
                .compiler_options
                .take()
                .or(raw.compiler_options.take());
        }
        (Some(_), false) => {}
        (kernel @ None, true) => {
            let k = kernel.get_or_insert_with(RawKernel::default);
            k.entry = raw.kernel_name.take();
            k.source = raw.kernel_source.take();
            k.language = raw.lang.take();
            k.compiler_options = raw.compiler_options.take();
        }
    }
    let divs = [
        ("grid_div_x", raw.grid_div_x.take()),
        ("grid_div_y", raw.grid_div_y.take()),
        ("grid_div_z", raw.grid_div_z.take()),
    ];
    if divs.iter().any(|(_, d)| d.is_some()) {
        let launch = raw.launch.get_or_insert_with(RawLaunch::default);
        for (d, (field, value)) in divs.into_iter().enumerate() {
            if let Some(value) = value {
                let slot = launch.grid_div_mut(d);
                ensure!(
                    slot.is_none(),
                    "{field}: given both at the top level and in [launch]; give it once"
                );
                *slot = Some(value);
            }
        }
    }
    if let Some(problem) = raw.launch.as_mut().and_then(|l| l.problem_size.take()) {
        ensure!(
            raw.problem_size.is_none(),
            "problem_size: given both at the top level and in [launch]; give it once"
        );
        raw.problem_size = Some(problem);
    }
    if let Some(iterations) = raw.iterations {
        ensure!(
            (1..=MAX_REPS).contains(&iterations),
            "iterations = {iterations}: give 1 to {MAX_REPS} timed reps per choice"
        );
        if let Some(t) = &raw.timing {
            ensure!(
                t.min_reps.is_none() && t.max_reps.is_none(),
                "iterations and timing.min_reps/max_reps: iterations sets both; give one or the \
                 other"
            );
        }
    }
    match (raw.answer.take(), raw.atol) {
        (Some(answer), atol) => {
            ensure!(
                raw.verify.is_none(),
                "answer and [verify]: answer is Kernel Tuner's name for verify.reference; give one \
                 of them"
            );
            let reference =
                answer_reference(answer, &mut raw.tensors, &raw.scalars, raw.args.as_deref())?;
            let atol = atol.unwrap_or(KT_ATOL);
            raw.verify = Some(RawVerify {
                rtol: None,
                atol: Some(atol),
                equal_nan: None,
                timeout_s: None,
                reference,
            });
        }
        (None, Some(_)) => bail!(
            "atol: a top-level atol goes with answer (Kernel Tuner's); with [verify], set \
             verify.atol"
        ),
        (None, None) => {}
    }
    Ok(raw)
}

/// Kernel Tuner's default `atol`.
const KT_ATOL: f64 = 1e-6;

/// `answer` as a reference: `{ choice = {…} }`, `{ source = "…", … }`, `{ outputs = {…} }`, a table
/// of output files by tensor name, or Kernel Tuner's list (exactly one entry per kernel argument,
/// in `order` when given, else the tensors then the scalars: a file for a checked tensor,
/// `""`/`false` for an argument that is not checked, as Kernel Tuner's `None`). Tensors given a
/// file become outputs.
fn answer_reference(
    answer: toml::Value,
    tensors: &mut [RawTensor],
    scalars: &[RawScalar],
    order: Option<&[String]>,
) -> Result<RawReference> {
    const FORMS: &str = "give answer as a table of expected-output files by tensor name \
        (answer = { C = \"C.bin\" }), a list with one entry per kernel argument (the tensors, \
        then the scalars: a file for each checked tensor, \"\" for the arguments that are not \
        checked), a reference choice (answer = { choice = { BM = 32 } }), or a reference source \
        (answer = { source = \"ref.c\", entry = \"ref\" })";
    let files: IndexMap<String, PathBuf> = match answer {
        toml::Value::Table(table)
            if ["choice", "source", "outputs"]
                .iter()
                .any(|k| table.contains_key(*k)) =>
        {
            let reference: RawReference = toml::Value::Table(table)
                .try_into()
                .map_err(|e| anyhow::anyhow!("answer: {}", e.to_string().trim_end()))?;
            match &reference.outputs {
                Some(outputs) => outputs.clone(),
                None => return Ok(reference),
            }
        }
        toml::Value::Table(table) => table
            .into_iter()
            .map(|(name, file)| match file {
                toml::Value::String(file) => Ok((name, PathBuf::from(file))),
                other => bail!("answer.{name} = {other}: {FORMS}"),
            })
            .collect::<Result<_>>()?,
        toml::Value::Array(entries) => {
            // Kernel Tuner's rule: as many entries as the kernel has arguments, in order.
            let arguments: Vec<&str> = match order {
                Some(order) => order.iter().map(String::as_str).collect(),
                None => tensors
                    .iter()
                    .map(|t| t.name.as_str())
                    .chain(scalars.iter().map(|s| s.name.as_str()))
                    .collect(),
            };
            ensure!(
                entries.len() == arguments.len(),
                "answer: {} {} given, {} expected: the list needs one entry per kernel \
                 argument, in order ({}), a file for each checked tensor and \"\" for the others",
                entries.len(),
                if entries.len() == 1 {
                    "entry"
                } else {
                    "entries"
                },
                arguments.len(),
                if order.is_some() {
                    format!("the kernel's: {}", arguments.join(", "))
                } else {
                    format!(
                        "{} tensors then {} scalars: {}",
                        tensors.len(),
                        scalars.len(),
                        arguments.join(", ")
                    )
                }
            );
            let mut files = IndexMap::new();
            for (i, entry) in entries.iter().enumerate() {
                match entry {
                    toml::Value::String(s) if s.is_empty() => {}
                    toml::Value::Boolean(false) => {}
                    toml::Value::String(file) => {
                        let Some(tensor) = tensors.iter().find(|t| t.name == arguments[i]) else {
                            bail!(
                                "answer[{i}] = {file:?}: argument {i} is the scalar `{}`; \
                                 scalars are not checked, give \"\"",
                                arguments[i]
                            );
                        };
                        files.insert(tensor.name.clone(), PathBuf::from(file));
                    }
                    other => bail!("answer[{i}] = {other}: {FORMS}"),
                }
            }
            ensure!(!files.is_empty(), "answer: no entry names a file; {FORMS}");
            files
        }
        other => bail!("answer = {other}: {FORMS}"),
    };
    for name in files.keys() {
        let tensor = tensors
            .iter_mut()
            .find(|t| &t.name == name)
            .with_context(|| format!("answer.{name}: there is no tensor `{name}`"))?;
        tensor.output = true;
    }
    Ok(RawReference {
        outputs: Some(files),
        ..RawReference::default()
    })
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

    fn read(
        dir: &Path,
        source: &Path,
        entry: String,
        language: Language,
        flags: Vec<String>,
        compiler: String,
        field: &str,
    ) -> Result<KernelSource> {
        let path = dir.join(source);
        let bytes = std::fs::read(&path).with_context(|| {
            format!(
                "{field}.source: cannot read {} (paths are relative to the manifest)",
                path.display()
            )
        })?;
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

fn tensor(index: usize, raw: RawTensor, seed: u64, dir: &Path) -> Result<TensorSpec> {
    let field = format!("tensors[{index}]");
    ensure!(!raw.name.is_empty(), "{field}.name is empty");
    let dtype = DType::from_name(&raw.dtype).with_context(|| {
        format!(
            "{field}.dtype = {:?}: unknown dtype; use one of {}",
            raw.dtype,
            DType::ALL.map(DType::name).join(", ")
        )
    })?;
    let shape = raw
        .shape
        .iter()
        .map(|&d| {
            u64::try_from(d).ok().filter(|&d| d > 0).with_context(|| {
                format!(
                    "{field}.shape = {:?}: every dimension must be at least 1",
                    raw.shape
                )
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let spec = TensorSpec {
        name: raw.name,
        dtype,
        shape,
        init: Init::Zeros,
        output: raw.output,
        reset: raw.reset,
    };
    let Some(bytes) = spec.byte_len() else {
        bail!(
            "{field}.shape = {:?}: the tensor would need more than 2^64 bytes",
            spec.shape
        );
    };
    let init = match &raw.init {
        None => Init::Random {
            seed: seed.wrapping_add(index as u64),
        },
        Some(toml::Value::String(name)) => match name.as_str() {
            "random" => Init::Random {
                seed: seed.wrapping_add(index as u64),
            },
            "zeros" => Init::Zeros,
            "ones" => Init::Ones,
            other => bail!(
                "{field}.init = {other:?}: use \"random\", \"zeros\", \"ones\" or \
                 {{ file = \"path\" }}"
            ),
        },
        Some(toml::Value::Table(table))
            if table.len() == 1 && table.get("file").is_some_and(toml::Value::is_str) =>
        {
            let file = table["file"].as_str().expect("checked above");
            Init::Data(
                read_data(&dir.join(file), bytes, &spec)
                    .with_context(|| format!("{field}.init"))?,
            )
        }
        Some(other) => bail!(
            "{field}.init = {other}: use \"random\", \"zeros\", \"ones\" or {{ file = \"path\" }}"
        ),
    };
    Ok(TensorSpec { init, ..spec })
}

/// Reads a tensor's contents from a raw binary file (native byte order, row-major) into shared
/// memory, once: every choice's request then carries only a handle.
fn read_data(path: &Path, bytes: u64, spec: &TensorSpec) -> Result<SharedData> {
    let len = std::fs::metadata(path)
        .with_context(|| {
            format!(
                "cannot read {} (paths are relative to the manifest)",
                path.display()
            )
        })?
        .len();
    ensure!(
        len == bytes,
        "{} has {len} bytes, but {} × {:?} needs {bytes}",
        path.display(),
        spec.dtype.name(),
        spec.shape
    );
    let len = usize::try_from(len).context("the file is too large for this machine")?;
    let mut buffer = SharedBuffer::new(len)
        .with_context(|| format!("cannot hold {} in shared memory", path.display()))?;
    let contents = buffer.get_mut().expect("a new buffer has no other handle");
    std::fs::File::open(path)
        .and_then(|mut file| std::io::Read::read_exact(&mut file, contents))
        .with_context(|| format!("cannot read {}", path.display()))?;
    Ok(buffer.share())
}

fn timing(raw: Option<RawTiming>, iterations: Option<u32>) -> Result<TimingConfig> {
    let mut timing = TimingConfig::default();
    if let Some(iterations) = iterations {
        timing.min_reps = iterations;
        timing.max_reps = iterations;
    }
    let Some(raw) = raw else {
        return Ok(timing);
    };
    for (name, value) in [("warmup_ms", raw.warmup_ms), ("rep_ms", raw.rep_ms)] {
        if let Some(value) = value {
            ensure!(
                value.is_finite() && value >= 0.0,
                "timing.{name} = {value}: it must be a number of ms, 0 or more"
            );
        }
    }
    timing.warmup_ms = raw.warmup_ms.unwrap_or(timing.warmup_ms);
    timing.rep_ms = raw.rep_ms.unwrap_or(timing.rep_ms);
    timing.min_reps = raw.min_reps.unwrap_or(timing.min_reps);
    timing.max_reps = raw.max_reps.unwrap_or(timing.max_reps.max(timing.min_reps));
    timing.flush_cache = raw.flush_cache.unwrap_or(timing.flush_cache);
    timing.hot = raw.hot.unwrap_or(timing.hot);
    if let Some(name) = raw.cache_flush {
        timing.cache_flush = CacheFlush::from_name(&name).with_context(|| {
            format!(
                "timing.cache_flush = {name:?}: use \"tensors\" (evict the tensors' cache lines, \
                 the default) or \"llc\" (write a buffer twice the last-level cache)"
            )
        })?;
    }
    for (name, value) in [
        ("max_noise", raw.max_noise),
        ("max_time_ms", raw.max_time_ms),
    ] {
        if let Some(value) = value {
            ensure!(
                value.is_finite() && value > 0.0,
                "timing.{name} = {value}: it must be above 0"
            );
        }
    }
    timing.max_noise = raw.max_noise;
    timing.max_time_ms = raw.max_time_ms;
    ensure!(timing.min_reps >= 1, "timing.min_reps must be at least 1");
    ensure!(
        timing.max_reps >= timing.min_reps,
        "timing.max_reps ({}) must not be below timing.min_reps ({})",
        timing.max_reps,
        timing.min_reps
    );
    ensure!(
        timing.max_reps <= MAX_REPS,
        "timing.max_reps = {}: at most {MAX_REPS} reps are supported",
        timing.max_reps
    );
    Ok(timing)
}

fn verify(
    raw: RawVerify,
    dir: &Path,
    params: &IndexMap<String, Vec<ParamValue>>,
    kernel: &KernelSource,
    tensors: &[TensorSpec],
    problem_size: Option<&[toml::Value]>,
) -> Result<Verify> {
    let tolerance = Tolerance {
        rtol: raw.rtol.unwrap_or(1e-5),
        atol: raw.atol.unwrap_or(1e-8),
        equal_nan: raw.equal_nan.unwrap_or(false),
    };
    for (name, value) in [("rtol", tolerance.rtol), ("atol", tolerance.atol)] {
        ensure!(
            value.is_finite() && value >= 0.0,
            "verify.{name} = {value}: it must be 0 or more"
        );
    }
    ensure!(
        tensors.iter().any(|t| t.output),
        "verify: no tensor has `output = true`, so there is nothing to compare"
    );
    let reference = match raw.reference {
        RawReference {
            choice: Some(choice),
            source: None,
            entry: None,
            flags: None,
            outputs: None,
            launch: None,
        } => Reference::Choice(reference_choice(choice, params)?),
        RawReference {
            choice: None,
            source: None,
            entry: None,
            flags: None,
            outputs: Some(files),
            launch: None,
        } => Reference::Outputs(reference_outputs(&files, dir, tensors)?),
        RawReference {
            choice: None,
            source: Some(source),
            entry,
            flags,
            outputs: None,
            launch,
        } => {
            let language = language_of(&source, None)?;
            let flags = match flags {
                Some(flags) => resolve_paths(flags, dir, language),
                None => match (language, kernel.language) {
                    (a, b) if a == b => kernel.flags.clone(),
                    (Language::C, _) => DEFAULT_FLAGS.iter().map(|f| (*f).to_owned()).collect(),
                    (Language::Cuda, _) => Vec::new(),
                },
            };
            let reference = KernelSource::read(
                dir,
                &source,
                entry.unwrap_or_else(|| kernel.entry.clone()),
                language,
                flags,
                kernel.compiler.clone(),
                "verify.reference",
            )?;
            let launch = match (language, launch) {
                (Language::Cuda, Some(raw)) => Some(Box::new(
                    Launch::from_raw(raw, problem_size, &IndexMap::new())
                        .context("verify.reference.launch")?,
                )),
                (Language::Cuda, None) => None,
                (Language::C, Some(_)) => {
                    bail!("verify.reference.launch applies to a CUDA reference source")
                }
                (Language::C, None) => None,
            };
            Reference::Source(Box::new(reference), launch)
        }
        _ => bail!(
            "verify.reference: give one of `choice = {{ … }}` (a choice of this kernel), \
             `source = \"…\"` with an optional `entry` and `flags` (a separate reference kernel), \
             or `outputs = {{ NAME = \"file\", … }}` (the expected output of each output tensor)"
        ),
    };
    let timeout = raw
        .timeout_s
        .map(|t| {
            ensure!(
                t.is_finite() && t > 0.0 && t <= MAX_TIMEOUT_S,
                "verify.timeout_s = {t}: it must be a number of seconds above 0 and at most \
                 {MAX_TIMEOUT_S} (a week)"
            );
            Ok(Duration::from_secs_f64(t))
        })
        .transpose()?;
    Ok(Verify {
        tolerance,
        reference,
        timeout,
    })
}

/// The expected contents of every output tensor, from raw binary files.
fn reference_outputs(
    files: &IndexMap<String, PathBuf>,
    dir: &Path,
    tensors: &[TensorSpec],
) -> Result<Vec<TensorData>> {
    for name in files.keys() {
        ensure!(
            tensors.iter().any(|t| t.output && &t.name == name),
            "verify.reference.outputs.{name}: no tensor `{name}` has `output = true`"
        );
    }
    tensors
        .iter()
        .filter(|t| t.output)
        .map(|spec| {
            let field = format!("verify.reference.outputs.{}", spec.name);
            let file = files.get(&spec.name).with_context(|| {
                format!("{field} is missing: give the expected contents of every output tensor")
            })?;
            let bytes = spec.byte_len().expect("checked when the tensor was read");
            let data = read_data(&dir.join(file), bytes, spec).with_context(|| field.clone())?;
            Ok(TensorData {
                name: spec.name.clone(),
                dtype: spec.dtype,
                shape: spec.shape.clone(),
                bytes: Bytes::copy_from_slice(&data).with_context(|| field.clone())?,
            })
        })
        .collect()
}

fn reference_choice(
    raw: IndexMap<String, toml::Value>,
    params: &IndexMap<String, Vec<ParamValue>>,
) -> Result<Choice> {
    for name in raw.keys() {
        ensure!(
            params.contains_key(name),
            "verify.reference.choice.{name}: `{name}` is not a param (params: {})",
            params.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    params
        .keys()
        .map(|name| {
            let value = raw.get(name).with_context(|| {
                format!(
                    "verify.reference.choice: give a value for every param; `{name}` is missing"
                )
            })?;
            let value = ParamValue::from_toml(value)
                .with_context(|| format!("verify.reference.choice.{name}"))?;
            Ok((name.clone(), value))
        })
        .collect::<Result<IndexMap<_, _>>>()
        .map(Choice::new)
}

/// A source's language: `given` (`"c"` or `"cuda"`, any case, as Kernel Tuner's `lang`), else by
/// the source's extension.
fn language_of(source: &Path, given: Option<&str>) -> Result<Language> {
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

/// Keys that belong at the top of a manifest, before the first `[table]`.
const TOP_LEVEL_KEYS: [&str; 17] = [
    "name",
    "args",
    "seed",
    "timeout_s",
    "compile_timeout_s",
    "restrictions",
    "problem_size",
    "kernel_name",
    "kernel_source",
    "lang",
    "compiler_options",
    "answer",
    "atol",
    "iterations",
    "grid_div_x",
    "grid_div_y",
    "grid_div_z",
];

/// A hint for the usual TOML mistake: a top-level key written after a `[table]` header, which
/// makes it part of that table.
fn misplaced_key_hint(message: &str) -> String {
    TOP_LEVEL_KEYS
        .iter()
        .find(|key| message.contains(&format!("unknown field `{key}`")))
        .map(|key| {
            format!(
                "\nhint: `{key}` is a top-level key; in TOML it must come before the first \
                 [table] header, or it belongs to that table"
            )
        })
        .unwrap_or_default()
}

/// A `[[scalars]]` entry (or a Kernel Tuner argument with a `value`) as a typed scalar: `type`
/// names the C type (`i32`, `i64`, `f32`, `f64`); without it an integer is `i64` and a float
/// `f64`. A float type takes an integer or a float, an integer type only an integer.
fn scalar(index: usize, raw: RawScalar) -> Result<Scalar> {
    let field = format!("scalars[{index}] (`{}`)", raw.name);
    ensure!(!raw.name.is_empty(), "scalars[{index}].name is empty");
    let kind = match raw.kind.as_deref() {
        Some(name) => ScalarKind::from_name(name).with_context(|| {
            format!(
                "{field}.type = {name:?}: use one of {} (Kernel Tuner's numpy.int32, \
                 numpy.int64, numpy.float32, numpy.float64)",
                ScalarKind::ALL.map(ScalarKind::name).join(", ")
            )
        })?,
        None => match raw.value {
            toml::Value::Float(_) => ScalarKind::F64,
            _ => ScalarKind::I64,
        },
    };
    let scalar = match (&raw.value, kind.is_float()) {
        (toml::Value::Integer(v), false) => Scalar {
            name: raw.name,
            value: *v,
            kind,
            float: 0.0,
        },
        (toml::Value::Integer(v), true) => Scalar {
            name: raw.name,
            value: 0,
            kind,
            float: *v as f64,
        },
        (toml::Value::Float(v), true) => Scalar {
            name: raw.name,
            value: 0,
            kind,
            float: *v,
        },
        (toml::Value::Float(v), false) => bail!(
            "{field}.value = {v}: an {} scalar takes an integer; give type = \"f32\" or \"f64\" \
             to pass a float",
            kind.name()
        ),
        (other, _) => bail!("{field}.value = {other}: give a number"),
    };
    scalar
        .check()
        .map_err(|e| anyhow::anyhow!("{field}: {e}"))?;
    Ok(scalar)
}

/// The argument order: `names` (the manifest's `args`, or the names of Kernel Tuner's
/// `arguments`) as tensor and scalar indices, each exactly once; without names, every tensor
/// then every scalar, left empty (the default order) unless a tensor is `untyped`.
fn arg_order(
    names: Option<Vec<String>>,
    tensors: &[TensorSpec],
    untyped: &[bool],
    scalars: &[Scalar],
) -> Result<Vec<Arg>> {
    let tensor_arg = |i: usize| {
        let index = u32::try_from(i).expect("fewer than 2^32 tensors");
        if untyped[i] {
            Arg::Untyped(index)
        } else {
            Arg::Tensor(index)
        }
    };
    let scalar_arg = |i: usize| Arg::Scalar(u32::try_from(i).expect("fewer than 2^32 scalars"));
    let Some(names) = names else {
        if !untyped.contains(&true) {
            return Ok(Vec::new());
        }
        return Ok((0..tensors.len())
            .map(tensor_arg)
            .chain((0..scalars.len()).map(scalar_arg))
            .collect());
    };
    for scalar in scalars {
        ensure!(
            !tensors.iter().any(|t| t.name == scalar.name),
            "args: `{}` is the name of a tensor and of a scalar; rename one",
            scalar.name
        );
    }
    let all = || {
        tensors
            .iter()
            .map(|t| t.name.as_str())
            .chain(scalars.iter().map(|s| s.name.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut order = Vec::with_capacity(names.len());
    for (position, name) in names.iter().enumerate() {
        if let Some(first) = names[..position].iter().position(|n| n == name) {
            bail!(
                "args[{position}] = {name:?} repeats args[{first}]; give each tensor and scalar \
                 once, in the kernel's order"
            );
        }
        let arg = if let Some(i) = tensors.iter().position(|t| &t.name == name) {
            tensor_arg(i)
        } else if let Some(i) = scalars.iter().position(|s| &s.name == name) {
            scalar_arg(i)
        } else {
            bail!(
                "args[{position}] = {name:?}: there is no tensor or scalar `{name}` (they are: {})",
                all()
            );
        };
        order.push(arg);
    }
    let missing: Vec<&str> = tensors
        .iter()
        .map(|t| t.name.as_str())
        .chain(scalars.iter().map(|s| s.name.as_str()))
        .filter(|n| !names.iter().any(|m| m == n))
        .collect();
    ensure!(
        missing.is_empty(),
        "args: {} missing; name every tensor and scalar once, in the kernel's order",
        missing
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ")
            + if missing.len() == 1 { " is" } else { " are" }
    );
    // The default order, written out, is the default order (and keeps its cache keys).
    let default: Vec<Arg> = (0..tensors.len())
        .map(|i| Arg::Tensor(i as u32))
        .chain((0..scalars.len()).map(|i| Arg::Scalar(i as u32)))
        .collect();
    if order == default {
        order.clear();
    }
    Ok(order)
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
fn resolve_paths(flags: Vec<String>, dir: &Path, language: Language) -> Vec<String> {
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
        tunebox_cpu::Language::Cxx => crate::run::cxx_compiler(),
        tunebox_cpu::Language::C => c_compiler.to_owned(),
    }
}

/// The directory holding `path`: `.` for a bare file name.
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
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
}
