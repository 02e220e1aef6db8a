//! The page of a comparison of two reports of one space (`tunebox report A B --html`): each
//! choice's time in A against B, the ratio by rank, the ranks' change, whether the best moved
//! beyond the noise.

use std::path::Path;

use tunebox_pool::Status;

use super::measure::{Measure, count, median, sample};
use super::page::{Cell, Page, esc, table};
use super::plot::{Axis, Figure, LOG_ABOVE, Layer, Mark, Stroke, colour};
use crate::report::compare::{BestMove, Comparison, Pair};
use crate::results::{ChoiceResult, Report};

/// Choices drawn in a scatter (a seeded sample beyond; both bests always drawn).
const POINTS: usize = 3000;
/// Rows of the table of B's best.
const TOP_TABLE: usize = 30;
/// Rows of the table of the largest moves.
const MOVES_TABLE: usize = 15;

/// The HTML page of a [`Comparison`].
#[derive(Debug, Clone, Copy)]
pub struct HtmlComparison<'c, 'a> {
    comparison: &'c Comparison<'a>,
}

impl<'c, 'a> HtmlComparison<'c, 'a> {
    /// The page of `comparison`.
    pub fn new(comparison: &'c Comparison<'a>) -> Self {
        HtmlComparison { comparison }
    }

    /// The page, as text.
    pub fn render(&self) -> String {
        let c = self.comparison;
        let (a, b) = (&c.a.info.header, &c.b.info.header);
        let mut page = Page::new(&format!("tunebox comparison: {} and {}", a.name, b.name));
        page.title(&format!("{} (A) and {} (B)", a.name, b.name));
        page.lede(&esc(&format!(
            "A: {} on {}; B: {} on {}. {} in both, {} only in A, {} only in B.",
            a.manifest,
            a.device,
            b.manifest,
            b.device,
            count(c.pairs.len(), "choice"),
            c.only_a,
            c.only_b
        )));
        let class = match c.best_move {
            BestMove::Moved {
                beyond_noise: Some(true),
                ..
            } => "warn",
            _ => "good",
        };
        page.p_html(Some(class), &esc(&c.best_move_text()));
        let measure = Measure::times(
            c.pairs
                .iter()
                .flat_map(|p| [p.a.median_ms(), p.b.median_ms()])
                .flatten(),
        );
        page.section("choices", "Choice by choice");
        if let Some(g) = c.geometric_mean_ratio() {
            let mut text = format!(
                "Over the {} ok in both, B's time over A's: geometric mean {g:.3}, median {:.3}.",
                count(c.ratios().len(), "choice"),
                median(&mut c.ratios())
            );
            if let Some(rho) = c.rank_correlation() {
                text.push_str(&format!(
                    " Spearman's rank correlation of their times: {rho:.3} (1: B ranks them as \
                     A does)."
                ));
            }
            page.p(&text);
            page.figure(&scatter(c, &measure));
            page.figure(&ratios(c));
            page.figure(&rank_change(c));
        } else {
            page.p("No choice is ok in both reports: there is no time to compare.");
        }
        page.section("ranks", "Ranks");
        page.raw(&top_table(c, &measure));
        page.raw(&moves_table(c, &measure));
        page.section("status", "Status");
        status(&mut page, c);
        page.section("conditions", "Conditions");
        page.raw(&conditions(c.a, c.b));
        page.finish()
    }

    /// Writes the page to `path` (whole or not at all).
    ///
    /// # Errors
    ///
    /// [`crate::TuneError::Report`]: the file cannot be written.
    pub fn write(&self, path: &Path) -> crate::Result<()> {
        super::page::write(&self.render(), path)
    }
}

/// Pairs ok in both with their times, ms.
fn timed<'p>(c: &'p Comparison<'_>) -> Vec<(&'p Pair<'p>, f64, f64)> {
    c.pairs
        .iter()
        .filter_map(|p| {
            let ok = |r: &ChoiceResult| r.median_ms().filter(|_| r.status == Status::Ok);
            Some((p, ok(p.a)?, ok(p.b)?))
        })
        .collect()
}

/// Whether `r` is `best`.
fn is(r: &ChoiceResult, best: Option<&ChoiceResult>) -> bool {
    best.is_some_and(|b| std::ptr::eq(r, b))
}

