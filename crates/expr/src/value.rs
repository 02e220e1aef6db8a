//! [`Value`]: what variables hold and expressions return.

use std::fmt;

/// A Python value: `bool`, `int` (as `i64`), `float` (`f64`) or `str`.
///
/// Values are `Copy`: a string borrows its text, from the caller's binding or from a literal of
/// the compiled expression, so evaluating never allocates.
///
/// `==` on `Value` (the derived [`PartialEq`]) is *structural*: `Int(1) != Float(1.0)` and
/// `Bool(true) != Int(1)`, which is what a test of an evaluator's result wants. Python's
/// equality, where all three are equal, is [`Value::python_eq`]. [`fmt::Display`] writes
/// Python's `repr` (`True`, `1`, `1.0`, `1e+20`, `'NHWC'`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    /// `True` or `False`; an int in arithmetic, as in Python (`True + 1 == 2`).
    Bool(bool),
    /// An int. Python's ints are unbounded; results outside `i64` are an error
    /// ([`crate::ExprError::IntOverflow`]).
    Int(i64),
    /// A float.
    Float(f64),
    /// A string, from a binding or a literal.
    Str(&'a str),
}

impl<'a> Value<'a> {
    /// Python's truthiness: `False`, `0`, `0.0`, `-0.0` and `''` are false, all else is true
    /// (NaN is true).
    pub fn truthy(self) -> bool {
        match self {
            Value::Bool(b) => b,
            Value::Int(i) => i != 0,
            Value::Float(f) => f != 0.0,
            Value::Str(s) => !s.is_empty(),
        }
    }

    /// The Python type name: `bool`, `int`, `float` or `str`.
    pub fn type_name(self) -> &'static str {
        match self {
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float",
            Value::Str(_) => "str",
        }
    }

    /// The value as an `f64` when it is a number (a bool is 0 or 1), as Python's `float(v)`.
    pub fn as_f64(self) -> Option<f64> {
        match self {
            Value::Bool(b) => Some(f64::from(u8::from(b))),
            Value::Int(i) => Some(i as f64),
            Value::Float(f) => Some(f),
            Value::Str(_) => None,
        }
    }
}

impl From<i64> for Value<'_> {
    fn from(i: i64) -> Self {
        Value::Int(i)
    }
}

impl From<f64> for Value<'_> {
    fn from(f: f64) -> Self {
        Value::Float(f)
    }
}

impl From<bool> for Value<'_> {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

impl<'a> From<&'a str> for Value<'a> {
    fn from(s: &'a str) -> Self {
        Value::Str(s)
    }
}

impl fmt::Display for Value<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Value::Bool(true) => f.write_str("True"),
            Value::Bool(false) => f.write_str("False"),
            Value::Int(i) => write!(f, "{i}"),
            Value::Float(x) => write_float_repr(f, x),
            Value::Str(s) => write_str_repr(f, s),
        }
    }
}

/// Python's `repr(float)`: the shortest digits that round-trip, in fixed notation for
/// exponents from -4 to 15 and scientific (`1e+16`, `1.5e-05`) outside.
fn write_float_repr(f: &mut fmt::Formatter<'_>, x: f64) -> fmt::Result {
    if x.is_nan() {
        return f.write_str("nan");
    }
    if x.is_infinite() {
        return f.write_str(if x > 0.0 { "inf" } else { "-inf" });
    }
    // `{:e}` gives the shortest round-trip digits: "-1.2345e-7".
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').expect("`{:e}` has an exponent");
    let exp: i32 = exp.parse().expect("`{:e}` has an integer exponent");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        if point <= 0 {
            let zeros = "0".repeat((-point) as usize);
            write!(f, "{sign}0.{zeros}{digits}")
        } else if point as usize >= digits.len() {
            let zeros = "0".repeat(point as usize - digits.len());
            write!(f, "{sign}{digits}{zeros}.0")
        } else {
            let (int, frac) = digits.split_at(point as usize);
            write!(f, "{sign}{int}.{frac}")
        }
    } else {
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() { "" } else { "." };
        let esign = if exp < 0 { '-' } else { '+' };
        write!(f, "{sign}{first}{dot}{rest}e{esign}{:02}", exp.abs())
    }
}

/// Python's `repr(str)`: single quotes unless the text holds a single quote and no double one.
fn write_str_repr(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    write!(f, "{quote}")?;
    for c in s.chars() {
        match c {
            '\\' => f.write_str("\\\\")?,
            '\n' => f.write_str("\\n")?,
            '\t' => f.write_str("\\t")?,
            '\r' => f.write_str("\\r")?,
            c if c == quote => write!(f, "\\{c}")?,
            c => write!(f, "{c}")?,
        }
    }
    write!(f, "{quote}")
}

#[cfg(test)]
mod tests {
    use super::Value;

    #[test]
    fn repr_is_pythons() {
        let cases: [(Value<'_>, &str); 16] = [
            (Value::Bool(true), "True"),
            (Value::Int(-3), "-3"),
            (Value::Float(1.0), "1.0"),
            (Value::Float(-0.0), "-0.0"),
            (Value::Float(0.5), "0.5"),
            (Value::Float(1e16), "1e+16"),
            (Value::Float(1e15), "1000000000000000.0"),
            (Value::Float(1.5e-5), "1.5e-05"),
            (Value::Float(0.0001), "0.0001"),
            (Value::Float(123.456), "123.456"),
            (Value::Float(f64::INFINITY), "inf"),
            (Value::Float(f64::NAN), "nan"),
            (
                Value::Float(1.7976931348623157e308),
                "1.7976931348623157e+308",
            ),
            (Value::Float(5e-324), "5e-324"),
            (Value::Str("NHWC"), "'NHWC'"),
            (Value::Str("it's"), "\"it's\""),
        ];
        for (value, repr) in cases {
            assert_eq!(value.to_string(), repr);
        }
    }

    #[test]
    fn truthiness() {
        assert!(!Value::Float(-0.0).truthy());
        assert!(Value::Float(f64::NAN).truthy());
        assert!(!Value::Str("").truthy());
        assert!(Value::Int(-1).truthy());
    }
}
