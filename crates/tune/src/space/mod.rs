//! The search space: parameter values, choices, restrictions.
//!
//! Restrictions are Python expressions with Python's meaning, in every manifest (native, Kernel
//! Tuner-style, T1): `tunebox-expr` parses each once and binds its names to parameter positions.
//! The valid choices are found as a constraint solver would (`solver`): params that no
//! restriction links are solved apart, and within a group depth first in manifest order,
//! checking each restriction as soon as the last parameter it reads is bound, so that a
//! partial choice that breaks one is never extended. A space holds only the rank of each valid
//! choice (8 bytes); a [`Choice`] is built when asked for. A space of more than 50 million
//! valid choices is not listed at all: see [`SearchSpace`].
//!
//! The area `space` (docs/architecture.md's code map) imports only the base.

mod count;
mod problem;
mod restriction;
mod solver;
pub(crate) mod value;

use std::sync::Arc;

use anyhow::{Context, Result, bail, ensure};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use tunebox_expr::Value as PyValue;
use tunebox_protocol::Define;

use crate::base::shard::ShardInfo;
use problem::Problem;

pub(crate) use restriction::Restriction;
pub(crate) use value::ParamValue;

/// Most valid choices a space may hold (8 bytes each: 400 MB at most).
pub(crate) const MAX_VALID: usize = 50_000_000;

/// One point of the space: a value for every parameter, in the manifest's order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Choice(IndexMap<String, ParamValue>);

impl Choice {
    /// A choice of these values, in order.
    pub fn new(values: IndexMap<String, ParamValue>) -> Choice {
        Choice(values)
    }

    /// `BM=32 BN=64`, or `(no params)`.
    pub fn label(&self) -> String {
        if self.0.is_empty() {
            return "(no params)".into();
        }
        self.0
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// The choice as compiler defines.
    pub(crate) fn defines(&self) -> Vec<Define> {
        self.0
            .iter()
            .map(|(k, v)| Define::new(k, v.define_text()))
            .collect()
    }

    /// The parameters and their values, in the manifest's order.
    pub fn values(&self) -> impl Iterator<Item = (&String, &ParamValue)> {
        self.0.iter()
    }

    /// The choice as an inline TOML table: `{ BM = 32, T = "f" }`.
    pub fn toml(&self) -> String {
        let entries: Vec<String> = self
            .0
            .iter()
            .map(|(k, v)| {
                let value = match v {
                    ParamValue::Int(i) => toml::Value::Integer(*i),
                    ParamValue::Float(f) => toml::Value::Float(*f),
                    ParamValue::Bool(b) => toml::Value::Boolean(*b),
                    ParamValue::Str(s) => toml::Value::String(s.clone()),
                };
                format!("{k} = {value}")
            })
            .collect();
        if entries.is_empty() {
            "{}".into()
        } else {
            format!("{{ {} }}", entries.join(", "))
        }
    }
}

/// Every choice of the space that satisfies every restriction, in canonical order.
#[cfg(test)]
pub(crate) fn choices(
    params: &IndexMap<String, Vec<ParamValue>>,
    restrictions: &[Restriction],
) -> Result<Vec<Choice>> {
    Ok(SearchSpace::new(params, restrictions)?.choices().collect())
}

/// The space a strategy searches: the parameters and their values, and every choice that
/// satisfies the restrictions, each with its stable index (its position in canonical order,
/// the first parameter varying slowest). Indices are what strategies ask for, what the results
/// cache and shards key on, and what reports call `index`.
///
/// Only the rank of each valid choice is kept (8 bytes); [`SearchSpace::choice`] builds the
/// [`Choice`] when asked.
///
/// # Spaces too large to list
///
/// A space with more than 50 million valid choices is not listed: a choice's index is then its rank in the raw product (the product of the value
/// lists, before restrictions), [`SearchSpace::len`] is the size of that product (every index
/// is below it, but not every index below it is a choice: [`SearchSpace::contains`] says),
/// random choices are drawn by rejection from the raw product, and a shard of such a space owns
/// a block of the raw product rather than every N-th choice; brute force lists one shard's
/// block at a time ([`SearchSpace::list_shard`]).
#[derive(Debug, Clone)]
pub struct SearchSpace {
    params: IndexMap<String, Vec<ParamValue>>,
    /// How many values each param has.
    radix: Vec<u64>,
    /// The restrictions, to check choices of a space too large to list.
    restrictions: Arc<Vec<Restriction>>,
    listing: Listing,
}

/// Which choices a space holds the rank of.
#[derive(Debug, Clone)]
enum Listing {
    /// Every valid choice, ascending: an index is a position here.
    All(Vec<u64>),
    /// Too many to list: an index is a rank of the raw product. `block` holds the valid
    /// ranks of the block of the raw product one shard owns, once listed.
    Unlisted { block: Vec<u64> },
}

/// The most draws [`SearchSpace::random_index`] makes before it gives up on a space whose
/// restrictions keep almost nothing of the raw product.
const MAX_DRAWS: usize = 1_000_000;

impl SearchSpace {
    /// The space of `params` under `restrictions`.
    ///
    /// # Errors
    ///
    /// A restriction that raises for some choice (naming it and the choice), or a space whose
    /// product of value counts does not fit in 64 bits.
    pub(crate) fn new(
        params: &IndexMap<String, Vec<ParamValue>>,
        restrictions: &[Restriction],
    ) -> Result<SearchSpace> {
        SearchSpace::with_limit(params, restrictions, MAX_VALID)
    }

