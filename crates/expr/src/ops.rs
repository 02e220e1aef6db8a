//! Python's operators on [`Value`]s: arithmetic, comparison, bitwise, as CPython defines them
//! for `bool`, `int` (here `i64`), `float` and `str`.

use std::borrow::Cow;
use std::cmp::Ordering;

use crate::value::Value;

/// What went wrong in one operation, before the evaluator says where.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fault {
    pub(crate) kind: FaultKind,
    pub(crate) message: Cow<'static, str>,
}

/// The Python exception (or evaluator limit) a [`Fault`] stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FaultKind {
    ZeroDivision,
    Overflow,
    Type,
    Value,
    IntOverflow,
    Unsupported,
    Index,
}

impl Fault {
    pub(crate) fn new(kind: FaultKind, message: impl Into<Cow<'static, str>>) -> Fault {
        Fault {
            kind,
            message: message.into(),
        }
    }

    pub(crate) fn zero_division(message: &'static str) -> Fault {
        Fault::new(FaultKind::ZeroDivision, message)
    }

    pub(crate) fn int_overflow() -> Fault {
        Fault::new(FaultKind::IntOverflow, "")
    }

    pub(crate) fn type_error(message: String) -> Fault {
        Fault::new(FaultKind::Type, message)
    }

    pub(crate) fn value_error(message: &'static str) -> Fault {
        Fault::new(FaultKind::Value, message)
    }

    pub(crate) fn unsupported(what: &'static str) -> Fault {
        Fault::new(FaultKind::Unsupported, what)
    }
}

pub(crate) type OpResult<'a> = Result<Value<'a>, Fault>;

/// A binary operator other than the comparisons and `and`/`or`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    Mod,
    Pow,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
}

impl BinOp {
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            BinOp::Add => "+",
            BinOp::Sub => "-",
            BinOp::Mul => "*",
            BinOp::Div => "/",
            BinOp::FloorDiv => "//",
            BinOp::Mod => "%",
            BinOp::Pow => "** or pow()",
            BinOp::BitAnd => "&",
            BinOp::BitOr => "|",
            BinOp::BitXor => "^",
            BinOp::Shl => "<<",
            BinOp::Shr => ">>",
        }
    }
}

/// A unary operator other than `not`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnOp {
    Neg,
    Pos,
    Invert,
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CmpOp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    In,
    NotIn,
}

impl CmpOp {
    pub(crate) fn symbol(self) -> &'static str {
        match self {
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::In => "in",
            CmpOp::NotIn => "not in",
        }
    }
}

/// A number: bools are ints.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Num {
    I(i64),
    F(f64),
}

pub(crate) fn num(v: Value<'_>) -> Option<Num> {
    match v {
        Value::Bool(b) => Some(Num::I(i64::from(b))),
        Value::Int(i) => Some(Num::I(i)),
        Value::Float(f) => Some(Num::F(f)),
        Value::Str(_) => None,
    }
}

fn int_of(v: Value<'_>) -> Option<i64> {
    match v {
        Value::Bool(b) => Some(i64::from(b)),
        Value::Int(i) => Some(i),
        _ => None,
    }
}

/// Python compares an int with a float exactly, not after rounding the int to a float.
pub(crate) fn cmp_int_float(i: i64, f: f64) -> Option<Ordering> {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if f.is_nan() {
        return None;
    }
    if f >= TWO_63 {
        return Some(Ordering::Less);
    }
    if f < -TWO_63 {
        return Some(Ordering::Greater);
    }
    let whole = f.trunc();
    // In range and integral, so the conversion is exact.
    match i.cmp(&(whole as i64)) {
        Ordering::Equal => (0.0).partial_cmp(&(f - whole)),
        other => Some(other),
    }
}

pub(crate) fn cmp_num(a: Num, b: Num) -> Option<Ordering> {
    match (a, b) {
        (Num::I(x), Num::I(y)) => Some(x.cmp(&y)),
        (Num::F(x), Num::F(y)) => x.partial_cmp(&y),
        (Num::I(x), Num::F(y)) => cmp_int_float(x, y),
        (Num::F(x), Num::I(y)) => cmp_int_float(y, x).map(Ordering::reverse),
    }
}

