//! The manifest as serde reads it: every field optional or defaulted, nothing checked yet
//! (the TOML form and the T1 form convert to these; [`super::Manifest::from_raw`] checks them).

use std::path::PathBuf;

use indexmap::IndexMap;
use serde::Deserialize;

use crate::manifest::launch::RawLaunch;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawManifest {
    pub(super) name: Option<String>,
    pub(super) seed: Option<u64>,
    pub(super) timeout_s: Option<f64>,
    pub(super) compile_timeout_s: Option<f64>,
    #[serde(default)]
    pub(super) restrictions: Vec<String>,
    pub(super) kernel: Option<RawKernel>,
    #[serde(default)]
    pub(super) tensors: Vec<RawTensor>,
    #[serde(default)]
    pub(super) scalars: Vec<RawScalar>,
    /// The kernel's argument order: names of tensors and scalars, each once.
    pub(super) args: Option<Vec<String>>,
    pub(super) params: Option<IndexMap<String, Vec<toml::Value>>>,
    pub(super) timing: Option<RawTiming>,
    pub(super) verify: Option<RawVerify>,
    /// Kernel Tuner's problem size: one to three integers or expressions (CUDA kernels; also
    /// `problem_size_x/y/z` in metrics).
    #[serde(default, deserialize_with = "one_or_list")]
    pub(super) problem_size: Option<Vec<toml::Value>>,
    pub(super) launch: Option<RawLaunch>,
    /// `[sandbox]`: run the workers sandboxed (docs/sandbox.md).
    pub(super) sandbox: Option<RawSandbox>,
    /// Named expressions over params, scalars and `time` (ms), shown as extra columns.
    #[serde(default)]
    pub(super) metrics: IndexMap<String, String>,
    /// What ranks the choices: `time` or a metric's name (Kernel Tuner's `objective`).
    pub(super) objective: Option<String>,
    /// Whether a larger objective is better (Kernel Tuner's `objective_higher_is_better`).
    pub(super) objective_higher_is_better: Option<bool>,
    /// `[env]`: the user's variables the workers get (`pass`), and variables set (`set`).
    pub(super) env: Option<RawEnv>,
    // Kernel Tuner's names (`tune_kernel` arguments), as aliases of the fields above.
    /// `params`.
    pub(super) tune_params: Option<IndexMap<String, Vec<toml::Value>>>,
    /// `kernel.entry`.
    pub(super) kernel_name: Option<String>,
    /// `kernel.source`.
    pub(super) kernel_source: Option<PathBuf>,
    /// `kernel.language`.
    pub(super) lang: Option<String>,
    /// `kernel.flags` (C) or `kernel.options` (CUDA).
    pub(super) compiler_options: Option<Vec<String>>,
    /// Kernel Tuner's argument list: tensors and scalars in the kernel's order (`[[arguments]]`).
    pub(super) arguments: Option<Vec<toml::Value>>,
    /// `verify.reference`: output files, a reference choice, or a reference source.
    pub(super) answer: Option<toml::Value>,
    /// `verify.atol` with `answer` (Kernel Tuner's default: 1e-6).
    pub(super) atol: Option<f64>,
    /// Timed reps per choice: `timing.min_reps = timing.max_reps = iterations`.
    pub(super) iterations: Option<u32>,
    /// `launch.grid_div_x/y/z`.
    pub(super) grid_div_x: Option<toml::Value>,
    pub(super) grid_div_y: Option<toml::Value>,
    pub(super) grid_div_z: Option<toml::Value>,
    /// The Kernel Tuner fields (`grid_div_x`, …) that alone made up `launch` (no `[launch]`
    /// table was written): a C kernel ignores them, as Kernel Tuner does.
    #[serde(skip)]
    pub(super) launch_from_aliases: Vec<&'static str>,
    /// Written with Kernel Tuner's `tune_params`, or read from a T1 file: the kernel gets Kernel
    /// Tuner's grid and block macros, and x is divided by nothing without a `block_size_x`
    /// param, as Kernel Tuner computes the grid.
    #[serde(skip)]
    pub(super) kernel_tuner_macros: bool,
    /// What a T1 file adds that TOML cannot say (never in a TOML manifest).
    #[serde(skip)]
    pub(super) t1: Option<Box<Extras>>,
}

