//! The community's formats as reports: a run written as FAIR T4 (`tunebox tune --t4`), and
//! Kernel Tuner cache files and T4 files read back as a [`Report`] (`tunebox report`).
//!
//! # Status and invalidity
//!
//! | tunebox status | T4 `invalidity` | T4 `correctness` |
//! |---|---|---|
//! | `ok` | `correct` | 1 |
//! | `wrong` | `correctness` | 0 |
//! | `compile_error` | `compile` | 1 |
//! | `error` (a failed launch, a backend error) | `runtime` | 1 |
//! | `crashed` | `runtime` | 1 |
//! | `timeout` | `timeout` | 1 |
//!
//! tunebox never measures a choice that breaks a restriction, so it writes no `constraints`.
//! Read back, `correct` is `ok`, `correctness` `wrong`, `compile` `compile_error`, `timeout`
//! `timeout`, and `runtime` and `constraints` are `error` (with the invalidity as the error);
//! a Kernel Tuner cache's `CompilationFailedConfig` is `compile_error`, `RuntimeFailedConfig`
//! and `InvalidConfig` are `error`.

use std::path::Path;

use indexmap::IndexMap;
use serde_json::Value;
use tunebox_pool::Status;
use tunebox_protocol::TimingStats;

use crate::manifest::formats::{
    KtCache, KtRecord, KtTime, T4File, T4Invalidity, T4Measurement, T4Metadata, T4Result, T4Times,
};
use crate::results::{ChoiceResult, Report, RunHeader, RunInfo, Selection, rank_by_device};
use crate::space::Choice;

/// The T4 invalidity of a tunebox status (the module's table).
pub(crate) fn t4_invalidity(status: Status) -> T4Invalidity {
    match status {
        Status::Ok => T4Invalidity::Correct,
        // A measurement caught cheating is not a correct one.
        Status::Wrong | Status::Suspicious => T4Invalidity::Correctness,
        Status::CompileError => T4Invalidity::Compile,
        Status::Timeout => T4Invalidity::Timeout,
        // Error, Crashed, and any status added later: it failed at run time.
        _ => T4Invalidity::Runtime,
    }
}

/// A report as a T4 file (schema 1.1.0), one result per choice in rank order.
///
/// - metadata: `autotuner` `"tunebox"` and its version, `timeunit` `"milliseconds"`, `device`,
///   `compute_api` `"CUDA"` for a CUDA run; `tunebox` (extra): the manifest, its name, the
///   kernel, the strategy and the run's wall-clock time `elapsed_ms`;
/// - each result: `configuration` (the choice), `objectives` `["time"]` (or the manifest's
///   objective metric, e.g. `["GFLOP/s"]`), `invalidity` and
///   `correctness` as the module's table says; `times.runtimes` is empty (tunebox keeps the
///   reps' statistics, not each rep) and compile times are not recorded; `measurements`:
///   `time` (the median, the ranking objective), `mean_time`, `min_time`, `max_time`,
///   `p20_time`, `p80_time`, `stddev_time` (all `"ms"`), `reps`, then the manifest's
///   metrics, for every measured choice (`ok`, and `wrong`, which was timed before its
///   outputs were judged); `extra`: tunebox's `status` and, for a failure, the first line of its `error`.
pub(crate) fn to_t4(report: &Report) -> T4File {
    let header = &report.info.header;
    // The ranking objective: `time`, or the manifest's objective metric (a measurement too).
    let objective = header
        .objective
        .as_ref()
        .map_or_else(|| "time".to_owned(), |o| o.name.clone());
    let mut file = T4File::new();
    file.metadata = Some(t4_metadata(report));
    file.results = report
        .results
        .iter()
        .map(|r| t4_result(r, &objective))
        .collect();
    file
}

/// A run's T4 metadata: tunebox, its version, milliseconds, the device and the compute API,
/// and tunebox's own facts of the run (`extra.tunebox`).
fn t4_metadata(report: &Report) -> T4Metadata {
    let header = &report.info.header;
    let mut tunebox = serde_json::Map::new();
    for (key, value) in [
        ("manifest", &header.manifest),
        ("name", &header.name),
        ("kernel", &header.kernel),
        ("strategy", &header.selection.strategy),
    ] {
        tunebox.insert(key.into(), Value::from(value.as_str()));
    }
    tunebox.insert(
        "elapsed_ms".into(),
        Value::from(report.info.elapsed_s * 1e3),
    );
    let mut extra = IndexMap::new();
    extra.insert("tunebox".to_owned(), Value::Object(tunebox));
    T4Metadata {
        compute_api: (header.backend == "cuda").then(|| "CUDA".to_owned()),
        device: Some(header.device.clone()),
        autotuner: Some("tunebox".to_owned()),
        autotuner_version: Some(header.tunebox_version.clone()),
        timeunit: Some("milliseconds".to_owned()),
        extra,
        ..T4Metadata::default()
    }
}

