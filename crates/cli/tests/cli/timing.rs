//! Timeouts that mean what users expect: a slow choice is measured with fewer reps rather than
//! killed, and the reference is called once, under a deadline of its own.

use crate::util::{check, json, text, tunebox};

/// `y = 2x + 1` after sleeping `SLEEP_MS` (a define) per call; each call of the reference
/// appends a line to `log`.
fn sources(dir: &std::path::Path) -> (String, String) {
    let kernel = r#"#include <stdint.h>
#include <time.h>
void slow(const float *x, float *y, int64_t n) {
    struct timespec t = {0, SLEEP_MS * 1000000L};
    nanosleep(&t, 0);
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + 1.0f;
}
"#;
    let log = dir.join("reference-calls.txt");
    let reference = format!(
        r#"#include <stdint.h>
#include <stdio.h>
#include <time.h>
void reference(const float *x, float *y, int64_t n) {{
    FILE *log = fopen("{}", "a");
    if (log) {{ fputs("call\n", log); fclose(log); }}
    struct timespec t = {{0, 300000000L}};
    nanosleep(&t, 0);
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + 1.0f;
}}
"#,
        log.display()
    );
    (kernel.into(), reference)
}

const MANIFEST: &str = r#"
timeout_s = 1.5
[kernel]
source = "slow.c"
entry = "slow"
flags = ["-O2"]
[[tensors]]
name = "x"
dtype = "f32"
shape = [1024]
[[tensors]]
name = "y"
dtype = "f32"
shape = [1024]
init = "zeros"
output = true
[[scalars]]
name = "n"
value = 1024
[params]
SLEEP_MS = [1, 120]
[timing]
min_reps = 10
[verify]
reference = { source = "reference.c", entry = "reference" }
"#;

/// With a 1.5 s timeout: a 120 ms choice (at least 10 reps, after 5 estimate runs and the
/// first call: about 2 s) is `ok` with fewer reps and a note saying so; the 300 ms reference
/// (which a full measurement would call a dozen times) is called twice: once, and once more on
/// fresh inputs.
#[test]
fn slow_choices_get_fewer_reps_and_the_reference_is_never_timed() {
    let dir = tempfile::tempdir().unwrap();
    let (kernel, reference) = sources(dir.path());
    std::fs::write(dir.path().join("slow.c"), kernel).unwrap();
    std::fs::write(dir.path().join("reference.c"), reference).unwrap();
    std::fs::write(dir.path().join("slow.toml"), MANIFEST).unwrap();
    let out = tunebox(
        dir.path(),
        // One window, as the timeout's budget is asked of it.
        &[
            "tune",
            "slow.toml",
            "--json",
            "out.json",
            "--no-cache",
            "--rounds",
            "0",
        ],
    );
    check(&out);
    let calls = std::fs::read_to_string(dir.path().join("reference-calls.txt")).unwrap();
    // Once for its outputs, once on fresh inputs (docs/sandbox.md): never timed.
    assert_eq!(
        calls.lines().count(),
        2,
        "the reference was called {calls:?}"
    );

    let report = json(&dir.path().join("out.json"));
    let results = report["results"].as_array().unwrap();
    assert!(results.iter().all(|r| r["status"] == "ok"), "{results:#?}");
    let slow = results
        .iter()
        .find(|r| r["choice"]["SLEEP_MS"] == 120)
        .unwrap();
    let reps = slow["reps"].as_u64().unwrap();
    assert!((1..10).contains(&reps), "{slow}");
    assert_eq!(slow["stopped"], "budget", "{slow}");
    let fast = results
        .iter()
        .find(|r| r["choice"]["SLEEP_MS"] == 1)
        .unwrap();
    assert!(fast["reps"].as_u64().unwrap() >= 10, "{fast}");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("1 choice measured with fewer reps than the timing asks for"),
        "{stdout}"
    );
}

/// A fast kernel whose first call in a process is slow (300 ms here, as a first call that
/// reads its code from a slow disk or is stalled by the machine), and that negates its input
/// `x` in place on every call, under `timeout_s`: the run's one choice (one window, with the
/// whole timing: at least 10 reps).
fn slow_first_call(timeout_s: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let kernel = r#"#include <stdint.h>
#include <time.h>
void slow_first(float *x, float *y, int64_t n) {
    static int first = 1;
    if (first) {
        struct timespec t = {0, 300000000L};
        first = 0;
        nanosleep(&t, 0);
    }
    for (int64_t i = 0; i < n; i++) {
        y[i] = 2.0f * x[i] + 1.0f;
        x[i] = -x[i];
    }
}
"#;
    let manifest = MANIFEST
        .replace("timeout_s = 1.5", &format!("timeout_s = {timeout_s}"))
        .replace("\"slow\"", "\"slow_first\"")
        .replace("SLEEP_MS = [1, 120]", "UNUSED = [0]")
        // Its own reference: the window returns its outputs, and looks for written inputs
        // after the first call.
        .replace(
            "reference = { source = \"reference.c\", entry = \"reference\" }",
            "reference = { choice = { UNUSED = 0 } }",
        );
    std::fs::write(dir.path().join("slow.c"), kernel).unwrap();
    std::fs::write(dir.path().join("slow.toml"), manifest).unwrap();
    let out = tunebox(
        dir.path(),
        &["tune", "slow.toml", "--json", "out.json", "--no-cache"],
    );
    check(&out);
    json(&dir.path().join("out.json"))["results"][0].clone()
}

/// `ok`, with the 10 reps asked for, not cut by the budget.
fn measured_in_full(result: &serde_json::Value) {
    assert_eq!(result["status"], "ok", "{result:#}");
    assert!(result["reps"].as_u64().unwrap() >= 10, "{result:#}");
    assert_ne!(result["stopped"], "budget", "{result:#}");
}

/// With a 1.25 s timeout (a 1 s budget), three more 300 ms calls after the first would not
/// fit: a second call shows the kernel fast, and it is `ok` with the reps it asks for, not
/// `timeout`. The second call runs on the input put back, so the write is seen.
#[test]
fn a_slow_first_call_gets_a_second_opinion_before_the_choice_fails() {
    let result = slow_first_call("1.25");
    measured_in_full(&result);
    assert_eq!(
        result["mutated_inputs"],
        serde_json::json!(["x"]),
        "{result:#}"
    );
}

/// With a 2.5 s timeout (a 2 s budget) the first call fits, and the reps planned on it are cut
/// to about three of the 10 asked for; they run in microseconds, and the plan is re-fitted on
/// them: the 10.
#[test]
fn reps_cut_on_a_slow_first_call_are_re_fitted_on_the_reps() {
    let result = slow_first_call("2.5");
    measured_in_full(&result);
}
