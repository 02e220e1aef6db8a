//! Timed reps on inputs a candidate cannot predict (issue 34, `verify.checked_reps`): a kernel
//! that answers from a memo keyed on a sample of its inputs gains nothing, and an honest one
//! is `ok`.

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

/// Where every timed rep draws every element of its random inputs again (`checked_reps`), the
/// memo never hits on a rep: it computes on every one, right, and gains nothing over the honest
/// choice. Without varied reps (no `checked_reps`, no sandbox) the same memo answers the reps
/// from its last call and "wins" by far: what the variation takes from it is real.
#[test]
fn a_memo_keyed_on_a_sample_of_the_inputs_gains_nothing_on_varied_reps() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("memo_kernel.c"), MEMO).unwrap();
    let medians = |checked: &str| {
        let manifest =
            mode_manifest("memo_kernel", "30", 2, "warmup_ms = 1\nrep_ms = 10") + checked;
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
        let median = |mode: i64| {
            let result = report["results"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["choice"]["MODE"] == mode)
                .unwrap()
                .clone();
            assert_eq!(result["status"], "ok", "{result}");
            result["median_ms"].as_f64().unwrap()
        };
        (median(0), median(1))
    };
    let (honest, memo) = medians("");
    assert!(
        memo < 0.2 * honest,
        "without varied reps the memo wins (the control): {memo} ms against {honest} ms"
    );
    let (honest, memo) = medians("checked_reps = 2\n");
    assert!(
        memo > 0.8 * honest,
        "on varied reps the memo must gain nothing: {memo} ms against {honest} ms"
    );
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
