//! Kernel Tuner cache files (`.json`, `.json.gz`).
//!
//! Kernel Tuner (`tune_kernel(..., cache="file")`) records every configuration it measured in
//! one JSON object: the device, the kernel, the space (`tune_params_keys`, `tune_params`), the
//! objective, and `cache`, a map from the comma-joined parameter values (`"16,1,1,1,0"`, each
//! value as Python's `str` writes it) to the record of that configuration. Schema:
//! `kernel_tuner/schema/cache/1.0.0/schema.json` in KernelTuner/kernel_tuner. The FAIR
//! Benchmark Hub ships its brute-forced measurements in this format, gzipped.
//!
//! All times are milliseconds. A failed configuration has a marker string instead of a number
//! as its `time` ([`KtFailure`]).
//!
//! Kernel Tuner appends each record to the file as it is measured and closes the JSON only
//! when the run ends, so the file of a run still going (or interrupted) ends after a record and
//! its comma. Its reader accepts that: when the text does not end as a closed file does, it
//! drops a trailing comma and closes the `cache` map and the document. [`KtCache::read`] does
//! the same ([`KtCache::still_open`]), and also leaves out a last record cut short while it
//! was written ([`KtCache::cut_record`]), which Kernel Tuner's reader refuses.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde_json::Value;

use super::FormatError;
use super::json::{J, Node, Res, read_bytes};
use super::value::param_from_json;
use crate::space::ParamValue;

/// One Kernel Tuner cache file, read by [`KtCache::read`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct KtCache {
    /// The file it was read from.
    pub path: PathBuf,
    /// `schema_version` (absent in older files, such as the benchmark hub's).
    pub schema_version: Option<String>,
    /// `device_name`, e.g. `"NVIDIA A100-PCIE-40GB"`.
    pub device_name: String,
    /// `kernel_name`, e.g. `"convolution_kernel"`.
    pub kernel_name: String,
    /// `problem_size`, one extent per dimension (a single integer is read as one dimension).
    pub problem_size: Vec<i64>,
    /// `tune_params_keys`: the parameter names, in cache-key order.
    pub tune_params_keys: Vec<String>,
    /// `tune_params`: every parameter's values, in the file's order.
    pub tune_params: IndexMap<String, Vec<ParamValue>>,
    /// `objective`: the name of the value tuned for, e.g. `"time"` or `"GFLOP/s"`.
    pub objective: String,
    /// `cache`: one record per measured configuration, in the file's order.
    pub(crate) cache: Vec<KtRecord>,
    /// Top-level members not listed above, as written.
    pub extra: IndexMap<String, Value>,
    /// The file was not closed (Kernel Tuner was still writing it, or was interrupted): it was
    /// read as Kernel Tuner reads such a file, closed after its last record.
    pub still_open: bool,
    /// The last record of an open file was cut short while it was written, and is left out.
    pub cut_record: bool,
    by_key: HashMap<String, usize>,
}

/// One configuration's record (a value of the cache file's `cache` map).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub(crate) struct KtRecord {
    /// The cache key as written, e.g. `"16,1,1,1,0,0,0,1,15,15"`.
    pub key: String,
    /// The parameter values, in `tune_params_keys` order, typed as in `tune_params` (an `int`
    /// parameter gives [`ParamValue::Int`]).
    pub params: Vec<ParamValue>,
    /// `time`: the kernel's time in ms, or why there is none.
    pub time: KtTime,
    /// `times`: the time of each repetition, ms (empty when absent).
    pub times: Vec<f64>,
    /// `compile_time`, ms.
    pub compile_time: Option<f64>,
    /// `verification_time`, ms.
    pub verification_time: Option<f64>,
    /// `benchmark_time`, ms (all repetitions together, with overhead).
    pub benchmark_time: Option<f64>,
    /// `framework_time`, ms (Kernel Tuner's own overhead for this configuration).
    pub framework_time: Option<f64>,
    /// `strategy_time`, ms (the search strategy's time to pick this configuration).
    pub strategy_time: Option<f64>,
    /// `timestamp`, as written (`"2023-12-22 09:54:05.502007+00:00"`).
    pub timestamp: Option<String>,
    /// Other numeric members (user metrics such as `"GFLOP/s"`, `"GB/s"`), in the file's order.
    pub metrics: IndexMap<String, f64>,
    /// Other non-numeric members (except the parameters themselves), as written.
    pub extra: IndexMap<String, Value>,
}

