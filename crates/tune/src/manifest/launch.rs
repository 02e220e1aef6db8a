//! Launch geometry of GPU kernels: grid, block and dynamic shared memory, as integer expressions
//! over the params and the problem size, with Kernel Tuner's conventions.
//!
//! The expressions are Python, evaluated by `tunebox-expr` as restrictions and metrics are
//! (with its `ceil_div(a, b)`, `-(-a // b)`); a value must be an integer, or a float with an
//! integer value (`BM / 8` for `BM = 64` is `8.0`, which is 8).

use anyhow::{Context, Result, bail, ensure};
use indexmap::IndexMap;
use serde::Deserialize;
use tunebox_expr::{Compiled, Expr, Value};
use tunebox_protocol::{Define, LaunchConfig};

use crate::space::{Choice, ParamValue};

/// Kernel Tuner's block-size params.
const BLOCK_PARAMS: [&str; 3] = ["block_size_x", "block_size_y", "block_size_z"];
/// The variables a problem size defines.
const PROBLEM_VARS: [&str; 3] = ["problem_size_x", "problem_size_y", "problem_size_z"];
/// Block x when neither `[launch] block` nor a `block_size_x` param says (Kernel Tuner's).
const DEFAULT_BLOCK_X: i64 = 256;
/// The macros Kernel Tuner defines with the grid's size ([`Launch::kernel_tuner_defines`]).
const GRID_MACROS: [&str; 3] = ["grid_size_x", "grid_size_y", "grid_size_z"];

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
    /// Bound to the names it reads, in the order of `Compiled::slots`' names.
    compiled: Compiled,
    names: Vec<String>,
}

impl IntExpr {
    fn parse(value: &toml::Value, names: &[String], field: &str) -> Result<IntExpr> {
        let text = match value {
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::String(s) => s.clone(),
            other => bail!("{field} = {other}: give an integer or an expression string"),
        };
        let expr = Expr::parse(&text)
            .map_err(|e| anyhow::anyhow!("{field} = {text:?} is not an integer expression: {e}"))?;
        for name in expr.variables() {
            ensure!(
                names.iter().any(|n| n == name),
                "{field} = {text:?}: `{name}` is neither a param nor a problem size ({})",
                names.join(", ")
            );
        }
        let names = expr.variables().to_vec();
        let compiled = expr
            .bind(&names)
            .map_err(|e| anyhow::anyhow!("{field} = {text:?}: {e}"))?;
        Ok(IntExpr {
            text,
            compiled,
            names,
        })
    }

    fn constant(value: i64) -> IntExpr {
        IntExpr::parse(&toml::Value::Integer(value), &[], "").expect("an integer parses")
    }

