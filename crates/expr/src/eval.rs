//! [`Expr`] (parsed) and [`Compiled`] (names bound to slots, ready to evaluate).

use std::fmt;

use crate::builtins::{self, Func};
use crate::error::ExprError;
use crate::ops::{self, BinOp, CmpOp, Fault, FaultKind};
use crate::parse::{self, Kind, Node, Span};
use crate::value::Value;

/// A parsed Python expression, not yet bound to values.
///
/// Parse once with [`Expr::parse`], check its [`variables`](Expr::variables) against the
/// names at hand, then [`bind`](Expr::bind) it to the order in which values will be given.
#[derive(Debug, Clone)]
pub struct Expr {
    text: String,
    root: Node,
    variables: Vec<String>,
}

impl Expr {
    /// Parses `text` as a Python expression.
    ///
    /// # Errors
    ///
    /// [`ExprError::Parse`], with the column, what was found and what was expected there, when
    /// the text is not Python or uses what this crate does not support (`None`, `is`, calls of
    /// unknown functions, a list outside `in` / `min` / `max`, a complex literal).
    pub fn parse(text: &str) -> Result<Expr, ExprError> {
        let parsed = parse::parse(text)?;
        Ok(Expr {
            text: text.to_owned(),
            root: parsed.root,
            variables: parsed.variables,
        })
    }

    /// The expression's text, as given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The names the expression reads, each once, in order of first use. Function names
    /// (`min`, `math.ceil`) and `math.pi`/`math.e`/`math.inf` are not variables.
    pub fn variables(&self) -> &[String] {
        &self.variables
    }

    /// Resolves each variable to its position in `names`: [`Compiled::eval`] will then take
    /// one value per name, in that order. `names` may hold names the expression does not use.
    ///
    /// # Errors
    ///
    /// [`ExprError::UnknownName`] for the first variable that is not in `names`.
    pub fn bind<S: AsRef<str>>(&self, names: &[S]) -> Result<Compiled, ExprError> {
        let mut slots = Vec::with_capacity(self.variables.len());
        for variable in &self.variables {
            let Some(slot) = names.iter().position(|n| n.as_ref() == variable) else {
                return Err(ExprError::UnknownName {
                    text: self.text.clone(),
                    name: variable.clone(),
                    known: names.iter().map(|n| n.as_ref().to_owned()).collect(),
                });
            };
            slots.push(slot);
        }
        let mut root = self.root.clone();
        remap(&mut root, &slots);
        Ok(Compiled {
            text: self.text.clone(),
            root,
            slots,
            arity: names.len(),
        })
    }
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn remap(node: &mut Node, slots: &[usize]) {
    match &mut node.kind {
        Kind::Var(i) => *i = slots[*i],
        Kind::Int(_) | Kind::Float(_) | Kind::Bool(_) | Kind::Str(_) => {}
        Kind::Unary(_, a) | Kind::Not(a) => remap(a, slots),
        Kind::Binary(_, a, b) | Kind::And(a, b) | Kind::Or(a, b) => {
            remap(a, slots);
            remap(b, slots);
        }
        Kind::Compare(first, links) => {
            remap(first, slots);
            links.iter_mut().for_each(|l| remap(&mut l.right, slots));
        }
        Kind::IfElse { then, cond, other } => {
            remap(then, slots);
            remap(cond, slots);
            remap(other, slots);
        }
        Kind::Seq(items) | Kind::Call(_, items) => items.iter_mut().for_each(|n| remap(n, slots)),
        Kind::Comp { .. } | Kind::Index(..) => {
            unreachable!("comprehensions and subscripts are rejected when parsing a restriction")
        }
    }
}

/// An expression bound to an order of names: evaluate it over one value per name.
///
/// Evaluating walks the tree without allocating (except `round(x, n)` of a float, and the
/// error path), so it can be called once per configuration of a large space.
#[derive(Debug, Clone)]
pub struct Compiled {
    text: String,
    root: Node,
    slots: Vec<usize>,
    arity: usize,
}

/// A fault and the sub-expression it happened in; boxed, so that the `Result` of every step
/// stays small on the path that succeeds.
struct Located(Box<(Fault, Span)>);

type EvalResult<'a> = Result<Value<'a>, Located>;

fn at<T>(span: Span) -> impl FnOnce(Fault) -> Result<T, Located> {
    move |fault| Err(Located(Box::new((fault, span))))
}

impl Compiled {
    /// The expression's text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// For each of the expression's [variables](Expr::variables), its position among the
    /// names it was bound to: the expression can be evaluated as soon as these are known.
    pub fn slots(&self) -> &[usize] {
        &self.slots
    }