impl Value<'_> {
    /// Python's `==`: numbers (bools, ints, floats) compare by exact value (`1 == 1.0 == True`,
    /// and `2**53 + 1 != float(2**53)`), strings by text, a string never equals a number.
    pub fn python_eq(self, other: Value<'_>) -> bool {
        equal(self, other)
    }
}

/// Python's `==`.
pub(crate) fn equal(a: Value<'_>, b: Value<'_>) -> bool {
    match (a, b) {
        (Value::Str(x), Value::Str(y)) => x == y,
        (Value::Str(_), _) | (_, Value::Str(_)) => false,
        _ => {
            let (Some(x), Some(y)) = (num(a), num(b)) else {
                return false;
            };
            cmp_num(x, y) == Some(Ordering::Equal)
        }
    }
}

/// Python's `<`, `<=`, `>`, `>=`, `==`, `!=` (not `in`, which needs a container).
pub(crate) fn compare(op: CmpOp, a: Value<'_>, b: Value<'_>) -> Result<bool, Fault> {
    let ordering = match op {
        CmpOp::Eq => return Ok(equal(a, b)),
        CmpOp::Ne => return Ok(!equal(a, b)),
        CmpOp::In | CmpOp::NotIn => unreachable!("`in` is evaluated by the caller"),
        _ => match (a, b) {
            (Value::Str(x), Value::Str(y)) => Some(x.cmp(y)),
            _ => match (num(a), num(b)) {
                (Some(x), Some(y)) => cmp_num(x, y),
                _ => {
                    return Err(Fault::type_error(format!(
                        "'{}' not supported between instances of '{}' and '{}'",
                        op.symbol(),
                        a.type_name(),
                        b.type_name()
                    )));
                }
            },
        },
    };
    Ok(match ordering {
        None => false,
        Some(o) => match op {
            CmpOp::Lt => o.is_lt(),
            CmpOp::Le => o.is_le(),
            CmpOp::Gt => o.is_gt(),
            CmpOp::Ge => o.is_ge(),
            _ => unreachable!(),
        },
    })
}

fn operand_error(op: BinOp, a: Value<'_>, b: Value<'_>) -> Fault {
    Fault::type_error(format!(
        "unsupported operand type(s) for {}: '{}' and '{}'",
        op.symbol(),
        a.type_name(),
        b.type_name()
    ))
}

/// Python's binary operators.
pub(crate) fn binary<'a>(op: BinOp, a: Value<'a>, b: Value<'a>) -> OpResult<'a> {
    use BinOp::*;
    match op {
        BitAnd | BitOr | BitXor => {
            if let (Value::Bool(x), Value::Bool(y)) = (a, b) {
                return Ok(Value::Bool(match op {
                    BitAnd => x & y,
                    BitOr => x | y,
                    _ => x ^ y,
                }));
            }
            let (Some(x), Some(y)) = (int_of(a), int_of(b)) else {
                return Err(operand_error(op, a, b));
            };
            Ok(Value::Int(match op {
                BitAnd => x & y,
                BitOr => x | y,
                _ => x ^ y,
            }))
        }
        Shl | Shr => {
            let (Some(x), Some(n)) = (int_of(a), int_of(b)) else {
                return Err(operand_error(op, a, b));
            };
            if n < 0 {
                return Err(Fault::value_error("negative shift count"));
            }
            if op == Shr {
                return Ok(Value::Int(if n >= 64 { x >> 63 } else { x >> n }));
            }
            if x == 0 {
                return Ok(Value::Int(0));
            }
            if n >= 64 {
                return Err(Fault::int_overflow());
            }
            let shifted = x << n;
            if shifted >> n != x {
                return Err(Fault::int_overflow());
            }
            Ok(Value::Int(shifted))
        }
        _ => {
            let (Some(x), Some(y)) = (num(a), num(b)) else {
                return Err(string_arithmetic(op, a, b));
            };
            match (x, y) {
                (Num::I(x), Num::I(y)) => int_arith(op, x, y),
                (x, y) => float_arith(op, to_f64(x), to_f64(y)),
            }
        }
    }
}

/// Arithmetic with a string operand: what Python would compute (a new string) is not
/// supported; what Python rejects is a `TypeError`.
fn string_arithmetic(op: BinOp, a: Value<'_>, b: Value<'_>) -> Fault {
    match (op, a, b) {
        (BinOp::Add, Value::Str(_), Value::Str(_)) => Fault::unsupported("string concatenation"),
        (BinOp::Mul, Value::Str(_), Value::Int(_) | Value::Bool(_))
        | (BinOp::Mul, Value::Int(_) | Value::Bool(_), Value::Str(_)) => {
            Fault::unsupported("string repetition")
        }
        (BinOp::Mod, Value::Str(_), _) => Fault::unsupported("string formatting with %"),
        _ => operand_error(op, a, b),
    }
}

