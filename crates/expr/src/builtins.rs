//! The functions an expression may call: Python's `min`, `max`, `abs`, `int`, `float`, `bool`,
//! `round`, `pow`; tunebox's `ceil_div(a, b)` (Python's `-(-a // b)`, for launch geometry); and
//! `math.ceil`, `math.floor`, `math.sqrt`, `math.log`, `math.log2`,
//! `math.log10`, `math.exp`; and the constants `math.pi`, `math.e`, `math.inf`.

use std::cmp::Ordering;

use crate::ops::{self, BinOp, Fault, FaultKind, Num, OpResult, UnOp};
use crate::value::Value;

/// A function that can be called.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Func {
    Min,
    Max,
    Abs,
    Int,
    Float,
    Bool,
    Round,
    Pow,
    CeilDiv,
    Ceil,
    Floor,
    Sqrt,
    Log,
    Log2,
    Log10,
    Exp,
    /// `range(stop)`, `range(start, stop[, step])`: only in [`crate::eval`].
    Range,
    /// `list(iterable)`: only in [`crate::eval`].
    List,
    /// `tuple(iterable)`: only in [`crate::eval`] (a tuple is a list there).
    Tuple,
    /// `len(sequence)`: only in [`crate::eval`].
    Len,
}

/// The builtins, by name.
pub(crate) const BUILTINS: [(&str, Func); 13] = [
    ("min", Func::Min),
    ("max", Func::Max),
    ("abs", Func::Abs),
    ("int", Func::Int),
    ("float", Func::Float),
    ("bool", Func::Bool),
    ("round", Func::Round),
    ("pow", Func::Pow),
    ("ceil_div", Func::CeilDiv),
    ("range", Func::Range),
    ("list", Func::List),
    ("tuple", Func::Tuple),
    ("len", Func::Len),
];

/// The functions of `math`, by name.
pub(crate) const MATH: [(&str, Func); 7] = [
    ("ceil", Func::Ceil),
    ("floor", Func::Floor),
    ("sqrt", Func::Sqrt),
    ("log", Func::Log),
    ("log2", Func::Log2),
    ("log10", Func::Log10),
    ("exp", Func::Exp),
];

/// The constants of `math`, by name.
pub(crate) const MATH_CONSTANTS: [(&str, f64); 3] = [
    ("pi", std::f64::consts::PI),
    ("e", std::f64::consts::E),
    ("inf", f64::INFINITY),
];

impl Func {
    /// The name as written in an expression.
    pub(crate) fn name(self) -> &'static str {
        BUILTINS
            .iter()
            .map(|(n, f)| (*n, *f, ""))
            .chain(MATH.iter().map(|(n, f)| (*n, *f, "math.")))
            .find(|(_, f, _)| *f == self)
            .map(|(n, _, prefix)| if prefix.is_empty() { n } else { math_name(n) })
            .expect("every function has a name")
    }

    /// The numbers of arguments accepted (inclusive). `min` and `max` take one list or tuple,
    /// or two or more values.
    pub(crate) fn arity(self) -> (usize, usize) {
        match self {
            Func::Min | Func::Max => (1, usize::MAX),
            Func::Round | Func::Log => (1, 2),
            Func::Pow | Func::CeilDiv => (2, 2),
            Func::Range => (1, 3),
            Func::List | Func::Tuple => (0, 1),
            _ => (1, 1),
        }
    }

    /// Whether the function takes or gives a list (`range`, `list`, `tuple`, `len`): those are
    /// evaluated by [`crate::eval`] only.
    pub(crate) fn builds_lists(self) -> bool {
        matches!(self, Func::Range | Func::List | Func::Tuple | Func::Len)
    }
}

fn math_name(n: &'static str) -> &'static str {
    match n {
        "ceil" => "math.ceil",
        "floor" => "math.floor",
        "sqrt" => "math.sqrt",
        "log" => "math.log",
        "log2" => "math.log2",
        "log10" => "math.log10",
        _ => "math.exp",
    }
}

fn arg_type_error(func: Func, v: Value<'_>) -> Fault {
    let message = match func {
        Func::Abs => format!("bad operand type for abs(): '{}'", v.type_name()),
        Func::Round => format!("type {} doesn't define __round__ method", v.type_name()),
        Func::Int => format!("invalid literal for int() with base 10: {v}"),
        _ => format!("must be real number, not {}", v.type_name()),
    };
    Fault::type_error(message)
}

fn float_arg(func: Func, v: Value<'_>) -> Result<f64, Fault> {
    match v {
        Value::Str(_) => Err(arg_type_error(func, v)),
        _ => Ok(v.as_f64().expect("a number")),
    }
}

/// A float that must become an int (`int()`, `round()`, `math.floor()`, `math.ceil()`).
fn float_to_int<'a>(f: f64) -> OpResult<'a> {
    if f.is_nan() {
        return Err(Fault::value_error("cannot convert float NaN to integer"));
    }
    if f.is_infinite() {
        return Err(Fault::new(
            FaultKind::Overflow,
            "cannot convert float infinity to integer",
        ));
    }
    // `f` is integral here; in range exactly when -2**63 <= f < 2**63.
    if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&f) {
        Ok(Value::Int(f as i64))
    } else {
        Err(Fault::int_overflow())
    }
}

