//! Launch geometry of GPU kernels: grid, block and dynamic shared memory, as integer expressions
//! over the params and the problem size, with Kernel Tuner's conventions.

use anyhow::{Context, Result, bail, ensure};
use evalexpr::{
    ContextWithMutableFunctions, ContextWithMutableVariables, DefaultNumericTypes, Function,
    HashMapContext, Node, Value,
};
use indexmap::IndexMap;
use serde::Deserialize;
use tunebox_protocol::LaunchConfig;

use crate::space::{Choice, ParamValue};

/// Kernel Tuner's block-size params.
const BLOCK_PARAMS: [&str; 3] = ["block_size_x", "block_size_y", "block_size_z"];
/// The variables a problem size defines.
const PROBLEM_VARS: [&str; 3] = ["problem_size_x", "problem_size_y", "problem_size_z"];
/// Block x when neither `[launch] block` nor a `block_size_x` param says (Kernel Tuner's).
const DEFAULT_BLOCK_X: i64 = 256;

/// `[launch]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLaunch {
    block: Option<Vec<toml::Value>>,
    grid: Option<Vec<toml::Value>>,
    /// Each a list of divisors (multiplied, as Kernel Tuner's) or one expression.
    grid_div_x: Option<toml::Value>,
    grid_div_y: Option<toml::Value>,
    grid_div_z: Option<toml::Value>,
    shared_mem: Option<toml::Value>,
    /// The problem size here rather than at the top level (moved there when read).
    pub problem_size: Option<Vec<toml::Value>>,
}

impl RawLaunch {
    /// A `[launch]` of these fields (a T1 file's `LocalSize`, `GlobalSize`, `SharedMemory`).
    pub(crate) fn new(
        block: Option<Vec<toml::Value>>,
        grid: Option<Vec<toml::Value>>,
        shared_mem: Option<toml::Value>,
    ) -> RawLaunch {
        RawLaunch {
            block,
            grid,
            shared_mem,
            ..RawLaunch::default()
        }
    }

    /// `grid_div_x`, `grid_div_y` or `grid_div_z` (`d` = 0, 1, 2).
    pub(crate) fn grid_div_mut(&mut self, d: usize) -> &mut Option<toml::Value> {
        match d {
            0 => &mut self.grid_div_x,
            1 => &mut self.grid_div_y,
            _ => &mut self.grid_div_z,
        }
    }
}

/// An integer expression over params (and the problem size).
#[derive(Debug)]
struct IntExpr {
    text: String,
    node: Node<DefaultNumericTypes>,
}

impl IntExpr {
    fn parse(value: &toml::Value, names: &[String], field: &str) -> Result<IntExpr> {
        let text = match value {
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::String(s) => s.clone(),
            other => bail!("{field} = {other}: give an integer or an expression string"),
        };
        let node = evalexpr::build_operator_tree::<DefaultNumericTypes>(&text)
            .map_err(|e| anyhow::anyhow!("{field} = {text:?} does not parse: {e}"))?;
        for name in node.iter_variable_identifiers() {
            ensure!(
                names.iter().any(|n| n == name),
                "{field} = {text:?}: `{name}` is neither a param nor a problem size ({})",
                names.join(", ")
            );
        }
        Ok(IntExpr { text, node })
    }

    fn constant(value: i64) -> IntExpr {
        IntExpr {
            text: value.to_string(),
            node: evalexpr::build_operator_tree(&value.to_string()).expect("an integer parses"),
        }
    }

    fn eval(&self, context: &HashMapContext<DefaultNumericTypes>) -> Result<i64> {
        self.node
            .eval_int_with_context(context)
            .with_context(|| format!("{:?} is not an integer here", self.text))
    }
}

/// How the grid is found.
#[derive(Debug)]
enum Grid {
    /// Given per dimension.
    Explicit([IntExpr; 3]),
    /// Kernel Tuner's: `ceil(problem_size_d / product(grid_div_d))` per dimension.
    Divided {
        problem: [IntExpr; 3],
        divisors: [Vec<IntExpr>; 3],
    },
}

