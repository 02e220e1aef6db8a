//! [`eval`]: an expression of lists as well as scalars, evaluated once, as Python's `eval(text,
//! names)` would. This is how a T1 file's `Values` (`"[2**i for i in range(0, 6)]"`) and sizes
//! (`"ProblemSize[0] + max(filter_width) - 1"`) are read; the scalar arithmetic is the same
//! code that evaluates restrictions ([`crate::Compiled`]).

use std::fmt;

use crate::builtins::{self, Func};
use crate::error::ExprError;
use crate::eval::fault_error;
use crate::ops::{self, BinOp, CmpOp, Fault, FaultKind};
use crate::parse::{self, Clause, Kind, Node, Span};
use crate::value::Value;

/// Most elements a list may have: a guard against `range(10**12)`.
pub const MAX_LEN: usize = 10_000_000;

/// A Python object of the subset [`eval`] understands: a scalar or a list (tuples are lists
/// here). Unlike [`Value`], it owns its strings and lists.
///
/// `==` (the derived [`PartialEq`]) is structural, as for [`Value`]; [`fmt::Display`] writes
/// Python's `repr` (`[1, 2.0, 'a']`).
#[derive(Debug, Clone, PartialEq)]
pub enum Object {
    /// `True` or `False`.
    Bool(bool),
    /// An int (`i64`).
    Int(i64),
    /// A float.
    Float(f64),
    /// A string.
    Str(String),
    /// A list, or a tuple.
    List(Vec<Object>),
}

impl Object {
    /// The Python type name: `bool`, `int`, `float`, `str` or `list`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Object::List(_) => "list",
            scalar => scalar.value().map_or("list", Value::type_name),
        }
    }

    /// The object as a [`Value`] (borrowing its string); `None` for a list.
    pub fn value(&self) -> Option<Value<'_>> {
        Some(match self {
            Object::Bool(b) => Value::Bool(*b),
            Object::Int(i) => Value::Int(*i),
            Object::Float(f) => Value::Float(*f),
            Object::Str(s) => Value::Str(s),
            Object::List(_) => return None,
        })
    }

    fn truthy(&self) -> bool {
        match self {
            Object::List(items) => !items.is_empty(),
            scalar => scalar.value().is_some_and(Value::truthy),
        }
    }
}

impl From<Value<'_>> for Object {
    fn from(v: Value<'_>) -> Object {
        match v {
            Value::Bool(b) => Object::Bool(b),
            Value::Int(i) => Object::Int(i),
            Value::Float(f) => Object::Float(f),
            Value::Str(s) => Object::Str(s.to_owned()),
        }
    }
}

impl fmt::Display for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Object::List(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
            scalar => match scalar.value() {
                Some(v) => write!(f, "{v}"),
                None => Ok(()),
            },
        }
    }
}

/// Evaluates `text` as Python's `eval(text, names)` would, lists included: list and tuple
/// displays, comprehensions (`[f(x) for x in it if c]`, several `for`s allowed), subscripts
/// (`a[i]`, `a[-1]`), `range`, `list`, `tuple`, `len`, `min`/`max` over a list, `+` and `*`
/// on lists and strings, `==`, `<`, `in` on lists; everything a restriction may use besides
/// (the builtins, `math.`, Python's arithmetic).
///
/// ```
/// use tunebox_expr::{Object, eval};
///
/// let ints = |v: &[i64]| Object::List(v.iter().map(|&i| Object::Int(i)).collect());
/// assert_eq!(eval("[2**i for i in range(0, 6)]", &[])?, ints(&[1, 2, 4, 8, 16, 32]));
/// assert_eq!(eval("[1, 2] + list(range(32, 96+1, 32))", &[])?, ints(&[1, 2, 32, 64, 96]));
/// let names = [("ProblemSize", ints(&[4096, 2048])), ("w", ints(&[7, 15]))];
/// assert_eq!(eval("ProblemSize[0] + max(w) - 1", &names)?, Object::Int(4110));
/// let err = eval("ProblemSize[2]", &names).unwrap_err();
/// assert_eq!(err.python_exception(), Some("IndexError"));
/// # Ok::<(), tunebox_expr::ExprError>(())
/// ```
///
/// # Errors
///
/// [`ExprError::Parse`] for text that is not an expression of the subset;
/// [`ExprError::UnknownName`] for a name that `names` does not bind (Python's `NameError`);
/// what Python would raise otherwise (`TypeError` for `[1] + 2`, `IndexError`, …), and
/// [`ExprError::Unsupported`] for a list longer than [`MAX_LEN`] elements.
pub fn eval(text: &str, names: &[(&str, Object)]) -> Result<Object, ExprError> {
    let parsed = parse::parse_objects(text)?;
    let mut slots: Vec<Option<Object>> = parsed
        .variables
        .iter()
        .map(|v| names.iter().find(|(n, _)| n == v).map(|(_, o)| o.clone()))
        .collect();
    let evaluator = Evaluator {
        text,
        variables: &parsed.variables,
        names,
    };
    evaluator.node(&parsed.root, &mut slots)
}