    /// Evaluates the expression with `values[i]` for the `i`-th name given to
    /// [`Expr::bind`], with Python's semantics.
    ///
    /// # Errors
    ///
    /// [`ExprError::BindingCount`] when `values` does not hold one value per bound name; the
    /// evaluation errors ([`ExprError::ZeroDivision`], [`ExprError::Type`], [`ExprError::Value`],
    /// [`ExprError::Overflow`], [`ExprError::IntOverflow`], [`ExprError::Unsupported`]) name the
    /// sub-expression that failed. As in Python, `and`, `or` and `x if c else y` do not
    /// evaluate the operand they skip, so `b != 0 and a % b == 0` never divides by zero.
    pub fn eval<'a>(&'a self, values: &[Value<'a>]) -> Result<Value<'a>, ExprError> {
        if values.len() != self.arity {
            return Err(ExprError::BindingCount {
                text: self.text.clone(),
                expected: self.arity,
                got: values.len(),
            });
        }
        self.node(&self.root, values)
            .map_err(|located| self.error(located))
    }

    /// Evaluates the expression and takes Python's truthiness of the result, as `if` and
    /// Kernel Tuner's restrictions do.
    ///
    /// # Errors
    ///
    /// As [`Compiled::eval`].
    pub fn eval_bool(&self, values: &[Value<'_>]) -> Result<bool, ExprError> {
        if values.len() != self.arity {
            return Err(ExprError::BindingCount {
                text: self.text.clone(),
                expected: self.arity,
                got: values.len(),
            });
        }
        match self.node(&self.root, values) {
            Ok(v) => Ok(v.truthy()),
            Err(located) => Err(self.error(located)),
        }
    }

    fn error(&self, Located(located): Located) -> ExprError {
        let (fault, span) = *located;
        let part = self.text[span.start as usize..span.end as usize].to_owned();
        fault_error(fault, self.text.clone(), part)
    }

    fn node<'a>(&'a self, node: &'a Node, values: &[Value<'a>]) -> EvalResult<'a> {
        match &node.kind {
            Kind::Int(i) => Ok(Value::Int(*i)),
            Kind::Float(f) => Ok(Value::Float(*f)),
            Kind::Bool(b) => Ok(Value::Bool(*b)),
            Kind::Str(s) => Ok(Value::Str(s)),
            Kind::Var(slot) => Ok(values[*slot]),
            Kind::Unary(op, a) => {
                let a = self.node(a, values)?;
                ops::unary(*op, a).or_else(at(node.span))
            }
            Kind::Not(a) => Ok(Value::Bool(!self.node(a, values)?.truthy())),
            Kind::Binary(op, a, b) => {
                let a = self.node(a, values)?;
                let b = self.node(b, values)?;
                // The common case, inline: ints that do not overflow.
                if let (Value::Int(x), Value::Int(y)) = (a, b) {
                    let fast = match op {
                        BinOp::Add => x.checked_add(y),
                        BinOp::Sub => x.checked_sub(y),
                        BinOp::Mul => x.checked_mul(y),
                        BinOp::Mod if y > 0 => Some(x.rem_euclid(y)),
                        _ => None,
                    };
                    if let Some(v) = fast {
                        return Ok(Value::Int(v));
                    }
                }
                ops::binary(*op, a, b).or_else(at(node.span))
            }
            Kind::And(a, b) => {
                let a = self.node(a, values)?;
                if a.truthy() {
                    self.node(b, values)
                } else {
                    Ok(a)
                }
            }
            Kind::Or(a, b) => {
                let a = self.node(a, values)?;
                if a.truthy() {
                    Ok(a)
                } else {
                    self.node(b, values)
                }
            }
            Kind::IfElse { then, cond, other } => {
                if self.node(cond, values)?.truthy() {
                    self.node(then, values)
                } else {
                    self.node(other, values)
                }
            }
            Kind::Compare(first, links) => {
                let mut left = self.node(first, values)?;
                for link in links.iter() {
                    let (holds, right) = match link.op {
                        CmpOp::In | CmpOp::NotIn => {
                            let (found, right) = match &link.right.kind {
                                // A list or tuple is always the last operand (checked when
                                // parsing), so `right` is not read again.
                                Kind::Seq(items) => (self.in_seq(left, items, values)?, left),
                                _ => {
                                    let right = self.node(&link.right, values)?;
                                    (in_value(left, right).or_else(at(link.span))?, right)
                                }
                            };
                            (found == (link.op == CmpOp::In), right)
                        }
                        op => {
                            let right = self.node(&link.right, values)?;
                            let holds = match (left, right) {
                                (Value::Int(x), Value::Int(y)) => match op {
                                    CmpOp::Lt => x < y,
                                    CmpOp::Le => x <= y,
                                    CmpOp::Gt => x > y,
                                    CmpOp::Ge => x >= y,
                                    CmpOp::Eq => x == y,
                                    _ => x != y,
                                },
                                _ => ops::compare(op, left, right).or_else(at(link.span))?,
                            };
                            (holds, right)
                        }
                    };
                    if !holds {
                        return Ok(Value::Bool(false));
                    }
                    left = right;
                }
                Ok(Value::Bool(true))
            }
            Kind::Seq(_) => unreachable!("the parser only accepts lists after `in` and in min/max"),
            Kind::Comp { .. } | Kind::Index(..) => {
                unreachable!("comprehensions and subscripts are rejected when parsing")
            }
            Kind::Call(func, args) => self.call(*func, args, values, node.span),
        }
    }

