//! Verification: the tolerance, the reference (a choice, a source, or expected outputs) and
//! the reference run's timeout.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use indexmap::IndexMap;
use tunebox_pool::Tolerance;
use tunebox_protocol::{Bytes, TensorData, TensorSpec};

use super::arguments::read_data;
use super::files::ManifestFiles;
use super::raw::{RawReference, RawVerify};
use super::source::{DEFAULT_FLAGS, KernelSource, Language, language_of, resolve_paths};
use super::timing::MAX_TIMEOUT_S;
use crate::manifest::launch::Launch;
use crate::space::{Choice, ParamValue};

/// Timed reps of a verified window checked on varied inputs in a sandbox, unless
/// `verify.checked_reps` says otherwise: two, so that a kernel skipping even half its reps is
/// caught three times in four per window, and every verified window (each choice's first, and
/// each window checked again) gets its chance.
pub(crate) const SANDBOX_CHECKED_REPS: u32 = 2;

/// Least time the reference gets when `verify.timeout_s` is not set.
const DEFAULT_REFERENCE_TIMEOUT_S: f64 = 60.0;

/// How choices are checked.
#[derive(Debug)]
pub(crate) struct Verify {
    pub tolerance: Tolerance,
    pub reference: Reference,
    /// The reference run's own timeout (`verify.timeout_s`); `None`: see
    /// [`Verify::reference_timeout`].
    pub timeout: Option<Duration>,
    /// `verify.checked_reps`: how many timed reps of each verified window are checked against
    /// the reference on inputs varied from rep to rep (0: the inputs vary, no rep is checked;
    /// `None`: as [`Verify::checked_reps`] decides).
    pub checked_reps: Option<u32>,
    /// The files the expected outputs were read from (a reference given as outputs; none for
    /// outputs given in memory): what no worker may read.
    pub answer_files: Vec<PathBuf>,
}

impl Verify {
    /// Timed reps of each verified window checked on varied inputs (docs/sandbox.md):
    /// `verify.checked_reps` when given, else [`SANDBOX_CHECKED_REPS`] in a sandbox (whose
    /// candidates may be written to win) and none outside one; `None` when the reference is
    /// given as outputs (one fixed input: nothing to check a varied rep against) or no rep is
    /// to vary.
    pub(crate) fn checked_reps(&self, sandboxed: bool) -> Option<u32> {
        if matches!(self.reference, Reference::Outputs(_)) {
            return None;
        }
        match self.checked_reps {
            Some(n) => Some(n),
            None => sandboxed.then_some(SANDBOX_CHECKED_REPS),
        }
    }

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

/// `[verify]` checked and read: the tolerance, the reference (a choice, a source or expected
/// outputs, read from files under `dir`) and the reference's timeout.
pub(super) fn verify(
    raw: RawVerify,
    dir: &Path,
    params: &IndexMap<String, Vec<ParamValue>>,
    kernel: &KernelSource,
    tensors: &[TensorSpec],
    problem_size: Option<&[toml::Value]>,
    files: &ManifestFiles,
) -> Result<Verify> {
    let tolerance = tolerance(&raw)?;
    ensure!(
        tensors.iter().any(|t| t.output),
        "verify: no tensor has `output = true`, so there is nothing to compare"
    );
    let answer_files = raw
        .reference
        .outputs
        .iter()
        .flat_map(|outputs| outputs.values())
        .filter(|file| files.get(file).is_none())
        .map(|file| dir.join(file))
        .collect();
    let manifest = Surroundings {
        dir,
        params,
        kernel,
        tensors,
        problem_size,
        files,
    };
    let reference = manifest.reference(raw.reference, &raw.written_as)?;
    if let (Some(n @ 1..), Reference::Outputs(_)) = (raw.checked_reps, &reference) {
        bail!(
            "verify.checked_reps = {n}: the reference is expected outputs for one fixed input, \
             so no timed rep can be checked on inputs varied from rep to rep (a kernel that \
             remembers an earlier call's answer is not caught); give a reference kernel \
             (`reference = {{ choice = {{ … }} }}` or `reference = {{ source = \"ref.c\" }}`), \
             or leave checked_reps out"
        );
    }
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
        checked_reps: raw.checked_reps,
        tolerance,
        reference,
        timeout,
        answer_files,
    })
}

