//! Search strategies beyond brute force and random sampling, each behind the ask/tell
//! [`Strategy`] trait and each modelled on a Kernel Tuner strategy (KernelTuner/kernel_tuner,
//! `kernel_tuner/strategies/*.py`) or a textbook method, named in its own module:
//!
//! | Name | Type | Source |
//! |---|---|---|
//! | `genetic` | [`GeneticAlgorithm`] | Kernel Tuner `genetic_algorithm.py` |
//! | `annealing` | [`SimulatedAnnealing`] | Kernel Tuner `simulated_annealing.py` |
//! | `ils` | [`GreedyIls`] | Kernel Tuner `greedy_ils.py` (hill climbing + random walk) |
//! | `de` | [`DifferentialEvolution`] | Kernel Tuner `diff_evo.py` (Storn & Price, best1bin) |
//! | `bayes` | [`BayesianOptimization`] | Kernel Tuner `bayes_opt.py`: GP + expected improvement |
//! | `auto` | [`AutoSearch`] | the default: GP-EI on ranks, failures ranked last, categorical params one-hot, batches by local penalization; after 64 results, turns of 16 with `ils`'s climb from the best, each next turn to the one that improved the best more |
//!
//! [`score`] scores strategies as the field does (a port of the `autotuning-methodology`
//! package).
//!
//! What they share (`Core`): they propose only choices of the space (stable indices, so
//! never one that breaks a restriction), never the same index twice, at most `budget` in all;
//! they are deterministic for a seed and a sequence of tells (all randomness comes from one
//! seeded `fastrand::Rng`, and no iteration order depends on a hash map); a failed choice
//! (compile error, crash, timeout, wrong answer) has the worst objective, `+inf`. When a
//! strategy has nothing to propose before it hears back (a generation still out), or is stuck,
//! it proposes an unvisited choice at random, so that it only ends when the budget or the
//! space is spent.

mod annealing;
mod auto;
mod bayes;
mod de;
mod genetic;
mod ils;
mod name;
pub mod score;

pub use annealing::SimulatedAnnealing;
pub use auto::{AutoOptions, AutoSearch, Transform};
pub use bayes::BayesianOptimization;
pub use de::DifferentialEvolution;
pub use genetic::GeneticAlgorithm;
pub use ils::GreedyIls;
pub use name::{StrategyName, UnknownStrategy};

use std::collections::{HashMap, HashSet, VecDeque};

use tunebox_pool::Status;

use crate::results::{ChoiceResult, Selection};
use crate::search::strategy::{BruteForce, RandomSample, Strategy};
use crate::space::SearchSpace;

/// The names [`by_name`] knows, in the order of the evaluation's tables ([`StrategyName::ALL`]'s).
pub const NAMES: [&str; 8] = {
    let mut names = [""; 8];
    let mut i = 0;
    while i < names.len() {
        names[i] = StrategyName::ALL[i].name();
        i += 1;
    }
    names
};

/// The strategy called `name` (one of [`NAMES`]), proposing at most `budget` choices, seeded
/// by `seed`; `None` for an unknown name. Brute force ignores the budget and seed.
pub fn by_name(name: &str, budget: usize, seed: u64) -> Option<Box<dyn Strategy>> {
    let name: StrategyName = name.parse().ok()?;
    Some(named(name, budget, seed))
}

/// The strategy `name`, proposing at most `budget` choices, seeded by `seed`.
pub fn named(name: StrategyName, budget: usize, seed: u64) -> Box<dyn Strategy> {
    match name {
        StrategyName::BruteForce => Box::new(BruteForce::new()),
        StrategyName::Random => Box::new(RandomSample::new(budget, seed)),
        StrategyName::Genetic => Box::new(GeneticAlgorithm::new(budget, seed)),
        StrategyName::Annealing => Box::new(SimulatedAnnealing::new(budget, seed)),
        StrategyName::Ils => Box::new(GreedyIls::new(budget, seed)),
        StrategyName::De => Box::new(DifferentialEvolution::new(budget, seed)),
        StrategyName::Bayes => Box::new(BayesianOptimization::new(budget, seed)),
        StrategyName::Auto => Box::new(AutoSearch::new(budget, seed)),
    }
}

/// As [`by_name`], for a run that measures `batch` choices at once (as many as it has
/// workers): `auto` then proposes up to `batch` choices at a time (by local penalization, see
/// [`AutoOptions::batch`]). The others are unchanged: `genetic` and `de` propose a
/// generation at once, brute force and `random` everything, the rest one choice at a time.
pub fn by_name_batched(
    name: &str,
    budget: usize,
    seed: u64,
    batch: usize,
) -> Option<Box<dyn Strategy>> {
    match name {
        "auto" => Some(Box::new(AutoSearch::with_batch(budget, seed, batch.max(1)))),
        _ => by_name(name, budget, seed),
    }
}

