//! Counting the valid choices without walking them one by one, as a model counter does.
//!
//! The depth-first walk of `solver.rs` binds params in manifest order and checks a restriction
//! once its last param is bound: when the restrictions that prune most read only the last params,
//! it binds every prefix before it can prune (twelve ten-valued params whose last three must be
//! 1 take a walk over 10^9 prefixes). Counting needs no order, so it is free to choose one:
//!
//! - a restriction that reads one param filters that param's values once, up front;
//! - the params left fall into **components**, linked by the restrictions that still read two
//!   or more unbound params; a component is counted on its own and the counts multiply (a param
//!   no restriction reads counts its values);
//! - within a component it branches on the param the most restrictions read (the fewest values
//!   on a tie), checks every restriction whose params are now all bound, and splits what is
//!   left into components again: binding a param that links the others makes them independent.
//!
//! A restriction that raises is not judged here: the count is taken again by the walk, whose
//! order of checks is the listing's, so that both say the same about the same manifest.

use anyhow::Result;
use tunebox_expr::Value as PyValue;

use super::problem::{PROGRESS_EVERY, Problem, Progress};

/// Why a count stopped before its end.
pub(super) enum Stop {
    /// A restriction raised: the caller counts again by the walk (which names it).
    Raised,
}

/// The state of one count: the values bound so far, and what is left to check.
pub(super) struct Counter<'p, 'a> {
    problem: &'p Problem<'a>,
    /// The value indices each param may still take (its unary restrictions applied).
    domains: Vec<Vec<usize>>,
    /// The params each restriction reads (its slots, deduplicated).
    reads: Vec<Vec<usize>>,
    /// How many of a restriction's params are still unbound.
    unbound: Vec<usize>,
    bound: Vec<PyValue<'a>>,
    is_bound: Vec<bool>,
    /// Values tried and restrictions checked so far.
    visited: u64,
    /// When `progress` is told next (in `visited`).
    next_report: u64,
    progress: Progress<'p>,
}

impl<'p, 'a> Counter<'p, 'a> {
    /// A counter of `problem`'s valid choices (its constant restrictions already hold),
    /// telling `progress` the fraction done now and then.
    pub(super) fn new(problem: &'p Problem<'a>, progress: Progress<'p>) -> Self {
        let n = problem.radix.len();
        let reads: Vec<Vec<usize>> = problem
            .restrictions
            .iter()
            .map(|r| {
                let mut slots = r.compiled.slots().to_vec();
                slots.sort_unstable();
                slots.dedup();
                slots
            })
            .collect();
        Counter {
            problem,
            domains: (0..n)
                .map(|p| (0..problem.values[p].len()).collect())
                .collect(),
            unbound: reads.iter().map(Vec::len).collect(),
            reads,
            bound: problem.values.iter().map(|v| v[0]).collect(),
            is_bound: vec![false; n],
            visited: 0,
            next_report: PROGRESS_EVERY,
            progress,
        }
    }

    /// The number of valid choices (saturating).
    ///
    /// # Errors
    ///
    /// [`Stop::Raised`]: a restriction raised for some values.
    pub(super) fn count(mut self) -> Result<u128, Stop> {
        let n = self.problem.radix.len();
        // Restrictions that read one param filter its values once.
        let mut open = Vec::new();
        for i in 0..self.reads.len() {
            match *self.reads[i].as_slice() {
                [] => {}
                [p] => {
                    let values = std::mem::take(&mut self.domains[p]);
                    let mut kept = Vec::with_capacity(values.len());
                    for v in values {
                        self.bound[p] = self.problem.values[p][v];
                        if self.holds(i)? {
                            kept.push(v);
                        }
                    }
                    self.domains[p] = kept;
                }
                _ => open.push(i),
            }
        }
        let params: Vec<usize> = (0..n).collect();
        let total = self.components(&params, &open, 0.0, 1.0)?;
        (self.progress)(1.0);
        Ok(total)
    }

    /// The valid completions of `params` (all unbound) under the restrictions `open` (each
    /// reading at least one of them, none fully bound), counted component by component; the
    /// work spans `lo..lo + width` of the whole, for progress.
    fn components(
        &mut self,
        params: &[usize],
        open: &[usize],
        lo: f64,
        width: f64,
    ) -> Result<u128, Stop> {
        let mut parts = self.split(params, open);
        // Smallest first: an empty one ends the count before a large one is walked.
        parts.sort_by_key(|(params, _)| self.raw(params));
        let sizes: Vec<f64> = parts.iter().map(|(p, _)| self.raw(p) as f64).collect();
        let all: f64 = sizes.iter().sum::<f64>().max(1.0);
        let (mut total, mut at) = (1u128, lo);
        for ((params, open), size) in parts.iter().zip(&sizes) {
            let share = width * size / all;
            let n = self.component(params, open, at, share)?;
            if n == 0 {
                return Ok(0);
            }
            total = total.saturating_mul(n);
            at += share;
        }
        Ok(total)
    }

