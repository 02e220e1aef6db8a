//! The FAIR T1 tuning-problem input format.
//!
//! A T1 file describes one tuning problem: the parameters and their values, the restrictions
//! ("conditions"), and the kernel (source file, name, launch sizes, arguments). It is the input
//! format of "FAIR Sharing of Data in Autotuning Research" (2024), schema
//! `kernel_tuner/schema/T1/1.0.0/input-schema.json` in KernelTuner/kernel_tuner; the FAIR
//! Benchmark Hub publishes its kernels in it. Keys are PascalCase (`ConfigurationSpace`,
//! `TuningParameters`, `KernelSpecification`, …).

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde_json::Value;

use super::FormatError;
use super::json::{J, Node, Res, read_json};
use super::value::param_from_json;
use crate::space::ParamValue;
use tunebox_expr::Object;

/// One T1 file, read by [`T1File::read`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct T1File {
    /// The file it was read from.
    pub path: PathBuf,
    /// `General`: benchmark name, output format, ….
    pub general: T1General,
    /// `ConfigurationSpace`: parameters and conditions (restrictions).
    pub configuration_space: T1ConfigurationSpace,
    /// `KernelSpecification`: source, kernel name, launch sizes, arguments.
    pub kernel_specification: T1KernelSpec,
    /// `BenchmarkConfig` (not in the schema; the hub's GEMM and hotspot files carry one):
    /// free-form settings such as `"iterations": 10`, as written.
    pub benchmark_config: IndexMap<String, Value>,
    /// Top-level sections this reader does not model (`Search`, `Budget`, …), as written.
    pub extra: IndexMap<String, Value>,
}

/// T1 `General`.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct T1General {
    /// `BenchmarkName`, e.g. `"convolution_milo"`.
    pub benchmark_name: Option<String>,
    /// `OutputFormat`: `"JSON"` or `"XML"`.
    pub output_format: Option<String>,
    /// `OutputFile`.
    pub output_file: Option<String>,
    /// `FormatVersion`.
    pub format_version: Option<i64>,
    /// `TimeUnit`: `"Nanoseconds"`, `"Microseconds"`, `"Milliseconds"` or `"Seconds"`.
    pub time_unit: Option<String>,
    /// Members not listed above, as written (`LoggingLevel`, …).
    pub extra: IndexMap<String, Value>,
}

/// T1 `ConfigurationSpace`.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct T1ConfigurationSpace {
    /// `TuningParameters`, in the file's order.
    pub(crate) tuning_parameters: Vec<T1Param>,
    /// `Conditions`: the restrictions, each a Python boolean expression.
    pub conditions: Vec<T1Condition>,
}

/// One tuning parameter (T1 `TuningParameters[i]`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub(crate) struct T1Param {
    /// `Name`.
    pub name: String,
    /// `Type`: `int`, `uint`, `float`, `bool` or `string`.
    pub param_type: T1ParamType,
    /// `Values`, evaluated. The schema makes `Values` a string holding a Python expression,
    /// and the hub's files use list literals (`"[16, 32, 48]"`), concatenation and `range`
    /// (`"[1, 2, 4, 8, 16] + list(range(32, 1024+1, 32))"`) and comprehensions
    /// (`"[2**i for i in range(0, 6)]"`); a JSON array is accepted too. The values keep the type
    /// the expression gives them (Kernel Tuner's cache keys depend on it); they must fit
    /// `Type` (an `int` parameter holds ints, a `float` one ints or floats, a `bool` one
    /// booleans, a `string` one strings).
    pub values: Vec<ParamValue>,
    /// `Values` as written (the expression text, or the JSON array's text).
    pub values_text: String,
    /// `Default`. A one-element list (the GEMM file's `"Default": [0]`) is read as its element.
    pub default: Option<ParamValue>,
}

/// T1 parameter `Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub(crate) enum T1ParamType {
    /// `int`.
    Int,
    /// `uint`.
    UInt,
    /// `float`.
    Float,
    /// `bool`.
    Bool,
    /// `string`.
    String,
}

/// One restriction (T1 `Conditions[i]`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct T1Condition {
    /// `Parameters`: the names `expression` reads.
    pub parameters: Vec<String>,
    /// `Expression`: a Python boolean expression, e.g. `"block_size_x*block_size_y<=1024"`.
    pub expression: String,
}