/// One choice's T4 result, ranked by `objective`: its configuration, invalidity and
/// correctness, its measurements when it was measured, tunebox's status and error line.
fn t4_result(r: &ChoiceResult, objective: &str) -> T4Result {
    let configuration: IndexMap<_, _> = r
        .choice
        .values()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut t = T4Result::new(configuration, t4_invalidity(r.status));
    t.correctness = r.status != Status::Wrong;
    t.objectives = vec![objective.to_owned()];
    t.times = T4Times::default();
    // A `wrong` choice was measured too: its time is kept, its invalidity says why it does
    // not count.
    if let Some(s) = &r.stats {
        t4_measurements(r, s, &mut t);
    }
    t.extra
        .insert("status".into(), Value::from(r.status.as_str()));
    if let Some(error) = &r.error {
        t.extra.insert(
            "error".into(),
            Value::from(crate::base::error_line::short_error_line(error)),
        );
    }
    t
}

/// The measurements of a measured choice (`s`: its reps' statistics): the times, the reps,
/// the windows' interval and count (and `extra.tie`), then the manifest's metrics.
fn t4_measurements(r: &ChoiceResult, s: &TimingStats, t: &mut T4Result) {
    for (name, value) in [
        ("time", r.median_ms().unwrap_or(s.median_ms)),
        ("mean_time", s.mean_ms),
        ("min_time", s.min_ms),
        ("max_time", s.max_ms),
        ("p20_time", s.p20_ms),
        ("p80_time", s.p80_ms),
        ("stddev_time", s.stddev_ms),
    ] {
        t.measurements
            .push(T4Measurement::number(name, value, "ms"));
    }
    t.measurements
        .push(T4Measurement::number("reps", f64::from(s.reps), ""));
    // Measured in windows: the estimate's interval over them, and their count.
    if let Some(w) = r.windows.as_ref().filter(|w| w.medians_ms.len() > 1) {
        for (name, value) in [
            ("interval_low_time", w.interval_ms[0]),
            ("interval_high_time", w.interval_ms[1]),
        ] {
            t.measurements
                .push(T4Measurement::number(name, value, "ms"));
        }
        t.measurements.push(T4Measurement::number(
            "windows",
            w.medians_ms.len() as f64,
            "",
        ));
        t.extra.insert("tie".into(), Value::from(w.tie));
    }
    for (name, value) in &r.metrics {
        let unit = if name.ends_with("/s") {
            name.as_str()
        } else {
            ""
        };
        t.measurements
            .push(T4Measurement::number(name.clone(), *value, unit));
    }
}

/// Writes `report` as a FAIR T4 results file at `path`.
///
/// # Errors
///
/// The file cannot be written.
pub fn write_t4(report: &Report, path: &Path) -> crate::Result<()> {
    to_t4(report)
        .write(path)
        .map_err(|e| crate::TuneError::report(anyhow::Error::new(e)))
}

