//! Which choices a run measures: all of them (brute force) or a seeded random sample.

use std::collections::HashMap;

use crate::results::Selection;

/// The indices of the choices to measure, in the order to measure them, out of `space_size`
/// choices. Deterministic: the same selection gives the same indices on every machine (shards
/// and `tunebox merge` rely on it).
pub(crate) fn select(space_size: usize, selection: &Selection) -> Vec<usize> {
    match (selection.strategy.as_str(), selection.budget) {
        ("random", budget) => sample(space_size, budget.unwrap_or(space_size), selection.seed),
        _ => (0..space_size).collect(),
    }
}

/// `k` distinct indices out of `0..n`, uniformly, in random order: a partial Fisher-Yates
/// shuffle that remembers only the positions it swapped, so it costs O(k) for any `n`.
fn sample(n: usize, k: usize, seed: u64) -> Vec<usize> {
    let k = k.min(n);
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut swapped: HashMap<usize, usize> = HashMap::with_capacity(2 * k);
    let mut out = Vec::with_capacity(k);
    for i in 0..k {
        let j = rng.usize(i..n);
        let at_j = *swapped.get(&j).unwrap_or(&j);
        let at_i = *swapped.get(&i).unwrap_or(&i);
        swapped.insert(j, at_i);
        out.push(at_j);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(budget: usize, seed: u64) -> Selection {
        Selection {
            strategy: "random".into(),
            budget: Some(budget),
            seed,
        }
    }

    #[test]
    fn random_samples_are_distinct_seeded_and_bounded() {
        let a = select(1000, &random(50, 7));
        assert_eq!(a.len(), 50);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 50);
        assert!(sorted.iter().all(|&i| i < 1000));
        assert_eq!(a, select(1000, &random(50, 7)));
        assert_ne!(a, select(1000, &random(50, 8)));
        let mut all = select(10, &random(100, 1));
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
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
