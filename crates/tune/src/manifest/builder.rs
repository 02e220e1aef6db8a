//! A manifest built in code ([`Manifest::builder`]), for tools that have no TOML file.
//!
//! The builder writes the manifest's fields as the TOML reader would read them (an in-memory
//! TOML table, deserialized into the same raw manifest) and checks them with the same code, so
//! a manifest built in code and the TOML file that says the same thing are one manifest: the
//! same errors, the same defaults, the same cache keys. What TOML cannot say (a kernel source
//! given as text, a tensor's own random seed or data) is set on the checked manifest after.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use tunebox_protocol::{Define, Init, Scalar, TensorSpec, TimingConfig};

use super::Manifest;
use super::raw::{Extras, RawManifest};
use crate::space::ParamValue;

/// Builds a [`Manifest`] in code: the fields of a manifest file (see docs/manifest.md), as
/// methods; [`ManifestBuilder::build`] checks them as [`Manifest::load`] checks a file.
///
/// ```
/// use tunebox_protocol::{DType, TensorSpec, TimingConfig};
/// use tunebox_tune::Manifest;
///
/// let manifest = Manifest::builder("scale")
///     .c_source(
///         "scale.c",
///         "void scale(const float *x, float *y, long n) { for (long i = 0; i < n; i++) y[i] = SCALE * x[i]; }",
///         "scale",
///     )
///     .tensor(TensorSpec::new("x", DType::F32, [256]).random(0))
///     .tensor(TensorSpec::new("y", DType::F32, [256]).output())
///     .scalar("n", 256)
///     .param("SCALE", [1, 2, 4])
///     .restriction("SCALE != 4")
///     .timing(TimingConfig::default().rep_ms(2.0))
///     .verify_against_choice([("SCALE", 1)])
///     .metric("elements_per_ms", "256 / time")
///     .build()?;
/// assert_eq!(manifest.name(), "scale");
/// # Ok::<(), tunebox_tune::TuneError>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct ManifestBuilder {
    name: String,
    dir: PathBuf,
    table: toml::Table,
    /// The kernel's text, when it is given in code rather than read from a file.
    text: Option<String>,
    /// Each tensor as given (its init is set after the checks).
    tensors: Vec<TensorSpec>,
    errors: Vec<String>,
}

impl Manifest {
    /// A manifest named `name`, built in code ([`ManifestBuilder`]); it needs at least a kernel
    /// ([`ManifestBuilder::c_source`] or [`ManifestBuilder::c_file`]).
    pub fn builder(name: impl Into<String>) -> ManifestBuilder {
        ManifestBuilder::new(name.into())
    }

