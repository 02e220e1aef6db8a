//! The figures of a run: the table printed at the end and `summary.json`.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::{Value, json};

use crate::stats::Summary;

/// What a figure is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A tunebox figure with a target from issue 9.
    Target,
    /// A physical floor measured in the same run (socketpair, fork+exec, memcpy).
    Floor,
    /// A tunebox figure shown for context, without a target.
    Info,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Target => "target",
            Kind::Floor => "floor",
            Kind::Info => "info",
        }
    }
}

/// Which way a figure improves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Better {
    /// Latencies, overheads.
    Lower,
    /// Rates, bandwidths.
    Higher,
}

/// A figure's target: its median must be at most (or at least) `limit`, in the figure's unit.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Target {
    pub(crate) better: Better,
    pub(crate) limit: f64,
    /// How the target was set, e.g. `≤ 1.5× floor`.
    pub(crate) text: String,
}

impl Target {
    /// `median ≤ limit`.
    pub(crate) fn at_most(limit: f64, text: impl Into<String>) -> Target {
        Target {
            better: Better::Lower,
            limit,
            text: text.into(),
        }
    }

    /// `median ≥ limit`.
    pub(crate) fn at_least(limit: f64, text: impl Into<String>) -> Target {
        Target {
            better: Better::Higher,
            limit,
            text: text.into(),
        }
    }

    fn met_by(&self, value: f64) -> bool {
        match self.better {
            Better::Lower => value <= self.limit,
            Better::Higher => value >= self.limit,
        }
    }
}

/// The unit of a figure's samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    Micros,
    Millis,
    TasksPerSec,
}

impl Unit {
    /// ASCII name, as written to JSON.
    fn key(self) -> &'static str {
        match self {
            Unit::Micros => "us",
            Unit::Millis => "ms",
            Unit::TasksPerSec => "tasks/s",
        }
    }

    /// Name shown in the table.
    fn display(self) -> &'static str {
        match self {
            Unit::Micros => "µs",
            other => other.key(),
        }
    }
}

/// One row of the table.
#[derive(Debug, Clone)]
pub(crate) struct Figure {
    /// Stable identifier, e.g. `ping_process`.
    pub(crate) key: &'static str,
    /// What is measured, for people.
    pub(crate) name: String,
    pub(crate) kind: Kind,
    pub(crate) unit: Unit,
    pub(crate) summary: Summary,
    pub(crate) target: Option<Target>,
    /// A condition besides the median that the target requires (e.g. "every worker reaped");
    /// `None` when there is none.
    pub(crate) condition: Option<(String, bool)>,
    /// Context: what the sample is, what was not built yet, a fallback that was taken.
    pub(crate) note: String,
    /// The Python systems' figures from issue 9, measured on the reference machine.
    pub(crate) anchors: &'static str,
    /// The samples themselves, in the order taken, for figures with few of them (written to
    /// JSON, to show a distribution's shape).
    pub(crate) raw: Vec<f64>,
}

/// Figures with at most this many samples keep them for the JSON.
const RAW_SAMPLES: usize = 200;

impl Figure {
    /// A figure without target, condition or note.
    pub(crate) fn new(
        key: &'static str,
        name: impl Into<String>,
        kind: Kind,
        unit: Unit,
        summary: Summary,
    ) -> Figure {
        Figure {
            key,
            name: name.into(),
            kind,
            unit,
            summary,
            target: None,
            condition: None,
            note: String::new(),
            anchors: "",
            raw: Vec::new(),
        }
    }

    /// A figure summarizing `samples`, which it keeps for the JSON when there are at most 200.
    ///
    /// # Errors
    ///
    /// No samples, or a NaN among them.
    pub(crate) fn from_samples(
        key: &'static str,
        name: impl Into<String>,
        kind: Kind,
        unit: Unit,
        samples: &[f64],
    ) -> Result<Figure> {
        Ok(Figure::new(key, name, kind, unit, Summary::of(samples)?).samples(samples))
    }

    pub(crate) fn target(mut self, target: Target) -> Figure {
        self.target = Some(target);
        self
    }

    pub(crate) fn condition(mut self, what: impl Into<String>, holds: bool) -> Figure {
        self.condition = Some((what.into(), holds));
        self
    }

    pub(crate) fn note(mut self, note: impl Into<String>) -> Figure {
        self.note = note.into();
        self
    }

    /// Keeps `samples` for the JSON when there are at most 200 of them.
    pub(crate) fn samples(mut self, samples: &[f64]) -> Figure {
        if samples.len() <= RAW_SAMPLES {
            self.raw = samples.to_vec();
        }
        self
    }

    pub(crate) fn anchors(mut self, anchors: &'static str) -> Figure {
        self.anchors = anchors;
        self
    }

