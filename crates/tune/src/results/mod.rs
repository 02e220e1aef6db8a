//! What a run produces, in memory and as JSON: one [`ChoiceResult`] per choice and a
//! [`RunInfo`] describing the run. The same JSON shapes serve the `--json` report, the lines of
//! the results cache, `tunebox report` and `tunebox merge`.
//!
//! The area `results` holds besides: [`windows`] (a choice's windows and its estimate),
//! [`interference`] (what else ran while a window was timed), [`cache`] (the results cache) and
//! [`fingerprint`] (its keys and the manifest hash). It imports the base, the search space and
//! the manifest; never search, measuring, reporting or the run.

pub(crate) mod cache;
pub(crate) mod fingerprint;
pub(crate) mod interference;
pub(crate) mod windows;

use std::sync::Arc;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use tunebox_pool::{Status, Verification};
use tunebox_protocol::TimingStats;

use crate::manifest::objective::Objective;
use crate::results::windows::Windows;
use crate::space::Choice;

pub(crate) use crate::base::shard::ShardInfo;
pub(crate) use crate::space::choice_count as choices;

/// What became of one choice.
#[derive(Debug, Clone)]
pub struct ChoiceResult {
    /// The choice's stable index among the manifest's choices after restrictions (canonical
    /// order: the first param varies slowest).
    pub index: usize,
    /// The choice.
    pub choice: Choice,
    /// How it went (`ok`, `wrong`, `compile_error`, `error`, `crashed`, `timeout`).
    pub status: Status,
    /// The measurement that ranks it (the re-measurement, for a refined choice).
    pub stats: Option<TimingStats>,
    /// Why it failed (the full message), for every status but `ok`.
    pub error: Option<String>,
    /// The verification's numbers, when its outputs were checked.
    pub check: Option<Check>,
    /// Inputs the kernel wrote on its first call; restored before every later call.
    pub mutated_inputs: Vec<String>,
    /// The manifest's metrics at the median time.
    pub metrics: IndexMap<String, f64>,
    /// The screening median, when `stats` come from `--refine`'s re-measurement.
    pub screen_median_ms: Option<f64>,
    /// Taken from the results cache rather than measured in this run.
    pub cached: bool,
    /// What it ran on.
    pub device: String,
    /// An `ok` result's windows: each window's median and conditions, the estimate that ranks
    /// it and its interval (`None` for results of older tunebox versions and failures).
    pub windows: Option<Windows>,
    /// What ranks it, when not the time (the manifest's `objective`; see [`ChoiceResult::cost`]).
    pub objective: Option<Arc<Objective>>,
}

impl ChoiceResult {
    /// A result without a measurement.
    pub fn failed(
        index: usize,
        choice: Choice,
        status: Status,
        error: String,
        device: &str,
    ) -> ChoiceResult {
        ChoiceResult {
            index,
            choice,
            status,
            stats: None,
            error: Some(error),
            check: None,
            mutated_inputs: Vec::new(),
            metrics: IndexMap::new(),
            screen_median_ms: None,
            cached: false,
            device: device.to_owned(),
            windows: None,
            objective: None,
        }
    }

    /// The time that ranks an `ok` result, ms: the estimate over its windows (see
    /// [`Windows::estimate_ms`]), else its one measurement's median.
    pub fn median_ms(&self) -> Option<f64> {
        match (&self.windows, &self.stats) {
            (Some(w), Some(_)) => Some(w.estimate_ms),
            (_, stats) => stats.as_ref().map(|s| s.median_ms),
        }
    }

    /// What the run minimizes for an `ok` result: its median (ms), or with an objective that
    /// is a metric, the metric's value, negated when higher is better (`None` when the metric
    /// could not be evaluated for it). Strategies minimize this; the ranking sorts by it.
    pub fn cost(&self) -> Option<f64> {
        match &self.objective {
            None => self.median_ms(),
            Some(objective) => objective.cost(self.median_ms(), &self.metrics),
        }
    }

