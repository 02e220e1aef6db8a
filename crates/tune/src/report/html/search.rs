//! The search: the best found so far against time and against choices measured, as the
//! autotuning methodology (Willemsen et al., FGCS 2024) draws a search, with its calculated
//! random-search baseline and the optimum when the run was replayed on a recording that holds
//! the whole space.
//!
//! The course of a search comes from what the report keeps: a replay's trace (simulated time);
//! a tunebox run's windows (when each ended, on the run's clock); or, for a file another tool
//! recorded, the order of its records (no clock).

use tunebox_pool::Status;

use super::measure::{Measure, count, sample, thin};
use super::page::Page;
use super::plot::{Axis, Figure, Layer, Mark, Stroke, colour};
use crate::results::{ChoiceResult, Report};
use crate::search::replay::{Recorded, Trace};
use crate::search::strategies::score::{Settings, SpaceStats, score};

/// Measured choices drawn as dots (a seeded sample beyond; every new best drawn).
const DOTS: usize = 1500;
/// Points of the baseline curve.
const BASELINE_POINTS: usize = 120;

/// A replayed search: its trace, and the recording it replayed (the whole space's times and
/// costs, for the baseline), when at hand.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Replayed<'a> {
    pub(crate) trace: &'a Trace,
    pub(crate) recorded: Option<&'a Recorded>,
}

/// What the clock of a course is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Clock {
    /// A replay's simulated time.
    Simulated,
    /// The run's own clock (when its windows ended).
    Run,
    /// None: the order of the records only.
    Order,
}

/// One measurement of the course.
#[derive(Debug, Clone, Copy)]
struct Event {
    /// When it finished, s since the course began (`None` without a clock).
    at_s: Option<f64>,
    /// The first measurement of its choice (a choice measured).
    new_choice: bool,
    /// Its value in the measure's unit, `None` for a failure.
    value: Option<f64>,
}

/// Points of a figure, `(x, y)`.
type Points = Vec<(f64, f64)>;

/// A search's measurements in order.
struct Course {
    clock: Clock,
    events: Vec<Event>,
    /// Whether failed choices are among the events.
    with_failures: bool,
}

impl Course {
    /// The course of a replay: every measurement on the simulated clock.
    fn of_trace(trace: &Trace, measure: &Measure) -> Course {
        Course {
            clock: Clock::Simulated,
            events: trace
                .points
                .iter()
                .map(|p| Event {
                    at_s: Some(p.elapsed_ms / 1000.0),
                    new_choice: true,
                    value: p.time_ms.map(|ms| measure.of_ms(ms)),
                })
                .collect(),
            with_failures: true,
        }
    }

    /// The course of a tunebox run: every window, in the order they ended (a choice measured
    /// with its first), its times in `measure` (a time); `None` when no window knows when it
    /// ended.
    fn of_windows(report: &Report, measure: &Measure) -> Option<Course> {
        let mut windows: Vec<(f64, bool, f64)> = Vec::new();
        for r in &report.results {
            let Some(w) = r.windows.as_ref().filter(|_| r.status == Status::Ok) else {
                continue;
            };
            if w.ended_s.len() != w.medians_ms.len() {
                continue;
            }
            for (j, (&ended, &median)) in w.ended_s.iter().zip(&w.medians_ms).enumerate() {
                if ended > 0.0 {
                    windows.push((ended, j == 0, measure.of_ms(median)));
                }
            }
        }
        let start = windows.iter().map(|w| w.0).fold(f64::INFINITY, f64::min);
        if windows.is_empty() {
            return None;
        }
        windows.sort_by(|a, b| a.0.total_cmp(&b.0));
        Some(Course {
            clock: Clock::Run,
            events: windows
                .into_iter()
                .map(|(ended, first, value)| Event {
                    at_s: Some(ended - start),
                    new_choice: first,
                    value: Some(value),
                })
                .collect(),
            with_failures: false,
        })
    }