    /// Whether the target is met (median within the limit and the condition holds); `None`
    /// without a target.
    pub(crate) fn met(&self) -> Option<bool> {
        let target = self.target.as_ref()?;
        let condition = self.condition.as_ref().is_none_or(|(_, holds)| *holds);
        Some(target.met_by(self.summary.median) && condition)
    }

    /// This figure's row of the table: name, median, p90, min (in its unit), target, met.
    fn row(&self) -> [String; 6] {
        let unit = self.unit.display();
        let cell = |v: f64| format!("{} {unit}", number(v));
        [
            self.name.clone(),
            cell(self.summary.median),
            cell(self.summary.p90),
            cell(self.summary.min),
            self.target_cell(),
            self.met_cell(),
        ]
    }

    /// The table's target cell: `≤ limit unit (how it was set)`, `(floor)` for a floor without
    /// target, `-` for another figure without one.
    fn target_cell(&self) -> String {
        match &self.target {
            Some(t) => {
                let op = if t.better == Better::Lower {
                    "≤"
                } else {
                    "≥"
                };
                format!(
                    "{op} {} {} ({})",
                    number(t.limit),
                    self.unit.display(),
                    t.text
                )
            }
            None if self.kind == Kind::Floor => "(floor)".into(),
            None => "-".into(),
        }
    }

    /// The table's met cell: `yes` or `NO`, with the condition and whether it holds; empty
    /// without a target.
    fn met_cell(&self) -> String {
        let met = match self.met() {
            Some(true) => "yes".into(),
            Some(false) => "NO".into(),
            None => String::new(),
        };
        match &self.condition {
            Some((what, holds)) if self.met().is_some() => {
                format!("{met} ({what}: {})", if *holds { "yes" } else { "no" })
            }
            _ => met,
        }
    }

    /// This figure in `summary.json`: its statistics, unit, target, condition, note, anchors
    /// and raw samples.
    fn json(&self) -> Value {
        json!({
            "key": self.key,
            "figure": self.name,
            "kind": self.kind.as_str(),
            "unit": self.unit.key(),
            "median": self.summary.median,
            "p90": self.summary.p90,
            "min": self.summary.min,
            "max": self.summary.max,
            "mean": self.summary.mean,
            "samples": self.summary.n,
            "better": match self.target.as_ref().map(|t| t.better) {
                Some(Better::Higher) => "higher",
                Some(Better::Lower) => "lower",
                None => "n/a",
            },
            "target": self.target.as_ref().map(|t| t.limit),
            "target_text": self.target.as_ref().map(|t| t.text.clone()),
            "condition": self.condition.as_ref().map(|(what, holds)| json!({
                "what": what, "holds": holds,
            })),
            "met": self.met(),
            "note": self.note,
            "python_anchors": self.anchors,
            "raw_samples": self.raw,
        })
    }
}

/// One cell of the scaling table: `candidates` trivial requests on `workers` warm workers.
#[derive(Debug, Clone)]
pub(crate) struct ScalingRow {
    pub(crate) workers: usize,
    pub(crate) candidates: usize,
    /// Wall time of one `TuningProcessPool::benchmark` call, ms.
    pub(crate) summary_ms: Summary,
}

impl ScalingRow {
    /// Median wall time per candidate, µs.
    pub(crate) fn us_per_candidate(&self) -> f64 {
        self.summary_ms.median * 1e3 / self.candidates as f64
    }

    /// This cell in `summary.json`: workers, candidates, statistics (ms), µs per candidate.
    fn json(&self) -> Value {
        json!({
            "workers": self.workers,
            "candidates": self.candidates,
            "median_ms": self.summary_ms.median,
            "p90_ms": self.summary_ms.p90,
            "min_ms": self.summary_ms.min,
            "samples": self.summary_ms.n,
            "us_per_candidate": self.us_per_candidate(),
        })
    }
}

/// The machine a run was made on.
#[derive(Debug, Clone)]
pub(crate) struct Machine {
    pub(crate) cpu: String,
    pub(crate) cores: usize,
    pub(crate) kernel: String,
}

impl Machine {
    /// Reads `/proc/cpuinfo` and `/proc/sys/kernel/osrelease`; unknown parts say so.
    pub(crate) fn detect() -> Machine {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, name)| name.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown CPU".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|k| format!("Linux {}", k.trim()))
            .unwrap_or_else(|_| "unknown kernel".into());
        Machine {
            cpu,
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel,
        }
    }
}

/// Everything a run measured.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    pub(crate) machine: Machine,
    pub(crate) quick: bool,
    pub(crate) elapsed_s: f64,
    pub(crate) figures: Vec<Figure>,
    pub(crate) scaling: Vec<ScalingRow>,
}

