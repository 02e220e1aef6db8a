//! Replay (simulation) of a tuning run: every measurement comes from a recorded file instead of
//! a worker, and time is accounted as the recording spent it, so that strategies can be compared
//! on simulated wall time without a GPU, as Kernel Tuner's simulation mode does
//! (`kernel_tuner/runners/simulation.py`).
//!
//! - A [`Recording`] is what a file holds: per configuration (matched by parameter values), its
//!   objective and what measuring it cost. It reads Kernel Tuner cache files
//!   ([`KtCache`]), FAIR T4 result files and tunebox's own results cache
//!   (`*.tunebox-cache.jsonl`).
//! - [`Recorded`] binds a recording to a [`SearchSpace`]: one [`Measurement`] per choice (a
//!   choice the file lacks is a failed one that cost nothing).
//! - [`simulate`] drives a [`Strategy`] over it under a [`Budget`] and returns the [`Trace`] of
//!   simulated time and best-so-far.
//!
//! What is recorded is the kernel's time in ms: Kernel Tuner's `time`, T4's `time` measurement,
//! tunebox's median. A replay of a manifest whose `objective` is a metric ranks by it, as a run
//! does: each replayed result's metrics are computed from its recorded time, and both the
//! strategy and the report follow the objective ([`replay`]).

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result, bail, ensure};
use indexmap::IndexMap;
use tunebox_pool::Status;
use tunebox_protocol::TimingStats;

use crate::manifest::formats::{KtCache, KtFailure, KtTime, T4File, T4Invalidity};
use crate::results::{ChoiceResult, Report, RunHeader, RunInfo, Selection};
use crate::search::strategy::Strategy;
use crate::space::{ParamValue, SearchSpace};

/// What measuring one configuration gave, as recorded.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measurement {
    /// The kernel's time in ms (the objective), `None` when it failed.
    pub time_ms: Option<f64>,
    /// `ok`, or how it failed (`compile_error`, `error` for a runtime failure or a choice the
    /// recording lacks, `wrong`, `timeout`).
    pub status: Status,
    /// What measuring it cost, ms: compile + verification + benchmark + framework time, as
    /// Kernel Tuner's simulation runner adds them up.
    pub cost_ms: f64,
}

impl Measurement {
    /// A choice the recording does not have: failed, free.
    const MISSING: Measurement = Measurement {
        time_ms: None,
        status: Status::Error,
        cost_ms: 0.0,
    };
}

/// The measurements a file recorded, keyed by parameter values.
#[derive(Debug, Clone)]
pub struct Recording {
    /// The file it was read from.
    source: String,
    /// The device it was measured on.
    device: String,
    /// Every parameter's values (Kernel Tuner's `tune_params`; for other formats, the values
    /// seen, in order of first appearance).
    params: IndexMap<String, Vec<ParamValue>>,
    /// The Python `str` forms of a configuration's values in `params` order, joined by commas
    /// (Kernel Tuner's cache key) -> its measurement.
    by_key: HashMap<String, Measurement>,
}

fn key_of<'a>(values: impl Iterator<Item = &'a ParamValue>) -> String {
    let parts: Vec<String> = values.map(ParamValue::python_str).collect();
    parts.join(",")
}

fn sum(parts: &[Option<f64>]) -> f64 {
    parts
        .iter()
        .flatten()
        .filter(|v| v.is_finite())
        .copied()
        .sum()
}

/// The device a recording was made on: the file's field, or where that is empty or absent (the
/// benchmark hub's MI250X files have `"device_name": ""`) the file's name up to its first dot
/// (`MI250X` for `MI250X.json.gz`), so that a recorded space is never named by its kernel alone.
fn device_or_file(device: Option<&str>, path: &Path) -> String {
    match device.map(str::trim) {
        Some(d) if !d.is_empty() => d.to_owned(),
        _ => {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            let stem = name.split('.').next().unwrap_or_default();
            if stem.is_empty() {
                path.display().to_string()
            } else {
                stem.to_owned()
            }
        }
    }
}

