//! `cargo xtask python-test`, `python-conformance` and `python-bench`: the Python package
//! `tunebox` (crates/python) built into a virtual environment under `target/python/venv` and
//! tested there.
//!
//! The environment is made with the interpreter named in `TUNEBOX_PYTHON` (default `python3`);
//! everything it needs comes from PyPI through pip (maturin, cloudpickle, numpy, psutil, pytest,
//! and apache-tvm for the conformance run and the benchmark). The package is built with
//! `maturin develop --release` from the repository root's `pyproject.toml`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::{target_dir, workspace_root};

/// What every task needs in the environment.
const BASE_PACKAGES: &[&str] = &[
    "maturin>=1.5,<2",
    "cloudpickle",
    "numpy",
    "psutil",
    "pytest",
];

/// TVM's release that the conformance run and the benchmark compare with.
const TVM_PACKAGE: &str = "apache-tvm==0.27.0.post1";

/// Kernel Tuner's release that the conformance run compares `tune_kernel` with.
const KERNEL_TUNER_PACKAGE: &str = "kernel_tuner==1.5.0";

/// pytest's exit code when it collected no test: not a failure of ours.
const PYTEST_NO_TESTS: i32 = 5;

/// `cargo xtask python-test [PYTEST_ARGS…]`: the package's pytest suite.
pub(crate) fn python_test(args: &[String]) -> Result<(), String> {
    let venv = prepare(&[])?;
    let root = workspace_root();
    let mut pytest = vec!["-m", "pytest", "-q", "crates/python/tests"];
    pytest.extend(args.iter().map(String::as_str));
    let code = run_python(&venv, &pytest, &root)?;
    match code {
        0 => Ok(()),
        PYTEST_NO_TESTS => {
            eprintln!("xtask: pytest collected no tests");
            Ok(())
        }
        other => Err(format!(
            "the Python tests failed (pytest exit code {other})"
        )),
    }
}

/// `cargo xtask python-conformance [--no-tvm] [--kt-only] [--kt-size N]`: TVM's own test of its
/// pool against tunebox's, then (unless `--no-tvm`) the same file against TVM's pool, both
/// timed; then Kernel Tuner's `examples/c/vector_add.py` through `tunebox.kernel_tuner` and
/// through Kernel Tuner, compared (`--kt-size N`: N floats per array instead of the example's
/// 72 Mi; `--kt-only`: that comparison alone).
pub(crate) fn python_conformance(args: &[String]) -> Result<(), String> {
    let mut with_tvm = true;
    let mut tvm_test = true;
    let mut kt_size = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--no-tvm" => with_tvm = false,
            "--kt-only" => tvm_test = false,
            "--kt-size" => kt_size = rest.next().cloned(),
            _ => {
                return Err(
                    "usage: cargo xtask python-conformance [--no-tvm] [--kt-only] [--kt-size N]"
                        .into(),
                );
            }
        }
    }
    let venv = if tvm_test {
        prepare(&[TVM_PACKAGE, KERNEL_TUNER_PACKAGE])?
    } else {
        prepare(&[KERNEL_TUNER_PACKAGE])?
    };
    let root = workspace_root();
    let code = if tvm_test {
        tvm_conformance(&venv, &root, with_tvm)?
    } else {
        0
    };
    let mut compare = vec!["crates/python/conformance/kernel_tuner/compare.py"];
    if let Some(size) = &kt_size {
        compare.extend(["--size", size.as_str()]);
    }
    let kt_code = run_python(&venv, &compare, &root)?;
    if code != 0 {
        return Err(format!(
            "TVM's pool test failed against tunebox (pytest exit code {code})"
        ));
    }
    if kt_code != 0 {
        return Err("Kernel Tuner's vector_add example: tunebox and Kernel Tuner differ".into());
    }
    Ok(())
}

/// TVM's `test_popen_pool.py` against tunebox's pool, then (`with_tvm`) against TVM's, both
/// timed; returns pytest's exit code against tunebox's.
fn tvm_conformance(venv: &Path, root: &Path, with_tvm: bool) -> Result<i32, String> {
    let ours = root.join("crates/python/conformance/tvm/test_popen_pool.py");
    let (code, ours_s) = timed_pytest(venv, &ours, root)?;
    let mut summary = vec![format!(
        "tunebox.popen_pool: pytest exit {code} in {ours_s:.1} s"
    )];
    if with_tvm {
        let original = tvm_original(&ours, root)?;
        let (tvm_code, tvm_s) = timed_pytest(venv, &original, root)?;
        summary.push(format!(
            "tvm.support.popen_pool: pytest exit {tvm_code} in {tvm_s:.1} s"
        ));
    }
    eprintln!(
        "\nxtask: TVM's test_popen_pool.py\n  {}",
        summary.join("\n  ")
    );
    Ok(code)
}