    /// The manifest's name: its `name`, else the file's stem.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl ManifestBuilder {
    fn new(name: String) -> ManifestBuilder {
        let mut table = toml::Table::new();
        table.insert("name".into(), toml::Value::String(name.clone()));
        ManifestBuilder {
            name,
            dir: PathBuf::from("."),
            table,
            text: None,
            tensors: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// The folder that relative paths (sources, data files, reference outputs, the local
    /// headers a source includes) are read from, as a manifest file's folder is; `.` by
    /// default. Reports name the manifest `DIR/NAME`.
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = dir.into();
        self
    }

    /// A C kernel given as text: `file_name` names it in compiler messages (and, relative to
    /// [`dir`](Self::dir), is where `#include "…"` looks), `entry` is the function to call.
    pub fn c_source(
        mut self,
        file_name: impl Into<String>,
        text: impl Into<String>,
        entry: impl Into<String>,
    ) -> Self {
        self.text = Some(text.into());
        self.kernel("source", toml::Value::String(file_name.into()));
        self.kernel("entry", toml::Value::String(entry.into()));
        self.kernel("language", toml::Value::String("c".into()));
        self
    }

    /// A C kernel read from `path` (relative to [`dir`](Self::dir)), as `[kernel] source` and
    /// `entry`.
    pub fn c_file(mut self, path: impl AsRef<Path>, entry: impl Into<String>) -> Self {
        self.text = None;
        let path = path.as_ref().display().to_string();
        self.kernel("source", toml::Value::String(path));
        self.kernel("entry", toml::Value::String(entry.into()));
        self.kernel("language", toml::Value::String("c".into()));
        self
    }

    /// The C compiler's flags (`kernel.flags`; default `-O3 -march=native`).
    pub fn flags<S: Into<String>>(mut self, flags: impl IntoIterator<Item = S>) -> Self {
        let flags = flags
            .into_iter()
            .map(|f| toml::Value::String(f.into()))
            .collect();
        self.kernel("flags", toml::Value::Array(flags));
        self
    }

    /// The C compiler (`kernel.compiler`, split into words as `$CC` is; default `$CC`, else
    /// `cc`, and for a C++ source `$CXX`, else `g++`).
    pub fn compiler(mut self, compiler: impl Into<String>) -> Self {
        self.kernel("compiler", toml::Value::String(compiler.into()));
        self
    }

    /// A tensor argument, in call order. Its name, dtype, shape, `output` and `reset` are
    /// checked as a manifest's `[[tensors]]`; its init is kept as given (`Init::Random`'s seed
    /// too: a manifest file's `"random"` tensor `i` has seed `seed + i`, see
    /// [`seed`](Self::seed)). Data must be exactly dtype × shape bytes.
    pub fn tensor(self, spec: TensorSpec) -> Self {
        self.tensor_as(spec, None)
    }

    /// A tensor argument passed untyped (`c_type = "void"`: a `void *` in the kernel's
    /// signature), for pointer types a dtype cannot name; otherwise as [`tensor`](Self::tensor).
    pub fn untyped_tensor(self, spec: TensorSpec) -> Self {
        self.tensor_as(spec, Some("void"))
    }

    fn tensor_as(mut self, spec: TensorSpec, c_type: Option<&str>) -> Self {
        let mut t = toml::Table::new();
        t.insert("name".into(), toml::Value::String(spec.name.clone()));
        t.insert(
            "dtype".into(),
            toml::Value::String(spec.dtype.name().into()),
        );
        let shape = spec
            .shape
            .iter()
            .map(|&d| toml::Value::Integer(i64::try_from(d).unwrap_or(i64::MAX)))
            .collect();
        t.insert("shape".into(), toml::Value::Array(shape));
        let init = match spec.init {
            Init::Ones => "ones",
            Init::Zeros | Init::Random { .. } | Init::Data(_) => "zeros",
        };
        t.insert("init".into(), toml::Value::String(init.into()));
        t.insert("output".into(), toml::Value::Boolean(spec.output));
        t.insert("reset".into(), toml::Value::Boolean(spec.reset));
        if let Some(c_type) = c_type {
            t.insert("c_type".into(), toml::Value::String(c_type.into()));
        }
        self.push("tensors", toml::Value::Table(t));
        self.tensors.push(spec);
        self
    }

    /// An `int64_t` scalar argument `name = value`, after the tensors (unless
    /// [`args`](Self::args) orders them).
    pub fn scalar(self, name: impl Into<String>, value: i64) -> Self {
        self.scalar_arg(Scalar::new(name, value))
    }

    /// A typed scalar argument (`[[scalars]]` with its `type`: `i32`, `i64`, `f32` or `f64`,
    /// e.g. `Scalar::f32("alpha", 2.0)`), after the tensors (unless [`args`](Self::args) orders
    /// them).
    pub fn scalar_arg(mut self, scalar: Scalar) -> Self {
        // A value its kind does not hold (a float in an integer scalar, an `i32` out of range)
        // is an error, rather than written as some other value.
        if let Err(e) = scalar.check() {
            self.errors.push(format!("scalars: {e}"));
        }
        let mut s = toml::Table::new();
        s.insert("name".into(), toml::Value::String(scalar.name));
        let value = if scalar.kind.is_float() {
            toml::Value::Float(scalar.float)
        } else {
            toml::Value::Integer(scalar.value)
        };
        s.insert("value".into(), value);
        s.insert(
            "type".into(),
            toml::Value::String(scalar.kind.name().into()),
        );
        self.push("scalars", toml::Value::Table(s));
        self
    }

    /// The kernel's argument order (`args`): the names of the tensors and scalars, each once
    /// (default: every tensor, then every scalar, in the order given).
    pub fn args<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        let names = names
            .into_iter()
            .map(|n| toml::Value::String(n.into()))
            .collect();
        self.table.insert("args".into(), toml::Value::Array(names));
        self
    }