fn scatter(c: &Comparison<'_>, measure: &Measure) -> Figure {
    let all = timed(c);
    let picked = sample(all.len(), POINTS, 3);
    let to = |&(_, a, b): &(&Pair<'_>, f64, f64)| (measure.of_ms(a), measure.of_ms(b));
    let dots: Vec<(f64, f64)> = picked.iter().map(|&i| to(&all[i])).collect();
    let best_a: Vec<(f64, f64)> = all.iter().filter(|t| is(t.0.a, c.best_a)).map(to).collect();
    let best_b: Vec<(f64, f64)> = all.iter().filter(|t| is(t.0.b, c.best_b)).map(to).collect();
    let values = || dots.iter().flat_map(|p| [p.0, p.1]);
    let low = values().fold(f64::INFINITY, f64::min);
    let high = values().fold(f64::NEG_INFINITY, f64::max);
    // As `Axis::fitting`, for both axes at once (B = A stays a diagonal).
    let log = low > 0.0 && high / low > LOG_ABOVE;
    let axis = |label: String| {
        if log {
            Axis::log(label)
        } else {
            Axis::linear(label)
        }
    };
    Figure::new(
        "a-against-b",
        format!(
            "Each choice ok in both{}: its time in A (across) and in B (up). On the dotted \
             line B equals A; below it B is faster. Triangle: A's best; ring: B's best.",
            if picked.len() < all.len() {
                format!(" (a seeded sample of {} of {})", picked.len(), all.len())
            } else {
                String::new()
            }
        ),
        axis(format!("A: {}", measure.label())),
        axis(format!("B: {}", measure.label())),
    )
    .layer(Layer::points("a choice", colour::BLUE, Mark::Dot, dots))
    .layer(Layer::line(
        "B = A",
        colour::GREY,
        Stroke::Dotted,
        None,
        vec![(low, low), (high, high)],
    ))
    .layer(Layer::points(
        "A's best",
        colour::BLACK,
        Mark::Triangle,
        best_a,
    ))
    .layer(Layer::points(
        "B's best",
        colour::VERMILLION,
        Mark::Ring,
        best_b,
    ))
    .size(620, 520)
}

fn ratios(c: &Comparison<'_>) -> Figure {
    let mut all: Vec<(f64, f64)> = c
        .pairs
        .iter()
        .filter_map(|p| Some((p.rank_a? as f64, p.ratio()?)))
        .collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    let picked = sample(all.len(), POINTS, 4);
    let dots: Vec<(f64, f64)> = picked.iter().map(|&i| all[i]).collect();
    let end = all.last().map_or(1.0, |p| p.0);
    let g = c.geometric_mean_ratio().unwrap_or(1.0);
    Figure::new(
        "ratio-by-rank",
        format!(
            "Each choice's time in B over its time in A, against its rank in A (1: A's best). \
             Dotted: 1 (the same time); dashed: the geometric mean, {g:.3}. Below 1 B is \
             faster."
        ),
        Axis::linear("rank in A"),
        Axis::fitting("time in B / time in A", dots.iter().map(|p| p.1)),
    )
    .layer(Layer::points("a choice", colour::BLUE, Mark::Dot, dots))
    .layer(Layer::line(
        "the same time",
        colour::GREY,
        Stroke::Dotted,
        None,
        vec![(1.0, 1.0), (end, 1.0)],
    ))
    .layer(Layer::line(
        "geometric mean",
        colour::ORANGE,
        Stroke::Dashed,
        None,
        vec![(1.0, g), (end, g)],
    ))
    .size(760, 320)
}

fn rank_change(c: &Comparison<'_>) -> Figure {
    let all: Vec<(f64, f64)> = c
        .pairs
        .iter()
        .filter_map(|p| Some((p.rank_a? as f64, p.rank_b? as f64)))
        .collect();
    let picked = sample(all.len(), POINTS, 5);
    let dots: Vec<(f64, f64)> = picked.iter().map(|&i| all[i]).collect();
    let end = all.iter().map(|p| p.0.max(p.1)).fold(1.0, f64::max);
    Figure::new(
        "rank-change",
        "Each choice's rank in B against its rank in A: on the dotted line it kept its rank, \
         below it B ranks it better.",
        Axis::linear("rank in A"),
        Axis::linear("rank in B"),
    )
    .layer(Layer::points("a choice", colour::BLUE, Mark::Dot, dots))
    .layer(Layer::line(
        "the same rank",
        colour::GREY,
        Stroke::Dotted,
        None,
        vec![(1.0, 1.0), (end, end)],
    ))
    .size(520, 480)
}

/// `up 3`, `down 2`, `same`.
fn gain(p: &Pair<'_>) -> String {
    match p.rank_gain() {
        Some(0) => "same".into(),
        Some(g) if g > 0 => format!("up {g}"),
        Some(g) => format!("down {}", -g),
        None => "-".into(),
    }
}

fn rows(pairs: &[&Pair<'_>], measure: &Measure) -> Vec<Vec<Cell>> {
    let time = |r: &ChoiceResult| match (r.status, r.median_ms()) {
        (Status::Ok, Some(ms)) => measure.show(measure.of_ms(ms)),
        (status, _) => status.to_string(),
    };
    pairs
        .iter()
        .map(|p| {
            vec![
                Cell::Num(p.rank_b.map_or("-".into(), |r| r.to_string())),
                Cell::Num(p.rank_a.map_or("-".into(), |r| r.to_string())),
                Cell::Text(gain(p)),
                Cell::Html(format!("<code>{}</code>", esc(&p.b.choice.label()))),
                Cell::Num(time(p.a)),
                Cell::Num(time(p.b)),
                Cell::Num(p.ratio().map_or("-".into(), |r| format!("{r:.3}"))),
            ]
        })
        .collect()
}

const HEADER: [&str; 7] = [
    "rank in B",
    "rank in A",
    "change",
    "choice",
    "time in A",
    "time in B",
    "B / A",
];

fn top_table(c: &Comparison<'_>, measure: &Measure) -> String {
    let ranked: Vec<&Pair<'_>> = c.pairs.iter().filter(|p| p.rank_b.is_some()).collect();
    let shown = ranked.len().min(TOP_TABLE);
    format!(
        "<h3>B's best {}, with their place in A</h3>\n{}",
        shown,
        table(&HEADER, rows(&ranked[..shown], measure), |i| i == 0)
    )
}

fn moves_table(c: &Comparison<'_>, measure: &Measure) -> String {
    // The largest moves among the choices either report puts in its best 100.
    let mut moved: Vec<&Pair<'_>> = c
        .pairs
        .iter()
        .filter(|p| p.rank_a.min(p.rank_b).is_some_and(|r| r <= 100))
        .filter(|p| p.rank_gain().is_some_and(|g| g != 0))
        .collect();
    moved.sort_by_key(|p| std::cmp::Reverse(p.rank_gain().map_or(0, i64::abs)));
    moved.truncate(MOVES_TABLE);
    if moved.is_empty() {
        return "<p>No choice among the best 100 of either changed rank.</p>\n".into();
    }
    format!(
        "<h3>The largest changes of rank among the best 100 of either</h3>\n{}",
        table(&HEADER, rows(&moved, measure), |_| false)
    )
}

/// Choices whose status differs between A and B.
fn status(page: &mut Page, c: &Comparison<'_>) {
    let changed: Vec<&Pair<'_>> = c
        .pairs
        .iter()
        .filter(|p| p.a.status != p.b.status)
        .collect();
    if changed.is_empty() {
        page.p(&format!(
            "Every choice in both has the same status in both. {} only in A, {} only in B.",
            count(c.only_a, "choice"),
            count(c.only_b, "choice")
        ));
        return;
    }
    page.p(&format!(
        "{} changed status (the first {} listed); {} only in A, {} only in B.",
        count(changed.len(), "choice"),
        changed.len().min(TOP_TABLE),
        count(c.only_a, "choice"),
        count(c.only_b, "choice")
    ));
    let rows = changed.iter().take(TOP_TABLE).map(|p| {
        vec![
            Cell::Html(format!("<code>{}</code>", esc(&p.b.choice.label()))),
            Cell::Text(p.a.status.to_string()),
            Cell::Text(p.b.status.to_string()),
            Cell::Text(
                p.b.error
                    .as_deref()
                    .or(p.a.error.as_deref())
                    .map(|e| crate::short_error(e, 120))
                    .unwrap_or_default(),
            ),
        ]
    });
    page.raw(&table(&["choice", "in A", "in B", "error"], rows, |_| {
        false
    }));
}

/// The two runs' conditions side by side.
fn conditions(a: &Report, b: &Report) -> String {
    let fact = |r: &Report, what: &str| -> String {
        let h = &r.info.header;
        match what {
            "file" => h.manifest.clone(),
            "device" => h.device.clone(),
            "tunebox version" => h.tunebox_version.clone(),
            "strategy" => h.selection.strategy.clone(),
            "choices" => r.results.len().to_string(),
            "took" if r.info.elapsed_s > 0.0 => format!("{:.1} s", r.info.elapsed_s),
            "machine" => r.info.conditions.as_ref().map_or_else(String::new, |c| {
                if c.busy {
                    format!("busy ({} of {} windows disturbed)", c.disturbed, c.windows)
                } else {
                    format!("quiet; speed drift {:.1} %", c.drift * 100.0)
                }
            }),
            _ => String::new(),
        }
    };
    let rows = [
        "file",
        "device",
        "tunebox version",
        "strategy",
        "choices",
        "took",
        "machine",
    ]
    .into_iter()
    .map(|what| {
        vec![
            Cell::Text(what.to_owned()),
            Cell::Text(fact(a, what)),
            Cell::Text(fact(b, what)),
        ]
    });
    table(&["", "A", "B"], rows, |_| false)
}