    /// The space of `params` under `restrictions`, Python expressions over the params (as a
    /// manifest's `restrictions` or a T1 file's conditions): how a tool that is not driven by a
    /// manifest (a replay, a test, a benchmark) builds one.
    ///
    /// # Errors
    ///
    /// [`crate::TuneError::Manifest`]: a restriction that does not parse, names an unknown param or
    /// raises for some choice; a raw product over 2^64 choices.
    pub fn from_params(
        params: &IndexMap<String, Vec<ParamValue>>,
        restrictions: &[String],
    ) -> crate::Result<SearchSpace> {
        let build = || {
            let parsed = parse_all(restrictions, params)?;
            SearchSpace::new(params, &parsed)
        };
        build().map_err(crate::TuneError::manifest)
    }

    /// [`SearchSpace::new`], listing at most `max_valid` valid choices.
    fn with_limit(
        params: &IndexMap<String, Vec<ParamValue>>,
        restrictions: &[Restriction],
        max_valid: usize,
    ) -> Result<SearchSpace> {
        let radix = checked_radix(params)?;
        let listing = match Problem::new(params, restrictions).list(max_valid)? {
            Some(ranks) => Listing::All(ranks),
            None => Listing::Unlisted { block: Vec::new() },
        };
        Ok(SearchSpace {
            params: params.clone(),
            radix,
            restrictions: Arc::new(restrictions.to_vec()),
            listing,
        })
    }

    /// The parameters' names and values, in the manifest's order.
    pub fn params(&self) -> impl Iterator<Item = (&str, &[ParamValue])> {
        self.params.iter().map(|(k, v)| (k.as_str(), v.as_slice()))
    }

    /// The restrictions' texts, in the manifest's order.
    pub(crate) fn restrictions(&self) -> impl Iterator<Item = &str> {
        self.restrictions.iter().map(|r| r.compiled.text())
    }

    /// Whether every valid choice is listed (a space of at most 50 million): indices are then
    /// positions among the valid choices, `0..len()` every one a choice. See [`SearchSpace`]
    /// for the other kind.
    pub(crate) fn is_listed(&self) -> bool {
        matches!(self.listing, Listing::All(_))
    }

    /// The number of valid choices; for a space too large to list, the size of the raw
    /// product (the bound of its indices). Every index is below it.
    pub fn len(&self) -> usize {
        match &self.listing {
            Listing::All(ranks) => ranks.len(),
            Listing::Unlisted { .. } => usize::try_from(self.raw_len()).unwrap_or(usize::MAX),
        }
    }

    /// Whether no choice satisfies the restrictions (never, for a space too large to list).
    pub fn is_empty(&self) -> bool {
        matches!(&self.listing, Listing::All(ranks) if ranks.is_empty())
    }

    /// The number of choices before restrictions (the product of the value counts).
    pub fn raw_len(&self) -> u64 {
        self.radix.iter().product()
    }

    /// Whether `index` is the index of a choice.
    pub fn contains(&self, index: usize) -> bool {
        match &self.listing {
            Listing::All(ranks) => index < ranks.len(),
            Listing::Unlisted { .. } => self.rank_is_valid(index as u64),
        }
    }

    /// The value indices of the choice with stable index `index`, one per param, if there is
    /// one.
    pub(crate) fn value_indices(&self, index: usize) -> Option<Vec<usize>> {
        let rank = match &self.listing {
            Listing::All(ranks) => *ranks.get(index)?,
            Listing::Unlisted { .. } => index as u64,
        };
        let indices = self.decode(rank)?;
        (self.is_listed() || self.satisfied(&indices)).then_some(indices)
    }

    /// The value indices of raw rank `rank`, if it is below the raw product.
    fn decode(&self, mut rank: u64) -> Option<Vec<usize>> {
        if rank >= self.raw_len() {
            return None;
        }
        let mut out = vec![0usize; self.radix.len()];
        for (slot, &r) in out.iter_mut().zip(&self.radix).rev() {
            *slot = (rank % r) as usize;
            rank /= r;
        }
        Some(out)
    }

    fn rank_is_valid(&self, rank: u64) -> bool {
        self.decode(rank).is_some_and(|i| self.satisfied(&i))
    }

    /// Whether the choice of these value indices satisfies every restriction (one that
    /// raises counts as broken).
    fn satisfied(&self, indices: &[usize]) -> bool {
        let bound: Vec<PyValue<'_>> = self
            .params
            .values()
            .zip(indices)
            .map(|(values, &i)| values[i].to_python())
            .collect();
        self.restrictions
            .iter()
            .all(|r| r.compiled.eval_bool(&bound).unwrap_or(false))
    }

    /// The choice with stable index `index`, if there is one.
    pub fn choice(&self, index: usize) -> Option<Choice> {
        let indices = self.value_indices(index)?;
        Some(Choice(
            self.params
                .iter()
                .zip(indices)
                .map(|((name, values), i)| (name.clone(), values[i].clone()))
                .collect(),
        ))
    }

    /// Every listed choice, in index order, built one at a time: every valid choice, or, for
    /// a space too large to list, those of the shard's block [`SearchSpace::list_shard`]
    /// listed (none before).
    pub fn choices(&self) -> impl ExactSizeIterator<Item = Choice> + '_ {
        (0..self.listed_len()).map(|p| {
            self.choice(self.listed_index(p).expect("a position below listed_len"))
                .expect("a listed choice")
        })
    }

