//! `cargo xtask loaded-test [--all]`: the CLI's end-to-end tests and the faults example with
//! every core busy, as users' machines are.
//!
//! Builds first (on an idle machine), then starts 2 × `nproc` busy loops (`sh -c 'while :; do
//! :; done'`), runs `cargo test -p tunebox-cli` (`--all`: `cargo test --workspace`) and
//! `tunebox tune examples/faults-cpu.toml --workers 2`, checks that every choice of the faults
//! example gets its documented status, and stops the busy loops whatever happens.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use crate::agreement::{label, report_results};
use crate::busy::Hogs;
use crate::{cargo, target_dir, workspace_root};

/// What `examples/faults-cpu.toml` documents for each `MODE`.
const FAULT_STATUSES: [&str; 6] = [
    "ok",
    "crashed",
    "crashed",
    "timeout",
    "wrong",
    "compile_error",
];

/// `cargo xtask loaded-test`.
pub(crate) fn loaded_test(args: &[String]) -> Result<(), String> {
    let all = match args {
        [] => false,
        [flag] if flag == "--all" => true,
        _ => return Err("usage: cargo xtask loaded-test [--all]".into()),
    };
    let root = workspace_root();
    let test_args: &[&str] = if all {
        &["test", "--workspace"]
    } else {
        &["test", "--package", "tunebox-cli"]
    };
    // Build on an idle machine: the load is for running, not compiling.
    cargo(&["build", "--release", "--package", "tunebox-cli"], &[])?;
    cargo(&[test_args, &["--no-run"]].concat(), &[])?;

    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let hogs = Hogs::start(2 * cores)?;
    eprintln!(
        "xtask: {} busy loops on {cores} cores; running the tests",
        hogs.count()
    );
    let started = Instant::now();
    cargo(test_args, &[])?;
    let tests_s = started.elapsed().as_secs_f64();

    let (json, faults_s) = run_faults_example(&root)?;
    drop(hogs);
    check_fault_statuses(&json)?;
    eprintln!(
        "xtask: with {} busy loops: tests passed in {tests_s:.1} s; the faults example gave its \
         12 documented statuses in {faults_s:.1} s",
        2 * cores
    );
    Ok(())
}

/// Runs `tunebox tune examples/faults-cpu.toml --workers 2` (release) from an empty kernel
/// cache: the path of its JSON report and its wall time (s).
fn run_faults_example(root: &Path) -> Result<(PathBuf, f64), String> {
    let out = target_dir(root).join("loaded-test");
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let json = out.join("faults.json");
    let kernels = out.join("kernel-cache");
    let _ = std::fs::remove_dir_all(&kernels);
    let started = Instant::now();
    let status = Command::new(target_dir(root).join("release").join("tunebox"))
        .args([
            "tune",
            "examples/faults-cpu.toml",
            "--workers",
            "2",
            "--no-cache",
        ])
        .arg("--json")
        .arg(&json)
        .env("TUNEBOX_CACHE_DIR", &kernels)
        .current_dir(root)
        .status()
        .map_err(|e| format!("cannot run tunebox: {e}"))?;
    let faults_s = started.elapsed().as_secs_f64();
    if !status.success() {
        return Err(format!("the faults example failed under load ({status})"));
    }
    Ok((json, faults_s))
}

/// Checks that the faults example's report at `json` has its 12 results, each with the status
/// [`FAULT_STATUSES`] documents for its `MODE`.
fn check_fault_statuses(json: &Path) -> Result<(), String> {
    let mut wrong = Vec::new();
    let results = report_results(json)?;
    for result in &results {
        let mode = result["choice"]["MODE"].as_u64().unwrap_or(u64::MAX);
        let expected = FAULT_STATUSES.get(mode as usize).copied().unwrap_or("?");
        if result["status"] != expected {
            wrong.push(format!(
                "{}: {} (expected {expected}): {}",
                label(&result["choice"]),
                result["status"],
                result["error"]
            ));
        }
    }
    if results.len() != 12 || !wrong.is_empty() {
        return Err(format!(
            "the faults example under load: {} results, wrong statuses:\n{}",
            results.len(),
            wrong.join("\n")
        ));
    }
    Ok(())
}
