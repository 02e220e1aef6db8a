//! The search space: parameter values, choices, restrictions.

use anyhow::{Context, Result, bail, ensure};
use evalexpr::{ContextWithMutableVariables, DefaultNumericTypes, HashMapContext, Node, Value};
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use tunebox_protocol::Define;

/// Most choices a space may have before restrictions are applied.
const MAX_SPACE: u128 = 10_000_000;

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

    fn to_eval(&self) -> Value<DefaultNumericTypes> {
        match self {
            ParamValue::Int(i) => Value::Int(*i),
            ParamValue::Float(f) => Value::Float(*f),
            ParamValue::Bool(b) => Value::Boolean(*b),
            ParamValue::Str(s) => Value::String(s.clone()),
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

    /// An expression context with every parameter bound to its value here.
    ///
    /// # Errors
    ///
    /// A value evalexpr cannot hold (none today).
    pub(crate) fn context(&self) -> Result<HashMapContext<DefaultNumericTypes>> {
        let mut context = HashMapContext::<DefaultNumericTypes>::new();
        for (name, value) in &self.0 {
            bind(&mut context, name, value)?;
        }
        Ok(context)
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

/// Rewrites the Python spellings Kernel Tuner's restrictions use into evalexpr's: `and`, `or`,
/// `not` (with Python's precedence: `not A == B` negates the comparison), `True`, `False`, `**`
/// and `//`, outside string literals. Other text is kept as is.
pub(crate) fn from_python(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut chars = text.chars().peekable();
    // Parenthesis depth, and the depth of every `not` whose operand is still open.
    let mut depth = 0usize;
    let mut open_nots: Vec<usize> = Vec::new();
    let close = |out: &mut String, open_nots: &mut Vec<usize>, depth: usize| {
        while open_nots.last() == Some(&depth) {
            open_nots.pop();
            out.push(')');
        }
    };
    while let Some(c) = chars.next() {
        match c {
            // A string literal, single- or double-quoted, is copied double-quoted, unchanged.
            '"' | '\'' => {
                out.push('"');
                while let Some(d) = chars.next() {
                    if d == c {
                        break;
                    }
                    out.push(d);
                    if d == '\\'
                        && let Some(escaped) = chars.next()
                    {
                        out.push(escaped);
                    }
                }
                out.push('"');
            }
            '(' => {
                depth += 1;
                out.push('(');
            }
            ')' => {
                close(&mut out, &mut open_nots, depth);
                depth = depth.saturating_sub(1);
                out.push(')');
            }
            ',' => {
                close(&mut out, &mut open_nots, depth);
                out.push(',');
            }
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                out.push('^');
            }
            '/' if chars.peek() == Some(&'/') => {
                chars.next();
                out.push('/');
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let mut word = String::from(c);
                while let Some(&d) = chars.peek() {
                    if !(d.is_ascii_alphanumeric() || d == '_') {
                        break;
                    }
                    word.push(d);
                    chars.next();
                }
                match word.as_str() {
                    "and" | "or" => {
                        // Trim the space before the operator so that a closing `)` hugs its
                        // operand; the space is put back after it.
                        let trimmed = out.trim_end().len();
                        let gap = out.split_off(trimmed);
                        close(&mut out, &mut open_nots, depth);
                        out.push_str(&gap);
                        out.push_str(if word == "and" { "&&" } else { "||" });
                    }
                    "not" => {
                        while chars.peek().is_some_and(|d| d.is_whitespace()) {
                            chars.next();
                        }
                        out.push_str("!(");
                        open_nots.push(depth);
                    }
                    "True" => out.push_str("true"),
                    "False" => out.push_str("false"),
                    other => out.push_str(other),
                }
            }
            c => out.push(c),
        }
    }
    while open_nots.pop().is_some() {
        out.push(')');
    }
    out
}

/// A boolean expression over parameters that a choice must satisfy (`BM * BN <= 4096`).
#[derive(Debug)]
pub(crate) struct Restriction {
    text: String,
    node: Node<DefaultNumericTypes>,
}

impl Restriction {
    /// Parses `text`, checking that every name it uses is a parameter and that it evaluates to
    /// a boolean for the first value of every parameter (evalexpr accepts some incomplete
    /// expressions, such as `A <`, until they are evaluated).
    pub(crate) fn parse(text: &str, params: &IndexMap<String, Vec<ParamValue>>) -> Result<Self> {
        let node = evalexpr::build_operator_tree::<DefaultNumericTypes>(&from_python(text))
            .map_err(|e| anyhow::anyhow!("{text:?} does not parse: {e}"))?;
        for name in node.iter_variable_identifiers() {
            ensure!(
                params.contains_key(name),
                "{text:?}: `{name}` is not a param (params: {})",
                params.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        let restriction = Restriction {
            text: text.to_owned(),
            node,
        };
        let mut context = HashMapContext::<DefaultNumericTypes>::new();
        for (name, values) in params {
            if let Some(first) = values.first() {
                bind(&mut context, name, first)?;
            }
        }
        restriction.allows(&context)?;
        Ok(restriction)
    }

    /// Whether `choice` satisfies the restriction.
    fn allows(&self, context: &HashMapContext<DefaultNumericTypes>) -> Result<bool> {
        self.node
            .eval_boolean_with_context(context)
            .with_context(|| {
                format!(
                    "restriction {:?} is not a boolean expression here",
                    self.text
                )
            })
    }
}

/// Every choice of the space (the cartesian product of the parameters' values, the first
/// parameter varying slowest) that satisfies every restriction. One empty choice when there are
/// no parameters.
pub(crate) fn choices(
    params: &IndexMap<String, Vec<ParamValue>>,
    restrictions: &[Restriction],
) -> Result<Vec<Choice>> {
    let size = params
        .values()
        .map(|v| v.len() as u128)
        .try_fold(1u128, u128::checked_mul)
        .unwrap_or(u128::MAX);
    ensure!(
        size <= MAX_SPACE,
        "the space has {size} choices before restrictions; at most {MAX_SPACE} are supported \
         (remove values or split the run)"
    );
    let names: Vec<&String> = params.keys().collect();
    let mut out = Vec::new();
    let mut index = vec![0usize; names.len()];
    'space: loop {
        let values: IndexMap<String, ParamValue> = names
            .iter()
            .zip(&index)
            .map(|(name, &i)| ((*name).clone(), params[*name][i].clone()))
            .collect();
        // A fresh context per choice: evalexpr keeps a variable's first type, and a param may
        // mix integers, floats, booleans and strings.
        let mut context = HashMapContext::<DefaultNumericTypes>::new();
        for (name, value) in &values {
            bind(&mut context, name, value)?;
        }
        let mut allowed = true;
        for (i, restriction) in restrictions.iter().enumerate() {
            let choice = Choice(values.clone());
            if !restriction
                .allows(&context)
                .with_context(|| format!("restrictions[{i}] for the choice {}", choice.label()))?
            {
                allowed = false;
                break;
            }
        }
        if allowed {
            out.push(Choice(values));
        }
        // Odometer increment, last parameter fastest.
        for position in (0..names.len()).rev() {
            index[position] += 1;
            if index[position] < params[names[position]].len() {
                continue 'space;
            }
            index[position] = 0;
        }
        break;
    }
    Ok(out)
}

/// The space a strategy searches: the parameters and their values, and every choice that
/// satisfies the restrictions, each with its stable index (its position in canonical order,
/// the first parameter varying slowest). Indices are what strategies ask for, what the results
/// cache and shards key on, and what reports call `index`.
#[derive(Debug, Clone)]
pub struct SearchSpace {
    params: IndexMap<String, Vec<ParamValue>>,
    choices: Vec<Choice>,
    /// Index of each choice by its label, built on first use.
    by_label: std::sync::OnceLock<std::collections::HashMap<String, usize>>,
}

impl SearchSpace {
    /// The space of `params` under `restrictions`.
    pub(crate) fn new(
        params: &IndexMap<String, Vec<ParamValue>>,
        restrictions: &[Restriction],
    ) -> Result<SearchSpace> {
        Ok(SearchSpace::from_choices(
            params.clone(),
            choices(params, restrictions)?,
        ))
    }

    /// A space of these choices (valid ones, in canonical order).
    pub(crate) fn from_choices(
        params: IndexMap<String, Vec<ParamValue>>,
        choices: Vec<Choice>,
    ) -> SearchSpace {
        SearchSpace {
            params,
            choices,
            by_label: std::sync::OnceLock::new(),
        }
    }

    /// The parameters' names and values, in the manifest's order.
    pub fn params(&self) -> impl Iterator<Item = (&str, &[ParamValue])> {
        self.params.iter().map(|(k, v)| (k.as_str(), v.as_slice()))
    }

    /// The number of valid choices.
    pub fn len(&self) -> usize {
        self.choices.len()
    }

    /// Whether no choice satisfies the restrictions.
    pub fn is_empty(&self) -> bool {
        self.choices.is_empty()
    }

    /// The choice with stable index `index`, if there is one.
    pub fn choice(&self, index: usize) -> Option<&Choice> {
        self.choices.get(index)
    }

    /// Every valid choice, in index order.
    pub fn choices(&self) -> &[Choice] {
        &self.choices
    }

    /// The stable index of `choice`; `None` when it breaks a restriction or holds a value that
    /// is not one of its parameter's (a strategy that builds choices of its own, such as a
    /// genetic algorithm's offspring, checks them with this).
    pub fn index_of(&self, choice: &Choice) -> Option<usize> {
        self.by_label
            .get_or_init(|| {
                self.choices
                    .iter()
                    .enumerate()
                    .map(|(i, c)| (c.label(), i))
                    .collect()
            })
            .get(&choice.label())
            .copied()
            // Labels of values of different types may coincide (`T=1`): compare the values.
            .filter(|&i| self.choices[i] == *choice)
    }

    /// Whether `choice` is a valid choice of this space (see [`SearchSpace::index_of`]).
    pub fn is_valid(&self, choice: &Choice) -> bool {
        self.index_of(choice).is_some()
    }
}

fn bind(
    context: &mut HashMapContext<DefaultNumericTypes>,
    name: &str,
    value: &ParamValue,
) -> Result<()> {
    context
        .set_value(name.to_owned(), value.to_eval())
        .map_err(|e| anyhow::anyhow!("cannot bind {name}: {e}"))
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
            Restriction::parse("BM >= BN && BM % 16 == 0", &p).unwrap(),
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
        for text in ["A + 1", "A <", "A == \"x\" + 1.5"] {
            let err = Restriction::parse(text, &p).unwrap_err();
            assert!(
                format!("{err:#}").contains("not a boolean"),
                "{text}: {err:#}"
            );
        }
    }

    #[test]
    fn huge_spaces_are_refused_before_enumeration() {
        let values: Vec<i64> = (0..100).collect();
        let p = params(&[
            ("A", &values),
            ("B", &values),
            ("C", &values),
            ("D", &values),
        ]);
        let err = choices(&p, &[]).unwrap_err();
        assert!(err.to_string().contains("100000000 choices"), "{err}");
    }

    #[test]
    fn kernel_tuner_restrictions_in_python_spelling() {
        assert_eq!(
            from_python("A * B <= 8 and not (A == 2 or B ** 2 > 4) and 'x' != \"and\""),
            "A * B <= 8 && !((A == 2 || B ^ 2 > 4)) && \"x\" != \"and\""
        );
        assert_eq!(
            from_python("not A == 1 or B // 2 > 1"),
            "!(A == 1) || B / 2 > 1"
        );
        assert_eq!(from_python("f(not A, B)"), "f(!(A), B)");
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
