//! Kernel Tuner's metrics: named expressions over the params, the scalars and the measured
//! `time` (ms), such as `"GFLOP/s" = "2 * M * N * K / (time / 1e3) / 1e9"`.
//!
//! They are Python expressions with Python's meaning (`tunebox-expr`), as Kernel Tuner evaluates
//! them: `/` divides as a person expects (`M / BM` is 16.0, not 16 in integer arithmetic), `**`
//! is a power. Scalars and constant problem sizes are bound as floats; params keep their type.
//! A metric whose name is an identifier can be used by the metrics after it.
//!
//! A problem size is an integer or, as Kernel Tuner allows, a Python expression in a string:
//! `problem_size = ["2 ** 14"]` is the constant 16384, and one over the params
//! (`"4 * block_size_x"`) is evaluated for each choice, as Kernel Tuner evaluates it.

use anyhow::{Result, bail, ensure};
use indexmap::IndexMap;
use tunebox_expr::{Compiled, Expr, Value};
use tunebox_protocol::Scalar;

use crate::space::{Choice, ParamValue};

/// The variable bound to the measured time, in ms (Kernel Tuner's unit).
const TIME: &str = "time";
/// The variables a problem size defines.
const PROBLEM_VARS: [&str; 3] = ["problem_size_x", "problem_size_y", "problem_size_z"];

/// One metric, parsed and bound to [`Metrics::names`]' order.
#[derive(Debug)]
struct Metric {
    name: String,
    compiled: Compiled,
    /// Its slot among the names, when later metrics can use it (an identifier name).
    slot: Option<usize>,
    /// A problem size over the params (`problem_size_x`), read by metrics but not one itself.
    hidden: bool,
}

/// The manifest's metrics, in order.
#[derive(Debug, Default)]
pub(crate) struct Metrics {
    metrics: Vec<Metric>,
    /// Scalars and constant problem sizes, bound as floats.
    constants: Vec<(String, f64)>,
    /// The params' names, in the manifest's order.
    params: Vec<String>,
}

impl Metrics {
    /// Parses `[metrics]`, checking that every name an expression uses is a param, a scalar,
    /// `problem_size_x/y/z` (when the problem size is constant), `time`, or an earlier metric,
    /// and that each evaluates to a number for the first value of every param and `time = 1`.
    ///
    /// # Errors
    ///
    /// An expression that does not parse, uses an unknown name, or is not a number; the
    /// message names `metrics."NAME"`.
    pub(crate) fn parse(
        raw: &IndexMap<String, String>,
        params: &IndexMap<String, Vec<ParamValue>>,
        scalars: &[Scalar],
        problem_size: Option<&[toml::Value]>,
    ) -> Result<Metrics> {
        let mut constants: Vec<(String, f64)> = scalars
            .iter()
            .map(|s| (s.name.clone(), s.as_f64()))
            .collect();
        // Problem sizes over the params, evaluated per choice (after the constants).
        let mut per_choice: Vec<(usize, Expr)> = Vec::new();
        for (d, value) in problem_size.unwrap_or_default().iter().enumerate().take(3) {
            match problem_size_value(d, value, &constants)? {
                ProblemSize::Constant(size) => constants.push((PROBLEM_VARS[d].to_owned(), size)),
                ProblemSize::PerChoice(expr) => per_choice.push((d, expr)),
                ProblemSize::Other => {}
            }
        }
        let mut metrics = Metrics {
            metrics: Vec::new(),
            constants,
            params: params.keys().cloned().collect(),
        };
        // Every name an expression may read: constants, params, time, then identifier metrics.
        let mut names: Vec<String> = metrics.constants.iter().map(|(c, _)| c.clone()).collect();
        names.extend(metrics.params.iter().cloned());
        names.push(TIME.to_owned());
        for (d, expr) in per_choice {
            metrics.bind_problem_size(d, &expr, &mut names)?;
        }
        for (name, text) in raw {
            metrics.bind_metric(name, text, &mut names)?;
        }
        metrics.check_first_choice(params)?;
        Ok(metrics)
    }

