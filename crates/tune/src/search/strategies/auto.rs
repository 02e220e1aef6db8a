//! `auto`: the default adaptive search, Bayesian optimization made robust to what recorded GPU
//! spaces do (Snoek, Larochelle, Adams 2012; Willemsen et al., PMBS 2021; the batch rule after
//! González et al., "Batch Bayesian Optimization via Local Penalization", AISTATS 2016):
//!
//! - **skewed objectives**: the model sees ranks, not times: each told time becomes the standard
//!   normal quantile of its rank among the successful ones (a Gaussian copula), so a space whose
//!   median is 30× its optimum, or one whose times differ by 2%, looks the same to it;
//! - **failed choices** (compile errors, crashes, wrong answers) rank below every success, one
//!   step further down, so the model learns to avoid their region without a made-up time;
//! - **ordinal and categorical params**: a param whose values are all numbers is ordinal, its
//!   value index scaled to [0, 1]; any other (strings, booleans) is categorical, one-hot scaled
//!   so that two different values are as far apart as the ends of an ordinal one;
//! - **batches**: asked for `n > 1` choices (several workers measuring), it proposes up to its
//!   batch size at once, each next one maximizing expected improvement multiplied by
//!   `1 − k(x, chosen)` for the ones already chosen (local penalization), so that a batch spreads;
//! - candidates are the unvisited adjacent neighbours of the 5 best, random walks of one or two
//!   params from the 3 best, and 128 random unvisited choices; the first 10 choices are random;
//! - **late, local search, while it pays**: after 64 results the model has found the good
//!   region, and what is left is to find its best, which a GP on ranks does poorly (its targets
//!   near the top are a few rank steps apart). From there `auto` can climb as `ils` does (Kernel
//!   Tuner's `greedy_ils`: first-improvement over adjacent neighbours, a random walk of 30% of
//!   the params at a local optimum, a restart after 50 optima without a better one), starting
//!   at the best choice found. Where the space is rough the climb is near random (the AMD
//!   spaces of the repository's data), so it does not take over for good: the climb and the
//!   model take **turns** of 16 results, and each next turn goes to the one whose last 16
//!   results improved the best more (relative improvement), to the other on a tie (neither
//!   did). The climb keeps the search only while it is measured to improve it. With a batch,
//!   on the climb's turn the climb has one slot and the model the others.
//!
//! [`AutoOptions`] holds the few settings (random start, ξ, the transform, the batch size, the
//! handoff, the turns). The handoff (64, from 16, 32, 64, 128, 256 and never), the turns (16,
//! from 16, 32 and none) and the rank transform were chosen by leave-one-GPU-out and
//! leave-one-kernel-out on the repository's data (six GPUs, two kernels), choosing only among
//! settings not behind `bayes` beyond twice the standard error (docs/search.md); the others are
//! the usual ones of GP-EI (ξ = 0.01, length scale by marginal likelihood over a grid). Its
//! cost per model step is one GP fit on at most 128 points (a Cholesky factorization,
//! O(128³)) plus O(128²) per candidate: a few milliseconds, independent of the space's size and
//! of the budget; a climb step costs microseconds.

use super::Core;
use super::bayes::{Gp, normal, rbf};
use crate::results::ChoiceResult;
use crate::search::strategy::Strategy;
use crate::space::{ParamValue, SearchSpace};

const POOL: usize = 128;
const WALKS: usize = 32;
const MAX_POINTS: usize = 128;
/// Results before local search takes turns with the model, chosen by leave-one-out
/// (docs/search.md).
const HANDOFF: usize = 64;
/// Results in a turn of the climb or the model after the handoff, chosen by leave-one-out.
const TURNS: usize = 16;

