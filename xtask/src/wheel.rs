//! `cargo xtask wheel` and `wheel-test`: the Python package as the wheel a user installs, and
//! its pytest suite run against that wheel where no Rust toolchain is.
//!
//! The wheel is abi3 (one wheel for CPython ≥ 3.9) and manylinux: `maturin build --release
//! --strip`, whose audit picks the oldest manylinux tag the extension's glibc symbols allow
//! (on glibc 2.36, `manylinux_2_35`), or the tag given with `--compatibility` (which fails where
//! the symbols need a newer glibc: build in a manylinux container for an older tag). The
//! extension carries tunebox's Rust worker (the `worker-binary` feature, `crates/python/build.rs`),
//! so the wheel needs nothing beside it. See docs/python.md.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::python::{
    TEST_PACKAGES, environment, make_venv, pytest_command, pytest_outcome, python_command, run,
    status_code,
};
use crate::{target_dir, workspace_root};

/// Where `cargo xtask wheel` writes the wheel (emptied first), under the target directory.
const WHEEL_DIR: &str = "python/wheel";

/// The fresh environment `wheel-test` installs the wheel into, and its cache directory.
const TEST_VENV_DIR: &str = "python/wheel-venv";
const TEST_CACHE_DIR: &str = "python/wheel-cache";

/// Programs that make a Rust toolchain: no directory holding one stays on the tests' `PATH`.
const RUST_PROGRAMS: &[&str] = &["cargo", "rustc", "rustup"];

/// Run by the wheel's interpreter before the tests: fails unless the package comes from the
/// installed wheel (not this checkout) and no Rust program can be found; prints what it found.
const PREFLIGHT: &str = "\
import os, shutil, sys
import tunebox, tunebox._native as native
found = [p for p in ('cargo', 'rustc', 'rustup') if shutil.which(p)]
assert not found, f'a Rust toolchain is on the PATH: {found}'
assert tunebox.__file__.startswith(sys.prefix), f'tunebox comes from {tunebox.__file__}'
print(f'tunebox {tunebox.__version__} from {os.path.dirname(tunebox.__file__)}')
print(f'its Rust worker: {native.engine_worker()}')
";

/// `cargo xtask wheel [--compatibility TAG]`: builds the wheel into `target/python/wheel/`.
pub(crate) fn wheel(args: &[String]) -> Result<(), String> {
    let compatibility = compatibility(args)?;
    let wheel = build(compatibility.as_deref())?;
    eprintln!("xtask: built {}", wheel.display());
    Ok(())
}

/// `cargo xtask wheel-test [--compatibility TAG] [-- PYTEST_ARGS…]`: builds the wheel, installs
/// it with the test requirements into a fresh environment, and runs the pytest suite there
/// with no Rust toolchain on the `PATH`, no `CARGO*`/`RUSTUP*`/`RUSTC*` variables and an empty
/// tunebox cache (so the worker the tests start is the one the wheel carries).
pub(crate) fn wheel_test(args: &[String]) -> Result<(), String> {
    let (ours, pytest_args) = match args.iter().position(|a| a == "--") {
        Some(split) => (&args[..split], &args[split + 1..]),
        None => (args, &[][..]),
    };
    let compatibility = compatibility(ours)?;
    let wheel = build(compatibility.as_deref())?;
    let root = workspace_root();
    let target = target_dir(&root);
    let venv = fresh_dir(&target.join(TEST_VENV_DIR))?;
    let cache = fresh_dir(&target.join(TEST_CACHE_DIR))?;
    make_venv(&venv)?;
    let wheel_arg = wheel.to_string_lossy().into_owned();
    let mut pip = vec!["-m", "pip", "install", "-q", "--disable-pip-version-check"];
    pip.push(&wheel_arg);
    pip.extend(TEST_PACKAGES);
    let mut install = python_command(&venv, &pip, &root);
    without_rust(&mut install, &venv, &cache);
    run(
        &mut install,
        "pip install of the wheel and the test requirements, with no Rust toolchain",
    )?;
    let mut preflight = python_command(&venv, &["-c", PREFLIGHT], &root);
    without_rust(&mut preflight, &venv, &cache);
    run(
        &mut preflight,
        "the check that the wheel's package is the one imported, with no Rust toolchain",
    )?;
    let mut pytest = pytest_command(&venv, pytest_args);
    without_rust(&mut pytest, &venv, &cache);
    pytest_outcome(status_code(&mut pytest)?)
        .map_err(|e| format!("{e}, against the wheel {}", wheel.display()))?;
    eprintln!(
        "xtask: the pytest suite passed against {} with no Rust toolchain",
        wheel.display()
    );
    Ok(())
}