    /// How many choices are listed: [`SearchSpace::len`], or for a space too large to list,
    /// those of the shard's block.
    pub(crate) fn listed_len(&self) -> usize {
        match &self.listing {
            Listing::All(ranks) | Listing::Unlisted { block: ranks } => ranks.len(),
        }
    }

    /// The index of the `position`-th listed choice (canonical order): `position` itself in a
    /// listed space, the rank of the `position`-th choice of the shard's block otherwise. How
    /// brute force walks any space.
    pub(crate) fn listed_index(&self, position: usize) -> Option<usize> {
        match &self.listing {
            Listing::All(ranks) => (position < ranks.len()).then_some(position),
            Listing::Unlisted { block } => block.get(position).map(|&r| r as usize),
        }
    }

    /// A valid choice's index drawn uniformly at random with `rng`: in a listed space one of
    /// `0..len()`; in one too large to list, by rejection from the raw product (up to a
    /// million draws). `None` when the space is empty, or no draw was valid.
    pub(crate) fn random_index(&self, rng: &mut fastrand::Rng) -> Option<usize> {
        match &self.listing {
            Listing::All(ranks) => (!ranks.is_empty()).then(|| rng.usize(0..ranks.len())),
            Listing::Unlisted { .. } => {
                let raw = self.raw_len();
                (0..MAX_DRAWS)
                    .map(|_| rng.u64(0..raw))
                    .find(|&rank| self.rank_is_valid(rank))
                    .map(|rank| rank as usize)
            }
        }
    }

    /// Whether shard `shard` (all of them when `None`) owns the choice `index`: in a listed
    /// space every N-th choice (`index % N == K`), in a space too large to list the K-th of N
    /// equal blocks of the raw product.
    pub(crate) fn owns(&self, shard: Option<ShardInfo>, index: usize) -> bool {
        match (&self.listing, shard) {
            (_, None) => true,
            (Listing::All(_), shard) => crate::base::shard::owns(shard, index),
            (Listing::Unlisted { .. }, Some(s)) => {
                let (lo, hi) = self.block(s);
                (lo..hi).contains(&(index as u64))
            }
        }
    }

    /// The block of the raw product shard `s` owns in a space too large to list.
    fn block(&self, s: ShardInfo) -> (u64, u64) {
        let raw = u128::from(self.raw_len());
        let at = |k: usize| (raw * k as u128 / s.count as u128) as u64;
        (at(s.index), at(s.index + 1))
    }

    /// Lists the valid choices of the block of the raw product that `shard` owns, in a space
    /// too large to list whole (nothing to do in a listed one), so that brute force can walk
    /// them.
    ///
    /// # Errors
    ///
    /// No shard, or one whose block holds more than 50 million valid choices (saying how many
    /// shards would do); a restriction that raises.
    pub fn list_shard(&mut self, shard: Option<ShardInfo>) -> crate::Result<()> {
        self.list_shard_within(shard, MAX_VALID)
            .map_err(crate::TuneError::manifest)
    }

    fn list_shard_within(&mut self, shard: Option<ShardInfo>, max: usize) -> Result<()> {
        if self.is_listed() {
            return Ok(());
        }
        let Some(s) = shard else {
            bail!(
                "more than {max} choices satisfy the restrictions ({} before restrictions), too \
                 many to list: brute force cannot walk them in one run. Split it with --shard \
                 K/N (each shard lists its block of the raw product; N = {} or more shards \
                 keeps each within the limit when the valid choices are spread evenly), or \
                 search it with --strategy random (or an adaptive one) and --budget",
                self.raw_len(),
                self.shards_needed(max)
            );
        };
        let (lo, hi) = self.block(s);
        let block = Problem::new(&self.params, &self.restrictions)
            .list_range(lo, hi, max)?
            .with_context(|| {
                format!(
                    "shard {s} holds more than {max} valid choices (its block of the raw \
                     product: {lo}..{hi}); split the run into more shards (at least {})",
                    self.shards_needed(max).max(s.count * 2)
                )
            })?;
        self.listing = Listing::Unlisted { block };
        Ok(())
    }

    /// How many shards of the raw product would hold at most `max` valid choices each if they
    /// were spread evenly (a guess from a sample of the raw product).
    fn shards_needed(&self, max: usize) -> usize {
        let mut rng = fastrand::Rng::with_seed(0);
        let raw = self.raw_len();
        let draws = 10_000;
        let valid = (0..draws)
            .filter(|_| self.rank_is_valid(rng.u64(0..raw)))
            .count()
            .max(1);
        let estimate = raw as f64 * valid as f64 / draws as f64;
        ((estimate / max as f64).ceil() as usize).max(2)
    }

    /// The stable index of `choice`; `None` when it breaks a restriction or holds a value that
    /// is not one of its parameter's (a strategy that builds choices of its own, such as a
    /// genetic algorithm's offspring, checks them with this).
    pub fn index_of(&self, choice: &Choice) -> Option<usize> {
        if choice.0.len() != self.params.len() {
            return None;
        }
        let mut index = Vec::with_capacity(self.params.len());
        for ((name, values), (cname, value)) in self.params.iter().zip(&choice.0) {
            if name != cname {
                return None;
            }
            index.push(values.iter().position(|v| v == value)?);
        }
        self.index_of_values(&index)
    }