/// For `min` / `max`: whether `candidate` replaces the best so far, as Python decides it
/// (`candidate < best` for `min`, `candidate > best` for `max`): the first of equal values
/// wins, and the value keeps its type (`min(1, 1.0)` is `1`).
pub(crate) fn prefer(func: Func, candidate: Value<'_>, best: Value<'_>) -> Result<bool, Fault> {
    let op = if func == Func::Min {
        ops::CmpOp::Lt
    } else {
        ops::CmpOp::Gt
    };
    ops::compare(op, candidate, best)
}

/// Calls a function other than `min` and `max` on its evaluated arguments (one or two; the
/// parser checked the count).
pub(crate) fn call<'a>(func: Func, a: Value<'a>, b: Option<Value<'a>>) -> OpResult<'a> {
    match func {
        Func::Min | Func::Max => unreachable!("min and max are evaluated by `extreme`"),
        Func::Range | Func::List | Func::Tuple | Func::Len => {
            unreachable!("list functions are rejected when parsing a restriction")
        }
        Func::Abs => match a {
            Value::Float(f) => Ok(Value::Float(f.abs())),
            Value::Str(_) => Err(arg_type_error(func, a)),
            _ => {
                let Some(Num::I(i)) = ops::num(a) else {
                    unreachable!()
                };
                i.checked_abs()
                    .map(Value::Int)
                    .ok_or_else(Fault::int_overflow)
            }
        },
        Func::Int => match a {
            Value::Bool(b) => Ok(Value::Int(i64::from(b))),
            Value::Int(_) => Ok(a),
            Value::Float(f) => float_to_int(f.trunc()),
            Value::Str(s) => parse_int(s).ok_or_else(|| {
                Fault::new(
                    FaultKind::Value,
                    format!("invalid literal for int() with base 10: {a}"),
                )
            }),
        },
        Func::Float => match a {
            Value::Str(s) => parse_float(s).map(Value::Float).ok_or_else(|| {
                Fault::new(
                    FaultKind::Value,
                    format!("could not convert string to float: {a}"),
                )
            }),
            _ => Ok(Value::Float(a.as_f64().expect("a number"))),
        },
        Func::Bool => Ok(Value::Bool(a.truthy())),
        Func::Round => round(a, b),
        Func::Pow => ops::binary(BinOp::Pow, a, b.expect("pow has two arguments")),
        // `-(-a // b)`: the ceiling of `a / b`, with Python's types and errors.
        Func::CeilDiv => {
            let b = b.expect("ceil_div has two arguments");
            let quotient = ops::binary(BinOp::FloorDiv, ops::unary(UnOp::Neg, a)?, b)?;
            ops::unary(UnOp::Neg, quotient)
        }
        Func::Ceil | Func::Floor => match a {
            Value::Float(f) => float_to_int(if func == Func::Ceil {
                f.ceil()
            } else {
                f.floor()
            }),
            Value::Str(_) => Err(arg_type_error(func, a)),
            Value::Bool(b) => Ok(Value::Int(i64::from(b))),
            Value::Int(_) => Ok(a),
        },
        Func::Sqrt => {
            let x = float_arg(func, a)?;
            if x < 0.0 {
                return Err(Fault::value_error("math domain error"));
            }
            Ok(Value::Float(x.sqrt()))
        }
        Func::Log => {
            let x = log_of(func, a, f64::ln)?;
            match b {
                None => Ok(Value::Float(x)),
                Some(base) => {
                    let d = log_of(func, base, f64::ln)?;
                    if d == 0.0 {
                        return Err(Fault::zero_division("float division by zero"));
                    }
                    Ok(Value::Float(x / d))
                }
            }
        }
        Func::Log2 => log_of(func, a, f64::log2).map(Value::Float),
        Func::Log10 => log_of(func, a, f64::log10).map(Value::Float),
        Func::Exp => {
            let x = float_arg(func, a)?;
            let r = x.exp();
            if r.is_infinite() && x.is_finite() {
                return Err(Fault::new(FaultKind::Overflow, "math range error"));
            }
            Ok(Value::Float(r))
        }
    }
}

