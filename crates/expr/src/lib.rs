//! Python expressions for tuning restrictions and metrics, evaluated as Python's `eval` would.
//!
//! Kernel Tuner states a search space's restrictions (`"32 <= block_size_x * block_size_y <=
//! 1024"`) and its metrics as Python expressions; the FAIR benchmark hub's T1 files do the
//! same. This crate parses that subset of Python once, resolves names to positions once, and
//! evaluates over many bindings without allocating, giving the answers Python gives: chained
//! comparisons, true division `/`, floor division and `%` with Python's signs, exact int/float
//! comparison, `**`, `in` over list and tuple literals, bit operators, truthiness, `and`/`or`
//! returning an operand, `x if c else y`, and the builtins restrictions use.
//!
//! - [`Expr`]: a parsed expression; [`Expr::variables`] lists the names it reads.
//! - [`Compiled`]: an [`Expr`] bound to an order of names ([`Expr::bind`]);
//!   [`Compiled::eval`] and [`Compiled::eval_bool`] evaluate it over one [`Value`] per name.
//! - [`Value`]: `bool`, `int` (`i64`), `float`, `str`; `Copy`, strings borrowed.
//! - [`ExprError`]: the one error type; parse errors give the column and what was expected,
//!   evaluation errors name the sub-expression and the exception Python would raise.
//! - [`eval`]: an expression of lists as well as scalars (list displays, comprehensions,
//!   subscripts, `range`, `list`, `len`), evaluated once into an [`Object`]: how a T1 file's
//!   value lists and sizes are read, with the same arithmetic as restrictions.
//!
//! It is meant for the tuning engine (`tunebox-tune`) to evaluate restrictions, metrics, launch
//! geometry and T1 value lists; it depends on nothing else in the workspace.
//!
//! # Example
//!
//! ```
//! use tunebox_expr::{Expr, Value};
//!
//! let expr = Expr::parse("32 <= block_size_x * block_size_y <= 1024")?;
//! assert_eq!(expr.variables(), ["block_size_x", "block_size_y"]);
//! let restriction = expr.bind(&["block_size_x", "block_size_y", "tile_size"])?;
//! assert!(restriction.eval_bool(&[Value::Int(32), Value::Int(8), Value::Int(1)])?);
//! assert!(!restriction.eval_bool(&[Value::Int(64), Value::Int(32), Value::Int(1)])?);
//!
//! // `/` is true division, and `%` of an int by a float is a float, equal to the int 0.
//! let gemm = Expr::parse("KWG % ((MDIMC * NDIMC)/MDIMA) == 0")?.bind(&["KWG", "MDIMC", "NDIMC", "MDIMA"])?;
//! let v = |i| Value::Int(i);
//! assert!(gemm.eval_bool(&[v(32), v(16), v(8), v(32)])?); // 32 % 4.0 == 0.0
//! assert!(!gemm.eval_bool(&[v(16), v(16), v(16), v(8)])?); // 16 % 32.0 == 16.0
//!
//! // Errors say where, in Python's terms.
//! let ratio = Expr::parse("a / b > 2")?.bind(&["a", "b"])?;
//! let err = ratio.eval(&[Value::Int(1), Value::Int(0)]).unwrap_err();
//! assert_eq!(err.python_exception(), Some("ZeroDivisionError"));
//! assert_eq!(err.to_string(), "`a / b > 2`: division by zero in `a / b`");
//! # Ok::<(), tunebox_expr::ExprError>(())
//! ```
//!
//! # Speed
//!
//! A compiled restriction is a tree walked without allocating. On a shared 2-core machine, a
//! release build evaluates dedispersion's `32 <= block_size_x * block_size_y <= 1024` one
//! million times in about 35-55 ms and GEMM's `KWG % ((MDIMC * NDIMC)/MDIMA) == 0` (true
//! division, then an int modulo a float) in about 110 ms
//! (`cargo test --release -p tunebox-expr -- --ignored --nocapture`).
//!
//! # What differs from Python
//!
//! - Ints are `i64`: a result outside it is [`ExprError::IntOverflow`] where Python would give a
//!   bigger int. True division of ints larger than 2**53 rounds the operands to floats first.
//! - In a restriction or metric ([`Expr`]), lists and tuples are understood only as the last
//!   operand of `in` / `not in` and as the one argument of `min` / `max`; `x in s` also works
//!   for strings (substring). Comprehensions, subscripts, `range`, `list`, `tuple` and `len`
//!   are understood by [`eval`] only, which builds lists (at most [`MAX_LEN`] elements).
//! - Expressions that would build a new string in a restriction (`s + t`, `s * 2`), a complex
//!   number (`(-8) ** 0.5`), use `None`, `is`, lambdas, slicing, dicts or sets, attribute
//!   access other than `math.`, or keyword arguments, are [`ExprError::Unsupported`] or parse
//!   errors.
//! - The functions are `min`, `max`, `abs`, `int`, `float`, `bool`, `round`, `pow` (two
//!   arguments), tunebox's `ceil_div(a, b)` (not Python's: `-(-a // b)`, the ceiling of `a / b`,
//!   for launch geometry), `math.ceil`, `math.floor`, `math.sqrt`, `math.log` (one or two arguments),
//!   `math.log2`, `math.log10`, `math.exp`; the constants `math.pi`, `math.e`, `math.inf`; in
//!   [`eval`] also `range`, `list`, `tuple`, `len`.
//!   Names cannot shadow them when called.
//! - An exception Python would raise is an error value (Kernel Tuner lets a restriction that
//!   raises abort the run; what to do with one is the caller's choice).

#![deny(missing_docs)]

mod builtins;
mod error;
mod eval;
mod object;
mod ops;
mod parse;
mod value;

pub use error::ExprError;
pub use eval::{Compiled, Expr, operate};
pub use object::{MAX_LEN, Object, eval};
pub use value::Value;