    /// `needle in [items]`: every item is evaluated, as Python builds the list before
    /// searching it.
    fn in_seq<'a>(
        &'a self,
        needle: Value<'a>,
        items: &'a [Node],
        values: &[Value<'a>],
    ) -> Result<bool, Located> {
        let mut found = false;
        for item in items {
            let item = self.node(item, values)?;
            found = found || ops::equal(needle, item);
        }
        Ok(found)
    }

    fn call<'a>(
        &'a self,
        func: Func,
        args: &'a [Node],
        values: &[Value<'a>],
        span: Span,
    ) -> EvalResult<'a> {
        if let Func::Min | Func::Max = func {
            return self.extreme(func, args, values, span);
        }
        let a = self.node(&args[0], values)?;
        let b = match args.get(1) {
            Some(n) => Some(self.node(n, values)?),
            None => None,
        };
        builtins::call(func, a, b).or_else(at(span))
    }

    fn extreme<'a>(
        &'a self,
        func: Func,
        args: &'a [Node],
        values: &[Value<'a>],
        span: Span,
    ) -> EvalResult<'a> {
        let items: &[Node] = match args {
            [one] => match &one.kind {
                Kind::Seq(items) => items,
                _ => {
                    let v = self.node(one, values)?;
                    let fault = match v {
                        Value::Str(_) => {
                            Fault::unsupported("min()/max() over the characters of a string")
                        }
                        _ => {
                            Fault::type_error(format!("'{}' object is not iterable", v.type_name()))
                        }
                    };
                    return at(span)(fault);
                }
            },
            many => many,
        };
        // Python evaluates every argument, then compares them in order: the first failed
        // comparison is reported only if every argument could be evaluated.
        let mut best: Option<Value<'a>> = None;
        let mut failed: Option<Fault> = None;
        for item in items {
            let v = self.node(item, values)?;
            if failed.is_some() {
                continue;
            }
            best = match best {
                None => Some(v),
                Some(b) => match builtins::prefer(func, v, b) {
                    Ok(true) => Some(v),
                    Ok(false) => Some(b),
                    Err(fault) => {
                        failed = Some(fault);
                        Some(b)
                    }
                },
            };
        }
        if let Some(fault) = failed {
            return at(span)(fault);
        }
        match best {
            Some(v) => Ok(v),
            None => at(span)(Fault::value_error(if func == Func::Min {
                "min() arg is an empty sequence"
            } else {
                "max() arg is an empty sequence"
            })),
        }
    }
}

