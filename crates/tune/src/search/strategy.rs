//! Which choices a run measures, as an ask/tell loop (Optuna's and Nevergrad's interface): a
//! [`Strategy`] is asked for the next choices to measure and told how each went, until it has
//! none left. Brute force and random sampling are the built-in ones; a downstream tool can bring
//! its own, or drive a strategy with a loop of its own.

use std::collections::HashMap;

use crate::results::{ChoiceResult, Selection};
use crate::space::SearchSpace;

/// A search strategy, in the ask/tell style: the run asks it for choices (by their stable index
/// in the [`SearchSpace`]), measures them, tells it each result, and asks again until it
/// answers with none.
///
/// A strategy is constructed with what it needs besides the space, such as a seed and a budget
/// (the most choices it will hand out); it must be deterministic for a given seed, space and
/// sequence of results, so that a run can be repeated and sharded.
///
/// ```
/// use tunebox_tune::{SearchSpace, Strategy, BruteForce};
/// # fn drive(space: &SearchSpace) {
/// let mut strategy = BruteForce::new();
/// loop {
///     let batch = strategy.ask(space, 8);
///     if batch.is_empty() {
///         break;
///     }
///     for index in batch {
///         let choice = space.choice(index).expect("the strategy asks for a choice of the space");
///         // … measure `choice`, then `strategy.tell(index, &result)`.
///     }
/// }
/// # }
/// ```
pub trait Strategy: Send {
    /// Its name in reports (`brute-force`, `random`).
    fn name(&self) -> &str;

    /// The next choices to measure, at most `n` (the run passes `usize::MAX`: every choice the
    /// strategy can name before it hears back), by stable index, in the order to measure them;
    /// no index twice over a run. Fewer than `n` is fine; none means the search is done.
    fn ask(&mut self, space: &SearchSpace, n: usize) -> Vec<usize>;

    /// How choice `index` went: measured (`ok`, with its median and metrics), failed (its
    /// status and error), or taken from the results cache. Choices the run could not start
    /// (stopped, out of time) are not told. The built-in strategies ignore results.
    fn tell(&mut self, index: usize, result: &ChoiceResult) {
        let _ = (index, result);
    }

    /// What went against the contract of [`Strategy::ask`] since last asked (an index asked
    /// twice, one outside the space), in words; the run puts them in its notes. Only
    /// the run's guard has any: the run wraps every strategy in one that checks its asks.
    fn take_warnings(&mut self) -> Vec<String> {
        Vec::new()
    }
}

/// Holds a strategy's asks to the contract of [`Strategy::ask`]: an index asked for before is
/// dropped (it is measured once, and told once), an index outside the space is dropped, and
/// both are counted for [`AskGuard::take_warnings`], so that neither is silent.
#[derive(Debug, Clone, Default)]
pub(crate) struct AskGuard {
    /// The indices asked for (a set, not a bitmap: a space too large to list has billions).
    asked: std::collections::HashSet<usize>,
    repeats: usize,
    first_repeat: Option<usize>,
    outside: usize,
    first_outside: Option<usize>,
    space_len: usize,
}

impl AskGuard {
    /// A guard that has seen no ask.
    pub(crate) fn new() -> AskGuard {
        AskGuard::default()
    }

    /// The indices of `batch` that are in a space of `space_len` choices and not asked for
    /// before, in order.
    pub(crate) fn check(&mut self, space_len: usize, batch: Vec<usize>) -> Vec<usize> {
        self.space_len = space_len;
        batch
            .into_iter()
            .filter(|&i| {
                if i >= space_len {
                    self.outside += 1;
                    self.first_outside.get_or_insert(i);
                    return false;
                }
                if !self.asked.insert(i) {
                    self.repeats += 1;
                    self.first_repeat.get_or_insert(i);
                    return false;
                }
                true
            })
            .collect()
    }

    /// What was dropped since the last call, in words naming the strategy `name`.
    pub(crate) fn take_warnings(&mut self, name: &str) -> Vec<String> {
        let mut out = Vec::new();
        if self.repeats > 0 {
            out.push(format!(
                "strategy `{name}` asked {} for a choice it had asked for before (first: index {}); each choice is measured and told once",
                times(self.repeats),
                self.first_repeat.unwrap_or_default()
            ));
        }
        if self.outside > 0 {
            out.push(format!(
                "strategy `{name}` asked {} for an index outside the space of {} choices (first: {}); those were not measured (a strategy names choices by `SearchSpace` index, 0..len)",
                times(self.outside),
                self.space_len,
                self.first_outside.unwrap_or_default()
            ));
        }
        self.repeats = 0;
        self.first_repeat = None;
        self.outside = 0;
        self.first_outside = None;
        out
    }
}

fn times(n: usize) -> String {
    if n == 1 {
        "once".into()
    } else {
        format!("{n} times")
    }
}

