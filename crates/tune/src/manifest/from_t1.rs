//! A FAIR T1 file (`tunebox tune FILE.json`) as a manifest: the [`T1File`] model turned into
//! the fields a TOML manifest would give, so that one code path checks both.
//!
//! What maps to what (docs/manifest.md, "T1 files", says the same for users):
//!
//! - `TuningParameters` -> params (the values as evaluated); `Conditions[i].Expression` ->
//!   `restrictions[i]`, the Python text unchanged.
//! - `KernelSpecification`: `KernelFile` -> kernel source (read only when a run needs it),
//!   `KernelName` -> entry, `Language` `CUDA` -> a CUDA kernel, `CompilerOptions` -> NVRTC
//!   options, `ProblemSize` + `GridDivX/Y/Z` -> Kernel Tuner's grid (as `problem_size` and
//!   `grid_div_x/y/z` of a Kernel Tuner-style manifest); without `GridDiv*`, `GlobalSize` is the
//!   grid (`GlobalSizeType` `CUDA`: blocks; `OpenCL`: threads, divided by the block);
//!   `LocalSize` -> the block; `SharedMemory` -> dynamic shared memory.
//! - `Arguments` -> tensors (`Vector`: `Type`, `Size` evaluated as Kernel Tuner does, with
//!   `ProblemSize` and each parameter bound to its list of values, `FillType`, `Output`) and
//!   scalars (`Scalar`: `int32`/`int64` with an integral `FillValue`, `float`/`double` with any),
//!   in the kernel's order.
//! - `BenchmarkConfig.iterations` -> `iterations` (exactly that many timed reps).
//!
//! What tunebox cannot run (another language, a missing source, constant-memory arguments,
//! …) does not stop `--list`: it is recorded in
//! [`Extras::unsupported`](super::raw::Extras::unsupported) and
//! refused by a run with those reasons. Fields that are read but not used are
//! [`Extras::notes`](super::raw::Extras::notes).

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};
use indexmap::IndexMap;
use tunebox_protocol::{DType, Init, SharedBuffer, TensorSpec};

use super::raw::{Extras, RawKernel, RawManifest, RawScalar, RawTensor};
use crate::manifest::formats::{T1Arg, T1Dims, T1File, T1FillType, T1MemoryType, T1Size};
use crate::manifest::launch::RawLaunch;
use crate::space::ParamValue;
use tunebox_expr::Object;

/// Reads the T1 file at `path` as the fields of a manifest.
pub(super) fn to_raw(path: &Path) -> Result<RawManifest> {
    let t1 = T1File::read(path)?;
    let mut x = Extras::default();
    let spec = &t1.kernel_specification;
    let language = language(&spec.language, &mut x);
    let kernel = kernel(&t1, language, &mut x);
    let (launch, problem_size, grid_div) = if language == "c" {
        (None, None, Default::default())
    } else {
        let (launch, problem_size, grid_div) = launch(&t1, &mut x);
        (Some(launch), problem_size, grid_div)
    };
    let (tensors, scalars, order) = arguments(&t1, &mut x);
    let iterations = iterations(&t1, &mut x);
    note_unused(&t1, &mut x);
    let [grid_div_x, grid_div_y, grid_div_z] = grid_div;
    Ok(RawManifest {
        name: t1
            .general
            .benchmark_name
            .clone()
            .or_else(|| spec.benchmark_name.clone()),
        seed: None,
        timeout_s: None,
        compile_timeout_s: None,
        // `Conditions[i].Expression` as restrictions, the Python text unchanged.
        restrictions: t1.conditions(),
        kernel: Some(kernel),
        tensors,
        scalars,
        params: Some(params(&t1)),
        timing: None,
        verify: None,
        problem_size,
        launch,
        sandbox: None,
        metrics: IndexMap::new(),
        objective: None,
        objective_higher_is_better: None,
        env: None,
        tune_params: None,
        kernel_name: None,
        kernel_source: None,
        lang: None,
        compiler_options: None,
        args: Some(order),
        arguments: None,
        answer: None,
        atol: None,
        iterations,
        grid_div_x,
        grid_div_y,
        grid_div_z,
        launch_from_aliases: Vec::new(),
        kernel_tuner_macros: true,
        t1: Some(Box::new(x)),
    })
}

