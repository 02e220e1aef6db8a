//! The names of the built-in strategies: one list, read by the library ([`super::by_name`]),
//! the CLI's `--strategy` and Python's `strategy=`, each name parsed by [`StrategyName`]'s
//! `FromStr`, whose error lists the known ones.

use std::fmt;
use std::str::FromStr;

/// A built-in strategy, by the name reports and options use for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StrategyName {
    /// Every choice, in canonical order.
    BruteForce,
    /// The adaptive search to pick, at any budget ([`super::AutoSearch`]).
    Auto,
    /// A random sample of the budget's size ([`crate::RandomSample`]).
    Random,
    /// Genetic algorithm, as Kernel Tuner's `genetic_algorithm` ([`super::GeneticAlgorithm`]).
    Genetic,
    /// Simulated annealing, as Kernel Tuner's `simulated_annealing`
    /// ([`super::SimulatedAnnealing`]).
    Annealing,
    /// Greedy iterated local search, as Kernel Tuner's `greedy_ils` ([`super::GreedyIls`]).
    Ils,
    /// Differential evolution, best1bin, as Kernel Tuner's `diff_evo`
    /// ([`super::DifferentialEvolution`]).
    De,
    /// Bayesian optimization, a Gaussian process and expected improvement, as Kernel Tuner's
    /// `bayes_opt` ([`super::BayesianOptimization`]).
    Bayes,
}

impl StrategyName {
    /// Every built-in strategy, in the order of the evaluation's tables.
    pub const ALL: [StrategyName; 8] = [
        StrategyName::BruteForce,
        StrategyName::Auto,
        StrategyName::Random,
        StrategyName::Genetic,
        StrategyName::Annealing,
        StrategyName::Ils,
        StrategyName::De,
        StrategyName::Bayes,
    ];

    /// Its name: `brute-force`, `auto`, `random`, `genetic`, `annealing`, `ils`, `de`, `bayes`.
    pub const fn name(self) -> &'static str {
        match self {
            StrategyName::BruteForce => "brute-force",
            StrategyName::Auto => "auto",
            StrategyName::Random => "random",
            StrategyName::Genetic => "genetic",
            StrategyName::Annealing => "annealing",
            StrategyName::Ils => "ils",
            StrategyName::De => "de",
            StrategyName::Bayes => "bayes",
        }
    }

    /// Whether it adapts to what it measured (everything but brute force and random sampling),
    /// and so needs a budget.
    pub const fn is_adaptive(self) -> bool {
        !matches!(self, StrategyName::BruteForce | StrategyName::Random)
    }
}

impl fmt::Display for StrategyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A strategy name that is none of [`StrategyName::ALL`]'s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown strategy `{name}`: use one of brute-force, auto, random, genetic, annealing, ils, \
     de, bayes"
)]
pub struct UnknownStrategy {
    /// The name given.
    pub name: String,
}

impl FromStr for StrategyName {
    type Err = UnknownStrategy;

    fn from_str(name: &str) -> Result<StrategyName, UnknownStrategy> {
        StrategyName::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| UnknownStrategy {
                name: name.to_owned(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_an_unknown_one_lists_them_all() {
        for s in StrategyName::ALL {
            assert_eq!(s.name().parse::<StrategyName>(), Ok(s));
        }
        let e = "gentic".parse::<StrategyName>().unwrap_err();
        let listed = StrategyName::ALL.map(StrategyName::name).join(", ");
        assert_eq!(
            e.to_string(),
            format!("unknown strategy `gentic`: use one of {listed}")
        );
    }
}