    /// The stable index of the choice with these value indices (one per param, each below its
    /// param's value count), or `None` when it breaks a restriction or an index is out of
    /// range: how a local search finds a neighbour without building a [`Choice`].
    pub(crate) fn index_of_values(&self, indices: &[usize]) -> Option<usize> {
        if indices.len() != self.radix.len()
            || indices
                .iter()
                .zip(&self.radix)
                .any(|(&i, &r)| i as u64 >= r)
        {
            return None;
        }
        let rank = rank_of(indices, &self.radix);
        match &self.listing {
            Listing::All(ranks) => ranks.binary_search(&rank).ok(),
            Listing::Unlisted { .. } => self.satisfied(indices).then_some(rank as usize),
        }
    }

    /// Keeps only the choices `keep` accepts, in order (the stable indices of those after a
    /// removed one move down), and returns how many were removed: for limits known only with
    /// the device, as Kernel Tuner drops blocks of more threads than the GPU allows when it
    /// builds its space. A space too large to list keeps every choice (a choice over such a
    /// limit fails when it is measured).
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&Choice) -> bool) -> usize {
        let Listing::All(ranks) = &self.listing else {
            return 0;
        };
        let kept: Vec<u64> = (0..ranks.len())
            .filter(|&i| keep(&self.choice(i).expect("an index below len")))
            .map(|i| ranks[i])
            .collect();
        let removed = ranks.len() - kept.len();
        self.listing = Listing::All(kept);
        removed
    }

    /// Whether `choice` is a valid choice of this space (see [`SearchSpace::index_of`]).
    pub fn is_valid(&self, choice: &Choice) -> bool {
        self.index_of(choice).is_some()
    }
}

/// Readies a space too large to list for a run of the strategy called `strategy`: brute
/// force lists the block of the raw product that `shard` owns (and needs a shard); another
/// strategy samples the raw product, and needs a budget (`budget_given`). Nothing to do for a
/// listed space; otherwise a note of what was done, for the report.
///
/// # Errors
///
/// Brute force without a shard, or with a shard too large to list; another strategy without
/// a budget: each saying what to give instead.
pub(crate) fn prepare_unlisted(
    space: &mut SearchSpace,
    strategy: &str,
    budget_given: bool,
    shard: Option<ShardInfo>,
) -> Result<Option<String>> {
    if space.is_listed() {
        return Ok(None);
    }
    let unlisted = format!(
        "more than {MAX_VALID} choices satisfy the restrictions, too many to list: indices \
         are positions in the raw product of the params ({} choices before restrictions)",
        space.raw_len()
    );
    if strategy == "brute-force" {
        space.list_shard_within(shard, MAX_VALID)?;
        return Ok(Some(format!(
            "{unlisted}; this shard owns a block of it, {} valid",
            choice_count(space.listed_len())
        )));
    }
    ensure!(
        budget_given,
        "more than {MAX_VALID} choices satisfy the restrictions ({} before restrictions), too \
         many to list: --strategy {strategy} draws them at random from the raw product and \
         needs --budget N (the most choices to measure)",
        space.raw_len()
    );
    Ok(Some(format!(
        "{unlisted}; {strategy} draws its choices from it at random, keeping the valid ones"
    )))
}

/// The mixed-radix rank of value indices `index` over `radix` (the first position most
/// significant): canonical order is rank order.
fn rank_of(index: &[usize], radix: &[u64]) -> u64 {
    index
        .iter()
        .zip(radix)
        .fold(0u64, |rank, (&i, &r)| rank * r + i as u64)
}

/// Each param's value count, checking that their product fits in 64 bits.
fn checked_radix(params: &IndexMap<String, Vec<ParamValue>>) -> Result<Vec<u64>> {
    let radix: Vec<u64> = params.values().map(|v| v.len() as u64).collect();
    ensure!(
        radix
            .iter()
            .try_fold(1u64, |n, &r| n.checked_mul(r))
            .is_some(),
        "the space has more than 2^64 choices before restrictions; remove values or split \
         a parameter's values over several manifests"
    );
    Ok(radix)
}

/// Parses every restriction of `texts`, naming the one that fails (`restrictions[i]`).
fn parse_all(
    texts: &[String],
    params: &IndexMap<String, Vec<ParamValue>>,
) -> Result<Vec<Restriction>> {
    texts
        .iter()
        .enumerate()
        .map(|(i, r)| Restriction::parse(r, params).with_context(|| format!("restrictions[{i}]")))
        .collect()
}

/// How many valid choices a space has, counted without listing them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpaceCount {
    /// Choices that satisfy every restriction.
    pub valid: u64,
    /// Choices before restrictions (the product of the value counts).
    pub raw: u64,
}

