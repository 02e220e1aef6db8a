//! Two reports of one space side by side (`tunebox report A B`): before and after a change,
//! or two GPUs. Choices are matched by their parameters' values; for each choice in both, the
//! ratio of its times and its change of rank; for the whole, whether the best moved beyond the
//! noise.

use std::collections::HashMap;

use tunebox_pool::Status;

use crate::report::ranking::interval_ms;
use crate::results::{ChoiceResult, Report, best};

/// One choice in both reports.
#[derive(Debug, Clone, Copy)]
pub struct Pair<'a> {
    /// Its result in A.
    pub a: &'a ChoiceResult,
    /// Its result in B.
    pub b: &'a ChoiceResult,
    /// Its rank among A's `ok` results (1: the best), `None` when it failed there.
    pub rank_a: Option<usize>,
    /// … and among B's.
    pub rank_b: Option<usize>,
}

impl Pair<'_> {
    /// Its time in B over its time in A (0.8: 20 % faster in B); `None` unless `ok` in both.
    pub fn ratio(&self) -> Option<f64> {
        let (a, b) = (ok_time(self.a)?, ok_time(self.b)?);
        (a > 0.0).then(|| b / a)
    }

    /// Ranks gained in B (3: three places better), `None` unless ranked in both.
    pub fn rank_gain(&self) -> Option<i64> {
        Some(self.rank_a? as i64 - self.rank_b? as i64)
    }
}

fn ok_time(r: &ChoiceResult) -> Option<f64> {
    r.median_ms().filter(|_| r.status == Status::Ok)
}

/// Whether B's best is A's best, and if not, whether the change is beyond the noise.
#[derive(Debug, Clone, PartialEq)]
pub enum BestMove {
    /// The same choice is the best in both; `ratio` is its time in B over A.
    Held {
        /// Its time in B over its time in A.
        ratio: f64,
    },
    /// Another choice is the best in B.
    Moved {
        /// How much slower A's best is than B's best, in B (0.12: 12 %); `None` when A's best
        /// failed or is missing in B.
        behind_in_b: Option<f64>,
        /// Whether that is beyond the noise: their intervals in B do not overlap (or A's best
        /// failed there); `None` when either has no interval (measured in one rep).
        beyond_noise: Option<bool>,
    },
    /// One report has no `ok` choice.
    NoBest,
}

/// Two reports of one space, matched choice by choice.
#[derive(Debug, Clone)]
pub struct Comparison<'a> {
    /// The report before (or the first device).
    pub a: &'a Report,
    /// The report after (or the second device).
    pub b: &'a Report,
    /// The choices in both, in B's order (ranked).
    pub pairs: Vec<Pair<'a>>,
    /// Choices only A has.
    pub only_a: usize,
    /// Choices only B has.
    pub only_b: usize,
    /// The best of A.
    pub best_a: Option<&'a ChoiceResult>,
    /// The best of B.
    pub best_b: Option<&'a ChoiceResult>,
    /// What became of the best.
    pub best_move: BestMove,
}

