//! A genetic algorithm, as Kernel Tuner's `genetic_algorithm` strategy
//! (`kernel_tuner/strategies/genetic_algorithm.py`, after Holland; Goldberg, "Genetic Algorithms
//! in Search, Optimization and Machine Learning", 1989): a population of 20 choices; parents
//! picked by rank with a Beta(1, 2.5)-distributed position in the ranking (Kernel Tuner's
//! `weighted_choice`), uniform crossover gene by gene, mutation of each gene with probability
//! 1/10 to a random value of its param. Unlike Kernel Tuner it keeps the best choice found
//! (elitism of one), and an offspring that breaks a restriction is bred again (up to ten times
//! the population) rather than repaired.

use std::collections::{HashSet, VecDeque};

use super::{Core, Generational, ask_generations, tell_generations};
use crate::results::ChoiceResult;
use crate::search::strategy::Strategy;
use crate::space::SearchSpace;

/// Population size (Kernel Tuner's `popsize` default).
const POPULATION: usize = 20;
/// A gene mutates with probability 1 / this (Kernel Tuner's `mutation_chance`).
const MUTATION_CHANCE: usize = 10;
/// Beta(1, β) for rank selection (Kernel Tuner's `random_index_betavariate`).
const BETA: f64 = 2.5;

/// A genetic algorithm over the choices' value indices (see the module docs).
#[derive(Debug, Clone)]
pub struct GeneticAlgorithm {
    core: Core,
    /// The generation being measured (and known offspring carried into it).
    generation: Vec<usize>,
    queue: VecDeque<usize>,
    outstanding: HashSet<usize>,
}

impl GeneticAlgorithm {
    /// At most `budget` choices, seeded by `seed`.
    pub fn new(budget: usize, seed: u64) -> GeneticAlgorithm {
        GeneticAlgorithm {
            core: Core::new(budget, seed),
            generation: Vec::new(),
            queue: VecDeque::new(),
            outstanding: HashSet::new(),
        }
    }

    /// A position in a ranking of `n`, the head most likely.
    fn rank_pick(&mut self, n: usize) -> usize {
        let u = self.core.rng.f64();
        let x = 1.0 - (1.0 - u).powf(1.0 / BETA);
        ((x * n as f64) as usize).min(n - 1)
    }

    /// The next generation from the measured one (or a random first one).
    fn breed(&mut self, space: &SearchSpace) {
        let size = POPULATION.min(space.len());
        if self.generation.is_empty() {
            self.generation = self.core.random_population(space, size, &mut self.queue);
            return;
        }
        let parents = self.ranked_parents(space);
        let counts = super::counts(space);
        let mut next: Vec<usize> = Vec::with_capacity(size);
        if let Some((best, _)) = self.core.best {
            next.push(best);
        }
        let mut tries = 0;
        while next.len() < size && tries < 10 * size {
            tries += 1;
            let child = self.child(&parents, &counts);
            let Some(i) = space.index_of_values(&child) else {
                continue;
            };
            if next.contains(&i) {
                continue;
            }
            next.push(i);
            if !self.core.is_visited(i) {
                self.queue.push_back(i);
            }
        }
        // A population that breeds nothing new gets random immigrants.
        if self.queue.is_empty()
            && let Some(i) = self.core.random_unvisited(space)
        {
            self.queue.push_back(i);
            next.push(i);
        }
        self.generation = next;
    }

    /// The measured generation's value indices, best first (failures last, ties by index).
    fn ranked_parents(&self, space: &SearchSpace) -> Vec<Vec<usize>> {
        let mut ranked: Vec<(f64, usize)> = self
            .generation
            .iter()
            .map(|&i| (self.core.value(i).unwrap_or(f64::INFINITY), i))
            .collect();
        ranked.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        ranked.dedup_by_key(|r| r.1);
        ranked
            .iter()
            .map(|&(_, i)| space.value_indices(i).expect("a choice of the space"))
            .collect()
    }

    /// One offspring: two parents picked by rank, uniform crossover, then each gene mutated
    /// with probability 1 / `MUTATION_CHANCE` to a random value of its param.
    fn child(&mut self, parents: &[Vec<usize>], counts: &[usize]) -> Vec<usize> {
        let a = &parents[self.rank_pick(parents.len())];
        let b = &parents[self.rank_pick(parents.len())];
        let mut child: Vec<usize> = a
            .iter()
            .zip(b)
            .map(|(&x, &y)| if self.core.rng.bool() { x } else { y })
            .collect();
        for (gene, &count) in child.iter_mut().zip(counts) {
            if self.core.rng.usize(0..MUTATION_CHANCE) == 0 {
                *gene = self.core.rng.usize(0..count);
            }
        }
        child
    }
}

impl Strategy for GeneticAlgorithm {
    fn name(&self) -> &str {
        "genetic"
    }

    fn ask(&mut self, space: &SearchSpace, n: usize) -> Vec<usize> {
        ask_generations(self, space, n)
    }

    fn tell(&mut self, index: usize, result: &ChoiceResult) {
        tell_generations(self, index, result);
    }
}

impl Generational for GeneticAlgorithm {
    fn core(&mut self) -> &mut Core {
        &mut self.core
    }

    fn queue(&mut self) -> &mut VecDeque<usize> {
        &mut self.queue
    }

    fn outstanding(&mut self) -> &mut HashSet<usize> {
        &mut self.outstanding
    }

    fn next_generation(&mut self, space: &SearchSpace) {
        self.breed(space);
    }
}