/// `KernelSpecification.Field`, as messages name a field of the kernel specification.
fn spec_field(name: &str) -> String {
    format!("KernelSpecification.{name}")
}

/// `TuningParameters` as params: each name with its values as evaluated.
fn params(t1: &T1File) -> IndexMap<String, Vec<toml::Value>> {
    t1.configuration_space
        .tuning_parameters
        .iter()
        .map(|p| (p.name.clone(), p.values.iter().map(to_toml).collect()))
        .collect()
}

/// The kernel's language, `"c"` or `"cuda"`, from `Language`; another one is unsupported
/// (and read as CUDA, whose launch sizes it shares).
fn language(language: &str, x: &mut Extras) -> &'static str {
    if language.eq_ignore_ascii_case("cuda") {
        "cuda"
    } else if language.eq_ignore_ascii_case("c") {
        // Kernel Tuner's `lang = "C"`: a C function run on the CPU, no launch sizes.
        "c"
    } else {
        x.unsupported.push(format!(
            "{} = {:?}: tunebox runs C and CUDA kernels",
            spec_field("Language"),
            language
        ));
        // Its launch sizes still mean what they mean for CUDA.
        "cuda"
    }
}

/// The kernel: `KernelFile` (unsupported when it does not exist), `KernelName`, `language`,
/// `CompilerOptions`.
fn kernel(t1: &T1File, language: &str, x: &mut Extras) -> RawKernel {
    let spec = &t1.kernel_specification;
    if !spec.kernel_file.is_file() {
        x.source_missing = true;
        x.unsupported.push(format!(
            "{} = {:?}: {} does not exist (paths are relative to the T1 file)",
            spec_field("KernelFile"),
            spec.kernel_file_text,
            spec.kernel_file.display()
        ));
    }
    let options = (!spec.compiler_options.is_empty()).then(|| spec.compiler_options.clone());
    RawKernel {
        // As written: the manifest resolves it against the T1 file's folder, as T1 does.
        source: Some(PathBuf::from(&spec.kernel_file_text)),
        entry: Some(spec.kernel_name.clone()),
        language: Some(language.into()),
        compiler_options: options,
        ..RawKernel::default()
    }
}

/// `BenchmarkConfig.iterations` (1 to the most reps a manifest allows); the other keys of
/// `BenchmarkConfig` are noted as not used.
fn iterations(t1: &T1File, x: &mut Extras) -> Option<u32> {
    let mut iterations = None;
    let mut ignored: Vec<&str> = Vec::new();
    for (key, value) in &t1.benchmark_config {
        match (key.as_str(), value.as_u64()) {
            ("iterations", Some(n)) if (1..=u64::from(super::MAX_REPS)).contains(&n) => {
                iterations = Some(n as u32);
            }
            _ => ignored.push(key),
        }
    }
    if !ignored.is_empty() {
        x.notes.push(format!(
            "BenchmarkConfig.{} not used",
            ignored.join(", BenchmarkConfig.")
        ));
    }
    iterations
}

/// Notes the fields read but not used: the kernel specification's others, the file's other
/// sections, an output format other than JSON and a time unit other than milliseconds.
fn note_unused(t1: &T1File, x: &mut Extras) {
    for (key, value) in &t1.kernel_specification.extra {
        if !value.is_null() {
            x.notes.push(format!("{} is not used", spec_field(key)));
        }
    }
    for key in t1.extra.keys() {
        x.notes.push(format!(
            "{key} is not used (the strategy and budget are --strategy and --budget)"
        ));
    }
    if let Some(format) = &t1.general.output_format
        && !format.eq_ignore_ascii_case("json")
    {
        x.notes.push(format!(
            "General.OutputFormat = {format:?}: tunebox writes JSON (--json, --t4)"
        ));
    }
    if let Some(unit) = &t1.general.time_unit
        && !unit.eq_ignore_ascii_case("milliseconds")
    {
        x.notes.push(format!(
            "General.TimeUnit = {unit:?}: tunebox reports milliseconds"
        ));
    }
}