    /// One component: its params' values multiplied when no restriction links them, else
    /// a branch on one param and the components of the rest for each of its values.
    fn component(
        &mut self,
        params: &[usize],
        open: &[usize],
        lo: f64,
        width: f64,
    ) -> Result<u128, Stop> {
        if open.is_empty() {
            return Ok(self.raw(params));
        }
        let p = self.branch_param(params, open);
        let rest: Vec<usize> = params.iter().copied().filter(|&q| q != p).collect();
        // The restrictions binding `p` completes are checked at once; the others stay open.
        let (complete, still_open): (Vec<usize>, Vec<usize>) = open
            .iter()
            .copied()
            .filter(|&i| self.reads[i].contains(&p))
            .partition(|&i| self.unbound[i] == 1);
        let mut later: Vec<usize> = open
            .iter()
            .copied()
            .filter(|&i| !self.reads[i].contains(&p))
            .collect();
        later.extend(still_open.iter().copied());
        self.is_bound[p] = true;
        for &i in complete.iter().chain(&still_open) {
            self.unbound[i] -= 1;
        }
        let values = std::mem::take(&mut self.domains[p]);
        let step = width / values.len().max(1) as f64;
        let counted = self.branches(p, &values, &complete, &rest, &later, (lo, step));
        self.domains[p] = values;
        for &i in complete.iter().chain(&still_open) {
            self.unbound[i] += 1;
        }
        self.is_bound[p] = false;
        counted
    }

    /// The choices of a component branching on `p`: for each of its `values` (bound in turn,
    /// progress at `lo + k × step`) that the `complete` restrictions allow, the `rest`'s values
    /// multiplied when no restriction is left (`later`), else the components of the rest.
    fn branches(
        &mut self,
        p: usize,
        values: &[usize],
        complete: &[usize],
        rest: &[usize],
        later: &[usize],
        (lo, step): (f64, f64),
    ) -> Result<u128, Stop> {
        let mut total = 0u128;
        for (k, &v) in values.iter().enumerate() {
            self.bound[p] = self.problem.values[p][v];
            self.tick(lo + k as f64 * step);
            if !self.all_hold(complete)? {
                continue;
            }
            // Nothing left to check: the rest's values multiply.
            let n = if later.is_empty() {
                self.raw(rest)
            } else {
                self.components(rest, later, lo + k as f64 * step, step)?
            };
            total = total.saturating_add(n);
        }
        Ok(total)
    }

    /// `params` grouped by the restrictions of `open` that link them (through their unbound
    /// params), each group with the restrictions it holds.
    fn split(&self, params: &[usize], open: &[usize]) -> Vec<(Vec<usize>, Vec<usize>)> {
        let n = self.problem.radix.len();
        let mut parent: Vec<usize> = (0..n).collect();
        fn root(parent: &mut [usize], mut p: usize) -> usize {
            while parent[p] != p {
                parent[p] = parent[parent[p]];
                p = parent[p];
            }
            p
        }
        for &i in open {
            let mut unbound = self.reads[i].iter().copied().filter(|&p| !self.is_bound[p]);
            if let Some(first) = unbound.next() {
                for q in unbound {
                    let (a, b) = (root(&mut parent, first), root(&mut parent, q));
                    parent[a.max(b)] = a.min(b);
                }
            }
        }
        let mut parts: Vec<(Vec<usize>, Vec<usize>)> = Vec::new();
        let mut at_root: Vec<Option<usize>> = vec![None; n];
        for &p in params {
            let r = root(&mut parent, p);
            let g = *at_root[r].get_or_insert_with(|| {
                parts.push((Vec::new(), Vec::new()));
                parts.len() - 1
            });
            parts[g].0.push(p);
        }
        for &i in open {
            if let Some(&p) = self.reads[i].iter().find(|&&p| !self.is_bound[p]) {
                let g = at_root[root(&mut parent, p)].expect("an open restriction reads a param");
                parts[g].1.push(i);
            }
        }
        parts
    }

    /// The param to branch on: the one whose binding leaves the smallest largest component
    /// (a param in the middle of a chain of restrictions cuts it in halves, where one at its
    /// end would only shorten it), then the one the most restrictions of `open` read, then the
    /// one with the fewest values, then the first.
    fn branch_param(&mut self, params: &[usize], open: &[usize]) -> usize {
        let readers = |p: usize| open.iter().filter(|&&i| self.reads[i].contains(&p)).count();
        let mut keyed = Vec::with_capacity(params.len());
        for &p in params {
            self.is_bound[p] = true;
            let largest = self
                .split(params, open)
                .iter()
                .map(|(part, _)| part.len() - usize::from(part.contains(&p)))
                .max()
                .unwrap_or(0);
            self.is_bound[p] = false;
            keyed.push((
                largest,
                std::cmp::Reverse(readers(p)),
                self.domains[p].len(),
                p,
            ));
        }
        keyed.into_iter().min().expect("a component has a param").3
    }

    /// The product of the values `params` may take (saturating).
    fn raw(&self, params: &[usize]) -> u128 {
        params.iter().fold(1u128, |n, &p| {
            n.saturating_mul(self.domains[p].len() as u128)
        })
    }

    /// Whether every restriction of `restrictions` holds for the values bound.
    fn all_hold(&mut self, restrictions: &[usize]) -> Result<bool, Stop> {
        for &i in restrictions {
            if !self.holds(i)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn holds(&mut self, i: usize) -> Result<bool, Stop> {
        self.visited += 1;
        self.problem.restrictions[i]
            .compiled
            .eval_bool(&self.bound)
            .map_err(|_| Stop::Raised)
    }

    /// Tells the progress callback `at` now and then.
    fn tick(&mut self, at: f64) {
        self.visited += 1;
        if self.visited >= self.next_report {
            self.next_report = self.visited + PROGRESS_EVERY;
            (self.progress)(at.clamp(0.0, 1.0));
        }
    }
}