    /// Binds `problem_size[d]`, an expression over the params, as a hidden metric read by the
    /// later ones (its name is added to `names`).
    fn bind_problem_size(&mut self, d: usize, expr: &Expr, names: &mut Vec<String>) -> Result<()> {
        let field = format!("problem_size[{d}]");
        if let Some(var) = expr.variables().iter().find(|v| !names.contains(v)) {
            bail!(
                "{field} = {:?}: `{var}` is not a param or a scalar (params: {})",
                expr.text(),
                self.params.join(", ")
            );
        }
        let compiled = expr
            .bind(names)
            .map_err(|e| anyhow::anyhow!("{field} = {:?}: {e}", expr.text()))?;
        names.push(PROBLEM_VARS[d].to_owned());
        self.metrics.push(Metric {
            name: PROBLEM_VARS[d].to_owned(),
            compiled,
            slot: Some(names.len() - 1),
            hidden: true,
        });
        Ok(())
    }

    /// Parses and binds the metric `name = text` to the `names` so far; an identifier name is
    /// added to them, for the later metrics.
    fn bind_metric(&mut self, name: &str, text: &str, names: &mut Vec<String>) -> Result<()> {
        let field = format!("metrics.{}", toml_key(name));
        ensure!(!name.is_empty(), "{field}: a metric needs a name");
        let expr = Expr::parse(text)
            .map_err(|e| anyhow::anyhow!("{field} = {text:?} does not parse: {e}"))?;
        for var in expr.variables() {
            if !names.contains(var) {
                let known: Vec<&str> = names
                    .iter()
                    .map(String::as_str)
                    .filter(|n| !self.metrics.iter().any(|m| m.name == *n))
                    .collect();
                bail!(
                    "{field} = {text:?}: `{var}` is not a param, a scalar, a constant \
                     problem size or `time` (known: {})",
                    known.join(", ")
                );
            }
        }
        // Bound to the names so far; later metrics' slots come after and are never read.
        let compiled = expr
            .bind(names)
            .map_err(|e| anyhow::anyhow!("{field} = {text:?}: {e}"))?;
        let slot = is_identifier(name).then(|| {
            names.push(name.to_owned());
            names.len() - 1
        });
        self.metrics.push(Metric {
            name: name.to_owned(),
            compiled,
            slot,
            hidden: false,
        });
        Ok(())
    }

    /// Evaluates every metric for the first value of every param and `time = 1` ms (when every
    /// param has a value), naming the metric that is not a number.
    fn check_first_choice(&self, params: &IndexMap<String, Vec<ParamValue>>) -> Result<()> {
        let first = Choice::new(
            params
                .iter()
                .filter_map(|(name, values)| Some((name.clone(), values.first()?.clone())))
                .collect(),
        );
        if first.values().count() == params.len() {
            self.evaluate_all(&first, 1.0, |metric, result| {
                result.map(drop).map_err(|e| {
                    anyhow::anyhow!(
                        "metrics.{} = {:?}: {e} (for the first choice, {}, and time = 1 ms)",
                        toml_key(&metric.name),
                        metric.compiled.text(),
                        first.label()
                    )
                })
            })?;
        }
        Ok(())
    }

    /// The metrics' names, in order (the extra table columns).
    pub(crate) fn names(&self) -> Vec<String> {
        self.metrics
            .iter()
            .filter(|m| !m.hidden)
            .map(|m| m.name.clone())
            .collect()
    }

    /// Every metric of `choice` measured at `time_ms`. A metric that fails for this choice
    /// (a string param in arithmetic, say) or is not finite is left out.
    pub(crate) fn evaluate(&self, choice: &Choice, time_ms: f64) -> IndexMap<String, f64> {
        let mut out = IndexMap::new();
        let _ = self.evaluate_all(choice, time_ms, |metric, result| {
            match result {
                _ if metric.hidden => {}
                Ok(value) if value.is_finite() => {
                    out.insert(metric.name.clone(), value);
                }
                Ok(_) => {}
                Err(e) => log::warn!("metric {:?} for {}: {e}", metric.name, choice.label()),
            }
            Ok(())
        });
        out
    }

