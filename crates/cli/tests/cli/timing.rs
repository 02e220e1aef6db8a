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
/// reads its code from a slow disk or is stalled by the machine): that call alone, three times
/// over, would not fit the 800 ms budget of a 1 s timeout. A second call shows it fast, and it
/// is `ok` with the reps it asks for, not `timeout`, nor cut to a rep or two by a budget
/// planned on its first call.
#[test]
fn a_slow_first_call_does_not_fail_or_cut_a_fast_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let kernel = r#"#include <stdint.h>
#include <time.h>
void slow_first(const float *x, float *y, int64_t n) {
    static int first = 1;
    if (first) {
        struct timespec t = {0, 300000000L};
        first = 0;
        nanosleep(&t, 0);
    }
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + 1.0f;
}
"#;
    let manifest = MANIFEST
        .replace("timeout_s = 1.5", "timeout_s = 1")
        .replace("\"slow\"", "\"slow_first\"")
        .replace("SLEEP_MS = [1, 120]", "UNUSED = [0]")
        .replace(
            "[verify]\nreference = { source = \"reference.c\", entry = \"reference\" }\n",
            "",
        );
    std::fs::write(dir.path().join("slow.c"), kernel).unwrap();
    std::fs::write(dir.path().join("slow.toml"), manifest).unwrap();
    let out = tunebox(
        dir.path(),
        &["tune", "slow.toml", "--json", "out.json", "--no-cache"],
    );
    check(&out);
    let report = json(&dir.path().join("out.json"));
    let result = &report["results"][0];
    assert_eq!(result["status"], "ok", "{result:#}");
    assert!(result["reps"].as_u64().unwrap() >= 10, "{result:#}");
    assert_ne!(result["stopped"], "budget", "{result:#}");
}