/// T1 `KernelSpecification`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct T1KernelSpec {
    /// `Language`: `"CUDA"`, `"OpenCL"` or `"Vulkan"`.
    pub language: String,
    /// `CompilerOptions`, e.g. `["-std=c++11"]`.
    pub compiler_options: Vec<String>,
    /// `BenchmarkName` (not in the schema; the hub's files name the benchmark suite entry).
    pub benchmark_name: Option<String>,
    /// `KernelName`: the function to launch.
    pub kernel_name: String,
    /// `KernelFile`, resolved against the T1 file's folder (absolute paths stay as they are).
    /// Not checked for existence: the hub's dedispersion and GEMM files name sources it does
    /// not ship.
    pub kernel_file: PathBuf,
    /// `KernelFile` as written.
    pub kernel_file_text: String,
    /// `GlobalSizeType`: how `GlobalSize` counts, `"CUDA"` (blocks) or `"OpenCL"` (threads).
    pub global_size_type: Option<String>,
    /// `GlobalSize`: Python expressions over the parameters (and `ProblemSize`).
    pub(crate) global_size: T1Dims,
    /// `LocalSize`: Python expressions over the parameters (the block size).
    pub(crate) local_size: T1Dims,
    /// `GridDivX` / `GridDivY` / `GridDivZ` (not in the schema; Kernel Tuner's
    /// `grid_div_x`…): parameter names whose product divides the problem size.
    pub grid_div: [Vec<String>; 3],
    /// `ProblemSize` (not in the schema): the problem's extent per dimension.
    pub problem_size: Vec<i64>,
    /// `SharedMemory`: bytes of dynamic shared memory.
    pub shared_memory: Option<i64>,
    /// `Arguments`, in the kernel's parameter order.
    pub(crate) arguments: Vec<T1Arg>,
    /// Members not listed above, as written (`Stream`, `Misc`, `Device`, `Profiling`,
    /// `ReferenceArguments`, …).
    pub extra: IndexMap<String, Value>,
}

/// A launch size, one expression per axis (`X` required, `Y` and `Z` optional).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) struct T1Dims {
    /// `X`.
    pub x: String,
    /// `Y`.
    pub y: Option<String>,
    /// `Z`.
    pub z: Option<String>,
}

/// One kernel argument (T1 `Arguments[i]`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub(crate) struct T1Arg {
    /// `Name` (empty when absent).
    pub name: String,
    /// `Type`: the element type, e.g. `"float"`, `"int32"`, `"double4"`, `"custom"`.
    pub data_type: String,
    /// `MemoryType`: scalar or buffer.
    pub memory_type: T1MemoryType,
    /// `AccessType`.
    pub access_type: Option<T1AccessType>,
    /// `FillType`: how the buffer is initialised.
    pub fill_type: Option<T1FillType>,
    /// `FillValue`: the constant to fill with (or the scalar's value, or a random range).
    pub fill_value: Option<f64>,
    /// `Size`: elements of a buffer.
    pub size: Option<T1Size>,
    /// `TypeSize`: bytes per element of a `custom` type.
    pub type_size: Option<i64>,
    /// `Output` (not in the schema; `1` in the hub's files): the output to verify.
    pub output: bool,
    /// `MemType` (not in the schema; `"Constant"` in the hub's files): the buffer lives in
    /// constant memory.
    pub mem_type: Option<String>,
    /// `DataSource` (file for `BinaryRaw` / `BinaryHDF`, script for `Script`).
    pub data_source: Option<String>,
    /// `RandomSeed`.
    pub random_seed: Option<i64>,
    /// Members not listed above, as written.
    pub extra: IndexMap<String, Value>,
}

/// T1 argument `MemoryType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub(crate) enum T1MemoryType {
    /// `Scalar`: passed by value.
    Scalar,
    /// `Vector`: a buffer.
    Vector,
    /// `Local`: local (shared) memory.
    Local,
    /// `Symbol`: a named device symbol.
    Symbol,
}

/// T1 argument `AccessType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub(crate) enum T1AccessType {
    /// `ReadOnly`.
    ReadOnly,
    /// `WriteOnly`.
    WriteOnly,
    /// `ReadWrite`.
    ReadWrite,
}