    /// A tuning parameter and its values, in order (`[params]`): each becomes `-DNAME=VALUE`.
    pub fn param<V: Into<ParamValue>>(
        mut self,
        name: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        let values = values.into_iter().map(|v| to_toml(&v.into())).collect();
        self.table("params")
            .insert(name.into(), toml::Value::Array(values));
        self
    }

    /// A restriction: a Python expression over the params that a choice must satisfy
    /// (`restrictions`), e.g. `"BM % 16 == 0"`.
    pub fn restriction(mut self, expression: impl Into<String>) -> Self {
        self.push("restrictions", toml::Value::String(expression.into()));
        self
    }

    /// The seed of tensors whose init a manifest file would give as `"random"` (`seed`,
    /// default 0; recorded in the results cache's keys).
    pub fn seed(mut self, seed: u64) -> Self {
        let seed = i64::try_from(seed).unwrap_or(i64::MAX);
        self.table.insert("seed".into(), toml::Value::Integer(seed));
        self
    }

    /// How each choice is measured (`[timing]`); `budget_ms` and `outputs_only` are the run's
    /// to set, and are ignored here.
    pub fn timing(mut self, timing: TimingConfig) -> Self {
        let mut t = toml::Table::new();
        t.insert("warmup_ms".into(), toml::Value::Float(timing.warmup_ms));
        t.insert("rep_ms".into(), toml::Value::Float(timing.rep_ms));
        t.insert(
            "min_reps".into(),
            toml::Value::Integer(timing.min_reps.into()),
        );
        t.insert(
            "max_reps".into(),
            toml::Value::Integer(timing.max_reps.into()),
        );
        t.insert(
            "flush_cache".into(),
            toml::Value::Boolean(timing.flush_cache),
        );
        t.insert("hot".into(), toml::Value::Boolean(timing.hot));
        if let Some(noise) = timing.max_noise {
            t.insert("max_noise".into(), toml::Value::Float(noise));
        }
        if let Some(max) = timing.max_time_ms {
            t.insert("max_time_ms".into(), toml::Value::Float(max));
        }
        t.insert(
            "cache_flush".into(),
            toml::Value::String(timing.cache_flush.name().into()),
        );
        t.insert(
            "clock".into(),
            toml::Value::String(timing.clock.name().into()),
        );
        self.table.insert("timing".into(), toml::Value::Table(t));
        self
    }

