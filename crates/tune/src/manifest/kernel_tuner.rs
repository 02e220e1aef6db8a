//! Kernel Tuner's spellings of manifest fields (`tune_kernel`'s argument names), moved to
//! tunebox's before anything is checked.

use std::path::PathBuf;

use anyhow::{Context, Result, bail, ensure};
use indexmap::IndexMap;

use super::raw::{RawKernel, RawManifest, RawReference, RawScalar, RawTensor, RawVerify};
use super::timing::MAX_REPS;
use crate::manifest::launch::RawLaunch;

/// Moves Kernel Tuner's spellings (`tune_params`, `kernel_name`, `kernel_source`, `lang`,
/// `compiler_options`, `answer` + `atol`, `grid_div_x/y/z`, `problem_size` in `[launch]`) to
/// tunebox's fields, refusing a field given both ways.
pub(super) fn aliases(mut raw: RawManifest) -> Result<RawManifest> {
    argument_list(&mut raw)?;
    if let Some(tune_params) = raw.tune_params.take() {
        ensure!(
            raw.params.is_none(),
            "params and tune_params: give the parameters once (tune_params is Kernel Tuner's name \
             for params)"
        );
        raw.params = Some(tune_params);
        raw.kernel_tuner_macros = true;
    }
    kernel_fields(&mut raw)?;
    launch_fields(&mut raw)?;
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
    answer(&mut raw)?;
    Ok(raw)
}

/// `[[arguments]]`: Kernel Tuner's argument list, as `[[tensors]]`, `[[scalars]]` and `args`.
fn argument_list(raw: &mut RawManifest) -> Result<()> {
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
    Ok(())
}

/// The top-level `kernel_name`, `kernel_source`, `lang` and `compiler_options`, into `[kernel]`.
fn kernel_fields(raw: &mut RawManifest) -> Result<()> {
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
    Ok(())
}

/// The top-level `grid_div_x/y/z` into `[launch]`, and `[launch]`'s `problem_size` to the top.
fn launch_fields(raw: &mut RawManifest) -> Result<()> {
    let divs = [
        ("grid_div_x", raw.grid_div_x.take()),
        ("grid_div_y", raw.grid_div_y.take()),
        ("grid_div_z", raw.grid_div_z.take()),
    ];
    if divs.iter().any(|(_, d)| d.is_some()) {
        if raw.launch.is_none() {
            raw.launch_from_aliases = divs
                .iter()
                .filter(|(_, d)| d.is_some())
                .map(|(field, _)| *field)
                .collect();
        }
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
    Ok(())
}

/// `answer` (and `atol`): Kernel Tuner's reference outputs, as `[verify]`.
fn answer(raw: &mut RawManifest) -> Result<()> {
    match (raw.answer.take(), raw.atol) {
        (Some(answer), atol) => {
            ensure!(
                raw.verify.is_none(),
                "answer and [verify]: answer is Kernel Tuner's name for verify.reference; give one \
                 of them"
            );
            let (reference, written_as) =
                answer_reference(answer, &mut raw.tensors, &raw.scalars, raw.args.as_deref())?;
            let atol = atol.unwrap_or(KT_ATOL);
            raw.verify = Some(RawVerify {
                rtol: None,
                atol: Some(atol),
                // Kernel Tuner's `equal_nan` is whether the answer holds a NaN: the same as
                // always, since it matters only where the answer is NaN.
                equal_nan: Some(true),
                timeout_s: None,
                checked_reps: None,
                reference,
                written_as,
            });
        }
        (None, Some(_)) => bail!(
            "atol: a top-level atol goes with answer (Kernel Tuner's); with [verify], set \
             verify.atol"
        ),
        (None, None) => {}
    }
    Ok(())
}

/// Kernel Tuner's default `atol`.
const KT_ATOL: f64 = 1e-6;

/// How `answer` may be given, for its errors.
const ANSWER_FORMS: &str = "give answer as a table of expected-output files by tensor name \
    (answer = { C = \"C.bin\" }), a list with one entry per kernel argument (the tensors, \
    then the scalars: a file for each checked tensor, \"\" for the arguments that are not \
    checked), a reference choice (answer = { choice = { BM = 32 } }), or a reference source \
    (answer = { source = \"ref.c\", entry = \"ref\" })";

/// `answer` as a reference: `{ choice = {…} }`, `{ source = "…", … }`, `{ outputs = {…} }`, a table
/// of output files by tensor name, or Kernel Tuner's list (exactly one entry per kernel argument,
/// in `order` when given, else the tensors then the scalars: a file for a checked tensor,
/// `""`/`false` for an argument that is not checked, as Kernel Tuner's `None`). Tensors given a
/// file become outputs. Also how the user wrote each output (`answer[3]`, `answer.C`), for
/// errors about it.
fn answer_reference(
    answer: toml::Value,
    tensors: &mut [RawTensor],
    scalars: &[RawScalar],
    order: Option<&[String]>,
) -> Result<(RawReference, IndexMap<String, String>)> {
    let mut written_as = IndexMap::new();
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
                Some(outputs) => {
                    for name in outputs.keys() {
                        written_as.insert(name.clone(), format!("answer.outputs.{name}"));
                    }
                    outputs.clone()
                }
                None => return Ok((reference, written_as)),
            }
        }
        toml::Value::Table(table) => answer_files_by_name(table, &mut written_as)?,
        toml::Value::Array(entries) => {
            answer_files_by_argument(&entries, tensors, scalars, order, &mut written_as)?
        }
        other => bail!("answer = {other}: {ANSWER_FORMS}"),
    };
    for name in files.keys() {
        let tensor = tensors
            .iter_mut()
            .find(|t| &t.name == name)
            .with_context(|| format!("answer.{name}: there is no tensor `{name}`"))?;
        tensor.output = true;
    }
    Ok((
        RawReference {
            outputs: Some(files),
            ..RawReference::default()
        },
        written_as,
    ))
}

