//! `[env]`: which of the user's environment variables the workers get.
//!
//! The policy: a worker runs code nobody has vetted, so it gets a documented list of the
//! parent's variables (`tunebox_process::INHERITED_ENV` and `INHERITED_ENV_PREFIXES`: the
//! process, the loader, the C compiler, CUDA, OpenMP/BLAS threading, sanitizers, tunebox's own)
//! and nothing else unless asked: tokens and credentials in the user's shell never reach a
//! kernel. A manifest asks in `[env]` (`pass = ["NAME", …]` passes the user's variables, `"*"`
//! all of them as Inductor's and TVM's workers get; `set = { NAME = "value" }` sets them), and
//! `tunebox tune --env NAME` / `--env NAME=VALUE` adds to it for one run. What the workers get
//! is part of the results-cache key. A kernel whose source calls `getenv("NAME")` for a
//! variable that is set here but not passed gets a note saying how to pass it.

use anyhow::{Result, bail};
use indexmap::IndexMap;
use tunebox_process::ProcessConfig;

use super::raw::RawEnv;

/// The variables a run's workers get beyond the default list: the user's variables passed on
/// by name (or all of them), and variables set to a value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkerEnv {
    /// Names of the user's variables to pass on; `*` passes every one.
    pass: Vec<String>,
    /// Variables set in the workers (they win over the user's).
    set: IndexMap<String, String>,
}

impl WorkerEnv {
    /// Passes the user's variable `name` on to the workers (`*`: every variable).
    ///
    /// # Errors
    ///
    /// `name` is not a variable name (empty, or with `=` or a NUL byte).
    pub fn pass(mut self, name: &str) -> crate::Result<WorkerEnv> {
        check_name(name, "a variable to pass").map_err(options)?;
        if !self.pass.iter().any(|n| n == name) {
            self.pass.push(name.to_owned());
        }
        Ok(self)
    }

    /// Sets `name` to `value` in the workers.
    ///
    /// # Errors
    ///
    /// `name` is not a variable name, or `value` holds a NUL byte.
    pub fn set(mut self, name: &str, value: &str) -> crate::Result<WorkerEnv> {
        check_name(name, "a variable to set").map_err(options)?;
        if value.contains('\0') {
            return Err(crate::TuneError::invalid_options(anyhow::anyhow!(
                "the value of {name} holds a NUL byte, which no environment variable can"
            )));
        }
        self.set.insert(name.to_owned(), value.to_owned());
        Ok(self)
    }

    /// `--env`'s argument: `NAME` passes the user's variable, `NAME=VALUE` sets it.
    ///
    /// # Errors
    ///
    /// As [`WorkerEnv::pass`] and [`WorkerEnv::set`].
    pub fn arg(self, arg: &str) -> crate::Result<WorkerEnv> {
        match arg.split_once('=') {
            Some((name, value)) => self.set(name, value),
            None => self.pass(arg),
        }
    }

    /// `other`'s variables added to these (its values win).
    pub(crate) fn extend(&mut self, other: WorkerEnv) {
        for name in other.pass {
            if !self.pass.contains(&name) {
                self.pass.push(name);
            }
        }
        self.set.extend(other.set);
    }

    /// Whether the workers get every variable of the user's.
    fn passes_all(&self) -> bool {
        self.pass.iter().any(|n| n == "*")
    }

    /// Whether a worker gets the user's variable `name` (or a value set for it).
    pub(crate) fn reaches_workers(&self, name: &str) -> bool {
        self.passes_all()
            || tunebox_process::inherited_by_default(name)
            || self.pass.iter().any(|n| n == name)
            || self.set.contains_key(name)
    }

    /// `config` with these variables passed and set.
    pub(crate) fn configure(&self, mut config: ProcessConfig) -> ProcessConfig {
        if self.passes_all() {
            config = config.inherit_all_env(true);
        }
        for name in self.pass.iter().filter(|n| *n != "*") {
            config = config.inherit_env(name);
        }
        for (name, value) in &self.set {
            config = config.env(name, value);
        }
        config
    }