    /// The value with the params of `choice` and the problem size `problem` bound.
    fn eval(&self, choice: &Choice, problem: [i64; 3]) -> Result<i64> {
        let values = self
            .names
            .iter()
            .map(|name| {
                if let Some(d) = PROBLEM_VARS.iter().position(|v| v == name) {
                    return Ok(Value::Int(problem[d]));
                }
                choice
                    .values()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_python())
                    .with_context(|| format!("{:?}: `{name}` has no value here", self.text))
            })
            .collect::<Result<Vec<_>>>()?;
        let value = self
            .compiled
            .eval(&values)
            .map_err(|e| anyhow::anyhow!("{e}"))
            .with_context(|| format!("{:?} is not an integer here", self.text))?;
        match value {
            Value::Int(i) => Ok(i),
            Value::Bool(b) => Ok(i64::from(b)),
            Value::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e18 => Ok(f as i64),
            other => bail!(
                "{:?} is not an integer here: it is {other}; use `//` (floor division) or \
                 `ceil_div(a, b)`",
                self.text
            ),
        }
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
    /// `block_size_x/y/z` param of that dimension; without one, x by its 256-wide block, or with
    /// `kernel_tuner` by nothing, as Kernel Tuner; an empty list divides by nothing), no dynamic
    /// shared memory.
    ///
    /// # Errors
    ///
    /// Expressions that do not parse or use unknown names, a grid with neither `grid` nor
    /// `problem_size`, lists of the wrong length.
    pub(crate) fn from_raw(
        raw: RawLaunch,
        problem_size: Option<&[toml::Value]>,
        params: &IndexMap<String, Vec<ParamValue>>,
        kernel_tuner: bool,
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
                        // The block's width, one thread per element; Kernel Tuner divides by
                        // nothing here (`params.get("block_size_x", 1)`).
                        None if d == 0 && !kernel_tuner => {
                            vec![IntExpr::constant(DEFAULT_BLOCK_X)]
                        }
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
        // An expression may fail for values (`BM - 64` is no block, `1 / 0`): try the first
        // value of every param.
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
        let mut config = LaunchConfig::new([0; 3], [0; 3]);
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

    /// The macros Kernel Tuner defines before every kernel when its grid comes from the
    /// problem size (its `prepare_kernel_string` without `defines`): `grid_size_x/y/z` (the
    /// grid) and `block_size_x/y/z` (the block) of `choice`, less those that are params of it
    /// (already defined, with the same values). None for an explicit `grid`, which is not
    /// Kernel Tuner's.
    ///
    /// # Errors
    ///
    /// As [`Launch::config`]: an expression fails for this choice.
    pub(crate) fn kernel_tuner_defines(&self, choice: &Choice) -> Result<Vec<Define>> {
        if matches!(self.grid, Grid::Explicit(_)) {
            return Ok(Vec::new());
        }
        let (block, grid, _) = self.evaluate(choice)?;
        let is_param = |name: &str| choice.values().any(|(k, _)| k == name);
        let named = BLOCK_PARAMS
            .iter()
            .zip(block)
            .chain(GRID_MACROS.iter().zip(grid));
        Ok(named
            .filter(|(name, _)| !is_param(name))
            .map(|(name, value)| Define::new(*name, value.to_string()))
            .collect())
    }

    /// [`Launch::kernel_tuner_defines`] as `NAME=VALUE` texts, for tests.
    #[cfg(test)]
    pub(crate) fn kernel_tuner_define_texts(&self, choice: &Choice) -> Vec<String> {
        let defines = self.kernel_tuner_defines(choice).unwrap();
        defines
            .iter()
            .map(|d| format!("{}={}", d.name, d.value))
            .collect()
    }

    /// Block, grid and shared memory of `choice`, unchecked.
    fn evaluate(&self, choice: &Choice) -> Result<([i64; 3], [i64; 3], i64)> {
        let mut block = [0i64; 3];
        for (d, expr) in self.block.iter().enumerate() {
            block[d] = expr.eval(choice, [1; 3])?;
        }
        let (grid, problem) = match &self.grid {
            Grid::Explicit(exprs) => {
                let mut grid = [0i64; 3];
                for (d, expr) in exprs.iter().enumerate() {
                    grid[d] = expr.eval(choice, [1; 3])?;
                }
                (grid, [1; 3])
            }
            Grid::Divided { problem, divisors } => {
                let mut size = [1i64; 3];
                for (d, expr) in problem.iter().enumerate() {
                    size[d] = expr.eval(choice, [1; 3])?;
                }
                let mut grid = [1i64; 3];
                for d in 0..3 {
                    let mut divisor = 1i64;
                    for expr in &divisors[d] {
                        divisor = divisor.saturating_mul(expr.eval(choice, size)?);
                    }
                    ensure!(
                        divisor > 0,
                        "grid_div for dimension {d} is {divisor}; it must be positive"
                    );
                    grid[d] = ceil_div(size[d], divisor);
                }
                (grid, size)
            }
        };
        let shared = self.shared_mem.eval(choice, problem)?;
        Ok((block, grid, shared))
    }
}

/// `ceil(a / b)` for `b > 0`.
fn ceil_div(a: i64, b: i64) -> i64 {
    a.div_euclid(b) + i64::from(a.rem_euclid(b) != 0)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::tests::params;

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
        Launch::from_raw(raw, problem.as_deref(), p, false)
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
    fn without_a_block_size_param_x_is_divided_by_the_block_unless_told_otherwise() {
        let p = params(&[("U", &[1, 2])]);
        let l = launch("", Some("[1024]"), &p).unwrap();
        let c = l.config(&choice(&[("U", 1)])).unwrap();
        assert_eq!((c.block, c.grid), ([256, 1, 1], [4, 1, 1]));
        // Kernel Tuner 1.5's setup_block_and_grid(1024, (None,) * 3, {}) is block (256, 1, 1),
        // grid (1024, 1, 1): what an empty grid_div_x gives, and Kernel Tuner's names.
        let l = launch("grid_div_x = []", Some("[1024]"), &p).unwrap();
        let c = l.config(&choice(&[("U", 1)])).unwrap();
        assert_eq!((c.block, c.grid), ([256, 1, 1], [1024, 1, 1]));
        let raw: RawLaunch = toml::from_str("").unwrap();
        let problem = [toml::Value::Integer(1024)];
        let l = Launch::from_raw(raw, Some(&problem), &p, true).unwrap();
        let c = l.config(&choice(&[("U", 1)])).unwrap();
        assert_eq!((c.block, c.grid), ([256, 1, 1], [1024, 1, 1]));
    }

    #[test]
    fn kernel_tuners_macros_are_the_grid_and_the_block_less_the_params() {
        let p = params(&[("block_size_x", &[32, 64]), ("U", &[2])]);
        let l = launch("grid_div_y = [\"U\"]", Some("[1000, 64]"), &p).unwrap();
        let text = l.kernel_tuner_define_texts(&choice(&[("block_size_x", 64), ("U", 2)]));
        assert_eq!(
            text,
            [
                "block_size_y=1",
                "block_size_z=1",
                "grid_size_x=16",
                "grid_size_y=32",
                "grid_size_z=1"
            ]
        );
        // An explicit grid is not Kernel Tuner's: no macros.
        let l = launch("grid = [1, 1, 1]", None, &p).unwrap();
        let none = l.kernel_tuner_defines(&choice(&[("block_size_x", 64), ("U", 2)]));
        assert!(none.unwrap().is_empty());
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