/// The launch: block from `LocalSize`, grid from `ProblemSize` / `GridDiv*` (Kernel Tuner's, and
/// what the hub's data was measured with) or else from `GlobalSize`.
fn launch(
    t1: &T1File,
    x: &mut Extras,
) -> (
    RawLaunch,
    Option<Vec<toml::Value>>,
    [Option<toml::Value>; 3],
) {
    let spec = &t1.kernel_specification;
    let problem = &spec.problem_size;
    let local = dims(&spec.local_size, problem);
    let block = block(t1, &local, x);
    let divs: [Option<toml::Value>; 3] = std::array::from_fn(|d| {
        let list = &spec.grid_div[d];
        (!list.is_empty())
            .then(|| toml::Value::Array(list.iter().cloned().map(toml::Value::String).collect()))
    });
    let kt_grid = !problem.is_empty() && divs.iter().any(Option::is_some);
    let (grid, problem_size) = if kt_grid {
        x.notes.push(
            "KernelSpecification.GlobalSize is not used: the grid is ProblemSize / GridDiv, as \
             Kernel Tuner computes it"
                .into(),
        );
        let sizes = problem
            .iter()
            .take(3)
            .map(|&s| toml::Value::Integer(s))
            .collect();
        (None, Some(sizes))
    } else {
        (Some(global_grid(t1, &local)), None)
    };
    let shared = spec.shared_memory.map(toml::Value::Integer);
    (
        RawLaunch::new(block, grid, shared),
        problem_size,
        if kt_grid { divs } else { Default::default() },
    )
}

/// The block from `LocalSize` (`local`, as launch expressions); `None` (Kernel Tuner's
/// default, noted) when it names something that is no tuning parameter.
fn block(t1: &T1File, local: &[String; 3], x: &mut Extras) -> Option<Vec<toml::Value>> {
    let params: Vec<&str> = t1
        .configuration_space
        .tuning_parameters
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    let unknown: Vec<String> = local
        .iter()
        .flat_map(|e| names(e))
        .filter(|n| !params.contains(&n.as_str()) && *n != "ceil_div")
        .collect();
    if unknown.is_empty() {
        return Some(local.iter().cloned().map(toml::Value::String).collect());
    }
    x.notes.push(format!(
        "KernelSpecification.LocalSize names `{}`, which is no tuning parameter: the block \
         is Kernel Tuner's default (block_size_x/y/z params, else 256 × 1 × 1)",
        unknown.join("`, `")
    ));
    None
}

/// The grid from `GlobalSize`: blocks as written (`GlobalSizeType` `CUDA`), or threads
/// divided by the block `local` (`OpenCL`).
fn global_grid(t1: &T1File, local: &[String; 3]) -> Vec<toml::Value> {
    let spec = &t1.kernel_specification;
    let global = dims(&spec.global_size, &spec.problem_size);
    let threads = spec
        .global_size_type
        .as_deref()
        .is_some_and(|t| t.eq_ignore_ascii_case("opencl"));
    global
        .iter()
        .zip(local)
        .map(|(g, l)| {
            toml::Value::String(if threads {
                format!("ceil_div({g}, {l})")
            } else {
                g.clone()
            })
        })
        .collect()
}

/// A T1 size (Python, over params and `ProblemSize[i]`) as three launch expressions.
fn dims(d: &T1Dims, problem: &[i64]) -> [String; 3] {
    let one = |e: &Option<String>| e.clone().unwrap_or_else(|| "1".into());
    [d.x.clone(), one(&d.y), one(&d.z)].map(|mut e| {
        for (i, size) in problem.iter().enumerate() {
            for spelling in [format!("ProblemSize[{i}]"), format!("ProblemSize [{i}]")] {
                e = e.replace(&spelling, &size.to_string());
            }
        }
        e
    })
}