/// T1 argument `FillType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub(crate) enum T1FillType {
    /// `Constant`: every element `FillValue`.
    Constant,
    /// `Random`: random values (up to `FillValue`).
    Random,
    /// `Generator`: an expression per element.
    Generator,
    /// `Script`: a script produces the data.
    Script,
    /// `BinaryRaw`: raw bytes from `DataSource`.
    BinaryRaw,
    /// `BinaryHDF`: an HDF5 file.
    BinaryHDF,
}

/// T1 argument `Size`: a count, or an expression (`"ProblemSize[0]*ProblemSize[1]"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum T1Size {
    /// A number of elements (also a string holding only digits, like `"1"`).
    Count(u64),
    /// A Python expression over `ProblemSize` and the parameters, e.g.
    /// `"(ProblemSize[0]+max(filter_width)-1) * (ProblemSize[1]+max(filter_height)-1)"`.
    Expr(String),
}

impl T1File {
    /// Reads and checks the T1 file at `path`.
    ///
    /// # Errors
    ///
    /// [`crate::TuneError::Manifest`], naming the file: it cannot be read or is not JSON, or
    /// the JSON path of a missing or bad field (e.g. a `Values` expression outside the
    /// supported subset, a value that does not fit `Type`, an unknown `MemoryType`).
    pub fn read(path: impl AsRef<Path>) -> crate::Result<T1File> {
        T1File::read_file(path.as_ref()).map_err(|e| crate::TuneError::manifest(e.into()))
    }

    /// [`T1File::read`], its error the readers' own.
    pub(crate) fn read_file(path: impl AsRef<Path>) -> Result<T1File, FormatError> {
        let path = path.as_ref();
        let doc = read_json(path)?;
        let base = path.parent().unwrap_or(Path::new("."));
        parse(&doc, path, base).map_err(|p| p.in_file(path))
    }

    /// `Conditions[i].Expression`, in the file's order: the restrictions, each its Python
    /// boolean expression as written.
    pub fn conditions(&self) -> Vec<String> {
        self.configuration_space
            .conditions
            .iter()
            .map(|c| c.expression.clone())
            .collect()
    }

    /// The parameters as `name -> values`, in the file's order: the shape of a search space.
    pub(crate) fn tune_params(&self) -> IndexMap<String, Vec<ParamValue>> {
        self.configuration_space
            .tuning_parameters
            .iter()
            .map(|p| (p.name.clone(), p.values.clone()))
            .collect()
    }

    /// The number of configurations before restrictions (the product of the value counts).
    #[cfg(test)]
    pub(crate) fn cartesian_size(&self) -> u128 {
        self.configuration_space
            .tuning_parameters
            .iter()
            .map(|p| p.values.len() as u128)
            .product()
    }
}

fn rest(node: &Node<'_, '_>, known: &[&str]) -> Res<IndexMap<String, Value>> {
    Ok(node
        .members()?
        .filter(|(k, _)| !known.contains(k))
        .map(|(k, n)| (k.to_owned(), n.v.to_value()))
        .collect())
}

fn opt_string(node: &Node<'_, '_>, key: &'static str) -> Res<Option<String>> {
    node.get(key)?
        .map(|n| n.str().map(str::to_owned))
        .transpose()
}

fn parse(doc: &J, path: &Path, base: &Path) -> Res<T1File> {
    let root = Node::root(doc);
    const TOP: [&str; 4] = [
        "General",
        "ConfigurationSpace",
        "KernelSpecification",
        "BenchmarkConfig",
    ];
    let general = match root.get("General")? {
        Some(g) => general(&g)?,
        None => T1General::default(),
    };
    let configuration_space = configuration_space(&root.req("ConfigurationSpace")?)?;
    let kernel_specification = kernel_spec(&root.req("KernelSpecification")?, base)?;
    let benchmark_config = match root.get("BenchmarkConfig")? {
        Some(b) => rest(&b, &[])?,
        None => IndexMap::new(),
    };
    Ok(T1File {
        path: path.to_path_buf(),
        general,
        configuration_space,
        kernel_specification,
        benchmark_config,
        extra: rest(&root, &TOP)?,
    })
}