/// `needle in haystack` for a haystack that is a value: only a string (substring) is a
/// container here.
fn in_value(needle: Value<'_>, haystack: Value<'_>) -> Result<bool, Fault> {
    match (needle, haystack) {
        (Value::Str(n), Value::Str(h)) => Ok(h.contains(n)),
        (n, Value::Str(_)) => Err(Fault::type_error(format!(
            "'in <string>' requires string as left operand, not {}",
            n.type_name()
        ))),
        (_, h) => Err(Fault::type_error(format!(
            "argument of type '{}' is not iterable",
            h.type_name()
        ))),
    }
}

/// The error of `fault` in the expression `text`, at its sub-expression `part`.
pub(crate) fn fault_error(fault: Fault, text: String, part: String) -> ExprError {
    let message = fault.message.into_owned();
    match fault.kind {
        FaultKind::ZeroDivision => ExprError::ZeroDivision {
            text,
            part,
            message,
        },
        FaultKind::Overflow => ExprError::Overflow {
            text,
            part,
            message,
        },
        FaultKind::Type => ExprError::Type {
            text,
            part,
            message,
        },
        FaultKind::Value => ExprError::Value {
            text,
            part,
            message,
        },
        FaultKind::IntOverflow => ExprError::IntOverflow { text, part },
        FaultKind::Index => ExprError::Index {
            text,
            part,
            message,
        },
        FaultKind::Unsupported => ExprError::Unsupported {
            text,
            part,
            what: message,
        },
    }
}

/// Python's `a OP b` for one operator of the subset: arithmetic and bitwise (`+ - * / // % **
/// & | ^ << >>`, a `bool` for the comparisons `< <= > >= == !=`), with the same rules as a
/// [`Compiled`] expression. For evaluators of richer Python (lists, comprehensions) that keep
/// one arithmetic.
///
/// ```
/// use tunebox_expr::{operate, Value};
///
/// assert_eq!(operate("//", Value::Int(-7), Value::Int(2))?, Value::Int(-4));
/// assert_eq!(operate("<", Value::Int(1), Value::Float(1.5))?, Value::Bool(true));
/// assert_eq!(
///     operate("%", Value::Int(1), Value::Int(0)).unwrap_err().to_string(),
///     "`1 % 0`: integer modulo by zero in `1 % 0`"
/// );
/// # Ok::<(), tunebox_expr::ExprError>(())
/// ```
///
/// # Errors
///
/// What Python would raise (as for [`Compiled::eval`]), and [`ExprError::Unsupported`] for an
/// operator outside the list.
pub fn operate<'a>(op: &str, a: Value<'a>, b: Value<'a>) -> Result<Value<'a>, ExprError> {
    let text = format!("{a} {op} {b}");
    let result = match op {
        "<" | "<=" | ">" | ">=" | "==" | "!=" => {
            let cmp = match op {
                "<" => CmpOp::Lt,
                "<=" => CmpOp::Le,
                ">" => CmpOp::Gt,
                ">=" => CmpOp::Ge,
                "==" => CmpOp::Eq,
                _ => CmpOp::Ne,
            };
            ops::compare(cmp, a, b).map(Value::Bool)
        }
        _ => {
            let bin = match op {
                "+" => BinOp::Add,
                "-" => BinOp::Sub,
                "*" => BinOp::Mul,
                "/" => BinOp::Div,
                "//" => BinOp::FloorDiv,
                "%" => BinOp::Mod,
                "**" => BinOp::Pow,
                "&" => BinOp::BitAnd,
                "|" => BinOp::BitOr,
                "^" => BinOp::BitXor,
                "<<" => BinOp::Shl,
                ">>" => BinOp::Shr,
                _ => {
                    return Err(fault_error(
                        Fault::unsupported("this operator"),
                        text.clone(),
                        text,
                    ));
                }
            };
            ops::binary(bin, a, b)
        }
    };
    result.map_err(|fault| fault_error(fault, text.clone(), text))
}