/// The identifiers in an expression.
fn names(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    for c in text.chars().chain([' ']) {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            if word.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
                out.push(word.clone());
            }
            word.clear();
        }
    }
    out
}

/// The arguments as tensors and scalars, and their names in the kernel's order; what cannot be
/// passed goes to `x.unsupported`.
fn arguments(t1: &T1File, x: &mut Extras) -> (Vec<RawTensor>, Vec<RawScalar>, Vec<String>) {
    let spec = &t1.kernel_specification;
    let mut tensors = Vec::new();
    let mut scalars: Vec<RawScalar> = Vec::new();
    let mut order = Vec::new();
    for (i, arg) in spec.arguments.iter().enumerate() {
        let name = if arg.name.is_empty() {
            format!("arg{i}")
        } else {
            arg.name.clone()
        };
        let field = format!("KernelSpecification.Arguments[{i}] (`{name}`)");
        match argument(t1, arg, &name, &field, tensors.len(), x) {
            Ok(Arg::Tensor(t)) => {
                order.push(t.name.clone());
                tensors.push(t);
            }
            Ok(Arg::Scalar(s)) => {
                order.push(s.name.clone());
                scalars.push(s);
            }
            Err(reason) => x.unsupported.push(format!("{field}: {reason}")),
        }
    }
    (tensors, scalars, order)
}

enum Arg {
    Tensor(RawTensor),
    Scalar(RawScalar),
}

/// One argument as a tensor or a scalar; why it cannot be passed otherwise.
fn argument(
    t1: &T1File,
    arg: &T1Arg,
    name: &str,
    field: &str,
    index: usize,
    x: &mut Extras,
) -> Result<Arg> {
    if arg
        .mem_type
        .as_deref()
        .is_some_and(|m| m.eq_ignore_ascii_case("constant"))
    {
        bail!(
            "MemType = \"Constant\" (Kernel Tuner's cmem_args, a `__constant__` symbol): tunebox \
             passes buffers as kernel arguments only"
        );
    }
    match arg.memory_type {
        T1MemoryType::Scalar => return scalar(arg, name).map(Arg::Scalar),
        T1MemoryType::Vector => {}
        other => bail!("MemoryType {other:?}: tunebox passes buffers and scalars only"),
    }
    let dtype = dtype(&arg.data_type).ok_or_else(|| {
        anyhow::anyhow!(
            "Type = {:?}: tunebox's buffers are float, double, int32, int64 or uint8",
            arg.data_type
        )
    })?;
    let size = buffer_size(t1, arg)?;
    let init = fill(arg, index, x)?;
    if let Some(seed) = arg.random_seed {
        x.notes.push(format!(
            "{field}.RandomSeed = {seed} is not used: tunebox seeds each buffer"
        ));
    }
    Ok(Arg::Tensor(RawTensor {
        name: name.to_owned(),
        dtype: dtype.name().to_owned(),
        shape: vec![size],
        init,
        output: arg.output,
        reset: false,
        c_type: None,
    }))
}

/// A `Scalar` argument: its `FillValue` (0 by default) as an `int32`/`int64` (integral) or a
/// `float`/`double`.
fn scalar(arg: &T1Arg, name: &str) -> Result<RawScalar> {
    let value = arg.fill_value.unwrap_or(0.0);
    let Some(kind) = scalar_kind(&arg.data_type) else {
        bail!(
            "a {} scalar: tunebox passes int32, int64, float and double scalars",
            arg.data_type
        );
    };
    let value = if kind.starts_with('i') {
        if value.fract() != 0.0 || value.abs() >= 2f64.powi(63) {
            bail!("a {} scalar with FillValue {value}", arg.data_type);
        }
        toml::Value::Integer(value as i64)
    } else {
        toml::Value::Float(value)
    };
    Ok(RawScalar {
        name: name.to_owned(),
        value,
        kind: Some(kind.to_owned()),
    })
}

