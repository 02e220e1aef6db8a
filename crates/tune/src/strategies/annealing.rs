//! Simulated annealing, as Kernel Tuner's `simulated_annealing` strategy
//! (`kernel_tuner/strategies/simulated_annealing.py`; Kirkpatrick, Gelatt, Vecchi, "Optimization
//! by Simulated Annealing", Science 1983): from a random choice, try a random adjacent
//! neighbour; always move to a better one, never from a working choice to a failed one, and to
//! a worse one with probability `exp(((old - new) / old) / T)` (Kernel Tuner's relative
//! acceptance); `T` starts at 1 and is multiplied by 0.995 after every step. When it falls
//! below 0.001 the search restarts from a new random choice with `T = 1`. A neighbour measured
//! before costs nothing: its known time is used.

use super::{Core, ask_one};
use crate::results::ChoiceResult;
use crate::space::SearchSpace;
use crate::strategy::Strategy;

const T_START: f64 = 1.0;
const T_MIN: f64 = 0.001;
const ALPHA: f64 = 0.995;

/// Simulated annealing over adjacent neighbours (see the module docs).
#[derive(Debug, Clone)]
pub struct SimulatedAnnealing {
    core: Core,
    pending: Option<usize>,
    current: Option<(usize, f64)>,
    t: f64,
}

impl SimulatedAnnealing {
    /// At most `budget` choices, seeded by `seed`.
    pub fn new(budget: usize, seed: u64) -> SimulatedAnnealing {
        SimulatedAnnealing {
            core: Core::new(budget, seed),
            pending: None,
            current: None,
            t: T_START,
        }
    }

    /// Kernel Tuner's `acceptance_prob` (lower is better).
    fn acceptance(old: f64, new: f64, t: f64) -> f64 {
        if old.is_infinite() {
            1.0
        } else if new.is_infinite() {
            0.0
        } else if new < old {
            1.0
        } else {
            (((old - new) / old) / t).exp()
        }
    }

    /// One annealing step from `current` to a candidate whose time is `new`.
    fn consider(
        core: &mut Core,
        current: &mut Option<(usize, f64)>,
        t: &mut f64,
        c: usize,
        new: f64,
    ) {
        if let Some((_, old)) = *current
            && Self::acceptance(old, new, *t) > core.rng.f64()
        {
            *current = Some((c, new));
        }
        *t *= ALPHA;
        if *t < T_MIN {
            *t = T_START;
            *current = None;
        }
    }
}

impl Strategy for SimulatedAnnealing {
    fn name(&self) -> &str {
        "annealing"
    }

    fn ask(&mut self, space: &SearchSpace, n: usize) -> Vec<usize> {
        let (current, t) = (&mut self.current, &mut self.t);
        ask_one(
            &mut self.core,
            &mut self.pending,
            space,
            n,
            |core, space| {
                // Moves to neighbours measured before are free; a few hundred at most per ask.
                for _ in 0..256 {
                    let Some((here, _)) = *current else {
                        return core.random_unvisited(space);
                    };
                    let neighbours = Core::neighbours(space, here);
                    if neighbours.is_empty() {
                        *current = None;
                        continue;
                    }
                    let c = neighbours[core.rng.usize(0..neighbours.len())];
                    if !core.is_visited(c) {
                        return Some(c);
                    }
                    let known = core.value(c).unwrap_or(f64::INFINITY);
                    Self::consider(core, current, t, c, known);
                }
                None
            },
        )
    }

    fn tell(&mut self, index: usize, result: &ChoiceResult) {
        let value = self.core.record(index, result);
        if self.pending == Some(index) {
            self.pending = None;
            if self.current.is_some() {
                Self::consider(&mut self.core, &mut self.current, &mut self.t, index, value);
                return;
            }
        }
        if self.current.is_none() {
            self.current = Some((index, value));
        }
    }
}