/// CPython's `m_log` family: NaN stays NaN, +inf stays +inf, zero and negatives (and -inf)
/// are outside the domain.
fn log_of(func: Func, v: Value<'_>, f: fn(f64) -> f64) -> Result<f64, Fault> {
    let x = float_arg(func, v)?;
    if x.is_nan() || x == f64::INFINITY {
        return Ok(x);
    }
    if x <= 0.0 {
        return Err(Fault::value_error("math domain error"));
    }
    Ok(f(x))
}

/// `int(s)` for a decimal string: surrounding whitespace, a sign, and single underscores
/// between digits, as Python accepts.
fn parse_int<'a>(s: &str) -> Option<Value<'a>> {
    let t = s.trim();
    let (neg, digits) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    if !valid_underscores(digits) || !digits.bytes().all(|c| c.is_ascii_digit() || c == b'_') {
        return None;
    }
    let clean: String = digits.chars().filter(|c| *c != '_').collect();
    let magnitude: i128 = clean.parse().ok()?;
    let value = if neg { -magnitude } else { magnitude };
    i64::try_from(value).ok().map(Value::Int)
}

fn valid_underscores(digits: &str) -> bool {
    !digits.is_empty()
        && !digits.starts_with('_')
        && !digits.ends_with('_')
        && !digits.contains("__")
}

/// `float(s)`: a decimal or scientific number, `inf`, `infinity` or `nan` (any case), with a
/// sign and surrounding whitespace.
fn parse_float(s: &str) -> Option<f64> {
    let t = s.trim();
    let body = t.trim_start_matches(['+', '-']);
    if body.len() + 1 < t.len() {
        return None; // two signs
    }
    let lower = body.to_ascii_lowercase();
    if matches!(lower.as_str(), "inf" | "infinity" | "nan") {
        return t.parse().ok();
    }
    if !body
        .bytes()
        .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'E' | b'+' | b'-' | b'_'))
    {
        return None;
    }
    if body.contains('_') {
        // Underscores only between digits.
        let b = body.as_bytes();
        for (i, c) in b.iter().enumerate() {
            if *c == b'_'
                && !(i > 0
                    && b[i - 1].is_ascii_digit()
                    && b.get(i + 1).is_some_and(u8::is_ascii_digit))
            {
                return None;
            }
        }
    }
    t.replace('_', "").parse().ok()
}

/// `round(x)` and `round(x, n)`.
fn round<'a>(x: Value<'a>, ndigits: Option<Value<'a>>) -> OpResult<'a> {
    let n = match ndigits {
        None => None,
        Some(Value::Int(n)) => Some(n),
        Some(Value::Bool(b)) => Some(i64::from(b)),
        Some(v) => {
            return Err(Fault::type_error(format!(
                "'{}' object cannot be interpreted as an integer",
                v.type_name()
            )));
        }
    };
    match (x, n) {
        (Value::Str(_), _) => Err(arg_type_error(Func::Round, x)),
        (Value::Float(f), None) => float_to_int(f.round_ties_even()),
        (Value::Float(f), Some(n)) => round_float(f, n).map(Value::Float),
        (_, n) => {
            let i = match x {
                Value::Bool(b) => i64::from(b),
                Value::Int(i) => i,
                _ => unreachable!(),
            };
            match n {
                Some(n) if n < 0 => round_int(i, n.unsigned_abs()),
                _ => Ok(Value::Int(i)),
            }
        }
    }
}

/// `round(i, -k)`: the nearest multiple of 10**k, ties to even.
fn round_int<'a>(i: i64, k: u64) -> OpResult<'a> {
    if k > 38 {
        return Ok(Value::Int(0));
    }
    let p = 10i128.pow(k as u32);
    let x = i128::from(i);
    let q = x.div_euclid(p);
    let r = x.rem_euclid(p);
    let q = match (2 * r).cmp(&p) {
        Ordering::Less => q,
        Ordering::Greater => q + 1,
        Ordering::Equal => q + (q & 1),
    };
    i64::try_from(q * p)
        .map(Value::Int)
        .map_err(|_| Fault::int_overflow())
}