/// What `auto` can be told; [`AutoOptions::default`] is what `--strategy auto` runs (chosen by
/// leave-one-GPU-out and leave-one-kernel-out on the repository's data: docs/search.md).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AutoOptions {
    /// Random choices before the model (10).
    pub initial: usize,
    /// Expected improvement's exploration margin, in standardized units (0.01).
    pub xi: f64,
    /// What the model sees of a time.
    pub transform: Transform,
    /// The most proposals at once, when asked for several (1).
    pub batch: usize,
    /// Local refinement: after this many results in a row that did not improve on the best,
    /// climb from the best (its unmeasured adjacent neighbours, first improvement) until it is
    /// a local optimum, then hand back to the model; 0 never climbs.
    pub refine: usize,
    /// Hand over to iterated local search (`ils`, from the best choice) after this many
    /// results, for turns with the model ([`AutoOptions::turns`]); 0 never does (64).
    pub handoff: usize,
    /// After the handoff, the climb keeps the search only while it is measured to improve the
    /// best: the climb and the model take turns of this many results (the climb first), each
    /// next turn to the one whose last this many results improved the best more (relative
    /// improvement), to the other on a tie (16); 0 hands over to the climb for good.
    pub turns: usize,
}

/// How told times become the model's targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transform {
    /// Normal scores of ranks (the default): robust to skew and outliers.
    Rank,
    /// Logarithms, as `bayes` (and Kernel Tuner's `bayes_opt`) model them.
    Log,
}

impl Default for AutoOptions {
    fn default() -> AutoOptions {
        AutoOptions {
            initial: 10,
            xi: 0.01,
            transform: Transform::Rank,
            batch: 1,
            refine: 0,
            handoff: HANDOFF,
            turns: TURNS,
        }
    }
}

/// The default adaptive search (see the module docs).
#[derive(Debug, Clone)]
pub struct AutoSearch {
    core: Core,
    /// Proposals handed out and not yet told.
    pending: Vec<usize>,
    /// Every told choice and its objective (`+inf` failed), in the order told.
    history: Vec<(usize, f64)>,
    options: AutoOptions,
    /// The length scale chosen last, and the history length then.
    length: Option<(usize, f64)>,
    /// How each param is encoded, once the space is known.
    encoding: Option<Vec<Encoding>>,
    /// The local refinement's state.
    climb: Climb,
    /// Iterated local search, once handed over to, and its proposal not heard yet.
    ils: Option<(super::ils::Climb, Option<usize>)>,
    /// Whose turn it is after the handoff, and the evidence (see [`AutoOptions::turns`]).
    turns: Turns,
}

/// The climb's and the model's recent results after the handoff, as what each did for the best
/// (its relative improvement `(best before − result) / |best before|` when it is a new best,
/// else 0), and whose turn it is.
#[derive(Debug, Clone, Default)]
struct Turns {
    climb: std::collections::VecDeque<f64>,
    model: std::collections::VecDeque<f64>,
    /// The climb has the turn.
    climbing: bool,
    /// Results of the side whose turn it is, since the turn began.
    told: usize,
    /// The climb's slot's proposal not heard yet (its step, or a random choice where it had
    /// none).
    slot: Option<usize>,
}

impl Turns {
    /// Hears a result of the climb (`climb`) or of the model that improved the best by `gain`;
    /// with `window` results of the side on turn, hands the turn to the side whose last
    /// `window` results improved it more, and on a tie (neither improved it) to the other.
    fn heard(&mut self, climb: bool, gain: f64, window: usize) {
        let side = if climb {
            &mut self.climb
        } else {
            &mut self.model
        };
        side.push_back(gain);
        if side.len() > window {
            side.pop_front();
        }
        if climb == self.climbing {
            self.told += 1;
        }
        if self.told >= window {
            let (c, m): (f64, f64) = (self.climb.iter().sum(), self.model.iter().sum());
            self.climbing = if c == m { !self.climbing } else { c > m };
            self.told = 0;
        }
    }
}