pub(crate) fn to_f64(n: Num) -> f64 {
    match n {
        Num::I(i) => i as f64,
        Num::F(f) => f,
    }
}

fn int_arith<'a>(op: BinOp, x: i64, y: i64) -> OpResult<'a> {
    let overflow = Fault::int_overflow;
    Ok(Value::Int(match op {
        BinOp::Add => x.checked_add(y).ok_or_else(overflow)?,
        BinOp::Sub => x.checked_sub(y).ok_or_else(overflow)?,
        BinOp::Mul => x.checked_mul(y).ok_or_else(overflow)?,
        BinOp::Div => {
            if y == 0 {
                return Err(Fault::zero_division("division by zero"));
            }
            return Ok(Value::Float(int_true_div(x, y)));
        }
        BinOp::FloorDiv => {
            if y == 0 {
                return Err(Fault::zero_division("integer division or modulo by zero"));
            }
            let q = x.checked_div(y).ok_or_else(overflow)?;
            if x % y != 0 && ((x < 0) != (y < 0)) {
                q - 1
            } else {
                q
            }
        }
        BinOp::Mod => {
            if y == 0 {
                return Err(Fault::zero_division("integer modulo by zero"));
            }
            int_mod(x, y)
        }
        BinOp::Pow => return int_pow(x, y),
        _ => unreachable!("bitwise operators are handled by `binary`"),
    }))
}

/// Python's `x % y` for ints: the result has the sign of `y`.
pub(crate) fn int_mod(x: i64, y: i64) -> i64 {
    if y == -1 {
        return 0; // also avoids i64::MIN % -1 overflowing
    }
    let r = x % y;
    if r != 0 && ((r < 0) != (y < 0)) {
        r + y
    } else {
        r
    }
}

/// Python's true division of ints: correctly rounded. Exact for operands up to 2**53 in
/// magnitude (each converts to `f64` exactly and IEEE division rounds once); beyond that the
/// operands are rounded first, which can differ from Python in the last bit.
fn int_true_div(x: i64, y: i64) -> f64 {
    x as f64 / y as f64
}

fn int_pow<'a>(x: i64, y: i64) -> OpResult<'a> {
    if y < 0 {
        return float_pow(x as f64, y as f64);
    }
    Ok(Value::Int(match x {
        0 => i64::from(y == 0),
        1 => 1,
        -1 => {
            if y % 2 == 0 {
                1
            } else {
                -1
            }
        }
        _ => {
            let y = u32::try_from(y).map_err(|_| Fault::int_overflow())?;
            x.checked_pow(y).ok_or_else(Fault::int_overflow)?
        }
    }))
}

fn float_arith<'a>(op: BinOp, x: f64, y: f64) -> OpResult<'a> {
    Ok(Value::Float(match op {
        BinOp::Add => x + y,
        BinOp::Sub => x - y,
        BinOp::Mul => x * y,
        BinOp::Div => {
            if y == 0.0 {
                return Err(Fault::zero_division("float division by zero"));
            }
            x / y
        }
        BinOp::FloorDiv => {
            if y == 0.0 {
                return Err(Fault::zero_division("float floor division by zero"));
            }
            float_divmod(x, y).0
        }
        BinOp::Mod => {
            if y == 0.0 {
                return Err(Fault::zero_division("float modulo by zero"));
            }
            const EXACT: f64 = 9_007_199_254_740_992.0; // 2**53
            if x.trunc() == x && y.trunc() == y && x.abs() <= EXACT && y.abs() <= EXACT {
                // Whole numbers held exactly (`KWG % 4.0`): `fmod` is exact there, so the int
                // remainder is the same value, and much faster; a zero takes `y`'s sign.
                let m = int_mod(x as i64, y as i64);
                return Ok(Value::Float(if m == 0 {
                    0.0f64.copysign(y)
                } else {
                    m as f64
                }));
            }
            float_divmod(x, y).1
        }
        BinOp::Pow => return float_pow(x, y),
        _ => unreachable!("bitwise operators are handled by `binary`"),
    }))
}