    /// The value of the objective (the median in ms, or the metric), unnegated.
    pub fn objective_value(&self) -> Option<f64> {
        let cost = self.cost()?;
        Some(match &self.objective {
            Some(o) if o.higher_is_better => -cost,
            _ => cost,
        })
    }
}

/// The verdict of verification, in numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Check {
    /// Largest absolute difference from the reference (`None`: not finite).
    pub max_abs_error: Option<f64>,
    /// Largest relative difference from the reference (`None`: not finite).
    pub max_rel_error: Option<f64>,
    /// Elements outside the tolerance.
    pub mismatches: u64,
}

impl From<&Verification> for Check {
    fn from(v: &Verification) -> Check {
        let finite = |x: f64| x.is_finite().then_some(x);
        Check {
            max_abs_error: finite(v.max_abs_error()),
            max_rel_error: finite(v.max_rel_error()),
            mismatches: v.mismatches(),
        }
    }
}

/// How the choices to measure were picked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selection {
    /// `brute-force` or `random`.
    pub strategy: String,
    /// With `random`: how many choices were sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<usize>,
    /// The seed of the random sample.
    #[serde(default)]
    pub seed: u64,
}

/// What identifies a run's results: shared by a report and every line of its results cache.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunHeader {
    /// The tunebox version that measured (shards and caches of other versions are refused).
    pub tunebox_version: String,
    /// The manifest's path, as given.
    pub manifest: String,
    /// A hash of everything in the manifest that determines the choices and their
    /// measurements (not the device): shards of one manifest share it.
    pub manifest_hash: String,
    /// The manifest's `name`, or its file stem.
    pub name: String,
    /// `entry (source)`.
    pub kernel: String,
    /// `cpu` or `cuda`.
    pub backend: String,
    /// The CPU or GPU the choices ran on.
    pub device: String,
    /// Choices after restrictions.
    pub space_size: usize,
    /// How the choices were picked.
    pub selection: Selection,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// This run's shard, if it is one.
    pub shard: Option<ShardInfo>,
    /// The metrics' names, in order.
    #[serde(default)]
    pub metrics: Vec<String>,
    /// What ranks the choices, when not the time (the manifest's `objective`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub objective: Option<Objective>,
}

#[cfg(test)]
impl RunHeader {
    /// A brute-force run of `space_size` choices of manifest `m` (kernel `k (k.c)`, cpu): what
    /// the engine's tests build their reports and cache lines on.
    pub(crate) fn for_tests(space_size: usize) -> RunHeader {
        RunHeader {
            tunebox_version: "0".into(),
            manifest: "m".into(),
            manifest_hash: "h".into(),
            name: "m".into(),
            kernel: "k (k.c)".into(),
            backend: "cpu".into(),
            device: "cpu".into(),
            space_size,
            selection: Selection {
                strategy: "brute-force".into(),
                budget: None,
                seed: 0,
            },
            shard: None,
            metrics: Vec::new(),
            objective: None,
        }
    }
}

/// A choice that was not measured (or not in every window its rounds give), and why.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NotMeasured {
    /// The choice's stable index.
    pub index: usize,
    /// The choice.
    pub choice: Choice,
    /// `max_time` or `interrupted`.
    pub reason: String,
}

/// `--refine`: the top choices re-measured with more reps.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct RefineInfo {
    /// How many of the best were re-measured.
    pub top: usize,
    /// The factor applied to `rep_ms` and `max_reps`.
    pub rep_factor: f64,
}