fn general(g: &Node<'_, '_>) -> Res<T1General> {
    Ok(T1General {
        benchmark_name: opt_string(g, "BenchmarkName")?,
        output_format: opt_string(g, "OutputFormat")?,
        output_file: opt_string(g, "OutputFile")?,
        format_version: g.get("FormatVersion")?.map(|n| n.i64()).transpose()?,
        time_unit: opt_string(g, "TimeUnit")?,
        extra: rest(
            g,
            &[
                "BenchmarkName",
                "OutputFormat",
                "OutputFile",
                "FormatVersion",
                "TimeUnit",
            ],
        )?,
    })
}

fn configuration_space(cs: &Node<'_, '_>) -> Res<T1ConfigurationSpace> {
    let mut tuning_parameters: Vec<T1Param> = Vec::new();
    for p in cs.req("TuningParameters")?.items()? {
        let param = tuning_parameter(&p)?;
        if tuning_parameters.iter().any(|q| q.name == param.name) {
            return Err(p
                .req("Name")?
                .problem(format!("parameter `{}` is defined twice", param.name)));
        }
        tuning_parameters.push(param);
    }
    let mut conditions = Vec::new();
    if let Some(list) = cs.get("Conditions")? {
        for c in list.items()? {
            let parameters = match c.get("Parameters")? {
                Some(p) => p.string_list()?,
                None => Vec::new(),
            };
            conditions.push(T1Condition {
                parameters,
                expression: c.req("Expression")?.str()?.to_owned(),
            });
        }
    }
    Ok(T1ConfigurationSpace {
        tuning_parameters,
        conditions,
    })
}

/// One of `TuningParameters`: its name, type, values (a Python list expression, or a JSON
/// list) each of that type, and default.
fn tuning_parameter(p: &Node<'_, '_>) -> Res<T1Param> {
    let name = p.req("Name")?.str()?.to_owned();
    let type_node = p.req("Type")?;
    let param_type = param_type(&type_node)?;
    let values_node = p.req("Values")?;
    let (values, values_text) = match values_node.v {
        J::Str(text) => (python_values(&values_node, text)?, text.clone()),
        J::Arr(_) => (
            values_node
                .items()?
                .map(|n| param_from_json(&n))
                .collect::<Res<Vec<_>>>()?,
            serde_json::to_string(values_node.v).unwrap_or_default(),
        ),
        _ => return Err(values_node.problem("expected a string (a Python list expression)")),
    };
    if values.is_empty() {
        return Err(values_node.problem("a parameter needs at least one value"));
    }
    for (i, v) in values.iter().enumerate() {
        if !fits(param_type, v) {
            return Err(values_node.problem(format!(
                "value {i} ({}) does not fit the parameter's type `{}`",
                v.repr(),
                type_node.str()?
            )));
        }
    }
    let default = match p.get("Default")? {
        None => None,
        Some(d) => match d.v {
            J::Arr(a) if a.len() == 1 => Some(param_from_json(
                &d.items()?
                    .next()
                    .ok_or_else(|| d.problem("expected one value"))?,
            )?),
            _ => Some(param_from_json(&d)?),
        },
    };
    Ok(T1Param {
        name,
        param_type,
        values,
        values_text,
        default,
    })
}

/// A parameter's `Type`: int, uint, float, bool or string.
fn param_type(type_node: &Node<'_, '_>) -> Res<T1ParamType> {
    Ok(match type_node.str()? {
        "int" => T1ParamType::Int,
        "uint" => T1ParamType::UInt,
        "float" => T1ParamType::Float,
        "bool" => T1ParamType::Bool,
        "string" => T1ParamType::String,
        other => {
            return Err(type_node.problem(format!(
                "unknown parameter type `{other}` (int, uint, float, bool or string)"
            )));
        }
    })
}