impl Recording {
    /// Reads a recorded file: a Kernel Tuner cache file (`.json`, `.json.gz`), a T4 results
    /// file, or a tunebox results cache (JSON lines), told apart by their contents.
    ///
    /// # Errors
    ///
    /// The file cannot be read, is none of these, or is malformed (naming the field).
    pub fn read(path: &Path) -> crate::Result<Recording> {
        Recording::read_any(path).map_err(crate::TuneError::report)
    }

    /// [`Recording::read`] of any of the formats it reads, its errors as `anyhow`.
    fn read_any(path: &Path) -> Result<Recording> {
        let gz = path.extension().is_some_and(|e| e == "gz");
        if gz {
            return Ok(Recording::from_kt_cache(&KtCache::read(path)?));
        }
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read the recorded file {}", path.display()))?;
        if text.trim_start().starts_with("{\"key\"") {
            return Recording::from_results_cache(path, &text);
        }
        // A Kernel Tuner run still writing its cache (or interrupted) leaves it unterminated.
        if crate::manifest::formats::is_open_cache(&text) {
            return Ok(Recording::from_kt_cache(&KtCache::read(path)?));
        }
        let doc: serde_json::Value = serde_json::from_str(&text)
            .with_context(|| format!("{} is not JSON", path.display()))?;
        if doc.get("cache").is_some() && doc.get("tune_params").is_some() {
            Ok(Recording::from_kt_cache(&KtCache::read(path)?))
        } else if doc.get("results").is_some() && doc.get("schema_version").is_some() {
            Ok(Recording::from_t4(&T4File::read(path)?, path))
        } else {
            bail!(
                "{} is neither a Kernel Tuner cache file (`cache`, `tune_params`), a T4 results \
                 file (`schema_version`, `results`) nor a tunebox results cache",
                path.display()
            )
        }
    }

    /// The measurements of a Kernel Tuner cache file: `time` (or its failure marker), and
    /// `compile_time + verification_time + benchmark_time + framework_time` as the cost.
    pub(crate) fn from_kt_cache(cache: &KtCache) -> Recording {
        let by_key = cache
            .cache
            .iter()
            .map(|r| {
                let (time_ms, status) = match r.time {
                    KtTime::Ms(ms) => (Some(ms), Status::Ok),
                    KtTime::Failed(KtFailure::Compilation) => (None, Status::CompileError),
                    KtTime::Failed(_) => (None, Status::Error),
                };
                let cost_ms = sum(&[
                    r.compile_time,
                    r.verification_time,
                    r.benchmark_time,
                    r.framework_time,
                ]);
                let m = Measurement {
                    time_ms,
                    status,
                    cost_ms,
                };
                (key_of(r.params.iter()), m)
            })
            .collect();
        let params = cache
            .tune_params_keys
            .iter()
            .map(|k| {
                (
                    k.clone(),
                    cache.tune_params.get(k).cloned().unwrap_or_default(),
                )
            })
            .collect();
        Recording {
            source: cache.path.display().to_string(),
            device: device_or_file(Some(&cache.device_name), &cache.path),
            params,
            by_key,
        }
    }

    /// The measurements of a T4 results file: the `time` measurement (else the first
    /// objective's), `compilation_time + validation + benchmark + framework` as the cost
    /// (the sum of `runtimes` when `benchmark` is absent).
    pub(crate) fn from_t4(file: &T4File, path: &Path) -> Recording {
        let mut params: IndexMap<String, Vec<ParamValue>> = IndexMap::new();
        let mut by_key = HashMap::new();
        for r in &file.results {
            for (name, value) in &r.configuration {
                let values = params.entry(name.clone()).or_default();
                if !values.contains(value) {
                    values.push(value.clone());
                }
            }
            let objective = r
                .measurement("time")
                .or_else(|| r.objectives.first().and_then(|o| r.measurement(o)))
                .and_then(|m| m.as_f64());
            let status = match r.invalidity {
                T4Invalidity::Correct if r.correctness => Status::Ok,
                T4Invalidity::Correct | T4Invalidity::Correctness => Status::Wrong,
                T4Invalidity::Compile => Status::CompileError,
                T4Invalidity::Timeout => Status::Timeout,
                T4Invalidity::Runtime | T4Invalidity::Constraints => Status::Error,
            };
            let status = if objective.is_none() && status == Status::Ok {
                Status::Error
            } else {
                status
            };
            let t = &r.times;
            let benchmark = t
                .benchmark
                .or_else(|| (!t.runtimes.is_empty()).then(|| t.runtimes.iter().sum()));
            let m = Measurement {
                time_ms: objective.filter(|_| status == Status::Ok),
                status,
                cost_ms: sum(&[t.compilation_time, t.validation, benchmark, t.framework]),
            };
            by_key.insert(key_of(r.configuration.values()), m);
        }
        let device = device_or_file(
            file.metadata.as_ref().and_then(|m| m.device.as_deref()),
            path,
        );
        Recording {
            source: path.display().to_string(),
            device,
            params,
            by_key,
        }
    }