    /// The course of a file another tool recorded (a Kernel Tuner cache, a T4 file): its
    /// records in order (their index is their position there), no clock; `None` for
    /// tunebox's own reports, whose index is the choice's place in the space, not an order.
    fn of_order(report: &Report, measure: &Measure) -> Option<Course> {
        // Reports read from other tools' files have no backend (`interchange`).
        if !report.info.header.backend.is_empty() {
            return None;
        }
        let mut results: Vec<_> = report.results.iter().collect();
        results.sort_by_key(|r| r.index);
        Some(Course {
            clock: Clock::Order,
            events: results
                .into_iter()
                .map(|r| Event {
                    at_s: None,
                    new_choice: true,
                    value: (r.status == Status::Ok).then(|| measure.value(r)).flatten(),
                })
                .collect(),
            with_failures: true,
        })
    }

    /// The best so far after each event, with `x` its position: a step line, and the points
    /// where the best improved.
    fn best_so_far(
        &self,
        measure: &Measure,
        x: impl Fn(usize, &Event) -> Option<f64>,
    ) -> (Points, Points) {
        let mut line = Vec::new();
        let mut improved = Vec::new();
        let mut best: Option<f64> = None;
        let mut last_x = None;
        for (i, e) in self.events.iter().enumerate() {
            let Some(at) = x(i, e) else { continue };
            last_x = Some(at);
            let Some(v) = e.value else { continue };
            if best.is_none_or(|b| measure.better(v, b)) {
                if let Some(b) = best {
                    line.push((at, b));
                }
                line.push((at, v));
                improved.push((at, v));
                best = Some(v);
            }
        }
        if let (Some(b), Some(at)) = (best, last_x) {
            line.push((at, b));
        }
        (line, improved)
    }

    /// Each measured choice's (first) value at `x`: a seeded sample of at most [`DOTS`].
    fn dots(&self, x: impl Fn(usize, &Event) -> Option<f64>) -> Vec<(f64, f64)> {
        let all: Vec<(f64, f64)> = self
            .events
            .iter()
            .enumerate()
            .filter(|(_, e)| e.new_choice)
            .filter_map(|(i, e)| Some((x(i, e)?, e.value?)))
            .collect();
        sample(all.len(), DOTS, 1)
            .into_iter()
            .map(|i| all[i])
            .collect()
    }

    /// Choices measured by each event (a running count).
    fn counts(&self) -> Vec<f64> {
        let mut n = 0usize;
        self.events
            .iter()
            .map(|e| {
                n += usize::from(e.new_choice);
                n as f64
            })
            .collect()
    }
}

/// The random search's expected best over time and the optimum, from a recording of the whole
/// space (the methodology's calculated baseline); the methodology's score of this one run.
struct Baseline {
    stats: SpaceStats,
    /// The score, or why there is none.
    score: Result<f64, String>,
}

impl Baseline {
    fn of(replayed: Replayed<'_>) -> Option<Baseline> {
        let recorded = replayed.recorded?;
        let (performance, cost_s): (Vec<Option<f64>>, Vec<f64>) = recorded
            .present()
            .map(|(_, m)| {
                (
                    m.time_ms.filter(|_| m.status == Status::Ok),
                    m.cost_ms / 1000.0,
                )
            })
            .unzip();
        let stats = SpaceStats::new(&performance, &cost_s).ok()?;
        let run: Vec<(f64, Option<f64>)> = replayed
            .trace
            .points
            .iter()
            .map(|p| (p.elapsed_ms / 1000.0, p.best_ms))
            .collect();
        let score = score(&stats, &[run], &Settings::default()).map_err(|e| e.to_string());
        Some(Baseline { stats, score })
    }

    /// The expected best of random search at each of `times_s`, in the measure's unit.
    fn at_times(&self, times_s: &[f64], measure: &Measure) -> Vec<(f64, f64)> {
        let values = self.stats.baseline(times_s);
        times_s
            .iter()
            .zip(values)
            .map(|(&t, v)| (t, measure.of_ms(v)))
            .collect()
    }
}