    /// The per-choice timeout (`timeout_s`, default 60 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.table.insert(
            "timeout_s".into(),
            toml::Value::Float(timeout.as_secs_f64()),
        );
        self
    }

    /// How long one compile may take (`compile_timeout_s`, default 120 s).
    pub fn compile_timeout(mut self, timeout: Duration) -> Self {
        self.table.insert(
            "compile_timeout_s".into(),
            toml::Value::Float(timeout.as_secs_f64()),
        );
        self
    }

    /// Verify every choice against this choice of the kernel (`[verify] reference = { choice =
    /// { … } }`): a value for every param.
    pub fn verify_against_choice<K: Into<String>, V: Into<ParamValue>>(
        mut self,
        choice: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let choice = choice
            .into_iter()
            .map(|(k, v)| (k.into(), to_toml(&v.into())))
            .collect();
        self.reference(toml::Table::from_iter([(
            "choice".to_owned(),
            toml::Value::Table(choice),
        )]));
        self
    }

    /// Verify every choice against a separate reference kernel read from `path` (relative to
    /// [`dir`](Self::dir)), called as `entry` with the same arguments (`[verify] reference = {
    /// source, entry }`).
    pub fn verify_against_source(
        mut self,
        path: impl AsRef<Path>,
        entry: impl Into<String>,
    ) -> Self {
        let path = path.as_ref().display().to_string();
        self.reference(toml::Table::from_iter([
            ("source".to_owned(), toml::Value::String(path)),
            ("entry".to_owned(), toml::Value::String(entry.into())),
        ]));
        self
    }

    /// The tolerance of verification (`verify.rtol`, `verify.atol`; numpy's defaults 1e-5 and
    /// 1e-8). Takes effect with a `verify_against_*`.
    pub fn tolerance(mut self, rtol: f64, atol: f64) -> Self {
        let verify = self.table("verify");
        verify.insert("rtol".into(), toml::Value::Float(rtol));
        verify.insert("atol".into(), toml::Value::Float(atol));
        self
    }

    /// Whether a NaN output matches a NaN of the reference (`verify.equal_nan`, numpy's
    /// `equal_nan`; default false). Takes effect with a `verify_against_*`.
    pub fn equal_nan(mut self, equal_nan: bool) -> Self {
        self.table("verify")
            .insert("equal_nan".into(), toml::Value::Boolean(equal_nan));
        self
    }

    /// A metric reported per choice: a named expression over the params, the scalars and
    /// `time` (ms) (`[metrics]`), e.g. `("GFLOP/s", "2 * n / time / 1e6")`.
    pub fn metric(mut self, name: impl Into<String>, expression: impl Into<String>) -> Self {
        self.table("metrics")
            .insert(name.into(), toml::Value::String(expression.into()));
        self
    }

    /// Checks the manifest as [`Manifest::load`] checks a file, and reads the files it names.
    ///
    /// # Errors
    ///
    /// [`Error::Manifest`](crate::TuneError::Manifest), naming the field and what to change (the
    /// same messages as for a file): no kernel, an unreadable source, bad shapes, params
    /// without values, restrictions that do not parse, a scalar's value its type cannot take,
    /// an argument order that misses or repeats a name, …
    pub fn build(self) -> crate::Result<Manifest> {
        let what = format!("invalid manifest {} (built in code)", self.name);
        self.assemble()
            .context(what)
            .map_err(crate::TuneError::manifest)
    }

    /// The manifest these calls describe, as [`ManifestBuilder::build`] returns it (errors
    /// without the "built in code" context).
    fn assemble(mut self) -> Result<Manifest> {
        if let Some(error) = self.errors.first() {
            bail!("{error}");
        }
        let path = self.dir.join(&self.name);
        // As for a file: `kernel.compiler` when named, else `$CC` or `cc` (C++: `$CXX`, `g++`).
        let compiler = crate::compiler();
        let mut raw: RawManifest = toml::Value::Table(std::mem::take(&mut self.table))
            .try_into()
            .map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))?;
        if self.text.is_some() {
            // The kernel is not read from a file; its text is set below, once checked.
            raw.t1 = Some(Box::new(Extras {
                source_missing: true,
                ..Extras::default()
            }));
        }
        let mut manifest =
            Manifest::from_raw(raw, &path, &compiler, &super::files::ManifestFiles::new())?;
        if let Some(text) = self.text {
            // The checks `KernelSource::read` makes of a file's text.
            let kernel = &mut manifest.kernel;
            ensure!(
                !text.trim().is_empty(),
                "kernel.source: {} is empty",
                kernel.source_name
            );
            ensure!(
                Define::is_c_identifier(&kernel.entry),
                "kernel.entry = {:?}: it must be the name of a C function",
                kernel.entry
            );
            kernel.text = text;
            kernel.dir = kernel
                .dir
                .canonicalize()
                .unwrap_or_else(|_| kernel.dir.clone());
        }
        for (i, (checked, given)) in manifest.tensors.iter_mut().zip(self.tensors).enumerate() {
            match given.init {
                Init::Data(data) => {
                    let bytes = checked.byte_len().unwrap_or(u64::MAX);
                    ensure!(
                        data.len() as u64 == bytes,
                        "tensors[{i}].init: {} bytes of data, but {} × {:?} needs {bytes}",
                        data.len(),
                        checked.dtype.name(),
                        checked.shape
                    );
                    checked.init = Init::Data(data);
                }
                init @ Init::Random { .. } => checked.init = init,
                Init::Zeros | Init::Ones => {}
            }
        }
        Ok(manifest)
    }

    /// Sets `kernel.KEY`.
    fn kernel(&mut self, key: &str, value: toml::Value) {
        self.table("kernel").insert(key.into(), value);
    }

    /// The table `key`, created empty if needed.
    fn table(&mut self, key: &str) -> &mut toml::Table {
        let entry = self
            .table
            .entry(key)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        entry.as_table_mut().expect("made a table above")
    }

    /// Appends `value` to the array `key`.
    fn push(&mut self, key: &str, value: toml::Value) {
        let entry = self
            .table
            .entry(key)
            .or_insert_with(|| toml::Value::Array(Vec::new()));
        if let toml::Value::Array(values) = entry {
            values.push(value);
        }
    }

    /// Sets `verify.reference`.
    fn reference(&mut self, reference: toml::Table) {
        self.table("verify")
            .insert("reference".into(), toml::Value::Table(reference));
    }
}