    /// The measurements of a tunebox results cache: the median, and as the cost the timed and
    /// warmup reps at the mean (tunebox records no compile time).
    fn from_results_cache(path: &Path, text: &str) -> Result<Recording> {
        let (lines, _) = crate::results::cache::parse_lines(text);
        ensure!(
            !lines.is_empty(),
            "{} holds no readable results cache line",
            path.display()
        );
        let mut params: IndexMap<String, Vec<ParamValue>> = IndexMap::new();
        let mut by_key = HashMap::new();
        let device = device_or_file(Some(&lines[0].header.device), path);
        for line in lines {
            let r = &line.result;
            for (name, value) in r.choice.values() {
                let values = params.entry(name.clone()).or_default();
                if !values.contains(value) {
                    values.push(value.clone());
                }
            }
            let status = crate::results::parse_status(&r.status).unwrap_or(Status::Error);
            let reps = f64::from(r.reps.unwrap_or(0) + r.warmup_reps.unwrap_or(0));
            let m = Measurement {
                time_ms: r.median_ms.filter(|_| status == Status::Ok),
                status,
                cost_ms: r.mean_ms.unwrap_or(0.0) * reps,
            };
            by_key.insert(key_of(r.choice.values().map(|(_, v)| v)), m);
        }
        Ok(Recording {
            source: path.display().to_string(),
            device,
            params,
            by_key,
        })
    }

    /// The parameters and their values, in the file's order.
    pub fn params(&self) -> &IndexMap<String, Vec<ParamValue>> {
        &self.params
    }

    /// The device the recording was made on.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// How many configurations the file records.
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    /// Whether it records none.
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// The space of the recorded parameters under `restrictions` (Python expressions, such as
    /// a T1 file's conditions).
    ///
    /// # Errors
    ///
    /// A restriction that does not parse or raises.
    pub fn space(&self, restrictions: &[String]) -> crate::Result<SearchSpace> {
        SearchSpace::from_params(&self.params, restrictions)
    }
}

/// A [`Recording`] bound to a [`SearchSpace`]: the measurement of every choice, by index.
#[derive(Debug, Clone)]
pub struct Recorded {
    measurements: Vec<Measurement>,
    /// Per choice: the recording has it.
    present: Vec<bool>,
    device: String,
    source: String,
    missing: usize,
}

impl Recorded {
    /// The recorded measurement of every choice of `space`, matched by parameter values; a
    /// choice the recording lacks is failed (`error`) and costs nothing.
    ///
    /// # Errors
    ///
    /// The space's parameters are not the recording's (by name).
    pub fn new(recording: &Recording, space: &SearchSpace) -> crate::Result<Recorded> {
        let names: Vec<&str> = space.params().map(|(n, _)| n).collect();
        let mut recorded: Vec<&str> = recording.params.keys().map(String::as_str).collect();
        let mut ours = names.clone();
        recorded.sort_unstable();
        ours.sort_unstable();
        if recorded != ours {
            return Err(crate::TuneError::report(anyhow::anyhow!(
                "{} records the params {}, the space has {}: replay needs the same params",
                recording.source,
                recorded.join(", "),
                ours.join(", ")
            )));
        }
        // Position in the space of each recorded param, in the recording's order.
        let order: Vec<usize> = recording
            .params
            .keys()
            .map(|k| names.iter().position(|n| n == k).expect("same names"))
            .collect();
        let values: Vec<&[ParamValue]> = space.params().map(|(_, v)| v).collect();
        let mut missing = 0;
        let mut present = Vec::with_capacity(space.len());
        let measurements = (0..space.len())
            .map(|i| {
                let idx = space.value_indices(i).expect("an index below len");
                let key = key_of(order.iter().map(|&p| &values[p][idx[p]]));
                present.push(recording.by_key.contains_key(&key));
                recording.by_key.get(&key).copied().unwrap_or_else(|| {
                    missing += 1;
                    Measurement::MISSING
                })
            })
            .collect();
        Ok(Recorded {
            measurements,
            present,
            device: recording.device.clone(),
            source: recording.source.clone(),
            missing,
        })
    }

