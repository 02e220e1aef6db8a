//! Finding the valid choices of a space, as a constraint solver does.
//!
//! The params fall into **groups**: two params are in one group when a restriction reads both
//! (transitively). A choice is valid exactly when each group's part of it satisfies that
//! group's restrictions, so the valid choices are the product of each group's valid parts,
//! and a group is solved on its own: a param no restriction reads is a group of its own
//! whose every value is valid. Within a group the solver walks depth first over its params in
//! manifest order, checking each restriction as soon as the last param it reads is bound, so
//! that a partial choice that breaks one is never extended.
//!
//! Grouping is what keeps a space whose restrictions read only its last params fast: the
//! free params in front are counted by multiplication, not walked once per value of theirs.
//! Counting alone (`--count`) goes further (`count.rs`): it binds params in the order that
//! splits them apart soonest, so that restrictions that bind late cost no walk either.

use anyhow::{Context, Result};
use tunebox_expr::Value as PyValue;

use super::count::{Counter, Stop as CountStop};
use super::problem::{PROGRESS_EVERY, Problem, Progress};

/// Params linked by restrictions, solved on their own.
#[derive(Debug)]
struct Group {
    /// The params' positions, ascending.
    positions: Vec<usize>,
    /// The restrictions that read them (indices into the space's restrictions).
    restrictions: Vec<usize>,
}

