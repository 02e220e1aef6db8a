//! Report files: JSON and CSV, and reading reports back from a JSON report or a results cache
//! (`tunebox report`, `tunebox merge`).
//!
//! The area `report` holds besides: [`interchange`] (a run as T4; caches and T4 files as
//! reports), [`merge`] (shards), [`ranking`] (how a ranked report reads), [`compare`] (two
//! reports matched choice by choice) and [`html`] (the HTML report). It imports every area but
//! the run.

pub(crate) mod compare;
pub(crate) mod html;
pub(crate) mod interchange;
pub(crate) mod merge;
pub(crate) mod ranking;

use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::base::error_line::short_error;
use crate::manifest::formats::{KtCache, T4File};
use crate::results::cache::{self, CacheLine, Unreadable};
use crate::results::{Report, ReportJson, ResultJson, RunInfo, rank_by_device};
use tunebox_pool::Status;

/// Writes the report as JSON to `path`.
///
/// # Errors
///
/// The file cannot be written.
pub fn write_json(report: &Report, path: &Path) -> crate::Result<()> {
    json_file(report, path).map_err(crate::TuneError::report)
}

fn json_file(report: &Report, path: &Path) -> Result<()> {
    let mut text = serde_json::to_string_pretty(&report.to_json())?;
    text.push('\n');
    write_whole(path, text.as_bytes())
}

/// The report as the JSON text [`write_json`] writes (docs/cli.md's schema), compact, for a
/// caller that parses it in memory (Python's `tune_kernel`).
///
/// # Errors
///
/// [`crate::TuneError::Report`] if it cannot be serialized (not expected: every number in a
/// report is finite or written as `null`).
pub fn json_text(report: &Report) -> crate::Result<String> {
    serde_json::to_string(&report.to_json()).map_err(unwritable)
}

/// The report as the JSON value [`write_json`] writes (docs/cli.md's schema), for a caller that
/// turns it into its own objects (Python's `tune_kernel` gets dicts and lists, never text).
///
/// # Errors
///
/// As [`json_text`].
pub fn json_value(report: &Report) -> crate::Result<serde_json::Value> {
    serde_json::to_value(report.to_json()).map_err(unwritable)
}

/// The error of a report serde could not serialize.
fn unwritable(e: serde_json::Error) -> crate::TuneError {
    crate::TuneError::report(anyhow::anyhow!("cannot write the report: {e}"))
}

/// [`crate::base::whole_file::write`], its error naming `path`.
fn write_whole(path: &Path, bytes: &[u8]) -> Result<()> {
    crate::base::whole_file::write(path, bytes).with_context(|| {
        format!(
            "cannot write {} (the file, if there was one, is left as it was)",
            path.display()
        )
    })
}

/// Writes the results as CSV to `path`: one row per choice, in rank order, one column per param
/// and metric.
///
/// # Errors
///
/// The file cannot be written.
pub fn write_csv(report: &Report, path: &Path) -> crate::Result<()> {
    csv_file(report, path).map_err(crate::TuneError::report)
}

fn csv_file(report: &Report, path: &Path) -> Result<()> {
    write_whole(path, csv(report).as_bytes())
}

/// The CSV text of `report`: a header, then one row per choice in rank order.
fn csv(report: &Report) -> String {
    let columns = CsvColumns {
        params: param_names(report),
        metrics: &report.info.header.metrics,
        // Measured in windows: the estimate's interval over them, their count, and ties.
        windowed: report.results.iter().any(|r| r.windows.is_some()),
    };
    let mut text = csv_line(&columns.header());
    for r in &report.to_json().results {
        text.push_str(&csv_line(&columns.row(r)));
    }
    text
}

/// The names of the params of the report's choices, in the order first seen.
fn param_names(report: &Report) -> Vec<String> {
    let mut params: Vec<String> = Vec::new();
    for r in &report.results {
        for (name, _) in r.choice.values() {
            if !params.contains(name) {
                params.push(name.clone());
            }
        }
    }
    params
}

/// The columns of a CSV report: rank, index, one per param, status, the times and reps, one
/// per metric, refined, screen_median_ms, cached, device, error and, when any choice was
/// measured in windows, their interval, count, disturbed count and tie.
struct CsvColumns<'m> {
    params: Vec<String>,
    metrics: &'m [String],
    windowed: bool,
}

