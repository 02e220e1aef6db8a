//! The FAIR T4 tuning-results format.
//!
//! A T4 file lists the configurations a tuning run evaluated: for each, its parameter values,
//! the objectives, a breakdown of times, whether it was valid, and its measurements. The model
//! follows the schema `src/autotuning_methodology/schemas/T4.json` (version 1.1.0) in
//! AutoTuningAssociation/autotuning_methodology, which adds a `metadata` object (device,
//! autotuner, `timeunit`, …) to Kernel Tuner's 1.0.0 results schema
//! (`kernel_tuner/schema/T4/1.0.0/results-schema.json`). Required per result: `configuration`,
//! `times`, `invalidity`, `correctness`.
//!
//! Units: the writer states `"timeunit": "milliseconds"` when it fills the metadata itself
//! ([`T4File::from_kt_cache`]), and every time in [`T4Times`] is in that unit; measurements carry
//! their own `unit` (`"ms"` for times).

use std::path::Path;

use indexmap::IndexMap;
use serde_json::Value;

use super::FormatError;
use super::json::{J, Node, Res, read_json, write_json};
use super::kt_cache::KtFailure;
#[cfg(test)]
use super::kt_cache::{KtCache, KtTime};
use super::value::{param_from_json, to_j};
use crate::space::ParamValue;

/// The schema version [`T4File::new`] and [`T4File::from_kt_cache`] write.
pub(crate) const T4_SCHEMA_VERSION: &str = "1.1.0";

/// One T4 results file.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub(crate) struct T4File {
    /// `schema_version`, `major.minor.patch` (Kernel Tuner writes `"1.0.0"`).
    pub schema_version: String,
    /// `metadata` (schema 1.1.0), if present.
    pub metadata: Option<T4Metadata>,
    /// `results`: one per evaluated configuration.
    pub results: Vec<T4Result>,
    /// Top-level members not listed above, as written.
    pub extra: IndexMap<String, Value>,
}

/// T4 `metadata`: where and how the results were obtained.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub(crate) struct T4Metadata {
    /// `compute_api`: `"CUDA"`, `"OpenCL"` or `"Vulkan"`.
    pub compute_api: Option<String>,
    /// `platform`: the vendor SDK.
    pub platform: Option<String>,
    /// `device`: the device name, e.g. `"NVIDIA A100-PCIE-40GB"`.
    pub device: Option<String>,
    /// `autotuner`, e.g. `"KernelTuner"`, `"KTT"`, `"tunebox"`.
    pub autotuner: Option<String>,
    /// `autotuner_version`.
    pub autotuner_version: Option<String>,
    /// `timestamp`: when the tuning session started.
    pub timestamp: Option<String>,
    /// `timeunit`: `"nanoseconds"`, `"microseconds"`, `"milliseconds"` or `"seconds"`; the unit of
    /// every [`T4Times`] value. Kernel Tuner's files (no metadata) are in milliseconds.
    pub timeunit: Option<String>,
    /// Members not listed above, as written (e.g. schema 1.0.0's `hardware`, `environment`).
    pub extra: IndexMap<String, Value>,
}

/// One evaluated configuration (T4 `results[i]`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub(crate) struct T4Result {
    /// `timestamp`: when it was evaluated (ISO 8601, or Kernel Tuner's
    /// `"2023-12-22 09:54:05.502007+00:00"`).
    pub timestamp: Option<String>,
    /// `configuration`: parameter name -> value.
    pub configuration: IndexMap<String, ParamValue>,
    /// `objectives`: the names of the objectives, e.g. `["time"]`.
    pub objectives: Vec<String>,
    /// `times`: where the time went.
    pub times: T4Times,
    /// `invalidity`: valid (`correct`) or why not.
    pub invalidity: T4Invalidity,
    /// `correctness`: `true` written as 1, `false` as 0. Kernel Tuner always writes 1 (it does
    /// not keep configurations that fail verification), and so does
    /// [`T4File::from_kt_cache`].
    pub correctness: bool,
    /// `measurements`: what was measured, each with its unit.
    pub measurements: Vec<T4Measurement>,
    /// Members not listed above, as written (e.g. `compilation_data`).
    pub extra: IndexMap<String, Value>,
}

