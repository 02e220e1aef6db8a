//! C kernels with numpy arrays, for tunebox's `cpu` backend in the Python worker.
//!
//! `tunebox.benchmark.CKernelChoice` hands its arguments over as tuples: an array is
//! `("array", name, dtype, shape, data, output)` (dtype `f32`, `f64`, `i32`, `i64` or `u8`; data
//! its bytes, which travel as shared memory), a scalar `(kind, name, value)` with kind `i64`,
//! `i32`, `f32` or `f64`. Every array is passed as an untyped pointer, as Kernel Tuner passes
//! them; every scalar by value as its C type, in the order given.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};
use tunebox_protocol::{
    Arg, BenchmarkRequest, BenchmarkResult, CKernel, DType, Scalar, SharedBuffer, TensorSpec,
    TimingConfig,
};

/// What a C kernel choice is: its source, entry, compiler and arguments.
pub(crate) struct CChoice<'py> {
    pub(crate) source: String,
    pub(crate) entry: String,
    pub(crate) flags: Option<Vec<String>>,
    pub(crate) compiler: Option<String>,
    pub(crate) defines: Vec<(String, String)>,
    pub(crate) args: Vec<Bound<'py, PyTuple>>,
    pub(crate) warmup_ms: f64,
    pub(crate) rep_ms: f64,
}

/// The benchmark request for a choice.
pub(crate) fn request(choice: &CChoice<'_>) -> PyResult<BenchmarkRequest> {
    let mut kernel = CKernel::new(choice.source.clone(), choice.entry.clone());
    if let Some(flags) = &choice.flags {
        kernel = kernel.flags(flags.iter().cloned());
    }
    if let Some(compiler) = &choice.compiler {
        kernel = kernel.compiler(compiler.clone());
    }
    for (name, value) in &choice.defines {
        kernel = kernel.define(name.clone(), value);
    }
    let mut request = BenchmarkRequest::new(kernel).timing(
        TimingConfig::default()
            .warmup_ms(choice.warmup_ms)
            .rep_ms(choice.rep_ms),
    );
    let mut order = Vec::with_capacity(choice.args.len());
    for (position, arg) in choice.args.iter().enumerate() {
        let kind: String = arg.get_item(0)?.extract()?;
        let name: String = arg.get_item(1)?.extract()?;
        if kind == "array" {
            order.push(Arg::Untyped(request.tensors.len() as u32));
            request.tensors.push(tensor(arg, name)?);
        } else {
            order.push(Arg::Scalar(request.scalars.len() as u32));
            request
                .scalars
                .push(scalar(&kind, name, &arg.get_item(2)?, position)?);
        }
    }
    Ok(request.args(order))
}

fn tensor(arg: &Bound<'_, PyTuple>, name: String) -> PyResult<TensorSpec> {
    let dtype_name: String = arg.get_item(2)?.extract()?;
    let dtype = DType::from_name(&dtype_name).ok_or_else(|| {
        PyValueError::new_err(format!(
            "array `{name}` has dtype {dtype_name}: tunebox's C kernels take float32, float64, \
             int32, int64 or uint8 arrays"
        ))
    })?;
    let shape: Vec<u64> = arg.get_item(3)?.extract()?;
    let data = arg.get_item(4)?;
    let data = data.cast::<PyBytes>()?;
    let output: bool = arg.get_item(5)?.extract()?;
    let buffer = SharedBuffer::from_slice(data.as_bytes())
        .map_err(|e| PyValueError::new_err(format!("array `{name}`: {e}")))?;
    let spec = TensorSpec::new(name, dtype, shape).data(buffer.share());
    Ok(if output { spec.output() } else { spec })
}

fn scalar(kind: &str, name: String, value: &Bound<'_, PyAny>, position: usize) -> PyResult<Scalar> {
    Ok(match kind {
        "i64" => Scalar::new(name, value.extract::<i64>()?),
        "i32" => Scalar::i32(name, value.extract::<i32>()?),
        "f32" => Scalar::f32(name, value.extract::<f32>()?),
        "f64" => Scalar::f64(name, value.extract::<f64>()?),
        other => {
            return Err(PyValueError::new_err(format!(
                "argument {position} (`{name}`) is a {other}: use a numpy array or a numpy \
                 int32, int64, float32 or float64 scalar"
            )));
        }
    })
}

/// `{median_ms, mean_ms, min_ms, max_ms, p20_ms, p80_ms, stddev_ms, reps, warmup_reps,
/// outputs: [(name, dtype, shape, bytes)]}`.
pub(crate) fn result<'py>(
    py: Python<'py>,
    result: &BenchmarkResult,
) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    let stats = &result.stats;
    dict.set_item("median_ms", stats.median_ms)?;
    dict.set_item("mean_ms", stats.mean_ms)?;
    dict.set_item("min_ms", stats.min_ms)?;
    dict.set_item("max_ms", stats.max_ms)?;
    dict.set_item("p20_ms", stats.p20_ms)?;
    dict.set_item("p80_ms", stats.p80_ms)?;
    dict.set_item("stddev_ms", stats.stddev_ms)?;
    dict.set_item("reps", stats.reps)?;
    dict.set_item("warmup_reps", stats.warmup_reps)?;
    let outputs = PyList::empty(py);
    for output in &result.outputs {
        outputs.append((
            output.name.as_str(),
            output.dtype.name(),
            output.shape.clone(),
            PyBytes::new(py, &output.bytes),
        ))?;
    }
    dict.set_item("outputs", outputs)?;
    Ok(dict)
}