/// A record's `time`: milliseconds, or the marker Kernel Tuner wrote for a failure.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum KtTime {
    /// The kernel's time (Kernel Tuner's mean over `times`), ms.
    Ms(f64),
    /// The configuration has no time.
    Failed(KtFailure),
}

impl KtTime {
    /// The time in ms, `None` for a failure.
    #[cfg(test)]
    pub(crate) fn ms(self) -> Option<f64> {
        match self {
            KtTime::Ms(ms) => Some(ms),
            KtTime::Failed(_) => None,
        }
    }

    /// The failure, `None` for a time.
    pub(crate) fn failure(self) -> Option<KtFailure> {
        match self {
            KtTime::Ms(_) => None,
            KtTime::Failed(f) => Some(f),
        }
    }
}

/// Why a configuration has no time: Kernel Tuner's `ErrorConfig` subclasses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum KtFailure {
    /// `"RuntimeFailedConfig"`: the kernel failed to launch or run (e.g. too many resources).
    Runtime,
    /// `"CompilationFailedConfig"`: the kernel did not compile.
    Compilation,
    /// `"InvalidConfig"`: the configuration breaks a restriction or a device limit.
    Invalid,
}

impl KtFailure {
    /// The marker string as Kernel Tuner writes it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            KtFailure::Runtime => "RuntimeFailedConfig",
            KtFailure::Compilation => "CompilationFailedConfig",
            KtFailure::Invalid => "InvalidConfig",
        }
    }

    /// The failure for a marker string, `None` for any other text.
    pub(crate) fn from_marker(text: &str) -> Option<KtFailure> {
        match text {
            "RuntimeFailedConfig" => Some(KtFailure::Runtime),
            "CompilationFailedConfig" => Some(KtFailure::Compilation),
            "InvalidConfig" => Some(KtFailure::Invalid),
            _ => None,
        }
    }
}

impl std::fmt::Display for KtFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl KtRecord {
    /// The value of `objective` for this record: `time` in ms when the objective is `"time"`,
    /// otherwise the metric of that name; `None` for a failure or a missing metric.
    #[cfg(test)]
    pub(crate) fn objective_value(&self, objective: &str) -> Option<f64> {
        if objective == "time" {
            self.time.ms()
        } else if self.time.failure().is_some() {
            None
        } else {
            self.metrics.get(objective).copied()
        }
    }
}

impl KtCache {
    /// Reads the Kernel Tuner cache file at `path`, gzipped (`.json.gz`) or not.
    ///
    /// Every record's key is split at commas and each part is matched to the parameter's
    /// values in `tune_params` by its Python `str` form, so the values come out typed as the
    /// space has them; a record that also carries the parameters as members (Kernel Tuner
    /// writes them) must agree with its key.
    ///
    /// # Errors
    ///
    /// [`crate::TuneError::Report`], naming the file: it cannot be read, decompressed or
    /// parsed, or the JSON path of a missing or bad member (e.g. a key with the wrong number of values, a `time` string that
    /// is not a known failure marker, a record that disagrees with its key).
    ///
    /// # Speed
    ///
    /// In a release build on a shared 2-core machine, the benchmark hub's largest file
    /// (dedispersion on an A6000: 3.3 MB gzipped, 11,130 records of 32 repetitions each) reads
    /// in about 0.14 s, convolution (1.1 MB, 4,362 records) in about 0.07 s; a debug build
    /// takes several times longer. Measure with
    /// `cargo test --release -p tunebox-tune --lib formats::kt_cache -- --ignored --nocapture`.
    pub fn read(path: impl AsRef<Path>) -> crate::Result<KtCache> {
        KtCache::read_file(path.as_ref()).map_err(|e| crate::TuneError::report(e.into()))
    }

    /// [`KtCache::read`], its error the readers' own.
    pub(crate) fn read_file(path: impl AsRef<Path>) -> Result<KtCache, FormatError> {
        let path = path.as_ref();
        let (doc, opened) =
            parse_document(&read_bytes(path)?).map_err(|message| FormatError::Syntax {
                path: path.to_path_buf(),
                message,
            })?;
        let mut cache = parse(&doc, path).map_err(|p| p.in_file(path))?;
        cache.still_open = opened != Opened::Closed;
        cache.cut_record = opened == Opened::CutRecord;
        Ok(cache)
    }

