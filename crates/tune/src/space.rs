//! The search space: parameter values, choices, restrictions.
//!
//! Restrictions are Python expressions with Python's meaning, in every manifest (native, Kernel
//! Tuner-style, T1): `tunebox-expr` parses each once and binds its names to parameter positions.
//! The valid choices are found as a constraint solver would: depth first over the parameters in
//! manifest order, checking each restriction as soon as the last parameter it reads is bound,
//! so that a partial choice that breaks one is never extended. A space holds only the rank of
//! each valid choice (8 bytes); a [`Choice`] is built when asked for.

use anyhow::{Context, Result, bail, ensure};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use tunebox_expr::{Compiled, Expr, Value as PyValue};
use tunebox_protocol::Define;

/// Most valid choices a space may hold (8 bytes each: 400 MB at most).
const MAX_VALID: usize = 50_000_000;

/// One value of a parameter, as written in the manifest (and in reports: a JSON number, boolean
/// or string).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ParamValue {
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A boolean (defined as 1 or 0).
    Bool(bool),
    /// A string (defined verbatim).
    Str(String),
}

impl ParamValue {
    pub(crate) fn from_toml(value: &toml::Value) -> Result<ParamValue> {
        Ok(match value {
            toml::Value::Integer(i) => ParamValue::Int(*i),
            toml::Value::Float(f) => ParamValue::Float(*f),
            toml::Value::Boolean(b) => ParamValue::Bool(*b),
            toml::Value::String(s) => ParamValue::Str(s.clone()),
            other => bail!(
                "{other} is a {}; a parameter value must be an integer, float, boolean or string",
                other.type_str()
            ),
        })
    }

    /// The text of the `-DNAME=VALUE` define: integers and floats as written, booleans as 1
    /// or 0, strings verbatim.
    pub fn define_text(&self) -> String {
        match self {
            ParamValue::Int(i) => i.to_string(),
            ParamValue::Float(f) => format!("{f:?}"),
            ParamValue::Bool(b) => u8::from(*b).to_string(),
            ParamValue::Str(s) => s.clone(),
        }
    }

    /// The value as a Python value for restrictions, metrics and launch geometry, borrowing
    /// strings.
    pub(crate) fn to_python(&self) -> PyValue<'_> {
        match self {
            ParamValue::Int(i) => PyValue::Int(*i),
            ParamValue::Float(f) => PyValue::Float(*f),
            ParamValue::Bool(b) => PyValue::Bool(*b),
            ParamValue::Str(s) => PyValue::Str(s),
        }
    }
}

