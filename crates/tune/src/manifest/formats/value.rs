//! [`ParamValue`] as the formats need it: Python's `repr` and `str`, numbers, JSON.

#[cfg(test)]
use serde_json::Value;

use super::json::{J, Node, Res};
use crate::space::ParamValue;

impl ParamValue {
    /// The value as Python's `repr` writes it: `16`, `0.5`, `1e-07`, `True`, `'text'`.
    ///
    /// This is how the value looks in a Python expression (a T1 `Values` list, a restriction).
    pub(crate) fn repr(&self) -> String {
        match self {
            ParamValue::Str(s) => python_str_repr(s),
            other => other.python_str(),
        }
    }

    /// The value as Python's `str` writes it: like [`ParamValue::repr`], but strings bare.
    ///
    /// Kernel Tuner joins these with commas into a cache key (`"16,1,True,abc"`).
    pub(crate) fn python_str(&self) -> String {
        match self {
            ParamValue::Int(i) => i.to_string(),
            ParamValue::Float(f) => python_float_repr(*f),
            ParamValue::Bool(true) => "True".to_owned(),
            ParamValue::Bool(false) => "False".to_owned(),
            ParamValue::Str(s) => s.clone(),
        }
    }

    /// The value as a number: ints and floats as themselves, booleans as 1 and 0, strings
    /// `None` (no parsing).
    #[cfg(test)]
    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self {
            ParamValue::Int(i) => Some(*i as f64),
            ParamValue::Float(f) => Some(*f),
            ParamValue::Bool(b) => Some(f64::from(u8::from(*b))),
            ParamValue::Str(_) => None,
        }
    }

    /// The value as JSON: a number, boolean or string.
    #[cfg(test)]
    pub(crate) fn to_json(&self) -> Value {
        to_j(self).to_value()
    }
}

pub(crate) fn to_j(v: &ParamValue) -> J {
    match v {
        ParamValue::Int(i) => J::Int(*i),
        ParamValue::Float(f) => J::Float(*f),
        ParamValue::Bool(b) => J::Bool(*b),
        ParamValue::Str(s) => J::Str(s.clone()),
    }
}

/// A JSON number, boolean or string as a [`ParamValue`]; integers stay `Int`.
pub(crate) fn param_from_json(node: &Node<'_, '_>) -> Res<ParamValue> {
    Ok(match node.v {
        J::Bool(b) => ParamValue::Bool(*b),
        J::Str(s) => ParamValue::Str(s.clone()),
        J::Int(i) => ParamValue::Int(*i),
        J::Float(f) => ParamValue::Float(*f),
        other => {
            return Err(node.problem(format!(
                "expected a parameter value (number, boolean or string), found {}",
                super::json::type_name(other)
            )));
        }
    })
}

/// Python's `repr(float)`: shortest round-trip digits, exponent form below 1e-4 and from 1e16.
fn python_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "nan".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "inf" } else { "-inf" }.to_owned();
    }
    let abs = f.abs();
    if abs == 0.0 || (1e-4..1e16).contains(&abs) {
        let s = format!("{f}");
        if s.contains('.') { s } else { s + ".0" }
    } else {
        // Rust: `1e-7`, `1.5e20`; Python: `1e-07`, `1.5e+20`.
        let s = format!("{f:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let (sign, digits) = match exp.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exp),
        };
        format!("{mantissa}e{sign}{digits:0>2}")
    }
}

/// Python's `repr(str)`: single quotes unless the text has one and no double quote.
fn python_str_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repr_is_pythons() {
        let f = |x| ParamValue::Float(x).repr();
        assert_eq!(f(1.0), "1.0");
        assert_eq!(f(0.1), "0.1");
        assert_eq!(f(-2.5), "-2.5");
        assert_eq!(f(1e-7), "1e-07");
        assert_eq!(f(0.0001), "0.0001");
        assert_eq!(f(1.5e20), "1.5e+20");
        assert_eq!(f(1e16), "1e+16");
        assert_eq!(f(123456789012345.0), "123456789012345.0");
        assert_eq!(f(f64::INFINITY), "inf");
        assert_eq!(ParamValue::Int(-3).repr(), "-3");
        assert_eq!(ParamValue::Bool(true).repr(), "True");
        assert_eq!(ParamValue::Str("ab".into()).repr(), "'ab'");
        assert_eq!(ParamValue::Str("it's".into()).repr(), "\"it's\"");
        assert_eq!(ParamValue::Str("a'\"b".into()).repr(), r#"'a\'"b'"#);
        assert_eq!(ParamValue::Str("ab".into()).python_str(), "ab");
        assert_eq!(ParamValue::Bool(false).python_str(), "False");
    }

    #[test]
    fn as_f64_and_json() {
        assert_eq!(ParamValue::Bool(true).as_f64(), Some(1.0));
        assert_eq!(ParamValue::Int(7).as_f64(), Some(7.0));
        assert_eq!(ParamValue::Str("7".into()).as_f64(), None);
        let v: J = serde_json::from_str(r#"[3, 2.5, true, "x", null]"#).unwrap();
        let root = Node::root(&v);
        let got: Vec<_> = root.items().unwrap().map(|n| param_from_json(&n)).collect();
        assert_eq!(got[0].as_ref().unwrap(), &ParamValue::Int(3));
        assert_eq!(got[1].as_ref().unwrap(), &ParamValue::Float(2.5));
        assert_eq!(got[2].as_ref().unwrap(), &ParamValue::Bool(true));
        assert_eq!(got[3].as_ref().unwrap().to_json(), serde_json::json!("x"));
        assert_eq!(got[4].as_ref().unwrap_err().field, "$[4]");
    }
}
