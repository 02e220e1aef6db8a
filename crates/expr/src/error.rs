//! The crate's one error type.

/// Why an expression could not be parsed, bound or evaluated.
///
/// Every variant carries the expression's text; evaluation errors also carry the sub-expression
/// that failed (`part`), so that a message can say which part of which restriction went wrong.
/// The evaluation variants follow Python's exceptions ([`ExprError::python_exception`] names the
/// one Python raises), except [`ExprError::IntOverflow`] and [`ExprError::Unsupported`], which are
/// limits of this evaluator where Python would have given a value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ExprError {
    /// The text is not an expression this crate understands.
    #[error("cannot parse `{text}`: at column {column}, expected {expected}, found {found}")]
    Parse {
        /// The expression.
        text: String,
        /// 1-based column (in characters) of the offending token.
        column: usize,
        /// What was found there, in the user's terms (`` `)` ``, "the end").
        found: String,
        /// What would have been understood there.
        expected: String,
    },
    /// [`crate::Expr::bind`] was given names that do not include a variable of the expression.
    #[error("`{text}` uses `{name}`, which is not one of: {}", known.join(", "))]
    UnknownName {
        /// The expression.
        text: String,
        /// The variable that has no binding.
        name: String,
        /// The names that were given.
        known: Vec<String>,
    },
    /// [`crate::Compiled::eval`] was given a different number of values than names were bound.
    #[error("`{text}` was bound to {expected} names but evaluated with {got} values")]
    BindingCount {
        /// The expression.
        text: String,
        /// How many names were bound.
        expected: usize,
        /// How many values were given.
        got: usize,
    },
    /// Python's `ZeroDivisionError`: `/`, `//`, `%` by zero, or zero to a negative power.
    #[error("`{text}`: {message} in `{part}`")]
    ZeroDivision {
        /// The expression.
        text: String,
        /// The sub-expression that divided by zero.
        part: String,
        /// Python's message ("division by zero", …).
        message: String,
    },
    /// Python's `OverflowError`: a float result too large (`10.0 ** 400`), or an infinite float
    /// converted to an int (`int(x)` for `x = inf`).
    #[error("`{text}`: {message} in `{part}`")]
    Overflow {
        /// The expression.
        text: String,
        /// The sub-expression that overflowed.
        part: String,
        /// Python's message.
        message: String,
    },
    /// Python's `TypeError`: an operation on values of the wrong type (`1 in 2`, `s < 1`).
    #[error("`{text}`: {message} in `{part}`")]
    Type {
        /// The expression.
        text: String,
        /// The sub-expression whose operands have the wrong type.
        part: String,
        /// Python's message ("argument of type 'int' is not iterable", …).
        message: String,
    },
    /// Python's `ValueError`: a value outside a function's domain (`math.sqrt(-1)`,
    /// `int(nan)`, a negative shift count).
    #[error("`{text}`: {message} in `{part}`")]
    Value {
        /// The expression.
        text: String,
        /// The sub-expression.
        part: String,
        /// Python's message ("math domain error", …).
        message: String,
    },
    /// Python's `IndexError`: a subscript outside its sequence (`ProblemSize[2]` of two
    /// sizes), in [`crate::eval`].
    #[error("`{text}`: {message} in `{part}`")]
    Index {
        /// The expression.
        text: String,
        /// The subscript.
        part: String,
        /// Python's message ("list index out of range").
        message: String,
    },
    /// An int result outside `i64`. Python's ints are unbounded; this evaluator reports the
    /// overflow rather than wrap or silently switch to floats.
    #[error("`{text}`: integer overflow in `{part}` (the result does not fit in 64 bits)")]
    IntOverflow {
        /// The expression.
        text: String,
        /// The sub-expression whose result overflowed.
        part: String,
    },
    /// Python would give a value this evaluator cannot represent (a complex number, a
    /// concatenated string).
    #[error("`{text}`: {what} in `{part}` is not supported")]
    Unsupported {
        /// The expression.
        text: String,
        /// The sub-expression.
        part: String,
        /// What is not supported.
        what: String,
    },
}

impl ExprError {
    /// The name of the exception Python raises for the same expression over the same values
    /// (`"ZeroDivisionError"`, `"OverflowError"`, `"TypeError"`, `"ValueError"`, and from
    /// [`crate::eval`] `"IndexError"`), or `None` for parse and binding errors and for the
    /// limits of this evaluator ([`ExprError::IntOverflow`], [`ExprError::Unsupported`]),
    /// where Python gives a value.
    pub fn python_exception(&self) -> Option<&'static str> {
        match self {
            ExprError::ZeroDivision { .. } => Some("ZeroDivisionError"),
            ExprError::Overflow { .. } => Some("OverflowError"),
            ExprError::Type { .. } => Some("TypeError"),
            ExprError::Value { .. } => Some("ValueError"),
            ExprError::Index { .. } => Some("IndexError"),
            _ => None,
        }
    }
}