    /// A recording of `measurements`, one per choice by index (for tests and synthetic
    /// benchmarks).
    pub fn from_measurements(measurements: Vec<Measurement>) -> Recorded {
        Recorded {
            present: vec![true; measurements.len()],
            measurements,
            device: "synthetic".into(),
            source: "synthetic".into(),
            missing: 0,
        }
    }

    /// The measurement of choice `index` (a missing one for an index out of range).
    pub fn get(&self, index: usize) -> Measurement {
        self.measurements
            .get(index)
            .copied()
            .unwrap_or(Measurement::MISSING)
    }

    /// The measurements the recording has (choices it lacks left out), by choice index.
    pub fn present(&self) -> impl Iterator<Item = (usize, Measurement)> + '_ {
        self.measurements
            .iter()
            .zip(&self.present)
            .enumerate()
            .filter(|(_, (_, p))| **p)
            .map(|(i, (m, _))| (i, *m))
    }

    /// The device the recording was made on.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// How many choices of the space the recording lacks.
    pub fn missing(&self) -> usize {
        self.missing
    }

    /// The best (lowest) recorded time and its choice, `None` when every choice failed.
    pub fn best(&self) -> Option<(usize, f64)> {
        self.measurements
            .iter()
            .enumerate()
            .filter_map(|(i, m)| m.time_ms.map(|t| (i, t)))
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// What measuring every choice would cost, ms.
    pub fn total_cost_ms(&self) -> f64 {
        self.measurements.iter().map(|m| m.cost_ms).sum()
    }

    /// The times of the choices that did not fail.
    pub fn times(&self) -> impl Iterator<Item = f64> + '_ {
        self.measurements.iter().filter_map(|m| m.time_ms)
    }
}

/// When a simulated run stops: after `max_evals` measurements, or once the simulated time
/// reaches `max_time_ms` (the measurement that crosses it still counts, as a real run's last
/// started measurement does).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    /// Most measurements.
    pub max_evals: usize,
    /// Most simulated time, ms.
    pub max_time_ms: f64,
    /// The strategy's own time (the wall time of its asks and tells) runs on the simulated
    /// clock too, as a real run's `--max-time` counts it and as Kernel Tuner's simulation mode
    /// and the `autotuning-methodology` package count it. Off, the simulated clock is the
    /// recorded costs alone, so a replay gives the same trace on any machine.
    pub strategy_time: bool,
}

impl Budget {
    /// No limit but the space (the strategy's time not counted).
    pub const UNLIMITED: Budget = Budget {
        max_evals: usize::MAX,
        max_time_ms: f64::INFINITY,
        strategy_time: false,
    };

    /// At most `max_evals` measurements and `max_time_ms` of simulated time, the strategy's own
    /// time counted on it (as a real run counts it).
    pub fn new(max_evals: usize, max_time_ms: f64) -> Budget {
        Budget {
            max_evals,
            max_time_ms,
            strategy_time: true,
        }
    }
}

/// One simulated measurement.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TracePoint {
    /// The choice measured.
    pub index: usize,
    /// Simulated time when it finished, ms since the start.
    pub elapsed_ms: f64,
    /// Its time, `None` when it failed.
    pub time_ms: Option<f64>,
    /// The best time so far, `None` until one succeeds.
    pub best_ms: Option<f64>,
}

/// The course of a simulated run.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// Every measurement, in order.
    pub points: Vec<TracePoint>,
    /// The strategy's own time, ms: the wall time of its asks and tells, on the simulated
    /// clock when [`Budget::strategy_time`] is set.
    pub strategy_ms: f64,
}

impl Trace {
    /// The best time found.
    pub fn best_ms(&self) -> Option<f64> {
        self.points.last().and_then(|p| p.best_ms)
    }

