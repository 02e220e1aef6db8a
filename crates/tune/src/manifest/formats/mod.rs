//! Readers for the auto-tuning community's data formats.
//!
//! Two readers are public, each a typed model with `read`:
//!
//! | Type | Format | Source |
//! |---|---|---|
//! | [`T1File`] | FAIR **T1** tuning-problem input (`*.json`) | "FAIR Sharing of Data in Autotuning Research" (2024); schema `kernel_tuner/schema/T1/1.0.0/input-schema.json` (KernelTuner/kernel_tuner) |
//! | [`KtCache`] | **Kernel Tuner cache file** (`*.json`, `*.json.gz`) | Kernel Tuner's `cachefile` output; schema `kernel_tuner/schema/cache/1.0.0/schema.json` |
//!
//! The FAIR Benchmark Hub (AutoTuningAssociation/benchmark_hub) publishes its kernels as T1 files
//! and its brute-forced measurements as Kernel Tuner cache files. The rest of the crate uses
//! these readers where a user meets the formats: [`crate::Manifest::load`] takes a T1 file,
//! [`crate::search::replay::Recording::read`] a cache or a FAIR **T4** results file (schema
//! `src/autotuning_methodology/schemas/T4.json`, 1.1.0, AutoTuningAssociation/autotuning_methodology),
//! and [`crate::write_t4`] writes a report as T4. The T4 model, the T1 parameter and argument
//! model and a cache's records stay inside the crate.
//!
//! # Example
//!
//! ```no_run
//! use tunebox_tune::formats::{KtCache, T1File};
//!
//! let hub = std::path::Path::new("data/benchmark_hub");
//! let t1 = T1File::read(hub.join("kernels/convolution_milo.json"))?;
//! println!("{} restrictions", t1.configuration_space.conditions.len());
//! let kt = KtCache::read(hub.join("cachefiles/convolution_milo/A100.json.gz"))?;
//! println!("{} on {}", kt.kernel_name, kt.device_name);
//! # Ok::<(), tunebox_tune::TuneError>(())
//! ```
//!
//! # Values and units
//!
//! - A parameter value is a [`crate::ParamValue`] (the search space's own type): `Int`
//!   (`i64`), `Float` (`f64`), `Bool`, `Str`, as the JSON has them.
//! - All times are **milliseconds**: Kernel Tuner writes ms throughout (`time`, `times`,
//!   `compile_time`, …), and the T4 writer states `"timeunit": "milliseconds"` in its metadata
//!   and `"unit": "ms"` on time measurements.
//!
//! # Errors
//!
//! Every reader's error is the crate's [`crate::TuneError`]: it names the file, and for a bad
//! field the JSON path of that field (`$.ConfigurationSpace.TuningParameters[2].Values`) and
//! what is wrong with it.
//!
//! # Not supported
//!
//! - T1: only the JSON form (`"OutputFormat": "XML"` is read as a value, nothing more). `Values`
//!   strings are evaluated as Python expressions (lists, ranges, comprehensions, through
//!   `tunebox-expr`); anything else is an error naming the field. Conditions, sizes and
//!   `GlobalSize`/`LocalSize` stay expressions (text) for the search space and launcher to
//!   evaluate. The kernel file is resolved against the T1 file's folder but not opened. No T1
//!   writer.
//! - Kernel Tuner caches: JSON and gzip only (no other compression), read only; a file still
//!   being written (unterminated) is read as Kernel Tuner reads it, closed after its last record. Cache keys whose
//!   values are strings containing commas cannot be split unambiguously and are an error.
//! - T4: one file holds `schema_version`, optional `metadata` and `results`; the separate T4
//!   *metadata* file of schema 1.0.0 (`hardware`, `environment`) is kept as raw JSON, not
//!   modelled. No JSON-schema validation beyond the typed fields.

mod error;
mod json;
mod kt_cache;
mod t1;
mod t4;
mod value;

pub(crate) use error::FormatError;
pub use kt_cache::KtCache;
pub(crate) use kt_cache::{KtFailure, KtRecord, KtTime, is_open_cache};
pub(crate) use t1::{T1Arg, T1Dims, T1FillType, T1MemoryType, T1Size};
pub use t1::{T1Condition, T1ConfigurationSpace, T1File, T1General, T1KernelSpec};
pub(crate) use t4::{T4File, T4Invalidity, T4Measurement, T4Metadata, T4Result, T4Times};

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