    /// The cache key of `params` (in `tune_params_keys` order): their Python `str` forms joined
    /// by commas, as Kernel Tuner builds it.
    #[cfg(test)]
    pub(crate) fn key_of(params: &[ParamValue]) -> String {
        let parts: Vec<String> = params.iter().map(ParamValue::python_str).collect();
        parts.join(",")
    }

    /// The record of `params` (in `tune_params_keys` order), if the cache has one.
    #[cfg(test)]
    pub(crate) fn find(&self, params: &[ParamValue]) -> Option<&KtRecord> {
        self.by_key
            .get(&Self::key_of(params))
            .map(|&i| &self.cache[i])
    }

    /// A record's configuration as `name -> value`, in `tune_params_keys` order.
    pub(crate) fn configuration(&self, record: &KtRecord) -> IndexMap<String, ParamValue> {
        self.tune_params_keys
            .iter()
            .cloned()
            .zip(record.params.iter().cloned())
            .collect()
    }

    /// How many records failed (their `time` is a [`KtFailure`]).
    pub(crate) fn failed_count(&self) -> usize {
        self.cache
            .iter()
            .filter(|r| r.time.failure().is_some())
            .count()
    }
}

/// A cache file's document (at `path`) as a cache, read as closed (`still_open` false).
fn parse(doc: &J, path: &Path) -> Res<KtCache> {
    let root = Node::root(doc);
    let opt_str = |key: &'static str| -> Res<Option<String>> {
        root.get(key)?
            .map(|n| n.str().map(str::to_owned))
            .transpose()
    };
    let problem_size = match root.get("problem_size")? {
        None => Vec::new(),
        Some(n) if matches!(n.v, J::Arr(_)) => n.items()?.map(|i| i.i64()).collect::<Res<_>>()?,
        Some(n) => vec![n.i64()?],
    };
    let keys_node = root.req("tune_params_keys")?;
    let tune_params_keys = keys_node.string_list()?;
    let tune_params = tune_params(&root, &keys_node, &tune_params_keys)?;
    let (cache, by_key) = records(&root, &tune_params_keys, &tune_params)?;
    const KNOWN: [&str; 8] = [
        "schema_version",
        "device_name",
        "kernel_name",
        "problem_size",
        "tune_params_keys",
        "tune_params",
        "objective",
        "cache",
    ];
    Ok(KtCache {
        path: path.to_path_buf(),
        schema_version: opt_str("schema_version")?,
        device_name: root.req("device_name")?.str()?.to_owned(),
        kernel_name: root.req("kernel_name")?.str()?.to_owned(),
        problem_size,
        tune_params_keys,
        tune_params,
        objective: opt_str("objective")?.unwrap_or_else(|| "time".to_owned()),
        cache,
        extra: root
            .members()?
            .filter(|(k, _)| !KNOWN.contains(k))
            .map(|(k, n)| (k.to_owned(), n.v.to_value()))
            .collect(),
        still_open: false,
        cut_record: false,
        by_key,
    })
}

/// `tune_params`: each parameter's values; every name of `tune_params_keys` (`keys_node`)
/// must have some.
fn tune_params(
    root: &Node<'_, '_>,
    keys_node: &Node<'_, '_>,
    keys: &[String],
) -> Res<IndexMap<String, Vec<ParamValue>>> {
    let params_node = root.req("tune_params")?;
    let mut tune_params = IndexMap::new();
    for (name, values) in params_node.members()? {
        let values = values
            .items()?
            .map(|n| param_from_json(&n))
            .collect::<Res<Vec<_>>>()?;
        tune_params.insert(name.to_owned(), values);
    }
    for name in keys {
        if !tune_params.contains_key(name) {
            return Err(keys_node.problem(format!("`{name}` has no values in `tune_params`")));
        }
    }
    Ok(tune_params)
}

/// The records of `cache`, in the file's order, and the position of each by its key.
fn records(
    root: &Node<'_, '_>,
    keys: &[String],
    tune_params: &IndexMap<String, Vec<ParamValue>>,
) -> Res<(Vec<KtRecord>, HashMap<String, usize>)> {
    // Per parameter: the Python `str` form of each value -> the value.
    let lookup: Vec<HashMap<String, ParamValue>> = keys
        .iter()
        .map(|name| {
            tune_params[name]
                .iter()
                .map(|v| (v.python_str(), v.clone()))
                .collect()
        })
        .collect();
    let cache_node = root.req("cache")?;
    let count = cache_node.obj()?.len();
    let mut cache = Vec::with_capacity(count);
    let mut by_key = HashMap::with_capacity(count);
    for (key, rec) in cache_node.members()? {
        let record = record(key, &rec, keys, &lookup)?;
        by_key.insert(key.to_owned(), cache.len());
        cache.push(record);
    }
    Ok((cache, by_key))
}