fn to_toml(value: &ParamValue) -> toml::Value {
    match value {
        ParamValue::Int(i) => toml::Value::Integer(*i),
        ParamValue::Float(f) => toml::Value::Float(*f),
        ParamValue::Bool(b) => toml::Value::Boolean(*b),
        ParamValue::Str(s) => toml::Value::String(s.clone()),
    }
}

impl From<i64> for ParamValue {
    fn from(value: i64) -> ParamValue {
        ParamValue::Int(value)
    }
}

impl From<i32> for ParamValue {
    fn from(value: i32) -> ParamValue {
        ParamValue::Int(value.into())
    }
}

impl From<f64> for ParamValue {
    fn from(value: f64) -> ParamValue {
        ParamValue::Float(value)
    }
}

impl From<bool> for ParamValue {
    fn from(value: bool) -> ParamValue {
        ParamValue::Bool(value)
    }
}

impl From<&str> for ParamValue {
    fn from(value: &str) -> ParamValue {
        ParamValue::Str(value.to_owned())
    }
}

impl From<String> for ParamValue {
    fn from(value: String) -> ParamValue {
        ParamValue::Str(value)
    }
}

#[cfg(test)]
mod tests {
    use tunebox_protocol::DType;

    use super::*;

    const TEXT: &str = "#include <stdint.h>\nvoid scale(const float *x, float *y, int64_t n) \
                        { for (int64_t i = 0; i < n; i++) y[i] = SCALE * x[i]; }\n";

    fn scale() -> ManifestBuilder {
        Manifest::builder("scale")
            .c_source("scale.c", TEXT, "scale")
            .flags(["-O2"])
            .compiler("cc")
            .tensor(TensorSpec::new("x", DType::F32, [256]).random(0))
            .tensor(TensorSpec::new("y", DType::F32, [256]).output())
            .scalar("n", 256)
            .param("SCALE", [1, 2, 3, 4])
            .restriction("SCALE != 3")
            .timeout(Duration::from_secs(30))
            .verify_against_choice([("SCALE", 1)])
    }

    fn error(builder: ManifestBuilder) -> String {
        format!("{:#}", builder.build().unwrap_err())
    }