    /// What determines the workers' environment beyond the defaults, for the results-cache
    /// key: each variable set, and each one passed with its value now (`*`: only that). Empty
    /// when nothing is asked, so that keys of manifests without `[env]` hold.
    pub(crate) fn identity(&self) -> Vec<String> {
        let mut parts: Vec<String> = self
            .pass
            .iter()
            .map(|name| match std::env::var(name) {
                _ if name == "*" => "pass *".to_owned(),
                Ok(value) => format!("pass {name}={value}"),
                Err(_) => format!("pass {name} (unset)"),
            })
            .collect();
        parts.extend(self.set.iter().map(|(k, v)| format!("set {k}={v}")));
        parts
    }
}

/// Prefixes of the variables a worker inherits by default that change how a kernel runs: the
/// team sizes, schedules and spinning of OpenMP runtimes (GNU's, LLVM's, Intel's), the threading
/// of BLAS libraries, and the CUDA and NVIDIA drivers' settings (`CUDA_LAUNCH_BLOCKING`,
/// `NVIDIA_TF32_OVERRIDE`, the toolkit a kernel is built with). Measured with
/// `OMP_NUM_THREADS=1` in the shell, an OpenMP kernel's 11.6 ms came back from the results
/// cache for a run with all cores (5.97 ms).
const TIMING_ENV_PREFIXES: &[&str] = &[
    "OMP_",
    "GOMP_",
    "KMP_",
    "MKL_",
    "OPENBLAS_",
    "CUDA_",
    "NVIDIA_",
];

/// Variables a worker inherits by default, by name, that change what a kernel runs: the
/// libraries the loader finds (another libgomp, another libcuda).
const TIMING_ENV_NAMES: &[&str] = &["LD_LIBRARY_PATH"];

/// The user's variables that reach the workers by default and change how a kernel runs
/// ([`TIMING_ENV_PREFIXES`], [`TIMING_ENV_NAMES`]), as `NAME=value`, sorted: part of the
/// results-cache key beside [`WorkerEnv::identity`]. Empty when none is set, so that keys made
/// in a shell without them hold. `environment` is the parent's (`std::env::vars_os()`).
pub(crate) fn inherited_timing_identity(
    environment: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
) -> Vec<String> {
    let mut parts: Vec<String> = environment
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value)))
        .filter(|(name, _)| {
            TIMING_ENV_NAMES.contains(&name.as_str())
                || TIMING_ENV_PREFIXES.iter().any(|p| name.starts_with(p))
        })
        .filter(|(name, _)| tunebox_process::inherited_by_default(name))
        .map(|(name, value)| format!("{name}={}", value.to_string_lossy()))
        .collect();
    parts.sort();
    parts
}

fn options(error: anyhow::Error) -> crate::TuneError {
    crate::TuneError::invalid_options(error)
}

fn check_name(name: &str, what: &str) -> Result<()> {
    if name.is_empty() || name.contains(['=', '\0']) {
        bail!("{name:?} is not {what}: a name is non-empty, without `=` or NUL");
    }
    Ok(())
}

/// `[env]` checked.
pub(super) fn env(raw: Option<RawEnv>) -> Result<WorkerEnv> {
    let Some(raw) = raw else {
        return Ok(WorkerEnv::default());
    };
    let mut env = WorkerEnv::default();
    for (i, name) in raw.pass.iter().enumerate() {
        check_name(name, "a variable to pass")
            .map_err(|e| anyhow::anyhow!("env.pass[{i}]: {e}"))?;
        if !env.pass.contains(name) {
            env.pass.push(name.clone());
        }
    }
    for (name, value) in raw.set {
        check_name(&name, "a variable to set").map_err(|e| anyhow::anyhow!("env.set: {e}"))?;
        if value.contains('\0') {
            bail!("env.set.{name}: the value holds a NUL byte");
        }
        env.set.insert(name, value);
    }
    Ok(env)
}

