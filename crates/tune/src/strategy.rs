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