struct Evaluator<'t> {
    text: &'t str,
    variables: &'t [String],
    names: &'t [(&'t str, Object)],
}

type Slots = Vec<Option<Object>>;

impl Evaluator<'_> {
    fn fail(&self, fault: Fault, span: Span) -> ExprError {
        let part = self.text[span.start as usize..span.end as usize].to_owned();
        fault_error(fault, self.text.to_owned(), part)
    }

    fn scalar<'o>(&self, o: &'o Object, span: Span, what: &str) -> Result<Value<'o>, ExprError> {
        o.value().ok_or_else(|| {
            self.fail(
                Fault::type_error(format!("{what}: '{}'", o.type_name())),
                span,
            )
        })
    }

    fn node(&self, node: &Node, slots: &mut Slots) -> Result<Object, ExprError> {
        let span = node.span;
        Ok(match &node.kind {
            Kind::Int(i) => Object::Int(*i),
            Kind::Float(f) => Object::Float(*f),
            Kind::Bool(b) => Object::Bool(*b),
            Kind::Str(s) => Object::Str(s.to_string()),
            Kind::Var(i) => match &slots[*i] {
                Some(o) => o.clone(),
                None => {
                    return Err(ExprError::UnknownName {
                        text: self.text.to_owned(),
                        name: self.variables[*i].clone(),
                        known: self.names.iter().map(|(n, _)| (*n).to_owned()).collect(),
                    });
                }
            },
            Kind::Unary(op, a) => {
                let a = self.node(a, slots)?;
                let v = self.scalar(&a, span, "bad operand type for a unary operator")?;
                ops::unary(*op, v).map_err(|f| self.fail(f, span))?.into()
            }
            Kind::Not(a) => Object::Bool(!self.node(a, slots)?.truthy()),
            Kind::Binary(op, a, b) => {
                let (a, b) = (self.node(a, slots)?, self.node(b, slots)?);
                self.binary(*op, a, b, span)?
            }
            Kind::And(a, b) => {
                let a = self.node(a, slots)?;
                if a.truthy() { self.node(b, slots)? } else { a }
            }
            Kind::Or(a, b) => {
                let a = self.node(a, slots)?;
                if a.truthy() { a } else { self.node(b, slots)? }
            }
            Kind::IfElse { then, cond, other } => {
                if self.node(cond, slots)?.truthy() {
                    self.node(then, slots)?
                } else {
                    self.node(other, slots)?
                }
            }
            Kind::Compare(first, links) => {
                let mut left = self.node(first, slots)?;
                for link in links.iter() {
                    let right = self.node(&link.right, slots)?;
                    if !self.compare(link.op, &left, &right, link.span)? {
                        return Ok(Object::Bool(false));
                    }
                    left = right;
                }
                Object::Bool(true)
            }
            Kind::Seq(items) => Object::List(
                items
                    .iter()
                    .map(|n| self.node(n, slots))
                    .collect::<Result<_, _>>()?,
            ),
            Kind::Call(func, args) => {
                let args: Vec<Object> = args
                    .iter()
                    .map(|n| self.node(n, slots))
                    .collect::<Result<_, _>>()?;
                self.call(*func, args, span)?
            }
            Kind::Comp { elt, clauses } => {
                let mut out = Vec::new();
                self.comprehension(elt, clauses, slots, &mut out)?;
                Object::List(out)
            }
            Kind::Index(seq, index) => {
                let (seq, index) = (self.node(seq, slots)?, self.node(index, slots)?);
                self.index(seq, &index, span)?
            }
        })
    }

    /// The items of clause `clauses[0]` and the clauses after it, each `elt` pushed onto `out`.
    /// A loop variable keeps no value after its comprehension, as in Python 3.
    fn comprehension(
        &self,
        elt: &Node,
        clauses: &[Clause],
        slots: &mut Slots,
        out: &mut Vec<Object>,
    ) -> Result<(), ExprError> {
        let Some((clause, rest)) = clauses.split_first() else {
            let item = self.node(elt, slots)?;
            return self.push(out, item, elt.span);
        };
        let items = self.iterate(self.node(&clause.iter, slots)?, clause.iter.span)?;
        let saved = slots[clause.var].take();
        let mut result = Ok(());
        'items: for item in items {
            slots[clause.var] = Some(item);
            for cond in clause.conds.iter() {
                match self.node(cond, slots) {
                    Ok(keep) if keep.truthy() => {}
                    Ok(_) => continue 'items,
                    Err(e) => {
                        result = Err(e);
                        break 'items;
                    }
                }
            }
            if let Err(e) = self.comprehension(elt, rest, slots, out) {
                result = Err(e);
                break;
            }
        }
        slots[clause.var] = saved;
        result
    }

    fn push(&self, out: &mut Vec<Object>, item: Object, span: Span) -> Result<(), ExprError> {
        if out.len() >= MAX_LEN {
            return Err(self.fail(too_long(), span));
        }
        out.push(item);
        Ok(())
    }

    /// The items of an iterable: a list's, or a string's characters.
    fn iterate(&self, o: Object, span: Span) -> Result<Vec<Object>, ExprError> {
        match o {
            Object::List(items) => Ok(items),
            Object::Str(s) => Ok(s.chars().map(|c| Object::Str(c.into())).collect()),
            other => Err(self.fail(
                Fault::type_error(format!("'{}' object is not iterable", other.type_name())),
                span,
            )),
        }
    }

    fn binary(&self, op: BinOp, a: Object, b: Object, span: Span) -> Result<Object, ExprError> {
        match (op, &a, &b) {
            (BinOp::Add, Object::List(x), Object::List(y)) => {
                if x.len() + y.len() > MAX_LEN {
                    return Err(self.fail(too_long(), span));
                }
                let mut out = x.clone();
                out.extend(y.iter().cloned());
                return Ok(Object::List(out));
            }
            (BinOp::Add, Object::Str(x), Object::Str(y)) => return Ok(Object::Str(x.clone() + y)),
            (BinOp::Mul, Object::List(_) | Object::Str(_), Object::Int(_) | Object::Bool(_))
            | (BinOp::Mul, Object::Int(_) | Object::Bool(_), Object::List(_) | Object::Str(_)) => {
                return self.repeat(a, b, span);
            }
            _ => {}
        }
        match (a.value(), b.value()) {
            (Some(x), Some(y)) => Ok(ops::binary(op, x, y)
                .map_err(|f| self.fail(f, span))?
                .into()),
            _ => Err(self.fail(
                Fault::type_error(format!(
                    "unsupported operand type(s) for {}: '{}' and '{}'",
                    op.symbol(),
                    a.type_name(),
                    b.type_name()
                )),
                span,
            )),
        }
    }

    /// `seq * n` or `n * seq`, for a list or a string: `seq` repeated (empty for `n <= 0`).
    fn repeat(&self, a: Object, b: Object, span: Span) -> Result<Object, ExprError> {
        let (seq, n) = match (a, b) {
            (n @ (Object::Int(_) | Object::Bool(_)), seq) => (seq, n),
            (seq, n) => (seq, n),
        };
        let n = match n {
            Object::Int(i) => usize::try_from(i).unwrap_or(0),
            Object::Bool(b) => usize::from(b),
            _ => unreachable!("checked by the caller"),
        };
        match seq {
            Object::List(items) => {
                if items.len().saturating_mul(n) > MAX_LEN {
                    return Err(self.fail(too_long(), span));
                }
                let len = items.len() * n;
                Ok(Object::List(items.into_iter().cycle().take(len).collect()))
            }
            Object::Str(s) => {
                if s.len().saturating_mul(n) > MAX_LEN {
                    return Err(self.fail(too_long(), span));
                }
                Ok(Object::Str(s.repeat(n)))
            }
            _ => unreachable!("checked by the caller"),
        }
    }

    fn compare(&self, op: CmpOp, a: &Object, b: &Object, span: Span) -> Result<bool, ExprError> {
        match op {
            CmpOp::In | CmpOp::NotIn => {
                let found = match b {
                    Object::List(items) => items.iter().any(|item| python_eq(a, item)),
                    _ => match (a.value(), b.value()) {
                        (Some(Value::Str(n)), Some(Value::Str(h))) => h.contains(n),
                        _ => {
                            let message = match b {
                                Object::Str(_) => format!(
                                    "'in <string>' requires string as left operand, not {}",
                                    a.type_name()
                                ),
                                _ => {
                                    format!("argument of type '{}' is not iterable", b.type_name())
                                }
                            };
                            return Err(self.fail(Fault::type_error(message), span));
                        }
                    },
                };
                Ok(found == (op == CmpOp::In))
            }
            CmpOp::Eq => Ok(python_eq(a, b)),
            CmpOp::Ne => Ok(!python_eq(a, b)),
            _ => match (a, b) {
                (Object::List(x), Object::List(y)) => self.compare_lists(op, x, y, span),
                _ => match (a.value(), b.value()) {
                    (Some(x), Some(y)) => ops::compare(op, x, y).map_err(|f| self.fail(f, span)),
                    _ => Err(self.fail(
                        Fault::type_error(format!(
                            "'{}' not supported between instances of '{}' and '{}'",
                            op.symbol(),
                            a.type_name(),
                            b.type_name()
                        )),
                        span,
                    )),
                },
            },
        }
    }

    /// Python's ordering of lists: by the first items that differ, else by length.
    fn compare_lists(
        &self,
        op: CmpOp,
        x: &[Object],
        y: &[Object],
        span: Span,
    ) -> Result<bool, ExprError> {
        match x.iter().zip(y).find(|(a, b)| !python_eq(a, b)) {
            Some((a, b)) => self.compare(op, a, b, span),
            None => Ok(match op {
                CmpOp::Lt => x.len() < y.len(),
                CmpOp::Le => x.len() <= y.len(),
                CmpOp::Gt => x.len() > y.len(),
                _ => x.len() >= y.len(),
            }),
        }
    }

    fn index(&self, seq: Object, index: &Object, span: Span) -> Result<Object, ExprError> {
        let items = match seq {
            Object::List(items) => items,
            Object::Str(s) => s.chars().map(|c| Object::Str(c.into())).collect(),
            other => {
                return Err(self.fail(
                    Fault::type_error(format!(
                        "'{}' object is not subscriptable",
                        other.type_name()
                    )),
                    span,
                ));
            }
        };
        let i = match index {
            Object::Int(i) => *i,
            Object::Bool(b) => i64::from(*b),
            other => {
                return Err(self.fail(
                    Fault::type_error(format!(
                        "indices must be integers, not {}",
                        other.type_name()
                    )),
                    span,
                ));
            }
        };
        let len = items.len() as i64;
        let at = if i < 0 { i + len } else { i };
        match usize::try_from(at).ok().filter(|&at| at < items.len()) {
            Some(at) => Ok(items.into_iter().nth(at).expect("in range")),
            None => Err(self.fail(Fault::new(FaultKind::Index, "index out of range"), span)),
        }
    }

    fn call(&self, func: Func, mut args: Vec<Object>, span: Span) -> Result<Object, ExprError> {
        match func {
            Func::Range => self.range(&args, span),
            Func::List | Func::Tuple => match args.pop() {
                None => Ok(Object::List(Vec::new())),
                Some(o) => self.iterate(o, span).map(Object::List),
            },
            Func::Len => match &args[0] {
                Object::List(items) => Ok(Object::Int(items.len() as i64)),
                Object::Str(s) => Ok(Object::Int(s.chars().count() as i64)),
                other => Err(self.fail(
                    Fault::type_error(format!(
                        "object of type '{}' has no len()",
                        other.type_name()
                    )),
                    span,
                )),
            },
            Func::Min | Func::Max => {
                let items = if args.len() == 1 {
                    let one = args.pop().expect("one argument");
                    self.iterate(one, span)?
                } else {
                    args
                };
                let mut best: Option<Object> = None;
                for item in items {
                    best = Some(match best {
                        None => item,
                        Some(b) => {
                            let op = if func == Func::Min {
                                CmpOp::Lt
                            } else {
                                CmpOp::Gt
                            };
                            if self.compare(op, &item, &b, span)? {
                                item
                            } else {
                                b
                            }
                        }
                    });
                }
                best.ok_or_else(|| {
                    self.fail(
                        Fault::value_error(if func == Func::Min {
                            "min() arg is an empty sequence"
                        } else {
                            "max() arg is an empty sequence"
                        }),
                        span,
                    )
                })
            }
            _ => {
                let what = format!("{}() wants a number", func.name());
                let a = self.scalar(&args[0], span, &what)?;
                let b = match args.get(1) {
                    Some(o) => Some(self.scalar(o, span, &what)?),
                    None => None,
                };
                Ok(builtins::call(func, a, b)
                    .map_err(|f| self.fail(f, span))?
                    .into())
            }
        }
    }

    /// `range(stop)`, `range(start, stop[, step])` as a list.
    fn range(&self, args: &[Object], span: Span) -> Result<Object, ExprError> {
        let mut ints = Vec::with_capacity(args.len());
        for a in args {
            ints.push(match a {
                Object::Int(i) => *i,
                Object::Bool(b) => i64::from(*b),
                other => {
                    return Err(self.fail(
                        Fault::type_error(format!(
                            "'{}' object cannot be interpreted as an integer",
                            other.type_name()
                        )),
                        span,
                    ));
                }
            });
        }
        let (start, stop, step) = match ints[..] {
            [stop] => (0, stop, 1),
            [start, stop] => (start, stop, 1),
            [start, stop, step] => (start, stop, step),
            _ => unreachable!("the parser checked 1 to 3 arguments"),
        };
        if step == 0 {
            return Err(self.fail(Fault::value_error("range() arg 3 must not be zero"), span));
        }
        let (start, stop, step) = (i128::from(start), i128::from(stop), i128::from(step));
        let len = if step > 0 {
            (stop - start + step - 1) / step
        } else {
            (start - stop - step - 1) / -step
        }
        .max(0);
        if len > MAX_LEN as i128 {
            return Err(self.fail(too_long(), span));
        }
        Ok(Object::List(
            (0..len)
                .map(|k| Object::Int((start + step * k) as i64))
                .collect(),
        ))
    }
}

fn too_long() -> Fault {
    Fault::new(
        FaultKind::Unsupported,
        format!("a list of more than {MAX_LEN} elements"),
    )
}

/// Python's `==` on objects: numbers by value, strings by text, lists item by item.
fn python_eq(a: &Object, b: &Object) -> bool {
    match (a, b) {
        (Object::List(x), Object::List(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| python_eq(a, b))
        }
        _ => match (a.value(), b.value()) {
            (Some(x), Some(y)) => ops::equal(x, y),
            _ => false,
        },
    }
}
