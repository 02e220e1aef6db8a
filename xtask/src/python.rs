//! `cargo xtask python-test`, `python-lint`, `python-conformance`, `python-bench`, `wheel` and
//! `wheel-test`: the Python package `tunebox` (crates/python) built into a virtual environment
//! under `target/python/venv` and checked and tested there, or built as a wheel and tested in a
//! fresh environment without a Rust toolchain.
//!
//! The environment is made with the interpreter named in `TUNEBOX_PYTHON` (default `python3`);
//! everything it needs comes from PyPI through pip (maturin, cloudpickle, numpy, psutil, pytest,
//! ruff and mypy, and apache-tvm for the conformance run and the benchmark). The package is
//! built with `maturin develop --release` from the repository root's `pyproject.toml`, which
//! also holds ruff's and mypy's settings.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::{target_dir, workspace_root};

/// What building the package needs, and what it needs at run time.
const BASE_PACKAGES: &[&str] = &["maturin>=1.5,<2", "cloudpickle"];

/// The linters, pinned: a new release's new rules or inferences do not fail an unchanged
/// checkout (raise them on purpose, with the fixes they ask for).
const LINT_PACKAGES: &[&str] = &["ruff==0.17.6", "mypy==2.4.1"];

/// What the pytest suite needs beside the package (`pyproject.toml`'s `test` extra).
pub(crate) const TEST_PACKAGES: &[&str] = &["numpy", "psutil", "pytest"];

/// TVM's release that the conformance run and the benchmark compare with.
const TVM_PACKAGE: &str = "apache-tvm==0.27.0.post1";

/// Kernel Tuner's release that the conformance run compares `tune_kernel` with.
const KERNEL_TUNER_PACKAGE: &str = "kernel_tuner==1.5.0";

/// pytest's exit code when it collected no test: not a failure of ours.
const PYTEST_NO_TESTS: i32 = 5;

/// `cargo xtask python-test [PYTEST_ARGS…]`: the package's lints ([`lint`]), then the package
/// built into the environment, its `_native.pyi` checked against the built module (mypy's
/// stubtest), and its pytest suite.
pub(crate) fn python_test(args: &[String]) -> Result<(), String> {
    let venv = environment(&[])?;
    lint(&venv)?;
    develop(&venv)?;
    stubtest(&venv)?;
    pytest(&venv, args)
}

/// `cargo xtask python-lint`: [`lint`] alone (no build), as `cargo xtask ci` runs it.
pub(crate) fn python_lint() -> Result<(), String> {
    lint(&environment(&[])?)
}

/// `ruff check`, `ruff format --check` and `mypy` on the package, its tests and the Python
/// benchmarks, with the settings of the root `pyproject.toml`. All three run; the error names
/// each that failed and how to fix it.
fn lint(venv: &Path) -> Result<(), String> {
    let root = workspace_root();
    let checks: [(&[&str], &str); 3] = [
        (
            &["-m", "ruff", "check"],
            "`ruff check` found problems (above; `target/python/venv/bin/ruff check --fix` \
             fixes those marked [*])",
        ),
        (
            &["-m", "ruff", "format", "--check"],
            "`ruff format --check`: the files above are not formatted \
             (`target/python/venv/bin/ruff format` formats them)",
        ),
        (
            &["-m", "mypy"],
            "`mypy` found type errors in the Python package (above)",
        ),
    ];
    let mut failed = Vec::new();
    for (args, failure) in checks {
        if run_python(venv, args, &root)? != 0 {
            failed.push(failure);
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the Python lints failed:\n  {}",
            failed.join("\n  ")
        ))
    }
}

/// mypy's stubtest: `tunebox/_native.pyi` against the built extension (names, signatures,
/// defaults), so that the stub cannot drift from the Rust code.
fn stubtest(venv: &Path) -> Result<(), String> {
    let root = workspace_root();
    match run_python(venv, &["-m", "mypy.stubtest", "tunebox._native"], &root)? {
        0 => Ok(()),
        _ => Err(
            "crates/python/python/tunebox/_native.pyi does not match the built extension \
             (stubtest, above): update the stub with the Rust change"
                .into(),
        ),
    }
}