impl<'a> Problem<'a> {
    /// Whether the restrictions that read no param hold (checked once, for every choice).
    ///
    /// # Errors
    ///
    /// One that raises, named.
    fn constants_hold(&self) -> Result<bool> {
        let bound: Vec<PyValue<'_>> = self
            .values
            .iter()
            .map(|v| v.first().copied().unwrap_or(PyValue::Int(0)))
            .collect();
        for (i, r) in self.restrictions.iter().enumerate() {
            if r.compiled.slots().is_empty()
                && !r
                    .compiled
                    .eval_bool(&bound)
                    .with_context(|| format!("restrictions[{i}]"))?
            {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The groups, by their first param.
    fn groups(&self) -> Vec<Group> {
        let n = self.radix.len();
        let mut parent: Vec<usize> = (0..n).collect();
        fn root(parent: &mut [usize], mut p: usize) -> usize {
            while parent[p] != p {
                parent[p] = parent[parent[p]];
                p = parent[p];
            }
            p
        }
        for r in self.restrictions {
            let slots = r.compiled.slots();
            for pair in slots.windows(2) {
                let (a, b) = (root(&mut parent, pair[0]), root(&mut parent, pair[1]));
                parent[a.max(b)] = a.min(b);
            }
        }
        let mut groups: Vec<Group> = Vec::new();
        let mut at_root: Vec<Option<usize>> = vec![None; n];
        for p in 0..n {
            let r = root(&mut parent, p);
            let g = *at_root[r].get_or_insert_with(|| {
                groups.push(Group {
                    positions: Vec::new(),
                    restrictions: Vec::new(),
                });
                groups.len() - 1
            });
            groups[g].positions.push(p);
        }
        for (i, r) in self.restrictions.iter().enumerate() {
            if let Some(&first) = r.compiled.slots().first() {
                let g = at_root[root(&mut parent, first)].expect("every param has a group");
                groups[g].restrictions.push(i);
            }
        }
        groups
    }

    /// The number of choices of `group` before restrictions (saturating).
    fn raw(&self, group: &Group) -> u128 {
        group
            .positions
            .iter()
            .fold(1u128, |n, &p| n.saturating_mul(u128::from(self.radix[p])))
    }

    /// A walk over `group`'s params (see [`Walk`]).
    fn walk<'p>(&'p self, group: &'p Group) -> Walk<'p, 'a> {
        Walk::new(self, group, None)
    }

    /// The number of valid choices, with `progress` told the fraction done now and then:
    /// counted by components (`count.rs`), or, when a restriction raises there, by the walk,
    /// which names it as the listing would.
    ///
    /// # Errors
    ///
    /// A restriction that raises, naming it and the values bound.
    pub(crate) fn count(&self, progress: Progress<'_>) -> Result<u64> {
        if !self.constants_hold()? || self.values.iter().any(Vec::is_empty) {
            return Ok(0);
        }
        let total = match Counter::new(self, &mut *progress).count() {
            Ok(total) => total,
            Err(CountStop::Raised) => self.walk_count(progress)?,
        };
        Ok(u64::try_from(total).unwrap_or(u64::MAX))
    }

    /// The number of valid choices by the depth-first walk of each group.
    fn walk_count(&self, progress: Progress<'_>) -> Result<u128> {
        let mut groups = self.groups();
        groups.sort_by_key(|g| self.raw(g));
        let work: f64 = groups
            .iter()
            .filter(|g| !g.restrictions.is_empty())
            .map(|g| self.raw(g) as f64)
            .sum();
        let mut done = 0.0;
        let mut total = 1u128;
        for group in &groups {
            let n = if group.restrictions.is_empty() {
                self.raw(group)
            } else {
                let raw = self.raw(group) as f64;
                let mut n = 0u128;
                self.walk(group).run(
                    |_| {
                        n += 1;
                        Ok(true)
                    },
                    &mut |f| progress((done + f * raw) / work),
                )?;
                done += raw;
                n
            };
            if n == 0 {
                return Ok(0);
            }
            total = total.saturating_mul(n);
        }
        progress(1.0);
        Ok(total)
    }

    /// The rank of every valid choice, ascending; `None` when more than `max` are valid.
    ///
    /// # Errors
    ///
    /// A restriction that raises, naming it and the values bound.
    pub(crate) fn list(&self, max: usize) -> Result<Option<Vec<u64>>> {
        if self.radix.is_empty() {
            return Ok(Some(if self.constants_hold()? {
                vec![0]
            } else {
                Vec::new()
            }));
        }
        if !self.constants_hold()? || self.values.iter().any(Vec::is_empty) {
            return Ok(Some(Vec::new()));
        }
        let groups = self.groups();
        // Smallest first, so that an empty group is found before a large one is walked.
        let mut order: Vec<usize> = (0..groups.len()).collect();
        order.sort_by_key(|&g| self.raw(&groups[g]));
        let mut parts: Vec<Vec<u64>> = vec![Vec::new(); groups.len()];
        let mut too_many = false;
        for &g in &order {
            // Once the space is known to be too large, a group only has to be non-empty.
            let cap = if too_many { 1 } else { max.saturating_add(1) };
            let part = self.group_part(&groups[g], cap)?;
            if part.is_empty() {
                return Ok(Some(Vec::new()));
            }
            too_many |= part.len() > max;
            parts[g] = part;
        }
        let total = parts
            .iter()
            .try_fold(1usize, |n, p| n.checked_mul(p.len()))
            .filter(|&n| n <= max);
        let (false, Some(total)) = (too_many, total) else {
            return Ok(None);
        };
        Ok(Some(product_ranks(&parts, total)))
    }

    /// The rank contributions of `group`'s valid parts (at most `cap` of them), in order.
    fn group_part(&self, group: &Group, cap: usize) -> Result<Vec<u64>> {
        let mut part = Vec::new();
        if let ([p], []) = (group.positions.as_slice(), group.restrictions.as_slice()) {
            let w = self.weight[*p] as u64;
            part.extend((0..self.radix[*p].min(cap as u64)).map(|i| i * w));
            return Ok(part);
        }
        self.walk(group).run(
            |index| {
                part.push(self.rank_part(&group.positions, index));
                Ok(part.len() < cap)
            },
            &mut |_| {},
        )?;
        Ok(part)
    }

    /// The rank of the valid choices whose rank is in `lo..hi` (a block of the raw product),
    /// ascending; `None` when more than `max` are.
    ///
    /// # Errors
    ///
    /// A restriction that raises, naming it and the values bound.
    pub(crate) fn list_range(&self, lo: u64, hi: u64, max: usize) -> Result<Option<Vec<u64>>> {
        if !self.constants_hold()? || self.values.iter().any(Vec::is_empty) {
            return Ok(Some(Vec::new()));
        }
        let all = Group {
            positions: (0..self.radix.len()).collect(),
            restrictions: (0..self.restrictions.len()).collect(),
        };
        let mut ranks = Vec::new();
        let mut over = false;
        Walk::new(self, &all, Some((u128::from(lo), u128::from(hi)))).run(
            |index| {
                if ranks.len() == max {
                    over = true;
                    return Ok(false);
                }
                ranks.push(self.rank_part(&all.positions, index));
                Ok(true)
            },
            &mut |_| {},
        )?;
        Ok((!over).then_some(ranks))
    }

    /// The part of a choice's rank that the params at `positions` give.
    fn rank_part(&self, positions: &[usize], index: &[usize]) -> u64 {
        positions
            .iter()
            .map(|&p| index[p] as u128 * self.weight[p])
            .sum::<u128>() as u64
    }
}

/// The sum of one contribution of each part, for every combination, ascending.
fn product_ranks(parts: &[Vec<u64>], total: usize) -> Vec<u64> {
    let mut ranks = Vec::with_capacity(total);
    let mut at = vec![0usize; parts.len()];
    'combinations: loop {
        ranks.push(parts.iter().zip(&at).map(|(p, &i)| p[i]).sum());
        for g in (0..parts.len()).rev() {
            at[g] += 1;
            if at[g] < parts[g].len() {
                continue 'combinations;
            }
            at[g] = 0;
        }
        break;
    }
    // Interleaved groups (A and C linked, B free) give the ranks out of order.
    if !ranks.is_sorted() {
        ranks.sort_unstable();
    }
    ranks
}

/// A depth-first walk over one group's params, in manifest order, visiting every valid part
/// in canonical order.
struct Walk<'p, 'a> {
    problem: &'p Problem<'a>,
    positions: &'p [usize],
    /// The restrictions to check once depth `d` is bound, with their manifest index.
    at: Vec<Vec<usize>>,
    /// Only choices whose rank is in this range (a walk over every param).
    range: Option<(u128, u128)>,
}

impl<'p, 'a> Walk<'p, 'a> {
    fn new(problem: &'p Problem<'a>, group: &'p Group, range: Option<(u128, u128)>) -> Self {
        let mut at = vec![Vec::new(); group.positions.len()];
        for &i in &group.restrictions {
            let r = &problem.restrictions[i];
            let depth = group
                .positions
                .binary_search(&r.last)
                .expect("a group holds the params its restrictions read");
            at[depth].push(i);
        }
        Walk {
            problem,
            positions: &group.positions,
            at,
            range,
        }
    }