/// CPython's `_float_div_mod`: `(x // y, x % y)` for floats, `y != 0`.
fn float_divmod(vx: f64, wx: f64) -> (f64, f64) {
    let mut m = vx % wx; // C's fmod
    let mut div = (vx - m) / wx;
    if m != 0.0 {
        if (wx < 0.0) != (m < 0.0) {
            m += wx;
            div -= 1.0;
        }
    } else {
        m = 0.0f64.copysign(wx);
    }
    let floordiv = if div != 0.0 {
        let mut f = div.floor();
        if div - f > 0.5 {
            f += 1.0;
        }
        f
    } else {
        0.0f64.copysign(vx / wx)
    };
    (floordiv, m)
}

fn is_odd_integer(x: f64) -> bool {
    (x.abs() % 2.0) == 1.0
}

/// CPython's `float_pow`, special cases included.
pub(crate) fn float_pow<'a>(iv: f64, iw: f64) -> OpResult<'a> {
    if iw == 0.0 {
        return Ok(Value::Float(1.0));
    }
    if iv.is_nan() {
        return Ok(Value::Float(iv));
    }
    if iw.is_nan() {
        return Ok(Value::Float(if iv == 1.0 { 1.0 } else { iw }));
    }
    if iw.is_infinite() {
        let a = iv.abs();
        return Ok(Value::Float(if a == 1.0 {
            1.0
        } else if (iw > 0.0) == (a > 1.0) {
            iw.abs()
        } else {
            0.0
        }));
    }
    if iv.is_infinite() {
        let odd = is_odd_integer(iw);
        return Ok(Value::Float(if iw > 0.0 {
            if odd { iv } else { iv.abs() }
        } else if odd {
            0.0f64.copysign(iv)
        } else {
            0.0
        }));
    }
    if iv == 0.0 {
        if iw < 0.0 {
            return Err(Fault::zero_division(
                "0.0 cannot be raised to a negative power",
            ));
        }
        return Ok(Value::Float(if is_odd_integer(iw) { iv } else { 0.0 }));
    }
    let mut base = iv;
    let mut negate = false;
    if iv < 0.0 {
        if iw != iw.floor() {
            return Err(Fault::unsupported(
                "a negative number to a fractional power (a complex result)",
            ));
        }
        base = -iv;
        negate = is_odd_integer(iw);
    }
    if base == 1.0 {
        return Ok(Value::Float(if negate { -1.0 } else { 1.0 }));
    }
    let r = base.powf(iw);
    if r.is_infinite() {
        return Err(Fault::new(
            FaultKind::Overflow,
            "(34, 'Numerical result out of range')",
        ));
    }
    Ok(Value::Float(if negate { -r } else { r }))
}

