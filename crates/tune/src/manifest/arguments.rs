//! The kernel's arguments: tensors (shapes, dtypes, initial contents), scalars, and the order
//! the kernel takes them in.

use std::path::Path;

use anyhow::{Context, Result, bail, ensure};
use tunebox_protocol::{
    Arg, DType, Init, Scalar, ScalarKind, SharedBuffer, SharedData, TensorSpec,
};

use super::files::ManifestFiles;
use super::from_t1;
use super::raw::{RawScalar, RawTensor};

/// The kernel's arguments, read and checked: tensors, scalars and their order.
pub(super) struct Arguments {
    pub tensors: Vec<TensorSpec>,
    pub scalars: Vec<Scalar>,
    /// Empty: every tensor, then every scalar (see [`arg_order`]).
    pub args: Vec<Arg>,
}

impl Arguments {
    /// `[[tensors]]` (initialised from `seed`, files from `files` or else relative to `dir`,
    /// then T1's constant `fills`), `[[scalars]]` and `args`; refuses tensors that together exceed this machine's
    /// memory and two tensors of one name.
    pub(super) fn read(
        raw_tensors: Vec<RawTensor>,
        raw_scalars: Vec<RawScalar>,
        names: Option<Vec<String>>,
        seed: u64,
        dir: &Path,
        fills: &[(usize, f64)],
        files: &ManifestFiles,
    ) -> Result<Arguments> {
        let untyped = untyped(&raw_tensors)?;
        let tensors = raw_tensors
            .into_iter()
            .enumerate()
            .map(|(i, t)| tensor(i, t, seed, dir, files))
            .collect::<Result<Vec<_>>>()?;
        let tensors = from_t1::fill_constants(tensors, fills)?;
        fits_in_memory(&tensors)?;
        for (i, t) in tensors.iter().enumerate() {
            if let Some(first) = tensors[..i].iter().position(|u| u.name == t.name) {
                bail!(
                    "tensors[{i}].name: `{}` is also the name of tensors[{first}]",
                    t.name
                );
            }
        }
        let scalars: Vec<Scalar> = raw_scalars
            .into_iter()
            .enumerate()
            .map(|(i, s)| scalar(i, s))
            .collect::<Result<_>>()?;
        let args = arg_order(names, &tensors, &untyped, &scalars)?;
        Ok(Arguments {
            tensors,
            scalars,
            args,
        })
    }
}

/// Per tensor, whether it is passed untyped (`c_type = "void"`).
fn untyped(tensors: &[RawTensor]) -> Result<Vec<bool>> {
    tensors
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
        .collect()
}

/// Refuses tensors that together need more than this machine's physical memory.
fn fits_in_memory(tensors: &[TensorSpec]) -> Result<()> {
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
    Ok(())
}

fn tensor(
    index: usize,
    raw: RawTensor,
    seed: u64,
    dir: &Path,
    files: &ManifestFiles,
) -> Result<TensorSpec> {
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
    let mut spec = TensorSpec::new(raw.name, dtype, shape);
    spec.output = raw.output;
    spec.reset = raw.reset;
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
                read_data(dir, Path::new(file), files, bytes, &spec)
                    .with_context(|| format!("{field}.init"))?,
            )
        }
        Some(other) => bail!(
            "{field}.init = {other}: use \"random\", \"zeros\", \"ones\" or {{ file = \"path\" }}"
        ),
    };
    Ok(spec.init(init))
}

/// A tensor's contents: the data `files` gives for `file`, else the raw binary file `file`
/// (relative to `dir`; native byte order, row-major) read into shared memory, once: every
/// choice's request then carries only a handle.
pub(super) fn read_data(
    dir: &Path,
    file: &Path,
    files: &ManifestFiles,
    bytes: u64,
    spec: &TensorSpec,
) -> Result<SharedData> {
    if let Some(given) = files.get(file) {
        ensure!(
            given.len() as u64 == bytes,
            "{} (given in memory) has {} bytes, but {} × {:?} needs {bytes}",
            file.display(),
            given.len(),
            spec.dtype.name(),
            spec.shape
        );
        return Ok(given.clone());
    }
    let path = dir.join(file);
    let path = path.as_path();
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
        (toml::Value::Integer(v), false) => scalar_of(raw.name, kind, *v, 0.0),
        (toml::Value::Integer(v), true) => scalar_of(raw.name, kind, 0, *v as f64),
        (toml::Value::Float(v), true) => scalar_of(raw.name, kind, 0, *v),
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

/// The scalar `name` of `kind` holding `value` (integer kinds) or `float` (float kinds).
fn scalar_of(name: String, kind: ScalarKind, value: i64, float: f64) -> Scalar {
    let mut scalar = Scalar::new(name, value);
    scalar.kind = kind;
    scalar.float = float;
    scalar
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