/// Where results came from the cache, and those it could not keep.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CacheInfo {
    /// The results cache's path.
    pub path: String,
    /// Choices taken from it rather than measured.
    pub hits: usize,
    /// Results of the run that could not be written to it (a full or read-only file system):
    /// a re-run measures them again.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub not_cached: usize,
    /// Why the first of them could not be written, with the fix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_cached_reason: Option<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A run, described.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunInfo {
    #[serde(flatten)]
    /// What identifies the run's results.
    pub header: RunHeader,
    #[serde(default)]
    /// Wall-clock time of the run, in seconds.
    pub elapsed_s: f64,
    #[serde(default)]
    /// Worker processes measuring in parallel (0: nothing was measured).
    pub workers: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// `refine`, when the best were re-measured.
    pub refine: Option<RefineInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// The results cache, when one was used.
    pub cache: Option<CacheInfo>,
    /// Stopped by Ctrl-C (SIGINT) or SIGTERM before every choice was measured.
    #[serde(default)]
    pub interrupted: bool,
    #[serde(default)]
    /// Choices selected but not measured (stopped, out of time), by index.
    pub not_measured: Vec<NotMeasured>,
    /// Choices measured, but in fewer windows than their rounds give: the run stopped during
    /// them (`interrupted`, `max_time`), by index. Their results are in `results`; the same
    /// command run again gives them the rest of their rounds (their lines in the results
    /// cache say that their windows are not complete).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unfinished: Vec<NotMeasured>,
    /// Things the user should know about the run.
    #[serde(default)]
    pub notes: Vec<String>,
    /// `tunebox merge`: the files merged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged_from: Vec<String>,
    /// `tunebox merge`: indices of the choices no file has.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<usize>,
    /// `tunebox merge --across-devices`: results of different devices ranked together.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub across_devices: bool,
    /// How the windows went: interference seen, windows measured again, how sure the pick is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<RunConditions>,
}

impl RunInfo {
    /// A run of `header` that took no time and measured nothing, with no notes: what a report
    /// starts from before its fields are filled in (one constructor for every kind of report).
    pub fn new(header: RunHeader) -> RunInfo {
        RunInfo {
            header,
            elapsed_s: 0.0,
            workers: 0,
            refine: None,
            cache: None,
            interrupted: false,
            not_measured: Vec::new(),
            unfinished: Vec::new(),
            notes: Vec::new(),
            merged_from: Vec::new(),
            missing: Vec::new(),
            across_devices: false,
            conditions: None,
        }
    }
}

/// A run whose choices' windows drift further apart than this ([`RunConditions::drift`])
/// warns that its ranking may not hold, whatever `/proc/stat` said.
pub(crate) const DRIFT_WARN: f64 = 0.10;

/// The machine while a run measured, and how sure its pick is (see docs/performance.md,
/// "Rankings that hold").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConditions {
    /// Rounds of short windows after screening (0: each choice was measured once).
    pub rounds: usize,
    /// Windows measured, screening included.
    pub windows: usize,
    /// Windows in which other CPUs were busy or time was stolen.
    pub disturbed: usize,
    /// Windows measured again because they were disturbed.
    pub remeasured: usize,
    /// Choices raced for the top (their interval overlapped the best's) after the rounds.
    pub raced: usize,
    /// Choices settled after two windows (their screening window and their first round's;
    /// one window before issue 33's ninth session): the faster was behind the best by more
    /// than [`RunConditions::settle_margin`], with no other choice that close, so that no later
    /// window could have changed their rank (0 in reports made before it was kept).
    #[serde(default)]
    pub settled: usize,
    /// How far behind the best a choice's faster window had to be to settle it: the
    /// largest spread between the fastest and the slowest window of any choice the run had
    /// measured twice or more when it decided (0.4: 40 %; 0 when nothing was settled).
    #[serde(default)]
    pub settle_margin: f64,
    /// Choices whose rounds stopped early, their estimate confirmed: their two fastest windows
    /// agreed within their reps' noise ([`crate::Windows::confirmed`]) before the last round
    /// (0 in reports made before it was kept).
    #[serde(default)]
    pub confirmed_early: usize,
    /// First rounds' windows measured while the next choice in order compiled, in time a
    /// worker would otherwise have waited (counted in [`RunConditions::windows`]; 0 in
    /// reports made before it was kept).
    #[serde(default)]
    pub beside_compiles: usize,
    /// The slowest speed probe over the fastest (1: the machine's speed held).
    pub probe_ratio: f64,
    /// How far the machine's speed drifted, by the choices' own windows after screening: the
    /// median over choices of slowest window / fastest window, less 1 (0.25: 25 %; 0 in
    /// reports made before it was kept).
    #[serde(default)]
    pub drift: f64,
    /// The 1-minute load average at the start and at the end.
    pub load: [f64; 2],
    /// Interference was seen: the machine was busy.
    pub busy: bool,
    /// How sure the pick is, in words (the `best:` line's).
    pub confidence: String,
    /// Choices whose interval overlaps the best's.
    pub ties: usize,
}