/// Counts the valid choices of `params` under `restrictions` without listing them (no limit
/// on their number), telling `progress` the fraction done (0.0 to 1.0) now and then: what
/// `tunebox tune --count` prints. Params that no restriction links are counted by
/// multiplication, and the rest are bound in the order that splits them into independent
/// groups soonest (a param that restrictions tie to many others first), each group counted
/// apart: a space whose restrictions read only a few params, or bind only its last ones,
/// counts in milliseconds.
///
/// # Errors
///
/// As [`SearchSpace::from_params`].
pub fn count_space(
    params: &IndexMap<String, Vec<ParamValue>>,
    restrictions: &[String],
    progress: &mut dyn FnMut(f64),
) -> crate::Result<SpaceCount> {
    let mut count = || {
        let radix = checked_radix(params)?;
        let parsed = parse_all(restrictions, params)?;
        let valid = Problem::new(params, &parsed).count(progress)?;
        Ok(SpaceCount {
            valid,
            raw: radix.iter().product(),
        })
    };
    count().map_err(crate::TuneError::manifest)
}

/// Counts the valid choices of `params` under parsed `restrictions` (see [`count_space`]).
///
/// # Errors
///
/// A raw product over 2^64 choices; a restriction that raises.
pub(crate) fn count_parsed(
    params: &IndexMap<String, Vec<ParamValue>>,
    restrictions: &[Restriction],
    progress: &mut dyn FnMut(f64),
) -> Result<SpaceCount> {
    let raw = checked_radix(params)?.iter().product();
    let valid = Problem::new(params, restrictions).count(progress)?;
    Ok(SpaceCount { valid, raw })
}