    /// Evaluates every metric in order for `choice` at `time_ms`, handing each result to
    /// `each`; a failed metric is bound as NaN for the metrics after it.
    fn evaluate_all(
        &self,
        choice: &Choice,
        time_ms: f64,
        mut each: impl FnMut(&Metric, Result<f64>) -> Result<()>,
    ) -> Result<()> {
        let mut values: Vec<Value<'_>> = self
            .constants
            .iter()
            .map(|(_, v)| Value::Float(*v))
            .collect();
        values.extend(choice.values().map(|(_, v)| match v {
            ParamValue::Int(i) => Value::Int(*i),
            ParamValue::Float(f) => Value::Float(*f),
            ParamValue::Bool(b) => Value::Bool(*b),
            ParamValue::Str(s) => Value::Str(s),
        }));
        values.push(Value::Float(time_ms));
        for metric in &self.metrics {
            let result = metric.eval(&values);
            if let Some(slot) = metric.slot {
                debug_assert_eq!(slot, values.len());
                values.push(Value::Float(*result.as_ref().unwrap_or(&f64::NAN)));
            }
            each(metric, result)?;
        }
        Ok(())
    }
}

impl Metric {
    fn eval(&self, values: &[Value<'_>]) -> Result<f64> {
        match self.compiled.eval(values) {
            Ok(Value::Float(f)) => Ok(f),
            Ok(Value::Int(i)) => Ok(i as f64),
            Ok(other) => bail!("gives {other}, not a number"),
            Err(e) => bail!("{e}"),
        }
    }
}

/// What one entry of `problem_size` is to the metrics.
enum ProblemSize {
    /// An integer, or an expression over no param (`"2 ** 14"`, `"N // 2"` of a scalar `N`).
    Constant(f64),
    /// An expression over the params, evaluated for each choice.
    PerChoice(Expr),
    /// Neither (a launch-only form, which `[launch]` checks): not bound.
    Other,
}

/// Reads entry `d` of `problem_size`, with the `constants` (scalars, earlier sizes) bound.
///
/// # Errors
///
/// A string that does not parse, or a constant expression that raises or is not a number.
fn problem_size_value(
    d: usize,
    value: &toml::Value,
    constants: &[(String, f64)],
) -> Result<ProblemSize> {
    let text = match value {
        toml::Value::Integer(size) => return Ok(ProblemSize::Constant(*size as f64)),
        toml::Value::String(text) => text,
        _ => return Ok(ProblemSize::Other),
    };
    let field = format!("problem_size[{d}] = {text:?}");
    let expr = Expr::parse(text).map_err(|e| anyhow::anyhow!("{field} does not parse: {e}"))?;
    let names: Vec<&str> = constants.iter().map(|(n, _)| n.as_str()).collect();
    if !expr.variables().iter().all(|v| names.contains(&v.as_str())) {
        return Ok(ProblemSize::PerChoice(expr));
    }
    let compiled = expr
        .bind(&names)
        .map_err(|e| anyhow::anyhow!("{field}: {e}"))?;
    let values: Vec<Value<'_>> = constants.iter().map(|(_, v)| Value::Float(*v)).collect();
    match compiled.eval(&values) {
        Ok(Value::Int(i)) => Ok(ProblemSize::Constant(i as f64)),
        Ok(Value::Float(f)) => Ok(ProblemSize::Constant(f)),
        Ok(other) => bail!("{field} gives {other}, not a number"),
        Err(e) => bail!("{field}: {e}"),
    }
}

/// Whether a metric's name can be read by the metrics after it.
fn is_identifier(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// `GFLOP/s` as a TOML key: quoted unless bare.
fn toml_key(name: &str) -> String {
    if !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        name.to_owned()
    } else {
        format!("{name:?}")
    }
}

/// A metric's value for a table: four significant digits, no exponent for everyday sizes.
pub fn format_value(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude == 0.0 {
        "0".into()
    } else if !(1e-3..1e7).contains(&magnitude) {
        format!("{value:.3e}")
    } else {
        let digits = (3 - magnitude.log10().floor() as i32).max(0) as usize;
        format!("{value:.digits$}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> IndexMap<String, Vec<ParamValue>> {
        IndexMap::from([
            ("BM".to_string(), vec![ParamValue::Int(32)]),
            ("T".to_string(), vec![ParamValue::Str("f".into())]),
        ])
    }

    fn scalars() -> Vec<Scalar> {
        ["M", "N", "K"]
            .iter()
            .map(|n| {
                let mut v = Scalar::default();
                v.name = (*n).into();
                v.value = 512;
                v
            })
            .collect()
    }

    #[test]
    fn gflops_over_scalars_and_time() {
        let raw = IndexMap::from([
            (
                "GFLOP/s".to_string(),
                "2 * M * N * K / (time / 1e3) / 1e9".to_string(),
            ),
            ("per_tile".to_string(), "time / (M / BM)".to_string()),
            ("twice".to_string(), "per_tile * 2".to_string()),
        ]);
        let m = Metrics::parse(&raw, &params(), &scalars(), None).unwrap();
        assert_eq!(m.names(), ["GFLOP/s", "per_tile", "twice"]);
        let choice = Choice::new(IndexMap::from([
            ("BM".to_string(), ParamValue::Int(32)),
            ("T".to_string(), ParamValue::Str("f".into())),
        ]));
        let values = m.evaluate(&choice, 4.0);
        assert!((values["GFLOP/s"] - 2.0 * 512f64.powi(3) / 4e-3 / 1e9).abs() < 1e-9);
        // Python's true division: 512 / 32 = 16.0, 4 / 16.0 = 0.25 (not 0).
        assert_eq!(values["per_tile"], 0.25);
        assert_eq!(values["twice"], 0.5);
    }

    #[test]
    fn metrics_are_python_expressions() {
        let raw = IndexMap::from([
            ("cube".to_string(), "BM ** 3 / 1e3".to_string()),
            ("floor".to_string(), "-7 // 2 + BM % 5".to_string()),
            ("pick".to_string(), "time if T == 'f' else -1".to_string()),
        ]);
        let m = Metrics::parse(&raw, &params(), &scalars(), None).unwrap();
        let choice = Choice::new(IndexMap::from([
            ("BM".to_string(), ParamValue::Int(32)),
            ("T".to_string(), ParamValue::Str("f".into())),
        ]));
        let values = m.evaluate(&choice, 2.5);
        assert_eq!(values["cube"], 32.768);
        assert_eq!(values["floor"], -2.0);
        assert_eq!(values["pick"], 2.5);
    }

    #[test]
    fn errors_name_the_metric() {
        let cases = [
            ("time /", "metrics.m = \"time /\""),
            ("time * X", "`X` is not a param"),
            ("T + 1", "metrics.m"),
            ("time > 1", "not a number"),
        ];
        for (text, expected) in cases {
            let raw = IndexMap::from([("m".to_string(), text.to_string())]);
            let err = format!(
                "{:#}",
                Metrics::parse(&raw, &params(), &scalars(), None).unwrap_err()
            );
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn problem_sizes_may_be_python_expressions() {
        let raw = IndexMap::from([(
            "GB/s".to_string(),
            "problem_size_x * 4 / (time / 1e3) / 1e9".to_string(),
        )]);
        let choice = Choice::new(IndexMap::from([
            ("BM".to_string(), ParamValue::Int(32)),
            ("T".to_string(), ParamValue::Str("f".into())),
        ]));
        let size = |text: &str| {
            let problem = [toml::Value::String(text.into())];
            let m = Metrics::parse(&raw, &params(), &scalars(), Some(&problem))
                .unwrap_or_else(|e| panic!("{text}: {e:#}"));
            assert_eq!(m.names(), ["GB/s"], "a problem size is not a column");
            m.evaluate(&choice, 1.0)["GB/s"] * 1e9 / 1e3 / 4.0
        };
        assert_eq!(size("2 ** 14"), 16384.0);
        assert_eq!(size("M * 2"), 1024.0);
        // Over the params: evaluated per choice, as Kernel Tuner does.
        assert_eq!(size("BM * 100"), 3200.0);
        let problem = [toml::Value::String("2 **".into())];
        let err = Metrics::parse(&raw, &params(), &scalars(), Some(&problem)).unwrap_err();
        assert!(
            format!("{err:#}").contains("problem_size[0] = \"2 **\""),
            "{err:#}"
        );
    }

    #[test]
    fn values_format_with_four_digits() {
        assert_eq!(format_value(61.234), "61.23");
        assert_eq!(format_value(1234.6), "1235");
        assert_eq!(format_value(0.012345), "0.01235");
        assert_eq!(format_value(0.0), "0");
        assert_eq!(format_value(3.2e9), "3.200e9");
    }
}
