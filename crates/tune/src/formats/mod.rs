//! Readers and writers for the auto-tuning community's data formats.
//!
//! Three formats, each a typed model with `read` (and, for T4, `write`):
//!
//! | Type | Format | Source | Read | Write |
//! |---|---|---|---|---|
//! | [`T1File`] | FAIR **T1** tuning-problem input (`*.json`) | "FAIR Sharing of Data in Autotuning Research" (2024); schema `kernel_tuner/schema/T1/1.0.0/input-schema.json` (KernelTuner/kernel_tuner) | yes | no |
//! | [`KtCache`] | **Kernel Tuner cache file** (`*.json`, `*.json.gz`) | Kernel Tuner's `cachefile` output; schema `kernel_tuner/schema/cache/1.0.0/schema.json` | yes | no |
//! | [`T4File`] | FAIR **T4** tuning results (`*.json`) | schema `src/autotuning_methodology/schemas/T4.json` (1.1.0, AutoTuningAssociation/autotuning_methodology); Kernel Tuner's `file_utils.store_output_file` | yes | yes |
//!
//! The FAIR Benchmark Hub (AutoTuningAssociation/benchmark_hub) publishes its kernels as T1 files
//! and its brute-forced measurements as Kernel Tuner cache files; [`T4File::from_kt_cache`]
//! turns the latter into T4 results, the shape a replay (simulated tuning run) reads.
//!
//! # Example
//!
//! ```no_run
//! use tunebox_tune::formats::{KtCache, T1File, T4File};
//!
//! let hub = std::path::Path::new("data/benchmark_hub");
//! let t1 = T1File::read(hub.join("kernels/convolution_milo.json"))?;
//! println!("{} configurations before restrictions", t1.cartesian_size());
//! let kt = KtCache::read(hub.join("cachefiles/convolution_milo/A100.json.gz"))?;
//! println!("{} records, {} failed", kt.cache.len(), kt.failed_count());
//! T4File::from_kt_cache(&kt).write("convolution_A100_T4.json")?;
//! # Ok::<(), tunebox_tune::formats::FormatError>(())
//! ```
//!
//! # Values and units
//!
//! - A parameter value is a [`ParamValue`] (the search space's own type): `Int` (`i64`),
//!   `Float` (`f64`), `Bool`, `Str`, as the JSON has them. [`ParamValue::repr`] writes one as
//!   Python's `repr` would, [`ParamValue::python_str`] as Python's `str` would (the form
//!   Kernel Tuner joins with commas into a cache key), [`ParamValue::as_f64`] gives a number.
//! - All times are **milliseconds**: Kernel Tuner writes ms throughout (`time`, `times`,
//!   `compile_time`, …), and the T4 writer states `"timeunit": "milliseconds"` in its metadata
//!   and `"unit": "ms"` on time measurements.
//!
//! # Errors
//!
//! Every reader returns [`FormatError`]: it names the file, and for a bad field the JSON path of
//! that field (`$.ConfigurationSpace.TuningParameters[2].Values`) and what is wrong with it.
//!
//! # Not supported
//!
//! - T1: only the JSON form (`"OutputFormat": "XML"` is read as a value, nothing more). `Values`
//!   strings are evaluated as a small subset of Python (see [`T1Param::values`]); anything else
//!   is an error naming the field. Conditions, sizes and `GlobalSize`/`LocalSize` stay
//!   expressions (text) for the search space and launcher to evaluate. The kernel file is
//!   resolved against the T1 file's folder but not opened. No T1 writer.
//! - Kernel Tuner caches: JSON and gzip only (no other compression), read only; a file still
//!   being written (unterminated) is read as Kernel Tuner reads it, closed after its last record. Cache keys whose
//!   values are strings containing commas cannot be split unambiguously and are an error.
//! - T4: one file holds `schema_version`, optional `metadata` and `results`; the separate T4
//!   *metadata* file of schema 1.0.0 (`hardware`, `environment`) is kept as raw JSON inside
//!   [`T4Metadata::extra`], not modelled. No JSON-schema validation beyond the typed fields.

mod error;
mod json;
mod kt_cache;
pub(crate) mod py_values;
mod t1;
mod t4;
mod value;

pub use error::FormatError;
pub(crate) use kt_cache::is_open_cache;
pub use kt_cache::{KtCache, KtFailure, KtRecord, KtTime};
pub use t1::{
    T1AccessType, T1Arg, T1Condition, T1ConfigurationSpace, T1Dims, T1File, T1FillType, T1General,
    T1KernelSpec, T1MemoryType, T1Param, T1ParamType, T1Size,
};
pub use t4::{
    T4_SCHEMA_VERSION, T4File, T4Invalidity, T4Measurement, T4Metadata, T4Result, T4Times,
};

pub use crate::space::ParamValue;

/// Where the FAIR Benchmark Hub data lives for this crate's tests; fails loudly when missing.
#[cfg(test)]
pub(crate) fn hub_dir() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/benchmark_hub");
    assert!(
        dir.join("README.md").is_file(),
        "the FAIR Benchmark Hub test data is missing: expected it at {} \
         (the repository folder data/benchmark_hub)",
        dir.display()
    );
    dir
}
