//! Each parameter's effect: the time (or the objective) of every choice against the
//! parameter's value, the best reachable with each value and the median, parameters ordered by
//! how much the best reachable moves with them.

use tunebox_pool::Status;

use super::measure::{Measure, count, jitter, median, sample};
use super::page::{Cell, Page, details, esc, table};
use super::plot::{Axis, Figure, Layer, Mark, Stroke, colour};
use crate::results::ChoiceResult;
use crate::space::ParamValue;

/// Points drawn per value (a seeded sample beyond; the best of each value always drawn).
const POINTS_PER_VALUE: usize = 150;
/// Points drawn per figure, over all values.
const POINTS_PER_FIGURE: usize = 1200;

/// One value of a parameter and the choices that have it.
struct ValueStats {
    value: ParamValue,
    /// `(index, value)` of each ok choice with it, in rank order.
    ok: Vec<(usize, f64)>,
    failed: usize,
}

impl ValueStats {
    fn best(&self, measure: &Measure) -> Option<f64> {
        measure.best(self.ok.iter().map(|p| p.1))
    }

    fn median(&self) -> f64 {
        median(&mut self.ok.iter().map(|p| p.1).collect::<Vec<_>>())
    }
}

/// One parameter's values, in order (numbers ascending, others as first seen).
struct ParamStats {
    name: String,
    values: Vec<ValueStats>,
    /// The worst of the values' best over the best's best (≥ 1): how much choosing this
    /// parameter's value alone can cost.
    spread: f64,
}

/// The effect of each parameter among `members` (one device's results, ranked).
pub(super) fn section(page: &mut Page, members: &[&ChoiceResult], measure: &Measure, tag: &str) {
    let params = param_stats(members, measure);
    if params.is_empty() {
        page.p("No parameter takes two values among the ok choices: nothing to compare.");
        return;
    }
    page.p(&format!(
        "For each parameter, every ok choice's {} against the parameter's value, the best \
         reachable with each value (the best choice that has it) and the median. Parameters \
         come in order of how much the best reachable changes with them: choosing the worst \
         value of the first costs the most.",
        measure.label()
    ));
    page.raw(&summary_table(&params, measure));
    for (i, param) in params.iter().enumerate() {
        page.figure(&figure(param, measure, &format!("param{tag}-{i}")));
        page.raw(&value_table(param, measure));
    }
}

fn param_stats(members: &[&ChoiceResult], measure: &Measure) -> Vec<ParamStats> {
    let Some(first) = members.first() else {
        return Vec::new();
    };
    let names: Vec<String> = first.choice.values().map(|(n, _)| n.clone()).collect();
    let mut params: Vec<ParamStats> = names
        .into_iter()
        .filter_map(|name| {
            let mut values: Vec<ValueStats> = Vec::new();
            for r in members {
                let Some((_, v)) = r.choice.values().find(|(n, _)| **n == name) else {
                    continue;
                };
                let position = match values.iter().position(|s| s.value == *v) {
                    Some(p) => p,
                    None => {
                        values.push(ValueStats {
                            value: v.clone(),
                            ok: Vec::new(),
                            failed: 0,
                        });
                        values.len() - 1
                    }
                };
                match (r.status, measure.value(r)) {
                    (Status::Ok, Some(x)) => values[position].ok.push((r.index, x)),
                    _ => values[position].failed += 1,
                }
            }
            sort_values(&mut values);
            let bests: Vec<f64> = values.iter().filter_map(|v| v.best(measure)).collect();
            if bests.len() < 2 {
                return None;
            }
            let best = measure.best(bests.iter().copied())?;
            let spread = bests
                .iter()
                .map(|b| measure.factor(*b, best))
                .fold(1.0, f64::max);
            Some(ParamStats {
                name,
                values,
                spread,
            })
        })
        .collect();
    params.sort_by(|a, b| b.spread.total_cmp(&a.spread));
    params
}

/// Numbers ascending; strings and booleans keep the order first seen.
fn sort_values(values: &mut [ValueStats]) {
    let number = |v: &ParamValue| match v {
        ParamValue::Int(i) => Some(*i as f64),
        ParamValue::Float(f) => Some(*f),
        _ => None,
    };
    if values.iter().all(|v| number(&v.value).is_some()) {
        values.sort_by(|a, b| {
            let (a, b) = (number(&a.value), number(&b.value));
            a.unwrap_or(0.0).total_cmp(&b.unwrap_or(0.0))
        });
    }
}