/// `verify.rtol`, `verify.atol` (each 0 or more) and `verify.equal_nan`, with their defaults.
fn tolerance(raw: &RawVerify) -> Result<Tolerance> {
    let default = Tolerance::default();
    let tolerance = Tolerance::new(
        raw.rtol.unwrap_or(default.rtol),
        raw.atol.unwrap_or(default.atol),
    )
    .equal_nan(raw.equal_nan.unwrap_or(default.equal_nan));
    for (name, value) in [("rtol", tolerance.rtol), ("atol", tolerance.atol)] {
        ensure!(
            value.is_finite() && value >= 0.0,
            "verify.{name} = {value}: it must be 0 or more"
        );
    }
    Ok(tolerance)
}

/// What a reference is read against: the manifest's folder, params, kernel, tensors, problem
/// size and the files it has read.
struct Surroundings<'a> {
    dir: &'a Path,
    params: &'a IndexMap<String, Vec<ParamValue>>,
    kernel: &'a KernelSource,
    tensors: &'a [TensorSpec],
    problem_size: Option<&'a [toml::Value]>,
    files: &'a ManifestFiles,
}

impl Surroundings<'_> {
    /// `verify.reference`: exactly one of a choice, a source (with its entry, flags and
    /// launch) or expected outputs (`written_as`: how the user wrote each).
    fn reference(
        &self,
        raw: RawReference,
        written_as: &IndexMap<String, String>,
    ) -> Result<Reference> {
        Ok(match raw {
            RawReference {
                choice: Some(choice),
                source: None,
                entry: None,
                flags: None,
                outputs: None,
                launch: None,
            } => Reference::Choice(reference_choice(choice, self.params)?),
            RawReference {
                choice: None,
                source: None,
                entry: None,
                flags: None,
                outputs: Some(outputs),
                launch: None,
            } => Reference::Outputs(reference_outputs(
                &outputs,
                self.dir,
                self.tensors,
                written_as,
                self.files,
            )?),
            RawReference {
                choice: None,
                source: Some(source),
                entry,
                flags,
                outputs: None,
                launch,
            } => self.source(&source, entry, flags, launch)?,
            _ => bail!(
                "verify.reference: give one of `choice = {{ … }}` (a choice of this kernel), \
                 `source = \"…\"` with an optional `entry` and `flags` (a separate reference \
                 kernel), or `outputs = {{ NAME = \"file\", … }}` (the expected output of each \
                 output tensor)"
            ),
        })
    }

    /// A reference source: read with its `entry` (the kernel's by default) and `flags` (the
    /// kernel's for the same language, else the language's defaults), and a CUDA source's
    /// own `launch`.
    fn source(
        &self,
        source: &Path,
        entry: Option<String>,
        flags: Option<Vec<String>>,
        launch: Option<crate::manifest::launch::RawLaunch>,
    ) -> Result<Reference> {
        let (dir, kernel) = (self.dir, self.kernel);
        let language = language_of(source, None)?;
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
            source,
            entry.unwrap_or_else(|| kernel.entry.clone()),
            language,
            flags,
            kernel.compiler.clone(),
            "verify.reference",
            self.files,
        )?;
        let launch = match (language, launch) {
            (Language::Cuda, Some(raw)) => Some(Box::new(
                Launch::from_raw(raw, self.problem_size, &IndexMap::new(), false)
                    .context("verify.reference.launch")?,
            )),
            (Language::Cuda, None) => None,
            (Language::C, Some(_)) => {
                bail!("verify.reference.launch applies to a CUDA reference source")
            }
            (Language::C, None) => None,
        };
        Ok(Reference::Source(Box::new(reference), launch))
    }
}

/// The expected contents of every output tensor, from `given` or else raw binary files;
/// errors name each as the user wrote it (`written_as`: Kernel Tuner's `answer[3]`), else as
/// `verify.reference.outputs.NAME`.
fn reference_outputs(
    files: &IndexMap<String, PathBuf>,
    dir: &Path,
    tensors: &[TensorSpec],
    written_as: &IndexMap<String, String>,
    given: &ManifestFiles,
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
            let field = written_as
                .get(&spec.name)
                .cloned()
                .unwrap_or_else(|| format!("verify.reference.outputs.{}", spec.name));
            let file = files.get(&spec.name).with_context(|| {
                if written_as.is_empty() {
                    format!("{field} is missing: give the expected contents of every output tensor")
                } else {
                    format!(
                        "answer gives no expected contents for `{}`, which has `output = true`: \
                         give a file for it in answer, or drop its `output = true`",
                        spec.name
                    )
                }
            })?;
            let bytes = spec.byte_len().expect("checked when the tensor was read");
            let data = read_data(dir, file, given, bytes, spec).with_context(|| field.clone())?;
            Ok(TensorData::new(
                spec.name.clone(),
                spec.dtype,
                spec.shape.clone(),
                Bytes::copy_from_slice(&data).with_context(|| field.clone())?,
            ))
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