/// What a T1 file says beyond the TOML fields.
#[derive(Debug, Default)]
pub(super) struct Extras {
    /// Fields read but not used, and how others were read.
    pub notes: Vec<String>,
    /// Why the file cannot be tuned (it can still be listed).
    pub unsupported: Vec<String>,
    /// The kernel source does not exist: do not read it.
    pub source_missing: bool,
    /// Tensors (by index) filled with a constant other than 0 and 1.
    pub fills: Vec<(usize, f64)>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawKernel {
    #[serde(alias = "kernel_source")]
    pub(super) source: Option<PathBuf>,
    #[serde(alias = "kernel_name")]
    pub(super) entry: Option<String>,
    /// `"c"` or `"cuda"`; by default from the extension (`.cu`, `.cuh`: CUDA).
    #[serde(alias = "lang")]
    pub(super) language: Option<String>,
    pub(super) flags: Option<Vec<String>>,
    /// NVRTC options (CUDA).
    pub(super) options: Option<Vec<String>>,
    /// Kernel Tuner's name for `flags` (C) or `options` (CUDA).
    pub(super) compiler_options: Option<Vec<String>>,
    pub(super) compiler: Option<String>,
}

#[derive(Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTensor {
    pub(super) name: String,
    pub(super) dtype: String,
    pub(super) shape: Vec<i64>,
    /// `"random"` (default), `"zeros"`, `"ones"`, or `{ file = "path" }`.
    pub(super) init: Option<toml::Value>,
    #[serde(default)]
    pub(super) output: bool,
    #[serde(default)]
    pub(super) reset: bool,
    /// `"void"`: passed untyped ([`Arg::Untyped`]), for pointer types a dtype cannot name.
    pub(super) c_type: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScalar {
    pub(super) name: String,
    /// An integer, or a float for the float types.
    pub(super) value: toml::Value,
    /// `"i32"`, `"i64"`, `"f32"` or `"f64"`; without it an integer is `i64` and a float `f64`.
    #[serde(rename = "type")]
    pub(super) kind: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTiming {
    pub(super) warmup_ms: Option<f64>,
    pub(super) rep_ms: Option<f64>,
    pub(super) min_reps: Option<u32>,
    pub(super) max_reps: Option<u32>,
    pub(super) flush_cache: Option<bool>,
    pub(super) hot: Option<bool>,
    pub(super) max_noise: Option<f64>,
    pub(super) max_time_ms: Option<f64>,
    pub(super) cache_flush: Option<String>,
    pub(super) clock: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVerify {
    pub(super) rtol: Option<f64>,
    pub(super) atol: Option<f64>,
    /// numpy's `equal_nan`: a NaN matches a NaN.
    pub(super) equal_nan: Option<bool>,
    pub(super) timeout_s: Option<f64>,
    /// Timed reps checked per verified window, on inputs varied from rep to rep.
    pub(super) checked_reps: Option<u32>,
    pub(super) reference: RawReference,
    /// How the user wrote each reference output, by tensor, when not as
    /// `verify.reference.outputs.NAME` (Kernel Tuner's `answer[3]`, `answer.C`): what errors
    /// about it name.
    #[serde(skip)]
    pub(super) written_as: IndexMap<String, String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReference {
    pub(super) choice: Option<IndexMap<String, toml::Value>>,
    pub(super) source: Option<PathBuf>,
    pub(super) entry: Option<String>,
    pub(super) flags: Option<Vec<String>>,
    pub(super) outputs: Option<IndexMap<String, PathBuf>>,
    /// The reference's own launch (a CUDA reference source whose geometry differs).
    pub(super) launch: Option<RawLaunch>,
}

/// Keys that belong at the top of a manifest, before the first `[table]`.
pub(super) const TOP_LEVEL_KEYS: [&str; 17] = [
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
pub(super) fn misplaced_key_hint(message: &str) -> String {
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

/// A list, or one value standing for a list of it: Kernel Tuner takes `problem_size = 1024`
/// (or `"2 ** 14"`) for `(1024,)`.
fn one_or_list<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<toml::Value>>, D::Error> {
    Ok(Some(match toml::Value::deserialize(deserializer)? {
        toml::Value::Array(values) => values,
        one => vec![one],
    }))
}

/// `[sandbox]` as written; `enabled = false` turns a table off without deleting it.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSandbox {
    pub(super) enabled: Option<bool>,
    pub(super) network: Option<bool>,
    #[serde(default)]
    pub(super) read: Vec<String>,
    #[serde(default)]
    pub(super) write: Vec<String>,
    pub(super) memory_mb: Option<u64>,
    pub(super) cpu_time_s: Option<u64>,
    pub(super) tasks: Option<u64>,
    pub(super) file_size_mb: Option<u64>,
    pub(super) write_xor_execute: Option<bool>,
}

/// `[env]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEnv {
    #[serde(default)]
    pub(super) pass: Vec<String>,
    #[serde(default)]
    pub(super) set: IndexMap<String, String>,
}