    /// Calls `visit` with the value indices (one per param of the space; those of other
    /// groups stay 0) of every valid part, until it answers `false`.
    fn run(
        &self,
        mut visit: impl FnMut(&[usize]) -> Result<bool>,
        progress: Progress<'_>,
    ) -> Result<()> {
        let p = self.problem;
        let n = self.positions.len();
        if n == 0 {
            visit(&vec![0; p.radix.len()])?;
            return Ok(());
        }
        let mut index = vec![0usize; p.radix.len()];
        let mut bound: Vec<PyValue<'_>> = p.values.iter().map(|v| v[0]).collect();
        // The rank of the bound prefix (for a ranged walk over every param).
        let mut prefix = vec![0u128; n];
        let mut depth = 0;
        let mut visited = 0u64;
        loop {
            let pos = self.positions[depth];
            bound[pos] = p.values[pos][index[pos]];
            visited += 1;
            if visited.is_multiple_of(PROGRESS_EVERY) {
                progress(self.fraction(&index));
            }
            let mut keep = true;
            if let Some((lo, hi)) = self.range {
                let above = if depth == 0 { 0 } else { prefix[depth - 1] };
                prefix[depth] = above * u128::from(p.radix[pos]) + index[pos] as u128;
                let start = prefix[depth] * p.weight[pos];
                if start >= hi {
                    return Ok(());
                }
                keep = start + p.weight[pos] > lo;
            }
            if keep {
                keep = self.holds(depth, &bound, &index)?;
            }
            if keep && depth + 1 < n {
                depth += 1;
                index[self.positions[depth]] = 0;
                continue;
            }
            if keep && !visit(&index)? {
                return Ok(());
            }
            match self.next_value(depth, &mut index) {
                Some(next) => depth = next,
                None => return Ok(()),
            }
        }
    }

    /// Whether the restrictions the param at `depth` completes hold for the `bound` values.
    fn holds(&self, depth: usize, bound: &[PyValue<'_>], index: &[usize]) -> Result<bool> {
        for &i in &self.at[depth] {
            let ok = self.problem.restrictions[i]
                .compiled
                .eval_bool(bound)
                .with_context(|| self.describe(i, depth, index))?;
            if !ok {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The next value at `depth`, backtracking past exhausted positions: the depth the walk
    /// goes on from, `None` when it is done.
    fn next_value(&self, mut depth: usize, index: &mut [usize]) -> Option<usize> {
        loop {
            let pos = self.positions[depth];
            index[pos] += 1;
            if index[pos] < self.problem.values[pos].len() {
                return Some(depth);
            }
            if depth == 0 {
                return None;
            }
            depth -= 1;
        }
    }

    /// The fraction of the walk done, from the first three params' positions.
    fn fraction(&self, index: &[usize]) -> f64 {
        let mut fraction = 0.0;
        let mut scale = 1.0;
        for &pos in self.positions.iter().take(3) {
            scale /= self.problem.radix[pos] as f64;
            fraction += index[pos] as f64 * scale;
        }
        fraction
    }

    /// `restrictions[i] for the choice A=1 B=2`: the restriction and the values bound.
    fn describe(&self, i: usize, depth: usize, index: &[usize]) -> String {
        let p = self.problem;
        let partial: Vec<String> = self.positions[..=depth]
            .iter()
            .map(|&pos| {
                let name = p.names[pos];
                format!("{name}={}", p.params[name][index[pos]])
            })
            .collect();
        format!("restrictions[{i}] for the choice {}", partial.join(" "))
    }
}
