//! Simulated annealing, as Kernel Tuner's `simulated_annealing` strategy
//! (`kernel_tuner/strategies/simulated_annealing.py`; Kirkpatrick, Gelatt, Vecchi, "Optimization
//! by Simulated Annealing", Science 1983): from a random choice, try a random adjacent
//! neighbour; always move to a better one, never from a working choice to a failed one, and to
//! a worse one with probability `exp(((old - new) / old) / T)` (Kernel Tuner's relative
//! acceptance). The schedule is Kernel Tuner 1.5's: `T = 0.1 · 0.9975^(k · c / max_fevals)`,
//! where `c` is the number of distinct choices measured so far, `max_fevals` the budget (at most
//! the space's size) and `k = ⌈ln(0.0001) / ln(0.9975)⌉` = 3680, so that `T` falls to
//! 0.1 · 0.0001 as the budget ends (Kernel Tuner derives `k` from the end temperature alone);
//! after 100 steps without a new measurement (every neighbour known) the walk restarts
//! from a random choice. A neighbour measured before costs nothing: its known time is used.

use super::{Core, ask_one};
use crate::results::ChoiceResult;
use crate::search::strategy::Strategy;
use crate::space::SearchSpace;

const T_START: f64 = 0.1;
const T_MIN: f64 = 0.0001;
const ALPHA: f64 = 0.9975;
/// Steps without a new measurement before a restart (Kernel Tuner's `stuck > 100`).
const STUCK: usize = 100;

/// Simulated annealing over adjacent neighbours (see the module docs).
#[derive(Debug, Clone)]
pub struct SimulatedAnnealing {
    core: Core,
    pending: Option<usize>,
    current: Option<(usize, f64)>,
    t: f64,
    /// The budget, at most the space's size (Kernel Tuner's `max_fevals`), known at the first ask.
    max_fevals: usize,
}

impl SimulatedAnnealing {
    /// At most `budget` choices, seeded by `seed`.
    pub fn new(budget: usize, seed: u64) -> SimulatedAnnealing {
        SimulatedAnnealing {
            core: Core::new(budget, seed),
            pending: None,
            current: None,
            t: T_START,
            max_fevals: 0,
        }
    }

    /// The temperature after `measured` distinct measurements of a budget of `max_fevals`.
    fn temperature(measured: usize, max_fevals: usize) -> f64 {
        let k = (T_MIN.ln() / ALPHA.ln()).ceil();
        T_START * ALPHA.powf(k * measured as f64 / max_fevals.max(1) as f64)
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
    }
}

impl Strategy for SimulatedAnnealing {
    fn name(&self) -> &str {
        "annealing"
    }

    fn ask(&mut self, space: &SearchSpace, n: usize) -> Vec<usize> {
        if self.max_fevals == 0 {
            self.max_fevals = self.core.budget().min(space.len());
        }
        self.t = Self::temperature(self.core.told.len(), self.max_fevals);
        let (current, t) = (&mut self.current, &mut self.t);
        ask_one(
            &mut self.core,
            &mut self.pending,
            space,
            n,
            |core, space| {
                // Moves to neighbours measured before are free; after STUCK of them in a row,
                // restart from a random choice.
                for _ in 0..STUCK {
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
                *current = None;
                core.random_unvisited(space)
            },
        )
    }

    fn tell(&mut self, index: usize, result: &ChoiceResult) {
        let value = self.core.record(index, result);
        self.t = Self::temperature(self.core.told.len(), self.max_fevals);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_spans_the_budget_as_kernel_tuner_s_does() {
        assert_eq!(SimulatedAnnealing::temperature(0, 500), T_START);
        // Kernel Tuner 1.5: T_start · alpha^(max_iter · c / max_fevals), max_iter = 3680.
        let end = SimulatedAnnealing::temperature(500, 500);
        assert!((end - 9.988e-6).abs() < 1e-8, "{end}");
        let half = SimulatedAnnealing::temperature(250, 500);
        assert!((half - 9.994e-4).abs() < 1e-6, "{half}");
    }
}
