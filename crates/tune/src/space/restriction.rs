//! Restrictions: the Python conditions a choice must satisfy, parsed once and bound to the
//! params' positions, for the solver to check as soon as their last param is bound.

use anyhow::{Result, bail};
use indexmap::IndexMap;
use tunebox_expr::{Compiled, Expr};

use super::value::ParamValue;

/// A restriction: a Python expression over the params that a choice must satisfy (as a Python
/// `if` would read it: any truthy value keeps the choice), such as `32 <= BX * BY <= 1024`.
#[derive(Debug, Clone)]
pub(crate) struct Restriction {
    pub(super) compiled: Compiled,
    /// The position of the last param it reads: it can be checked once params `0..=last` are
    /// bound (0 for a restriction that reads none).
    pub(super) last: usize,
}

impl Restriction {
    /// Parses `text` and binds its names to the params' positions.
    ///
    /// # Errors
    ///
    /// A parse error (the column, and what was expected there), or a name that is not a param
    /// (naming the params).
    pub(crate) fn parse(text: &str, params: &IndexMap<String, Vec<ParamValue>>) -> Result<Self> {
        if let Some(body) = lambda_body(text) {
            bail!(
                "{text:?} is a Python lambda, which Kernel Tuner takes in a script; a manifest \
                 gives the condition itself, over the params' names: {:?}",
                body
            );
        }
        let expr = Expr::parse(text).map_err(|e| anyhow::anyhow!("{e}"))?;
        let names: Vec<&str> = params.keys().map(String::as_str).collect();
        if let Some(unknown) = expr.variables().iter().find(|v| !params.contains_key(*v)) {
            bail!(
                "{text:?}: `{unknown}` is not a param (params: {})",
                names.join(", ")
            );
        }
        let compiled = expr.bind(&names).map_err(|e| anyhow::anyhow!("{e}"))?;
        let last = compiled.slots().iter().copied().max().unwrap_or(0);
        Ok(Restriction { compiled, last })
    }
}

/// The condition a restriction written as a Python lambda means, as a manifest writes it:
/// `lambda p: p["BX"] * p["BY"] <= 1024` is `BX * BY <= 1024`, and `lambda BX, BY: BX < BY`
/// is `BX < BY`; `None` when `text` is not a lambda.
fn lambda_body(text: &str) -> Option<String> {
    let rest = text.trim_start().strip_prefix("lambda")?;
    if !rest.starts_with(|c: char| c.is_whitespace()) {
        return None;
    }
    let (args, body) = rest.split_once(':')?;
    let args: Vec<&str> = args.split(',').map(str::trim).collect();
    let mut body = body.trim().to_owned();
    // `lambda p: p["X"]`: Kernel Tuner hands the lambda a dict of the params.
    if let [dict] = args.as_slice()
        && !dict.is_empty()
    {
        for quote in ['"', '\''] {
            let open = format!("{dict}[{quote}");
            while let Some(start) = body.find(&open) {
                let name_start = start + open.len();
                let Some(len) = body[name_start..].find(&format!("{quote}]")) else {
                    break;
                };
                let name = body[name_start..name_start + len].to_owned();
                body.replace_range(start..name_start + len + 2, &name);
            }
        }
    }
    Some(body)
}