    #[test]
    fn a_built_manifest_is_the_file_that_says_the_same() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("scale.c"), TEXT).unwrap();
        let file = dir.path().join("scale.toml");
        std::fs::write(
            &file,
            r#"
            name = "scale"
            timeout_s = 30
            restrictions = ["SCALE != 3"]
            [kernel]
            source = "scale.c"
            entry = "scale"
            flags = ["-O2"]
            [[tensors]]
            name = "x"
            dtype = "f32"
            shape = [256]
            [[tensors]]
            name = "y"
            dtype = "f32"
            shape = [256]
            init = "zeros"
            output = true
            [[scalars]]
            name = "n"
            value = 256
            [params]
            SCALE = [1, 2, 3, 4]
            [verify]
            reference = { choice = { SCALE = 1 } }
            "#,
        )
        .unwrap();
        let read = Manifest::read(&file, "cc").unwrap();
        let built = scale().dir(dir.path()).build().unwrap();
        let setup = crate::results::fingerprint::setup_hash(&built);
        assert_eq!(setup, crate::results::fingerprint::setup_hash(&read));
        assert_eq!(built.tensors, read.tensors);
        assert_eq!(built.params, read.params);
        assert_eq!(built.timing, read.timing);
        assert_eq!(built.timeout, read.timeout);
        assert_eq!(built.kernel.dir, read.kernel.dir);
        assert_eq!(built.path, dir.path().join("scale"));
        // The file on disk and the text in code are one kernel.
        let from_file = Manifest::builder("scale")
            .dir(dir.path())
            .c_file("scale.c", "scale")
            .flags(["-O2"])
            .compiler("cc")
            .build()
            .unwrap();
        assert_eq!(from_file.kernel.text, TEXT);
    }

    #[test]
    fn a_built_manifest_is_checked_as_a_file_is() {
        assert!(
            error(Manifest::builder("k")).contains("missing [kernel]"),
            "{}",
            error(Manifest::builder("k"))
        );
        let e = error(scale().param("EMPTY", Vec::<i64>::new()));
        assert!(e.contains("params.EMPTY has no values"), "{e}");
        let e = error(scale().restriction("NOPE > 1"));
        assert!(e.contains("restrictions[1]"), "{e}");
        let e = error(scale().tensor(TensorSpec::new("x", DType::F32, [1])));
        assert!(e.contains("also the name of tensors[0]"), "{e}");
        let e = error(scale().timing(TimingConfig::default().min_reps(5).max_reps(2)));
        assert!(e.contains("timing.max_reps"), "{e}");
        let e = error(scale().timeout(Duration::ZERO));
        assert!(e.contains("timeout_s = 0"), "{e}");
        let e = error(scale().c_source("k.c", "  \n", "k"));
        assert!(e.contains("kernel.source: k.c is empty"), "{e}");
        let e = error(scale().c_source("k.c", TEXT, "not a name"));
        assert!(e.contains("kernel.entry"), "{e}");
        let e = error(scale().args(["x", "y"]));
        assert!(e.contains("args: `n` is missing"), "{e}");
        let e = error(scale().scalar_arg({
            let mut v = Scalar::i32("m", 0);
            v.float = 1.5;
            v
        }));
        assert!(
            e.contains("scalar `m` (i32) has the float value 1.5"),
            "{e}"
        );
        let e = error(scale().verify_against_choice([("NOPE", 1)]));
        assert!(e.contains("`NOPE` is not a param"), "{e}");
        assert!(
            e.starts_with("invalid manifest scale (built in code)"),
            "{e}"
        );
    }

    /// Typed scalars, an argument order, an untyped tensor and `equal_nan` are written as a
    /// file says them.
    #[test]
    fn typed_scalars_and_argument_order_are_the_files() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("scale.toml");
        std::fs::write(
            &file,
            r#"
            name = "scale"
            args = ["alpha", "x", "y", "n", "k"]
            [kernel]
            source = "scale.c"
            entry = "scale"
            compiler = "cc"
            [[tensors]]
            name = "x"
            dtype = "f32"
            shape = [256]
            init = "zeros"
            [[tensors]]
            name = "y"
            dtype = "f32"
            shape = [256]
            init = "zeros"
            output = true
            c_type = "void"
            [[scalars]]
            name = "n"
            value = 256
            [[scalars]]
            name = "alpha"
            value = 2.5
            type = "f32"
            [[scalars]]
            name = "k"
            value = 3
            type = "i32"
            [params]
            SCALE = [1, 2]
            [verify]
            equal_nan = true
            reference = { choice = { SCALE = 1 } }
            "#,
        )
        .unwrap();
        std::fs::write(dir.path().join("scale.c"), TEXT).unwrap();
        let read = Manifest::read(&file, "tunebox-no-such-cc").unwrap();
        let built = Manifest::builder("scale")
            .dir(dir.path())
            .c_file("scale.c", "scale")
            .compiler("cc")
            .tensor(TensorSpec::new("x", DType::F32, [256]))
            .untyped_tensor(TensorSpec::new("y", DType::F32, [256]).output())
            .scalar("n", 256)
            .scalar_arg(Scalar::f32("alpha", 2.5))
            .scalar_arg(Scalar::i32("k", 3))
            .args(["alpha", "x", "y", "n", "k"])
            .param("SCALE", [1, 2])
            .verify_against_choice([("SCALE", 1)])
            .equal_nan(true)
            .build()
            .unwrap();
        assert_eq!(built.scalars, read.scalars);
        assert_eq!(built.args, read.args);
        assert_eq!(built.kernel.compiler, "cc");
        assert_eq!(
            crate::results::fingerprint::setup_hash(&built),
            crate::results::fingerprint::setup_hash(&read)
        );
    }

    #[test]
    fn a_tensor_keeps_its_init() {
        let data = tunebox_protocol::SharedBuffer::new(8).unwrap().share();
        let m = scale()
            .tensor(TensorSpec::new("z", DType::F32, [2]).data(data.clone()))
            .tensor(TensorSpec::new("w", DType::F32, [2]).random(42))
            .build()
            .unwrap();
        assert_eq!(m.tensors[2].init, Init::Data(data));
        assert_eq!(m.tensors[3].init, Init::Random { seed: 42 });
        let short = tunebox_protocol::SharedBuffer::new(4).unwrap().share();
        let e = error(scale().tensor(TensorSpec::new("z", DType::F32, [2]).data(short)));
        assert!(e.contains("tensors[2].init"), "{e}");
    }
}
