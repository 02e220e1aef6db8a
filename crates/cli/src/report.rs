//! Printing a ranked table and writing JSON.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;
use tunebox_pool::Status;

use crate::space::Choice;
use crate::tune::{ChoiceResult, Report};

/// Widest the error column gets in the table.
const ERROR_WIDTH: usize = 60;

/// Writes the ranked table and a summary to `out`.
pub(crate) fn print_table(report: &Report, out: &mut impl Write) -> std::io::Result<()> {
    let rows: Vec<[String; 6]> = report
        .results
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let ok = r.status == Status::Ok;
            [
                if ok { (i + 1).to_string() } else { "-".into() },
                r.choice.label(),
                r.stats
                    .as_ref()
                    .map_or("-".into(), |s| format!("{:.4}", s.median_ms)),
                r.stats
                    .as_ref()
                    .map_or("-".into(), |s| format!("{:.1}%", s.noise() * 100.0)),
                r.status.to_string(),
                r.error.as_deref().map(short_error).unwrap_or_default(),
            ]
        })
        .collect();
    let header = ["rank", "choice", "median ms", "spread", "status", "error"];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String; 6]| {
        format!(
            "{:>w0$}  {:<w1$}  {:>w2$}  {:>w3$}  {:<w4$}  {}",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            cells[4],
            cells[5],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3],
            w4 = widths[4],
        )
        .trim_end()
        .to_owned()
    };
    writeln!(
        out,
        "{}: {} on {}",
        report.name, report.kernel, report.device
    )?;
    writeln!(out, "{}", line(&header.map(String::from)))?;
    for row in &rows {
        writeln!(out, "{}", line(row))?;
    }
    writeln!(out)?;
    let mut counts: Vec<(Status, usize)> = Vec::new();
    for r in &report.results {
        match counts.iter_mut().find(|(s, _)| *s == r.status) {
            Some((_, n)) => *n += 1,
            None => counts.push((r.status, 1)),
        }
    }
    let counts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    writeln!(
        out,
        "{} choices ({}) in {:.1} s with {} worker(s); spread = (p80 - p20) / median",
        report.results.len(),
        counts.join(", "),
        report.elapsed.as_secs_f64(),
        report.workers
    )?;
    for note in &report.notes {
        writeln!(out, "note: {note}")?;
    }
    if let Some(best) = best(report) {
        let stats = best.stats.as_ref().expect("ok results have stats");
        writeln!(
            out,
            "best: {} at {:.4} ms",
            best.choice.label(),
            stats.median_ms
        )?;
        let defines: Vec<String> = best
            .choice
            .defines()
            .iter()
            .map(|d| format!("-D{}={}", d.name, d.value))
            .collect();
        if !defines.is_empty() {
            writeln!(out, "      {}", defines.join(" "))?;
        }
    } else {
        writeln!(out, "no choice succeeded")?;
    }
    Ok(())
}

fn best(report: &Report) -> Option<&ChoiceResult> {
    report.results.first().filter(|r| r.status == Status::Ok)
}

/// The first meaningful line of an error, cut to [`ERROR_WIDTH`] characters: for compiler output
/// the first `error:` line, else the first line.
fn short_error(error: &str) -> String {
    let line = error
        .lines()
        .find(|l| l.contains("error:") || l.contains("#error"))
        .or_else(|| error.lines().next())
        .unwrap_or("")
        .trim();
    if line.chars().count() > ERROR_WIDTH {
        let cut: String = line.chars().take(ERROR_WIDTH - 1).collect();
        format!("{cut}…")
    } else {
        line.to_owned()
    }
}

#[derive(Serialize)]
struct JsonReport<'a> {
    tunebox_version: &'static str,
    manifest: String,
    name: &'a str,
    kernel: &'a str,
    backend: &'static str,
    device: &'a str,
    elapsed_s: f64,
    results: Vec<JsonResult<'a>>,
    best: Option<JsonBest<'a>>,
    notes: &'a [String],
}

#[derive(Serialize)]
struct JsonResult<'a> {
    choice: &'a Choice,
    status: &'static str,
    median_ms: Option<f64>,
    mean_ms: Option<f64>,
    min_ms: Option<f64>,
    max_ms: Option<f64>,
    p20_ms: Option<f64>,
    p80_ms: Option<f64>,
    stddev_ms: Option<f64>,
    reps: Option<u32>,
    error: Option<&'a str>,
    max_abs_error: Option<f64>,
    max_rel_error: Option<f64>,
    mismatches: Option<u64>,
    /// Inputs the kernel wrote (restored before every call).
    mutated_inputs: &'a [String],
}

#[derive(Serialize)]
struct JsonBest<'a> {
    choice: &'a Choice,
    median_ms: f64,
}

/// Writes the report as JSON to `path`.
pub(crate) fn write_json(report: &Report, path: &Path) -> Result<()> {
    let finite = |v: f64| v.is_finite().then_some(v);
    let json = JsonReport {
        tunebox_version: env!("CARGO_PKG_VERSION"),
        manifest: report.manifest.display().to_string(),
        name: &report.name,
        kernel: &report.kernel,
        backend: "cpu",
        device: &report.device,
        elapsed_s: report.elapsed.as_secs_f64(),
        results: report
            .results
            .iter()
            .map(|r| {
                let s = r.stats.as_ref();
                let v = r.verification.as_ref();
                JsonResult {
                    choice: &r.choice,
                    status: r.status.as_str(),
                    median_ms: s.map(|s| s.median_ms),
                    mean_ms: s.map(|s| s.mean_ms),
                    min_ms: s.map(|s| s.min_ms),
                    max_ms: s.map(|s| s.max_ms),
                    p20_ms: s.map(|s| s.p20_ms),
                    p80_ms: s.map(|s| s.p80_ms),
                    stddev_ms: s.map(|s| s.stddev_ms),
                    reps: s.map(|s| s.reps),
                    error: r.error.as_deref(),
                    max_abs_error: v.and_then(|v| finite(v.max_abs_error())),
                    max_rel_error: v.and_then(|v| finite(v.max_rel_error())),
                    mismatches: v.map(|v| v.mismatches()),
                    mutated_inputs: &r.mutated_inputs,
                }
            })
            .collect(),
        notes: &report.notes,
        best: best(report).map(|r| JsonBest {
            choice: &r.choice,
            median_ms: r.stats.as_ref().expect("ok results have stats").median_ms,
        }),
    };
    let mut text = serde_json::to_string_pretty(&json)?;
    text.push('\n');
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_errors() {
        let log =
            "compilation failed: `cc …`\nk.c: In function 'f':\nk.c:3:5: error: expected ';'\n";
        assert_eq!(short_error(log), "k.c:3:5: error: expected ';'");
        assert_eq!(
            short_error("the worker crashed: killed by signal 11 (SIGSEGV)\n--- tail"),
            "the worker crashed: killed by signal 11 (SIGSEGV)"
        );
        let long = "x".repeat(200);
        assert_eq!(short_error(&long).chars().count(), ERROR_WIDTH);
    }
}