/// The search of `report` (its `replayed` trace when it was replayed).
pub(super) fn section(
    page: &mut Page,
    report: &Report,
    replayed: Option<Replayed<'_>>,
    measure: &Measure,
) {
    // Traces and windows are times, whatever ranks the run; a recorded file's order is of
    // its results, in the report's measure.
    let time = Measure::times(report.results.iter().filter_map(ChoiceResult::median_ms));
    let course = match replayed {
        Some(r) => Some((Course::of_trace(r.trace, &time), &time)),
        None => Course::of_windows(report, &time)
            .map(|c| (c, &time))
            .or_else(|| Course::of_order(report, measure).map(|c| (c, measure))),
    };
    let Some((course, measure)) = course else {
        page.p(
            "This report keeps no course of its search: a replay's report (`tune --replay … \
             --json`) records no clock and no order. `tune --replay … --html` draws it.",
        );
        return;
    };
    if course.events.iter().all(|e| e.value.is_none()) {
        page.p("No choice succeeded: there is no best to follow.");
        return;
    }
    let baseline = replayed.and_then(Baseline::of);
    page.p(&explain(&course, report));
    if course.clock != Clock::Order {
        page.figure(&by_time(&course, baseline.as_ref(), measure));
    }
    page.figure(&by_count(&course, baseline.as_ref(), measure));
    if let Some(b) = &baseline {
        let text = match &b.score {
            Ok(s) => format!(
                "The methodology's score of this run: {s:.3} (0: as good as random search, 1: \
                 the optimum from the start; the mean over the time range it scores, from where \
                 random search is 1 % of the way from the median to the optimum to where it is \
                 95 %)."
            ),
            Err(why) => format!("The methodology cannot score this one run: {why}."),
        };
        page.p(&text);
    }
}

/// What the course is drawn from, in words.
fn explain(course: &Course, report: &Report) -> String {
    let n = course.events.iter().filter(|e| e.new_choice).count();
    match course.clock {
        Clock::Simulated => format!(
            "A replay of {} ({}): each measurement costs the time the recording spent on it \
             (compile, verification, benchmark and framework time), as Kernel Tuner's \
             simulation mode counts it, and the strategy's own time.",
            count(n, "measurement"),
            report.info.header.selection.strategy
        ),
        Clock::Run => format!(
            "{} measured by this run, on the run's clock: a choice counts from its first \
             window, and the best so far is the fastest window seen so far (what the run knew \
             then). Failed choices are not shown: the report keeps no time for them.",
            count(n, "ok choice")
        ),
        Clock::Order => format!(
            "{} in the order the file records them (for a Kernel Tuner cache, the order it \
             measured them); the file keeps no clock that is read here. `tunebox tune T1 \
             --replay FILE --strategy … --html …` simulates a search on it, with time.",
            count(n, "choice")
        ),
    }
}

fn by_time(course: &Course, baseline: Option<&Baseline>, measure: &Measure) -> Figure {
    let x = |_: usize, e: &Event| e.at_s;
    let (line, improved) = course.best_so_far(measure, x);
    let dots = course.dots(x);
    let end = course
        .events
        .iter()
        .filter_map(|e| e.at_s)
        .fold(0.0, f64::max);
    let x_label = match course.clock {
        Clock::Simulated => "simulated time (s)",
        _ => "time since the run's first window ended (s)",
    };
    let caption = caption(course, baseline, measure, &improved, "time");
    let drawn = line.clone();
    let mut figure = course_figure(
        ("search-time", caption, x_label),
        measure,
        dots,
        (line, drawn),
        improved,
    );
    if let Some(b) = baseline {
        let times: Vec<f64> = (0..BASELINE_POINTS)
            .map(|i| end * (i + 1) as f64 / BASELINE_POINTS as f64)
            .collect();
        figure = with_baseline(figure, b, b.at_times(&times, measure), measure, (0.0, end));
    }
    figure
}