/// `1 choice`, `2 choices`.
pub fn choice_count(n: usize) -> String {
    if n == 1 {
        "1 choice".into()
    } else {
        format!("{n} choices")
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use tunebox_expr::{Compiled, Expr};

    /// Integer params from `(name, values)` pairs, in order.
    pub(crate) fn params(spec: &[(&str, &[i64])]) -> IndexMap<String, Vec<ParamValue>> {
        spec.iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    v.iter().map(|&i| ParamValue::Int(i)).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn cartesian_product_in_manifest_order() {
        let p = params(&[("A", &[1, 2]), ("B", &[10, 20, 30])]);
        let all = choices(&p, &[]).unwrap();
        let labels: Vec<String> = all.iter().map(Choice::label).collect();
        assert_eq!(
            labels,
            [
                "A=1 B=10", "A=1 B=20", "A=1 B=30", "A=2 B=10", "A=2 B=20", "A=2 B=30"
            ]
        );
    }

    #[test]
    fn restrictions_filter() {
        let p = params(&[("BM", &[16, 32, 64]), ("BN", &[16, 32, 64])]);
        let r = [
            Restriction::parse("BM * BN <= 1024", &p).unwrap(),
            Restriction::parse("BM >= BN and BM % 16 == 0", &p).unwrap(),
        ];
        let labels: Vec<String> = choices(&p, &r).unwrap().iter().map(Choice::label).collect();
        assert_eq!(
            labels,
            ["BM=16 BN=16", "BM=32 BN=16", "BM=32 BN=32", "BM=64 BN=16"]
        );
    }

    #[test]
    fn params_may_mix_value_types() {
        let p: IndexMap<String, Vec<ParamValue>> = IndexMap::from([(
            "U".to_string(),
            vec![
                ParamValue::Int(1),
                ParamValue::Float(2.5),
                ParamValue::Str("4".into()),
                ParamValue::Bool(true),
            ],
        )]);
        assert_eq!(choices(&p, &[]).unwrap().len(), 4);
        let err = choices(&p, &[Restriction::parse("U > 0", &p).unwrap()]).unwrap_err();
        assert!(
            format!("{err:#}").contains("restrictions[0] for the choice U=4"),
            "{err:#}"
        );
    }

    #[test]
    fn no_params_is_one_choice() {
        let all = choices(&IndexMap::new(), &[]).unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].label(), "(no params)");
        assert!(all[0].defines().is_empty());
    }

    #[test]
    fn malformed_restrictions_are_caught_when_parsed() {
        let p = params(&[("A", &[1])]);
        let err = Restriction::parse("A <", &p).unwrap_err().to_string();
        assert!(err.contains("`A <`") && err.contains("column"), "{err}");
        let err = Restriction::parse("A < B", &p).unwrap_err().to_string();
        assert!(err.contains("`B`") && err.contains("A"), "{err}");
        // Python's truthiness: any value is a condition.
        let r = [Restriction::parse("A + 1", &p).unwrap()];
        assert_eq!(choices(&p, &r).unwrap().len(), 1);
        // What Python would raise is an error naming the restriction and the choice.
        let r = [Restriction::parse("A == \"x\" + 1.5", &p).unwrap()];
        let err = format!("{:#}", choices(&p, &r).unwrap_err());
        assert!(err.contains("restrictions[0] for the choice A=1"), "{err}");
    }

    #[test]
    fn spaces_too_large_to_list_index_the_raw_product() {
        let values: Vec<i64> = (0..100).collect();
        let p = params(&[("A", &values), ("B", &values)]);
        let r = [Restriction::parse("(A + B) % 3 != 0", &p).unwrap()];
        let listed = SearchSpace::with_limit(&p, &r, usize::MAX).unwrap();
        let huge = SearchSpace::with_limit(&p, &r, 1000).unwrap();
        assert!(listed.is_listed() && !huge.is_listed());
        assert_eq!(
            (huge.len(), huge.raw_len(), huge.listed_len()),
            (10_000, 10_000, 0)
        );
        assert!(!huge.is_empty());
        // Indices are raw ranks: A * 100 + B.
        assert!(huge.contains(1) && !huge.contains(3) && !huge.contains(10_000));
        assert_eq!(huge.index_of_values(&[3, 4]), Some(304));
        assert_eq!(huge.index_of_values(&[3, 3]), None);
        assert_eq!(huge.value_indices(304), Some(vec![3, 4]));
        assert_eq!(huge.value_indices(303), None);
        assert_eq!(huge.choice(304).unwrap().label(), "A=3 B=4");
        let choice = listed.choice(10).unwrap();
        assert_eq!(huge.choice(huge.index_of(&choice).unwrap()), Some(choice));
        // Random draws are valid and seeded.
        let mut rng = fastrand::Rng::with_seed(3);
        let draws: Vec<usize> = (0..200)
            .map(|_| huge.random_index(&mut rng).unwrap())
            .collect();
        assert!(draws.iter().all(|&i| huge.contains(i)));
        let mut rng = fastrand::Rng::with_seed(3);
        assert_eq!(huge.random_index(&mut rng), Some(draws[0]));
        // Shards own blocks of the raw product; listed one by one they are the whole space.
        let shard = |index, count| Some(ShardInfo { index, count });
        let mut union = Vec::new();
        for k in 0..8 {
            let mut part = huge.clone();
            if let Err(e) = part.list_shard_within(shard(k, 8), 1000) {
                panic!("{e:#}");
            }
            let indices: Vec<usize> = (0..part.listed_len())
                .map(|p| part.listed_index(p).unwrap())
                .collect();
            assert!(indices.iter().all(|&i| huge.owns(shard(k, 8), i)));
            assert!(
                indices
                    .iter()
                    .all(|&i| !huge.owns(shard((k + 1) % 8, 8), i))
            );
            union.extend(part.choices());
        }
        assert_eq!(union, listed.choices().collect::<Vec<_>>());
        // Brute force needs a shard, and one small enough.
        let err = huge.clone().list_shard_within(None, 1000).unwrap_err();
        assert!(format!("{err:#}").contains("--shard K/N"), "{err:#}");
        let err = huge
            .clone()
            .list_shard_within(shard(0, 2), 1000)
            .unwrap_err();
        assert!(
            format!("{err:#}").contains("shard 0/2 holds more than 1000 valid choices"),
            "{err:#}"
        );
        let wide: Vec<i64> = (0..65_536).collect();
        let p = params(&[
            ("A", &wide),
            ("B", &wide),
            ("C", &wide),
            ("D", &wide),
            ("E", &[1, 2]),
        ]);
        let err = SearchSpace::new(&p, &[]).unwrap_err();
        assert!(err.to_string().contains("more than 2^64"), "{err}");
    }

    #[test]
    fn a_space_of_billions_is_counted_sampled_and_searched_without_listing() {
        // 10^10 raw choices; only the last two params are restricted.
        let ten: Vec<i64> = (0..10).collect();
        let names = ["A", "B", "C", "D", "E", "F", "G", "H", "X", "Y"];
        let spec: Vec<(&str, &[i64])> = names.iter().map(|n| (*n, ten.as_slice())).collect();
        let p = params(&spec);
        let texts = ["X < Y".to_string(), "X + Y != 9".to_string()];
        // Counted through the groups: X and Y walked once, the rest multiplied.
        let mut seen = Vec::new();
        let count = count_space(&p, &texts, &mut |f| seen.push(f)).unwrap();
        assert_eq!(count.raw, 10_000_000_000);
        assert_eq!(count.valid, 40 * 100_000_000);
        assert_eq!(seen.last(), Some(&1.0));
        let space = SearchSpace::from_params(&p, &texts).unwrap();
        assert!(!space.is_listed());
        for name in crate::search::strategies::NAMES
            .iter()
            .filter(|n| **n != "brute-force")
        {
            let mut strategy = crate::search::strategies::by_name(name, 12, 7).unwrap();
            let mut asked = Vec::new();
            loop {
                let batch = strategy.ask(&space, 4);
                if batch.is_empty() {
                    break;
                }
                for &i in &batch {
                    let time_ms = Some(1.0 + (i % 97) as f64);
                    let m = crate::search::replay::Measurement {
                        time_ms,
                        status: tunebox_pool::Status::Ok,
                        cost_ms: 1.0,
                    };
                    strategy.tell(i, &crate::search::replay::result_of(&space, i, m, "cpu"));
                }
                asked.extend(batch);
            }
            assert_eq!(asked.len(), 12, "{name}");
            assert!(asked.iter().all(|&i| space.contains(i)), "{name}");
            let mut distinct = asked.clone();
            distinct.sort_unstable();
            distinct.dedup();
            assert_eq!(distinct.len(), 12, "{name}");
        }
        use crate::search::strategy::Strategy as _;
        let mut brute = crate::search::strategy::BruteForce::new();
        assert!(
            brute.ask(&space, 10).is_empty(),
            "nothing listed without a shard"
        );
    }

    /// Restrictions that prune read only the last params (`P9 == 1`…), and every other param is
    /// linked to them by one that prunes nothing: a walk in manifest order would bind 10^9
    /// prefixes before it could prune; counting by components binds a handful.
    #[test]
    fn a_count_whose_restrictions_bind_late_is_quick() {
        let ten: Vec<i64> = (0..10).collect();
        let names: Vec<String> = (0..12).map(|i| format!("P{i}")).collect();
        let spec: Vec<(&str, &[i64])> = names.iter().map(|n| (n.as_str(), &ten[..])).collect();
        let p = params(&spec);
        let late = ["P9 == 1", "P10 == 1", "P11 == 1"].map(String::from);
        // Each param linked to the last (a star), or each to the next (a chain).
        let star: Vec<String> = (0..11).map(|i| format!("P{i} + P11 >= 0")).collect();
        let chain: Vec<String> = (0..11).map(|i| format!("P{i} <= P{} + 9", i + 1)).collect();
        for links in [star, chain] {
            let texts: Vec<String> = links.iter().chain(&late).cloned().collect();
            // The thread's CPU time: a machine busy with other work (or a paused test) does
            // not count.
            let cpu = tunebox_bench::thread_cpu_ms().unwrap_or(0.0);
            let count = count_space(&p, &texts, &mut |_| {}).unwrap();
            let took_ms = tunebox_bench::thread_cpu_ms().unwrap_or(0.0) - cpu;
            assert_eq!(count.valid, 1_000_000_000, "{texts:?}");
            assert!(took_ms < 1000.0, "{took_ms:.0} ms of CPU for {texts:?}");
        }
    }

    /// A small random space's restrictions, from shapes that link one, two or three params.
    fn random_restriction(shape: u8, a: usize, b: usize, c: usize, k: i64) -> String {
        let [a, b, c] = [a, b, c].map(|i| format!("P{i}"));
        match shape % 6 {
            0 => format!("{a} == {k}"),
            1 => format!("{a} < {b}"),
            2 => format!("{a} + {b} != {k}"),
            3 => format!("{a} * {b} <= {c} + {k}"),
            4 => format!("{a} % 3 == {k} % 3 or {b} > {c}"),
            _ => format!("{a} != {c} and {b} >= {k}"),
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig {
            cases: 200,
            ..proptest::prelude::ProptestConfig::default()
        })]

        /// Counting by components, listing by the walk and filtering the product agree.
        #[test]
        fn counts_agree_with_filtering_the_product(
            values in proptest::collection::vec(proptest::collection::vec(-2i64..5, 1..5), 1..6),
            shapes in proptest::collection::vec(
                (0u8..6, 0usize..6, 0usize..6, 0usize..6, -2i64..5),
                0..6,
            ),
        ) {
            let names: Vec<String> = (0..values.len()).map(|i| format!("P{i}")).collect();
            let spec: Vec<(&str, &[i64])> = names
                .iter()
                .zip(&values)
                .map(|(n, v)| (n.as_str(), v.as_slice()))
                .collect();
            let p = params(&spec);
            let n = values.len();
            let texts: Vec<String> = shapes
                .iter()
                .map(|&(shape, a, b, c, k)| random_restriction(shape, a % n, b % n, c % n, k))
                .collect();
            let parsed: Vec<Restriction> =
                texts.iter().map(|t| Restriction::parse(t, &p).unwrap()).collect();
            let brute = SearchSpace::new(&p, &[])
                .unwrap()
                .choices()
                .filter(|c| {
                    let bound: Vec<PyValue<'_>> = c.values().map(|(_, v)| v.to_python()).collect();
                    parsed.iter().all(|r| r.compiled.eval_bool(&bound).unwrap())
                })
                .count();
            let count = count_space(&p, &texts, &mut |_| {}).unwrap();
            proptest::prop_assert_eq!(count.valid as usize, brute, "{:?} over {:?}", texts, values);
            proptest::prop_assert_eq!(SearchSpace::new(&p, &parsed).unwrap().len(), brute);
        }
    }

    #[test]
    fn a_long_count_tells_its_progress() {
        let hundred: Vec<i64> = (0..100).collect();
        let p = params(&[("A", &hundred), ("B", &hundred), ("C", &hundred)]);
        let mut seen = Vec::new();
        let texts = ["(A + B + C) % 7 != 0".to_string()];
        let count = count_space(&p, &texts, &mut |f| seen.push(f)).unwrap();
        assert_eq!(count.raw, 1_000_000);
        assert!(seen.len() > 5, "{seen:?}");
        assert!(
            seen.is_sorted() && seen[0] > 0.0 && seen[0] < 0.5,
            "{seen:?}"
        );
        assert_eq!(seen.last(), Some(&1.0));
    }

    #[test]
    fn groups_give_what_filtering_the_product_gives() {
        // A and C linked, B free, D and E linked: groups interleave in manifest order.
        let p = params(&[
            ("A", &[1, 2, 3]),
            ("B", &[0, 1]),
            ("C", &[1, 2, 4]),
            ("D", &[0, 5, 9]),
            ("E", &[1, 3]),
        ]);
        let texts = ["C % A == 0", "D > E", "5 > 2"];
        let r: Vec<Restriction> = texts
            .iter()
            .map(|t| Restriction::parse(t, &p).unwrap())
            .collect();
        let space = SearchSpace::new(&p, &r).unwrap();
        let all = SearchSpace::new(&p, &[]).unwrap();
        let expected: Vec<Choice> = all
            .choices()
            .filter(|c| {
                let values: Vec<PyValue<'_>> = c.values().map(|(_, v)| v.to_python()).collect();
                r.iter().all(|r| r.compiled.eval_bool(&values).unwrap())
            })
            .collect();
        assert_eq!(space.choices().collect::<Vec<_>>(), expected);
        let texts: Vec<String> = texts.iter().map(|t| t.to_string()).collect();
        let count = count_space(&p, &texts, &mut |_| {}).unwrap();
        assert_eq!(count.valid as usize, expected.len());
        // A restriction that holds for nothing empties the space.
        let never = [Restriction::parse("1 > 2", &p).unwrap()];
        assert!(SearchSpace::new(&p, &never).unwrap().is_empty());
    }

    #[test]
    fn restrictions_mean_what_python_means() {
        let xs: Vec<i64> = (1..=16).collect();
        let p = params(&[("x", &xs), ("y", &xs)]);
        let count = |text: &str| {
            let r = [Restriction::parse(text, &p).unwrap()];
            SearchSpace::new(&p, &r).unwrap().len()
        };
        // Counts from Python's eval over the same values.
        assert_eq!(count("x == y == 1"), 1);
        assert_eq!(count("x != y != 1"), 225);
        assert_eq!(count("x / 32 >= 0.25"), 144);
        assert_eq!(count("x % y"), 206);
        assert_eq!(count("x in [1, 2, 4] and y not in (3, 5)"), 42);
        assert_eq!(count("x & y == 0"), 80);
        let pow2: Vec<i64> = (0..=10).map(|i| 1 << i).collect();
        let p = params(&[("block_size_x", &pow2), ("block_size_y", &pow2)]);
        let r = [Restriction::parse("32 <= block_size_x * block_size_y <= 1024", &p).unwrap()];
        assert_eq!(SearchSpace::new(&p, &r).unwrap().len(), 51);
    }

    #[test]
    fn pruning_keeps_exactly_what_filtering_the_product_keeps() {
        let p = params(&[
            ("A", &[1, 2, 3, 4]),
            ("B", &[0, 1, 2]),
            ("C", &[2, 4, 8]),
            ("D", &[1, 3]),
        ]);
        let texts = [
            "A > B",
            "C % A == 0 or D == 3",
            "B * D < C",
            "D != A",
            "A + B + C + D > 6",
        ];
        let restrictions: Vec<Restriction> = texts
            .iter()
            .map(|t| Restriction::parse(t, &p).unwrap())
            .collect();
        let space = SearchSpace::new(&p, &restrictions).unwrap();
        // The same by evaluating every restriction on every choice of the full product.
        let all = SearchSpace::new(&p, &[]).unwrap();
        let names: Vec<&str> = p.keys().map(String::as_str).collect();
        let full: Vec<Compiled> = texts
            .iter()
            .map(|t| Expr::parse(t).unwrap().bind(&names).unwrap())
            .collect();
        let expected: Vec<Choice> = all
            .choices()
            .filter(|c| {
                let values: Vec<PyValue<'_>> = c.values().map(|(_, v)| v.to_python()).collect();
                full.iter().all(|r| r.eval_bool(&values).unwrap())
            })
            .collect();
        assert!(!expected.is_empty() && expected.len() < all.len());
        assert_eq!(space.choices().collect::<Vec<_>>(), expected);
        for (i, choice) in expected.iter().enumerate() {
            assert_eq!(space.index_of(choice), Some(i));
            let indices = space.value_indices(i).unwrap();
            assert_eq!(space.index_of_values(&indices), Some(i));
        }
        assert_eq!(
            space.index_of_values(&[0, 0, 0, 0]),
            None,
            "A=1 B=0 breaks `D != A`"
        );
        assert_eq!(space.index_of_values(&[9, 0, 0, 0]), None);
        assert_eq!(space.raw_len(), 72);
    }

    #[test]
    fn kernel_tuner_restrictions_in_python_spelling() {
        let p = params(&[("BM", &[16, 32, 64]), ("BN", &[16, 32])]);
        let r = [Restriction::parse("BM >= BN and not BM == 64", &p).unwrap()];
        let labels: Vec<String> = choices(&p, &r).unwrap().iter().map(Choice::label).collect();
        assert_eq!(labels, ["BM=16 BN=16", "BM=32 BN=16", "BM=32 BN=32"]);
    }

    #[test]
    fn choices_round_trip_through_json_and_print_as_toml() {
        let choice = Choice::new(IndexMap::from([
            ("A".to_string(), ParamValue::Int(1)),
            ("F".to_string(), ParamValue::Float(2.0)),
            ("B".to_string(), ParamValue::Bool(true)),
            ("T".to_string(), ParamValue::Str("f".into())),
        ]));
        let json = serde_json::to_string(&choice).unwrap();
        assert_eq!(serde_json::from_str::<Choice>(&json).unwrap(), choice);
        assert_eq!(choice.toml(), "{ A = 1, F = 2.0, B = true, T = \"f\" }");
    }

    #[test]
    fn define_texts() {
        assert_eq!(ParamValue::Int(-3).define_text(), "-3");
        assert_eq!(ParamValue::Float(0.5).define_text(), "0.5");
        assert_eq!(ParamValue::Float(2.0).define_text(), "2.0");
        assert_eq!(ParamValue::Bool(true).define_text(), "1");
        assert_eq!(ParamValue::Str("float4".into()).define_text(), "float4");
        assert_eq!(
            serde_json::to_string(&Choice::new(IndexMap::from([
                ("A".to_string(), ParamValue::Int(1)),
                ("T".to_string(), ParamValue::Str("f".into())),
            ])))
            .unwrap(),
            r#"{"A":1,"T":"f"}"#
        );
    }
}