/// How a cache file's text ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opened {
    /// A whole JSON document.
    Closed,
    /// Open after a whole record (a run still writing it, or interrupted).
    Open,
    /// Open in the middle of a record, which is left out.
    CutRecord,
}

/// Parses a cache file's bytes; a document that ends too soon (an open file) is closed as
/// Kernel Tuner's reader closes it, or failing that, after its last whole record.
///
/// # Errors
///
/// serde_json's message for the text as written, when no closing makes it a document.
fn parse_document(bytes: &[u8]) -> Result<(J, Opened), String> {
    let error = match serde_json::from_slice::<J>(bytes) {
        Ok(doc) => return Ok((doc, Opened::Closed)),
        Err(e) => e,
    };
    let open = (error.classify() == serde_json::error::Category::Eof)
        .then(|| std::str::from_utf8(bytes).ok())
        .flatten();
    for (text, opened) in open.map(closings).unwrap_or_default() {
        if let Ok(doc) = serde_json::from_str::<J>(&text)
            && matches!(&doc, J::Obj(m) if m.iter().any(|(k, _)| k == "cache"))
        {
            return Ok((doc, opened));
        }
    }
    Err(error.to_string())
}

/// The ways to close an open cache file's text, in the order to try them: after its end (a
/// trailing comma dropped), as Kernel Tuner does; after its last whole record (Kernel Tuner
/// starts each on a line of its own and ends it with a comma); after the `cache` map's opening
/// brace (no whole record yet).
fn closings(text: &str) -> Vec<(String, Opened)> {
    let close = |t: &str| {
        let t = t.trim_end();
        format!("{}}}\n}}", t.strip_suffix(',').unwrap_or(t))
    };
    let mut ways = vec![(close(text), Opened::Open)];
    if let Some(end) = text.trim_end().rfind(",\n") {
        ways.push((close(&text[..end]), Opened::CutRecord));
    }
    if let Some(start) = text.rfind("\"cache\"")
        && let Some(brace) = text[start..].find('{')
    {
        ways.push((close(&text[..start + brace + 1]), Opened::CutRecord));
    }
    ways
}

/// Whether `text` is a Kernel Tuner cache file that is still open (not yet closed by the run
/// writing it): [`KtCache::read`] reads it.
pub(crate) fn is_open_cache(text: &str) -> bool {
    serde_json::from_str::<serde::de::IgnoredAny>(text)
        .is_err_and(|e| e.classify() == serde_json::error::Category::Eof)
        && matches!(parse_document(text.as_bytes()), Ok((J::Obj(m), _))
            if m.iter().any(|(k, _)| k == "tune_params_keys"))
}

/// A key part that matches none of the parameter's values: typed by its look.
fn guess(part: &str) -> ParamValue {
    if let Ok(i) = part.parse() {
        ParamValue::Int(i)
    } else if let Ok(f) = part.parse() {
        ParamValue::Float(f)
    } else if part == "True" || part == "False" {
        ParamValue::Bool(part == "True")
    } else {
        ParamValue::Str(part.to_owned())
    }
}

/// The record under `key` of a cache whose parameters are `names` (`lookup`: each one's values
/// by their Python `str` form).
fn record(
    key: &str,
    rec: &Node<'_, '_>,
    names: &[String],
    lookup: &[HashMap<String, ParamValue>],
) -> Res<KtRecord> {
    let members = rec.obj()?;
    let params = record_params(key, rec, names, lookup)?;
    let time = record_time(rec)?;
    let times = match rec.get("times")? {
        Some(t) => t.f64_list()?,
        None => Vec::new(),
    };
    let ms =
        |field: &'static str| -> Res<Option<f64>> { rec.get(field)?.map(|n| n.f64()).transpose() };
    let timestamp = rec
        .get("timestamp")?
        .map(|n| n.str().map(str::to_owned))
        .transpose()?;
    let (metrics, extra) = record_numbers(members, names);
    Ok(KtRecord {
        key: key.to_owned(),
        params,
        time,
        times,
        compile_time: ms("compile_time")?,
        verification_time: ms("verification_time")?,
        benchmark_time: ms("benchmark_time")?,
        framework_time: ms("framework_time")?,
        strategy_time: ms("strategy_time")?,
        timestamp,
        metrics,
        extra,
    })
}