    /// Simulated time spent, ms.
    pub fn elapsed_ms(&self) -> f64 {
        self.points.last().map_or(0.0, |p| p.elapsed_ms)
    }

    /// The best time found by simulated time `t_ms`, `None` when none yet.
    pub fn best_at(&self, t_ms: f64) -> Option<f64> {
        let n = self.points.partition_point(|p| p.elapsed_ms <= t_ms);
        n.checked_sub(1).and_then(|i| self.points[i].best_ms)
    }
}

/// The result a strategy is told for a replayed measurement (`ok` with a median of the
/// recorded time, else failed), on `device`.
pub(crate) fn result_of(
    space: &SearchSpace,
    index: usize,
    m: Measurement,
    device: &str,
) -> ChoiceResult {
    let choice = space.choice(index).expect("an index of the space");
    match m.time_ms {
        Some(ms) if m.status == Status::Ok => {
            let mut r = ChoiceResult::failed(index, choice, Status::Ok, String::new(), device);
            r.error = None;
            r.stats = Some(TimingStats::from_samples(&[ms], 0).with_stopped("replay".into()));
            r
        }
        _ => ChoiceResult::failed(
            index,
            choice,
            m.status,
            format!("replayed: recorded as {}", m.status.as_str()),
            device,
        ),
    }
}

/// Runs `strategy` over `space` with every measurement taken from `recorded`, until the
/// strategy has no more choices or the budget is spent, telling it each result as it finishes
/// (one choice at a time, in the order asked, as a run with one worker measures them). With
/// [`Budget::strategy_time`], the strategy's asks and tells advance the simulated clock by the
/// wall time they take.
pub fn simulate(
    space: &SearchSpace,
    strategy: &mut dyn Strategy,
    recorded: &Recorded,
    budget: Budget,
) -> Trace {
    simulate_with(space, strategy, recorded, budget, |_, _| {})
}

/// [`simulate`], calling `each` with every result before the strategy is told it (it may add
/// what the recording lacks: the metrics, the objective).
pub(crate) fn simulate_with(
    space: &SearchSpace,
    strategy: &mut dyn Strategy,
    recorded: &Recorded,
    budget: Budget,
    mut each: impl FnMut(&mut ChoiceResult, f64),
) -> Trace {
    let mut trace = Trace::default();
    let mut elapsed = 0.0;
    let mut best: Option<f64> = None;
    // As a run: an index asked twice is measured once, one outside the space not at all.
    let mut guard = crate::search::strategy::AskGuard::new();
    let own = |elapsed: &mut f64, trace: &mut Trace, started: std::time::Instant| {
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        trace.strategy_ms += ms;
        if budget.strategy_time {
            *elapsed += ms;
        }
    };
    'run: loop {
        let left = budget.max_evals.saturating_sub(trace.points.len());
        if left == 0 || elapsed >= budget.max_time_ms {
            break;
        }
        let started = std::time::Instant::now();
        let asked = strategy.ask(space, left);
        own(&mut elapsed, &mut trace, started);
        if asked.is_empty() {
            break;
        }
        let batch = guard.check(space.len(), asked);
        for index in batch.into_iter().take(left) {
            if elapsed >= budget.max_time_ms {
                break 'run;
            }
            let m = recorded.get(index);
            elapsed += m.cost_ms;
            if let Some(t) = m.time_ms {
                best = Some(best.map_or(t, |b: f64| b.min(t)));
            }
            trace.points.push(TracePoint {
                index,
                elapsed_ms: elapsed,
                time_ms: m.time_ms,
                best_ms: best,
            });
            let mut result = result_of(space, index, m, &recorded.device);
            each(&mut result, elapsed);
            let started = std::time::Instant::now();
            strategy.tell(index, &result);
            own(&mut elapsed, &mut trace, started);
        }
    }
    trace
}