impl<'a> Comparison<'a> {
    /// Matches the choices of `a` and `b` by their parameters' values.
    ///
    /// # Errors
    ///
    /// [`crate::TuneError::Report`]: the reports' parameters differ (not one space), they
    /// share no choice, or either holds results of several devices ranked apart (compare one
    /// device's: `tunebox merge` without `--across-devices` keeps them apart).
    pub fn new(a: &'a Report, b: &'a Report) -> crate::Result<Comparison<'a>> {
        let fail = |message: String| crate::TuneError::report(anyhow::Error::msg(message));
        for (name, report) in [("A", a), ("B", b)] {
            if report.groups().len() > 1 {
                return Err(fail(format!(
                    "{name} ({}) holds results of {} devices ranked apart; compare one \
                     device's results",
                    report.info.header.manifest,
                    report.groups().len()
                )));
            }
        }
        let (params_a, params_b) = (param_names(a), param_names(b));
        if params_a != params_b {
            return Err(fail(format!(
                "A and B are not of one space: A's params are {}, B's {}",
                params_a.join(", "),
                params_b.join(", ")
            )));
        }
        let ranks_a = ranks(a);
        let ranks_b = ranks(b);
        let by_label: HashMap<String, &ChoiceResult> =
            a.results.iter().map(|r| (r.choice.label(), r)).collect();
        let mut pairs = Vec::new();
        for (position, rb) in b.results.iter().enumerate() {
            if let Some(ra) = by_label.get(&rb.choice.label()) {
                let rank_a = a
                    .results
                    .iter()
                    .position(|r| std::ptr::eq(r, *ra))
                    .and_then(|p| ranks_a[p]);
                pairs.push(Pair {
                    a: ra,
                    b: rb,
                    rank_a,
                    rank_b: ranks_b[position],
                });
            }
        }
        if pairs.is_empty() {
            return Err(fail(format!(
                "A ({}) and B ({}) share no choice: nothing to compare",
                a.info.header.manifest, b.info.header.manifest
            )));
        }
        let (best_a, best_b) = (best(&a.results), best(&b.results));
        let best_move = best_move(best_a, best_b, &pairs);
        Ok(Comparison {
            a,
            b,
            only_a: a.results.len() - pairs.len(),
            only_b: b.results.len() - pairs.len(),
            pairs,
            best_a,
            best_b,
            best_move,
        })
    }

    /// The ratios B / A of the choices `ok` in both.
    pub fn ratios(&self) -> Vec<f64> {
        self.pairs.iter().filter_map(Pair::ratio).collect()
    }

    /// The geometric mean of [`Comparison::ratios`] (`None` with none).
    pub fn geometric_mean_ratio(&self) -> Option<f64> {
        let ratios = self.ratios();
        (!ratios.is_empty())
            .then(|| (ratios.iter().map(|r| r.ln()).sum::<f64>() / ratios.len() as f64).exp())
    }

    /// Spearman's rank correlation of the times of the choices `ok` in both (1: the same
    /// order; `None` with fewer than 3).
    pub fn rank_correlation(&self) -> Option<f64> {
        let both: Vec<(f64, f64)> = self
            .pairs
            .iter()
            .filter_map(|p| Some((ok_time(p.a)?, ok_time(p.b)?)))
            .collect();
        if both.len() < 3 {
            return None;
        }
        let ra = rank_positions(both.iter().map(|p| p.0));
        let rb = rank_positions(both.iter().map(|p| p.1));
        let n = both.len() as f64;
        let d2: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - y).powi(2)).sum();
        Some(1.0 - 6.0 * d2 / (n * (n * n - 1.0)))
    }

    /// The comparison in a few lines, for a terminal.
    pub fn summary(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "A: {} ({}, {} choices); B: {} ({}, {} choices); {} in both, {} only in A, {} only \
             in B",
            self.a.info.header.name,
            self.a.info.header.device,
            self.a.results.len(),
            self.b.info.header.name,
            self.b.info.header.device,
            self.b.results.len(),
            self.pairs.len(),
            self.only_a,
            self.only_b
        )];
        if let Some(g) = self.geometric_mean_ratio() {
            let mut line = format!(
                "time B / A: geometric mean {g:.3} over {} choices ok in both",
                self.ratios().len()
            );
            if let Some(rho) = self.rank_correlation() {
                line.push_str(&format!("; rank correlation {rho:.3}"));
            }
            lines.push(line);
        }
        lines.push(self.best_move_text());
        lines
    }

    /// What became of the best, in a sentence.
    pub fn best_move_text(&self) -> String {
        let label = |r: Option<&ChoiceResult>| r.map_or_else(String::new, |r| r.choice.label());
        let time = |r: Option<&ChoiceResult>| {
            r.and_then(ChoiceResult::median_ms)
                .map_or_else(|| "-".into(), tunebox_protocol::short_ms)
        };
        match &self.best_move {
            BestMove::NoBest => "best: one of the reports has no ok choice".into(),
            BestMove::Held { ratio } => format!(
                "best: held: {} is the best in both ({} in A, {} in B, B / A {ratio:.3})",
                label(self.best_a),
                time(self.best_a),
                time(self.best_b)
            ),
            BestMove::Moved {
                behind_in_b,
                beyond_noise,
            } => {
                let behind = behind_in_b.map_or_else(
                    || "failed or was not measured in B".to_owned(),
                    |f| format!("is {:.1} % behind it in B", f * 100.0),
                );
                let verdict = match beyond_noise {
                    Some(true) => "moved beyond the noise",
                    Some(false) => "moved, but within the noise (their intervals in B overlap)",
                    None => "moved; the noise is not known (measured in one rep)",
                };
                format!(
                    "best: {verdict}: B's best is {} ({}); A's best, {} ({} in A), {behind}",
                    label(self.best_b),
                    time(self.best_b),
                    label(self.best_a),
                    time(self.best_a)
                )
            }
        }
    }
}

