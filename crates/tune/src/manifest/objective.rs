//! What ranks the choices: their time (the default), or a metric, as Kernel Tuner's
//! `objective` and `objective_higher_is_better` (`tune_kernel(…, objective="GFLOP/s",
//! objective_higher_is_better=True)`).
//!
//! The ranking, the best choice, the reports (JSON, CSV, T4) and the strategies all follow it:
//! a strategy minimizes [`crate::ChoiceResult::cost`], which is the time, the metric, or the
//! metric negated when higher is better (Kernel Tuner's strategies do the same).

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// The name of the default objective: the measured time.
pub(crate) const TIME: &str = "time";

/// What ranks the choices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Objective {
    /// `time`, or the name of one of the manifest's metrics.
    pub name: String,
    /// Whether a larger value is better (a rate such as GFLOP/s); false for a time or a cost.
    pub higher_is_better: bool,
}

impl Default for Objective {
    /// The time, lower is better.
    fn default() -> Objective {
        Objective {
            name: TIME.to_owned(),
            higher_is_better: false,
        }
    }
}

impl Objective {
    /// Whether this is the default objective (the time, lower is better).
    pub(crate) fn is_time(&self) -> bool {
        self.name == TIME && !self.higher_is_better
    }

    /// The cost to minimize for a result of `median_ms` and `metrics`: the objective's value,
    /// negated when higher is better; `None` when the result lacks it.
    pub(crate) fn cost(
        &self,
        median_ms: Option<f64>,
        metrics: &indexmap::IndexMap<String, f64>,
    ) -> Option<f64> {
        let value = if self.name == TIME {
            median_ms?
        } else {
            *metrics.get(&self.name)?
        };
        Some(if self.higher_is_better { -value } else { value })
    }

    /// `GFLOP/s, higher is better`.
    pub fn describe(&self) -> String {
        format!(
            "{}, {} is better",
            self.name,
            if self.higher_is_better {
                "higher"
            } else {
                "lower"
            }
        )
    }
}

/// Reads the manifest's `objective` and `objective_higher_is_better` (Kernel Tuner's names)
/// against the names of its `metrics`; a note when a metric ranks lower-first only by Kernel
/// Tuner's default.
///
/// # Errors
///
/// An objective that is neither `time` nor a metric, naming the metrics.
pub(crate) fn read(
    name: Option<String>,
    higher_is_better: Option<bool>,
    metrics: &[String],
    notes: &mut Vec<String>,
) -> Result<Objective> {
    let name = name.unwrap_or_else(|| TIME.to_owned());
    if name != TIME && !metrics.contains(&name) {
        let known = if metrics.is_empty() {
            "the manifest has no [metrics]; define it there, e.g. [metrics] \"GFLOP/s\" = \"2 * \
             M * N * K / (time / 1e3) / 1e9\""
                .to_owned()
        } else {
            format!("its metrics are {}", metrics.join(", "))
        };
        bail!("objective = {name:?} is neither \"time\" nor a metric: {known}");
    }
    if higher_is_better.is_none() && name != TIME {
        notes.push(format!(
            "objective {name:?} ranks lower values first (objective_higher_is_better defaults \
             to false, as in Kernel Tuner); set objective_higher_is_better = true for a rate \
             such as GFLOP/s"
        ));
    }
    Ok(Objective {
        name,
        higher_is_better: higher_is_better.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_objective_is_time_or_a_metric() {
        let metrics = ["GFLOP/s".to_owned()];
        let mut notes = Vec::new();
        let time = read(None, None, &metrics, &mut notes).unwrap();
        assert!(time.is_time() && notes.is_empty());
        let gflops = read(Some("GFLOP/s".into()), Some(true), &metrics, &mut notes).unwrap();
        assert_eq!(gflops.describe(), "GFLOP/s, higher is better");
        let values = indexmap::IndexMap::from([("GFLOP/s".to_owned(), 80.0)]);
        assert_eq!(gflops.cost(Some(2.0), &values), Some(-80.0));
        assert_eq!(time.cost(Some(2.0), &values), Some(2.0));
        assert_eq!(gflops.cost(Some(2.0), &indexmap::IndexMap::new()), None);
        assert!(notes.is_empty());
        read(Some("GFLOP/s".into()), None, &metrics, &mut notes).unwrap();
        assert!(
            notes[0].contains("objective_higher_is_better = true"),
            "{notes:?}"
        );
        let err = read(Some("GB/s".into()), None, &metrics, &mut notes).unwrap_err();
        assert!(err.to_string().contains("its metrics are GFLOP/s"), "{err}");
        let err = read(Some("GB/s".into()), None, &[], &mut notes).unwrap_err();
        assert!(err.to_string().contains("no [metrics]"), "{err}");
    }

    /// An `ok` result of choice `index` at `median` ms with metric `GFLOP/s` = `gflops`.
    fn result(index: usize, median: f64, gflops: Option<f64>) -> crate::ChoiceResult {
        let choice = crate::Choice::new(
            [("X".to_owned(), crate::ParamValue::Int(index as i64))]
                .into_iter()
                .collect(),
        );
        let mut r = crate::ChoiceResult::failed(
            index,
            choice,
            tunebox_pool::Status::Ok,
            String::new(),
            "cpu",
        );
        r.error = None;
        r.stats = Some(tunebox_protocol::TimingStats::unmeasured().with_median_ms(median));
        r.metrics.extend(gflops.map(|g| ("GFLOP/s".to_owned(), g)));
        r
    }

    #[test]
    fn the_ranking_follows_the_objective() {
        // The fastest does the least work: by time it wins, by GFLOP/s it is last.
        let mut results = vec![
            result(0, 1.0, Some(10.0)),
            result(1, 2.0, Some(40.0)),
            result(2, 3.0, None),
            result(3, 4.0, Some(20.0)),
        ];
        let order = |results: &[crate::ChoiceResult]| -> Vec<usize> {
            results.iter().map(|r| r.index).collect()
        };
        crate::results::rank(&mut results);
        assert_eq!(order(&results), [0, 1, 2, 3]);
        let higher = Objective {
            name: "GFLOP/s".into(),
            higher_is_better: true,
        };
        crate::results::set_objective(&mut results, Some(&higher));
        crate::results::rank(&mut results);
        // One whose metric failed ranks after those that have it.
        assert_eq!(order(&results), [1, 3, 0, 2]);
        assert_eq!(results[0].objective_value(), Some(40.0));
        assert_eq!(crate::search::strategies::objective(&results[0]), -40.0);
        let lower = Objective {
            higher_is_better: false,
            ..higher
        };
        crate::results::set_objective(&mut results, Some(&lower));
        crate::results::rank(&mut results);
        assert_eq!(order(&results), [0, 3, 1, 2]);
        crate::results::set_objective(&mut results, None);
        crate::results::rank(&mut results);
        assert_eq!(order(&results), [0, 1, 2, 3]);
    }
}
