//! The ranking: the best choices with their intervals and ties, every choice's time by rank,
//! the table of the best, and the failures by status with their messages folded.

use tunebox_pool::Status;

use super::measure::{Measure, count, thin};
use super::page::{Cell, Page, details, esc, table};
use super::plot::{Axis, Figure, Layer, Mark, Stroke, colour};
use crate::report::ranking::{ErrorGroup, error_groups, interval_ms, rank_labels, ties, windowed};
use crate::results::ChoiceResult;

/// Choices drawn with their intervals.
const TOP_FIGURE: usize = 30;
/// Rows of the table of the best shown open; the rest of [`TOP_TABLE`] are folded.
const TOP_OPEN: usize = 10;
/// Rows of the table of the best.
const TOP_TABLE: usize = 50;
/// Points of the curve of every choice by rank.
const CURVE_POINTS: usize = 600;
/// Distinct messages shown per status.
const MESSAGES_SHOWN: usize = 25;
/// Choices named per message.
const CHOICES_NAMED: usize = 12;
/// Characters of a message shown whole.
const MESSAGE_CHARS: usize = 6000;

/// The ranking of one device's `members` (ranked), its figures' ids suffixed by `tag`.
pub(super) fn section(page: &mut Page, members: &[&ChoiceResult], measure: &Measure, tag: &str) {
    let labels = rank_labels(members);
    let ok: Vec<(&ChoiceResult, &str)> = members
        .iter()
        .zip(&labels)
        .filter(|(r, _)| r.status == Status::Ok && measure.value(r).is_some())
        .map(|(r, l)| (*r, l.as_str()))
        .collect();
    match ok.first() {
        None => page.p_html(Some("warn"), "No choice succeeded: nothing to rank."),
        Some(_) => {
            page.figure(&top_figure(&ok, measure, tag));
            if ok.len() > TOP_FIGURE {
                page.figure(&curve_figure(&ok, measure, tag));
            }
            page.raw(&top_table(&ok, measure));
        }
    }
    failures(page, members);
}

/// The best choices with their intervals, the best and those tied with it marked apart.
fn top_figure(ok: &[(&ChoiceResult, &str)], measure: &Measure, tag: &str) -> Figure {
    let shown = &ok[..ok.len().min(TOP_FIGURE)];
    let best = shown[0].0;
    let [best_class, tied_class, rest] = intervals_by_class(shown, measure);
    let names: Vec<String> = shown.iter().map(|(_, l)| (*l).to_owned()).collect();
    let caption = format!(
        "The {} of {} ok choices, best first (rank =N: tied within the noise with rank N): \
         each choice's {} with {}. Triangle: the best, {}; rings: {} tied with the best \
         (their intervals overlap); squares: behind it.",
        count(shown.len(), "best choice"),
        ok.len(),
        measure.label(),
        interval_caption(shown, measure),
        best.choice.label(),
        count(tied_class.len(), "choice"),
    );
    Figure::new(
        format!("ranking{tag}"),
        caption,
        Axis::categories("rank", names),
        Axis::fitting(
            measure.label(),
            best_class
                .iter()
                .chain(&tied_class)
                .chain(&rest)
                .map(|i| i.2),
        ),
    )
    .layer(Layer::intervals(
        "the best",
        colour::BLACK,
        Mark::Triangle,
        best_class,
    ))
    .layer(Layer::intervals(
        "tied with the best",
        colour::ORANGE,
        Mark::Ring,
        tied_class,
    ))
    .layer(Layer::intervals(
        "behind the best",
        colour::BLUE,
        Mark::Square,
        rest,
    ))
}

/// The `shown` choices' intervals `(rank position, low, value, high)` in three classes: the
/// best, those tied with it, the rest (a choice measured once, or ranked by something other
/// than time, has its value as its interval).
fn intervals_by_class(
    shown: &[(&ChoiceResult, &str)],
    measure: &Measure,
) -> [Vec<(f64, f64, f64, f64)>; 3] {
    let best = shown[0].0;
    let mut classes: [Vec<(f64, f64, f64, f64)>; 3] = Default::default();
    for (i, (r, _)) in shown.iter().enumerate() {
        let Some(mid) = measure.value(r) else {
            continue;
        };
        let (low, high) = match interval_ms(r).filter(|_| measure.is_time()) {
            Some([low, high]) => (measure.of_ms(low), measure.of_ms(high)),
            None => (mid, mid),
        };
        let class = if i == 0 {
            0
        } else if ties(best, r) {
            1
        } else {
            2
        };
        classes[class].push((i as f64, low, mid, high));
    }
    classes
}

