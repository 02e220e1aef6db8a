//! The Python subset that T1 `Values` strings are written in.
//!
//! The T1 schema says `Values` is a string, and Kernel Tuner `eval`s it. The benchmark hub's
//! files use list literals (`"[16, 32, 48]"`), concatenation
//! (`"[1, 2, 4, 8, 16] + list(range(32, 1024+1, 32))"`) and comprehensions
//! (`"[2**i for i in range(0, 6)]"`). This evaluates exactly that kind of expression:
//!
//! - literals: ints, floats, strings (`'…'`, `"…"`), `True`, `False`; lists and tuples;
//! - arithmetic `+ - * / // % **` with Python's rules, scalars computed by `tunebox-expr`
//!   (`tunebox_expr::operate`, so T1 values and restrictions share one arithmetic), `list +
//!   list` concatenating and `list * int` repeating;
//! - comparisons `== != < <= > >=` (chained), `and`, `or`, `not` (giving booleans);
//! - `range(stop)`, `range(start, stop[, step])`, `list(…)`, `tuple(…)`, `int(…)`,
//!   `float(…)`, `abs(…)`, `min(…)`, `max(…)`;
//! - comprehensions `[expr for name in iterable if cond]` (one `for`, optional `if`s).
//!
//! Ints are `i64` (overflow is an error); a list may hold at most [`MAX_LEN`] elements.

use std::fmt;

use tunebox_expr::{Value, operate};

/// Most elements a list may have: a guard against `range(10**12)`.
pub(crate) const MAX_LEN: usize = 10_000_000;

/// A Python value of the subset.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Py {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    List(Vec<Py>),
}

impl fmt::Display for Py {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Py::Int(_) => f.write_str("int"),
            Py::Float(_) => f.write_str("float"),
            Py::Bool(_) => f.write_str("bool"),
            Py::Str(_) => f.write_str("str"),
            Py::List(_) => f.write_str("list"),
        }
    }
}

/// Evaluates `text` to a value; the error says what went wrong, in Python's terms.
pub(crate) fn eval(text: &str) -> Result<Py, String> {
    eval_with(text, Vec::new())
}

/// Evaluates `text` with `names` bound (e.g. T1's `ProblemSize` and the parameters, each bound
/// to the list of its values, as Kernel Tuner's `eval(size, tune_params)` binds them).
pub(crate) fn eval_with(text: &str, names: Vec<(String, Py)>) -> Result<Py, String> {
    let tokens = lex(text)?;
    let mut p = Parser { tokens, pos: 0 };
    let expr = p.expr()?;
    if p.pos != p.tokens.len() {
        return Err(format!(
            "unexpected {} after the expression",
            p.tokens[p.pos]
        ));
    }
    let mut env = names;
    expr.eval(&mut env)
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Int(i64),
    Float(f64),
    Str(String),
    Name(String),
    Op(&'static str),
}

impl fmt::Display for Tok {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tok::Int(i) => write!(f, "`{i}`"),
            Tok::Float(x) => write!(f, "`{x}`"),
            Tok::Str(s) => write!(f, "`{s:?}`"),
            Tok::Name(n) => write!(f, "`{n}`"),
            Tok::Op(o) => write!(f, "`{o}`"),
        }
    }
}

const OPS: [&str; 20] = [
    "**", "//", "==", "!=", "<=", ">=", "(", ")", "[", "]", ",", "+", "-", "*", "/", "%", "<", ">",
    ":", ".",
];

