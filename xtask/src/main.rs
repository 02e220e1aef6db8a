//! `cargo xtask <task>`: the checks CI runs, runnable by any developer.
//!
//! - `ci`: `cargo fmt --check`, `cargo clippy --workspace --all-targets -D warnings`,
//!   `cargo doc --workspace --no-deps` with `RUSTDOCFLAGS=-D warnings`, `cargo test --workspace`.
//! - `bench [--quick] [--strict]`: builds `tunebox-worker` and `tunebox-benchmarks` in release,
//!   runs the overhead benchmarks (issue 9), prints their table and writes
//!   `target/bench/summary.json`. `--quick` runs fewer iterations (a smoke test, under a minute);
//!   `--strict` fails when a target is missed. See `docs/performance.md`.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

const USAGE: &str = "usage: cargo xtask <task>

  ci                        fmt check, clippy -D warnings, docs -D warnings, tests
  bench [--quick] [--strict]
                            overhead benchmarks (release build): prints the table and writes
                            target/bench/summary.json; --quick: fewer iterations (smoke test);
                            --strict: fail when a target is missed";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let task = args.first().cloned();
    let result = match task.as_deref() {
        Some("ci") => ci(),
        Some("bench") => bench(&args[1..]),
        Some("help" | "--help" | "-h") | None => {
            println!("{USAGE}");
            return if task.is_some() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
        Some(other) => Err(format!("unknown task `{other}`; run `cargo xtask help`")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn ci() -> Result<(), String> {
    cargo(&["fmt", "--all", "--", "--check"], &[])?;
    cargo(
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    cargo(
        &["doc", "--workspace", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    cargo(&["test", "--workspace"], &[])
}

/// `cargo xtask bench [--quick] [--strict]`.
fn bench(args: &[String]) -> Result<(), String> {
    let mut extra = Vec::new();
    for arg in args {
        match arg.as_str() {
            "--quick" | "--strict" => extra.push(arg.as_str()),
            other => {
                return Err(format!(
                    "unknown option `{other}` for bench; see `cargo xtask help`"
                ));
            }
        }
    }
    let started = Instant::now();
    let root = workspace_root();
    cargo(
        &[
            "build",
            "--release",
            "--package",
            "tunebox-worker",
            "--package",
            "tunebox-benchmarks",
        ],
        &[],
    )?;
    let release = target_dir(&root).join("release");
    let summary = target_dir(&root).join("bench").join("summary.json");
    let benchmarks = release.join("tunebox-benchmarks");
    let status = Command::new(&benchmarks)
        .arg("run")
        .arg("--worker")
        .arg(release.join("tunebox-worker"))
        .arg("--json")
        .arg(&summary)
        .args(&extra)
        .current_dir(&root)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", benchmarks.display()))?;
    eprintln!(
        "xtask: bench took {:.1} s in all (build included)",
        started.elapsed().as_secs_f64()
    );
    if status.success() {
        Ok(())
    } else {
        Err(format!("the benchmarks failed ({status})"))
    }
}

/// The workspace root: the parent of this package's directory.
fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// Cargo's target directory: `CARGO_TARGET_DIR` (relative to the workspace root, where the build
/// runs) or `<root>/target`.
fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => root.join(dir),
        _ => root.join("target"),
    }
}

/// Runs `cargo <args>` with extra environment, failing on a non-zero exit.
fn cargo(args: &[&str], env: &[(&str, &str)]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("xtask: cargo {}", args.join(" "));
    let status = Command::new(&cargo)
        .args(args)
        .current_dir(workspace_root())
        .envs(env.iter().copied())
        .status()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`cargo {}` failed ({status})", args.join(" ")))
    }
}