/// A record's parameter values: each comma-separated part of its `key` read as that
/// parameter's value (else guessed), checked against the value the record writes, if it does.
fn record_params(
    key: &str,
    rec: &Node<'_, '_>,
    names: &[String],
    lookup: &[HashMap<String, ParamValue>],
) -> Res<Vec<ParamValue>> {
    let parts: Vec<&str> = key.split(',').collect();
    if parts.len() != names.len() {
        return Err(rec.problem(format!(
            "the key has {} comma-separated values, but there are {} parameters ({})",
            parts.len(),
            names.len(),
            names.join(", ")
        )));
    }
    let mut params = Vec::with_capacity(names.len());
    for ((part, name), values) in parts.iter().zip(names).zip(lookup) {
        let from_key = values.get(*part).cloned();
        let member = rec.get(name)?;
        let value = match (from_key, &member) {
            (Some(v), None) => v,
            (Some(v), Some(m)) => {
                let written = param_from_json(m)?;
                if written != v && written.python_str() != v.python_str() {
                    return Err(m.problem(format!(
                        "the key says {name} = {}, the record says {}",
                        v.repr(),
                        written.repr()
                    )));
                }
                v
            }
            (None, Some(m)) => {
                let written = param_from_json(m)?;
                if written.python_str() != *part {
                    return Err(m.problem(format!(
                        "the key says {name} = {part}, the record says {}",
                        written.repr()
                    )));
                }
                written
            }
            (None, None) => guess(part),
        };
        params.push(value);
    }
    Ok(params)
}

/// A record's `time`: ms, or a failure marker.
fn record_time(rec: &Node<'_, '_>) -> Res<KtTime> {
    let time_node = rec.req("time")?;
    Ok(match time_node.v {
        J::Str(s) => KtTime::Failed(KtFailure::from_marker(s).ok_or_else(|| {
            time_node.problem(format!(
                "`{s}` is neither a time nor a failure marker (RuntimeFailedConfig, \
                 CompilationFailedConfig, InvalidConfig)"
            ))
        })?),
        _ => KtTime::Ms(time_node.f64()?),
    })
}

