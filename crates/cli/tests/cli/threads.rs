//! Kernels that start threads of their own (OpenMP): once a window shows one, nothing more is
//! measured beside the compiles, which would take a CPU from its threads; a single-threaded
//! kernel is measured beside them as before.

use std::path::Path;
use std::process::Command;

use crate::util::{check, command, json, text};

/// A sum over `n` floats, split over a team of `TEAM` threads (1: no team is started), `WORK`
/// times over.
const KERNEL: &str = r#"#include <stdint.h>
void sum(const float *x, float *out, int64_t n) {
    float total = 0.0f;
    for (int w = 0; w < WORK; w++) {
#pragma omp parallel for reduction(+ : total) num_threads(TEAM) if (TEAM > 1)
        for (int64_t i = 0; i < n; i++) total += x[i] * 0.5f;
    }
    out[0] = total;
}
"#;

/// The manifest for `team` threads per choice: 16 choices that differ in `WORK`, so that the
/// compiles outlast the first window by far.
fn manifest(team: u32) -> String {
    format!(
        r#"
name = "sum"
timeout_s = 30
[kernel]
source = "sum.c"
entry = "sum"
flags = ["-O1", "-fopenmp"]
[[tensors]]
name = "x"
dtype = "f32"
shape = [65536]
init = "ones"
[[tensors]]
name = "out"
dtype = "f32"
shape = [1]
init = "zeros"
output = true
[[scalars]]
name = "n"
value = 65536
[params]
TEAM = [{team}]
WORK = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]
[timing]
warmup_ms = 1
rep_ms = 4
"#
    )
}

/// Runs the manifest for `team` threads; on a machine of two CPUs or more, on two of them
/// (`taskset`), so that the compiles, on about one and a half CPUs, outlast the first window
/// however many CPUs the machine has. Returns the report and what tunebox printed.
fn run(dir: &Path, team: u32) -> (serde_json::Value, String) {
    std::fs::write(dir.join("sum.c"), KERNEL).unwrap();
    std::fs::write(dir.join("sum.toml"), manifest(team)).unwrap();
    let tune = command(
        dir,
        &["tune", "sum.toml", "--json", "r.json", "--no-cache"],
        &[],
    );
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pinned = cpus >= 2
        && Command::new("taskset")
            .args(["-c", "0,1", "true"])
            .status()
            .is_ok_and(|s| s.success());
    let out = if pinned {
        let mut taskset = Command::new("taskset");
        taskset
            .args(["-c", "0,1"])
            .arg(tune.get_program())
            .args(tune.get_args())
            .current_dir(dir);
        for (key, value) in tune.get_envs() {
            match value {
                Some(value) => taskset.env(key, value),
                None => taskset.env_remove(key),
            };
        }
        taskset.output().unwrap()
    } else {
        let mut tune = tune;
        tune.output().unwrap()
    };
    check(&out);
    let report = json(&dir.join("r.json"));
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 16, "{report}");
    assert!(results.iter().all(|r| r["status"] == "ok"), "{report}");
    (report, text(&out.stderr))
}

const NOTE: &str = "the kernel starts threads of its own";

#[test]
fn a_kernel_with_a_thread_team_is_measured_after_the_compiles() {
    let dir = tempfile::tempdir().unwrap();
    let (report, stderr) = run(dir.path(), 2);
    if stderr.contains("while measuring") {
        // Measuring overlapped the compiles until the first window showed the team; that
        // window shared the CPUs with a compile, and says so.
        assert!(stderr.contains(NOTE), "{stderr}");
        assert!(
            report["conditions"]["disturbed"].as_u64().unwrap() >= 1,
            "{report}"
        );
    } else {
        // One CPU, or two that share a core: every compile ends before any window.
        assert!(!stderr.contains(NOTE), "{stderr}");
    }
}

#[test]
fn a_single_threaded_kernel_is_measured_beside_the_compiles() {
    let dir = tempfile::tempdir().unwrap();
    let (_, stderr) = run(dir.path(), 1);
    assert!(!stderr.contains(NOTE), "{stderr}");
}