impl RunConditions {
    /// Whether the choices' windows drifted apart by more than 10 % ([`RunConditions::drift`]):
    /// the ranking may not hold on a second run, though nothing else was seen running.
    pub fn drifted(&self) -> bool {
        self.drift > DRIFT_WARN
    }
}

/// A run's results, ranked.
#[derive(Debug, Clone)]
pub struct Report {
    /// What the run was.
    pub info: RunInfo,
    /// Ranked within each device: `ok` by median ascending (refined ones first), then the
    /// others by status and index.
    pub results: Vec<ChoiceResult>,
}

impl Report {
    /// The results of each device (one group unless results from several devices are kept
    /// apart), each ranked.
    pub fn groups(&self) -> Vec<(&str, Vec<&ChoiceResult>)> {
        if self.info.across_devices {
            return vec![(&self.info.header.device, self.results.iter().collect())];
        }
        let mut groups: Vec<(&str, Vec<&ChoiceResult>)> = Vec::new();
        for r in &self.results {
            match groups.iter_mut().find(|(d, _)| *d == r.device) {
                Some((_, members)) => members.push(r),
                None => groups.push((&r.device, vec![r])),
            }
        }
        groups
    }
}

/// Sorts `ok` results by their [`ChoiceResult::cost`] (the median, or the objective; refined
/// ones first; one without its objective after those with it), then the rest by status; equal
/// keys keep the choices' canonical order.
pub(crate) fn rank(results: &mut [ChoiceResult]) {
    results.sort_by(|a, b| {
        let key = |r: &ChoiceResult| match (r.status, r.median_ms()) {
            (Status::Ok, Some(_)) => (
                0u8,
                r.screen_median_ms.is_none(),
                r.cost().unwrap_or(f64::INFINITY),
                r.index,
            ),
            (status, _) => (1 + status as u8, false, 0.0, r.index),
        };
        let (ka, kb) = (key(a), key(b));
        ka.0.cmp(&kb.0)
            .then(ka.1.cmp(&kb.1))
            .then(ka.2.total_cmp(&kb.2))
            .then(ka.3.cmp(&kb.3))
    });
}

/// The best `ok` result among `results` (ranked).
pub fn best<'a>(results: impl IntoIterator<Item = &'a ChoiceResult>) -> Option<&'a ChoiceResult> {
    results
        .into_iter()
        .next()
        .filter(|r| r.status == Status::Ok)
}

/// A status from its report name.
pub(crate) fn parse_status(name: &str) -> Option<Status> {
    [
        Status::Ok,
        Status::Wrong,
        Status::CompileError,
        Status::Error,
        Status::Crashed,
        Status::Timeout,
        Status::Suspicious,
    ]
    .into_iter()
    .find(|s| s.as_str() == name)
}

/// One result as JSON (the entries of a report's `results`, and of cache lines).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ResultJson {
    /// 1-based rank among the `ok` results of its device (reports only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<usize>,
    pub index: usize,
    pub choice: Choice,
    pub status: String,
    pub median_ms: Option<f64>,
    pub mean_ms: Option<f64>,
    pub min_ms: Option<f64>,
    pub max_ms: Option<f64>,
    pub p20_ms: Option<f64>,
    pub p80_ms: Option<f64>,
    pub stddev_ms: Option<f64>,
    pub reps: Option<u32>,
    #[serde(default)]
    pub warmup_reps: Option<u32>,
    #[serde(default)]
    pub stopped: Option<String>,
    /// Timed reps that were preempted and count their thread's CPU time (`RepClock`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempted_reps: Option<u32>,
    pub error: Option<String>,
    pub max_abs_error: Option<f64>,
    pub max_rel_error: Option<f64>,
    pub mismatches: Option<u64>,
    /// Inputs the kernel wrote (restored before every call).
    #[serde(default)]
    pub mutated_inputs: Vec<String>,
    #[serde(default)]
    pub metrics: IndexMap<String, f64>,
    /// Re-measured by `--refine`; `screen_median_ms` is the first measurement's median.
    #[serde(default)]
    pub refined: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen_median_ms: Option<f64>,
    /// Taken from the results cache.
    #[serde(default)]
    pub cached: bool,
    #[serde(default)]
    pub device: String,
    /// The windows that `median_ms` (their estimate) rests on, with their conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub windows: Option<Windows>,
}