fn by_count(course: &Course, baseline: Option<&Baseline>, measure: &Measure) -> Figure {
    let counts = course.counts();
    let x = |i: usize, _: &Event| Some(counts[i]);
    let (line, improved) = course.best_so_far(measure, x);
    let dots = course.dots(x);
    let n = counts.last().copied().unwrap_or(0.0);
    let x_label = if course.with_failures {
        "choices measured"
    } else {
        "ok choices measured"
    };
    let caption = caption(course, baseline, measure, &improved, "choices measured");
    let drawn = thin(&line, 4000);
    let mut figure = course_figure(
        ("search-count", caption, x_label),
        measure,
        dots,
        (line, drawn),
        improved,
    );
    if let Some(b) = baseline {
        // Random search's k-th draw, at the time k draws take on average.
        let ks: Vec<f64> = (0..BASELINE_POINTS)
            .map(|i| (n * (i + 1) as f64 / BASELINE_POINTS as f64).max(1.0))
            .collect();
        let times: Vec<f64> = ks.iter().map(|k| k * b.stats.mean_cost_s()).collect();
        let curve = b
            .at_times(&times, measure)
            .into_iter()
            .zip(&ks)
            .map(|((_, v), k)| (*k, v))
            .collect();
        figure = with_baseline(figure, b, curve, measure, (0.0, n));
    }
    figure
}

/// A figure of the search's course, `(id, caption, x_label)`: each choice measured (`dots`), the
/// best so far (`line`, the axis fitted to all of it, `drawn` its points as drawn) and each new
/// best (`improved`).
fn course_figure(
    (id, caption, x_label): (&str, String, &str),
    measure: &Measure,
    dots: Points,
    (line, drawn): (Points, Points),
    improved: Points,
) -> Figure {
    Figure::new(
        id,
        caption,
        Axis::linear(x_label),
        Axis::fitting(measure.label(), dots.iter().chain(&line).map(|p| p.1)),
    )
    .layer(Layer::points(
        "a choice measured",
        colour::BLUE,
        Mark::Dot,
        dots,
    ))
    .layer(Layer::line(
        "best so far",
        colour::BLACK,
        Stroke::Solid,
        None,
        drawn,
    ))
    .layer(Layer::points(
        "a new best",
        colour::BLACK,
        Mark::Triangle,
        improved,
    ))
}

/// `figure` with random search's expected best (`curve`) and the optimum across `span`.
fn with_baseline(
    figure: Figure,
    baseline: &Baseline,
    curve: Vec<(f64, f64)>,
    measure: &Measure,
    span: (f64, f64),
) -> Figure {
    let optimum = measure.of_ms(baseline.stats.optimum());
    figure
        .layer(Layer::line(
            "random search, expected best",
            colour::ORANGE,
            Stroke::Dashed,
            None,
            curve,
        ))
        .layer(Layer::line(
            "the optimum (recorded)",
            colour::GREEN,
            Stroke::Dotted,
            None,
            vec![(span.0, optimum), (span.1, optimum)],
        ))
}

fn caption(
    course: &Course,
    baseline: Option<&Baseline>,
    measure: &Measure,
    improved: &[(f64, f64)],
    against: &str,
) -> String {
    let best = improved.last().map(|p| p.1);
    let mut text = format!(
        "The best found so far (solid line; triangles where it improved, {} times) against {against}; dots: each choice's {} when measured{}.",
        improved.len(),
        if course.clock == Clock::Run {
            "first window"
        } else {
            "value"
        },
        if course.events.iter().filter(|e| e.new_choice).count() > DOTS {
            format!(" (a seeded sample of {DOTS})")
        } else {
            String::new()
        },
    );
    if let Some(b) = best {
        text.push_str(&format!(" Best: {}.", measure.show(b)));
    }
    if let Some(b) = baseline {
        text.push_str(&format!(
            " Dashed: the best random search finds in expectation (the methodology's calculated \
             baseline, from every recorded choice); dotted: the recording's optimum, {}.",
            measure.show(measure.of_ms(b.stats.optimum()))
        ));
    }
    text
}