/// `value` with as many decimals as make sense for its magnitude.
fn number(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 1000.0 {
        format!("{value:.0}")
    } else if magnitude >= 100.0 {
        format!("{value:.1}")
    } else if magnitude >= 10.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

impl Report {
    /// Figures with a target that missed it.
    pub(crate) fn missed(&self) -> Vec<&Figure> {
        self.figures
            .iter()
            .filter(|f| f.met() == Some(false))
            .collect()
    }

    /// The table printed at the end of a run: the figures, the scaling table (when measured),
    /// then how many targets were met and the figures' notes.
    pub(crate) fn table(&self) -> String {
        let mut out = render(&self.figure_rows());
        if !self.scaling.is_empty() {
            out.push('\n');
            out.push_str(&render(&self.scaling_rows()));
        }
        out.push_str(&self.footer());
        out
    }

    /// The rows of the figures' table: the header, then targets, context figures and floors.
    fn figure_rows(&self) -> Vec<[String; 6]> {
        let mut rows = vec![[
            "figure".to_owned(),
            "tunebox median".to_owned(),
            "p90".to_owned(),
            "min".to_owned(),
            "target".to_owned(),
            "met?".to_owned(),
        ]];
        for kind in [Kind::Target, Kind::Info, Kind::Floor] {
            for figure in self.figures.iter().filter(|f| f.kind == kind) {
                rows.push(figure.row());
            }
        }
        rows
    }

    /// The rows of the scaling table: the header, then one row per cell.
    fn scaling_rows(&self) -> Vec<[String; 6]> {
        let mut rows = vec![[
            "scaling: candidates".to_owned(),
            "workers".to_owned(),
            "median".to_owned(),
            "p90".to_owned(),
            "min".to_owned(),
            "per candidate".to_owned(),
        ]];
        for row in &self.scaling {
            rows.push([
                row.candidates.to_string(),
                row.workers.to_string(),
                format!("{} ms", number(row.summary_ms.median)),
                format!("{} ms", number(row.summary_ms.p90)),
                format!("{} ms", number(row.summary_ms.min)),
                format!("{} µs", number(row.us_per_candidate())),
            ]);
        }
        rows
    }

    /// The lines under the tables: targets met, the run's mode and length, the notes.
    fn footer(&self) -> String {
        let mut out = String::new();
        let with_target: Vec<_> = self.figures.iter().filter_map(Figure::met).collect();
        let met = with_target.iter().filter(|m| **m).count();
        let _ = writeln!(
            out,
            "\n{met} of {} targets met ({} run, {:.1} s). Notes:",
            with_target.len(),
            self.mode(),
            self.elapsed_s
        );
        for figure in self.figures.iter().filter(|f| !f.note.is_empty()) {
            let _ = writeln!(out, "- {}: {}", figure.name, figure.note);
        }
        out
    }

    /// `quick` or `full`, as the table and the JSON name the run.
    fn mode(&self) -> &'static str {
        if self.quick { "quick" } else { "full" }
    }

    /// `summary.json`: the machine, every figure (median, p90, min, unit, target, met) and the
    /// scaling table.
    pub(crate) fn json(&self) -> Value {
        let figures: Vec<Value> = self.figures.iter().map(Figure::json).collect();
        let scaling: Vec<Value> = self.scaling.iter().map(ScalingRow::json).collect();
        json!({
            "tunebox_version": env!("CARGO_PKG_VERSION"),
            "mode": self.mode(),
            "elapsed_s": self.elapsed_s,
            "machine": {
                "cpu": self.machine.cpu,
                "cores": self.machine.cores,
                "kernel": self.machine.kernel,
            },
            "figures": figures,
            "scaling": scaling,
        })
    }

    /// Writes [`Report::json`] to `path`, creating its directory.
    pub(crate) fn write_json(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let text = serde_json::to_string_pretty(&self.json()).context("serializing the report")?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("cannot write {}", path.display()))
    }
}