/// CPython's `round(float, n)`: round the exact decimal value of `x` to `n` digits after the
/// point (ties to even), then convert back to the nearest float.
///
/// This formats the exact value (up to ~1400 characters), so unlike the rest of the evaluator
/// it allocates.
fn round_float(x: f64, n: i64) -> Result<f64, Fault> {
    const NDIGITS_MAX: i64 = 323;
    const NDIGITS_MIN: i64 = -308;
    if n > NDIGITS_MAX || !x.is_finite() || x == 0.0 {
        return Ok(x);
    }
    if n < NDIGITS_MIN {
        return Ok(0.0 * x);
    }
    // The exact decimal expansion: f64 has at most 1074 digits after the point.
    let exact = format!("{:.1074}", x.abs());
    let (int_part, frac_part) = exact.split_once('.').expect("a fixed-point number");
    let digits: Vec<u8> = int_part.bytes().chain(frac_part.bytes()).collect();
    let point = int_part.len() as i64; // digits before the point
    // Keep digits[..keep]; keep may be <= 0 (everything rounds away) or beyond the end.
    let keep = point + n;
    let rounded: String = if keep < 0 {
        "0".to_owned()
    } else {
        let keep = keep as usize;
        let (kept, rest) = digits.split_at(keep.min(digits.len()));
        let mut kept = kept.to_vec();
        let up = match rest.first() {
            None => false,
            Some(d) if *d > b'5' => true,
            Some(d) if *d < b'5' => false,
            Some(_) => {
                if rest[1..].iter().any(|d| *d != b'0') {
                    true
                } else {
                    kept.last().is_some_and(|d| (d - b'0') % 2 == 1)
                }
            }
        };
        if up {
            let mut i = kept.len();
            loop {
                if i == 0 {
                    kept.insert(0, b'1');
                    break;
                }
                i -= 1;
                if kept[i] == b'9' {
                    kept[i] = b'0';
                } else {
                    kept[i] += 1;
                    break;
                }
            }
        }
        if kept.is_empty() {
            "0".to_owned()
        } else {
            // Digits up to position `keep` (+1 if rounding carried), scaled by 10**-n.
            // The kept digits as an integer, times 10**-n (a carry only makes the integer
            // longer).
            format!("{}e{}", String::from_utf8(kept).expect("ASCII digits"), -n)
        }
    };
    let value: f64 = rounded.parse().expect("a decimal number");
    if value.is_infinite() {
        return Err(Fault::new(
            FaultKind::Overflow,
            "rounded value too large to represent",
        ));
    }
    Ok(value.copysign(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_is_bankers_and_exact() {
        assert_eq!(round(Value::Float(2.5), None), Ok(Value::Int(2)));
        assert_eq!(round(Value::Float(3.5), None), Ok(Value::Int(4)));
        assert_eq!(round(Value::Float(-0.5), None), Ok(Value::Int(0)));
        assert_eq!(round_float(0.125, 2), Ok(0.12));
        assert_eq!(round_float(0.375, 2), Ok(0.38));
        assert_eq!(round_float(2.675, 2), Ok(2.67));
        assert_eq!(round_float(1234.5, -2), Ok(1200.0));
        assert_eq!(round_float(1250.0, -2), Ok(1200.0));
        assert_eq!(round_float(1350.0, -2), Ok(1400.0));
        assert_eq!(round_float(9.99, 1), Ok(10.0));
        assert_eq!(round_float(-0.4, 0), Ok(-0.0));
        assert_eq!(round_float(0.4, -3), Ok(0.0));
        assert_eq!(round_int(1250, 2), Ok(Value::Int(1200)));
        assert_eq!(round_int(-1250, 2), Ok(Value::Int(-1200)));
        assert_eq!(round_int(-1251, 2), Ok(Value::Int(-1300)));
        assert_eq!(round_int(15, 1), Ok(Value::Int(20)));
        assert_eq!(
            round_float(1.7976931348623157e308, -308).unwrap_err().kind,
            FaultKind::Overflow
        );
    }

    #[test]
    fn conversions() {
        assert_eq!(
            call(Func::Int, Value::Float(-2.7), None),
            Ok(Value::Int(-2))
        );
        assert_eq!(
            call(Func::Int, Value::Str(" 1_000 "), None),
            Ok(Value::Int(1000))
        );
        assert_eq!(
            call(Func::Float, Value::Str("1e3"), None),
            Ok(Value::Float(1000.0))
        );
        assert_eq!(
            call(Func::Float, Value::Str("-inf"), None),
            Ok(Value::Float(f64::NEG_INFINITY))
        );
        assert_eq!(
            call(Func::Int, Value::Float(f64::NAN), None)
                .unwrap_err()
                .kind,
            FaultKind::Value
        );
        assert_eq!(
            call(Func::Int, Value::Float(f64::INFINITY), None)
                .unwrap_err()
                .kind,
            FaultKind::Overflow
        );
        assert_eq!(call(Func::Ceil, Value::Float(2.1), None), Ok(Value::Int(3)));
        assert_eq!(
            call(Func::Floor, Value::Float(-2.1), None),
            Ok(Value::Int(-3))
        );
        assert_eq!(
            call(Func::Floor, Value::Bool(true), None),
            Ok(Value::Int(1))
        );
    }
}
