//! What the figures plot of a result, and how a large report is thinned so that its page stays
//! small: seeded samples of the many points, curves cut to what a figure can show.

use crate::manifest::objective::Objective;
use crate::results::{ChoiceResult, Report};

/// What the figures plot of a result: its time, in the unit that fits the report, or the
/// objective (a metric) when the run is ranked by one.
#[derive(Debug, Clone)]
pub(crate) struct Measure {
    /// The time's unit (`ms`, `µs`, `s`, `ns`), and its size in ms.
    unit: (&'static str, f64),
    /// The metric that ranks, when not the time.
    metric: Option<Objective>,
}

impl Measure {
    /// The measure of `report`: its objective, or its times in the unit of its best.
    pub(crate) fn of(report: &Report) -> Measure {
        let metric = report
            .info
            .header
            .objective
            .clone()
            .filter(|o| !o.is_time());
        Measure {
            unit: Measure::unit_for(report.results.iter().filter_map(ChoiceResult::median_ms)),
            metric,
        }
    }

    /// Times (ms) in the unit of the smallest of `times_ms`.
    pub(crate) fn times(times_ms: impl Iterator<Item = f64>) -> Measure {
        Measure {
            unit: Measure::unit_for(times_ms),
            metric: None,
        }
    }

    /// The unit of the smallest positive time (as `short_ms` picks it).
    fn unit_for(times_ms: impl Iterator<Item = f64>) -> (&'static str, f64) {
        let least = times_ms
            .filter(|t| *t > 0.0 && t.is_finite())
            .fold(f64::INFINITY, f64::min);
        match least {
            t if t.is_infinite() => ("ms", 1.0),
            t if t >= 1e3 => ("s", 1e3),
            t if t >= 1.0 => ("ms", 1.0),
            t if t >= 1e-3 => ("µs", 1e-3),
            _ => ("ns", 1e-6),
        }
    }

    /// The value plotted for `r` (an `ok` result), in this measure's unit.
    pub(crate) fn value(&self, r: &ChoiceResult) -> Option<f64> {
        match &self.metric {
            Some(_) => r.objective_value(),
            None => r.median_ms().map(|ms| self.of_ms(ms)),
        }
    }

    /// A time in ms, in this measure's unit (a metric's values are not times: as they are).
    pub(crate) fn of_ms(&self, ms: f64) -> f64 {
        ms / self.unit.1
    }

    /// Whether it is the time (intervals are of times).
    pub(crate) fn is_time(&self) -> bool {
        self.metric.is_none()
    }

    /// The axis label, with the unit: `time (ms)`, `GFLOP/s (higher is better)`.
    pub(crate) fn label(&self) -> String {
        match &self.metric {
            None => format!("time ({})", self.unit.0),
            Some(o) => format!(
                "{} ({} is better)",
                o.name,
                if o.higher_is_better {
                    "higher"
                } else {
                    "lower"
                }
            ),
        }
    }

    /// A value with its unit: `2.87 ms`, `71.2 GFLOP/s`.
    pub(crate) fn show(&self, v: f64) -> String {
        match &self.metric {
            None => tunebox_protocol::short_ms(v * self.unit.1),
            Some(o) => format!("{} {}", crate::format_value(v), o.name),
        }
    }

    /// Whether `a` is better than `b`.
    pub(crate) fn better(&self, a: f64, b: f64) -> bool {
        if self.higher_is_better() {
            a > b
        } else {
            a < b
        }
    }

    /// Whether a larger value is better.
    pub(crate) fn higher_is_better(&self) -> bool {
        self.metric.as_ref().is_some_and(|o| o.higher_is_better)
    }

    /// The best of `values` (`None` when empty).
    pub(crate) fn best(&self, values: impl Iterator<Item = f64>) -> Option<f64> {
        values.reduce(|a, b| if self.better(b, a) { b } else { a })
    }

    /// How many times worse `v` is than `best` (≥ 1): `v / best` for a time.
    pub(crate) fn factor(&self, v: f64, best: f64) -> f64 {
        if self.higher_is_better() {
            best / v
        } else {
            v / best
        }
    }
}

/// A seeded sample of at most `k` of the positions `0..n`, ascending.
pub(crate) fn sample(n: usize, k: usize, seed: u64) -> Vec<usize> {
    if k >= n {
        return (0..n).collect();
    }
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut all: Vec<usize> = (0..n).collect();
    // The first k of a partial Fisher-Yates shuffle.
    for i in 0..k {
        let j = rng.usize(i..n);
        all.swap(i, j);
    }
    let mut picked = all[..k].to_vec();
    picked.sort_unstable();
    picked
}

/// A horizontal offset in `(-width/2, width/2)` for the point of choice `index`, the same on
/// every run, so that points of one category do not hide each other.
pub(crate) fn jitter(index: usize, width: f64) -> f64 {
    // A multiplicative hash spreads neighbouring indices apart.
    let h = (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    (h as f64 / (1u64 << 24) as f64 - 0.5) * width
}

/// `points` cut to at most `max`, evenly by position, the first and the last kept.
pub(crate) fn thin<T: Copy>(points: &[T], max: usize) -> Vec<T> {
    if points.len() <= max || max < 2 {
        return points.to_vec();
    }
    let last = points.len() - 1;
    (0..max).map(|i| points[i * last / (max - 1)]).collect()
}

/// The median of `values` (sorted in place); NaN when empty.
pub(crate) fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// `n` with its noun: `1 choice`, `3 choices`.
pub(crate) fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_seeded_and_bounded() {
        let a = sample(100_000, 500, 7);
        assert_eq!(a.len(), 500);
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(a, sample(100_000, 500, 7));
        assert_ne!(a, sample(100_000, 500, 8));
        assert_eq!(sample(3, 10, 0), [0, 1, 2]);
        let thinned = thin(&(0..1000).collect::<Vec<_>>(), 11);
        assert_eq!(
            thinned,
            [0, 99, 199, 299, 399, 499, 599, 699, 799, 899, 999]
        );
        assert!((0..1000).all(|i| jitter(i, 0.6).abs() <= 0.3));
        assert_eq!(median(&mut [3.0, 1.0, 2.0, 10.0]), 2.5);
    }

    #[test]
    fn times_take_the_unit_of_the_fastest() {
        let m = Measure::times([2.5, 30.0].into_iter());
        assert_eq!(m.label(), "time (ms)");
        let m = Measure::times([0.0123, 3.0].into_iter());
        assert_eq!(m.label(), "time (µs)");
        assert_eq!(m.of_ms(0.0123), 12.3);
        assert_eq!(m.show(12.3), "12.30 µs");
        assert!(m.better(1.0, 2.0));
        assert_eq!(m.best([3.0, 1.0, 2.0].into_iter()), Some(1.0));
    }
}