/// What the ranking figure's intervals are, in its caption.
fn interval_caption(shown: &[(&ChoiceResult, &str)], measure: &Measure) -> &'static str {
    if !measure.is_time() || shown.iter().all(|(r, _)| interval_ms(r).is_none()) {
        "no interval (each was measured once, or it is not a time)"
    } else if shown.iter().any(|(r, _)| windowed(r)) {
        "its 90 % interval over windows (the 20th to 80th percentile of its reps when measured \
         in one window)"
    } else {
        "the 20th to 80th percentile of its reps"
    }
}

/// Every ok choice's value by rank: how far the field trails the best.
fn curve_figure(ok: &[(&ChoiceResult, &str)], measure: &Measure, tag: &str) -> Figure {
    let values: Vec<(f64, f64)> = ok
        .iter()
        .enumerate()
        .filter_map(|(i, (r, _))| Some(((i + 1) as f64, measure.value(r)?)))
        .collect();
    let best = values[0].1;
    let middle = values[values.len() / 2].1;
    let last = values[values.len() - 1].1;
    let caption = format!(
        "Every ok choice by rank ({} choices{}): the best {}, the median choice {} ({:.2}× the \
         best), the last {} ({:.2}×).",
        ok.len(),
        if values.len() > CURVE_POINTS {
            format!(", drawn through {CURVE_POINTS} of them")
        } else {
            String::new()
        },
        measure.show(best),
        measure.show(middle),
        measure.factor(middle, best),
        measure.show(last),
        measure.factor(last, best),
    );
    Figure::new(
        format!("by-rank{tag}"),
        caption,
        Axis::linear("rank (1 = the best)"),
        Axis::fitting(measure.label(), values.iter().map(|p| p.1)),
    )
    .layer(Layer::line(
        "",
        colour::BLUE,
        Stroke::Solid,
        None,
        thin(&values, CURVE_POINTS),
    ))
    .size(760, 280)
}

/// The table of the best choices: the first [`TOP_OPEN`] open, the rest of [`TOP_TABLE`]
/// folded; the interval and windows columns only when some choice has them.
fn top_table(ok: &[(&ChoiceResult, &str)], measure: &Measure) -> String {
    let shown = &ok[..ok.len().min(TOP_TABLE)];
    let columns = TopColumns::of(shown);
    let header = columns.header();
    let row = |choice: &(&ChoiceResult, &str)| columns.row(choice);
    let open = shown.len().min(TOP_OPEN);
    let mut html = table(&header, shown[..open].iter().map(row), |i| i == 0);
    if shown.len() > open {
        html.push_str(&details(
            &format!("the next {}", shown.len() - open),
            &table(&header, shown[open..].iter().map(row), |_| false),
        ));
    }
    if ok.len() > shown.len() {
        html.push_str(&format!(
            "<p class=\"muted\">… {} more ok (the JSON and CSV reports have every choice).</p>\n",
            ok.len() - shown.len()
        ));
    }
    if !measure.is_time() {
        html.push_str(&format!(
            "<p class=\"muted\">Ranked by {}; the time column is the measured time.</p>\n",
            esc(&measure.label())
        ));
    }
    html
}

/// The columns of the table of the best: rank, choice, time, the interval and windows (when
/// some choice has them), each metric, notes.
struct TopColumns {
    metrics: Vec<String>,
    intervals: bool,
    windows: bool,
}

impl TopColumns {
    /// The columns that the `shown` choices fill.
    fn of(shown: &[(&ChoiceResult, &str)]) -> TopColumns {
        let metrics: Vec<String> =
            shown
                .iter()
                .flat_map(|(r, _)| r.metrics.keys())
                .fold(Vec::new(), |mut names, n| {
                    if !names.contains(n) {
                        names.push(n.clone());
                    }
                    names
                });
        TopColumns {
            metrics,
            intervals: shown.iter().any(|(r, _)| interval_ms(r).is_some()),
            windows: shown.iter().any(|(r, _)| r.windows.is_some()),
        }
    }

    fn header(&self) -> Vec<&str> {
        let mut header = vec!["rank", "choice", "time"];
        if self.intervals {
            header.push("interval");
        }
        if self.windows {
            header.push("windows");
        }
        header.extend(self.metrics.iter().map(String::as_str));
        header.push("notes");
        header
    }