impl CsvColumns<'_> {
    /// The header row.
    fn header(&self) -> Vec<String> {
        let mut header: Vec<String> = vec!["rank".into(), "index".into()];
        header.extend(self.params.iter().cloned());
        header.push("status".into());
        for field in [
            "median_ms",
            "mean_ms",
            "min_ms",
            "max_ms",
            "p20_ms",
            "p80_ms",
            "stddev_ms",
            "reps",
        ] {
            header.push(field.into());
        }
        header.extend(self.metrics.iter().cloned());
        for field in ["refined", "screen_median_ms", "cached", "device", "error"] {
            header.push(field.into());
        }
        if self.windowed {
            for field in [
                "interval_low_ms",
                "interval_high_ms",
                "windows",
                "disturbed_windows",
                "tie",
            ] {
                header.push(field.into());
            }
        }
        header
    }

    /// A choice's row (empty cells for what it lacks).
    fn row(&self, r: &ResultJson) -> Vec<String> {
        let opt = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
        let mut row: Vec<String> = vec![
            r.rank.map(|r| r.to_string()).unwrap_or_default(),
            r.index.to_string(),
        ];
        let values: Vec<(&String, &crate::space::ParamValue)> = r.choice.values().collect();
        for name in &self.params {
            row.push(
                values
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
                    .unwrap_or_default(),
            );
        }
        row.push(r.status.clone());
        for v in [
            r.median_ms,
            r.mean_ms,
            r.min_ms,
            r.max_ms,
            r.p20_ms,
            r.p80_ms,
            r.stddev_ms,
        ] {
            row.push(opt(v));
        }
        row.push(r.reps.map(|r| r.to_string()).unwrap_or_default());
        for name in self.metrics {
            row.push(opt(r.metrics.get(name).copied()));
        }
        row.push(r.refined.to_string());
        row.push(opt(r.screen_median_ms));
        row.push(r.cached.to_string());
        row.push(r.device.clone());
        // The error's meaningful line: one row per choice (the JSON has the whole message).
        row.push(
            r.error
                .as_deref()
                .map(|e| short_error(e, usize::MAX))
                .unwrap_or_default(),
        );
        if self.windowed {
            match &r.windows {
                Some(w) => row.extend([
                    w.interval_ms[0].to_string(),
                    w.interval_ms[1].to_string(),
                    w.medians_ms.len().to_string(),
                    w.disturbed_count().to_string(),
                    w.tie.to_string(),
                ]),
                None => row.extend(std::iter::repeat_n(String::new(), 5)),
            }
        }
        row
    }
}

/// One CSV record (RFC 4180): fields with a comma, quote or line break are quoted.
fn csv_line(fields: &[String]) -> String {
    let quoted: Vec<String> = fields
        .iter()
        .map(|f| {
            if f.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", f.replace('"', "\"\""))
            } else {
                f.clone()
            }
        })
        .collect();
    format!("{}\n", quoted.join(","))
}

/// Reads a JSON report (`tunebox tune --json`, `tunebox merge --json`) or a results cache: one
/// report per manifest (a cache may hold several); or a Kernel Tuner cache file (`.json`,
/// `.json.gz`) or a FAIR T4 file, as one report (told apart by their content, not their names).
///
/// # Errors
///
/// The file cannot be read or is neither.
pub fn load(path: &Path) -> crate::Result<Vec<Report>> {
    read(path).map_err(crate::TuneError::report)
}

fn read(path: &Path) -> Result<Vec<Report>> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    // The format is told by the content: gzip is a Kernel Tuner cache (`.json.gz`).
    if bytes.starts_with(&[0x1f, 0x8b]) {
        return Ok(vec![interchange::kt_report(&KtCache::read(path)?)]);
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("{} is not UTF-8 text", path.display()))?;
    if let Some(report) = community_report(path, &text)? {
        return Ok(vec![report]);
    }
    let json_error = match serde_json::from_str::<ReportJson>(&text) {
        Ok(json) => {
            return json
                .into_report()
                .map(|r| vec![r])
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()));
        }
        Err(e) => e,
    };
    let (lines, unreadable) = cache::parse_lines(&text);
    if lines.is_empty() {
        bail!(
            "{} is neither a tunebox JSON report (tune --json), a results cache \
             (*.tunebox-cache.jsonl), a Kernel Tuner cache file nor a T4 file: {json_error}",
            path.display()
        );
    }
    let mut cached = CachedReports::default();
    for line in lines {
        cached.add(line, path, unreadable);
    }
    cached.into_reports(path)
}