/// Local refinement around the best choice (see [`AutoOptions::refine`]).
#[derive(Debug, Clone, Default)]
struct Climb {
    /// Results in a row that did not improve on the best.
    stale: usize,
    /// Climbing now.
    on: bool,
    /// The choice whose neighbours `untried` holds.
    from: Option<usize>,
    /// Its neighbours not handed out yet, in the order to try them.
    untried: Vec<usize>,
}

/// How a param enters the model.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Encoding {
    /// Value index over `count − 1`.
    Ordinal(usize),
    /// One coordinate per value, `1/√2` for the value taken.
    Categorical(usize),
}

impl AutoSearch {
    /// At most `budget` choices, seeded by `seed`, one proposal at a time.
    pub fn new(budget: usize, seed: u64) -> AutoSearch {
        AutoSearch::with_batch(budget, seed, 1)
    }

    /// As [`AutoSearch::new`], proposing up to `batch` choices when asked for several (as many
    /// as there are workers measuring).
    pub(crate) fn with_batch(budget: usize, seed: u64, batch: usize) -> AutoSearch {
        AutoSearch::with_options(
            budget,
            seed,
            AutoOptions {
                batch,
                ..AutoOptions::default()
            },
        )
    }

    /// As [`AutoSearch::new`], with `options`.
    pub fn with_options(budget: usize, seed: u64, options: AutoOptions) -> AutoSearch {
        AutoSearch {
            core: Core::new(budget, seed),
            pending: Vec::new(),
            history: Vec::new(),
            options: AutoOptions {
                batch: options.batch.max(1),
                ..options
            },
            length: None,
            encoding: None,
            climb: Climb::default(),
            ils: None,
            turns: Turns::default(),
        }
    }
}

fn encodings(space: &SearchSpace) -> Vec<Encoding> {
    space
        .params()
        .map(|(_, values)| {
            let numeric = values
                .iter()
                .all(|v| matches!(v, ParamValue::Int(_) | ParamValue::Float(_)));
            if numeric || values.len() <= 2 {
                Encoding::Ordinal(values.len())
            } else {
                Encoding::Categorical(values.len())
            }
        })
        .collect()
}

fn encode(space: &SearchSpace, encoding: &[Encoding], index: usize) -> Vec<f64> {
    let values = space.value_indices(index).expect("a choice of the space");
    let mut x = Vec::with_capacity(encoding.len());
    for (&v, e) in values.iter().zip(encoding) {
        match *e {
            Encoding::Ordinal(c) => x.push(if c > 1 {
                v as f64 / (c - 1) as f64
            } else {
                0.0
            }),
            Encoding::Categorical(c) => {
                x.extend((0..c).map(|k| {
                    if k == v {
                        std::f64::consts::FRAC_1_SQRT_2
                    } else {
                        0.0
                    }
                }));
            }
        }
    }
    x
}