/// Statistics of one time `ms`, with the reps' times when known.
fn stats(ms: f64, times: &[f64]) -> TimingStats {
    let mut sorted: Vec<f64> = times.iter().copied().filter(|t| t.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let quantile = |q: f64| {
        if sorted.is_empty() {
            ms
        } else {
            sorted[((sorted.len() - 1) as f64 * q).round() as usize]
        }
    };
    let stddev = if sorted.len() > 1 {
        let mean = sorted.iter().sum::<f64>() / sorted.len() as f64;
        (sorted.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / (sorted.len() - 1) as f64).sqrt()
    } else {
        0.0
    };
    TimingStats::unmeasured()
        .with_median_ms(ms)
        .with_mean_ms(ms)
        .with_min_ms(sorted.first().copied().unwrap_or(ms))
        .with_max_ms(sorted.last().copied().unwrap_or(ms))
        .with_p20_ms(quantile(0.2))
        .with_p80_ms(quantile(0.8))
        .with_stddev_ms(stddev)
        .with_reps(sorted.len() as u32)
        .with_warmup_reps(0)
        .with_stopped(String::new())
}

fn info(
    path: &Path,
    name: String,
    kernel: String,
    device: &str,
    results: &[ChoiceResult],
) -> RunInfo {
    RunInfo::new(RunHeader {
        tunebox_version: String::new(),
        manifest: path.display().to_string(),
        manifest_hash: String::new(),
        name,
        kernel,
        backend: String::new(),
        device: device.to_owned(),
        space_size: results.len(),
        selection: Selection {
            strategy: String::new(),
            budget: None,
            seed: 0,
        },
        shard: None,
        metrics: Vec::new(),
        objective: None,
    })
}

/// A Kernel Tuner cache file as a report: one result per record (its index is the record's
/// position in the file), `time` (ms, Kernel Tuner's mean over the reps) as the ranking time,
/// the reps' spread from `times`, the other numbers of the record as metrics.
pub(crate) fn kt_report(kt: &KtCache) -> Report {
    let device = kt.device_name.clone();
    let mut metrics: Vec<String> = Vec::new();
    let mut results: Vec<ChoiceResult> = kt
        .cache
        .iter()
        .enumerate()
        .map(|(index, record)| kt_result(kt, index, record, &device, &mut metrics))
        .collect();
    rank_by_device(&mut results);
    let name = kt
        .path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let mut info = info(&kt.path, name, kt.kernel_name.clone(), &device, &results);
    info.header.metrics = metrics;
    info.header.selection.strategy = "kernel-tuner".into();
    info.notes.extend(kt_notes(kt));
    Report { info, results }
}

/// Record `index` of a Kernel Tuner cache as a choice's result: measured, its metrics' names
/// noted in `metrics` (in the order first seen), or failed as the record says.
fn kt_result(
    kt: &KtCache,
    index: usize,
    record: &KtRecord,
    device: &str,
    metrics: &mut Vec<String>,
) -> ChoiceResult {
    let choice = Choice::new(kt.configuration(record));
    match record.time {
        KtTime::Ms(ms) => {
            for name in record.metrics.keys() {
                if !metrics.contains(name) {
                    metrics.push(name.clone());
                }
            }
            ChoiceResult {
                stats: Some(stats(ms, &record.times)),
                error: None,
                metrics: record.metrics.clone(),
                ..ChoiceResult::failed(index, choice, Status::Ok, String::new(), device)
            }
        }
        KtTime::Failed(f) => {
            let status = match f {
                crate::manifest::formats::KtFailure::Compilation => Status::CompileError,
                _ => Status::Error,
            };
            ChoiceResult::failed(index, choice, status, f.as_str().to_owned(), device)
        }
    }
}

/// What a report of a Kernel Tuner cache says about it: its records and what its time is, and
/// whether it was still open.
fn kt_notes(kt: &KtCache) -> Vec<String> {
    let mut notes = vec![format!(
        "Kernel Tuner cache {}: {} records, {} failed; time is Kernel Tuner's `time` (ms, the \
         mean of the reps), objective {:?}",
        kt.path.display(),
        kt.cache.len(),
        kt.failed_count(),
        kt.objective
    )];
    if kt.still_open {
        notes.push(format!(
            "{} was not closed (a Kernel Tuner run still writing it, or interrupted): read as \
             Kernel Tuner reads it, up to its last whole record{}",
            kt.path.display(),
            if kt.cut_record {
                " (the record being written when it was read is left out)"
            } else {
                ""
            }
        ));
    }
    notes
}

/// A T4 file as a report: the time of each result is its first objective's measurement
/// (`time` in `timeunit`, converted to ms), else its `runtimes`' mean.
pub(crate) fn t4_report(t4: &T4File, path: &Path) -> Report {
    let meta = t4.metadata.clone().unwrap_or_default();
    let device = meta
        .device
        .clone()
        .unwrap_or_else(|| "unknown device".into());
    let mut reader = T4Reader {
        device: &device,
        to_ms: timeunit_ms(meta.timeunit.as_deref()),
        metrics: Vec::new(),
    };
    let mut results: Vec<ChoiceResult> = t4
        .results
        .iter()
        .enumerate()
        .map(|(index, r)| reader.result(index, r))
        .collect();
    rank_by_device(&mut results);
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let kernel = meta
        .extra
        .get("tunebox")
        .and_then(|t| t.get("kernel"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let mut info = info(path, name, kernel, &device, &results);
    info.header.metrics = reader.metrics;
    info.header.selection.strategy = meta.autotuner.clone().unwrap_or_default();
    info.notes.push(format!(
        "T4 file {} (schema {}, autotuner {}): {} results, {} invalid",
        path.display(),
        t4.schema_version,
        meta.autotuner.as_deref().unwrap_or("unknown"),
        t4.results.len(),
        t4.results
            .iter()
            .filter(|r| r.invalidity != T4Invalidity::Correct)
            .count()
    ));
    Report { info, results }
}

/// A T4 `timeunit` in ms (milliseconds when it names none or one unknown).
fn timeunit_ms(timeunit: Option<&str>) -> f64 {
    match timeunit.map(str::to_ascii_lowercase).as_deref() {
        Some("nanoseconds") => 1e-6,
        Some("microseconds") => 1e-3,
        Some("seconds") => 1e3,
        _ => 1.0,
    }
}

/// A measurement's unit in ms: `ns`, `us` (or `µs`), `ms`, `s`; `None` for another.
fn unit_ms(unit: &str) -> Option<f64> {
    match unit {
        "ns" => Some(1e-6),
        "us" | "µs" => Some(1e-3),
        "ms" => Some(1.0),
        "s" => Some(1e3),
        _ => None,
    }
}

/// The tunebox status of a T4 result (the module's table; `correct` but not `correctness` is
/// `wrong`).
fn t4_status(r: &T4Result) -> Status {
    match r.invalidity {
        T4Invalidity::Correct if !r.correctness => Status::Wrong,
        T4Invalidity::Correct => Status::Ok,
        T4Invalidity::Correctness => Status::Wrong,
        T4Invalidity::Compile => Status::CompileError,
        T4Invalidity::Timeout => Status::Timeout,
        T4Invalidity::Runtime | T4Invalidity::Constraints => Status::Error,
    }
}

/// Reads the results of a T4 file: its device, its time unit in ms, and the metrics its
/// results measured (the names in the order first seen).
struct T4Reader<'d> {
    device: &'d str,
    to_ms: f64,
    metrics: Vec<String>,
}

impl T4Reader<'_> {
    /// Result `index` as a choice's: measured (`ok`, `wrong`) when it has a time, its first
    /// objective's measurement (else its runtimes' mean), else failed.
    fn result(&mut self, index: usize, r: &T4Result) -> ChoiceResult {
        let choice = Choice::new(r.configuration.clone());
        let objective = r.objectives.first().map_or("time", String::as_str);
        let runtimes: Vec<f64> = r.times.runtimes.iter().map(|t| t * self.to_ms).collect();
        let time = r
            .measurement(objective)
            .and_then(|m| Some(m.as_f64()? * unit_ms(&m.unit).unwrap_or(self.to_ms)))
            .or_else(|| {
                (!runtimes.is_empty()).then(|| runtimes.iter().sum::<f64>() / runtimes.len() as f64)
            });
        match (t4_status(r), time) {
            (status @ (Status::Ok | Status::Wrong), Some(ms)) => {
                let metrics = self.metrics(r, objective);
                let error = (status == Status::Wrong).then(|| {
                    r.extra
                        .get("error")
                        .and_then(Value::as_str)
                        .map_or_else(|| "invalidity: correctness".to_owned(), str::to_owned)
                });
                ChoiceResult {
                    stats: Some(t4_stats(r, ms, &runtimes)),
                    error,
                    metrics,
                    ..ChoiceResult::failed(index, choice, status, String::new(), self.device)
                }
            }
            (status, _) => {
                let error = r.extra.get("error").and_then(Value::as_str).map_or_else(
                    || match status {
                        Status::Ok => format!("no {objective:?} measurement"),
                        _ => format!("invalidity: {}", r.invalidity.as_str()),
                    },
                    str::to_owned,
                );
                let status = if status == Status::Ok {
                    Status::Error
                } else {
                    status
                };
                ChoiceResult::failed(index, choice, status, error, self.device)
            }
        }
    }

    /// A measured result's metrics: its numbers other than the `objective`, the times in ms
    /// and the reps (each name noted in `self.metrics`).
    fn metrics(&mut self, r: &T4Result, objective: &str) -> IndexMap<String, f64> {
        let mut m = IndexMap::new();
        for x in &r.measurements {
            let known = x.name == objective
                || (x.name.ends_with("_time") && x.unit == "ms")
                || x.name == "reps";
            if let (false, Some(v)) = (known, x.as_f64()) {
                if !self.metrics.contains(&x.name) {
                    self.metrics.push(x.name.clone());
                }
                m.insert(x.name.clone(), v);
            }
        }
        m
    }
}

/// A measured T4 result's statistics: of its time `ms` and `runtimes`, with the times and
/// reps it measured itself (tunebox's own T4 files) in their place.
fn t4_stats(r: &T4Result, ms: f64, runtimes: &[f64]) -> TimingStats {
    let mut s = stats(ms, runtimes);
    let get = |name: &str| r.measurement(name).and_then(T4Measurement::as_f64);
    s.mean_ms = get("mean_time").unwrap_or(s.mean_ms);
    s.min_ms = get("min_time").unwrap_or(s.min_ms);
    s.max_ms = get("max_time").unwrap_or(s.max_ms);
    s.p20_ms = get("p20_time").unwrap_or(s.p20_ms);
    s.p80_ms = get("p80_time").unwrap_or(s.p80_ms);
    s.stddev_ms = get("stddev_time").unwrap_or(s.stddev_ms);
    s.reps = get("reps").map_or(s.reps, |n| n as u32);
    s
}