impl ResultJson {
    pub(crate) fn from_result(r: &ChoiceResult, rank: Option<usize>) -> ResultJson {
        let s = r.stats.as_ref();
        ResultJson {
            rank,
            index: r.index,
            choice: r.choice.clone(),
            status: r.status.as_str().to_owned(),
            median_ms: s.and(r.median_ms()),
            mean_ms: s.map(|s| s.mean_ms),
            min_ms: s.map(|s| s.min_ms),
            max_ms: s.map(|s| s.max_ms),
            p20_ms: s.map(|s| s.p20_ms),
            p80_ms: s.map(|s| s.p80_ms),
            stddev_ms: s.map(|s| s.stddev_ms),
            reps: s.map(|s| s.reps),
            warmup_reps: s.map(|s| s.warmup_reps),
            stopped: s.map(|s| s.stopped.clone()),
            preempted_reps: s.map(|s| s.preempted_reps),
            error: r.error.clone(),
            max_abs_error: r.check.and_then(|c| c.max_abs_error),
            max_rel_error: r.check.and_then(|c| c.max_rel_error),
            mismatches: r.check.map(|c| c.mismatches),
            mutated_inputs: r.mutated_inputs.clone(),
            metrics: r.metrics.clone(),
            refined: r.screen_median_ms.is_some(),
            screen_median_ms: r.screen_median_ms,
            cached: r.cached,
            device: r.device.clone(),
            windows: r.windows.clone(),
        }
    }

    /// Back to a result; `None` (with the reason) for an unknown status.
    pub(crate) fn into_result(self, default_device: &str) -> Result<ChoiceResult, String> {
        let status = parse_status(&self.status)
            .ok_or_else(|| format!("unknown status {:?}", self.status))?;
        let stats = match (
            self.median_ms,
            self.mean_ms,
            self.min_ms,
            self.max_ms,
            self.p20_ms,
            self.p80_ms,
            self.stddev_ms,
            self.reps,
        ) {
            (
                Some(median_ms),
                Some(mean_ms),
                Some(min_ms),
                Some(max_ms),
                Some(p20_ms),
                Some(p80_ms),
                Some(stddev_ms),
                Some(reps),
            ) => Some(
                TimingStats::unmeasured()
                    .with_median_ms(median_ms)
                    .with_mean_ms(mean_ms)
                    .with_min_ms(min_ms)
                    .with_max_ms(max_ms)
                    .with_p20_ms(p20_ms)
                    .with_p80_ms(p80_ms)
                    .with_stddev_ms(stddev_ms)
                    .with_reps(reps)
                    .with_warmup_reps(self.warmup_reps.unwrap_or(0))
                    .with_stopped(self.stopped.unwrap_or_default())
                    .with_preempted_reps(self.preempted_reps.unwrap_or(0)),
            ),
            _ => None,
        };
        if status == Status::Ok && stats.is_none() {
            return Err("an ok result without its timing".into());
        }
        let check = self.mismatches.map(|mismatches| Check {
            max_abs_error: self.max_abs_error,
            max_rel_error: self.max_rel_error,
            mismatches,
        });
        Ok(ChoiceResult {
            index: self.index,
            choice: self.choice,
            status,
            stats,
            error: self.error,
            check,
            mutated_inputs: self.mutated_inputs,
            metrics: self.metrics,
            screen_median_ms: self.screen_median_ms,
            cached: self.cached,
            device: if self.device.is_empty() {
                default_device.to_owned()
            } else {
                self.device
            },
            windows: self.windows,
            objective: None,
        })
    }
}