/// Grid, block and shared memory of a GPU kernel, evaluated for each choice.
#[derive(Debug)]
pub(crate) struct Launch {
    block: [IntExpr; 3],
    grid: Grid,
    shared_mem: IntExpr,
}

impl Launch {
    /// Reads `[launch]` and the top-level `problem_size` (one to three integers or expressions),
    /// applying Kernel Tuner's defaults: block from the `block_size_x/y/z` params (x defaults to
    /// 256, y and z to 1), grid from the problem size divided by `grid_div_x/y/z` (by default the
    /// block size of that dimension), no dynamic shared memory.
    ///
    /// # Errors
    ///
    /// Expressions that do not parse or use unknown names, a grid with neither `grid` nor
    /// `problem_size`, lists of the wrong length.
    pub(crate) fn from_raw(
        raw: RawLaunch,
        problem_size: Option<&[toml::Value]>,
        params: &IndexMap<String, Vec<ParamValue>>,
    ) -> Result<Launch> {
        let param_names: Vec<String> = params.keys().cloned().collect();
        let all_names: Vec<String> = param_names
            .iter()
            .cloned()
            .chain(PROBLEM_VARS.iter().map(|v| (*v).to_owned()))
            .collect();
        let block = match &raw.block {
            Some(values) => three(values, &param_names, "launch.block")?,
            None => std::array::from_fn(|d| {
                if params.contains_key(BLOCK_PARAMS[d]) {
                    IntExpr::parse(
                        &toml::Value::String(BLOCK_PARAMS[d].into()),
                        &param_names,
                        "",
                    )
                    .expect("a param name parses")
                } else {
                    IntExpr::constant(if d == 0 { DEFAULT_BLOCK_X } else { 1 })
                }
            }),
        };
        let grid = match (&raw.grid, problem_size) {
            (Some(values), _) => Grid::Explicit(three(values, &all_names, "launch.grid")?),
            (None, Some(problem)) => {
                let problem = three_padded(problem, &param_names, "problem_size")?;
                let divs = [&raw.grid_div_x, &raw.grid_div_y, &raw.grid_div_z];
                let mut divisors: [Vec<IntExpr>; 3] = Default::default();
                for (d, div) in divs.iter().enumerate() {
                    let field = format!("launch.grid_div_{}", ["x", "y", "z"][d]);
                    divisors[d] = match div {
                        Some(toml::Value::Array(items)) => items
                            .iter()
                            .enumerate()
                            .map(|(i, item)| {
                                IntExpr::parse(item, &param_names, &format!("{field}[{i}]"))
                            })
                            .collect::<Result<_>>()?,
                        Some(item @ (toml::Value::String(_) | toml::Value::Integer(_))) => {
                            vec![IntExpr::parse(item, &param_names, &field)?]
                        }
                        Some(other) => bail!(
                            "{field} = {other}: give a list of divisors ([\"block_size_x\", \
                             \"TILE\"], multiplied) or one expression (\"block_size_x * TILE\")"
                        ),
                        None if params.contains_key(BLOCK_PARAMS[d]) => vec![
                            IntExpr::parse(
                                &toml::Value::String(BLOCK_PARAMS[d].into()),
                                &param_names,
                                &field,
                            )
                            .expect("a param name parses"),
                        ],
                        None if d == 0 => vec![IntExpr::constant(DEFAULT_BLOCK_X)],
                        None => Vec::new(),
                    };
                }
                Grid::Divided { problem, divisors }
            }
            (None, None) => bail!(
                "launch: give either `grid = [x, y, z]` in [launch], or a top-level \
                 `problem_size` for Kernel Tuner's grid = problem_size / grid_div"
            ),
        };
        let shared_mem = match &raw.shared_mem {
            Some(value) => IntExpr::parse(value, &all_names, "launch.shared_mem")?,
            None => IntExpr::constant(0),
        };
        let launch = Launch {
            block,
            grid,
            shared_mem,
        };
        // evalexpr accepts some malformed expressions (`BM *`) until they are evaluated: try the
        // first value of every param.
        let first = Choice::new(
            params
                .iter()
                .filter_map(|(name, values)| Some((name.clone(), values.first()?.clone())))
                .collect(),
        );
        launch
            .evaluate(&first)
            .with_context(|| format!("for the first choice ({})", first.label()))?;
        Ok(launch)
    }