/// The file's text as a Kernel Tuner cache or a T4 file, told by its content: an unterminated
/// cache (a Kernel Tuner run still writing it, or interrupted), a JSON object with `cache` and
/// `tune_params_keys`, or one with `schema_version` and `results` whose entries have a
/// `configuration` (T4); `None` for anything else.
fn community_report(path: &Path, text: &str) -> Result<Option<Report>> {
    if crate::manifest::formats::is_open_cache(text) {
        return Ok(Some(interchange::kt_report(&KtCache::read(path)?)));
    }
    if text.trim_start().starts_with('{')
        && let Ok(serde_json::Value::Object(doc)) = serde_json::from_str(text)
    {
        if doc.contains_key("cache") && doc.contains_key("tune_params_keys") {
            return Ok(Some(interchange::kt_report(&KtCache::read(path)?)));
        }
        let t4 = doc.contains_key("schema_version")
            && doc
                .get("results")
                .and_then(serde_json::Value::as_array)
                .is_some_and(|r| r.iter().all(|r| r.get("configuration").is_some()));
        if t4 {
            return Ok(Some(interchange::t4_report(&T4File::read(path)?, path)));
        }
    }
    Ok(None)
}

/// The reports of a results cache, one per manifest (by its hash), and the result each keeps
/// of a device and choice: `(device, index, priority, result)`, by the same position.
#[derive(Default)]
struct CachedReports {
    reports: Vec<Report>,
    kept: Vec<Vec<(String, usize, u8, ResultJson)>>,
}

impl CachedReports {
    /// Adds a line of the cache at `path` (`unreadable`: its lines that could not be read) to
    /// the report of its manifest. One result per device and choice is kept: a refined one
    /// over a screening one, else the last; but a failed re-measurement never hides the
    /// screening result (the run kept it).
    fn add(&mut self, line: CacheLine, path: &Path, unreadable: Unreadable) {
        let position = self.report_of(&line, path, unreadable);
        let header = &mut self.reports[position].info.header;
        if header.shard != line.header.shard {
            header.shard = None;
        }
        let device = line.header.device.clone();
        let index = line.result.index;
        let priority = match (
            line.result.refined,
            line.result.status == Status::Ok.as_str(),
        ) {
            (true, true) => 2,
            (false, _) => 1,
            (true, false) => 0,
        };
        let entries = &mut self.kept[position];
        match entries
            .iter_mut()
            .find(|(d, i, _, _)| *d == device && *i == index)
        {
            Some(entry) if priority >= entry.2 => *entry = (device, index, priority, line.result),
            Some(_) => {}
            None => entries.push((device, index, priority, line.result)),
        }
    }

    /// The position of the report of `line`'s manifest, started (with notes of where it comes
    /// from and what could not be read) when it is the first line of that manifest.
    fn report_of(&mut self, line: &CacheLine, path: &Path, unreadable: Unreadable) -> usize {
        if let Some(p) = self
            .reports
            .iter()
            .position(|r| r.info.header.manifest_hash == line.header.manifest_hash)
        {
            return p;
        }
        let mut notes = vec![format!("from the results cache {}", path.display())];
        if unreadable.total() > 0 {
            notes.push(format!(
                "{} unreadable lines were skipped{}",
                unreadable.total(),
                if unreadable.cut_last {
                    " (the last was cut short while it was written)"
                } else {
                    ""
                }
            ));
        }
        self.reports.push(Report {
            info: RunInfo {
                notes,
                ..RunInfo::new(line.header.clone())
            },
            results: Vec::new(),
        });
        self.kept.push(Vec::new());
        self.reports.len() - 1
    }

    /// The reports, each with the results it kept, ranked.
    fn into_reports(self, path: &Path) -> Result<Vec<Report>> {
        let mut reports = self.reports;
        for (report, entries) in reports.iter_mut().zip(self.kept) {
            let device = report.info.header.device.clone();
            for (d, _, _, mut result) in entries {
                result.device = d;
                let result = result
                    .into_result(&device)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
                report.results.push(result);
            }
            rank_by_device(&mut report.results);
        }
        Ok(reports)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_what_needs_quoting() {
        assert_eq!(
            csv_line(&["a".into(), "b,c".into(), "say \"hi\"".into()]),
            "a,\"b,c\",\"say \"\"hi\"\"\"\n"
        );
    }
}
