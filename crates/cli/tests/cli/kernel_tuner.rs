//! Manifests written with Kernel Tuner's names: tune_params, kernel_name/kernel_source/lang,
//! compiler_options, answer with atol, iterations, metrics, Python-style restrictions.

use crate::util::{check, examples, json, text, tunebox, tunebox_env};

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

/// A folder with `axpb.c`, its input `x.bin` and its answer `y.bin` (1000 floats each).
fn axpb_folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let x: Vec<f32> = (0..1000).map(|i| i as f32 * 0.25).collect();
    let y: Vec<f32> = x.iter().map(|v| 2.0 * v + 1.0).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_ne_bytes()).collect::<Vec<u8>>();
    std::fs::write(dir.path().join("x.bin"), bytes(&x)).unwrap();
    std::fs::write(dir.path().join("y.bin"), bytes(&y)).unwrap();
    std::fs::write(dir.path().join("axpb.c"), AXPB).unwrap();
    dir
}

#[test]
fn iterations_bound_the_windows_each_of_which_takes_a_rep() {
    let dir = axpb_folder();
    for iterations in [1, 2] {
        let manifest = KT_MANIFEST.replace("iterations = 3", &format!("iterations = {iterations}"));
        std::fs::write(dir.path().join("kt.toml"), manifest).unwrap();
        // The default rounds: Kernel Tuner's iterations = 1 is one window of one rep.
        let out = tunebox(
            dir.path(),
            &["tune", "kt.toml", "--json", "r.json", "--no-cache"],
        );
        check(&out);
        let report = json(&dir.path().join("r.json"));
        for r in report["results"].as_array().unwrap() {
            if r["status"] != "ok" {
                continue;
            }
            let windows = r["windows"]["medians_ms"].as_array().map_or(1, Vec::len);
            // The reps in all (a window takes one at least), fewer when windows agree early;
            // no race adds windows, but a window a busy machine disturbed is measured again.
            let again = r["windows"]["remeasured"].as_u64().unwrap_or(0) as usize;
            let reps = r["reps"].as_u64().unwrap() as usize;
            assert!(
                windows <= iterations + again && windows <= reps && reps <= iterations + again,
                "iterations = {iterations}: {r}"
            );
        }
    }
}

#[test]
fn a_kernel_tuner_manifest_tunes() {
    let dir = axpb_folder();
    std::fs::write(dir.path().join("kt.toml"), KT_MANIFEST).unwrap();
    let out = tunebox(
        dir.path(),
        // One window per choice: its reps are the manifest's iterations.
        &[
            "tune", "kt.toml", "--json", "r.json", "--csv", "r.csv", "--rounds", "0",
        ],
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
            "--rounds",
            "0",
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

fn floats(values: impl IntoIterator<Item = f32>) -> Vec<u8> {
    values.into_iter().flat_map(f32::to_ne_bytes).collect()
}

fn statuses(report: &serde_json::Value) -> Vec<String> {
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_owned())
        .collect()
}

/// A scalar first, a float scalar, a double, then the tensors: Kernel Tuner's argument order.
const ORDERED: &str = r#"
void scale(int n, float alpha, double beta, const float *x, float *y) {
    for (int i = 0; i < n; i++) y[i] = alpha * x[i] + (float)beta + 0 * P;
}
"#;

const ORDERED_MANIFEST: &str = r#"kernel_name = "scale"
kernel_source = "scale.c"
lang = "C"
compiler_options = ["-O1"]
answer = ["", "", "", "", "y.bin"]   # n, alpha, beta, x, y: the kernel's order

[tune_params]
P = [1, 2]

[[arguments]]
name = "n"
type = "i32"                         # numpy.int32
value = 64
[[arguments]]
name = "alpha"
type = "f32"                         # numpy.float32
value = 0.5
[[arguments]]
name = "beta"
value = 0.25                         # a Python float: double
[[arguments]]
name = "x"
dtype = "f32"
shape = [64]
init = "ones"
[[arguments]]
name = "y"
dtype = "f32"
shape = [64]
init = "zeros"

[metrics]
scaled = "alpha * n"

[timing]
warmup_ms = 1
rep_ms = 2
flush_cache = false
"#;

#[test]
fn kernel_tuner_arguments_keep_the_kernels_order_and_types() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("scale.c"), ORDERED).unwrap();
    std::fs::write(dir.path().join("y.bin"), floats([0.75; 64])).unwrap();
    std::fs::write(dir.path().join("kt.toml"), ORDERED_MANIFEST).unwrap();
    let out = tunebox(dir.path(), &["tune", "kt.toml", "--json", "r.json"]);
    check(&out);
    let report = json(&dir.path().join("r.json"));
    assert_eq!(statuses(&report), ["ok", "ok"], "{report}");
    assert_eq!(report["results"][0]["metrics"]["scaled"], 32.0, "{report}");

    // The answer names a scalar's slot: refused, naming it.
    std::fs::write(
        dir.path().join("bad.toml"),
        ORDERED_MANIFEST.replace(
            "answer = [\"\", \"\", \"\", \"\", \"y.bin\"]",
            "answer = [\"y.bin\", \"\", \"\", \"\", \"\"]",
        ),
    )
    .unwrap();
    let out = tunebox(dir.path(), &["tune", "bad.toml", "--list"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("answer[0] = \"y.bin\": argument 0 is the scalar `n`"),
        "{stderr}"
    );
}