    /// The launch of `choice`.
    ///
    /// # Errors
    ///
    /// An expression that fails or gives a value outside 1..=u32::MAX (0..=u32::MAX for shared
    /// memory).
    pub(crate) fn config(&self, choice: &Choice) -> Result<LaunchConfig> {
        let (block, grid, shared) = self.evaluate(choice)?;
        let mut config = LaunchConfig {
            grid: [0; 3],
            block: [0; 3],
            shared_mem_bytes: 0,
        };
        for d in 0..3 {
            config.block[d] =
                positive(block[d], &format!("block[{d}] = {:?}", self.block[d].text))?;
            config.grid[d] = positive(grid[d], &format!("grid[{d}]"))?;
        }
        config.shared_mem_bytes = u32::try_from(shared).with_context(|| {
            format!(
                "launch.shared_mem is {shared}; it must be 0 to {}",
                u32::MAX
            )
        })?;
        Ok(config)
    }

    /// Block, grid and shared memory of `choice`, unchecked.
    fn evaluate(&self, choice: &Choice) -> Result<([i64; 3], [i64; 3], i64)> {
        let mut context = choice.context()?;
        context
            .set_function(
                "ceil_div".into(),
                Function::new(|argument: &Value<DefaultNumericTypes>| {
                    let pair = argument.as_fixed_len_tuple(2)?;
                    let (a, b): (i64, i64) = (pair[0].as_int()?, pair[1].as_int()?);
                    if b == 0 {
                        return Err(evalexpr::EvalexprError::DivisionError {
                            dividend: Value::Int(a),
                            divisor: Value::Int(b),
                        });
                    }
                    Ok(Value::Int(ceil_div(a, b)))
                }),
            )
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut block = [0i64; 3];
        for (d, expr) in self.block.iter().enumerate() {
            block[d] = expr.eval(&context)?;
        }
        let grid = match &self.grid {
            Grid::Explicit(exprs) => {
                bind_problem(&mut context, None)?;
                let mut grid = [0i64; 3];
                for (d, expr) in exprs.iter().enumerate() {
                    grid[d] = expr.eval(&context)?;
                }
                grid
            }
            Grid::Divided { problem, divisors } => {
                let mut size = [1i64; 3];
                for (d, expr) in problem.iter().enumerate() {
                    size[d] = expr.eval(&context)?;
                }
                bind_problem(&mut context, Some(size))?;
                let mut grid = [1i64; 3];
                for d in 0..3 {
                    let mut divisor = 1i64;
                    for expr in &divisors[d] {
                        divisor = divisor.saturating_mul(expr.eval(&context)?);
                    }
                    ensure!(
                        divisor > 0,
                        "grid_div for dimension {d} is {divisor}; it must be positive"
                    );
                    grid[d] = ceil_div(size[d], divisor);
                }
                grid
            }
        };
        let shared = self.shared_mem.eval(&context)?;
        Ok((block, grid, shared))
    }
}

/// `ceil(a / b)` for `b > 0`.
fn ceil_div(a: i64, b: i64) -> i64 {
    a.div_euclid(b) + i64::from(a.rem_euclid(b) != 0)
}

fn bind_problem(
    context: &mut HashMapContext<DefaultNumericTypes>,
    size: Option<[i64; 3]>,
) -> Result<()> {
    for (d, var) in PROBLEM_VARS.iter().enumerate() {
        let value = size.map_or(1, |s| s[d]);
        context
            .set_value((*var).into(), Value::Int(value))
            .map_err(|e| anyhow::anyhow!("cannot bind {var}: {e}"))?;
    }
    Ok(())
}

