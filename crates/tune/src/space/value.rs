//! A parameter's value as a manifest writes it, and its meanings: a compiler define, a Python
//! value for expressions, TOML.

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use tunebox_expr::Value as PyValue;

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
    pub(crate) fn define_text(&self) -> String {
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