fn compatibility(args: &[String]) -> Result<Option<String>, String> {
    match args {
        [] => Ok(None),
        [flag, tag] if flag == "--compatibility" => Ok(Some(tag.clone())),
        _ => Err("usage: cargo xtask wheel [--compatibility TAG] (e.g. manylinux_2_28)".into()),
    }
}

/// `maturin build --release --strip` into an emptied `target/python/wheel/`; the wheel's path.
fn build(compatibility: Option<&str>) -> Result<PathBuf, String> {
    let venv = environment(&[])?;
    let root = workspace_root();
    let out = fresh_dir(&target_dir(&root).join(WHEEL_DIR))?;
    let mut maturin = Command::new(venv.join("bin/maturin"));
    maturin
        .args(["build", "--release", "--strip", "--out"])
        .arg(&out)
        .current_dir(&root)
        .env("VIRTUAL_ENV", &venv)
        .env("PATH", crate::python::path_with(&venv.join("bin")));
    if let Some(tag) = compatibility {
        maturin.args(["--compatibility", tag]);
    }
    run(&mut maturin, "maturin build --release")?;
    the_wheel(&out)
}

/// The one `.whl` file in `dir`.
fn the_wheel(dir: &Path) -> Result<PathBuf, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let wheels: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|x| x == "whl"))
        .collect();
    match wheels.as_slice() {
        [wheel] => Ok(wheel.clone()),
        _ => Err(format!(
            "expected one wheel in {}, found {}",
            dir.display(),
            wheels.len()
        )),
    }
}

/// `dir`, removed with what it held and made again, empty.
fn fresh_dir(dir: &Path) -> Result<PathBuf, String> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir.to_path_buf())
}

/// Gives `command` this process's environment less a Rust toolchain: no `CARGO*`, `RUSTUP*`,
/// `RUSTC*`, `RUSTDOC*` or `RUSTFLAGS` variable (cargo sets several for the xtask), a `PATH`
/// without the directories that hold `cargo`, `rustc` or `rustup` (the environment's `bin`
/// first), and `TUNEBOX_CACHE_DIR` set to `cache`.
fn without_rust(command: &mut Command, venv: &Path, cache: &Path) {
    command.env_clear();
    for (name, value) in std::env::vars_os() {
        if !is_rust_variable(&name) && name != "PATH" {
            command.env(name, value);
        }
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let kept = std::env::split_paths(&path).filter(|dir| !holds_rust(dir));
    let path =
        std::env::join_paths(std::iter::once(venv.join("bin")).chain(kept)).unwrap_or_default();
    command
        .env("PATH", path)
        .env("VIRTUAL_ENV", venv)
        .env("TUNEBOX_CACHE_DIR", cache);
}

fn is_rust_variable(name: &OsString) -> bool {
    let name = name.to_string_lossy();
    ["CARGO", "RUSTUP", "RUSTC", "RUSTDOC"]
        .iter()
        .any(|prefix| name.starts_with(prefix))
        || name == "RUSTFLAGS"
}

fn holds_rust(dir: &Path) -> bool {
    RUST_PROGRAMS
        .iter()
        .any(|program| dir.join(program).exists())
}