impl std::fmt::Display for ParamValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParamValue::Bool(b) => write!(f, "{b}"),
            other => f.write_str(&other.define_text()),
        }
    }
}

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
    pub fn defines(&self) -> Vec<Define> {
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

/// A restriction: a Python expression over the params that a choice must satisfy (as a Python
/// `if` would read it: any truthy value keeps the choice), such as `32 <= BX * BY <= 1024`.
#[derive(Debug)]
pub(crate) struct Restriction {
    compiled: Compiled,
    /// The position of the last param it reads: it can be checked once params `0..=last` are
    /// bound (0 for a restriction that reads none).
    last: usize,
}

impl Restriction {
    /// Parses `text` and binds its names to the params' positions.
    ///
    /// # Errors
    ///
    /// A parse error (the column, and what was expected there), or a name that is not a param
    /// (naming the params).
    pub(crate) fn parse(text: &str, params: &IndexMap<String, Vec<ParamValue>>) -> Result<Self> {
        let expr = Expr::parse(text).map_err(|e| anyhow::anyhow!("{e}"))?;
        let names: Vec<&str> = params.keys().map(String::as_str).collect();
        if let Some(unknown) = expr.variables().iter().find(|v| !params.contains_key(*v)) {
            bail!(
                "{text:?}: `{unknown}` is not a param (params: {})",
                names.join(", ")
            );
        }
        let compiled = expr.bind(&names).map_err(|e| anyhow::anyhow!("{e}"))?;
        let last = compiled.slots().iter().copied().max().unwrap_or(0);
        Ok(Restriction { compiled, last })
    }
}

/// Calls `visit` with the value indices of every choice that satisfies every restriction, in
/// canonical order (the first parameter varying slowest). One empty choice when there are no
/// parameters. Each restriction is checked as soon as its last parameter is bound.
///
/// # Errors
///
/// A restriction that raises (as Python would: division by zero, a type error, …), naming it
/// and the values bound so far.
fn each_valid(
    params: &IndexMap<String, Vec<ParamValue>>,
    restrictions: &[Restriction],
    mut visit: impl FnMut(&[usize]) -> Result<()>,
) -> Result<()> {
    let values: Vec<Vec<PyValue<'_>>> = params
        .values()
        .map(|vs| vs.iter().map(ParamValue::to_python).collect())
        .collect();
    let n = values.len();
    if n == 0 {
        for (i, r) in restrictions.iter().enumerate() {
            let keep = r
                .compiled
                .eval_bool(&[])
                .with_context(|| format!("restrictions[{i}]"))?;
            if !keep {
                return Ok(());
            }
        }
        return visit(&[]);
    }
    if values.iter().any(Vec::is_empty) {
        return Ok(());
    }
    // The restrictions to check once position `d` is bound, with their manifest index.
    let mut at: Vec<Vec<(usize, &Restriction)>> = vec![Vec::new(); n];
    for (i, r) in restrictions.iter().enumerate() {
        at[r.last].push((i, r));
    }
    let mut index = vec![0usize; n];
    let mut bound: Vec<PyValue<'_>> = values.iter().map(|v| v[0]).collect();
    let names: Vec<&String> = params.keys().collect();
    let mut depth = 0;
    loop {
        bound[depth] = values[depth][index[depth]];
        let mut keep = true;
        for &(i, r) in &at[depth] {
            let ok = r.compiled.eval_bool(&bound).with_context(|| {
                let partial: Vec<String> = (0..=depth)
                    .map(|d| format!("{}={}", names[d], params[names[d]][index[d]]))
                    .collect();
                format!("restrictions[{i}] for the choice {}", partial.join(" "))
            })?;
            if !ok {
                keep = false;
                break;
            }
        }
        if keep && depth + 1 < n {
            depth += 1;
            index[depth] = 0;
            continue;
        }
        if keep {
            visit(&index)?;
        }
        // Next value at this depth, backtracking past exhausted positions.
        loop {
            index[depth] += 1;
            if index[depth] < values[depth].len() {
                break;
            }
            if depth == 0 {
                return Ok(());
            }
            depth -= 1;
        }
    }
}

/// The mixed-radix rank of value indices `index` over `radix` (the first position most
/// significant): canonical order is rank order.
fn rank_of(index: &[usize], radix: &[u64]) -> u64 {
    index
        .iter()
        .zip(radix)
        .fold(0u64, |rank, (&i, &r)| rank * r + i as u64)
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
#[derive(Debug, Clone)]
pub struct SearchSpace {
    params: IndexMap<String, Vec<ParamValue>>,
    /// How many values each param has.
    radix: Vec<u64>,
    /// The rank of every valid choice, ascending (canonical order).
    ranks: Vec<u64>,
}

impl SearchSpace {
    /// The space of `params` under `restrictions`.
    ///
    /// # Errors
    ///
    /// A restriction that raises for some choice (naming it and the choice), a space whose
    /// product of value counts does not fit in 64 bits, or more than 50 million valid choices.
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
    /// raises for some choice; a space too large (see [`SearchSpace`]).
    pub fn from_params(
        params: &IndexMap<String, Vec<ParamValue>>,
        restrictions: &[String],
    ) -> crate::Result<SearchSpace> {
        let build = || {
            let parsed = restrictions
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    Restriction::parse(r, params).with_context(|| format!("restrictions[{i}]"))
                })
                .collect::<Result<Vec<_>>>()?;
            SearchSpace::new(params, &parsed)
        };
        build().map_err(crate::TuneError::manifest)
    }

    /// [`SearchSpace::new`] with at most `max_valid` valid choices.
    fn with_limit(
        params: &IndexMap<String, Vec<ParamValue>>,
        restrictions: &[Restriction],
        max_valid: usize,
    ) -> Result<SearchSpace> {
        let radix: Vec<u64> = params.values().map(|v| v.len() as u64).collect();
        let raw = radix.iter().try_fold(1u64, |n, &r| n.checked_mul(r));
        ensure!(
            raw.is_some(),
            "the space has more than 2^64 choices before restrictions; remove values or split \
             the run"
        );
        let mut ranks = Vec::new();
        each_valid(params, restrictions, |index| {
            ensure!(
                ranks.len() < max_valid,
                "more than {max_valid} choices satisfy the restrictions; at most {max_valid} are \
                 supported (restrict the space further, or split the run)"
            );
            ranks.push(rank_of(index, &radix));
            Ok(())
        })?;
        Ok(SearchSpace {
            params: params.clone(),
            radix,
            ranks,
        })
    }

    /// The parameters' names and values, in the manifest's order.
    pub fn params(&self) -> impl Iterator<Item = (&str, &[ParamValue])> {
        self.params.iter().map(|(k, v)| (k.as_str(), v.as_slice()))
    }

    /// The number of valid choices.
    pub fn len(&self) -> usize {
        self.ranks.len()
    }

    /// Whether no choice satisfies the restrictions.
    pub fn is_empty(&self) -> bool {
        self.ranks.is_empty()
    }

    /// The number of choices before restrictions (the product of the value counts).
    pub fn raw_len(&self) -> u64 {
        self.radix.iter().product()
    }

    /// The value indices of the choice with stable index `index`, one per param, if there is
    /// one.
    pub fn value_indices(&self, index: usize) -> Option<Vec<usize>> {
        let mut rank = *self.ranks.get(index)?;
        let mut out = vec![0usize; self.radix.len()];
        for (slot, &r) in out.iter_mut().zip(&self.radix).rev() {
            *slot = (rank % r) as usize;
            rank /= r;
        }
        Some(out)
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

    /// Every valid choice, in index order, built one at a time.
    pub fn choices(&self) -> impl ExactSizeIterator<Item = Choice> + '_ {
        (0..self.len()).map(|i| self.choice(i).expect("an index below len"))
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
    pub fn index_of_values(&self, indices: &[usize]) -> Option<usize> {
        if indices.len() != self.radix.len()
            || indices
                .iter()
                .zip(&self.radix)
                .any(|(&i, &r)| i as u64 >= r)
        {
            return None;
        }
        self.ranks
            .binary_search(&rank_of(indices, &self.radix))
            .ok()
    }

    /// Keeps only the choices `keep` accepts, in order (the stable indices of those after a
    /// removed one move down), and returns how many were removed: for limits known only with
    /// the device, as Kernel Tuner drops blocks of more threads than the GPU allows when it
    /// builds its space.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&Choice) -> bool) -> usize {
        let kept: Vec<u64> = (0..self.len())
            .filter(|&i| keep(&self.choice(i).expect("an index below len")))
            .map(|i| self.ranks[i])
            .collect();
        let removed = self.ranks.len() - kept.len();
        self.ranks = kept;
        removed
    }

    /// Whether `choice` is a valid choice of this space (see [`SearchSpace::index_of`]).
    pub fn is_valid(&self, choice: &Choice) -> bool {
        self.index_of(choice).is_some()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

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
    fn spaces_too_large_are_refused_with_what_to_do() {
        let values: Vec<i64> = (0..100).collect();
        let p = params(&[("A", &values), ("B", &values)]);
        let err = SearchSpace::with_limit(&p, &[], 1000).unwrap_err();
        assert!(
            err.to_string().contains("more than 1000 choices satisfy"),
            "{err}"
        );
        let r = [Restriction::parse("A < 5", &p).unwrap()];
        assert_eq!(SearchSpace::with_limit(&p, &r, 1000).unwrap().len(), 500);
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