/// Writes a NaN where the expected output has one too.
const NANNY: &str = r#"#include <math.h>
#include <stdint.h>
void nanny(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i];
    y[0] = NAN;
}
"#;

const NANNY_MANIFEST: &str = r#"
[kernel]
source = "nanny.c"
entry = "nanny"
flags = ["-O1"]
[[tensors]]
name = "x"
dtype = "f32"
shape = [8]
init = "ones"
[[tensors]]
name = "y"
dtype = "f32"
shape = [8]
init = "zeros"
output = true
[[scalars]]
name = "n"
value = 8
[timing]
warmup_ms = 1
rep_ms = 2
flush_cache = false
[verify]
reference = { outputs = { y = "expected.bin" } }
"#;

#[test]
fn equal_nan_lets_a_nan_match_a_nan() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("nanny.c"), NANNY).unwrap();
    let expected = std::iter::once(f32::NAN).chain([1.0; 7]);
    std::fs::write(dir.path().join("expected.bin"), floats(expected)).unwrap();
    std::fs::write(dir.path().join("m.toml"), NANNY_MANIFEST).unwrap();
    let out = tunebox(dir.path(), &["tune", "m.toml", "--json", "r.json"]);
    check(&out);
    assert_eq!(statuses(&json(&dir.path().join("r.json"))), ["wrong"]);
    // numpy.allclose(…, equal_nan=True); the cache does not answer for the other tolerance.
    std::fs::write(
        dir.path().join("m.toml"),
        NANNY_MANIFEST.replace("[verify]\n", "[verify]\nequal_nan = true\n"),
    )
    .unwrap();
    let out = tunebox(dir.path(), &["tune", "m.toml", "--json", "r.json"]);
    check(&out);
    assert!(!text(&out.stderr).contains("skipped"));
    assert_eq!(statuses(&json(&dir.path().join("r.json"))), ["ok"]);
}

/// C++ that needs the C++ runtime (operator new), with an entry that is not `extern "C"`.
const FILL_CPP: &str = r#"#include <cstdint>
#include <numeric>
#include <vector>
void fill(float *y, int64_t n) {
    std::vector<float> v(n);
    std::iota(v.begin(), v.end(), 0.0f);
    for (int64_t i = 0; i < n; i++) y[i] = v[i] + P;
}
"#;

#[test]
fn a_cpp_kernel_with_lang_c_is_compiled_by_gpp() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("fill.cpp"), FILL_CPP).unwrap();
    std::fs::write(
        dir.path().join("y.bin"),
        floats((0..16).map(|i| i as f32 + 1.0)),
    )
    .unwrap();
    let manifest = r#"kernel_name = "fill"
kernel_source = "fill.cpp"
lang = "C"
answer = ["y.bin", ""]

[tune_params]
P = [1]

[[arguments]]
name = "y"
dtype = "f32"
shape = [16]
init = "zeros"
[[arguments]]
name = "n"
value = 16

[timing]
warmup_ms = 1
rep_ms = 2
flush_cache = false
"#;
    std::fs::write(dir.path().join("kt.toml"), manifest).unwrap();
    // `$CXX` unset (empty): g++, as Kernel Tuner; `$CC` (a C driver) is for C sources.
    let out = tunebox_env(
        dir.path(),
        &["tune", "kt.toml", "--json", "r.json"],
        &[("CXX", ""), ("CC", "cc")],
    );
    check(&out);
    let report = json(&dir.path().join("r.json"));
    assert_eq!(statuses(&report), ["ok"], "{report}");
}

/// A vector-type pointer, which no dtype names: passed untyped, after a scalar.
const VECTOR: &str = r#"#include <stdint.h>
typedef float vfloat __attribute__((vector_size(16)));
void twice(int64_t n, const vfloat *x, vfloat *y) {
    for (int64_t i = 0; i < n / 4; i++) y[i] = x[i] + x[i] + 0 * P;
}
"#;

#[test]
fn a_native_manifest_orders_arguments_and_passes_untyped_pointers() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("twice.c"), VECTOR).unwrap();
    std::fs::write(dir.path().join("twos.bin"), floats([2.0; 16])).unwrap();
    let manifest = r#"args = ["n", "x", "y"]
[kernel]
source = "twice.c"
entry = "twice"
flags = ["-O1"]
[[tensors]]
name = "x"
dtype = "f32"
shape = [16]
init = "ones"
c_type = "void"
[[tensors]]
name = "y"
dtype = "f32"
shape = [16]
init = "zeros"
output = true
c_type = "void"
[[scalars]]
name = "n"
value = 16
[params]
P = [1]
[timing]
warmup_ms = 1
rep_ms = 2
flush_cache = false
[verify]
reference = { outputs = { y = "twos.bin" } }
"#;
    std::fs::write(dir.path().join("m.toml"), manifest).unwrap();
    let out = tunebox(dir.path(), &["tune", "m.toml", "--json", "r.json"]);
    check(&out);
    assert_eq!(statuses(&json(&dir.path().join("r.json"))), ["ok"]);
}