fn param_names(report: &Report) -> Vec<String> {
    let mut names: Vec<String> = report
        .results
        .first()
        .map(|r| r.choice.values().map(|(n, _)| n.clone()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// Each result's rank among the `ok` ones (ranked order), by position.
fn ranks(report: &Report) -> Vec<Option<usize>> {
    let mut rank = 0;
    report
        .results
        .iter()
        .map(|r| {
            (r.status == Status::Ok).then(|| {
                rank += 1;
                rank
            })
        })
        .collect()
}

/// The rank (0-based position when sorted) of each of `values`, ties given their mean rank.
fn rank_positions(values: impl Iterator<Item = f64>) -> Vec<f64> {
    let values: Vec<f64> = values.collect();
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&i, &j| values[i].total_cmp(&values[j]));
    let mut ranks = vec![0.0; values.len()];
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && values[order[end]] == values[order[start]] {
            end += 1;
        }
        let mean = (start + end - 1) as f64 / 2.0;
        for &i in &order[start..end] {
            ranks[i] = mean;
        }
        start = end;
    }
    ranks
}

fn best_move(
    best_a: Option<&ChoiceResult>,
    best_b: Option<&ChoiceResult>,
    pairs: &[Pair<'_>],
) -> BestMove {
    let (Some(best_a), Some(best_b)) = (best_a, best_b) else {
        return BestMove::NoBest;
    };
    if best_a.choice == best_b.choice {
        let ratio = match (best_a.median_ms(), best_b.median_ms()) {
            (Some(a), Some(b)) if a > 0.0 => b / a,
            _ => f64::NAN,
        };
        return BestMove::Held { ratio };
    }
    // A's best, as B measured it.
    let a_in_b = pairs
        .iter()
        .find(|p| p.a.choice == best_a.choice)
        .map(|p| p.b)
        .filter(|r| r.status == Status::Ok);
    let Some(a_in_b) = a_in_b else {
        return BestMove::Moved {
            behind_in_b: None,
            beyond_noise: Some(true),
        };
    };
    let behind_in_b = match (a_in_b.median_ms(), best_b.median_ms()) {
        (Some(x), Some(y)) if y > 0.0 => Some(x / y - 1.0),
        _ => None,
    };
    let beyond_noise = match (interval_ms(a_in_b), interval_ms(best_b)) {
        (Some(x), Some(y)) => Some(x[0] > y[1] || y[0] > x[1]),
        _ => None,
    };
    BestMove::Moved {
        behind_in_b,
        beyond_noise,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{RunHeader, RunInfo, rank};
    use crate::space::{Choice, ParamValue};
    use indexmap::IndexMap;
    use tunebox_protocol::TimingStats;

    fn result(x: i64, ms: Option<f64>, noise: f64) -> ChoiceResult {
        let choice = Choice::new(IndexMap::from([("X".to_owned(), ParamValue::Int(x))]));
        match ms {
            Some(ms) => ChoiceResult {
                stats: Some(
                    TimingStats::unmeasured()
                        .with_median_ms(ms)
                        .with_mean_ms(ms)
                        .with_min_ms(ms)
                        .with_max_ms(ms)
                        .with_p20_ms(ms * (1.0 - noise))
                        .with_p80_ms(ms * (1.0 + noise))
                        .with_stddev_ms(0.0)
                        .with_reps(10)
                        .with_warmup_reps(0)
                        .with_stopped("reps".into())
                        .with_preempted_reps(0),
                ),
                error: None,
                ..ChoiceResult::failed(x as usize, choice, Status::Ok, String::new(), "cpu")
            },
            None => ChoiceResult::failed(x as usize, choice, Status::Crashed, "boom".into(), "cpu"),
        }
    }

    fn report(results: Vec<ChoiceResult>) -> Report {
        let mut results = results;
        rank(&mut results);
        Report {
            info: RunInfo::new(RunHeader {
                manifest: "m.toml".into(),
                manifest_hash: String::new(),
                kernel: "k".into(),
                ..RunHeader::for_tests(results.len())
            }),
            results,
        }
    }

    #[test]
    fn a_best_that_moved_clear_of_its_interval_moved_beyond_the_noise() {
        let a = report(vec![
            result(1, Some(1.0), 0.01),
            result(2, Some(1.2), 0.01),
            result(3, Some(2.0), 0.01),
            result(4, None, 0.0),
        ]);
        let b = report(vec![
            result(1, Some(1.3), 0.01),
            result(2, Some(1.1), 0.01),
            result(3, Some(2.2), 0.01),
            result(5, Some(9.0), 0.01),
        ]);
        let c = Comparison::new(&a, &b).expect("one space");
        assert_eq!((c.pairs.len(), c.only_a, c.only_b), (3, 1, 1));
        let BestMove::Moved {
            behind_in_b: Some(behind),
            beyond_noise: Some(true),
        } = c.best_move
        else {
            panic!("{:?}", c.best_move);
        };
        assert!((behind - (1.3 / 1.1 - 1.0)).abs() < 1e-12);
        // X=2 went from rank 2 to rank 1.
        let x2 = c.pairs.iter().find(|p| p.a.index == 2).expect("in both");
        assert_eq!(x2.rank_gain(), Some(1));
        assert!((x2.ratio().expect("ok in both") - 1.1 / 1.2).abs() < 1e-12);
        let g = c.geometric_mean_ratio().expect("ratios");
        assert!((g - (1.3f64 * 1.1 / 1.2 * 1.1).cbrt()).abs() < 1e-12);
        assert!(
            c.best_move_text()
                .starts_with("best: moved beyond the noise")
        );
        // Same order but the first two swapped: 1 - 6*2/(3*8).
        assert_eq!(c.rank_correlation(), Some(0.5));
    }

    #[test]
    fn a_best_within_the_noise_or_held_says_so() {
        let a = report(vec![result(1, Some(1.0), 0.1), result(2, Some(1.05), 0.1)]);
        let b = report(vec![result(1, Some(1.04), 0.1), result(2, Some(1.0), 0.1)]);
        let c = Comparison::new(&a, &b).expect("one space");
        assert!(matches!(
            c.best_move,
            BestMove::Moved {
                beyond_noise: Some(false),
                ..
            }
        ));
        let held = Comparison::new(&a, &a).expect("one space");
        assert_eq!(held.best_move, BestMove::Held { ratio: 1.0 });
    }

    #[test]
    fn reports_of_other_spaces_are_refused() {
        let a = report(vec![result(1, Some(1.0), 0.1)]);
        let mut other = result(1, Some(1.0), 0.1);
        other.choice = Choice::new(IndexMap::from([("Y".to_owned(), ParamValue::Int(1))]));
        let b = report(vec![other]);
        let e = Comparison::new(&a, &b)
            .expect_err("other params")
            .to_string();
        assert!(e.contains("not of one space"), "{e}");
    }
}