/// `Values` given as the Python list expression `text`, evaluated: a list of numbers,
/// booleans and strings.
fn python_values(values_node: &Node<'_, '_>, text: &str) -> Res<Vec<ParamValue>> {
    let list = match tunebox_expr::eval(text, &[]) {
        Ok(Object::List(items)) => items,
        Ok(other) => {
            return Err(values_node.problem(format!(
                "`{text}` is a {}, expected a list of values",
                other.type_name()
            )));
        }
        Err(e) => {
            return Err(values_node.problem(e.to_string()));
        }
    };
    let mut values = Vec::with_capacity(list.len());
    for item in list {
        values.push(match item {
            Object::Int(i) => ParamValue::Int(i),
            Object::Float(f) => ParamValue::Float(f),
            Object::Bool(b) => ParamValue::Bool(b),
            Object::Str(s) => ParamValue::Str(s),
            Object::List(_) => {
                return Err(values_node.problem(format!(
                    "`{text}` holds a list; a value must be a number, boolean or string"
                )));
            }
        });
    }
    Ok(values)
}

/// Whether `v` is a value of `param_type` (an int is a float too; a uint is not negative).
fn fits(param_type: T1ParamType, v: &ParamValue) -> bool {
    match (param_type, v) {
        (T1ParamType::Int, ParamValue::Int(_)) => true,
        (T1ParamType::UInt, ParamValue::Int(i)) => *i >= 0,
        (T1ParamType::Float, ParamValue::Int(_) | ParamValue::Float(_)) => true,
        (T1ParamType::Bool, ParamValue::Bool(_)) => true,
        (T1ParamType::String, ParamValue::Str(_)) => true,
        _ => false,
    }
}

fn dims(node: &Node<'_, '_>) -> Res<T1Dims> {
    // The schema says strings; a bare number is accepted and kept as its text.
    let axis = |key: &'static str| -> Res<Option<String>> {
        node.get(key)?
            .map(|n| match n.v {
                J::Str(s) => Ok(s.clone()),
                J::Int(i) => Ok(i.to_string()),
                _ => Err(n.problem("expected an expression (string) or a number")),
            })
            .transpose()
    };
    let x = axis("X")?;
    Ok(T1Dims {
        x: match x {
            Some(x) => x,
            None => node.req("X")?.str()?.to_owned(),
        },
        y: axis("Y")?,
        z: axis("Z")?,
    })
}

const KERNEL_KEYS: [&str; 14] = [
    "Language",
    "CompilerOptions",
    "BenchmarkName",
    "KernelName",
    "KernelFile",
    "GlobalSizeType",
    "GlobalSize",
    "LocalSize",
    "GridDivX",
    "GridDivY",
    "GridDivZ",
    "ProblemSize",
    "SharedMemory",
    "Arguments",
];

fn kernel_spec(k: &Node<'_, '_>, base: &Path) -> Res<T1KernelSpec> {
    let kernel_file_text = k.req("KernelFile")?.str()?.to_owned();
    let kernel_file = base.join(&kernel_file_text);
    let grid_div = |key: &'static str| -> Res<Vec<String>> {
        Ok(match k.get(key)? {
            Some(n) => n.string_list()?,
            None => Vec::new(),
        })
    };
    let problem_size = match k.get("ProblemSize")? {
        None => Vec::new(),
        Some(n) if matches!(n.v, J::Arr(_)) => n.items()?.map(|i| i.i64()).collect::<Res<_>>()?,
        Some(n) => vec![n.i64()?],
    };
    let mut arguments = Vec::new();
    if let Some(list) = k.get("Arguments")? {
        for a in list.items()? {
            arguments.push(argument(&a)?);
        }
    }
    Ok(T1KernelSpec {
        language: k.req("Language")?.str()?.to_owned(),
        compiler_options: match k.get("CompilerOptions")? {
            Some(n) => n.string_list()?,
            None => Vec::new(),
        },
        benchmark_name: opt_string(k, "BenchmarkName")?,
        kernel_name: k.req("KernelName")?.str()?.to_owned(),
        kernel_file,
        kernel_file_text,
        global_size_type: opt_string(k, "GlobalSizeType")?,
        global_size: dims(&k.req("GlobalSize")?)?,
        local_size: dims(&k.req("LocalSize")?)?,
        grid_div: [
            grid_div("GridDivX")?,
            grid_div("GridDivY")?,
            grid_div("GridDivZ")?,
        ],
        problem_size,
        shared_memory: k.get("SharedMemory")?.map(|n| n.i64()).transpose()?,
        arguments,
        extra: rest(k, &KERNEL_KEYS)?,
    })
}