/// The standard normal quantile of `p` in (0, 1), by bisection on [`normal`] (60 halvings:
/// to the precision of its distribution function).
fn quantile(p: f64) -> f64 {
    let (mut lo, mut hi) = (-8.0, 8.0);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if normal(mid).1 < p {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// The model's targets under `transform`, standardized.
fn targets(values: &[f64], transform: Transform) -> Vec<f64> {
    let ys = match transform {
        Transform::Rank => rank_scores(values),
        Transform::Log => log_scores(values),
    };
    let mean = ys.iter().sum::<f64>() / ys.len() as f64;
    let sd = (ys.iter().map(|y| (y - mean) * (y - mean)).sum::<f64>() / ys.len() as f64)
        .sqrt()
        .max(1e-12);
    ys.iter().map(|y| (y - mean) / sd).collect()
}

/// Logarithms; a failure a quarter of the range above the worst success.
fn log_scores(values: &[f64]) -> Vec<f64> {
    let log = super::log_cost(values);
    let logs: Vec<f64> = values
        .iter()
        .filter(|v| v.is_finite())
        .map(|&v| log(v))
        .collect();
    let hi = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lo = logs.iter().copied().fold(f64::INFINITY, f64::min);
    let fail = hi + 0.25 * (hi - lo).max(1e-6);
    values
        .iter()
        .map(|&v| if v.is_finite() { log(v) } else { fail })
        .collect()
}

/// Normal scores of the ranks of the successes (ties share the mean rank), failures one step
/// below the worst success.
fn rank_scores(values: &[f64]) -> Vec<f64> {
    let mut ok: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    ok.sort_by(f64::total_cmp);
    let n = ok.len() as f64;
    let score = |v: f64| {
        let below = ok.partition_point(|&o| o < v) as f64;
        let equal = ok.partition_point(|&o| o <= v) as f64 - below;
        quantile((below + 0.5 * equal) / n)
    };
    let worst = quantile((n - 0.5) / n);
    let step = (worst - quantile((n - 1.5).max(0.5) / n)).max(0.5);
    values
        .iter()
        .map(|&v| {
            if v.is_finite() {
                score(v)
            } else {
                worst + step
            }
        })
        .collect()
}

impl AutoSearch {
    /// The training set: everything, or the best half and the most recent half when there are
    /// more than [`MAX_POINTS`].
    fn training(&self) -> Vec<(usize, f64)> {
        let max = MAX_POINTS;
        if self.history.len() <= max {
            return self.history.clone();
        }
        let mut by_value = self.history.clone();
        by_value.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        let mut set: Vec<(usize, f64)> = by_value[..max / 2].to_vec();
        let mut seen: std::collections::BTreeSet<usize> = set.iter().map(|s| s.0).collect();
        for &h in self.history.iter().rev() {
            if set.len() >= max {
                break;
            }
            if seen.insert(h.0) {
                set.push(h);
            }
        }
        set
    }

    /// Candidates: neighbours of the best, random walks from the best, random unvisited ones.
    fn pool(&mut self, space: &SearchSpace, best: &[usize]) -> Vec<usize> {
        let mut pool: Vec<usize> = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        let mut add = |j: usize, core: &Core, pool: &mut Vec<usize>| {
            if !core.is_visited(j) && seen.insert(j) {
                pool.push(j);
            }
        };
        for &i in best.iter().take(5) {
            for j in Core::neighbours(space, i) {
                add(j, &self.core, &mut pool);
            }
        }
        for w in 0..WALKS {
            if best.is_empty() {
                break;
            }
            let from = best[w % best.len().min(3)];
            if let Some(j) = self.core.random_walk(space, from, 1 + w % 2) {
                add(j, &self.core, &mut pool);
            }
        }
        for _ in 0..POOL {
            match self.core.random_unvisited(space) {
                Some(j) => add(j, &self.core, &mut pool),
                None => break,
            }
        }
        pool
    }

    /// Up to `n` proposals by expected improvement with local penalization; empty while the
    /// model cannot be fitted (too few results).
    fn propose(&mut self, space: &SearchSpace, n: usize) -> Vec<usize> {
        let ok = self.history.iter().filter(|h| h.1.is_finite()).count();
        if self.history.len() < self.options.initial || ok < 2 {
            return Vec::new();
        }
        let encoding = self
            .encoding
            .get_or_insert_with(|| encodings(space))
            .clone();
        let mut train = self.training();
        let values: Vec<f64> = train.iter().map(|t| t.1).collect();
        let ys = targets(&values, self.options.transform);
        let xs: Vec<Vec<f64>> = train
            .iter()
            .map(|&(i, _)| encode(space, &encoding, i))
            .collect();
        let dims = xs[0].len();
        let reuse = self
            .length
            .filter(|&(at, _)| self.history.len() < at + 10)
            .map(|(_, l)| l);
        let Some(gp) = Gp::fit(xs, &ys, dims, reuse) else {
            return Vec::new();
        };
        if reuse.is_none() {
            self.length = Some((self.history.len(), gp.length()));
        }
        let y_best = ys.iter().copied().fold(f64::INFINITY, f64::min);
        train.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        let best: Vec<usize> = train.iter().map(|t| t.0).collect();
        let pool = self.pool(space, &best);
        let mut scored: Vec<(f64, usize, Vec<f64>)> = pool
            .into_iter()
            .map(|j| {
                let x = encode(space, &encoding, j);
                let (mu, sigma) = gp.predict(&x);
                let improvement = y_best - mu - self.options.xi;
                let z = improvement / sigma;
                let (pdf, cdf) = normal(z);
                ((improvement * cdf + sigma * pdf).max(0.0), j, x)
            })
            .collect();
        let mut out = Vec::new();
        while out.len() < n && !scored.is_empty() {
            let k = (0..scored.len())
                .max_by(|&a, &b| {
                    scored[a]
                        .0
                        .total_cmp(&scored[b].0)
                        .then(scored[b].1.cmp(&scored[a].1))
                })
                .expect("a candidate");
            let (_, j, x) = scored.swap_remove(k);
            for s in &mut scored {
                s.0 *= 1.0 - rbf(&s.2, &x, gp.length());
            }
            out.push(j);
        }
        out
    }
}

impl AutoSearch {
    /// Up to `n` unmeasured neighbours of the best choice while refining (see
    /// [`AutoOptions::refine`]); none when not refining, or when the best is a local optimum
    /// (which hands back to the model).
    fn refine(&mut self, space: &SearchSpace, n: usize) -> Vec<usize> {
        let k = self.options.refine;
        if k == 0 {
            return Vec::new();
        }
        if !self.climb.on && self.climb.stale >= k && self.history.len() >= self.options.initial {
            self.climb.on = true;
        }
        if !self.climb.on {
            return Vec::new();
        }
        let Some((best, _)) = self.core.best else {
            return Vec::new();
        };
        if self.climb.from != Some(best) {
            self.climb.from = Some(best);
            self.climb.untried = Core::neighbours(space, best);
            self.core.rng.shuffle(&mut self.climb.untried);
        }
        let mut out = Vec::new();
        while out.len() < n {
            match self.climb.untried.pop() {
                Some(j) if !self.core.is_visited(j) => out.push(j),
                Some(_) => {}
                None => break,
            }
        }
        if out.is_empty() && self.pending.is_empty() {
            // A local optimum: the model again, for `refine` more results.
            self.climb.on = false;
            self.climb.stale = 0;
        }
        out
    }
}

impl AutoSearch {
    /// Once handed over to local search ([`AutoOptions::handoff`]), when its last choice was
    /// heard: its next one, or a random unvisited one where the climb has none (as `ils`). A
    /// climb is one choice at a time; with a batch, the model proposes the others.
    fn climb_step(&mut self, space: &SearchSpace) -> Vec<usize> {
        let Some((climb, own)) = &mut self.ils else {
            return Vec::new();
        };
        if own.is_some() || (self.options.turns > 0 && !self.turns.climbing) {
            return Vec::new();
        }
        let next = climb
            .step(&mut self.core, space)
            .filter(|&i| !self.core.is_visited(i));
        let out = match next {
            Some(i) => {
                *own = Some(i);
                Some(i)
            }
            None => self.core.random_unvisited(space),
        };
        self.turns.slot = out;
        out.into_iter().collect()
    }
}

impl Strategy for AutoSearch {
    fn name(&self) -> &str {
        "auto"
    }

    fn ask(&mut self, space: &SearchSpace, n: usize) -> Vec<usize> {
        self.core.init(space);
        let h = self.options.handoff;
        if self.ils.is_none() && h > 0 && self.history.len() >= h {
            self.ils = self
                .core
                .best
                .map(|best| (super::ils::Climb::starting_at(best), None));
            self.turns.climbing = true;
            self.turns.told = 0;
        }
        let room = n.min(self.core.left(space));
        // One proposal out at a time unless batching; more only when asked for more.
        let want = room.min(self.options.batch.saturating_sub(self.pending.len()));
        if want == 0 {
            return Vec::new();
        }
        // Handed over to local search: its climb has one slot of the batch (the next step,
        // or a random choice where it has none, as `ils`), the model the others.
        let mut out = self.climb_step(space);
        let model = want - out.len();
        out.extend(self.refine(space, model));
        if out.len() < model {
            let more = self.propose(space, model - out.len());
            for j in more {
                if !out.contains(&j) {
                    out.push(j);
                }
            }
        }
        out.retain(|&i| !self.core.is_visited(i));
        while out.len() < want {
            match self.core.random_unvisited(space) {
                Some(i) if !out.contains(&i) => out.push(i),
                Some(_) => continue,
                None => break,
            }
        }
        for &i in &out {
            self.core.take(i);
        }
        self.pending.extend(&out);
        out
    }

    fn tell(&mut self, index: usize, result: &ChoiceResult) {
        let before = self.core.best.map_or(f64::INFINITY, |b| b.1);
        let value = self.core.record(index, result);
        let by_climb = self.turns.slot == Some(index);
        if by_climb {
            self.turns.slot = None;
        }
        if let Some((climb, own)) = &mut self.ils {
            if *own == Some(index) {
                *own = None;
                climb.heard(index, value);
            } else {
                climb.heard_other(index, value);
            }
        }
        let window = self.options.turns;
        if window > 0 && self.history.len() >= self.options.initial {
            let gain = if value < before && before.is_finite() {
                (before - value) / before.abs().max(f64::MIN_POSITIVE)
            } else {
                0.0
            };
            self.turns.heard(by_climb, gain, window);
        }
        if value < before {
            self.climb.stale = 0;
        } else {
            self.climb.stale += 1;
        }
        self.history.push((index, value));
        self.pending.retain(|&p| p != index);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_ranks_with_failures_last() {
        let ys = targets(&[5.0, 1.0, 1000.0, f64::INFINITY, 2.0], Transform::Rank);
        let mut order: Vec<usize> = (0..5).collect();
        order.sort_by(|&a, &b| ys[a].total_cmp(&ys[b]));
        assert_eq!(order, [1, 4, 0, 2, 3]);
        // A 1000× outlier is one rank step, not a thousand.
        assert!((ys[2] - ys[0]) < 2.0 * (ys[0] - ys[4]) + 1e-9);
        assert!((quantile(0.975) - 1.96).abs() < 1e-3);
    }

    #[test]
    fn strings_are_categorical_and_numbers_ordinal() {
        let params = crate::space::tests::params(&[("A", &[1, 2, 4, 8])]);
        let mut params = params;
        params.insert(
            "B".into(),
            ["x", "y", "z"]
                .iter()
                .map(|s| ParamValue::Str((*s).into()))
                .collect(),
        );
        let space = SearchSpace::from_params(&params, &[]).unwrap();
        let e = encodings(&space);
        assert_eq!(e, [Encoding::Ordinal(4), Encoding::Categorical(3)]);
        let x = encode(&space, &e, 0);
        assert_eq!(x.len(), 4);
    }

    #[test]
    fn a_batch_is_distinct_and_spread() {
        let params = crate::space::tests::params(&[
            ("A", &(0..8).collect::<Vec<_>>()),
            ("B", &(0..8).collect::<Vec<_>>()),
        ]);
        let space = SearchSpace::from_params(&params, &[]).unwrap();
        let mut s = AutoSearch::with_batch(40, 3, 4);
        let mut asked = Vec::new();
        while asked.len() < 40 {
            let batch = s.ask(&space, usize::MAX);
            assert!(!batch.is_empty() && batch.len() <= 4);
            for &i in &batch {
                let v = space.value_indices(i).unwrap();
                let t = ((v[0] as f64 - 5.0).powi(2) + (v[1] as f64 - 2.0).powi(2)) + 1.0;
                let m = crate::search::replay::Measurement {
                    time_ms: Some(t),
                    status: tunebox_pool::Status::Ok,
                    cost_ms: 1.0,
                };
                s.tell(i, &crate::search::replay::result_of(&space, i, m, "test"));
            }
            asked.extend(batch);
        }
        let mut d = asked.clone();
        d.sort_unstable();
        d.dedup();
        assert_eq!(d.len(), asked.len());
        // The optimum (A=5, B=2) is found well within 40 of 64.
        assert!(asked.contains(&space.index_of_values(&[5, 2]).unwrap()));
    }

    /// A bowl over a 16 × 16 space, its optimum at (11, 4).
    fn bowl(space: &SearchSpace, i: usize) -> ChoiceResult {
        let v = space.value_indices(i).unwrap();
        let t = (v[0] as f64 - 11.0).powi(2) + (v[1] as f64 - 4.0).powi(2) + 1.0;
        let m = crate::search::replay::Measurement {
            time_ms: Some(t),
            status: tunebox_pool::Status::Ok,
            cost_ms: 1.0,
        };
        crate::search::replay::result_of(space, i, m, "test")
    }

    #[test]
    fn the_climb_keeps_its_turn_only_while_it_improves_the_best_more() {
        let mut t = Turns {
            climbing: true,
            ..Turns::default()
        };
        // The model's last 4 results before the handoff: one improved the best by 1%.
        for gain in [0.0, 0.01, 0.0, 0.0] {
            t.heard(false, gain, 4);
        }
        t.climbing = true;
        t.told = 0;
        // The climb's turn improves it by 5%: it keeps the turn.
        for gain in [0.05, 0.0, 0.0, 0.0] {
            t.heard(true, gain, 4);
        }
        assert!(t.climbing);
        // Its next turn improves nothing: the model, which did, takes over.
        for _ in 0..4 {
            t.heard(true, 0.0, 4);
        }
        assert!(!t.climbing);
        // The model's turn improves nothing either: a tie, so the climb tries again.
        for _ in 0..4 {
            t.heard(false, 0.0, 4);
        }
        assert!(t.climbing);
        // Results of the side not on turn count for it, not for the turn.
        t.heard(false, 0.5, 4);
        assert_eq!(t.told, 0);
        for _ in 0..4 {
            t.heard(true, 0.0, 4);
        }
        assert!(!t.climbing, "the model improved the best since: its turn");
    }

    #[test]
    fn after_the_handoff_the_climb_and_the_model_share_a_batch() {
        let params = crate::space::tests::params(&[
            ("A", &(0..16).collect::<Vec<_>>()),
            ("B", &(0..16).collect::<Vec<_>>()),
        ]);
        let space = SearchSpace::from_params(&params, &[]).unwrap();
        for (batch, turns) in [(1, 0), (3, 0), (1, 8), (3, 8)] {
            let options = AutoOptions {
                handoff: 20,
                batch,
                turns,
                ..AutoOptions::default()
            };
            let mut s = AutoSearch::with_options(120, 5, options);
            let mut asked = Vec::new();
            let mut sizes = Vec::new();
            loop {
                let b = s.ask(&space, usize::MAX);
                if b.is_empty() {
                    break;
                }
                sizes.push(b.len());
                for &i in &b {
                    s.tell(i, &bowl(&space, i));
                }
                asked.extend(b);
            }
            let mut d = asked.clone();
            d.sort_unstable();
            d.dedup();
            assert_eq!(
                (d.len(), asked.len()),
                (120, 120),
                "batch {batch}, turns {turns}"
            );
            assert!(s.ils.is_some(), "handed over after 20 results");
            // Every worker has a choice after the handoff too, and the climb finds the optimum.
            assert!(sizes.iter().all(|&n| n == batch), "{sizes:?}");
            assert!(asked.contains(&space.index_of_values(&[11, 4]).unwrap()));
        }
        // The default hands over after 64 results, for turns of 16.
        assert_eq!(
            (AutoOptions::default().handoff, AutoOptions::default().turns),
            (64, 16)
        );
    }
}
