//! Greedy iterated local search, as Kernel Tuner's `greedy_ils` strategy
//! (`kernel_tuner/strategies/greedy_ils.py`; Lourenço, Martin, Stützle, "Iterated Local
//! Search", 2003): first-improvement hill climbing over adjacent neighbours (one param moved to
//! the next or previous of its values) in random order; at a local optimum, a random walk
//! changes 30% of the params (Kernel Tuner's `random_walk = 0.3`) and the climb starts again
//! from there; after 50 local optima without a better one (Kernel Tuner's `no_improvement`), a
//! restart from a random choice. A neighbour measured before costs nothing.

use super::{Core, ask_one};
use crate::results::ChoiceResult;
use crate::search::strategy::Strategy;
use crate::space::SearchSpace;

/// Fraction of the params a random walk changes.
const RANDOM_WALK: f64 = 0.3;
/// Local optima without improvement before a restart.
const NO_IMPROVEMENT: usize = 50;

/// Greedy iterated local search (see the module docs).
#[derive(Debug, Clone)]
pub struct GreedyIls {
    core: Core,
    pending: Option<usize>,
    climb: Climb,
}

/// The climb: where it stands, what it has left to try there, and when to restart (also
/// `auto`'s local search, once it hands over).
#[derive(Debug, Clone, Default)]
pub(super) struct Climb {
    /// The climb's position and its time.
    current: Option<(usize, f64)>,
    /// Its neighbours not tried yet, in the order to try them.
    untried: Vec<usize>,
    /// `untried` must be found for `current` (it moved in `tell`, which has no space).
    fresh: bool,
    /// The best local optimum of this restart.
    best: f64,
    stale: usize,
}

impl Climb {
    /// A climb that starts at `from` (a choice heard and its objective).
    pub(super) fn starting_at(from: (usize, f64)) -> Climb {
        Climb {
            current: Some(from),
            fresh: true,
            best: f64::INFINITY,
            ..Climb::default()
        }
    }

    /// Hears the objective of its own proposal `index`: a start (random, or after a walk)
    /// begins the climb there; a better one moves the climb.
    pub(super) fn heard(&mut self, index: usize, value: f64) {
        match self.current {
            None => {
                self.current = Some((index, value));
                self.fresh = true;
            }
            Some((_, here)) if value < here => {
                self.current = Some((index, value));
                self.fresh = true;
            }
            Some(_) => {}
        }
    }

    /// Hears another's result: a better choice than where the climb stands moves it there.
    pub(super) fn heard_other(&mut self, index: usize, value: f64) {
        if let Some((_, here)) = self.current
            && value < here
        {
            self.current = Some((index, value));
            self.fresh = true;
        }
    }

    fn move_to(&mut self, core: &mut Core, space: &SearchSpace, index: usize, value: f64) {
        self.current = Some((index, value));
        self.untried = Core::neighbours(space, index);
        core.rng.shuffle(&mut self.untried);
    }

    /// The next unvisited choice to measure, moving freely through measured ones.
    pub(super) fn step(&mut self, core: &mut Core, space: &SearchSpace) -> Option<usize> {
        for _ in 0..256 {
            let Some((here, value)) = self.current else {
                self.best = f64::INFINITY;
                self.stale = 0;
                return core.random_unvisited(space);
            };
            if self.fresh {
                self.fresh = false;
                self.move_to(core, space, here, value);
            }
            if let Some(c) = self.untried.pop() {
                if !core.is_visited(c) {
                    return Some(c);
                }
                if let Some(known) = core.value(c)
                    && known < value
                {
                    self.move_to(core, space, c, known);
                }
                continue;
            }
            // A local optimum.
            if value < self.best {
                self.best = value;
                self.stale = 0;
            } else {
                self.stale += 1;
            }
            if self.stale >= NO_IMPROVEMENT {
                self.current = None;
                continue;
            }
            let params = space.params().count();
            let changes = (RANDOM_WALK * params as f64).ceil() as usize;
            match core.random_walk(space, here, changes) {
                Some(j) if !core.is_visited(j) => {
                    self.current = None;
                    self.untried.clear();
                    return Some(j);
                }
                Some(j) => {
                    let known = core.value(j).unwrap_or(f64::INFINITY);
                    self.move_to(core, space, j, known);
                }
                None => self.current = None,
            }
        }
        None
    }
}

impl GreedyIls {
    /// At most `budget` choices, seeded by `seed`.
    pub fn new(budget: usize, seed: u64) -> GreedyIls {
        GreedyIls {
            core: Core::new(budget, seed),
            pending: None,
            climb: Climb {
                best: f64::INFINITY,
                ..Climb::default()
            },
        }
    }
}

impl Strategy for GreedyIls {
    fn name(&self) -> &str {
        "ils"
    }

    fn ask(&mut self, space: &SearchSpace, n: usize) -> Vec<usize> {
        let climb = &mut self.climb;
        ask_one(
            &mut self.core,
            &mut self.pending,
            space,
            n,
            |core, space| climb.step(core, space),
        )
    }

    fn tell(&mut self, index: usize, result: &ChoiceResult) {
        let value = self.core.record(index, result);
        if self.pending == Some(index) {
            self.pending = None;
        }
        self.climb.heard(index, value);
    }
}