/// T4 `times`, all in the metadata's `timeunit` (milliseconds unless stated otherwise).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub(crate) struct T4Times {
    /// `compilation_time` (Kernel Tuner 1.0.0's writer says `compilation`; both are read).
    pub compilation_time: Option<f64>,
    /// `runtimes`: the kernel's time in each repetition.
    pub runtimes: Vec<f64>,
    /// `framework`: the tuner's own overhead.
    pub framework: Option<f64>,
    /// `search_algorithm`: the search strategy's time to pick this configuration.
    pub search_algorithm: Option<f64>,
    /// `validation`: checking the output.
    pub validation: Option<f64>,
    /// `benchmark` (Kernel Tuner's writer; not in the schema): all repetitions with overhead.
    pub benchmark: Option<f64>,
    /// Members not listed above (`data`, `kernel_overhead`, `profiling_runs`,
    /// `profiling_overhead`, …), as written.
    pub extra: IndexMap<String, Value>,
}

/// T4 `invalidity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum T4Invalidity {
    /// `"correct"`: the configuration is valid and was measured.
    Correct,
    /// `"timeout"`: it ran past the time limit.
    Timeout,
    /// `"compile"`: it did not compile.
    Compile,
    /// `"runtime"`: it failed when run.
    Runtime,
    /// `"correctness"`: its output was wrong.
    Correctness,
    /// `"constraints"`: it breaks a restriction or device limit.
    Constraints,
}

impl T4Invalidity {
    const ALL: [T4Invalidity; 6] = [
        T4Invalidity::Correct,
        T4Invalidity::Timeout,
        T4Invalidity::Compile,
        T4Invalidity::Runtime,
        T4Invalidity::Correctness,
        T4Invalidity::Constraints,
    ];

    /// The schema's string.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            T4Invalidity::Correct => "correct",
            T4Invalidity::Timeout => "timeout",
            T4Invalidity::Compile => "compile",
            T4Invalidity::Runtime => "runtime",
            T4Invalidity::Correctness => "correctness",
            T4Invalidity::Constraints => "constraints",
        }
    }
}

impl From<KtFailure> for T4Invalidity {
    /// As Kernel Tuner's `get_configuration_validity`: compile, runtime, otherwise constraints.
    fn from(f: KtFailure) -> Self {
        match f {
            KtFailure::Compilation => T4Invalidity::Compile,
            KtFailure::Runtime => T4Invalidity::Runtime,
            KtFailure::Invalid => T4Invalidity::Constraints,
        }
    }
}

/// One T4 measurement: a named value with its unit.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub(crate) struct T4Measurement {
    /// `name`, e.g. `"time"`, `"GFLOP/s"`.
    pub name: String,
    /// `value`: a number, a string or an array (the schema allows all three).
    pub value: Value,
    /// `unit`: `"ms"` for times; `""` when dimensionless or unknown.
    pub unit: String,
    /// `type` (KTT's profiling counters: `"Int"`, `"Double"`, `"Percent"`, …).
    pub counter_type: Option<String>,
}

impl T4Measurement {
    /// A numeric measurement.
    pub(crate) fn number(name: impl Into<String>, value: f64, unit: impl Into<String>) -> Self {
        T4Measurement {
            name: name.into(),
            value: Value::from(value),
            unit: unit.into(),
            counter_type: None,
        }
    }

    /// The value as a number, if it is one.
    pub(crate) fn as_f64(&self) -> Option<f64> {
        self.value.as_f64()
    }
}

impl T4Result {
    /// A result with a configuration and validity and nothing measured yet (correctness 1).
    pub(crate) fn new(
        configuration: IndexMap<String, ParamValue>,
        invalidity: T4Invalidity,
    ) -> Self {
        T4Result {
            timestamp: None,
            configuration,
            objectives: Vec::new(),
            times: T4Times::default(),
            invalidity,
            correctness: true,
            measurements: Vec::new(),
            extra: IndexMap::new(),
        }
    }

    /// The measurement called `name`, if any.
    pub(crate) fn measurement(&self, name: &str) -> Option<&T4Measurement> {
        self.measurements.iter().find(|m| m.name == name)
    }
}

impl Default for T4File {
    fn default() -> Self {
        T4File::new()
    }
}

impl T4File {
    /// An empty file of schema [`T4_SCHEMA_VERSION`] with metadata saying `"timeunit":
    /// "milliseconds"` and `"autotuner": "tunebox"`.
    pub(crate) fn new() -> Self {
        T4File {
            schema_version: T4_SCHEMA_VERSION.to_owned(),
            metadata: Some(T4Metadata {
                autotuner: Some("tunebox".to_owned()),
                autotuner_version: Some(env!("CARGO_PKG_VERSION").to_owned()),
                timeunit: Some("milliseconds".to_owned()),
                ..T4Metadata::default()
            }),
            results: Vec::new(),
            extra: IndexMap::new(),
        }
    }

