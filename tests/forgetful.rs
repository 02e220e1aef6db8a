//! A program that forgets the worker entry point (`run_if_worker`) and uses its own executable
//! as the worker gets one clear error, quickly, and no process tree.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::util::wait_gone;

/// Workers of the forgetful program's pool (see tests/forgetful_main.rs).
const WORKERS: usize = 2;

/// Start attempts per worker before a pool gives up (the pool's `MAX_START_FAILURES`).
const START_ATTEMPTS: usize = 3;

/// Runs the forgetful program in `mode`; returns its stderr and the `(pid, parent pid)` of every
/// run of its `main`, the top run first.
fn run_forgetful(mode: &str) -> (String, Vec<(u32, u32)>) {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("runs");
    let start = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_tunebox-test-forgetful"))
        .env("TUNEBOX_TEST_FORGETFUL_COUNTER", &counter)
        .env("TUNEBOX_TEST_FORGETFUL_MODE", mode)
        .env_remove(tunebox_process::WORKER_PATH_ENV)
        .env_remove(tunebox_protocol::WORKER_SERVER_ENV)
        .output()
        .unwrap();
    let elapsed = start.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    // Well under the 30 s handshake timeout the failure would otherwise wait for.
    assert!(elapsed < Duration::from_secs(20), "took {elapsed:?}");
    assert_eq!(output.status.code(), Some(1), "stderr: {stderr}");
    (stderr, runs(&counter))
}

fn runs(counter: &Path) -> Vec<(u32, u32)> {
    std::fs::read_to_string(counter)
        .unwrap()
        .lines()
        .map(|line| {
            let (pid, parent) = line.split_once(' ').unwrap();
            (pid.parse().unwrap(), parent.parse().unwrap())
        })
        .collect()
}

/// The runs form a tree of depth one at most, bounded in size, and all of it is gone.
fn assert_no_process_tree(runs: &[(u32, u32)]) {
    let me = std::process::id();
    let top: Vec<_> = runs.iter().filter(|(_, parent)| *parent == me).collect();
    assert_eq!(top.len(), 1, "one top run: {runs:?}");
    let top = top[0].0;
    assert!(
        runs.len() <= 1 + WORKERS * START_ATTEMPTS,
        "main ran {} times: {runs:?}",
        runs.len()
    );
    for &(pid, parent) in runs {
        assert!(
            pid == top || parent == top,
            "run {pid} was started by {parent}, not by the top program {top}: a worker started \
             workers ({runs:?})"
        );
        assert!(
            wait_gone(pid, Duration::from_secs(5)).is_some(),
            "process {pid} is still running"
        );
    }
}

fn assert_names_the_fix(stderr: &str) {
    assert!(
        stderr.contains("never reached the worker entry point"),
        "stderr: {stderr}"
    );
    assert!(
        stderr.contains("tunebox_worker::run_if_worker(...)") && stderr.contains("TUNEBOX_WORKER"),
        "stderr: {stderr}"
    );
    assert!(!stderr.contains("exited before connecting"), "{stderr}");
}

/// The forgetful program's workers run its `main`, which builds a pool: each refuses to start
/// workers of its own and exits with `EXIT_NO_WORKER_ENTRY`, and the top program's pool fails
/// with `NoWorkerEntry` at once.
#[test]
fn a_program_without_the_worker_entry_gets_one_clear_error_and_no_process_tree() {
    let (stderr, runs) = run_forgetful("pool");
    assert_names_the_fix(&stderr);
    assert_no_process_tree(&runs);
}

/// The same when the forgetful program's `main` simply returns in its workers: the exit hook
/// turns the return into `EXIT_NO_WORKER_ENTRY`, not a silent exit 0 before the handshake.
#[test]
fn a_worker_returning_from_main_without_the_entry_is_reported_as_such() {
    let (stderr, runs) = run_forgetful("return");
    assert_names_the_fix(&stderr);
    assert_no_process_tree(&runs);
}