fn positive(value: i64, what: &str) -> Result<u32> {
    u32::try_from(value)
        .ok()
        .filter(|&v| v > 0)
        .with_context(|| format!("{what} is {value}; it must be 1 to {}", u32::MAX))
}

/// Exactly three expressions.
fn three(values: &[toml::Value], names: &[String], field: &str) -> Result<[IntExpr; 3]> {
    ensure!(
        values.len() == 3,
        "{field} has {} entries; give three (x, y, z)",
        values.len()
    );
    three_padded(values, names, field)
}

/// One to three expressions; missing dimensions are 1.
fn three_padded(values: &[toml::Value], names: &[String], field: &str) -> Result<[IntExpr; 3]> {
    ensure!(
        (1..=3).contains(&values.len()),
        "{field} has {} entries; give one to three (x, y, z)",
        values.len()
    );
    let mut out: [IntExpr; 3] = std::array::from_fn(|_| IntExpr::constant(1));
    for (d, value) in values.iter().enumerate() {
        out[d] = IntExpr::parse(value, names, &format!("{field}[{d}]"))?;
    }
    Ok(out)
}

/// Rewrites the Python spellings of Kernel Tuner's launch expressions into evalexpr's (launch
/// expressions are evaluated by evalexpr, in integers): `and`, `or`,
/// `not` (with Python's precedence: `not A == B` negates the comparison), `True`, `False`, `**`
/// and `//`, outside string literals. Other text is kept as is.
pub(crate) fn from_python(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 8);
    let mut chars = text.chars().peekable();
    // Parenthesis depth, and the depth of every `not` whose operand is still open.
    let mut depth = 0usize;
    let mut open_nots: Vec<usize> = Vec::new();
    let close = |out: &mut String, open_nots: &mut Vec<usize>, depth: usize| {
        while open_nots.last() == Some(&depth) {
            open_nots.pop();
            out.push(')');
        }
    };
    while let Some(c) = chars.next() {
        match c {
            // A string literal, single- or double-quoted, is copied double-quoted, unchanged.
            '"' | '\'' => {
                out.push('"');
                while let Some(d) = chars.next() {
                    if d == c {
                        break;
                    }
                    out.push(d);
                    if d == '\\'
                        && let Some(escaped) = chars.next()
                    {
                        out.push(escaped);
                    }
                }
                out.push('"');
            }
            '(' => {
                depth += 1;
                out.push('(');
            }
            ')' => {
                close(&mut out, &mut open_nots, depth);
                depth = depth.saturating_sub(1);
                out.push(')');
            }
            ',' => {
                close(&mut out, &mut open_nots, depth);
                out.push(',');
            }
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                out.push('^');
            }
            '/' if chars.peek() == Some(&'/') => {
                chars.next();
                out.push('/');
            }
            c if c.is_ascii_alphabetic() || c == '_' => {
                let mut word = String::from(c);
                while let Some(&d) = chars.peek() {
                    if !(d.is_ascii_alphanumeric() || d == '_') {
                        break;
                    }
                    word.push(d);
                    chars.next();
                }
                match word.as_str() {
                    "and" | "or" => {
                        // Trim the space before the operator so that a closing `)` hugs its
                        // operand; the space is put back after it.
                        let trimmed = out.trim_end().len();
                        let gap = out.split_off(trimmed);
                        close(&mut out, &mut open_nots, depth);
                        out.push_str(&gap);
                        out.push_str(if word == "and" { "&&" } else { "||" });
                    }
                    "not" => {
                        while chars.peek().is_some_and(|d| d.is_whitespace()) {
                            chars.next();
                        }
                        out.push_str("!(");
                        open_nots.push(depth);
                    }
                    "True" => out.push_str("true"),
                    "False" => out.push_str("false"),
                    other => out.push_str(other),
                }
            }
            c => out.push(c),
        }
    }
    while open_nots.pop().is_some() {
        out.push(')');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::tests::params;

    #[test]
    fn python_spellings_become_evalexpr_s() {
        assert_eq!(
            from_python("A * B <= 8 and not (A == 2 or B ** 2 > 4) and 'x' != \"and\""),
            "A * B <= 8 && !((A == 2 || B ^ 2 > 4)) && \"x\" != \"and\""
        );
        assert_eq!(
            from_python("not A == 1 or B // 2 > 1"),
            "!(A == 1) || B / 2 > 1"
        );
        assert_eq!(from_python("f(not A, B)"), "f(!(A), B)");
    }

    fn choice(values: &[(&str, i64)]) -> Choice {
        Choice::new(
            values
                .iter()
                .map(|(k, v)| (k.to_string(), ParamValue::Int(*v)))
                .collect(),
        )
    }

    fn launch(
        toml_text: &str,
        problem: Option<&str>,
        p: &IndexMap<String, Vec<ParamValue>>,
    ) -> Result<Launch> {
        let raw: RawLaunch = toml::from_str(toml_text).unwrap();
        let problem: Option<Vec<toml::Value>> = problem.map(|p| {
            toml::from_str::<toml::Table>(&format!("p = {p}")).unwrap()["p"]
                .as_array()
                .unwrap()
                .clone()
        });
        Launch::from_raw(raw, problem.as_deref(), p)
    }

    #[test]
    fn kernel_tuner_defaults() {
        let p = params(&[("block_size_x", &[32, 64]), ("block_size_y", &[4])]);
        let l = launch("", Some("[1000, 64]"), &p).unwrap();
        let c = l
            .config(&choice(&[("block_size_x", 64), ("block_size_y", 4)]))
            .unwrap();
        assert_eq!(c.block, [64, 4, 1]);
        assert_eq!(c.grid, [16, 16, 1]); // ceil(1000 / 64), 64 / 4
        assert_eq!(c.shared_mem_bytes, 0);
    }

    #[test]
    fn explicit_geometry_and_grid_div() {
        let p = params(&[("BM", &[64]), ("BN", &[32]), ("BK", &[8])]);
        let l = launch(
            "block = [\"BN\", \"BM / 8\", 1]\ngrid_div_x = [\"BN\"]\ngrid_div_y = \"BM\"\nshared_mem = \"(BM + BN) * BK * 4\"",
            Some("[\"512\", 512]"),
            &p,
        )
        .unwrap();
        let c = l
            .config(&choice(&[("BM", 64), ("BN", 32), ("BK", 8)]))
            .unwrap();
        assert_eq!(c.block, [32, 8, 1]);
        assert_eq!(c.grid, [16, 8, 1]);
        assert_eq!(c.shared_mem_bytes, (64 + 32) * 8 * 4);
        let l = launch("grid = [\"ceil_div(problem_size_x, 3)\", 2, 1]", None, &p).unwrap();
        assert_eq!(
            l.config(&choice(&[("BM", 64), ("BN", 32), ("BK", 8)]))
                .unwrap()
                .grid,
            [1, 2, 1]
        );
    }

    #[test]
    fn errors_name_the_field() {
        let p = params(&[("BM", &[64])]);
        let cases = [
            ("block = [1, 2]", Some("[8]"), "launch.block has 2 entries"),
            (
                "block = [\"BX\", 1, 1]",
                Some("[8]"),
                "`BX` is neither a param",
            ),
            ("", None, "give either `grid = [x, y, z]`"),
            (
                "shared_mem = \"BM *\"",
                Some("[8]"),
                "\"BM *\" is not an integer",
            ),
        ];
        for (text, problem, expected) in cases {
            let err = format!("{:#}", launch(text, problem, &p).unwrap_err());
            assert!(err.contains(expected), "{text}: {err}");
        }
        let l = launch("block = [\"BM - 64\", 1, 1]", Some("[8]"), &p).unwrap();
        let err = format!("{:#}", l.config(&choice(&[("BM", 64)])).unwrap_err());
        assert!(err.contains("it must be 1 to"), "{err}");
    }
}