fn summary_table(params: &[ParamStats], measure: &Measure) -> String {
    let rows = params.iter().map(|p| {
        let best = p
            .values
            .iter()
            .filter_map(|v| Some((v, v.best(measure)?)))
            .reduce(|a, b| if measure.better(b.1, a.1) { b } else { a });
        vec![
            Cell::Html(format!("<code>{}</code>", esc(&p.name))),
            Cell::Num(p.values.len().to_string()),
            Cell::Html(best.map_or_else(String::new, |(v, _)| {
                format!("<code>{}</code>", esc(&v.value.to_string()))
            })),
            Cell::Num(format!("{:.2}×", p.spread)),
        ]
    });
    table(
        &[
            "parameter",
            "values",
            "best value",
            "worst value's best / best value's best",
        ],
        rows,
        |_| false,
    )
}

/// A parameter's figure: each ok choice by its value (a seeded sample of at most
/// [`POINTS_PER_VALUE`] per value), the best reachable with each value and their median.
fn figure(param: &ParamStats, measure: &Measure, id: &str) -> Figure {
    let names: Vec<String> = param.values.iter().map(|v| v.value.to_string()).collect();
    let per_value = POINTS_PER_VALUE.min(POINTS_PER_FIGURE / param.values.len().max(1));
    let mut points = Vec::new();
    let mut bests = Vec::new();
    let mut medians = Vec::new();
    let mut sampled = false;
    for (x, v) in param.values.iter().enumerate() {
        let x = x as f64;
        let picked = sample(v.ok.len(), per_value, x.to_bits());
        sampled |= picked.len() < v.ok.len();
        points.extend(
            picked
                .into_iter()
                .map(|i| (x + jitter(v.ok[i].0, 0.5), v.ok[i].1)),
        );
        if let Some(best) = v.best(measure) {
            bests.push((x, best));
            medians.push((x, v.median()));
        }
    }
    let caption = figure_caption(param, measure, per_value, sampled);
    let all = points.iter().chain(&bests).map(|p| p.1);
    Figure::new(
        id,
        caption,
        Axis::categories(format!("{} (parameter value)", param.name), names),
        Axis::fitting(measure.label(), all),
    )
    .layer(Layer::points("a choice", colour::BLUE, Mark::Dot, points))
    .layer(Layer::line(
        "median",
        colour::ORANGE,
        Stroke::Dashed,
        Some(Mark::Square),
        medians,
    ))
    .layer(Layer::line(
        "best reachable",
        colour::BLACK,
        Stroke::Solid,
        Some(Mark::Triangle),
        bests,
    ))
    .size(760, 320)
}

/// The caption of a parameter's figure, with the best reachable with each value
/// (`sampled`: its choices were drawn `per_value` at most).
fn figure_caption(
    param: &ParamStats,
    measure: &Measure,
    per_value: usize,
    sampled: bool,
) -> String {
    let said: Vec<String> = param
        .values
        .iter()
        .filter_map(|v| Some(format!("{} {}", v.value, measure.show(v.best(measure)?))))
        .collect();
    format!(
        "{}: each dot is an ok choice{} ({} spread sideways to be seen); the solid line with \
         triangles is the best reachable with each value, the dashed line with squares the \
         median. Best reachable: {}.",
        param.name,
        if sampled {
            format!(
                " (a seeded sample of at most {per_value} per value; every value's best is on the line)"
            )
        } else {
            String::new()
        },
        measure.label(),
        said.join("; ")
    )
}

/// The numbers behind a parameter's figure, folded.
fn value_table(param: &ParamStats, measure: &Measure) -> String {
    let rows = param.values.iter().map(|v| {
        vec![
            Cell::Html(format!("<code>{}</code>", esc(&v.value.to_string()))),
            Cell::Num(v.ok.len().to_string()),
            Cell::Num(v.failed.to_string()),
            Cell::Num(v.best(measure).map_or("-".into(), |b| measure.show(b))),
            Cell::Num(if v.ok.is_empty() {
                "-".into()
            } else {
                measure.show(v.median())
            }),
        ]
    });
    details(
        &format!(
            "{}: the numbers ({})",
            esc(&param.name),
            count(param.values.len(), "value")
        ),
        &table(&["value", "ok", "failed", "best", "median"], rows, |_| {
            false
        }),
    )
}