    /// The row of a choice and its rank label.
    fn row(&self, (r, label): &(&ChoiceResult, &str)) -> Vec<Cell> {
        let mut row = vec![
            Cell::Num((*label).to_owned()),
            Cell::Html(format!("<code>{}</code>", esc(&r.choice.label()))),
            Cell::Num(r.median_ms().map_or("-".into(), tunebox_protocol::short_ms)),
        ];
        if self.intervals {
            row.push(Cell::Num(interval_ms(r).map_or(
                "-".into(),
                |[low, high]| {
                    format!(
                        "{} – {}",
                        tunebox_protocol::short_ms(low),
                        tunebox_protocol::short_ms(high)
                    )
                },
            )));
        }
        if self.windows {
            row.push(Cell::Num(r.windows.as_ref().map_or(
                "-".into(),
                |w| match w.disturbed_count() {
                    0 => w.medians_ms.len().to_string(),
                    d => format!("{} ({d} busy)", w.medians_ms.len()),
                },
            )));
        }
        for name in &self.metrics {
            row.push(Cell::Num(
                r.metrics
                    .get(name)
                    .map_or("-".into(), |v| crate::format_value(*v)),
            ));
        }
        let mut notes = Vec::new();
        if r.screen_median_ms.is_some() {
            notes.push("re-measured (--refine)");
        }
        if r.cached {
            notes.push("from the results cache");
        }
        row.push(Cell::Text(notes.join(", ")));
        row
    }
}

/// Failures, counted by status, each status's distinct messages folded.
fn failures(page: &mut Page, members: &[&ChoiceResult]) {
    let failed: Vec<&ChoiceResult> = members
        .iter()
        .copied()
        .filter(|r| r.status != Status::Ok)
        .collect();
    if failed.is_empty() {
        page.p_html(Some("good"), "No choice failed.");
        return;
    }
    let mut statuses: Vec<Status> = failed.iter().map(|r| r.status).collect();
    statuses.sort();
    statuses.dedup();
    let counts: Vec<String> = statuses
        .iter()
        .map(|s| format!("{} {s}", failed.iter().filter(|r| r.status == *s).count()))
        .collect();
    page.h3(&format!("Failures: {}", count(failed.len(), "choice")));
    page.p(&format!(
        "{} ({}). Each status's distinct messages are folded below: click one to read it whole.",
        count(failed.len(), "choice"),
        counts.join(", ")
    ));
    for status in statuses {
        let of_status: Vec<&ChoiceResult> = failed
            .iter()
            .copied()
            .filter(|r| r.status == status)
            .collect();
        let groups = error_groups(&of_status);
        page.details(
            &format!(
                "<strong>{status}</strong>: {}, {}",
                count(of_status.len(), "choice"),
                count(groups.len(), "distinct message")
            ),
            &status_messages(&of_status, &groups),
        );
    }
}

/// The folded messages of one status's failed choices (`of_status`, by their error `groups`):
/// the first [`MESSAGES_SHOWN`], how many more, and how many choices have none.
fn status_messages(of_status: &[&ChoiceResult], groups: &[ErrorGroup<'_>]) -> String {
    let mut body = String::new();
    for group in groups.iter().take(MESSAGES_SHOWN) {
        body.push_str(&message(group));
    }
    if groups.len() > MESSAGES_SHOWN {
        body.push_str(&format!(
            "<p class=\"muted\">… {} more distinct messages (the JSON report has them \
             all).</p>",
            groups.len() - MESSAGES_SHOWN
        ));
    }
    let without = of_status.len() - groups.iter().map(|g| g.members.len()).sum::<usize>();
    if without > 0 {
        body.push_str(&format!(
            "<p class=\"muted\">{} without a message.</p>",
            count(without, "choice")
        ));
    }
    body
}

/// One distinct message, folded under its line: the choices that got it (the first
/// [`CHOICES_NAMED`]) and the message whole (its first [`MESSAGE_CHARS`] characters).
fn message(group: &ErrorGroup<'_>) -> String {
    let mut named: Vec<String> = group
        .members
        .iter()
        .take(CHOICES_NAMED)
        .map(|r| format!("<code>{}</code>", esc(&r.choice.label())))
        .collect();
    if group.members.len() > CHOICES_NAMED {
        named.push(format!("… {} more", group.members.len() - CHOICES_NAMED));
    }
    let message = group.members[0].error.as_deref().unwrap_or_default();
    let whole: String = message.chars().take(MESSAGE_CHARS).collect();
    let cut = if whole.len() < message.len() {
        "\n… (cut; the JSON report has the whole message)"
    } else {
        ""
    };
    details(
        &format!(
            "{} — {}",
            esc(&group.line),
            count(group.members.len(), "choice")
        ),
        &format!(
            "<p>{}</p>\n<pre>{}{cut}</pre>",
            named.join(", "),
            esc(&whole)
        ),
    )
}