/// Python's unary `-`, `+`, `~`.
pub(crate) fn unary<'a>(op: UnOp, v: Value<'a>) -> OpResult<'a> {
    let bad = |sym: &str| {
        Fault::type_error(format!(
            "bad operand type for unary {sym}: '{}'",
            v.type_name()
        ))
    };
    match (op, v) {
        (UnOp::Neg, Value::Float(f)) => Ok(Value::Float(-f)),
        (UnOp::Neg, Value::Str(_)) => Err(bad("-")),
        (UnOp::Neg, _) => {
            let i = int_of(v).expect("a bool or int");
            i.checked_neg()
                .map(Value::Int)
                .ok_or_else(Fault::int_overflow)
        }
        (UnOp::Pos, Value::Bool(b)) => Ok(Value::Int(i64::from(b))),
        (UnOp::Pos, Value::Str(_)) => Err(bad("+")),
        (UnOp::Pos, _) => Ok(v),
        (UnOp::Invert, Value::Bool(b)) => Ok(Value::Int(!i64::from(b))),
        (UnOp::Invert, Value::Int(i)) => Ok(Value::Int(!i)),
        (UnOp::Invert, _) => Err(bad("~")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bin(op: BinOp, a: Value<'static>, b: Value<'static>) -> OpResult<'static> {
        binary(op, a, b)
    }

    #[test]
    fn floor_division_and_modulo_follow_the_divisor_sign() {
        use Value::{Float as F, Int as I};
        assert_eq!(bin(BinOp::FloorDiv, I(-7), I(2)), Ok(I(-4)));
        assert_eq!(bin(BinOp::Mod, I(-7), I(2)), Ok(I(1)));
        assert_eq!(bin(BinOp::Mod, I(7), I(-2)), Ok(I(-1)));
        assert_eq!(bin(BinOp::FloorDiv, I(7), I(-2)), Ok(I(-4)));
        assert_eq!(bin(BinOp::Mod, I(i64::MIN), I(-1)), Ok(I(0)));
        assert_eq!(bin(BinOp::FloorDiv, F(-7.0), I(2)), Ok(F(-4.0)));
        assert_eq!(bin(BinOp::Mod, F(-7.5), I(2)), Ok(F(0.5)));
        assert_eq!(bin(BinOp::Mod, F(7.5), F(-2.0)), Ok(F(-0.5)));
        assert_eq!(bin(BinOp::Mod, F(4.0), F(-2.0)), Ok(F(-0.0)));
        assert_eq!(bin(BinOp::FloorDiv, F(-5.0), F(f64::INFINITY)), Ok(F(-1.0)));
    }

    #[test]
    fn int_float_comparison_is_exact() {
        assert_eq!(cmp_int_float(1, 1.0), Some(Ordering::Equal));
        assert_eq!(
            cmp_int_float((1 << 53) + 1, (1u64 << 53) as f64),
            Some(Ordering::Greater)
        );
        assert_eq!(
            cmp_int_float(i64::MAX, 9_223_372_036_854_775_808.0),
            Some(Ordering::Less)
        );
        assert_eq!(cmp_int_float(-3, -2.5), Some(Ordering::Less));
        assert_eq!(cmp_int_float(2, 2.5), Some(Ordering::Less));
        assert_eq!(cmp_int_float(0, f64::NAN), None);
    }

    #[test]
    fn powers() {
        use Value::{Float as F, Int as I};
        assert_eq!(bin(BinOp::Pow, I(2), I(10)), Ok(I(1024)));
        assert_eq!(bin(BinOp::Pow, I(2), I(-1)), Ok(F(0.5)));
        assert_eq!(bin(BinOp::Pow, I(-1), I(i64::MAX)), Ok(I(-1)));
        assert_eq!(bin(BinOp::Pow, F(4.0), F(0.5)), Ok(F(2.0)));
        assert_eq!(bin(BinOp::Pow, F(-8.0), I(3)), Ok(F(-512.0)));
        assert_eq!(
            bin(BinOp::Pow, I(2), I(64)).unwrap_err().kind,
            FaultKind::IntOverflow
        );
        assert_eq!(
            bin(BinOp::Pow, I(0), I(-1)).unwrap_err().kind,
            FaultKind::ZeroDivision
        );
        assert_eq!(
            bin(BinOp::Pow, F(10.0), F(400.0)).unwrap_err().kind,
            FaultKind::Overflow
        );
        assert_eq!(
            bin(BinOp::Pow, F(-8.0), F(0.5)).unwrap_err().kind,
            FaultKind::Unsupported
        );
    }

    #[test]
    fn bools_are_ints() {
        use Value::{Bool as B, Int as I};
        assert_eq!(bin(BinOp::Add, B(true), I(1)), Ok(I(2)));
        assert_eq!(bin(BinOp::BitAnd, B(true), B(false)), Ok(B(false)));
        assert_eq!(bin(BinOp::BitOr, B(true), I(2)), Ok(I(3)));
        assert_eq!(unary(UnOp::Invert, B(true)), Ok(I(-2)));
        assert_eq!(unary(UnOp::Neg, B(true)), Ok(I(-1)));
        assert!(equal(B(true), I(1)));
        assert!(equal(B(true), Value::Float(1.0)));
    }

    #[test]
    fn shifts() {
        use Value::Int as I;
        assert_eq!(bin(BinOp::Shl, I(1), I(62)), Ok(I(1 << 62)));
        assert_eq!(
            bin(BinOp::Shl, I(1), I(63)).unwrap_err().kind,
            FaultKind::IntOverflow
        );
        assert_eq!(bin(BinOp::Shr, I(-5), I(100)), Ok(I(-1)));
        assert_eq!(bin(BinOp::Shr, I(-5), I(1)), Ok(I(-3)));
        assert_eq!(
            bin(BinOp::Shr, I(1), I(-1)).unwrap_err().kind,
            FaultKind::Value
        );
    }
}