/// The pytest suite with the environment's interpreter, `PYTEST_ARGS` after it.
fn pytest(venv: &Path, args: &[String]) -> Result<(), String> {
    pytest_outcome(status_code(&mut pytest_command(venv, args))?)
}

/// `python -m pytest -q crates/python/tests PYTEST_ARGS…` in the repository root.
pub(crate) fn pytest_command(venv: &Path, args: &[String]) -> Command {
    let mut pytest = vec![
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "crates/python/tests",
    ];
    pytest.extend(args.iter().map(String::as_str));
    python_command(venv, &pytest, &workspace_root())
}

/// pytest's exit code as the task's outcome: no test collected is not a failure of ours.
pub(crate) fn pytest_outcome(code: i32) -> Result<(), String> {
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

/// The environment with `extra` and the package built from this checkout.
fn prepare(extra: &[&str]) -> Result<PathBuf, String> {
    let venv = environment(extra)?;
    develop(&venv)?;
    Ok(venv)
}

/// `target/python/venv` with `BASE_PACKAGES`, `TEST_PACKAGES`, `LINT_PACKAGES` and `extra`
/// installed (made first when missing); not the package itself.
pub(crate) fn environment(extra: &[&str]) -> Result<PathBuf, String> {
    let root = workspace_root();
    let venv = target_dir(&root).join("python/venv");
    if !venv.join("bin/python").exists() {
        make_venv(&venv)?;
    }
    let packages: Vec<&str> = [BASE_PACKAGES, TEST_PACKAGES, LINT_PACKAGES, extra].concat();
    pip_install(&venv, &packages, &root)?;
    Ok(venv)
}

/// A virtual environment at `venv`, made by `TUNEBOX_PYTHON` (default `python3`).
pub(crate) fn make_venv(venv: &Path) -> Result<(), String> {
    let python = std::env::var("TUNEBOX_PYTHON").unwrap_or_else(|_| "python3".into());
    run(
        Command::new(&python).arg("-m").arg("venv").arg(venv),
        &format!("{python} -m venv (set TUNEBOX_PYTHON to another interpreter)"),
    )
}

fn pip_install(venv: &Path, packages: &[&str], root: &Path) -> Result<(), String> {
    let mut pip = vec!["-m", "pip", "install", "-q", "--disable-pip-version-check"];
    pip.extend(packages);
    match run_python(venv, &pip, root)? {
        0 => Ok(()),
        _ => Err(format!(
            "pip could not install {} into {}",
            packages.join(" "),
            venv.display()
        )),
    }
}

/// The package built from this checkout into `venv` (`maturin develop --release`).
fn develop(venv: &Path) -> Result<(), String> {
    run(
        Command::new(venv.join("bin/maturin"))
            .args(["develop", "--release", "--quiet"])
            .current_dir(workspace_root())
            .env("VIRTUAL_ENV", venv)
            .env("PATH", path_with(&venv.join("bin"))),
        "maturin develop --release",
    )
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
    status_code(&mut python_command(venv, args, dir))
}

/// The environment's Python with `args`, in `dir`, the environment's `bin` first on the `PATH`.
pub(crate) fn python_command(venv: &Path, args: &[&str], dir: &Path) -> Command {
    eprintln!("xtask: python {}", args.join(" "));
    let mut command = Command::new(venv.join("bin/python"));
    command
        .args(args)
        .current_dir(dir)
        .env("VIRTUAL_ENV", venv)
        .env("PATH", path_with(&venv.join("bin")));
    command
}

/// Runs `command`; returns its exit code (-1 when a signal ended it).
pub(crate) fn status_code(command: &mut Command) -> Result<i32, String> {
    let status = command
        .status()
        .map_err(|e| format!("cannot run {:?}: {e}", command.get_program()))?;
    Ok(status.code().unwrap_or(-1))
}

pub(crate) fn run(command: &mut Command, what: &str) -> Result<(), String> {
    let status = command
        .status()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what} failed ({status})"))
    }
}

pub(crate) fn path_with(bin: &Path) -> std::ffi::OsString {
    let mut paths = vec![bin.to_path_buf()];
    paths.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    std::env::join_paths(paths).unwrap_or_default()
}