/// The variables `source` reads with `getenv("NAME")` (also `secure_getenv`, `std::getenv`),
/// in order, each once.
pub(crate) fn read_by(source: &str) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("getenv") {
        rest = &rest[at + "getenv".len()..];
        let call = rest.trim_start();
        let Some(call) = call.strip_prefix('(') else {
            continue;
        };
        let Some(literal) = call.trim_start().strip_prefix('"') else {
            continue;
        };
        let Some(end) = literal.find('"') else {
            continue;
        };
        let name = &literal[..end];
        if !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !names.iter().any(|n| n == name)
        {
            names.push(name.to_owned());
        }
    }
    names
}

/// Notes for each variable the kernel's source reads that is set in this environment but does
/// not reach the workers, naming how to pass it.
pub(crate) fn dropped_notes(source_name: &str, source: &str, env: &WorkerEnv) -> Vec<String> {
    read_by(source)
        .into_iter()
        .filter(|name| std::env::var_os(name).is_some() && !env.reaches_workers(name))
        .map(|name| {
            format!(
                "{source_name} reads the environment variable {name} (getenv), which is set \
                 here but not passed to the workers (they get a filtered environment): pass it \
                 with `[env] pass = [\"{name}\"]` in the manifest, or `--env {name}` \
                 (docs/manifest.md, \"[env]\")"
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inherited_variables_that_change_a_kernel_are_its_identity() {
        let shell = [
            ("SECRET_TOKEN", "x"),
            ("OMP_NUM_THREADS", "4"),
            ("PATH", "/usr/bin"),
            ("LD_LIBRARY_PATH", "/opt/lib"),
            ("CUDA_LAUNCH_BLOCKING", "1"),
            ("KMP_BLOCKTIME", "0"),
        ]
        .map(|(k, v)| (k.into(), v.into()));
        assert_eq!(
            inherited_timing_identity(shell.into_iter()),
            [
                "CUDA_LAUNCH_BLOCKING=1",
                "KMP_BLOCKTIME=0",
                "LD_LIBRARY_PATH=/opt/lib",
                "OMP_NUM_THREADS=4"
            ]
        );
        assert!(inherited_timing_identity(std::iter::empty()).is_empty());
    }

    #[test]
    fn getenv_calls_are_found() {
        let source = r#"
            const char *a = getenv("TILE_HINT");
            const char *b = secure_getenv( "OTHER" );
            char *c = std::getenv("TILE_HINT");
            getenv(name); // not a literal
            /* getenv mentioned */
        "#;
        assert_eq!(read_by(source), ["TILE_HINT", "OTHER"]);
    }

    #[test]
    fn pass_set_and_their_identity() {
        let env = WorkerEnv::default()
            .pass("HOME")
            .unwrap()
            .arg("MY_KNOB=3")
            .unwrap()
            .arg("SOME_USER_VAR")
            .unwrap();
        assert!(env.reaches_workers("MY_KNOB") && env.reaches_workers("SOME_USER_VAR"));
        assert!(env.reaches_workers("OMP_NUM_THREADS"), "passed by default");
        assert!(!env.reaches_workers("GITHUB_TOKEN"));
        assert!(env.identity().contains(&"set MY_KNOB=3".to_owned()));
        assert!(WorkerEnv::default().identity().is_empty());
        assert!(WorkerEnv::default().arg("=x").is_err());
        let all = WorkerEnv::default().pass("*").unwrap();
        assert!(all.reaches_workers("GITHUB_TOKEN"));
    }

    #[test]
    fn bad_names_name_the_field() {
        let raw: RawEnv = toml::from_str("pass = [\"A=B\"]").unwrap();
        let err = env(Some(raw)).unwrap_err().to_string();
        assert!(
            err.starts_with("env.pass[0]: \"A=B\" is not a variable to pass"),
            "{err}"
        );
        assert!(toml::from_str::<RawEnv>("passs = []").is_err());
    }
}