/// The members of a record beyond its times and parameters (`names`): the numbers as
/// metrics, the rest kept as they are.
fn record_numbers(
    members: &[(String, J)],
    names: &[String],
) -> (IndexMap<String, f64>, IndexMap<String, serde_json::Value>) {
    const KNOWN: [&str; 8] = [
        "time",
        "times",
        "compile_time",
        "verification_time",
        "benchmark_time",
        "framework_time",
        "strategy_time",
        "timestamp",
    ];
    let mut metrics = IndexMap::new();
    let mut extra = IndexMap::new();
    for (k, v) in members {
        if KNOWN.contains(&k.as_str()) || names.iter().any(|n| n == k) {
            continue;
        }
        match v.as_f64() {
            Some(x) => {
                metrics.insert(k.clone(), x);
            }
            None => {
                extra.insert(k.clone(), v.to_value());
            }
        }
    }
    (metrics, extra)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::formats::hub_dir;

    pub(crate) fn hub_cache(kernel: &str, gpu: &str) -> KtCache {
        let path = hub_dir()
            .join("cachefiles")
            .join(kernel)
            .join(format!("{gpu}.json.gz"));
        KtCache::read(&path).unwrap_or_else(|e| panic!("{e}: {:?}", std::error::Error::source(&e)))
    }

    fn failures(c: &KtCache, f: KtFailure) -> usize {
        c.cache
            .iter()
            .filter(|r| r.time.failure() == Some(f))
            .count()
    }

    #[test]
    fn convolution_counts() {
        for gpu in ["A100", "A4000", "A6000"] {
            let c = hub_cache("convolution_milo", gpu);
            assert_eq!(c.cache.len(), 4362, "{gpu}");
            assert_eq!(c.kernel_name, "convolution_kernel");
            assert_eq!(c.objective, "time");
            assert_eq!(c.problem_size, [4096, 4096]);
            assert_eq!(c.tune_params_keys.len(), 10);
            assert_eq!(c.tune_params["block_size_x"].len(), 16);
            let (runtime, compile) = match gpu {
                // The README's "161 failed" holds for the A100 and A4000 files.
                "A100" | "A4000" => (155, 6),
                _ => (221, 252),
            };
            assert_eq!(failures(&c, KtFailure::Runtime), runtime, "{gpu}");
            assert_eq!(failures(&c, KtFailure::Compilation), compile, "{gpu}");
            assert_eq!(c.failed_count(), runtime + compile, "{gpu}");
        }
        let c = hub_cache("convolution_milo", "A100");
        assert_eq!(c.device_name, "NVIDIA A100-PCIE-40GB");
        assert_eq!(c.failed_count(), 161);
        let first = &c.cache[0];
        assert_eq!(first.key, "16,1,1,1,0,0,0,1,15,15");
        assert_eq!(first.params[0], ParamValue::Int(16));
        assert_eq!(first.time, KtTime::Ms(3.8753279224038124));
        assert_eq!(first.times.len(), 32);
        assert_eq!(first.times[0], 3.976191997528076);
        assert_eq!(first.compile_time, Some(918.5990339610726));
        assert_eq!(first.verification_time, Some(0.0));
        assert_eq!(first.metrics["GFLOP/s"], 1948.1569950129526);
        assert_eq!(first.metrics.len(), 1);
        assert!(first.extra.is_empty());
        assert_eq!(
            first.timestamp.as_deref(),
            Some("2023-12-22 09:54:05.502007+00:00")
        );
        assert_eq!(first.objective_value("time"), Some(3.8753279224038124));
        assert_eq!(first.objective_value("GFLOP/s"), Some(1948.1569950129526));
        assert_eq!(c.configuration(first)["filter_width"], ParamValue::Int(15));
        assert_eq!(c.find(&first.params), Some(first));
        let failed = c.cache.iter().find(|r| r.time.failure().is_some()).unwrap();
        assert_eq!(failed.objective_value("time"), None);
        assert_eq!(failed.objective_value("GFLOP/s"), None);
    }

    #[test]
    fn dedispersion_counts() {
        for gpu in ["A100", "A4000", "A6000"] {
            let c = hub_cache("dedispersion_milo", gpu);
            assert_eq!(c.cache.len(), 11_130, "{gpu}");
            assert_eq!(c.failed_count(), 0, "{gpu}");
            assert_eq!(c.problem_size, [25000, 2048, 1]);
            assert!(c.cache.iter().all(|r| r.metrics.contains_key("GB/s")));
            assert!(c.cache.iter().all(|r| r.times.len() == 32));
        }
    }

    /// `cargo test --release -p tunebox-tune --lib formats::kt_cache -- --ignored --nocapture`
    #[test]
    #[ignore = "timing; run in release to see read speed"]
    fn read_speed() {
        for (kernel, gpu) in [
            ("convolution_milo", "A6000"),
            ("dedispersion_milo", "A100"),
            ("dedispersion_milo", "A6000"),
        ] {
            let start = std::time::Instant::now();
            let c = hub_cache(kernel, gpu);
            println!(
                "{kernel}/{gpu}.json.gz: {} records in {:.1} ms",
                c.cache.len(),
                start.elapsed().as_secs_f64() * 1e3
            );
        }
    }

    fn read_text(text: &str) -> Result<KtCache, FormatError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache.json");
        std::fs::write(&path, text).unwrap();
        KtCache::read_file(&path)
    }

    fn doc(cache: &str) -> String {
        format!(
            r#"{{"device_name": "cpu", "kernel_name": "k", "problem_size": 100,
            "tune_params_keys": ["bs", "f", "flag", "s"],
            "tune_params": {{"bs": [32, 64], "f": [0.5, 1.0], "flag": [true, false], "s": ["a", "b"]}},
            "objective": "GFLOP/s", "cache": {{{cache}}}}}"#
        )
    }

    #[test]
    fn typed_keys_plain_json_and_markers() {
        let c = read_text(&doc(
            r#""64,1.0,True,b": {"time": 2.0, "GFLOP/s": 5, "note": "x"},
               "32,0.5,False,a": {"bs": 32, "time": "InvalidConfig"}"#,
        ))
        .unwrap();
        assert_eq!(c.problem_size, [100]);
        let r = &c.cache[0];
        assert_eq!(
            r.params,
            [
                ParamValue::Int(64),
                ParamValue::Float(1.0),
                ParamValue::Bool(true),
                ParamValue::Str("b".into())
            ]
        );
        assert_eq!(r.objective_value(&c.objective), Some(5.0));
        assert_eq!(r.extra["note"], "x");
        assert!(r.times.is_empty() && r.compile_time.is_none());
        assert_eq!(c.cache[1].time, KtTime::Failed(KtFailure::Invalid));
        assert_eq!(KtCache::key_of(&c.cache[1].params), "32,0.5,False,a");
    }

    /// As Kernel Tuner writes a cache while it runs: the header up to `"cache": {`, then each
    /// record on a line of its own, followed by a comma.
    fn open_doc(records: &[&str], tail: &str) -> String {
        let mut text = String::from(
            "{\n\"device_name\": \"cpu\",\n\"kernel_name\": \"k\",\n\"tune_params_keys\": [\n\
             \"bs\"\n],\n\"tune_params\": {\n\"bs\": [\n32,\n64\n]\n},\n\"objective\": \
             \"time\",\n\"cache\": {",
        );
        for record in records {
            text.push('\n');
            text.push_str(record);
            text.push(',');
        }
        text.push_str(tail);
        text
    }

    #[test]
    fn open_files_are_closed_as_kernel_tuner_closes_them() {
        let records = [
            r#""32": {"time": 1.5}"#,
            r#""64": {"time": "InvalidConfig"}"#,
        ];
        // Closed by the run: read as written.
        let closed = open_doc(&records, "");
        let closed = format!("{}}}\n}}", closed.strip_suffix(',').unwrap());
        let c = read_text(&closed).unwrap();
        assert!(!c.still_open && !c.cut_record);
        assert_eq!(c.cache.len(), 2);
        // Open after a record and its comma (also with trailing whitespace).
        for tail in ["", "\n", "  \n"] {
            let c = read_text(&open_doc(&records, tail)).unwrap();
            assert!(c.still_open && !c.cut_record, "{tail:?}");
            assert_eq!(c.cache.len(), 2);
        }
        // Cut in the middle of the third record, of the first, or before any.
        let c = read_text(&open_doc(&records, "\n\"16\": {\"time\": 2.")).unwrap();
        assert!(c.still_open && c.cut_record);
        assert_eq!(c.cache.len(), 2);
        let c = read_text(&open_doc(&[], "\n\"32\": {\"ti")).unwrap();
        assert!(c.cut_record);
        assert_eq!(c.cache.len(), 0);
        let c = read_text(&open_doc(&[], "")).unwrap();
        assert!(c.still_open && c.cache.is_empty());
        // Only an open file is closed: bad JSON elsewhere is still an error.
        let err = read_text(&open_doc(&["\"32\": {\"time\": 1.5]"], ""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("is not valid JSON"), "{err}");
        assert!(is_open_cache(&open_doc(&records, "")));
        assert!(!is_open_cache(&closed));
        assert!(!is_open_cache("{\"results\": ["));
    }

    #[test]
    fn errors_name_the_record() {
        let err = read_text(&doc(r#""64,1.0,True": {"time": 2.0}"#))
            .unwrap_err()
            .to_string();
        assert!(err.ends_with(r#"$.cache["64,1.0,True"]: the key has 3 comma-separated values, but there are 4 parameters (bs, f, flag, s)"#), "{err}");
        let err = read_text(&doc(r#""64,1.0,True,b": {"time": "Oops"}"#))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(r#"$.cache["64,1.0,True,b"].time: `Oops` is neither a time"#),
            "{err}"
        );
        let err = read_text(&doc(r#""64,1.0,True,b": {"bs": 32, "time": 1}"#))
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with(
                r#"$.cache["64,1.0,True,b"].bs: the key says bs = 64, the record says 32"#
            ),
            "{err}"
        );
        let err = read_text(&doc(r#""64,1.0,True,b": {"time": 1, "times": [1, "x"]}"#))
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with(
                r#"$.cache["64,1.0,True,b"].times[1]: expected a number, found a string ("x")"#
            ),
            "{err}"
        );
        let dir = tempfile::tempdir().unwrap();
        let gz = dir.path().join("bad.json.gz");
        std::fs::write(&gz, [0x1f, 0x8b, 0, 1, 2, 3]).unwrap();
        assert!(matches!(
            KtCache::read_file(&gz).unwrap_err(),
            FormatError::Gzip { .. }
        ));
    }
}