/// A report of a replayed run: every told result, ranked (by their objective, when they carry
/// one: [`ChoiceResult::cost`]), with `elapsed_s` the simulated time.
pub fn report(
    space: &SearchSpace,
    recorded: &Recorded,
    name: &str,
    selection: Selection,
    mut results: Vec<ChoiceResult>,
    elapsed_ms: f64,
) -> Report {
    crate::results::rank(&mut results);
    let mut notes = vec![format!(
        "replayed from {}: simulated time {:.1} s",
        recorded.source,
        elapsed_ms / 1000.0
    )];
    if recorded.missing > 0 {
        notes.push(format!(
            "{} choices of the space are not in {}; replayed as failed",
            recorded.missing, recorded.source
        ));
    }
    Report {
        info: RunInfo {
            elapsed_s: elapsed_ms / 1000.0,
            notes,
            ..RunInfo::new(RunHeader {
                tunebox_version: env!("CARGO_PKG_VERSION").to_owned(),
                manifest: name.to_owned(),
                manifest_hash: String::new(),
                name: name.to_owned(),
                kernel: format!("replay of {}", recorded.source),
                backend: "replay".into(),
                device: recorded.device.clone(),
                space_size: space.len(),
                selection,
                shard: None,
                metrics: Vec::new(),
                objective: None,
            })
        },
        results,
    }
}

