//! Timed reps on inputs a candidate cannot predict (issue 34, `verify.checked_reps`): a kernel
//! that answers from a memo keyed on a sample of its inputs is wrong on a checked rep, and an
//! honest one is not.

use crate::util::{check, json, mode_manifest, text, tunebox};

/// MODE 0 computes `y = f(x)` every call. MODE 1 keys a memo on four sampled elements of `x`:
/// when they match the last call's, it copies its last answer over every output byte instead of
/// computing (a 100x "speed-up" on fixed inputs that the call on fresh inputs after the reps
/// cannot see: that call's samples differ, so it computes).
const MEMO: &str = r#"#include <stdint.h>
#include <stdlib.h>
#include <string.h>
static float key[4], *memo;
static int have;
void memo_kernel(const float *x, float *y, int64_t n) {
#if MODE == 1
    float k[4] = {x[0], x[n / 3], x[2 * n / 3], x[n - 1]};
    if (have && memcmp(k, key, sizeof k) == 0) {
        memcpy(y, memo, (size_t)n * sizeof *y);
        return;
    }
    memcpy(key, k, sizeof k);
    have = 1;
#endif
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        for (int r = 0; r < 2000; r++) v = v * 0.999f + 0.001f;
        y[i] = v;
    }
#if MODE == 1
    if (!memo) memo = malloc((size_t)n * sizeof *y);
    memcpy(memo, y, (size_t)n * sizeof *y);
#endif
}
"#;

/// With reps of each verified window checked on varied inputs, the memo is caught: its first
/// call and its call on fresh inputs are right, a checked rep is not, and its result says so.
/// The honest choice stays `ok`.
///
/// Catching it is a matter of chance, as it is for any candidate that skips only some reps: of
/// 30 elements each rep varies one, and the memo computes (right) when that element or the one
/// the rep before varied is among its four samples, so a checked rep catches it with
/// probability (26/30)^2 = 0.75. Eight checked reps miss it together once in 60 000 runs (two,
/// a sandbox's default, once in 16).
#[test]
fn a_memo_keyed_on_a_sample_of_the_inputs_is_wrong_on_a_checked_rep() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("memo_kernel.c"), MEMO).unwrap();
    let manifest =
        mode_manifest("memo_kernel", "30", 2, "warmup_ms = 1\nrep_ms = 10") + "checked_reps = 8\n";
    std::fs::write(dir.path().join("memo.toml"), manifest).unwrap();
    let out = tunebox(
        dir.path(),
        &[
            "tune",
            "memo.toml",
            "--no-cache",
            "--rounds",
            "0",
            "--json",
            "r.json",
        ],
    );
    check(&out);
    let report = json(&dir.path().join("r.json"));
    let result = |mode: i64| {
        report["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["choice"]["MODE"] == mode)
            .unwrap()
            .clone()
    };
    assert_eq!(result(0)["status"], "ok", "{}", result(0));
    let memo = result(1);
    assert_eq!(memo["status"], "wrong", "{memo}");
    let error = memo["error"].as_str().unwrap();
    assert!(error.contains("wrong on a timed rep"), "{error}");
    assert!(error.contains("varied from the first call's"), "{error}");
}

/// A reference given as expected outputs (one fixed input) cannot check varied reps: the run
/// says what protection it lacks and how to get it, and asking for checked reps anyway is a
/// clear error naming what was written and the fix.
#[test]
fn a_reference_of_expected_outputs_says_what_it_cannot_catch() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("twos.c"),
        "#include <stdint.h>\nvoid twos(float *y, int64_t n) { for (int64_t i = 0; i < n; i++) \
         y[i] = 2.0f; }\n",
    )
    .unwrap();
    let twos: Vec<u8> = (0..64).flat_map(|_| 2.0f32.to_ne_bytes()).collect();
    std::fs::write(dir.path().join("twos.bin"), twos).unwrap();
    let manifest = |extra: &str| {
        format!(
            "[kernel]\nsource = \"twos.c\"\nentry = \"twos\"\n[[tensors]]\nname = \"y\"\n\
             dtype = \"f32\"\nshape = [64]\noutput = true\n[[scalars]]\nname = \"n\"\n\
             value = 64\n[timing]\nwarmup_ms = 1\nrep_ms = 2\n[verify]\n\
             reference = {{ outputs = {{ y = \"twos.bin\" }} }}\n{extra}"
        )
    };
    std::fs::write(dir.path().join("m.toml"), manifest("")).unwrap();
    let out = tunebox(dir.path(), &["tune", "m.toml", "--no-cache", "--sandbox"]);
    check(&out);
    // The run's notes close its summary.
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("note: the reference is expected outputs")
            && stdout.contains("is not caught")
            && stdout.contains("give a reference kernel"),
        "{stdout}"
    );
    std::fs::write(dir.path().join("m.toml"), manifest("checked_reps = 2\n")).unwrap();
    let out = tunebox(dir.path(), &["tune", "m.toml", "--no-cache"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("verify.checked_reps = 2") && stderr.contains("give a reference kernel"),
        "{stderr}"
    );
}