/// The built-in strategy a [`Selection`] names (see [`NAMES`]) for a run measuring `batch`
/// choices at once (see [`by_name_batched`]): `random` samples `budget` choices (all when
/// unset) with `seed`, the adaptive ones measure `budget` choices.
///
/// # Errors
///
/// [`UnknownStrategy`] for a name none of [`NAMES`], listing them.
pub(crate) fn from_selection(
    selection: &Selection,
    batch: usize,
) -> Result<Box<dyn Strategy>, UnknownStrategy> {
    let name: StrategyName = selection.strategy.parse()?;
    let budget = selection.budget.unwrap_or(usize::MAX);
    Ok(match name {
        StrategyName::Auto => {
            Box::new(AutoSearch::with_batch(budget, selection.seed, batch.max(1)))
        }
        other => named(other, budget, selection.seed),
    })
}

/// The objective a strategy minimizes for a result: its [`ChoiceResult::cost`] for `ok` (the
/// median in ms, or the manifest's objective metric, negated when higher is better), `+inf`
/// for a failure (or a NaN or missing cost).
pub(crate) fn objective(result: &ChoiceResult) -> f64 {
    match (result.status, result.cost()) {
        (Status::Ok, Some(cost)) if !cost.is_nan() => cost,
        _ => f64::INFINITY,
    }
}

/// A logarithm that keeps the order of finite objectives of one sign: `ln v` when every value
/// is positive (times in ms), `-ln(-v)` when every value is negative (a higher-is-better metric,
/// negated by [`ChoiceResult::cost`]), the value itself when signs are mixed or a value is 0
/// (no logarithm keeps that order). Strategies that model log costs (`bayes`, `auto` with
/// `transform = log`) map their history through it.
pub(crate) fn log_cost(values: &[f64]) -> impl Fn(f64) -> f64 + use<> {
    let finite = || values.iter().copied().filter(|v| v.is_finite());
    let positive = finite().all(|v| v > 0.0);
    let negative = !positive && finite().all(|v| v < 0.0);
    move |v: f64| {
        if positive {
            v.max(1e-30).ln()
        } else if negative {
            -(-v).max(1e-30).ln()
        } else {
            v
        }
    }
}

/// What every strategy here keeps: the seeded generator, the budget, the choices handed out
/// and what was heard about them.
#[derive(Debug, Clone)]
pub(crate) struct Core {
    pub rng: fastrand::Rng,
    budget: usize,
    asked: usize,
    /// One bit per choice of the space: handed out.
    visited: Vec<u64>,
    /// The choices handed out, in a space too large to list (its bit set would not fit).
    visited_unlisted: HashSet<usize>,
    /// Objective of every told choice.
    pub told: HashMap<usize, f64>,
    /// The best told choice and its objective.
    pub best: Option<(usize, f64)>,
}

impl Core {
    pub(crate) fn new(budget: usize, seed: u64) -> Core {
        Core {
            rng: fastrand::Rng::with_seed(seed),
            budget,
            asked: 0,
            visited: Vec::new(),
            visited_unlisted: HashSet::new(),
            told: HashMap::new(),
            best: None,
        }
    }

    /// The most choices this strategy hands out.
    pub(crate) fn budget(&self) -> usize {
        self.budget
    }

    /// Sizes the visited set for `space` (once).
    pub(crate) fn init(&mut self, space: &SearchSpace) {
        if self.visited.is_empty() && space.is_listed() {
            self.visited = vec![0; space.len().div_ceil(64).max(1)];
        }
    }

    /// How many more choices may be handed out.
    pub(crate) fn left(&self, space: &SearchSpace) -> usize {
        self.budget.min(space.len()).saturating_sub(self.asked)
    }

    pub(crate) fn is_visited(&self, index: usize) -> bool {
        if self.visited.is_empty() {
            return self.visited_unlisted.contains(&index);
        }
        self.visited[index / 64] & (1 << (index % 64)) != 0
    }

    /// Hands out `index`: false (and nothing changes) when it was handed out before.
    pub(crate) fn take(&mut self, index: usize) -> bool {
        if self.is_visited(index) {
            return false;
        }
        if self.visited.is_empty() {
            self.visited_unlisted.insert(index);
        } else {
            self.visited[index / 64] |= 1 << (index % 64);
        }
        self.asked += 1;
        true
    }

    /// Records a result; returns its objective.
    pub(crate) fn record(&mut self, index: usize, result: &ChoiceResult) -> f64 {
        let value = objective(result);
        self.told.insert(index, value);
        if self.best.is_none_or(|(_, b)| value < b) {
            self.best = Some((index, value));
        }
        value
    }

    /// The objective heard for `index`, if any.
    pub(crate) fn value(&self, index: usize) -> Option<f64> {
        self.told.get(&index).copied()
    }

    /// A first population of up to `size` distinct unvisited choices drawn at random (at most
    /// `4 × size` draws), appended to `queue`; returns the queue's choices.
    pub(crate) fn random_population(
        &mut self,
        space: &SearchSpace,
        size: usize,
        queue: &mut VecDeque<usize>,
    ) -> Vec<usize> {
        for _ in 0..4 * size {
            if queue.len() == size {
                break;
            }
            let Some(i) = self.random_unvisited(space) else {
                break;
            };
            if !queue.contains(&i) {
                queue.push_back(i);
            }
        }
        queue.iter().copied().collect()
    }