    /// The T4 form of a Kernel Tuner cache file, one result per record in the file's order, as
    /// Kernel Tuner's `convert_t4` and `store_output_file` do it:
    ///
    /// - metadata: `device` = `device_name`, `autotuner` = `"KernelTuner"`, `timeunit` =
    ///   `"milliseconds"` (the kernel name and problem size have no place in T4);
    /// - `times`: `compile_time` -> `compilation_time`, `framework_time` -> `framework`,
    ///   `strategy_time` -> `search_algorithm`, `verification_time` -> `validation`,
    ///   `times` -> `runtimes`, `benchmark_time` -> `benchmark`;
    /// - `invalidity` from `time` (a failure marker gives `compile`, `runtime` or
    ///   `constraints`), `correctness` 1, `objectives` = `[objective]`;
    /// - measurements: `time` (unit `"ms"`, only when measured), then every metric; a metric
    ///   named like a rate (`"GFLOP/s"`, `"GB/s"`) has itself as unit, others `""`.
    #[cfg(test)]
    pub(crate) fn from_kt_cache(cache: &KtCache) -> T4File {
        let results = cache
            .cache
            .iter()
            .map(|r| {
                let invalidity = match r.time {
                    KtTime::Ms(_) => T4Invalidity::Correct,
                    KtTime::Failed(f) => T4Invalidity::from(f),
                };
                let mut result = T4Result::new(cache.configuration(r), invalidity);
                result.timestamp = r.timestamp.clone();
                result.objectives = vec![cache.objective.clone()];
                result.times = T4Times {
                    compilation_time: r.compile_time,
                    runtimes: r.times.clone(),
                    framework: r.framework_time,
                    search_algorithm: r.strategy_time,
                    validation: r.verification_time,
                    benchmark: r.benchmark_time,
                    extra: IndexMap::new(),
                };
                if let KtTime::Ms(ms) = r.time {
                    result
                        .measurements
                        .push(T4Measurement::number("time", ms, "ms"));
                }
                for (name, value) in &r.metrics {
                    let unit = if name.ends_with("/s") {
                        name.as_str()
                    } else {
                        ""
                    };
                    result
                        .measurements
                        .push(T4Measurement::number(name.clone(), *value, unit));
                }
                result
            })
            .collect();
        T4File {
            schema_version: T4_SCHEMA_VERSION.to_owned(),
            metadata: Some(T4Metadata {
                device: Some(cache.device_name.clone()),
                autotuner: Some("KernelTuner".to_owned()),
                timeunit: Some("milliseconds".to_owned()),
                ..T4Metadata::default()
            }),
            results,
            extra: IndexMap::new(),
        }
    }

    /// Reads the T4 file at `path`.
    ///
    /// # Errors
    ///
    /// [`FormatError::Read`] / [`FormatError::Syntax`] for a file that cannot be read or is not
    /// JSON; [`FormatError::Field`] naming the JSON path of a missing required member
    /// (`configuration`, `times`, `invalidity`, `correctness`) or a bad one (an unknown
    /// `invalidity`, a `correctness` other than 0 or 1, …).
    pub(crate) fn read(path: impl AsRef<Path>) -> Result<T4File, FormatError> {
        let path = path.as_ref();
        let doc = read_json(path)?;
        parse(&doc).map_err(|p| p.in_file(path))
    }

    /// Writes the file to `path` as pretty-printed JSON, members in the schema's order and
    /// absent optional members left out.
    ///
    /// # Errors
    ///
    /// [`FormatError::Write`] when the file cannot be written.
    pub(crate) fn write(&self, path: impl AsRef<Path>) -> Result<(), FormatError> {
        write_json(path.as_ref(), &self.to_j())
    }

