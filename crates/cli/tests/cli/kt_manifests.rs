//! Kernel Tuner manifests as Kernel Tuner users write them: a metric as the objective, the
//! grid fields of a CUDA run in a C manifest, a problem size as an expression, and the
//! mistakes a Kernel Tuner script allows (a lambda restriction, a param named as a scalar).

use std::path::Path;

use crate::util::{json, text, tunebox};

const KERNEL: &str = r#"
#include <stdint.h>
void scale(float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * UNROLL;
}
"#;

/// A Kernel Tuner-style C manifest; `extra` goes on top, `params` is the `[tune_params]` line.
fn manifest(dir: &Path, extra: &str, params: &str) -> String {
    std::fs::write(dir.join("scale.c"), KERNEL).unwrap();
    let text = format!(
        r#"{extra}
kernel_name = "scale"
kernel_source = "scale.c"
lang = "C"
problem_size = ["2 ** 6"]
grid_div_x = ["UNROLL"]
[tune_params]
{params}
[metrics]
work = "UNROLL * problem_size_x"
[timing]
warmup_ms = 1
rep_ms = 2
flush_cache = false
[[tensors]]
name = "y"
dtype = "f32"
shape = [64]
[[scalars]]
name = "n"
value = 64
"#
    );
    std::fs::write(dir.join("kt.toml"), text).unwrap();
    "kt.toml".into()
}

#[test]
fn a_metric_objective_ranks_the_table_the_best_line_and_every_report() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(
        dir.path(),
        "objective = \"work\"\nobjective_higher_is_better = true",
        "UNROLL = [1, 2, 4]",
    );
    let out = tunebox(
        dir.path(),
        &[
            "tune",
            &m,
            "--json",
            "r.json",
            "--csv",
            "r.csv",
            "--t4",
            "r.t4.json",
            "--no-cache",
        ],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // Whatever the times, the most work ranks first.
    assert!(
        stdout.contains("best: UNROLL=4 at")
            && stdout.contains("(ranked by work, higher is better)"),
        "{stdout}"
    );
    let rows: Vec<&str> = stdout.lines().filter(|l| l.contains("UNROLL=")).collect();
    let position = |label: &str| rows.iter().position(|r| r.contains(label)).unwrap();
    assert!(
        position("UNROLL=4") < position("UNROLL=2") && position("UNROLL=2") < position("UNROLL=1"),
        "{stdout}"
    );
    // With the problem size, Kernel Tuner's grid_div_x gives the C kernel's grid_size_x macro
    // (tests/test_kernel_tuner.py checks its value): not ignored.
    assert!(!stdout.contains("grid_div_x ignored"), "{stdout}");

    let report = json(&dir.path().join("r.json"));
    let order: Vec<i64> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["choice"]["UNROLL"].as_i64().unwrap())
        .collect();
    assert_eq!(order, [4, 2, 1]);
    assert_eq!(report["best"]["choice"]["UNROLL"], 4);
    assert_eq!(report["objective"]["name"], "work");
    assert_eq!(report["objective"]["higher_is_better"], true);
    let csv = std::fs::read_to_string(dir.path().join("r.csv")).unwrap();
    let first_row = csv.lines().nth(1).unwrap();
    assert!(first_row.contains("256"), "{csv}");
    let t4 = json(&dir.path().join("r.t4.json"));
    assert_eq!(t4["results"][0]["objectives"][0], "work");
    assert_eq!(t4["results"][0]["configuration"]["UNROLL"], 4);
    // Read back, the report is ranked the same way.
    let again = tunebox(dir.path(), &["report", "r.json"]);
    assert!(
        text(&again.stdout).contains("best: UNROLL=4 at"),
        "{}",
        text(&again.stdout)
    );
}

#[test]
fn lower_is_better_by_default_as_in_kernel_tuner_and_said() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path(), "objective = \"work\"", "UNROLL = [1, 2, 4]");
    let out = tunebox(dir.path(), &["tune", &m, "--no-cache", "--json", "r.json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("objective_higher_is_better = true"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(
        json(&dir.path().join("r.json"))["best"]["choice"]["UNROLL"],
        1
    );
}

#[test]
fn kernel_tuner_mistakes_are_refused_when_the_manifest_is_read() {
    let dir = tempfile::tempdir().unwrap();
    // A param named as a scalar: every choice would fail to compile.
    let m = manifest(dir.path(), "", "UNROLL = [1, 2]\nn = [1, 2]");
    let out = tunebox(dir.path(), &["tune", &m, "--no-cache"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("`n` is also the name of a scalar argument"),
        "{}",
        text(&out.stderr)
    );
    // A restriction as a Python lambda: what to write instead.
    let m = manifest(
        dir.path(),
        "restrictions = [\"lambda p: p['UNROLL'] > 1\"]",
        "UNROLL = [1, 2]",
    );
    let out = tunebox(dir.path(), &["tune", &m, "--list"]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("a manifest gives the condition itself")
            && text(&out.stderr).contains("\"UNROLL > 1\""),
        "{}",
        text(&out.stderr)
    );
}

/// `--replay` ranks as a run does: by the manifest's objective, computed from each recorded
/// time, not by the time itself.
#[test]
fn a_replay_ranks_by_the_manifests_objective() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(
        dir.path(),
        "objective = \"work\"\nobjective_higher_is_better = true",
        "UNROLL = [1, 2, 4]",
    );
    // Recorded times in the opposite order of the work: by time, UNROLL=1 would win.
    let result = |unroll: u32, ms: f64| {
        format!(
            r#"{{"configuration": {{"UNROLL": {unroll}}}, "objectives": ["time"],
                "times": {{"runtimes": [{ms}]}}, "invalidity": "correct", "correctness": 1,
                "measurements": [{{"name": "time", "value": {ms}, "unit": "ms"}}]}}"#
        )
    };
    let t4 = format!(
        r#"{{"schema_version": "1.0.0", "results": [{}, {}, {}]}}"#,
        result(1, 1.0),
        result(2, 2.0),
        result(4, 3.0)
    );
    std::fs::write(dir.path().join("recorded.t4.json"), t4).unwrap();
    let out = tunebox(
        dir.path(),
        &[
            "tune",
            &m,
            "--replay",
            "recorded.t4.json",
            "--json",
            "r.json",
        ],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    assert!(
        stdout.contains("best: UNROLL=4 at 3.000 ms")
            && stdout.contains("(ranked by work, higher is better)"),
        "{stdout}"
    );
    let report = json(&dir.path().join("r.json"));
    let order: Vec<i64> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["choice"]["UNROLL"].as_i64().unwrap())
        .collect();
    assert_eq!(order, [4, 2, 1], "{report}");
    assert_eq!(report["objective"]["name"], "work");
    assert_eq!(report["results"][0]["metrics"]["work"], 256.0);
}