/// A strategy held to the contract of [`Strategy::ask`] by an [`AskGuard`]: what a run
/// measures (see [`crate::Plan::new`]), so that a strategy's mistake is dropped and said in the
/// run's notes rather than measured twice or lost silently.
pub(crate) struct Guarded {
    inner: Box<dyn Strategy>,
    guard: AskGuard,
}

impl Guarded {
    /// `inner`, guarded.
    pub(crate) fn new(inner: Box<dyn Strategy>) -> Guarded {
        Guarded {
            inner,
            guard: AskGuard::new(),
        }
    }
}

impl Strategy for Guarded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn ask(&mut self, space: &SearchSpace, n: usize) -> Vec<usize> {
        let batch = self.inner.ask(space, n);
        self.guard.check(space.len(), batch)
    }

    fn tell(&mut self, index: usize, result: &ChoiceResult) {
        self.inner.tell(index, result);
    }

    fn take_warnings(&mut self) -> Vec<String> {
        let name = self.inner.name().to_owned();
        let mut out = self.inner.take_warnings();
        out.extend(self.guard.take_warnings(&name));
        out
    }
}

/// Every choice, in canonical order (index 0 first).
#[derive(Debug, Clone, Default)]
pub struct BruteForce {
    next: usize,
}

impl BruteForce {
    /// A search that has handed out nothing yet.
    pub fn new() -> BruteForce {
        BruteForce::default()
    }
}

impl Strategy for BruteForce {
    fn name(&self) -> &str {
        "brute-force"
    }

    fn ask(&mut self, space: &SearchSpace, n: usize) -> Vec<usize> {
        let end = self.next.saturating_add(n).min(space.listed_len());
        let batch = (self.next..end)
            .filter_map(|p| space.listed_index(p))
            .collect();
        self.next = end.max(self.next);
        batch
    }
}

/// A uniform random sample of `budget` distinct choices (all of them when the space is
/// smaller), in sampled order, seeded: the same seed and space give the same sample on every
/// machine and however it is asked (one batch or many), which shards and `tunebox merge` rely
/// on.
#[derive(Debug, Clone)]
pub struct RandomSample {
    budget: usize,
    seed: u64,
    sampler: Option<Sampler>,
    unlisted: Option<UnlistedSampler>,
}

impl RandomSample {
    /// At most `budget` choices, drawn with `seed`.
    pub fn new(budget: usize, seed: u64) -> RandomSample {
        RandomSample {
            budget,
            seed,
            sampler: None,
            unlisted: None,
        }
    }
}

impl Strategy for RandomSample {
    fn name(&self) -> &str {
        "random"
    }

    fn ask(&mut self, space: &SearchSpace, n: usize) -> Vec<usize> {
        let (budget, seed) = (self.budget, self.seed);
        if !space.is_listed() {
            return self
                .unlisted
                .get_or_insert_with(|| UnlistedSampler::new(budget, seed))
                .take(space, n);
        }
        self.sampler
            .get_or_insert_with(|| Sampler::new(space.len(), budget, seed))
            .take(n)
    }
}

/// The indices of the choices a built-in selection measures, in the order to measure them, out
/// of `space_size` choices (what `tunebox merge` expects the shards to hold).
pub(crate) fn select(space_size: usize, selection: &Selection) -> Vec<usize> {
    match (selection.strategy.as_str(), selection.budget) {
        ("random", budget) => {
            Sampler::new(space_size, budget.unwrap_or(space_size), selection.seed).take(usize::MAX)
        }
        _ => (0..space_size).collect(),
    }
}

/// `k` distinct indices out of `0..n`, uniformly, in random order: a partial Fisher-Yates
/// shuffle that remembers only the positions it swapped, so it costs O(k) for any `n`, and
/// hands them out in batches of any size.
#[derive(Debug, Clone)]
struct Sampler {
    n: usize,
    k: usize,
    i: usize,
    rng: fastrand::Rng,
    swapped: HashMap<usize, usize>,
}

impl Sampler {
    fn new(n: usize, k: usize, seed: u64) -> Sampler {
        let k = k.min(n);
        Sampler {
            n,
            k,
            i: 0,
            rng: fastrand::Rng::with_seed(seed),
            swapped: HashMap::with_capacity(2 * k),
        }
    }

    /// The next at most `count` indices.
    fn take(&mut self, count: usize) -> Vec<usize> {
        let mut out = Vec::with_capacity(count.min(self.k - self.i));
        while self.i < self.k && out.len() < count {
            let i = self.i;
            let j = self.rng.usize(i..self.n);
            let at_j = *self.swapped.get(&j).unwrap_or(&j);
            let at_i = *self.swapped.get(&i).unwrap_or(&i);
            self.swapped.insert(j, at_i);
            out.push(at_j);
            self.i += 1;
        }
        out
    }
}

/// `k` distinct valid choices of a space too large to list, drawn by rejection from its raw
/// product ([`SearchSpace::random_index`]), in drawn order.
#[derive(Debug, Clone)]
struct UnlistedSampler {
    k: usize,
    rng: fastrand::Rng,
    drawn: std::collections::HashSet<usize>,
}