/// `tunebox tune FILE --replay RECORDED`: the space of `file` (a manifest or a T1 file, see
/// [`crate::load_space`]), every measurement from the recorded file, the strategy `selection`
/// names, within `budget`; the ranked report (its `elapsed_s` the simulated time) and the
/// trace. A manifest whose `objective` is a metric ranks the report by it, and its strategy is
/// told it, as a run is (the metrics computed from each recorded time); the trace's best is the
/// time.
///
/// # Errors
///
/// An invalid `file`, an unreadable recorded file, or one whose params are not the space's.
pub fn replay(
    file: &Path,
    recorded: &Path,
    selection: &Selection,
    budget: Budget,
) -> crate::Result<(Report, Trace)> {
    let space = crate::manifest::load_space(file)?;
    let recording = Recording::read(recorded)?;
    let recorded = Recorded::new(&recording, &space)?;
    let strategy = crate::search::strategies::from_selection(selection, 1)
        .map_err(|e| crate::TuneError::invalid_options(e.into()))?;
    let mut strategy = crate::search::strategy::Guarded::new(strategy);
    // The manifest's name (its `name`, a T1 file's kernel), as a run of it would be titled, and
    // what it ranks by.
    let manifest = crate::Manifest::load(file, &crate::compiler()).ok();
    let objective = manifest
        .as_ref()
        .map(|m| &m.objective)
        .filter(|o| !o.is_time());
    let mut results = Vec::new();
    let trace = simulate_with(&space, &mut strategy, &recorded, budget, |r, _| {
        if let (Some(m), Some(median)) = (&manifest, r.median_ms()) {
            r.metrics = m.metrics.evaluate(&r.choice, median);
        }
        crate::results::set_objective(std::slice::from_mut(r), objective);
        results.push(r.clone());
    });
    let name = manifest.as_ref().map_or_else(
        || {
            file.file_stem()
                .map_or_else(|| "replay".into(), |s| s.to_string_lossy().into_owned())
        },
        |m| m.name.clone(),
    );
    let mut report = report(
        &space,
        &recorded,
        &name,
        selection.clone(),
        results,
        trace.elapsed_ms(),
    );
    if let Some(m) = &manifest {
        report.info.header.metrics = m.metrics.names();
        report.info.header.objective = objective.cloned();
    }
    report.info.notes.extend(strategy.take_warnings());
    Ok((report, trace))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::formats::T1File;
    use crate::search::strategy::BruteForce;

    /// The hub's cache files, with the T1 file of their kernel.
    fn hub_files() -> Vec<(std::path::PathBuf, std::path::PathBuf)> {
        let hub = crate::manifest::formats::hub_dir();
        let mut out = Vec::new();
        for kernel in ["convolution_milo", "dedispersion_milo"] {
            for gpu in ["A100", "A4000", "A6000", "MI250X", "W6600", "W7800"] {
                out.push((
                    hub.join(format!("cachefiles/{kernel}/{gpu}.json.gz")),
                    hub.join(format!("kernels/{kernel}.json")),
                ));
            }
        }
        out
    }

    /// The minimum recorded `time` of each hub file, from Python:
    /// `min(v["time"] for v in json.load(gzip.open(f))["cache"].values() if type(v["time"]) is float)`.
    const HUB_BEST: [f64; 12] = [
        0.5536000076681376,
        1.021171996369958,
        0.6030377962291835,
        0.6587962452322245,
        1.7276193872094154,
        0.8161421902477741,
        68.1165759563446,
        147.6977825164795,
        84.21807646751404,
        49.5724800825119,
        135.0808186531067,
        50.36081421375275,
    ];

    #[test]
    fn brute_force_replay_finds_the_recorded_best_of_every_hub_file() {
        for ((cache, t1), expected) in hub_files().into_iter().zip(HUB_BEST) {
            let recording = Recording::read(&cache).unwrap();
            let t1 = T1File::read(&t1).unwrap();
            let space = recording.space(&t1.conditions()).unwrap();
            let recorded = Recorded::new(&recording, &space).unwrap();
            let trace = simulate(&space, &mut BruteForce::new(), &recorded, Budget::UNLIMITED);
            assert_eq!(trace.points.len(), space.len());
            assert_eq!(trace.best_ms(), Some(expected), "{}", cache.display());
            assert!((trace.elapsed_ms() - recorded.total_cost_ms()).abs() < 1e-6);
            // Every recorded configuration is a choice of the space (the hub brute-forced it).
            assert_eq!(space.len() - recorded.missing(), recording.len());
        }
    }

    #[test]
    fn budgets_stop_the_replay() {
        let (cache, _) = &hub_files()[0];
        let recording = Recording::read(cache).unwrap();
        let space = recording.space(&[]).unwrap();
        let recorded = Recorded::new(&recording, &space).unwrap();
        assert!(
            recorded.missing() > 0,
            "the raw space has unrecorded choices"
        );
        let by_evals = Budget {
            max_evals: 10,
            ..Budget::UNLIMITED
        };
        let trace = simulate(&space, &mut BruteForce::new(), &recorded, by_evals);
        assert_eq!(trace.points.len(), 10);
        let by_time = Budget {
            max_time_ms: 60_000.0,
            ..Budget::UNLIMITED
        };
        let trace = simulate(&space, &mut BruteForce::new(), &recorded, by_time);
        let n = trace.points.len();
        assert!(trace.elapsed_ms() >= 60_000.0);
        assert!(trace.points[n - 2].elapsed_ms < 60_000.0);
        assert_eq!(trace.best_at(-1.0), None);
        assert!(trace.best_at(60_000.0) >= trace.best_ms());
    }

    /// A strategy that asks for the same choice twice and for one outside the space.
    struct Careless(usize);

    impl Strategy for Careless {
        fn name(&self) -> &str {
            "careless"
        }
        fn ask(&mut self, _: &SearchSpace, _: usize) -> Vec<usize> {
            self.0 += 1;
            match self.0 {
                1 => vec![0, 0, 1],
                2 => vec![1, 1_000_000, 2],
                _ => Vec::new(),
            }
        }
    }

    #[test]
    fn a_replay_measures_a_repeated_index_once_and_skips_one_outside_the_space() {
        let measurements = (0..5)
            .map(|i| Measurement {
                time_ms: Some(f64::from(i) + 1.0),
                status: Status::Ok,
                cost_ms: 1.0,
            })
            .collect();
        let recorded = Recorded::from_measurements(measurements);
        let params = crate::space::tests::params(&[("X", &[0, 1, 2, 3, 4])]);
        let space = SearchSpace::new(&params, &[]).unwrap();
        let mut strategy = crate::search::strategy::Guarded::new(Box::new(Careless(0)));
        let trace = simulate(&space, &mut strategy, &recorded, Budget::UNLIMITED);
        let indices: Vec<usize> = trace.points.iter().map(|p| p.index).collect();
        assert_eq!(indices, [0, 1, 2]);
        let warnings = strategy.take_warnings();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[1].contains("1000000"), "{warnings:?}");
        // Unguarded, the replay still measures each once and nothing outside the space.
        let trace = simulate(&space, &mut Careless(0), &recorded, Budget::UNLIMITED);
        assert_eq!(trace.points.len(), 3);
    }

    /// Brute force that takes `ms` of wall time over each ask.
    struct Slow(BruteForce, u64);

    impl Strategy for Slow {
        fn name(&self) -> &str {
            "slow"
        }
        fn ask(&mut self, space: &SearchSpace, _: usize) -> Vec<usize> {
            std::thread::sleep(std::time::Duration::from_millis(self.1));
            self.0.ask(space, 1)
        }
    }

    #[test]
    fn the_strategys_own_time_runs_on_the_simulated_clock_when_asked() {
        let measurements = (0..5)
            .map(|i| Measurement {
                time_ms: Some(f64::from(i) + 1.0),
                status: Status::Ok,
                cost_ms: 10.0,
            })
            .collect();
        let recorded = Recorded::from_measurements(measurements);
        let params = crate::space::tests::params(&[("X", &[0, 1, 2, 3, 4])]);
        let space = SearchSpace::new(&params, &[]).unwrap();
        // Not counted: the recorded costs alone, 10 ms each, whatever the strategy took.
        let off = simulate(
            &space,
            &mut Slow(BruteForce::new(), 30),
            &recorded,
            Budget {
                max_time_ms: 35.0,
                ..Budget::UNLIMITED
            },
        );
        assert_eq!(off.points.len(), 4);
        assert_eq!(off.elapsed_ms(), 40.0);
        assert!(off.strategy_ms >= 4.0 * 30.0, "{}", off.strategy_ms);
        // Counted (as a real run's --max-time counts it): 30 ms or more an ask, so the budget
        // of 35 ms is spent after the first measurement.
        let on = simulate(
            &space,
            &mut Slow(BruteForce::new(), 30),
            &recorded,
            Budget::new(usize::MAX, 35.0),
        );
        // (None at all when a busy machine wakes the first ask's sleep after 35 ms.)
        assert!(on.points.len() <= 1, "{:?}", on.points);
        assert!(
            on.points.iter().all(|p| p.elapsed_ms >= 40.0),
            "{:?}",
            on.points
        );
        assert!(on.strategy_ms >= 30.0, "{}", on.strategy_ms);
        assert!(on.points.is_empty() || on.elapsed_ms() >= on.strategy_ms);
    }

    #[test]
    fn a_recording_without_a_device_is_named_by_its_file() {
        let (cache, _) = &hub_files()[0];
        let mut kt = KtCache::read(cache).unwrap();
        assert_eq!(
            Recording::from_kt_cache(&kt).device(),
            "NVIDIA A100-PCIE-40GB"
        );
        let dir = tempfile::tempdir().unwrap();
        // A Kernel Tuner cache file whose `device_name` is empty, as the hub's MI250X files.
        let path = dir.path().join("MI250X.json");
        let gz = flate2::read::GzDecoder::new(std::fs::File::open(cache).unwrap());
        let mut doc: serde_json::Value = serde_json::from_reader(gz).unwrap();
        doc["device_name"] = serde_json::json!("");
        std::fs::write(&path, doc.to_string()).unwrap();
        assert_eq!(Recording::read(&path).unwrap().device(), "MI250X");
        let hub =
            crate::manifest::formats::hub_dir().join("cachefiles/convolution_milo/MI250X.json.gz");
        assert_eq!(Recording::read(&hub).unwrap().device(), "MI250X");
        // A T4 file without a device, and one in white space, likewise.
        kt.device_name = " ".into();
        kt.path = dir.path().join("W6600.json.gz");
        assert_eq!(Recording::from_kt_cache(&kt).device(), "W6600");
        let t4_path = dir.path().join("W7800_T4.json");
        let mut t4 = T4File::from_kt_cache(&kt);
        if let Some(m) = t4.metadata.as_mut() {
            m.device = None;
        }
        t4.write(&t4_path).unwrap();
        assert_eq!(Recording::read(&t4_path).unwrap().device(), "W7800_T4");
    }

    #[test]
    fn t4_and_kernel_tuner_caches_replay_alike() {
        let (cache, _) = &hub_files()[0];
        let kt = KtCache::read(cache).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let t4_path = dir.path().join("t4.json");
        T4File::from_kt_cache(&kt).write(&t4_path).unwrap();
        let a = Recording::from_kt_cache(&kt);
        let b = Recording::read(&t4_path).unwrap();
        assert_eq!(a.len(), b.len());
        for (key, m) in &a.by_key {
            assert_eq!(b.by_key.get(key), Some(m), "{key}");
        }
    }
}