    fn to_j(&self) -> J {
        let mut doc = vec![(
            "schema_version".to_owned(),
            J::Str(self.schema_version.clone()),
        )];
        if let Some(m) = &self.metadata {
            let mut meta = Vec::new();
            for (key, value) in [
                ("compute_api", &m.compute_api),
                ("platform", &m.platform),
                ("device", &m.device),
                ("autotuner", &m.autotuner),
                ("autotuner_version", &m.autotuner_version),
                ("timestamp", &m.timestamp),
                ("timeunit", &m.timeunit),
            ] {
                if let Some(v) = value {
                    meta.push((key.to_owned(), J::Str(v.clone())));
                }
            }
            extend(&mut meta, &m.extra);
            doc.push(("metadata".to_owned(), J::Obj(meta)));
        }
        let results = self.results.iter().map(result_j).collect();
        doc.push(("results".to_owned(), J::Arr(results)));
        extend(&mut doc, &self.extra);
        J::Obj(doc)
    }
}

fn extend(members: &mut Vec<(String, J)>, extra: &IndexMap<String, Value>) {
    for (k, v) in extra {
        if !members.iter().any(|(m, _)| m == k) {
            members.push((k.clone(), J::from_value(v)));
        }
    }
}

fn floats(v: &[f64]) -> J {
    J::Arr(v.iter().map(|x| J::Float(*x)).collect())
}

fn result_j(r: &T4Result) -> J {
    let mut out = Vec::new();
    if let Some(t) = &r.timestamp {
        out.push(("timestamp".to_owned(), J::Str(t.clone())));
    }
    let config = r.configuration.iter().map(|(k, v)| (k.clone(), to_j(v)));
    out.push(("configuration".to_owned(), J::obj(config)));
    let objectives = r.objectives.iter().map(|o| J::Str(o.clone())).collect();
    out.push(("objectives".to_owned(), J::Arr(objectives)));
    let t = &r.times;
    let mut times = Vec::new();
    if let Some(v) = t.compilation_time {
        times.push(("compilation_time".to_owned(), J::Float(v)));
    }
    times.push(("runtimes".to_owned(), floats(&t.runtimes)));
    for (key, value) in [
        ("framework", t.framework),
        ("search_algorithm", t.search_algorithm),
        ("validation", t.validation),
        ("benchmark", t.benchmark),
    ] {
        if let Some(v) = value {
            times.push((key.to_owned(), J::Float(v)));
        }
    }
    extend(&mut times, &t.extra);
    out.push(("times".to_owned(), J::Obj(times)));
    out.push((
        "invalidity".to_owned(),
        J::Str(r.invalidity.as_str().to_owned()),
    ));
    out.push(("correctness".to_owned(), J::Int(i64::from(r.correctness))));
    let measurements = r
        .measurements
        .iter()
        .map(|m| {
            let mut o = vec![
                ("name".to_owned(), J::Str(m.name.clone())),
                ("value".to_owned(), J::from_value(&m.value)),
                ("unit".to_owned(), J::Str(m.unit.clone())),
            ];
            if let Some(ty) = &m.counter_type {
                o.push(("type".to_owned(), J::Str(ty.clone())));
            }
            J::Obj(o)
        })
        .collect();
    out.push(("measurements".to_owned(), J::Arr(measurements)));
    extend(&mut out, &r.extra);
    J::Obj(out)
}

fn opt_string(node: &Node<'_, '_>, key: &'static str) -> Res<Option<String>> {
    node.get(key)?
        .map(|n| n.str().map(str::to_owned))
        .transpose()
}

fn rest(node: &Node<'_, '_>, known: &[&str]) -> Res<IndexMap<String, Value>> {
    Ok(node
        .members()?
        .filter(|(k, _)| !known.contains(k))
        .map(|(k, n)| (k.to_owned(), n.v.to_value()))
        .collect())
}

fn parse(doc: &J) -> Res<T4File> {
    let root = Node::root(doc);
    let metadata = match root.get("metadata")? {
        None => None,
        Some(m) => Some(T4Metadata {
            compute_api: opt_string(&m, "compute_api")?,
            platform: opt_string(&m, "platform")?,
            device: opt_string(&m, "device")?,
            autotuner: opt_string(&m, "autotuner")?,
            autotuner_version: opt_string(&m, "autotuner_version")?,
            timestamp: opt_string(&m, "timestamp")?,
            timeunit: opt_string(&m, "timeunit")?,
            extra: rest(
                &m,
                &[
                    "compute_api",
                    "platform",
                    "device",
                    "autotuner",
                    "autotuner_version",
                    "timestamp",
                    "timeunit",
                ],
            )?,
        }),
    };
    let mut results = Vec::new();
    for r in root.req("results")?.items()? {
        results.push(result(&r)?);
    }
    Ok(T4File {
        schema_version: root.req("schema_version")?.str()?.to_owned(),
        metadata,
        results,
        extra: rest(&root, &["schema_version", "metadata", "results"])?,
    })
}