/// `answer` as a table of output files by tensor name (each written as `answer.NAME`).
fn answer_files_by_name(
    table: toml::Table,
    written_as: &mut IndexMap<String, String>,
) -> Result<IndexMap<String, PathBuf>> {
    table
        .into_iter()
        .map(|(name, file)| match file {
            toml::Value::String(file) => {
                written_as.insert(name.clone(), format!("answer.{name}"));
                Ok((name, PathBuf::from(file)))
            }
            other => bail!("answer.{name} = {other}: {ANSWER_FORMS}"),
        })
        .collect()
}

/// `answer` as Kernel Tuner's list, one entry per kernel argument ([`answer_arguments`]): a
/// file for a checked tensor (written as `answer[i]`), `""` or `false` for the others.
fn answer_files_by_argument(
    entries: &[toml::Value],
    tensors: &[RawTensor],
    scalars: &[RawScalar],
    order: Option<&[String]>,
    written_as: &mut IndexMap<String, String>,
) -> Result<IndexMap<String, PathBuf>> {
    let arguments = answer_arguments(entries.len(), tensors, scalars, order)?;
    let mut files = IndexMap::new();
    for (i, entry) in entries.iter().enumerate() {
        match entry {
            toml::Value::String(s) if s.is_empty() => {}
            toml::Value::Boolean(false) => {}
            toml::Value::String(file) => {
                let Some(tensor) = tensors.iter().find(|t| t.name == arguments[i]) else {
                    bail!(
                        "answer[{i}] = {file:?}: argument {i} is the scalar `{}`; scalars are \
                         not checked, give \"\"",
                        arguments[i]
                    );
                };
                files.insert(tensor.name.clone(), PathBuf::from(file));
                written_as.insert(tensor.name.clone(), format!("answer[{i}]"));
            }
            other => bail!("answer[{i}] = {other}: {ANSWER_FORMS}"),
        }
    }
    ensure!(
        !files.is_empty(),
        "answer: no entry names a file; {ANSWER_FORMS}"
    );
    Ok(files)
}

/// The kernel's arguments an answer list of `given` entries stands for, in order: `order`
/// when given, else the tensors then the scalars (Kernel Tuner's rule: as many entries as the
/// kernel has arguments).
fn answer_arguments<'a>(
    given: usize,
    tensors: &'a [RawTensor],
    scalars: &'a [RawScalar],
    order: Option<&'a [String]>,
) -> Result<Vec<&'a str>> {
    let arguments: Vec<&str> = match order {
        Some(order) => order.iter().map(String::as_str).collect(),
        None => tensors
            .iter()
            .map(|t| t.name.as_str())
            .chain(scalars.iter().map(|s| s.name.as_str()))
            .collect(),
    };
    ensure!(
        given == arguments.len(),
        "answer: {} {} given, {} expected: the list needs one entry per kernel \
         argument, in order ({}), a file for each checked tensor and \"\" for the others",
        given,
        if given == 1 { "entry" } else { "entries" },
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
    Ok(arguments)
}
