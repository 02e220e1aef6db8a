//! The run's conditions: what ran where, with which tunebox and options, and what the user
//! should know about it (the machine-busy warnings, choices not measured, the notes).

use super::measure::count;
use super::page::{Cell, Page, esc, table};
use crate::results::{Report, RunConditions};

/// The run's conditions of `report`.
pub(super) fn section(page: &mut Page, report: &Report) {
    let info = &report.info;
    let mut rows = run_rows(report);
    if let Some(c) = &info.conditions {
        window_rows(c, &mut rows);
    }
    if !info.merged_from.is_empty() {
        rows.push(("merged from", info.merged_from.join(", ")));
    }
    page.raw(&table(
        &["", ""],
        rows.into_iter().map(|(k, v)| {
            vec![
                Cell::Html(format!("<strong>{}</strong>", esc(k))),
                Cell::Text(v),
            ]
        }),
        |_| false,
    ));
    for warning in warnings(report) {
        page.p_html(Some("warn"), &esc(&warning));
    }
    if !info.notes.is_empty() {
        let notes: Vec<String> = info
            .notes
            .iter()
            .map(|n| format!("<li>{}</li>", esc(n)))
            .collect();
        page.raw(&format!(
            "<h3>Notes</h3>\n<ul>\n{}\n</ul>\n",
            notes.join("\n")
        ));
    }
}

/// The table's rows of the run itself: what ran where, with which tunebox, strategy and
/// options, how long, and its results cache.
fn run_rows(report: &Report) -> Vec<(&'static str, String)> {
    let info = &report.info;
    let h = &info.header;
    let mut rows: Vec<(&str, String)> = vec![
        ("kernel", h.kernel.clone()),
        ("device (CPU or GPU)", h.device.clone()),
        ("backend", or_unknown(&h.backend)),
        ("manifest", h.manifest.clone()),
        ("tunebox version", or_unknown(&h.tunebox_version)),
        ("choices in the space", h.space_size.to_string()),
        ("strategy", strategy(report)),
    ];
    if let Some(o) = &h.objective {
        rows.push(("ranked by", o.describe()));
    }
    if let Some(shard) = h.shard {
        rows.push(("shard", shard.to_string()));
    }
    if info.elapsed_s > 0.0 {
        rows.push(("took", format!("{:.1} s", info.elapsed_s)));
    }
    if info.workers > 0 {
        rows.push(("workers", info.workers.to_string()));
    }
    if let Some(refine) = info.refine {
        rows.push((
            "refine",
            format!(
                "the best {} measured again with {}× the reps",
                refine.top, refine.rep_factor
            ),
        ));
    }
    if let Some(cache) = &info.cache {
        rows.push((
            "results cache",
            format!(
                "{} ({} taken from it)",
                cache.path,
                count(cache.hits, "result")
            ),
        ));
    }
    rows
}

/// The table's rows of how the windows went (`c`): their counts, the machine's drift, speed
/// probe and load, and how sure the pick is.
fn window_rows(c: &RunConditions, rows: &mut Vec<(&'static str, String)>) {
    rows.push((
        "windows",
        format!(
            "{} in {} ({} disturbed, {} measured again); {} raced for the top, {} settled \
             at screening, {} confirmed early",
            c.windows,
            count(c.rounds, "round"),
            c.disturbed,
            c.remeasured,
            count(c.raced, "choice"),
            c.settled,
            c.confirmed_early
        ),
    ));
    rows.push(("speed drift", format!("{:.1} %", c.drift * 100.0)));
    rows.push((
        "speed probe, slowest over fastest",
        format!("{:.3}", c.probe_ratio),
    ));
    rows.push((
        "load average, start and end",
        format!("{:.2}, {:.2}", c.load[0], c.load[1]),
    ));
    rows.push(("how sure the pick is", c.confidence.clone()));
}

fn or_unknown(text: &str) -> String {
    if text.is_empty() {
        "not recorded".into()
    } else {
        text.to_owned()
    }
}

/// `random, 50 of the space, seed 3`.
fn strategy(report: &Report) -> String {
    let s = &report.info.header.selection;
    let mut text = or_unknown(&s.strategy);
    if let Some(budget) = s.budget {
        text.push_str(&format!(", budget {budget}"));
    }
    if s.strategy != "brute-force" && !s.strategy.is_empty() {
        text.push_str(&format!(", seed {}", s.seed));
    }
    text
}

/// What the user should be told: the machine was busy or drifted, choices not measured,
/// results not cached.
fn warnings(report: &Report) -> Vec<String> {
    let info = &report.info;
    let mut out = Vec::new();
    if let Some(c) = &info.conditions {
        if c.busy {
            out.push(format!(
                "The machine was busy while it measured ({} of {} windows disturbed): the \
                 ranking is less sure than it looks; measure again on a quiet machine.",
                c.disturbed, c.windows
            ));
        } else if c.drifted() {
            out.push(format!(
                "The machine's speed drifted by {:.0} % while it measured, though nothing else \
                 was seen running: the ranking may not hold on a second run.",
                c.drift * 100.0
            ));
        }
    }
    if info.interrupted {
        out.push("The run was interrupted before every choice was measured.".into());
    }
    for reason in ["interrupted", "max_time"] {
        let n = info
            .not_measured
            .iter()
            .filter(|n| n.reason == reason)
            .count();
        if n > 0 {
            out.push(format!(
                "{} not measured ({}); a re-run measures them.",
                count(n, "choice"),
                if reason == "max_time" {
                    "--max-time reached"
                } else {
                    "interrupted"
                }
            ));
        }
    }
    if let Some(cache) = info.cache.as_ref().filter(|c| c.not_cached > 0) {
        out.push(format!(
            "{} could not be kept in the results cache: {}.",
            count(cache.not_cached, "result"),
            cache
                .not_cached_reason
                .as_deref()
                .unwrap_or("the results cache could not be written")
        ));
    }
    if !info.missing.is_empty() {
        out.push(format!(
            "{} of the space are in none of the merged files.",
            count(info.missing.len(), "choice")
        ));
    }
    out
}