/// One of `results`.
fn result(r: &Node<'_, '_>) -> Res<T4Result> {
    let mut configuration = IndexMap::new();
    for (name, v) in r.req("configuration")?.members()? {
        configuration.insert(name.to_owned(), param_from_json(&v)?);
    }
    let objectives = match r.get("objectives")? {
        Some(o) => o.string_list()?,
        None => Vec::new(),
    };
    let times = times(&r.req("times")?)?;
    let invalidity = invalidity(&r.req("invalidity")?)?;
    let c = r.req("correctness")?;
    let correctness = match c.v {
        J::Int(1) => true,
        J::Int(0) => false,
        J::Float(x) if *x == 1.0 => true,
        J::Float(x) if *x == 0.0 => false,
        _ => return Err(c.problem("expected 0 or 1")),
    };
    let mut measurements = Vec::new();
    if let Some(list) = r.get("measurements")? {
        for m in list.items()? {
            measurements.push(measurement(&m)?);
        }
    }
    Ok(T4Result {
        timestamp: opt_string(r, "timestamp")?,
        configuration,
        objectives,
        times,
        invalidity,
        correctness,
        measurements,
        extra: rest(
            r,
            &[
                "timestamp",
                "configuration",
                "objectives",
                "times",
                "invalidity",
                "correctness",
                "measurements",
            ],
        )?,
    })
}

/// A result's `times` (`compilation` read as `compilation_time`).
fn times(t: &Node<'_, '_>) -> Res<T4Times> {
    let num = |key: &'static str| -> Res<Option<f64>> { t.get(key)?.map(|n| n.f64()).transpose() };
    Ok(T4Times {
        compilation_time: match num("compilation_time")? {
            Some(v) => Some(v),
            None => num("compilation")?,
        },
        runtimes: match t.get("runtimes")? {
            Some(n) => n.f64_list()?,
            None => Vec::new(),
        },
        framework: num("framework")?,
        search_algorithm: num("search_algorithm")?,
        validation: num("validation")?,
        benchmark: num("benchmark")?,
        extra: rest(
            t,
            &[
                "compilation_time",
                "compilation",
                "runtimes",
                "framework",
                "search_algorithm",
                "validation",
                "benchmark",
            ],
        )?,
    })
}

/// A result's `invalidity`, one of [`T4Invalidity::ALL`].
fn invalidity(inv: &Node<'_, '_>) -> Res<T4Invalidity> {
    let text = inv.str()?;
    T4Invalidity::ALL
        .into_iter()
        .find(|i| i.as_str() == text)
        .ok_or_else(|| {
            inv.problem(format!(
                "`{text}` is not one of timeout, compile, runtime, correctness, constraints, correct"
            ))
        })
}

