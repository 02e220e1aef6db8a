//! The measuring: each window's time along the run, against its own choice's fastest window,
//! with the disturbed windows marked, so that a reader sees whether the machine held steady
//! (the drift and the disturbed windows that the report records).

use tunebox_pool::Status;

use super::measure::{count, median, sample};
use super::page::Page;
use super::plot::{Axis, Figure, Layer, Mark, Stroke, colour};
use crate::results::{DRIFT_WARN, Report};

/// Windows drawn (a seeded sample beyond, with a line of the median through the run).
const WINDOWS_DRAWN: usize = 3000;
/// Stretches of the run the median line is taken over.
const STRETCHES: usize = 40;

/// One window of a choice measured in several.
struct Window {
    /// When it ended, s since the run's first window ended.
    at_s: f64,
    /// Its median over its choice's fastest window's, less 1, in %.
    slower_pct: f64,
    disturbed: bool,
}

/// The windows of `report` along the run, and what they say of the machine.
pub(super) fn section(page: &mut Page, report: &Report) {
    let (windows, single) = windows(report);
    if let Some(c) = &report.info.conditions {
        let mut text = format!(
            "{} measured in {} (screening and {} of short windows, the race included); {} \
             disturbed (other CPUs busy or time stolen while it ran), {} measured again. The \
             machine's speed drifted by {:.1} % (the median over choices of their slowest \
             window over their fastest, screening left out; above {:.0} % the ranking may not \
             hold). The speed probe's slowest run over its fastest: {:.3}. Load average {:.2} \
             at the start, {:.2} at the end.",
            count(c.windows, "window"),
            count(report.results.len(), "choice"),
            count(c.rounds, "round"),
            c.disturbed,
            c.remeasured,
            c.drift * 100.0,
            DRIFT_WARN * 100.0,
            c.probe_ratio,
            c.load[0],
            c.load[1],
        );
        if c.busy {
            text.push_str(" The machine was busy: the ranking is less sure than it looks.");
        }
        let class = if c.busy || c.drifted() {
            "warn"
        } else {
            "good"
        };
        page.p_html(Some(class), &super::page::esc(&text));
    }
    if windows.is_empty() {
        page.p(
            "No choice of this report was measured in several windows that say when they ended \
             (results of another tool, of a replay, or of a run with --rounds 0): there is no \
             course of the machine's speed to draw.",
        );
        return;
    }
    page.figure(&figure(&windows, single));
}

/// The windows of every choice measured in several, in the order they ended, and how many
/// choices had one window only.
fn windows(report: &Report) -> (Vec<Window>, usize) {
    let mut out = Vec::new();
    let mut single = 0;
    let mut start = f64::INFINITY;
    for r in report.results.iter().filter(|r| r.status == Status::Ok) {
        let Some(w) = &r.windows else { continue };
        if w.medians_ms.len() < 2 || w.ended_s.len() != w.medians_ms.len() {
            single += usize::from(w.medians_ms.len() == 1);
            continue;
        }
        let fastest = w.medians_ms.iter().copied().fold(f64::INFINITY, f64::min);
        if fastest <= 0.0 || !fastest.is_finite() {
            continue;
        }
        for ((&median, &ended), &disturbed) in w.medians_ms.iter().zip(&w.ended_s).zip(&w.disturbed)
        {
            if ended > 0.0 {
                start = start.min(ended);
                out.push(Window {
                    at_s: ended,
                    slower_pct: (median / fastest - 1.0) * 100.0,
                    disturbed,
                });
            }
        }
    }
    for w in &mut out {
        w.at_s -= start;
    }
    out.sort_by(|a, b| a.at_s.total_cmp(&b.at_s));
    (out, single)
}

/// The windows (of choices measured in several; `single`: those measured in one, left out)
/// over the run: how much slower each ran than its choice's fastest, a seeded sample of them
/// when there are many, and the median of each stretch of the run.
fn figure(windows: &[Window], single: usize) -> Figure {
    let picked = sample(windows.len(), WINDOWS_DRAWN, 2);
    let (mut quiet, mut disturbed) = (Vec::new(), Vec::new());
    for i in &picked {
        let w = &windows[*i];
        if w.disturbed {
            disturbed.push((w.at_s, w.slower_pct));
        } else {
            quiet.push((w.at_s, w.slower_pct));
        }
    }
    let stretches = stretch_medians(windows);
    let caption = windows_caption(windows, picked.len(), !stretches.is_empty(), single);
    Figure::new(
        "windows",
        caption,
        Axis::linear("time since the run's first window ended (s)"),
        Axis::linear("slower than the choice's fastest window (%)"),
    )
    .layer(Layer::points(
        "quiet window",
        colour::BLUE,
        Mark::Dot,
        quiet,
    ))
    .layer(Layer::points(
        "disturbed window",
        colour::VERMILLION,
        Mark::Cross,
        disturbed,
    ))
    .layer(Layer::line(
        "median of a stretch",
        colour::BLACK,
        Stroke::Solid,
        None,
        stretches,
    ))
}

/// The caption of the windows figure: `drawn` of the `windows` drawn, the median of each
/// stretch drawn when `stretched`, and `single` choices left out.
fn windows_caption(windows: &[Window], drawn: usize, stretched: bool, single: usize) -> String {
    let disturbed_all = windows.iter().filter(|w| w.disturbed).count();
    format!(
        "Each window of a choice measured in several ({}{}): how much slower it ran than the \
         same choice's fastest window, when it ended. A steady machine keeps them near 0 %; a \
         stretch where every window is slower is the machine slowing down. Crosses: the {} \
         disturbed (other CPUs busy, or time stolen, while it ran); dots: quiet ones.{}{}",
        count(windows.len(), "window"),
        if drawn < windows.len() {
            format!(", a seeded sample of {drawn} drawn")
        } else {
            String::new()
        },
        count(disturbed_all, "window"),
        if stretched {
            format!(" The line: the median window in each of {STRETCHES} stretches of the run.")
        } else {
            String::new()
        },
        if single > 0 {
            format!(
                " {} measured in one window only are left out (a window is 0 % slower than \
                 itself).",
                count(single, "choice")
            )
        } else {
            String::new()
        },
    )
}

/// The median window (how much slower) in each of [`STRETCHES`] equal stretches of the run,
/// at the stretch's middle; none for a run of 200 windows or fewer.
fn stretch_medians(windows: &[Window]) -> Vec<(f64, f64)> {
    let end = windows.last().map_or(0.0, |w| w.at_s);
    let mut stretches = Vec::new();
    if windows.len() > 200 && end > 0.0 {
        for k in 0..STRETCHES {
            let (from, to) = (
                end * k as f64 / STRETCHES as f64,
                end * (k + 1) as f64 / STRETCHES as f64,
            );
            let mut within: Vec<f64> = windows
                .iter()
                .filter(|w| w.at_s >= from && (w.at_s < to || k + 1 == STRETCHES))
                .map(|w| w.slower_pct)
                .collect();
            if !within.is_empty() {
                stretches.push(((from + to) / 2.0, median(&mut within)));
            }
        }
    }
    stretches
}