impl UnlistedSampler {
    /// At most `k` (and at most 50 million) choices, drawn with `seed`.
    fn new(k: usize, seed: u64) -> UnlistedSampler {
        UnlistedSampler {
            k: k.min(50_000_000),
            rng: fastrand::Rng::with_seed(seed),
            drawn: std::collections::HashSet::new(),
        }
    }

    /// The next at most `count` indices (fewer when the draws stop finding new valid ones).
    fn take(&mut self, space: &SearchSpace, count: usize) -> Vec<usize> {
        let mut out = Vec::new();
        let mut misses = 0;
        while self.drawn.len() < self.k && out.len() < count && misses < 32 {
            match space.random_index(&mut self.rng) {
                Some(i) if self.drawn.insert(i) => {
                    out.push(i);
                    misses = 0;
                }
                Some(_) => misses += 1,
                None => break,
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random_selection(budget: usize, seed: u64) -> Selection {
        Selection {
            strategy: "random".into(),
            budget: Some(budget),
            seed,
        }
    }

    #[test]
    fn random_samples_are_distinct_seeded_and_bounded() {
        let a = select(1000, &random_selection(50, 7));
        assert_eq!(a.len(), 50);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 50);
        assert!(sorted.iter().all(|&i| i < 1000));
        assert_eq!(a, select(1000, &random_selection(50, 7)));
        assert_ne!(a, select(1000, &random_selection(50, 8)));
        let mut all = select(10, &random_selection(100, 1));
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
    }

    /// A space of `n` choices of one parameter `X`.
    fn space(n: i64) -> SearchSpace {
        let params = crate::space::tests::params(&[("X", &(0..n).collect::<Vec<_>>())]);
        SearchSpace::new(&params, &[]).unwrap()
    }

    #[test]
    fn strategies_hand_out_the_same_choices_in_any_batches() {
        let space = space(100);
        let makers: [fn() -> Box<dyn Strategy>; 2] = [
            || Box::new(BruteForce::new()),
            || Box::new(RandomSample::new(30, 5)),
        ];
        for make in makers {
            let mut whole = make();
            let all = whole.ask(&space, usize::MAX);
            assert!(whole.ask(&space, usize::MAX).is_empty());
            let mut batched = make();
            let mut pieces = Vec::new();
            loop {
                let batch = batched.ask(&space, 7);
                assert!(batch.len() <= 7);
                if batch.is_empty() {
                    break;
                }
                pieces.extend(batch);
            }
            assert_eq!(pieces, all, "{}", whole.name());
        }
        let mut random = RandomSample::new(30, 5);
        assert_eq!(
            random.ask(&space, usize::MAX),
            select(100, &random_selection(30, 5))
        );
        assert_eq!(BruteForce::new().ask(&space, 3), [0, 1, 2]);
    }

    #[test]
    fn the_space_knows_its_valid_choices() {
        let space = space(4);
        assert_eq!(space.len(), 4);
        let third = space.choice(2).unwrap().clone();
        assert_eq!(space.index_of(&third), Some(2));
        let outside = crate::space::Choice::new(
            [("X".to_owned(), crate::space::ParamValue::Int(9))]
                .into_iter()
                .collect(),
        );
        assert!(!space.is_valid(&outside));
        assert_eq!(space.params().next().unwrap().1.len(), 4);
    }

    /// A strategy that asks for `asks` in turn.
    struct Scripted(Vec<Vec<usize>>);

    impl Strategy for Scripted {
        fn name(&self) -> &str {
            "scripted"
        }
        fn ask(&mut self, _: &SearchSpace, _: usize) -> Vec<usize> {
            if self.0.is_empty() {
                Vec::new()
            } else {
                self.0.remove(0)
            }
        }
    }

    #[test]
    fn a_guarded_strategy_asks_each_index_once_and_inside_the_space() {
        let space = space(10);
        let mut s = Guarded::new(Box::new(Scripted(vec![vec![1, 1, 2], vec![2, 40, 3, 11]])));
        assert_eq!(s.name(), "scripted");
        assert_eq!(s.ask(&space, usize::MAX), [1, 2]);
        assert_eq!(s.ask(&space, usize::MAX), [3]);
        let warnings = s.take_warnings();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("asked 2 times for a choice it had asked for before"));
        assert!(warnings[0].contains("first: index 1"), "{warnings:?}");
        assert!(warnings[1].contains("asked 2 times for an index outside the space of 10"));
        assert!(warnings[1].contains("first: 40"));
        assert!(s.take_warnings().is_empty());
    }

    #[test]
    fn brute_force_is_canonical_order() {
        let s = Selection {
            strategy: "brute-force".into(),
            budget: None,
            seed: 0,
        };
        assert_eq!(select(4, &s), [0, 1, 2, 3]);
    }
}