/// One of a result's `measurements`: a number, string or array with its unit.
fn measurement(m: &Node<'_, '_>) -> Res<T4Measurement> {
    let value = m.req("value")?;
    if !matches!(value.v, J::Int(_) | J::Float(_) | J::Str(_) | J::Arr(_)) {
        return Err(value.problem("expected a number, string or array"));
    }
    Ok(T4Measurement {
        name: m.req("name")?.str()?.to_owned(),
        value: value.v.to_value(),
        unit: opt_string(m, "unit")?.unwrap_or_default(),
        counter_type: opt_string(m, "type")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::formats::hub_dir;

    fn hub_cache(kernel: &str, gpu: &str) -> KtCache {
        let path = hub_dir().join(format!("cachefiles/{kernel}/{gpu}.json.gz"));
        KtCache::read(path).unwrap()
    }

    #[test]
    fn from_kt_cache_and_round_trip() {
        let kt = hub_cache("convolution_milo", "A6000");
        let t4 = T4File::from_kt_cache(&kt);
        assert_eq!(t4.results.len(), 4362);
        let count = |i| t4.results.iter().filter(|r| r.invalidity == i).count();
        assert_eq!(count(T4Invalidity::Correct), 4362 - 473);
        assert_eq!(count(T4Invalidity::Compile), 252);
        assert_eq!(count(T4Invalidity::Runtime), 221);
        let meta = t4.metadata.as_ref().unwrap();
        assert_eq!(meta.device.as_deref(), Some("NVIDIA RTX A6000"));
        assert_eq!(meta.timeunit.as_deref(), Some("milliseconds"));

        let first = &t4.results[0];
        let rec = &kt.cache[0];
        assert_eq!(first.configuration["block_size_x"], ParamValue::Int(16));
        assert_eq!(first.configuration.len(), 10);
        assert_eq!(first.objectives, ["time"]);
        assert_eq!(first.times.compilation_time, rec.compile_time);
        assert_eq!(first.times.runtimes, rec.times);
        assert_eq!(first.times.benchmark, rec.benchmark_time);
        let time = first.measurement("time").unwrap();
        assert_eq!((time.as_f64(), time.unit.as_str()), (rec.time.ms(), "ms"));
        assert_eq!(first.measurement("GFLOP/s").unwrap().unit, "GFLOP/s");
        assert!(first.correctness);
        let failed = t4
            .results
            .iter()
            .find(|r| r.invalidity != T4Invalidity::Correct)
            .unwrap();
        assert!(failed.measurement("time").is_none());

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.json");
        t4.write(&path).unwrap();
        let back = T4File::read(&path).unwrap();
        assert_eq!(back, t4);

        // The written JSON uses the schema's names.
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let r0 = &doc["results"][0];
        assert_eq!(doc["schema_version"], "1.1.0");
        assert_eq!(r0["invalidity"], "correct");
        assert_eq!(r0["correctness"], 1);
        assert_eq!(r0["times"]["compilation_time"], rec.compile_time.unwrap());
        assert_eq!(r0["configuration"]["use_cmem"], 1);
        assert_eq!(r0["measurements"][0]["unit"], "ms");
    }

    #[test]
    fn reads_kernel_tuners_own_writer() {
        // store_output_file of Kernel Tuner 1.0: `compilation`, `benchmark`, no metadata,
        // a string parameter, a failure.
        let text = r#"{"results": [
            {"timestamp": "t", "configuration": {"bs": 32, "v": "a"},
             "times": {"compilation": 1.5, "benchmark": 2, "framework": 0.1,
                       "search_algorithm": 0, "validation": 0, "runtimes": [1, 2]},
             "invalidity": "compile", "correctness": 1,
             "measurements": [{"name": "time", "value": "CompilationFailedConfig", "unit": "ms"}],
             "objectives": ["time"]}
        ], "schema_version": "1.0.0"}"#;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kt.json");
        std::fs::write(&path, text).unwrap();
        let t4 = T4File::read(&path).unwrap();
        assert_eq!(t4.schema_version, "1.0.0");
        assert!(t4.metadata.is_none());
        let r = &t4.results[0];
        assert_eq!(r.times.compilation_time, Some(1.5));
        assert_eq!(r.times.benchmark, Some(2.0));
        assert_eq!(r.configuration["v"], ParamValue::Str("a".into()));
        assert_eq!(r.invalidity, T4Invalidity::Compile);
        assert_eq!(r.measurements[0].as_f64(), None);

        let bad = text.replace("\"compile\"", "\"exploded\"");
        std::fs::write(&path, bad).unwrap();
        let err = T4File::read(&path).unwrap_err().to_string();
        assert!(err.ends_with("$.results[0].invalidity: `exploded` is not one of timeout, compile, runtime, correctness, constraints, correct"), "{err}");
        let bad = text.replace("\"correctness\": 1", "\"correctness\": 2");
        std::fs::write(&path, bad).unwrap();
        let err = T4File::read(&path).unwrap_err().to_string();
        assert!(
            err.ends_with("$.results[0].correctness: expected 0 or 1"),
            "{err}"
        );
    }

    #[test]
    fn new_file_round_trips() {
        let mut t4 = T4File::new();
        let mut config = IndexMap::new();
        config.insert("bs".to_owned(), ParamValue::Int(64));
        config.insert("unroll".to_owned(), ParamValue::Bool(true));
        let mut r = T4Result::new(config, T4Invalidity::Timeout);
        r.times.runtimes = vec![0.25, 0.5];
        r.extra.insert(
            "compilation_data".into(),
            serde_json::json!({"registers": 32}),
        );
        t4.results.push(r);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.json");
        t4.write(&path).unwrap();
        assert_eq!(T4File::read(&path).unwrap(), t4);
        let err = t4.write(dir.path().join("missing/dir/x.json")).unwrap_err();
        assert!(matches!(err, FormatError::Write { .. }));
    }
}
