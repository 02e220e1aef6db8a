//! Differential evolution, as Kernel Tuner's `diff_evo` strategy
//! (`kernel_tuner/strategies/diff_evo.py`, which uses SciPy's `differential_evolution`; Storn
//! and Price, "Differential Evolution – A Simple and Efficient Heuristic for Global
//! Optimization over Continuous Spaces", 1997), scheme `best1bin`: a population of 20 choices
//! as vectors of value indices; for each member a mutant `best + F·(r1 − r2)` (F = 0.8), a
//! binomial crossover with the member (CR = 0.9, one param always from the mutant), rounded to
//! the nearest value index; the trial replaces the member when it is at least as good. A trial
//! that breaks a restriction is drawn again (five times, then the member stays); one measured
//! before costs nothing.

use std::collections::{HashSet, VecDeque};

use super::{Core, Generational, ask_generations, tell_generations};
use crate::results::ChoiceResult;
use crate::search::strategy::Strategy;
use crate::space::SearchSpace;

const POPULATION: usize = 20;
const F: f64 = 0.8;
const CR: f64 = 0.9;

/// Differential evolution, `best1bin` (see the module docs).
#[derive(Debug, Clone)]
pub struct DifferentialEvolution {
    core: Core,
    /// The members (stable indices).
    population: Vec<usize>,
    /// Trials being measured: (member slot, trial).
    trials: Vec<(usize, usize)>,
    queue: VecDeque<usize>,
    outstanding: HashSet<usize>,
}

impl DifferentialEvolution {
    /// At most `budget` choices, seeded by `seed`.
    pub fn new(budget: usize, seed: u64) -> DifferentialEvolution {
        DifferentialEvolution {
            core: Core::new(budget, seed),
            population: Vec::new(),
            trials: Vec::new(),
            queue: VecDeque::new(),
            outstanding: HashSet::new(),
        }
    }

    fn value(&self, index: usize) -> f64 {
        self.core.value(index).unwrap_or(f64::INFINITY)
    }

    /// Selection on the last generation's trials, then the next trials.
    fn evolve(&mut self, space: &SearchSpace) {
        if self.population.is_empty() {
            self.first_population(space);
            return;
        }
        self.select();
        if self.population.len() < 4 {
            if let Some(i) = self.core.random_unvisited(space) {
                self.population.push(i);
                self.queue.push_back(i);
            }
            return;
        }
        self.next_trials(space);
        if self.queue.is_empty() {
            self.immigrate(space);
        }
    }

    /// The first population: up to `POPULATION` distinct random choices, queued.
    fn first_population(&mut self, space: &SearchSpace) {
        let size = POPULATION.min(space.len());
        self.population = self.core.random_population(space, size, &mut self.queue);
    }

    /// Each trial no worse than its slot's member takes the slot.
    fn select(&mut self) {
        for (slot, trial) in std::mem::take(&mut self.trials) {
            if self.value(trial) <= self.value(self.population[slot]) {
                self.population[slot] = trial;
            }
        }
    }

    /// A trial for each slot (up to 5 draws for one that is a choice of the space and not the
    /// slot's member), queued unless already measured or queued.
    fn next_trials(&mut self, space: &SearchSpace) {
        let n = self.population.len();
        let vectors: Vec<Vec<usize>> = self
            .population
            .iter()
            .map(|&i| space.value_indices(i).expect("a choice of the space"))
            .collect();
        let best = (0..n)
            .min_by(|&a, &b| {
                self.value(self.population[a])
                    .total_cmp(&self.value(self.population[b]))
            })
            .expect("a population");
        let counts = super::counts(space);
        for slot in 0..n {
            for _ in 0..5 {
                let trial = self.mutant(slot, best, &vectors, &counts);
                let Some(t) = space.index_of_values(&trial) else {
                    continue;
                };
                if t == self.population[slot] {
                    continue;
                }
                self.trials.push((slot, t));
                if !self.core.is_visited(t) && !self.queue.contains(&t) {
                    self.queue.push_back(t);
                }
                break;
            }
        }
    }

    /// DE/best/1/bin for `slot`: the best member moved by `F` times the difference of two
    /// others drawn at random, in each param with probability `CR` (and in one drawn param
    /// always), rounded and clamped to the param's values; the slot's own value elsewhere.
    fn mutant(
        &mut self,
        slot: usize,
        best: usize,
        vectors: &[Vec<usize>],
        counts: &[usize],
    ) -> Vec<usize> {
        let n = vectors.len();
        let d = counts.len();
        let (mut r1, mut r2) = (slot, slot);
        while r1 == slot {
            r1 = self.core.rng.usize(0..n);
        }
        while r2 == slot || r2 == r1 {
            r2 = self.core.rng.usize(0..n);
        }
        let always = self.core.rng.usize(0..d.max(1));
        (0..d)
            .map(|p| {
                if p == always || self.core.rng.f64() < CR {
                    let x = vectors[best][p] as f64
                        + F * (vectors[r1][p] as f64 - vectors[r2][p] as f64);
                    (x.round().max(0.0) as usize).min(counts[p] - 1)
                } else {
                    vectors[slot][p]
                }
            })
            .collect()
    }

    /// A converged population (nothing queued) gets a random immigrant in its worst slot.
    fn immigrate(&mut self, space: &SearchSpace) {
        let Some(i) = self.core.random_unvisited(space) else {
            return;
        };
        let n = self.population.len();
        let worst = (0..n)
            .max_by(|&a, &b| {
                self.value(self.population[a])
                    .total_cmp(&self.value(self.population[b]))
            })
            .expect("a population");
        self.trials.push((worst, i));
        self.queue.push_back(i);
    }
}

impl Strategy for DifferentialEvolution {
    fn name(&self) -> &str {
        "de"
    }

    fn ask(&mut self, space: &SearchSpace, n: usize) -> Vec<usize> {
        ask_generations(self, space, n)
    }

    fn tell(&mut self, index: usize, result: &ChoiceResult) {
        tell_generations(self, index, result);
    }
}

impl Generational for DifferentialEvolution {
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
        self.evolve(space);
    }
}