fn lex(text: &str) -> Result<Vec<Tok>, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit()
            || (c == b'.' && bytes.get(i + 1).is_some_and(u8::is_ascii_digit))
        {
            let start = i;
            let mut float = false;
            while i < bytes.len() {
                let d = bytes[i];
                if d.is_ascii_digit() || d == b'_' {
                    i += 1;
                } else if d == b'.' && !float {
                    float = true;
                    i += 1;
                } else if (d == b'e' || d == b'E')
                    && bytes
                        .get(i + 1)
                        .is_some_and(|n| n.is_ascii_digit() || *n == b'-' || *n == b'+')
                {
                    float = true;
                    i += 2;
                } else {
                    break;
                }
            }
            let lit: String = text[start..i].chars().filter(|c| *c != '_').collect();
            out.push(if float {
                Tok::Float(lit.parse().map_err(|_| format!("bad number `{lit}`"))?)
            } else {
                Tok::Int(
                    lit.parse()
                        .map_err(|_| format!("integer `{lit}` does not fit 64 bits"))?,
                )
            });
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Name(text[start..i].to_owned()));
        } else if c == b'\'' || c == b'"' {
            let mut s = String::new();
            let mut chars = text[i + 1..].char_indices();
            let mut end = None;
            while let Some((j, ch)) = chars.next() {
                match ch {
                    '\\' => match chars.next() {
                        Some((_, 'n')) => s.push('\n'),
                        Some((_, 't')) => s.push('\t'),
                        Some((_, other)) => s.push(other),
                        None => break,
                    },
                    ch if ch as u32 == u32::from(c) => {
                        end = Some(i + 1 + j + 1);
                        break;
                    }
                    ch => s.push(ch),
                }
            }
            i = end.ok_or("unterminated string")?;
            out.push(Tok::Str(s));
        } else if let Some(op) = OPS.iter().find(|op| text[i..].starts_with(**op)) {
            out.push(Tok::Op(op));
            i += op.len();
        } else {
            let ch = text[i..].chars().next().unwrap_or('?');
            return Err(format!("unexpected character `{ch}`"));
        }
    }
    Ok(out)
}