/// Left-aligned columns separated by two spaces, with a rule under the header.
fn render<const N: usize>(rows: &[[String; N]]) -> String {
    let mut widths = [0usize; N];
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(widths) {
            let pad = width - cell.chars().count();
            line.push_str(cell);
            line.push_str(&" ".repeat(pad + 2));
        }
        out.push_str(line.trim_end());
        out.push('\n');
        if i == 0 {
            let total: usize = widths.iter().sum::<usize>() + 2 * (N - 1);
            out.push_str(&"-".repeat(total));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(median: f64) -> Summary {
        Summary::of(&[median]).unwrap()
    }

    #[test]
    fn targets_compare_the_median_and_the_condition() {
        let f = Figure::new("x", "x", Kind::Target, Unit::Millis, summary(2.0))
            .target(Target::at_most(3.0, "≤ 3 ms"));
        assert_eq!(f.met(), Some(true));
        assert_eq!(f.clone().condition("reaped", false).met(), Some(false));
        let rate = Figure::new("r", "r", Kind::Target, Unit::TasksPerSec, summary(40e3))
            .target(Target::at_least(50e3, "≥ 50k/s"));
        assert_eq!(rate.met(), Some(false));
        let floor = Figure::new("f", "f", Kind::Floor, Unit::Micros, summary(8.0));
        assert_eq!(floor.met(), None);
    }

    #[test]
    fn json_has_the_fields_of_every_figure() {
        let report = Report {
            machine: Machine {
                cpu: "cpu".into(),
                cores: 2,
                kernel: "k".into(),
            },
            quick: true,
            elapsed_s: 1.0,
            figures: vec![
                Figure::new("ping", "ping", Kind::Target, Unit::Micros, summary(20.0))
                    .target(Target::at_most(24.0, "≤ 1.5× floor")),
            ],
            scaling: vec![ScalingRow {
                workers: 2,
                candidates: 10,
                summary_ms: summary(1.0),
            }],
        };
        let json = report.json();
        let figure = &json["figures"][0];
        for field in ["median", "p90", "min", "unit", "target", "met"] {
            assert!(!figure[field].is_null(), "{field} missing: {figure}");
        }
        assert_eq!(figure["unit"], "us");
        assert_eq!(figure["met"], true);
        assert_eq!(json["scaling"][0]["us_per_candidate"], 100.0);
        assert!(report.table().contains("1 of 1 targets met"));
    }

    /// A quick report of a floor, a context figure and two targets (one missing its condition),
    /// listed out of the table's order.
    fn mixed_report(scaling: Vec<ScalingRow>) -> Report {
        Report {
            machine: Machine {
                cpu: "cpu".into(),
                cores: 2,
                kernel: "k".into(),
            },
            quick: true,
            elapsed_s: 1.0,
            figures: vec![
                Figure::new("f", "a floor", Kind::Floor, Unit::Micros, summary(8.0)),
                Figure::new(
                    "i",
                    "a context figure",
                    Kind::Info,
                    Unit::Millis,
                    summary(4.0),
                ),
                Figure::new(
                    "r",
                    "a rate",
                    Kind::Target,
                    Unit::TasksPerSec,
                    summary(60e3),
                )
                .target(Target::at_least(50e3, "issue 9"))
                .note("a note"),
                Figure::new("t", "a timeout", Kind::Target, Unit::Millis, summary(2.0))
                    .target(Target::at_most(3.0, "issue 9"))
                    .condition("reaped", false),
            ],
            scaling,
        }
    }

    /// The cells of a table line (columns are separated by at least two spaces).
    fn cells(line: &str) -> Vec<&str> {
        line.split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .collect()
    }

    #[test]
    fn table_lists_targets_then_context_then_floors_with_their_cells() {
        let table = mixed_report(Vec::new()).table();
        let lines: Vec<&str> = table.lines().collect();
        let header = ["figure", "tunebox median", "p90", "min", "target", "met?"];
        assert_eq!(cells(lines[0]), header);
        assert!(lines[1].chars().all(|c| c == '-'), "{table}");
        let rows: Vec<Vec<&str>> = lines[2..6].iter().map(|l| cells(l)).collect();
        let rate = ["a rate", "60000 tasks/s", "60000 tasks/s", "60000 tasks/s"];
        assert_eq!(rows[0][..4], rate);
        assert_eq!(rows[0][4..], ["≥ 50000 tasks/s (issue 9)", "yes"]);
        assert_eq!(rows[1][0], "a timeout");
        assert_eq!(rows[1][4..], ["≤ 3.000 ms (issue 9)", "NO (reaped: no)"]);
        assert_eq!(rows[2][0], "a context figure");
        assert_eq!(rows[2][4..], ["-"]);
        assert_eq!(rows[3][0], "a floor");
        assert_eq!(rows[3][4..], ["(floor)"]);
        assert!(!table.contains("scaling"), "{table}");
        let footer = "\n\n1 of 2 targets met (quick run, 1.0 s). Notes:\n- a rate: a note\n";
        assert!(table.ends_with(footer), "{table}");
    }

    #[test]
    fn table_shows_the_scaling_cells_per_candidate() {
        let table = mixed_report(vec![ScalingRow {
            workers: 2,
            candidates: 10,
            summary_ms: summary(1.0),
        }])
        .table();
        let header = table
            .lines()
            .position(|l| l.starts_with("scaling: candidates"))
            .expect("a scaling table");
        let row = table.lines().nth(header + 2).unwrap_or_default();
        assert_eq!(
            cells(row),
            ["10", "2", "1.000 ms", "1.000 ms", "1.000 ms", "100.0 µs"]
        );
    }

    #[test]
    fn numbers_keep_a_sensible_precision() {
        assert_eq!(number(12345.6), "12346");
        assert_eq!(number(123.45), "123.5");
        assert_eq!(number(12.345), "12.35");
        assert_eq!(number(0.01234), "0.012");
    }
}