fn one_of<T: Copy>(node: &Node<'_, '_>, choices: &[(&str, T)]) -> Res<T> {
    let text = node.str()?;
    choices
        .iter()
        .find(|(name, _)| *name == text)
        .map(|(_, v)| *v)
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
            node.problem(format!("`{text}` is not one of {}", names.join(", ")))
        })
}

/// The keys of an argument that tunebox reads.
const ARGUMENT_KEYS: [&str; 12] = [
    "Name",
    "Type",
    "MemoryType",
    "AccessType",
    "FillType",
    "FillValue",
    "Size",
    "TypeSize",
    "Output",
    "MemType",
    "DataSource",
    "RandomSeed",
];

/// One of a kernel's `Arguments`.
fn argument(a: &Node<'_, '_>) -> Res<T1Arg> {
    let memory_type = memory_type(&a.req("MemoryType")?)?;
    let access_type = a.get("AccessType")?.map(|n| access_type(&n)).transpose()?;
    let fill_type = a.get("FillType")?.map(|n| fill_type(&n)).transpose()?;
    let size = a.get("Size")?.map(|n| size(&n)).transpose()?;
    Ok(T1Arg {
        name: opt_string(a, "Name")?.unwrap_or_default(),
        data_type: a.req("Type")?.str()?.to_owned(),
        memory_type,
        access_type,
        fill_type,
        fill_value: a.get("FillValue")?.map(|n| n.f64()).transpose()?,
        size,
        type_size: a.get("TypeSize")?.map(|n| n.i64()).transpose()?,
        output: a
            .get("Output")?
            .map(|n| n.flag())
            .transpose()?
            .unwrap_or(false),
        mem_type: opt_string(a, "MemType")?,
        data_source: opt_string(a, "DataSource")?,
        random_seed: a.get("RandomSeed")?.map(|n| n.i64()).transpose()?,
        extra: rest(a, &ARGUMENT_KEYS)?,
    })
}

/// An argument's `MemoryType`.
fn memory_type(n: &Node<'_, '_>) -> Res<T1MemoryType> {
    use T1MemoryType as M;
    one_of(
        n,
        &[
            ("Scalar", M::Scalar),
            ("Vector", M::Vector),
            ("Local", M::Local),
            ("Symbol", M::Symbol),
        ],
    )
}

/// An argument's `AccessType`.
fn access_type(n: &Node<'_, '_>) -> Res<T1AccessType> {
    use T1AccessType as A;
    one_of(
        n,
        &[
            ("ReadOnly", A::ReadOnly),
            ("WriteOnly", A::WriteOnly),
            ("ReadWrite", A::ReadWrite),
        ],
    )
}

/// An argument's `FillType`.
fn fill_type(n: &Node<'_, '_>) -> Res<T1FillType> {
    use T1FillType as F;
    one_of(
        n,
        &[
            ("Constant", F::Constant),
            ("Random", F::Random),
            ("Generator", F::Generator),
            ("Script", F::Script),
            ("BinaryRaw", F::BinaryRaw),
            ("BinaryHDF", F::BinaryHDF),
        ],
    )
}