/// A buffer's `Size` in elements (a count or an expression), at least one.
fn buffer_size(t1: &T1File, arg: &T1Arg) -> Result<i64> {
    let size = match &arg.size {
        Some(T1Size::Count(n)) => i64::try_from(*n)?,
        Some(T1Size::Expr(text)) => size(t1, text)?,
        None => bail!("a buffer without a Size"),
    };
    if size < 1 {
        bail!("Size is {size}; a buffer needs at least one element");
    }
    Ok(size)
}

/// A buffer's `init` from its `FillType`: zeros or ones for those constants (another constant
/// is zeros, filled later: `x.fills`), random values, or a raw file (`BinaryRaw`).
fn fill(arg: &T1Arg, index: usize, x: &mut Extras) -> Result<Option<toml::Value>> {
    Ok(match (arg.fill_type, arg.fill_value) {
        (Some(T1FillType::Constant), v) => match v.unwrap_or(0.0) {
            0.0 => Some("zeros".into()),
            1.0 => Some("ones".into()),
            v => {
                x.fills.push((index, v));
                Some("zeros".into())
            }
        },
        (None | Some(T1FillType::Random), _) => Some("random".into()),
        (Some(T1FillType::BinaryRaw), _) => {
            let Some(file) = &arg.data_source else {
                bail!("FillType BinaryRaw without a DataSource");
            };
            let mut table = toml::Table::new();
            table.insert("file".into(), toml::Value::String(file.clone()));
            Some(toml::Value::Table(table))
        }
        (Some(other), _) => bail!(
            "FillType {other:?}: tunebox fills buffers with a constant, random values or a raw \
             file (BinaryRaw)"
        ),
    })
}

/// `Size`, evaluated as Kernel Tuner's `int(eval(size, {**tune_params, "ProblemSize": …}))`:
/// each parameter is bound to the list of its values (`max(filter_width)`).
fn size(t1: &T1File, text: &str) -> Result<i64> {
    let mut names: Vec<(&str, Object)> = t1
        .configuration_space
        .tuning_parameters
        .iter()
        .map(|p| {
            (
                p.name.as_str(),
                Object::List(p.values.iter().map(to_object).collect()),
            )
        })
        .collect();
    names.push((
        "ProblemSize",
        Object::List(
            t1.kernel_specification
                .problem_size
                .iter()
                .map(|&s| Object::Int(s))
                .collect(),
        ),
    ));
    match tunebox_expr::eval(text, &names) {
        Ok(Object::Int(n)) => Ok(n),
        Ok(Object::Float(f)) if f.is_finite() => Ok(f.trunc() as i64),
        Ok(other) => bail!("Size = {text:?} is a {}, not a number", other.type_name()),
        Err(e) => bail!("Size = {text:?} cannot be evaluated: {e}"),
    }
}

/// The scalar type (`i32`, `i64`, `f32`, `f64`) a T1 data type is passed as; smaller integers
/// as `i32`, which C's argument conversions narrow.
fn scalar_kind(t: &str) -> Option<&'static str> {
    Some(match t.to_ascii_lowercase().as_str() {
        "int" | "int8" | "int16" | "int32" | "uint" | "uint8" | "uint16" | "uint32" | "short"
        | "char" => "i32",
        "int64" | "uint64" | "long" => "i64",
        "float" | "float32" => "f32",
        "double" | "float64" => "f64",
        _ => return None,
    })
}

fn dtype(t: &str) -> Option<DType> {
    Some(match t.to_ascii_lowercase().as_str() {
        "float" | "float32" => DType::F32,
        "double" | "float64" => DType::F64,
        "int" | "int32" => DType::I32,
        "int64" | "long" => DType::I64,
        "uint8" | "uchar" | "unsigned char" => DType::U8,
        _ => return None,
    })
}

