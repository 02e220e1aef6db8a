//! Manifests written with Kernel Tuner's names: tune_params, kernel_name/kernel_source/lang,
//! compiler_options, answer with atol, iterations, metrics, Python-style restrictions.

use crate::util::{check, examples, json, text, tunebox};

/// `y = 2x + 1`, in steps of STEP; BUG adds 1 more.
const AXPB: &str = r#"#include <stdint.h>
void axpb(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += STEP)
        for (int64_t j = i; j < i + STEP && j < n; j++) y[j] = 2.0f * x[j] + (BUG ? 2.0f : 1.0f);
}
"#;

const KT_MANIFEST: &str = r#"kernel_name = "axpb"
kernel_source = "axpb.c"
lang = "C"
compiler_options = ["-O2"]
restrictions = ["not (STEP == 4 and BUG == 1)"]
iterations = 3
atol = 1e-6
answer = ["", "y.bin", ""]      # x, y, n: only y is checked

[tune_params]
STEP = [1, 2, 4]
BUG = [0, 1]

[metrics]
"GB/s" = "8 * n / (time / 1e3) / 1e9"
per_element_ns = "time * 1e6 / n"

[timing]
warmup_ms = 1
flush_cache = false

[[tensors]]
name = "x"
dtype = "f32"
shape = [1000]
init = { file = "x.bin" }

[[tensors]]
name = "y"
dtype = "f32"
shape = [1000]
init = "zeros"

[[scalars]]
name = "n"
value = 1000
"#;

#[test]
fn a_kernel_tuner_manifest_tunes() {
    let dir = tempfile::tempdir().unwrap();
    let x: Vec<f32> = (0..1000).map(|i| i as f32 * 0.25).collect();
    let y: Vec<f32> = x.iter().map(|v| 2.0 * v + 1.0).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_ne_bytes()).collect::<Vec<u8>>();
    std::fs::write(dir.path().join("x.bin"), bytes(&x)).unwrap();
    std::fs::write(dir.path().join("y.bin"), bytes(&y)).unwrap();
    std::fs::write(dir.path().join("axpb.c"), AXPB).unwrap();
    std::fs::write(dir.path().join("kt.toml"), KT_MANIFEST).unwrap();
    let out = tunebox(
        dir.path(),
        &["tune", "kt.toml", "--json", "r.json", "--csv", "r.csv"],
    );
    check(&out);
    let report = json(&dir.path().join("r.json"));
    assert_eq!(
        report["metrics"],
        serde_json::json!(["GB/s", "per_element_ns"])
    );
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 5, "the restriction removes STEP=4 BUG=1");
    for r in results {
        let expected = if r["choice"]["BUG"] == 1 {
            "wrong"
        } else {
            "ok"
        };
        assert_eq!(r["status"], expected, "{r}");
        assert_eq!(r["reps"], 3, "iterations = 3: {r}");
        let gbs = r["metrics"]["GB/s"].as_f64().unwrap();
        let ns = r["metrics"]["per_element_ns"].as_f64().unwrap();
        let median = r["median_ms"].as_f64().unwrap();
        assert!(
            (gbs - 8000.0 / (median / 1e3) / 1e9).abs() <= 1e-9 * gbs.max(1.0),
            "{r}"
        );
        assert!(
            (ns - median * 1e6 / 1000.0).abs() <= 1e-9 * ns.max(1.0),
            "{r}"
        );
    }
    let stdout = text(&out.stdout);
    assert!(stdout.contains("GB/s  per_element_ns"), "{stdout}");
    assert!(stdout.contains("best: STEP="), "{stdout}");
    assert!(stdout.contains("      best = { STEP = "), "{stdout}");
    assert!(stdout.contains("      -DSTEP="), "{stdout}");
    let csv = std::fs::read_to_string(dir.path().join("r.csv")).unwrap();
    assert!(
        csv.starts_with("rank,index,STEP,BUG,status,median_ms,") && csv.contains(",GB/s,"),
        "{csv}"
    );
}

#[test]
fn the_kernel_tuner_matmul_example_works() {
    let out = tunebox(&examples(), &["tune", "--list", "matmul-cpu-kt.toml"]);
    check(&out);
    let kt = text(&out.stdout);
    let out = tunebox(&examples(), &["tune", "--list", "matmul-cpu.toml"]);
    assert_eq!(
        kt,
        text(&out.stdout),
        "the same 27 choices as matmul-cpu.toml"
    );
    assert_eq!(kt.lines().count(), 27);

    // Two sampled choices, end to end (the whole example takes ~15 s).
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("kt.json");
    let out = tunebox(
        &examples(),
        &[
            "tune",
            "matmul-cpu-kt.toml",
            "--budget",
            "2",
            "--no-cache",
            "--quiet",
            "--json",
            json_path.to_str().unwrap(),
        ],
    );
    check(&out);
    let report = json(&json_path);
    for r in report["results"].as_array().unwrap() {
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["reps"], 7, "{r}");
        assert!(r["metrics"]["GFLOP/s"].as_f64().unwrap() > 0.1, "{r}");
    }
}

#[test]
fn the_cuda_examples_parse_here() {
    // No GPU is needed to list a CUDA manifest's choices (and evaluate their launches).
    let list = |manifest: &str| {
        let out = tunebox(&examples(), &["tune", "--list", manifest]);
        check(&out);
        text(&out.stdout)
    };
    let native = list("matmul-cuda.toml");
    assert!(native.lines().count() > 1);
    assert_eq!(list("matmul-cuda-kt.toml"), native);
    assert!(list("faults-cuda.toml").lines().count() > 1);
}