    /// An unvisited choice drawn uniformly (by rejection, then by a scan from a random
    /// start once most are visited; in a space too large to list, by rejection from the raw
    /// product only, see [`SearchSpace::random_index`]); `None` when every choice was handed
    /// out (or no draw found a valid one).
    pub(crate) fn random_unvisited(&mut self, space: &SearchSpace) -> Option<usize> {
        let n = space.len();
        if self.asked >= n {
            return None;
        }
        for _ in 0..32 {
            let i = space.random_index(&mut self.rng)?;
            if !self.is_visited(i) {
                return Some(i);
            }
        }
        if !space.is_listed() {
            return None;
        }
        let start = self.rng.usize(0..n);
        (0..n)
            .map(|k| (start + k) % n)
            .find(|&i| !self.is_visited(i))
    }

    /// The valid choices that differ from `index` in one param by one position in its value
    /// list (Kernel Tuner's "adjacent" neighbours), in param order.
    pub(crate) fn neighbours(space: &SearchSpace, index: usize) -> Vec<usize> {
        let Some(mut values) = space.value_indices(index) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for p in 0..values.len() {
            let here = values[p];
            for there in [here.wrapping_sub(1), here + 1] {
                values[p] = there;
                if let Some(j) = space.index_of_values(&values) {
                    out.push(j);
                }
            }
            values[p] = here;
        }
        out
    }

    /// A random valid choice near `values`: each of `changes` random params takes a random
    /// value; up to 20 tries, `None` when none is valid.
    pub(crate) fn random_walk(
        &mut self,
        space: &SearchSpace,
        index: usize,
        changes: usize,
    ) -> Option<usize> {
        let base = space.value_indices(index)?;
        let counts = counts(space);
        for _ in 0..20 {
            let mut values = base.clone();
            for _ in 0..changes.max(1) {
                let p = self.rng.usize(0..counts.len());
                values[p] = self.rng.usize(0..counts[p]);
            }
            if let Some(j) = space.index_of_values(&values)
                && j != index
            {
                return Some(j);
            }
        }
        None
    }
}

/// The value counts of `space`'s params.
pub(crate) fn counts(space: &SearchSpace) -> Vec<usize> {
    space.params().map(|(_, v)| v.len()).collect()
}

#[cfg(test)]
mod tests;

/// A strategy that proposes a generation at a time (a genetic algorithm's offspring,
/// differential evolution's trials): it queues them, and breeds the next once the queue is
/// empty and every proposal of it was heard back.
pub(crate) trait Generational {
    /// The shared state.
    fn core(&mut self) -> &mut Core;
    /// Proposals not yet handed out, in order.
    fn queue(&mut self) -> &mut VecDeque<usize>;
    /// Proposals handed out and not heard back.
    fn outstanding(&mut self) -> &mut HashSet<usize>;
    /// Queues the next generation.
    fn next_generation(&mut self, space: &SearchSpace);
}

/// The ask of a [`Generational`] strategy: the queued proposals, breeding when the last
/// generation is all heard back; when one is still out and the queue is empty, random
/// unvisited choices rather than none.
pub(crate) fn ask_generations(
    s: &mut impl Generational,
    space: &SearchSpace,
    n: usize,
) -> Vec<usize> {
    s.core().init(space);
    let mut out = Vec::new();
    while out.len() < n && s.core().left(space) > 0 {
        if s.queue().is_empty() && s.outstanding().is_empty() {
            s.next_generation(space);
        }
        if let Some(i) = s.queue().pop_front() {
            if s.core().take(i) {
                s.outstanding().insert(i);
                out.push(i);
            }
            continue;
        }
        if !out.is_empty() {
            break;
        }
        match s.core().random_unvisited(space) {
            Some(i) => {
                s.core().take(i);
                out.push(i);
            }
            None => break,
        }
    }
    out
}

/// The tell of a [`Generational`] strategy.
pub(crate) fn tell_generations(s: &mut impl Generational, index: usize, result: &ChoiceResult) {
    s.core().record(index, result);
    s.outstanding().remove(&index);
}

/// The ask of a strategy that proposes one choice at a time and must hear how it went before
/// the next (`step` gives the next unvisited choice, or `None` when it has none): the proposal,
/// or, when one is still out or `step` has none, a random unvisited choice.
pub(crate) fn ask_one(
    core: &mut Core,
    pending: &mut Option<usize>,
    space: &SearchSpace,
    n: usize,
    step: impl FnOnce(&mut Core, &SearchSpace) -> Option<usize>,
) -> Vec<usize> {
    core.init(space);
    if n == 0 || core.left(space) == 0 {
        return Vec::new();
    }
    let proposal = if pending.is_none() {
        step(core, space).filter(|&i| !core.is_visited(i))
    } else {
        None
    };
    let index = match proposal {
        Some(i) => {
            *pending = Some(i);
            i
        }
        None => match core.random_unvisited(space) {
            Some(i) => i,
            None => return Vec::new(),
        },
    };
    core.take(index);
    vec![index]
}
