//! The search space as the manifest writes it: `params` (each a list of values) and the
//! `restrictions` over them.

use anyhow::{Context, Result, bail, ensure};
use indexmap::IndexMap;
use tunebox_protocol::{Define, Scalar, TensorSpec};

use crate::space::{ParamValue, Restriction};

/// `params`: each name a C identifier (it becomes `-DNAME=…`), each list non-empty and without
/// repeats.
pub(super) fn params(
    raw: Option<IndexMap<String, Vec<toml::Value>>>,
) -> Result<IndexMap<String, Vec<ParamValue>>> {
    let mut params = IndexMap::new();
    for (name, values) in raw.unwrap_or_default() {
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
            .map(|(i, v)| ParamValue::from_toml(v).with_context(|| format!("params.{name}[{i}]")))
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
    Ok(params)
}

/// Refuses a param named as a tensor or scalar argument: its `-DNAME=VALUE` would replace the
/// argument's name in the kernel's source, so that no choice would compile.
///
/// # Errors
///
/// The first such param, saying what to rename.
pub(super) fn not_arguments(
    params: &IndexMap<String, Vec<ParamValue>>,
    tensors: &[TensorSpec],
    scalars: &[Scalar],
) -> Result<()> {
    for name in params.keys() {
        let kind = if scalars.iter().any(|s| &s.name == name) {
            "scalar"
        } else if tensors.iter().any(|t| &t.name == name) {
            "tensor"
        } else {
            continue;
        };
        bail!(
            "params.{name}: `{name}` is also the name of a {kind} argument; a parameter is \
             defined as -D{name}=VALUE, which would replace the argument's name in the kernel \
             so that no choice compiles. Rename the parameter (and its uses in the source), or \
             the {kind}"
        );
    }
    Ok(())
}

/// `restrictions`, each parsed over the names of `params`.
pub(super) fn restrictions(
    texts: &[String],
    params: &IndexMap<String, Vec<ParamValue>>,
) -> Result<Vec<Restriction>> {
    texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            Restriction::parse(text, params).with_context(|| format!("restrictions[{i}]"))
        })
        .collect()
}
