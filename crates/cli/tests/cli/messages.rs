//! Messages name what the user wrote and the fix: Kernel Tuner's `answer[i]` rather than the
//! field it becomes, and for a kernel wrong only after the timed reps, what it did to which
//! tensor (`reset = true` for one updated in place or accumulated into).

use crate::util::{json, text, tunebox};

/// MODE 0 doubles `x` in place; MODE 1 adds into `y`.
const KERNEL: &str = r#"#include <stdint.h>
void k(float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (MODE == 0) x[i] = 2.0f * x[i];
        if (MODE == 1) y[i] += x[i];
    }
}
"#;

fn manifest(mode: i64, x: &str, y: &str) -> String {
    format!(
        r#"[kernel]
source = "k.c"
entry = "k"
[[tensors]]
name = "x"
dtype = "f32"
shape = [256]
{x}
[[tensors]]
name = "y"
dtype = "f32"
shape = [256]
{y}
[[scalars]]
name = "n"
value = 256
[params]
MODE = [{mode}]
[timing]
warmup_ms = 1
rep_ms = 2
flush_cache = false
[verify]
reference = {{ choice = {{ MODE = {mode} }} }}
"#
    )
}

/// The first result's status and error.
fn outcome(dir: &std::path::Path, toml: &str) -> (String, String) {
    std::fs::write(dir.join("m.toml"), toml).unwrap();
    let out = tunebox(
        dir,
        &["tune", "m.toml", "-q", "--no-cache", "--json", "r.json"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = json(&dir.join("r.json"));
    let r = &report["results"][0];
    (
        r["status"].as_str().unwrap().to_owned(),
        r["error"].as_str().unwrap_or_default().to_owned(),
    )
}

#[test]
fn a_kernel_wrong_after_the_reps_is_told_what_to_set() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("k.c"), KERNEL).unwrap();

    // In place: `x` is an input and an output.
    let (status, error) = outcome(
        dir.path(),
        &manifest(0, "init = \"random\"\noutput = true", "output = false"),
    );
    assert_eq!(status, "wrong", "{error}");
    assert!(
        error.contains("updates `x` in place") && error.contains("set `reset = true` on `x`"),
        "{error}"
    );
    assert!(!error.contains("must overwrite"), "{error}");
    let (status, error) = outcome(
        dir.path(),
        &manifest(
            0,
            "init = \"random\"\noutput = true\nreset = true",
            "output = false",
        ),
    );
    assert_eq!(status, "ok", "{error}");

    // Accumulating into a zero-initialized output.
    let (status, error) = outcome(
        dir.path(),
        &manifest(1, "init = \"random\"", "init = \"zeros\"\noutput = true"),
    );
    assert_eq!(status, "wrong", "{error}");
    assert!(
        error.contains("reads `y` before writing it") && error.contains("`reset = true` on `y`"),
        "{error}"
    );
    let (status, error) = outcome(
        dir.path(),
        &manifest(
            1,
            "init = \"random\"",
            "init = \"zeros\"\noutput = true\nreset = true",
        ),
    );
    assert_eq!(status, "ok", "{error}");
}

/// Kernel Tuner's `answer` list: an error about an entry names `answer[i]`, as written.
#[test]
fn answer_entries_are_named_as_written() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("k.c"), KERNEL).unwrap();
    std::fs::write(dir.path().join("y.bin"), [0u8; 8]).unwrap();
    let toml = manifest(1, "init = \"random\"", "init = \"zeros\"")
        .replace("[verify]\nreference = { choice = { MODE = 1 } }\n", "");
    for (answer, field) in [
        ("answer = [\"\", \"missing.bin\", \"\"]", "answer[1]"),
        ("answer = [\"\", \"y.bin\", \"\"]", "answer[1]"),
        ("answer = { y = \"y.bin\" }", "answer.y"),
    ] {
        std::fs::write(dir.path().join("m.toml"), format!("{answer}\n{toml}")).unwrap();
        let out = tunebox(dir.path(), &["tune", "m.toml", "--list"]);
        let stderr = text(&out.stderr);
        assert!(!out.status.success(), "{answer}: {stderr}");
        assert!(stderr.contains(field), "{answer}: {stderr}");
        assert!(
            !stderr.contains("verify.reference.outputs"),
            "{answer}: {stderr}"
        );
    }
    // An output the answer gives nothing for.
    let toml = manifest(1, "init = \"random\"\noutput = true", "init = \"zeros\"")
        .replace("[verify]\nreference = { choice = { MODE = 1 } }\n", "");
    std::fs::write(
        dir.path().join("m.toml"),
        format!("answer = [\"\", \"y.bin\", \"\"]\n{toml}"),
    )
    .unwrap();
    let out = tunebox(dir.path(), &["tune", "m.toml", "--list"]);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("answer gives no expected contents for `x`, which has `output = true`"),
        "{stderr}"
    );
}