/// `cargo xtask python-bench [ARGS…]`: the overheads of `tunebox.popen_pool` against TVM's
/// `PopenPoolExecutor` and `concurrent.futures.ProcessPoolExecutor`
/// (`benchmarks/python/overheads.py`; `docs/performance.md`).
pub(crate) fn python_bench(args: &[String]) -> Result<(), String> {
    let venv = prepare(&[TVM_PACKAGE])?;
    let root = workspace_root();
    let mut all = vec!["benchmarks/python/overheads.py"];
    all.extend(args.iter().map(String::as_str));
    match run_python(&venv, &all, &root)? {
        0 => Ok(()),
        code => Err(format!("the Python benchmark failed (exit code {code})")),
    }
}

/// The environment with `BASE_PACKAGES`, `extra` and the package built from this checkout.
fn prepare(extra: &[&str]) -> Result<PathBuf, String> {
    let root = workspace_root();
    let venv = target_dir(&root).join("python/venv");
    if !venv.join("bin/python").exists() {
        let python = std::env::var("TUNEBOX_PYTHON").unwrap_or_else(|_| "python3".into());
        let venv_arg = venv.to_string_lossy().into_owned();
        run(
            Command::new(&python).args(["-m", "venv", &venv_arg]),
            &format!("{python} -m venv (set TUNEBOX_PYTHON to another interpreter)"),
        )?;
    }
    let mut pip = vec!["-m", "pip", "install", "-q", "--disable-pip-version-check"];
    pip.extend(BASE_PACKAGES);
    pip.extend(extra);
    if run_python(&venv, &pip, &root)? != 0 {
        return Err("pip could not install the Python test dependencies".into());
    }
    let maturin = venv.join("bin/maturin");
    run(
        Command::new(maturin)
            .args(["develop", "--release", "--quiet"])
            .current_dir(&root)
            .env("VIRTUAL_ENV", &venv)
            .env("PATH", path_with(&venv.join("bin"))),
        "maturin develop --release",
    )?;
    Ok(venv)
}

fn timed_pytest(venv: &Path, file: &Path, root: &Path) -> Result<(i32, f64), String> {
    let file = file.to_string_lossy().into_owned();
    let started = Instant::now();
    let code = run_python(
        venv,
        &["-m", "pytest", "-q", "-p", "no:cacheprovider", &file],
        root,
    )?;
    Ok((code, started.elapsed().as_secs_f64()))
}

/// The committed fixture with TVM's own import line back, under `target/python/conformance/`.
fn tvm_original(ours: &Path, root: &Path) -> Result<PathBuf, String> {
    let text = std::fs::read_to_string(ours).map_err(|e| format!("{}: {e}", ours.display()))?;
    let changed = "from tunebox.popen_pool import PopenPoolExecutor, PopenWorker";
    if !text.contains(changed) {
        return Err(format!("{} lacks the line `{changed}`", ours.display()));
    }
    let original = text.replace(
        changed,
        "from tvm.support.popen_pool import PopenPoolExecutor, PopenWorker",
    );
    let dir = target_dir(root).join("python/conformance");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("test_popen_pool_tvm.py");
    std::fs::write(&path, original).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

/// Runs the environment's Python with `args` in `dir`; returns its exit code.
fn run_python(venv: &Path, args: &[&str], dir: &Path) -> Result<i32, String> {
    let python = venv.join("bin/python");
    eprintln!("xtask: python {}", args.join(" "));
    let status = Command::new(&python)
        .args(args)
        .current_dir(dir)
        .env("VIRTUAL_ENV", venv)
        .env("PATH", path_with(&venv.join("bin")))
        .status()
        .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
    Ok(status.code().unwrap_or(-1))
}

fn run(command: &mut Command, what: &str) -> Result<(), String> {
    let status = command
        .status()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({status})"))
    }
}

fn path_with(bin: &Path) -> std::ffi::OsString {
    let mut paths = vec![bin.to_path_buf()];
    paths.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(paths).unwrap_or_default()
}
