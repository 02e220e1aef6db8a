//! Reading JSON (plain or gzip) and walking it with field paths for error messages.

use std::fmt::Write as _;
use std::io::Read as _;
use std::path::Path;

use serde_json::Value;

use super::FormatError;

/// A bad field, before the file is known: its JSON path and what is wrong.
#[derive(Debug)]
pub(crate) struct Problem {
    pub(crate) field: String,
    pub(crate) problem: String,
}

impl Problem {
    /// The [`FormatError`] for this problem in `path`.
    pub(crate) fn in_file(self, path: &Path) -> FormatError {
        FormatError::Field {
            path: path.to_path_buf(),
            field: self.field,
            problem: self.problem,
        }
    }
}

pub(crate) type Res<T> = Result<T, Problem>;

/// A JSON document that keeps its objects' member order (serde_json's `Value` sorts keys
/// unless its `preserve_order` feature is on, and Kernel Tuner's cache order is the order of
/// measurement, T4's configuration order the parameters' order).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum J {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl J {
    /// The member `key` of an object (the last one, as serde_json keeps, if repeated).
    fn member(&self, key: &str) -> Option<&J> {
        match self {
            J::Obj(members) => members.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self {
            J::Int(i) => Some(*i as f64),
            J::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// As a serde_json value (nested objects then sort their keys).
    pub(crate) fn to_value(&self) -> Value {
        match self {
            J::Null => Value::Null,
            J::Bool(b) => Value::Bool(*b),
            J::Int(i) => Value::from(*i),
            J::Float(f) => Value::from(*f),
            J::Str(s) => Value::String(s.clone()),
            J::Arr(a) => Value::Array(a.iter().map(J::to_value).collect()),
            J::Obj(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), v.to_value())).collect()),
        }
    }

    pub(crate) fn from_value(v: &Value) -> J {
        match v {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Number(n) => match n.as_i64() {
                Some(i) => J::Int(i),
                None => J::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::String(s) => J::Str(s.clone()),
            Value::Array(a) => J::Arr(a.iter().map(J::from_value).collect()),
            Value::Object(m) => J::Obj(
                m.iter()
                    .map(|(k, v)| (k.clone(), J::from_value(v)))
                    .collect(),
            ),
        }
    }

    /// An object from `(key, value)` pairs, in that order.
    pub(crate) fn obj<K: Into<String>>(members: impl IntoIterator<Item = (K, J)>) -> J {
        J::Obj(members.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }
}

impl<'de> serde::Deserialize<'de> for J {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<J, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = J;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_unit<E>(self) -> Result<J, E> {
                Ok(J::Null)
            }
            fn visit_none<E>(self) -> Result<J, E> {
                Ok(J::Null)
            }
            fn visit_bool<E>(self, b: bool) -> Result<J, E> {
                Ok(J::Bool(b))
            }
            fn visit_i64<E>(self, i: i64) -> Result<J, E> {
                Ok(J::Int(i))
            }
            fn visit_u64<E>(self, u: u64) -> Result<J, E> {
                Ok(i64::try_from(u).map_or(J::Float(u as f64), J::Int))
            }
            fn visit_f64<E>(self, f: f64) -> Result<J, E> {
                Ok(J::Float(f))
            }
            fn visit_str<E>(self, s: &str) -> Result<J, E> {
                Ok(J::Str(s.to_owned()))
            }
            fn visit_string<E>(self, s: String) -> Result<J, E> {
                Ok(J::Str(s))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<J, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(v) = seq.next_element()? {
                    out.push(v);
                }
                Ok(J::Arr(out))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<J, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some((k, v)) = map.next_entry::<String, J>()? {
                    out.push((k, v));
                }
                Ok(J::Obj(out))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl serde::Serialize for J {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            J::Null => s.serialize_unit(),
            J::Bool(b) => s.serialize_bool(*b),
            J::Int(i) => s.serialize_i64(*i),
            J::Float(f) => s.serialize_f64(*f),
            J::Str(v) => s.serialize_str(v),
            J::Arr(a) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for v in a {
                    seq.serialize_element(v)?;
                }
                seq.end()
            }
            J::Obj(m) => {
                let mut map = s.serialize_map(Some(m.len()))?;
                for (k, v) in m {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

/// Reads `path` as JSON, gunzipping it first when it starts with the gzip magic bytes (so
/// `.json.gz` and a gzipped file without the suffix both work).
pub(crate) fn read_json(path: &Path) -> Result<J, FormatError> {
    let bytes = read_bytes(path)?;
    serde_json::from_slice(&bytes).map_err(|e| FormatError::Syntax {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// The bytes of `path`, gunzipped when they start with the gzip magic bytes.
pub(crate) fn read_bytes(path: &Path) -> Result<Vec<u8>, FormatError> {
    let raw = std::fs::read(path).map_err(|source| FormatError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if !raw.starts_with(&[0x1f, 0x8b]) {
        return Ok(raw);
    }
    let mut out = Vec::with_capacity(raw.len() * 8);
    flate2::read::MultiGzDecoder::new(&raw[..])
        .read_to_end(&mut out)
        .map_err(|source| FormatError::Gzip {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(out)
}

/// Writes `doc` as pretty JSON to `path`, objects in their order.
pub(crate) fn write_json(path: &Path, doc: &J) -> Result<(), FormatError> {
    let werr = |source| FormatError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut text = serde_json::to_vec_pretty(doc).map_err(|e| werr(std::io::Error::other(e)))?;
    text.push(b'\n');
    crate::base::whole_file::write(path, &text).map_err(werr)
}

/// The name of a JSON value's type, for messages.
pub(crate) fn type_name(v: &J) -> &'static str {
    match v {
        J::Null => "null",
        J::Bool(_) => "a boolean",
        J::Float(_) => "a float",
        J::Int(_) => "an integer",
        J::Str(_) => "a string",
        J::Arr(_) => "an array",
        J::Obj(_) => "an object",
    }
}

#[derive(Debug, Clone, Copy)]
enum Seg<'a> {
    Root,
    Key(&'a str),
    Index(usize),
}

/// A JSON value and where it sits in the document. The path is built only for an error.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Node<'a, 'p> {
    pub(crate) v: &'a J,
    parent: Option<&'p Node<'a, 'p>>,
    seg: Seg<'a>,
}

impl<'a, 'p> Node<'a, 'p> {
    pub(crate) fn root(v: &'a J) -> Self {
        Node {
            v,
            parent: None,
            seg: Seg::Root,
        }
    }

    /// The JSON path of this node: `$.a.b[3]["x,y"]`.
    pub(crate) fn path(&self) -> String {
        let mut segs = Vec::new();
        let mut n = Some(self);
        while let Some(node) = n {
            segs.push(node.seg);
            n = node.parent;
        }
        let mut out = String::new();
        for seg in segs.iter().rev() {
            match seg {
                Seg::Root => out.push('$'),
                Seg::Key(k) if is_identifier(k) => {
                    out.push('.');
                    out.push_str(k);
                }
                Seg::Key(k) => {
                    let _ = write!(out, "[{}]", Value::String((*k).to_owned()));
                }
                Seg::Index(i) => {
                    let _ = write!(out, "[{i}]");
                }
            }
        }
        out
    }

    pub(crate) fn problem(&self, problem: impl Into<String>) -> Problem {
        Problem {
            field: self.path(),
            problem: problem.into(),
        }
    }

    fn expected(&self, what: &str) -> Problem {
        self.problem(format!("expected {what}, found {}", describe(self.v)))
    }

    fn child<'s>(&'s self, v: &'a J, seg: Seg<'a>) -> Node<'a, 's> {
        Node {
            v,
            parent: Some(self),
            seg,
        }
    }

    pub(crate) fn obj(&self) -> Res<&'a [(String, J)]> {
        match self.v {
            J::Obj(members) => Ok(members),
            _ => Err(self.expected("an object")),
        }
    }

    /// The member `key`, if present and not `null`.
    pub(crate) fn get<'s>(&'s self, key: &'a str) -> Res<Option<Node<'a, 's>>> {
        self.obj()?;
        Ok(match self.v.member(key) {
            None | Some(J::Null) => None,
            Some(v) => Some(self.child(v, Seg::Key(key))),
        })
    }

    /// The member `key`; an error when it is missing or `null`.
    pub(crate) fn req<'s>(&'s self, key: &'a str) -> Res<Node<'a, 's>> {
        self.get(key)?.ok_or_else(|| Problem {
            field: self.child(&J::Null, Seg::Key(key)).path(),
            problem: "missing (required)".to_owned(),
        })
    }

    /// The members of an object, in the file's order.
    pub(crate) fn members<'s>(&'s self) -> Res<impl Iterator<Item = (&'a str, Node<'a, 's>)>> {
        Ok(self
            .obj()?
            .iter()
            .map(move |(k, v)| (k.as_str(), self.child(v, Seg::Key(k.as_str())))))
    }

    /// The elements of an array.
    pub(crate) fn items<'s>(&'s self) -> Res<impl Iterator<Item = Node<'a, 's>>> {
        let J::Arr(arr) = self.v else {
            return Err(self.expected("an array"));
        };
        Ok(arr
            .iter()
            .enumerate()
            .map(move |(i, v)| self.child(v, Seg::Index(i))))
    }

    pub(crate) fn str(&self) -> Res<&'a str> {
        match self.v {
            J::Str(s) => Ok(s),
            _ => Err(self.expected("a string")),
        }
    }

    pub(crate) fn f64(&self) -> Res<f64> {
        self.v.as_f64().ok_or_else(|| self.expected("a number"))
    }

    pub(crate) fn i64(&self) -> Res<i64> {
        match self.v {
            J::Int(i) => Ok(*i),
            _ => Err(self.expected("an integer")),
        }
    }

    /// A boolean, also written as the integers 0 and 1 (T1's `"Output": 1`).
    pub(crate) fn flag(&self) -> Res<bool> {
        match self.v {
            J::Bool(b) => Ok(*b),
            J::Int(0) => Ok(false),
            J::Int(1) => Ok(true),
            _ => Err(self.expected("a boolean (or 0 / 1)")),
        }
    }

    pub(crate) fn string_list(&self) -> Res<Vec<String>> {
        self.items()?.map(|n| n.str().map(str::to_owned)).collect()
    }

    pub(crate) fn f64_list(&self) -> Res<Vec<f64>> {
        self.items()?.map(|n| n.f64()).collect()
    }
}

fn is_identifier(k: &str) -> bool {
    let mut chars = k.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A value's type and, when short, the value itself.
fn describe(v: &J) -> String {
    let text = v.to_value().to_string();
    if text.len() <= 40 {
        format!("{} ({text})", type_name(v))
    } else {
        type_name(v).to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_keys_and_indices() {
        let v: J = serde_json::from_str(r#"{"x,y": {"c": "s"}, "a": [{"b": 1}]}"#).unwrap();
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"x,y":{"c":"s"},"a":[{"b":1}]}"#,
            "member order is kept"
        );
        let root = Node::root(&v);
        let a = root.req("a").unwrap();
        let first = a.items().unwrap().next().unwrap();
        let err = first.req("b").unwrap().str().unwrap_err();
        assert_eq!(err.field, "$.a[0].b");
        assert_eq!(err.problem, "expected a string, found an integer (1)");
        let xy = root.req("x,y").unwrap();
        assert_eq!(xy.req("d").unwrap_err().field, r#"$["x,y"].d"#);
    }
}