/// An argument's `Size`: a count (a number, or a string of one), else an expression.
fn size(n: &Node<'_, '_>) -> Res<T1Size> {
    Ok(match n.v {
        J::Str(s) => match s.trim().parse::<u64>() {
            Ok(count) => T1Size::Count(count),
            Err(_) => T1Size::Expr(s.clone()),
        },
        _ => T1Size::Count(
            u64::try_from(n.i64()?).map_err(|_| n.problem("a size must not be negative"))?,
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::formats::hub_dir;

    fn kernel(name: &str) -> T1File {
        let path = hub_dir().join("kernels").join(format!("{name}.json"));
        T1File::read(&path).unwrap_or_else(|e| panic!("{e}: {:?}", std::error::Error::source(&e)))
    }

    #[test]
    fn convolution() {
        let t1 = kernel("convolution_milo");
        assert_eq!(
            t1.general.benchmark_name.as_deref(),
            Some("convolution_milo")
        );
        assert_eq!(t1.general.output_format.as_deref(), Some("JSON"));
        let cs = &t1.configuration_space;
        assert_eq!(cs.tuning_parameters.len(), 10);
        let bx = &cs.tuning_parameters[0];
        assert_eq!(bx.name, "block_size_x");
        assert_eq!(bx.param_type, T1ParamType::Int);
        assert_eq!(bx.values.len(), 16);
        assert_eq!(bx.values[15], ParamValue::Int(256));
        assert_eq!(bx.default, Some(ParamValue::Int(16)));
        assert_eq!(t1.cartesian_size(), 10_240); // the hub's README: 10,240 before restrictions
        assert_eq!(cs.conditions.len(), 4);
        assert_eq!(
            cs.conditions[1].expression,
            "block_size_x*block_size_y<=1024"
        );
        assert_eq!(
            cs.conditions[1].parameters,
            ["block_size_x", "block_size_y"]
        );

        let k = &t1.kernel_specification;
        assert_eq!(k.language, "CUDA");
        assert_eq!(k.compiler_options, ["-std=c++11"]);
        assert_eq!(k.kernel_name, "convolution_kernel");
        assert!(
            k.kernel_file.is_file(),
            "{} resolves",
            k.kernel_file.display()
        );
        assert_eq!(k.kernel_file_text, "convolution_milo.cu");
        assert_eq!(k.global_size.x, "(262144 // block_size_x) // tile_size_x");
        assert_eq!(k.local_size.z.as_deref(), Some("1"));
        assert_eq!(k.grid_div[0], ["block_size_x", "tile_size_x"]);
        assert!(k.grid_div[2].is_empty());
        assert_eq!(k.problem_size, [4096, 4096]);
        assert_eq!(k.shared_memory, Some(0));
        assert!(k.extra.contains_key("Stream"));
        assert_eq!(k.arguments.len(), 3);
        let out = &k.arguments[0];
        assert_eq!(out.name, "output_image");
        assert_eq!(out.data_type, "float");
        assert_eq!(out.memory_type, T1MemoryType::Vector);
        assert_eq!(out.access_type, Some(T1AccessType::WriteOnly));
        assert_eq!(out.fill_type, Some(T1FillType::Constant));
        assert_eq!(out.fill_value, Some(0.0));
        assert_eq!(
            out.size,
            Some(T1Size::Expr("ProblemSize[0]*ProblemSize[1]".into()))
        );
        assert!(out.output);
        assert_eq!(k.arguments[2].mem_type.as_deref(), Some("Constant"));
        assert!(!k.arguments[2].output);
    }

    #[test]
    fn dedispersion_gemm_hotspot() {
        let d = kernel("dedispersion_milo");
        assert_eq!(d.cartesian_size(), 22_272); // README: 11,130 of 22,272
        assert_eq!(d.configuration_space.tuning_parameters[1].values.len(), 29);
        assert_eq!(
            d.kernel_specification.arguments[0].size,
            Some(T1Size::Count(1))
        );
        assert_eq!(d.kernel_specification.problem_size, [25000, 2048, 1]);
        assert!(
            d.kernel_specification
                .kernel_file
                .ends_with("dedisp_milo/dedispersion.cu.hip")
        );

        let g = kernel("gemm_milo");
        assert_eq!(g.kernel_specification.language, "OpenCL");
        assert_eq!(
            g.configuration_space.tuning_parameters[0].default,
            Some(ParamValue::Int(0))
        );
        assert_eq!(g.configuration_space.conditions.len(), 8);
        assert_eq!(g.benchmark_config["iterations"], 10);
        assert_eq!(
            g.kernel_specification.arguments[0].size,
            Some(T1Size::Count(25160256))
        );
        assert_eq!(
            g.kernel_specification.arguments[3].memory_type,
            T1MemoryType::Scalar
        );
        assert_eq!(g.kernel_specification.arguments[3].size, None);
        assert!(g.kernel_specification.extra.contains_key("Misc"));

        let h = kernel("hotspot_milo");
        let p = h.tune_params();
        let ints = |name: &str| -> Vec<i64> {
            p[name]
                .iter()
                .map(|v| match v {
                    ParamValue::Int(i) => *i,
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        let mut bx = vec![1, 2, 4, 8, 16];
        bx.extend((32..=1024).step_by(32));
        assert_eq!(ints("block_size_x"), bx);
        assert_eq!(ints("block_size_y"), [1, 2, 4, 8, 16, 32]);
        assert_eq!(ints("tile_size_x"), (1..=10).collect::<Vec<_>>());
        assert_eq!(ints("loop_unroll_factor_t"), (1..=10).collect::<Vec<_>>());
        assert_eq!(
            h.configuration_space.tuning_parameters[2].values_text,
            "[1, 2, 4, 8, 16] + list(range(32, 1024+1, 32))"
        );
    }

    fn read_text(text: &str) -> Result<T1File, FormatError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t1.json");
        std::fs::write(&path, text).unwrap();
        T1File::read_file(&path)
    }

    const MINIMAL: &str = r#"{
        "ConfigurationSpace": {"TuningParameters": [
            {"Name": "bs", "Type": "int", "Values": "[32, 64]"},
            {"Name": "v", "Type": "float", "Values": [1, 2.5]},
            {"Name": "s", "Type": "string", "Values": "['a', 'b']"}
        ]},
        "KernelSpecification": {"Language": "CUDA", "KernelName": "k", "KernelFile": "/abs/k.cu",
            "GlobalSize": {"X": "1024"}, "LocalSize": {"X": "bs"}},
        "Budget": [{"Type": "ConfigurationCount", "BudgetValue": 10}]
    }"#;

    #[test]
    fn minimal_file_and_tolerated_extras() {
        let t1 = read_text(MINIMAL).unwrap();
        let p = t1.tune_params();
        assert_eq!(p["v"], [ParamValue::Int(1), ParamValue::Float(2.5)]);
        assert_eq!(p["s"][1], ParamValue::Str("b".into()));
        assert_eq!(t1.kernel_specification.kernel_file, Path::new("/abs/k.cu"));
        assert!(t1.extra.contains_key("Budget"));
        assert!(t1.configuration_space.conditions.is_empty());
    }

    #[test]
    fn errors_name_file_and_field() {
        let bad = MINIMAL.replace("\"[32, 64]\"", "\"[32, 64\"");
        let err = read_text(&bad).unwrap_err().to_string();
        assert!(err.contains("t1.json`: $.ConfigurationSpace.TuningParameters[0].Values: cannot parse `[32, 64`: at column 8, expected `,` or `]`, found the end of the expression"), "{err}");

        let bad = MINIMAL.replace("\"[32, 64]\"", "\"[32, 6.5]\"");
        let err = read_text(&bad).unwrap_err().to_string();
        assert!(err.ends_with("$.ConfigurationSpace.TuningParameters[0].Values: value 1 (6.5) does not fit the parameter's type `int`"), "{err}");

        let bad = MINIMAL.replace("\"KernelName\": \"k\",", "");
        let err = read_text(&bad).unwrap_err().to_string();
        assert!(
            err.ends_with("$.KernelSpecification.KernelName: missing (required)"),
            "{err}"
        );

        let bad = MINIMAL.replace("\"Type\": \"int\"", "\"Type\": \"integer\"");
        let err = read_text(&bad).unwrap_err().to_string();
        assert!(
            err.contains("TuningParameters[0].Type: unknown parameter type `integer`"),
            "{err}"
        );

        let err = read_text("{").unwrap_err();
        assert!(matches!(err, FormatError::Syntax { .. }), "{err}");
        let err = T1File::read_file("/nonexistent/t1.json").unwrap_err();
        assert!(matches!(err, FormatError::Read { .. }));
        assert_eq!(err.to_string(), "cannot read `/nonexistent/t1.json`");
        // The public reader's error is the crate's one type, its message the file, the cause
        // the source.
        let err = T1File::read("/nonexistent/t1.json").unwrap_err();
        assert!(matches!(err, crate::TuneError::Manifest { .. }), "{err:#}");
        assert_eq!(err.to_string(), "cannot read `/nonexistent/t1.json`");
        assert!(
            format!("{err:#}").starts_with("cannot read `/nonexistent/t1.json`: "),
            "{err:#}"
        );
        let io = std::error::Error::source(&err)
            .and_then(|cause| cause.downcast_ref::<std::io::Error>())
            .expect("the io::Error is the cause");
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
    }
}