fn to_toml(v: &ParamValue) -> toml::Value {
    match v {
        ParamValue::Int(i) => toml::Value::Integer(*i),
        ParamValue::Float(f) => toml::Value::Float(*f),
        ParamValue::Bool(b) => toml::Value::Boolean(*b),
        ParamValue::Str(s) => toml::Value::String(s.clone()),
    }
}

fn to_object(v: &ParamValue) -> Object {
    v.to_python().into()
}

/// Fills the tensors a T1 file gives a constant other than 0 and 1 (`FillType = Constant`),
/// once, into shared memory.
pub(super) fn fill_constants(
    mut tensors: Vec<TensorSpec>,
    fills: &[(usize, f64)],
) -> Result<Vec<TensorSpec>> {
    for &(index, value) in fills {
        let Some(t) = tensors.get_mut(index) else {
            continue;
        };
        let len = usize::try_from(t.byte_len().unwrap_or(u64::MAX))?;
        let element: Vec<u8> = match t.dtype {
            DType::F32 => (value as f32).to_ne_bytes().to_vec(),
            DType::F64 => value.to_ne_bytes().to_vec(),
            DType::I32 => (value as i32).to_ne_bytes().to_vec(),
            DType::I64 => (value as i64).to_ne_bytes().to_vec(),
            DType::U8 => vec![value as u8],
        };
        let mut buffer = SharedBuffer::new(len)
            .map_err(|e| anyhow::anyhow!("cannot hold `{}` in shared memory: {e}", t.name))?;
        let bytes = buffer.get_mut().expect("a new buffer has no other handle");
        for chunk in bytes.chunks_exact_mut(element.len()) {
            chunk.copy_from_slice(&element);
        }
        t.init = Init::Data(buffer.share());
    }
    Ok(tensors)
}

#[cfg(test)]
mod tests {
    use super::super::Manifest;
    use crate::space::{Choice, ParamValue};

    #[test]
    fn the_hub_convolution_as_a_manifest() {
        let path = crate::manifest::formats::hub_dir().join("kernels/convolution_milo.json");
        let m = Manifest::read(&path, "cc").unwrap();
        assert_eq!(m.name, "convolution_milo");
        assert_eq!(m.kernel.entry, "convolution_kernel");
        assert_eq!(m.kernel.flags, ["-std=c++11"]);
        assert_eq!(m.restrictions.len(), 4);
        // Sizes as Kernel Tuner evaluates them: max(filter_width) is the largest value.
        let sizes: Vec<(&str, &[u64])> = m
            .tensors
            .iter()
            .map(|t| (t.name.as_str(), t.shape.as_slice()))
            .collect();
        assert_eq!(
            sizes,
            [
                ("output_image", &[4096 * 4096][..]),
                ("input_image", &[(4096 + 14) * (4096 + 14)][..]),
            ]
        );
        assert!(m.tensors[0].output && !m.tensors[1].output);
        // The constant-memory filter is refused for a run, not for a listing.
        assert_eq!(m.unsupported.len(), 1, "{:?}", m.unsupported);
        assert!(m.unsupported[0].contains("d_filter"));
        // Kernel Tuner's grid: ceil(4096 / (block_size_x * tile_size_x)), …
        let choice = Choice::new(
            m.params
                .iter()
                .map(|(name, values)| {
                    let value = match name.as_str() {
                        "block_size_x" => ParamValue::Int(48),
                        "block_size_y" => ParamValue::Int(4),
                        "tile_size_x" => ParamValue::Int(2),
                        "tile_size_y" => ParamValue::Int(3),
                        _ => values[0].clone(),
                    };
                    (name.clone(), value)
                })
                .collect(),
        );
        let launch = m.launch.as_ref().unwrap().config(&choice).unwrap();
        assert_eq!(launch.block, [48, 4, 1]);
        assert_eq!(
            launch.grid,
            [
                4096usize.div_ceil(96) as u32,
                4096usize.div_ceil(12) as u32,
                1
            ]
        );
    }
}
