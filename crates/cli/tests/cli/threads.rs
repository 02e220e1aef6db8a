//! Kernels that start threads of their own (OpenMP): once a window shows one, nothing more is
//! measured beside the compiles, which would take a CPU from its threads; a single-threaded
//! kernel is measured beside them as before.

use std::path::Path;

use crate::util::{check, json, text, tunebox};

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

fn run(dir: &Path, team: u32) -> String {
    std::fs::write(dir.join("sum.c"), KERNEL).unwrap();
    std::fs::write(dir.join("sum.toml"), manifest(team)).unwrap();
    let out = tunebox(dir, &["tune", "sum.toml", "--json", "r.json", "--no-cache"]);
    check(&out);
    let report = json(&dir.join("r.json"));
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 16, "{report}");
    assert!(results.iter().all(|r| r["status"] == "ok"), "{report}");
    text(&out.stderr)
}

const NOTE: &str = "the kernel starts threads of its own";

#[test]
fn a_kernel_with_a_thread_team_is_measured_after_the_compiles() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let dir = tempfile::tempdir().unwrap();
    let stderr = run(dir.path(), 2);
    if cpus >= 2 {
        // Measuring overlaps the compiles on two CPUs or more, until the first window shows
        // the team.
        assert!(stderr.contains(NOTE), "{stderr}");
    } else {
        assert!(
            !stderr.contains(NOTE),
            "one CPU compiles first anyway: {stderr}"
        );
    }
}

#[test]
fn a_single_threaded_kernel_is_measured_beside_the_compiles() {
    let dir = tempfile::tempdir().unwrap();
    let stderr = run(dir.path(), 1);
    assert!(!stderr.contains(NOTE), "{stderr}");
}