/// The best choice, in a report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BestJson {
    pub index: usize,
    pub choice: Choice,
    pub median_ms: f64,
    #[serde(default)]
    pub metrics: IndexMap<String, f64>,
    /// `-DNAME=VALUE …`, ready for a compiler command line.
    #[serde(default)]
    pub defines: String,
    /// `{ NAME = VALUE, … }`, ready for a TOML file.
    #[serde(default)]
    pub toml: String,
    #[serde(default)]
    pub device: String,
}

/// A whole report as JSON.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ReportJson {
    #[serde(flatten)]
    pub info: RunInfo,
    pub results: Vec<ResultJson>,
    /// The best choice (of the first device, when results of several devices are kept apart).
    pub best: Option<BestJson>,
    /// The best choice of each device, when there are several.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub best_per_device: Vec<BestJson>,
}

/// `-DBM=32 -DBN=64`.
pub fn define_line(choice: &Choice) -> String {
    choice
        .defines()
        .iter()
        .map(|d| format!("-D{}={}", d.name, d.value))
        .collect::<Vec<_>>()
        .join(" ")
}

impl BestJson {
    pub(crate) fn of(r: &ChoiceResult) -> Option<BestJson> {
        Some(BestJson {
            index: r.index,
            choice: r.choice.clone(),
            median_ms: r.median_ms()?,
            metrics: r.metrics.clone(),
            defines: define_line(&r.choice),
            toml: r.choice.toml(),
            device: r.device.clone(),
        })
    }
}

impl Report {
    /// The report as JSON.
    pub(crate) fn to_json(&self) -> ReportJson {
        let groups = self.groups();
        let mut results = Vec::with_capacity(self.results.len());
        let mut bests = Vec::new();
        for (_, members) in &groups {
            let mut rank = 0;
            for r in members {
                let rank = (r.status == Status::Ok).then(|| {
                    rank += 1;
                    rank
                });
                results.push(ResultJson::from_result(r, rank));
            }
            if let Some(b) = best(members.iter().copied()).and_then(BestJson::of) {
                bests.push(b);
            }
        }
        ReportJson {
            info: self.info.clone(),
            results,
            best: bests.first().cloned(),
            best_per_device: if groups.len() > 1 { bests } else { Vec::new() },
        }
    }
}

impl ReportJson {
    /// Back to a report, ranking the results again.
    pub(crate) fn into_report(self) -> Result<Report, String> {
        let device = self.info.header.device.clone();
        let mut results = self
            .results
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                r.into_result(&device)
                    .map_err(|e| format!("results[{i}]: {e}"))
            })
            .collect::<Result<Vec<_>, String>>()?;
        set_objective(&mut results, self.info.header.objective.as_ref());
        if self.info.across_devices {
            rank(&mut results);
        } else {
            rank_by_device(&mut results);
        }
        Ok(Report {
            info: self.info,
            results,
        })
    }
}

/// Gives `results` the run's `objective` (`None` or the time: ranked by time).
pub(crate) fn set_objective(results: &mut [ChoiceResult], objective: Option<&Objective>) {
    let objective = objective.filter(|o| !o.is_time()).cloned().map(Arc::new);
    for r in results {
        r.objective.clone_from(&objective);
    }
}

/// Ranks the results of each device, keeping the devices in order of first appearance.
pub(crate) fn rank_by_device(results: &mut Vec<ChoiceResult>) {
    let mut devices: Vec<String> = Vec::new();
    for r in results.iter() {
        if !devices.contains(&r.device) {
            devices.push(r.device.clone());
        }
    }
    let mut all = std::mem::take(results);
    for device in devices {
        let (mut mine, rest): (Vec<_>, Vec<_>) = all.into_iter().partition(|r| r.device == device);
        rank(&mut mine);
        results.extend(mine);
        all = rest;
    }
}