#[derive(Debug)]
enum Expr {
    Lit(Py),
    Name(String),
    List(Vec<Expr>),
    Comp {
        elt: Box<Expr>,
        var: String,
        iter: Box<Expr>,
        conds: Vec<Expr>,
    },
    Bin(&'static str, Box<Expr>, Box<Expr>),
    Cmp(Box<Expr>, Vec<(&'static str, Expr)>),
    Neg(Box<Expr>),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Call(String, Vec<Expr>),
    Index(Box<Expr>, Box<Expr>),
}

struct Parser {
    tokens: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos)
    }

    fn eat_op(&mut self, op: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Op(o)) if *o == op) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn eat_name(&mut self, name: &str) -> bool {
        if matches!(self.peek(), Some(Tok::Name(n)) if n == name) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_op(&mut self, op: &str) -> Result<(), String> {
        if self.eat_op(op) {
            Ok(())
        } else {
            Err(match self.peek() {
                Some(t) => format!("expected `{op}`, found {t}"),
                None => format!("expected `{op}`, found the end"),
            })
        }
    }

    fn expr(&mut self) -> Result<Expr, String> {
        let mut left = self.and()?;
        while self.eat_name("or") {
            left = Expr::Or(Box::new(left), Box::new(self.and()?));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, String> {
        let mut left = self.not()?;
        while self.eat_name("and") {
            left = Expr::And(Box::new(left), Box::new(self.not()?));
        }
        Ok(left)
    }

    fn not(&mut self) -> Result<Expr, String> {
        if self.eat_name("not") {
            return Ok(Expr::Not(Box::new(self.not()?)));
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<Expr, String> {
        let first = self.arith()?;
        let mut rest = Vec::new();
        loop {
            let op = match self.peek() {
                Some(Tok::Op(o)) if ["==", "!=", "<", "<=", ">", ">="].contains(o) => *o,
                _ => break,
            };
            self.pos += 1;
            rest.push((op, self.arith()?));
        }
        Ok(if rest.is_empty() {
            first
        } else {
            Expr::Cmp(Box::new(first), rest)
        })
    }

    fn arith(&mut self) -> Result<Expr, String> {
        let mut left = self.term()?;
        loop {
            let op = if self.eat_op("+") {
                "+"
            } else if self.eat_op("-") {
                "-"
            } else {
                return Ok(left);
            };
            left = Expr::Bin(op, Box::new(left), Box::new(self.term()?));
        }
    }

    fn term(&mut self) -> Result<Expr, String> {
        let mut left = self.unary()?;
        loop {
            let op = match self.peek() {
                Some(Tok::Op(o)) if ["*", "/", "//", "%"].contains(o) => *o,
                _ => return Ok(left),
            };
            self.pos += 1;
            left = Expr::Bin(op, Box::new(left), Box::new(self.unary()?));
        }
    }

    fn unary(&mut self) -> Result<Expr, String> {
        if self.eat_op("-") {
            return Ok(Expr::Neg(Box::new(self.unary()?)));
        }
        if self.eat_op("+") {
            return self.unary();
        }
        let mut base = self.atom()?;
        while self.eat_op("[") {
            let index = self.expr()?;
            self.expect_op("]")?;
            base = Expr::Index(Box::new(base), Box::new(index));
        }
        if self.eat_op("**") {
            // Right-associative, and binds tighter than a unary minus on its left.
            return Ok(Expr::Bin("**", Box::new(base), Box::new(self.unary()?)));
        }
        Ok(base)
    }

    fn atom(&mut self) -> Result<Expr, String> {
        let tok = self
            .peek()
            .cloned()
            .ok_or("unexpected end of the expression")?;
        self.pos += 1;
        match tok {
            Tok::Int(i) => Ok(Expr::Lit(Py::Int(i))),
            Tok::Float(f) => Ok(Expr::Lit(Py::Float(f))),
            Tok::Str(s) => Ok(Expr::Lit(Py::Str(s))),
            Tok::Name(n) if n == "True" => Ok(Expr::Lit(Py::Bool(true))),
            Tok::Name(n) if n == "False" => Ok(Expr::Lit(Py::Bool(false))),
            Tok::Name(n) => {
                if self.eat_op("(") {
                    let args = self.sequence(")")?.0;
                    Ok(Expr::Call(n, args))
                } else {
                    Ok(Expr::Name(n))
                }
            }
            Tok::Op("(") => {
                let (items, trailing_comma) = self.sequence(")")?;
                if items.len() == 1 && !trailing_comma {
                    Ok(items.into_iter().next().unwrap_or(Expr::List(Vec::new())))
                } else {
                    Ok(Expr::List(items)) // a tuple: a list will do here
                }
            }
            Tok::Op("[") => {
                if self.eat_op("]") {
                    return Ok(Expr::List(Vec::new()));
                }
                let first = self.expr()?;
                if self.eat_name("for") {
                    let var = match self.peek().cloned() {
                        Some(Tok::Name(v)) => v,
                        _ => return Err("expected a name after `for`".to_owned()),
                    };
                    self.pos += 1;
                    if !self.eat_name("in") {
                        return Err("expected `in` in the comprehension".to_owned());
                    }
                    let iter = self.expr()?;
                    let mut conds = Vec::new();
                    while self.eat_name("if") {
                        conds.push(self.expr()?);
                    }
                    self.expect_op("]")?;
                    return Ok(Expr::Comp {
                        elt: Box::new(first),
                        var,
                        iter: Box::new(iter),
                        conds,
                    });
                }
                let mut items = vec![first];
                if self.eat_op(",") {
                    items.extend(self.sequence("]")?.0);
                } else {
                    self.expect_op("]")?;
                }
                Ok(Expr::List(items))
            }
            other => Err(format!("unexpected {other}")),
        }
    }

    /// Comma-separated expressions up to `close`; also says whether a comma ended the list.
    fn sequence(&mut self, close: &str) -> Result<(Vec<Expr>, bool), String> {
        let mut items = Vec::new();
        let mut trailing = false;
        loop {
            if self.eat_op(close) {
                return Ok((items, trailing));
            }
            items.push(self.expr()?);
            trailing = self.eat_op(",");
            if !trailing {
                self.expect_op(close)?;
                return Ok((items, false));
            }
        }
    }
}

impl Expr {
    fn eval(&self, env: &mut Vec<(String, Py)>) -> Result<Py, String> {
        Ok(match self {
            Expr::Lit(v) => v.clone(),
            Expr::Name(n) => match env.iter().rev().find(|(name, _)| name == n) {
                Some((_, v)) => v.clone(),
                None => return Err(format!("name `{n}` is not defined")),
            },
            Expr::List(items) => Py::List(
                items
                    .iter()
                    .map(|e| e.eval(env))
                    .collect::<Result<_, _>>()?,
            ),
            Expr::Comp {
                elt,
                var,
                iter,
                conds,
            } => {
                let Py::List(items) = iter.eval(env)? else {
                    return Err("a comprehension must iterate over a list or range".to_owned());
                };
                let mut out = Vec::with_capacity(items.len());
                'items: for item in items {
                    env.push((var.clone(), item));
                    for cond in conds {
                        let keep = cond.eval(env).map(|v| truthy(&v));
                        match keep {
                            Ok(true) => {}
                            Ok(false) => {
                                env.pop();
                                continue 'items;
                            }
                            Err(e) => {
                                env.pop();
                                return Err(e);
                            }
                        }
                    }
                    let v = elt.eval(env);
                    env.pop();
                    out.push(v?);
                }
                Py::List(out)
            }
            Expr::Bin(op, l, r) => binary(op, l.eval(env)?, r.eval(env)?)?,
            Expr::Cmp(first, rest) => {
                let mut left = first.eval(env)?;
                for (op, e) in rest {
                    let right = e.eval(env)?;
                    if !compare(op, &left, &right)? {
                        return Ok(Py::Bool(false));
                    }
                    left = right;
                }
                Py::Bool(true)
            }
            Expr::Neg(e) => match e.eval(env)? {
                Py::Int(i) => Py::Int(i.checked_neg().ok_or("integer overflow")?),
                Py::Bool(b) => Py::Int(-i64::from(b)),
                Py::Float(f) => Py::Float(-f),
                other => return Err(format!("bad operand type for unary -: '{other}'")),
            },
            Expr::Not(e) => Py::Bool(!truthy(&e.eval(env)?)),
            Expr::And(l, r) => Py::Bool(truthy(&l.eval(env)?) && truthy(&r.eval(env)?)),
            Expr::Or(l, r) => Py::Bool(truthy(&l.eval(env)?) || truthy(&r.eval(env)?)),
            Expr::Call(name, args) => {
                let args: Vec<Py> = args.iter().map(|e| e.eval(env)).collect::<Result<_, _>>()?;
                call(name, args)?
            }
            Expr::Index(seq, index) => {
                let (seq, index) = (seq.eval(env)?, index.eval(env)?);
                let (Py::List(items), Py::Int(i)) = (&seq, &index) else {
                    return Err(format!("'{seq}' object cannot be indexed by '{index}'"));
                };
                let len = items.len() as i64;
                let at = if *i < 0 { i + len } else { *i };
                match usize::try_from(at).ok().and_then(|at| items.get(at)) {
                    Some(v) => v.clone(),
                    None => return Err(format!("list index {i} out of range (length {len})")),
                }
            }
        })
    }
}

fn truthy(v: &Py) -> bool {
    match v {
        Py::Int(i) => *i != 0,
        Py::Float(f) => *f != 0.0,
        Py::Bool(b) => *b,
        Py::Str(s) => !s.is_empty(),
        Py::List(l) => !l.is_empty(),
    }
}

/// A number as int (bools count) or float, for the builtins.
enum Num {
    I(i64),
    F(f64),
}

fn num(v: &Py) -> Option<Num> {
    match v {
        Py::Int(i) => Some(Num::I(*i)),
        Py::Bool(b) => Some(Num::I(i64::from(*b))),
        Py::Float(f) => Some(Num::F(*f)),
        _ => None,
    }
}

fn as_float(n: &Num) -> f64 {
    match n {
        Num::I(i) => *i as f64,
        Num::F(f) => *f,
    }
}

/// A scalar as `tunebox-expr` holds it (`None` for a list).
fn scalar(v: &Py) -> Option<Value<'_>> {
    Some(match v {
        Py::Int(i) => Value::Int(*i),
        Py::Float(f) => Value::Float(*f),
        Py::Bool(b) => Value::Bool(*b),
        Py::Str(s) => Value::Str(s),
        Py::List(_) => return None,
    })
}

/// What Python would say, without the expression around it.
fn python_error(e: tunebox_expr::ExprError) -> String {
    use tunebox_expr::ExprError as E;
    match e {
        E::ZeroDivision { message, .. }
        | E::Overflow { message, .. }
        | E::Type { message, .. }
        | E::Value { message, .. } => message,
        E::IntOverflow { .. } => "integer overflow (ints are 64-bit here)".to_owned(),
        other => other.to_string(),
    }
}

/// `l op r`: lists (`+` concatenates, `*` repeats) and strings (`+`) here, every scalar
/// operation by `tunebox-expr`, so that T1 values and restrictions share one arithmetic.
fn binary(op: &str, l: Py, r: Py) -> Result<Py, String> {
    match (op, &l, &r) {
        ("+", Py::List(a), Py::List(b)) => {
            let mut out = a.clone();
            out.extend(b.iter().cloned());
            return check_len(out);
        }
        ("+", Py::Str(a), Py::Str(b)) => return Ok(Py::Str(format!("{a}{b}"))),
        ("*", Py::List(a), Py::Int(n)) | ("*", Py::Int(n), Py::List(a)) => {
            let n = usize::try_from(*n).unwrap_or(0);
            if a.len().saturating_mul(n) > MAX_LEN {
                return Err(format!("list longer than {MAX_LEN} elements"));
            }
            return Ok(Py::List(
                a.iter().cloned().cycle().take(a.len() * n).collect(),
            ));
        }
        _ => {}
    }
    let (Some(a), Some(b)) = (scalar(&l), scalar(&r)) else {
        return Err(format!(
            "unsupported operand types for {op}: '{l}' and '{r}'"
        ));
    };
    Ok(match operate(op, a, b).map_err(python_error)? {
        Value::Int(i) => Py::Int(i),
        Value::Float(f) => Py::Float(f),
        Value::Bool(b) => Py::Bool(b),
        Value::Str(s) => Py::Str(s.to_owned()),
    })
}

/// `l op r` for a comparison: list equality here, everything else by `tunebox-expr`.
fn compare(op: &str, l: &Py, r: &Py) -> Result<bool, String> {
    match (scalar(l), scalar(r)) {
        (Some(a), Some(b)) => match operate(op, a, b).map_err(python_error)? {
            Value::Bool(b) => Ok(b),
            other => Err(format!("{op} gave {other}, not a bool")),
        },
        _ if op == "==" => Ok(l == r),
        _ if op == "!=" => Ok(l != r),
        _ => Err(format!("'{op}' not supported between '{l}' and '{r}'")),
    }
}

fn check_len(items: Vec<Py>) -> Result<Py, String> {
    if items.len() > MAX_LEN {
        return Err(format!("list longer than {MAX_LEN} elements"));
    }
    Ok(Py::List(items))
}

fn int_arg(v: &Py, name: &str) -> Result<i64, String> {
    match v {
        Py::Int(i) => Ok(*i),
        Py::Bool(b) => Ok(i64::from(*b)),
        other => Err(format!("{name}() wants integers, got '{other}'")),
    }
}

fn call(name: &str, mut args: Vec<Py>) -> Result<Py, String> {
    match (name, args.len()) {
        ("range", 1..=3) => {
            let ints: Vec<i64> = args
                .iter()
                .map(|a| int_arg(a, "range"))
                .collect::<Result<_, _>>()?;
            let (start, stop, step) = match ints[..] {
                [stop] => (0, stop, 1),
                [start, stop] => (start, stop, 1),
                [start, stop, step] => (start, stop, step),
                _ => unreachable!("1 to 3 arguments"),
            };
            if step == 0 {
                return Err("range() arg 3 must not be zero".to_owned());
            }
            let len = if step > 0 {
                (i128::from(stop) - i128::from(start) + i128::from(step) - 1) / i128::from(step)
            } else {
                (i128::from(start) - i128::from(stop) - i128::from(step) - 1) / -i128::from(step)
            };
            if len > MAX_LEN as i128 {
                return Err(format!("range of {len} elements (at most {MAX_LEN})"));
            }
            let len = usize::try_from(len.max(0)).unwrap_or(0);
            Ok(Py::List(
                (0..len).map(|k| Py::Int(start + step * k as i64)).collect(),
            ))
        }
        ("list" | "tuple", 0) => Ok(Py::List(Vec::new())),
        ("list" | "tuple", 1) => match args.pop() {
            Some(Py::List(l)) => Ok(Py::List(l)),
            Some(Py::Str(s)) => Ok(Py::List(s.chars().map(|c| Py::Str(c.into())).collect())),
            Some(other) => Err(format!("'{other}' object is not iterable")),
            None => unreachable!("one argument"),
        },
        ("int", 1) => match &args[0] {
            Py::Float(f) if f.is_finite() => Ok(Py::Int(f.trunc() as i64)),
            Py::Str(s) => s
                .trim()
                .parse()
                .map(Py::Int)
                .map_err(|_| format!("invalid literal for int(): {s:?}")),
            other => int_arg(other, "int").map(Py::Int),
        },
        ("float", 1) => match &args[0] {
            Py::Str(s) => s
                .trim()
                .parse()
                .map(Py::Float)
                .map_err(|_| format!("could not convert string to float: {s:?}")),
            other => num(other)
                .map(|n| Py::Float(as_float(&n)))
                .ok_or_else(|| format!("float() wants a number, got '{other}'")),
        },
        ("abs", 1) => match num(&args[0]) {
            Some(Num::I(i)) => Ok(Py::Int(i.checked_abs().ok_or("integer overflow")?)),
            Some(Num::F(f)) => Ok(Py::Float(f.abs())),
            None => Err(format!("bad operand type for abs(): '{}'", args[0])),
        },
        ("min" | "max", 1..) => {
            let items = match args.len() {
                1 => match args.pop() {
                    Some(Py::List(l)) => l,
                    Some(other) => return Err(format!("'{other}' object is not iterable")),
                    None => unreachable!("one argument"),
                },
                _ => args,
            };
            let mut best: Option<Py> = None;
            for item in items {
                best = Some(match best {
                    None => item,
                    Some(b) => {
                        let better = if name == "min" { "<" } else { ">" };
                        if compare(better, &item, &b)? { item } else { b }
                    }
                });
            }
            best.ok_or_else(|| format!("{name}() arg is an empty sequence"))
        }
        _ => Err(format!(
            "`{name}` with {} argument(s) is not supported (range, list, tuple, int, float, \
             abs, min, max are)",
            args.len()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(text: &str) -> Vec<i64> {
        match eval(text).unwrap() {
            Py::List(l) => l
                .into_iter()
                .map(|v| match v {
                    Py::Int(i) => i,
                    other => panic!("{other:?}"),
                })
                .collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_hub_forms() {
        assert_eq!(ints("[16, 32, 48]"), [16, 32, 48]);
        assert_eq!(ints("[2**i for i in range(0, 6)]"), [1, 2, 4, 8, 16, 32]);
        assert_eq!(
            ints("[i for i in range(1, 11)]"),
            (1..=10).collect::<Vec<_>>()
        );
        let hotspot = ints("[1, 2, 4, 8, 16] + list(range(32, 1024+1, 32))");
        assert_eq!(hotspot.len(), 5 + 32);
        assert_eq!(hotspot[5..8], [32, 64, 96]);
        assert_eq!(*hotspot.last().unwrap(), 1024);
    }

    #[test]
    fn sizes_with_names_and_subscripts() {
        let names = || {
            vec![
                (
                    "ProblemSize".to_owned(),
                    Py::List(vec![Py::Int(4096), Py::Int(2048)]),
                ),
                (
                    "filter_width".to_owned(),
                    Py::List(vec![Py::Int(7), Py::Int(15)]),
                ),
            ]
        };
        let size = "(ProblemSize[0]+max(filter_width)-1) * (ProblemSize[1]+max(filter_width)-1)";
        assert_eq!(
            eval_with(size, names()),
            Ok(Py::Int((4096 + 14) * (2048 + 14)))
        );
        assert_eq!(eval_with("ProblemSize[-1]", names()), Ok(Py::Int(2048)));
        assert!(
            eval_with("ProblemSize[2]", names())
                .unwrap_err()
                .contains("out of range")
        );
        assert!(eval_with("ProblemSize[0][0]", names()).is_err());
        assert!(
            eval_with("Nope[0]", names())
                .unwrap_err()
                .contains("not defined")
        );
    }

    #[test]
    fn python_semantics() {
        assert_eq!(
            ints("[-7 // 2, -7 % 2, 7 % -2, -2**2, 2**3**2]"),
            [-4, 1, -1, -4, 512]
        );
        assert_eq!(ints("list(range(10, 0, -3))"), [10, 7, 4, 1]);
        assert_eq!(ints("[x for x in range(10) if x % 3 == 0 if x]"), [3, 6, 9]);
        assert_eq!(ints("[1, 2] * 2"), [1, 2, 1, 2]);
        assert_eq!(
            ints("[max(1, 5), min([4, 3]), abs(-2), int(2.9)]"),
            [5, 3, 2, 2]
        );
        assert_eq!(
            eval("[0.5, 'a', \"b\", True, 1 < 2 <= 2, 7 / 2, ()]").unwrap(),
            Py::List(vec![
                Py::Float(0.5),
                Py::Str("a".into()),
                Py::Str("b".into()),
                Py::Bool(true),
                Py::Bool(true),
                Py::Float(3.5),
                Py::List(vec![]),
            ])
        );
    }

    #[test]
    fn errors_say_what() {
        assert_eq!(eval("[1, 2").unwrap_err(), "expected `]`, found the end");
        assert_eq!(
            eval("[x for y in range(3)]").unwrap_err(),
            "name `x` is not defined"
        );
        assert!(eval("range(10**9)").unwrap_err().contains("at most"));
        assert!(eval("2**70").unwrap_err().contains("overflow"));
        assert!(eval("np.arange(3)").unwrap_err().contains("unexpected `.`"));
        assert!(eval("[1] + 2").unwrap_err().contains("unsupported operand"));
        assert_eq!(
            eval("1 // 0").unwrap_err(),
            "integer division or modulo by zero"
        );
    }
}
