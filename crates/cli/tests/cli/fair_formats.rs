//! The community's formats: FAIR T1 files as manifests (the benchmark hub's four, and a small C
//! one that runs here), `--t4` results read back, and `tunebox report` on Kernel Tuner cache
//! files and T4 files.
//!
//! The expected counts of the hub's T1 files are Python's: `crates/tune/tests/t1_counts.py`
//! (itertools.product over the values, `eval` of every condition).

use std::path::{Path, PathBuf};

use crate::util::{check, json, text, tunebox};

/// The FAIR Benchmark Hub data (the repository folder data/benchmark_hub).
fn hub() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/benchmark_hub");
    assert!(
        dir.join("README.md").is_file(),
        "the FAIR Benchmark Hub test data is missing: expected it at {}",
        dir.display()
    );
    dir
}

/// `tunebox tune FILE --list` on a hub T1 file: the number of choices, and stderr.
fn list(name: &str) -> (usize, String) {
    let kernels = hub().join("kernels");
    let out = tunebox(&kernels, &["tune", "--list", name]);
    check(&out);
    (text(&out.stdout).lines().count(), text(&out.stderr))
}

/// A T1 file named by a path with folders, from another directory: its `KernelFile` is read
/// relative to the T1 file, once.
#[test]
fn a_t1_file_in_another_folder_finds_its_source() {
    let out = tunebox(&hub(), &["tune", "--list", "kernels/convolution_milo.json"]);
    check(&out);
    assert_eq!(text(&out.stdout).lines().count(), 4362);
    assert!(
        !text(&out.stderr).contains("does not exist"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn hub_t1_convolution_lists_pythons_count() {
    let (count, stderr) = list("convolution_milo.json");
    assert_eq!(count, 4362);
    // Listed, but its constant-memory filter cannot be passed yet: said, naming the field.
    assert!(
        stderr.contains("cannot be tuned: KernelSpecification.Arguments[2] (`d_filter`)"),
        "{stderr}"
    );
}

#[test]
fn hub_t1_gemm_lists_pythons_count() {
    // 663,552 before its eight conditions.
    let (count, stderr) = list("gemm_milo.json");
    assert_eq!(count, 116_928);
    assert!(
        stderr.contains("KernelSpecification.Language = \"OpenCL\""),
        "{stderr}"
    );
    assert!(stderr.contains("gemm_milo/common.opencl"), "{stderr}");
}

#[test]
fn hub_t1_dedispersion_lists_pythons_count() {
    // Its source (dedisp_milo/dedispersion.cu.hip) is not in the hub: listing needs none.
    let (count, stderr) = list("dedispersion_milo.json");
    assert_eq!(count, 11_130);
    assert!(
        stderr.contains("dedisp_milo/dedispersion.cu.hip"),
        "{stderr}"
    );
}

#[test]
fn hub_t1_hotspot_lists_pythons_count() {
    let (count, _) = list("hotspot_milo.json");
    assert_eq!(count, 82_984);
}

/// A T1 file whose source does not exist: listed, and a run says which file is missing.
#[test]
fn a_t1_file_without_its_source_lists_and_refuses_to_run() {
    let dir = tempfile::tempdir().unwrap();
    let t1 = r#"{
        "General": {"BenchmarkName": "missing", "OutputFormat": "JSON"},
        "ConfigurationSpace": {
            "TuningParameters": [
                {"Name": "block_size_x", "Type": "int", "Values": "[32, 64, 128]", "Default": 32},
                {"Name": "U", "Type": "int", "Values": "[1, 2]", "Default": 1}
            ],
            "Conditions": [{"Expression": "block_size_x * U <= 128", "Parameters": ["block_size_x", "U"]}]
        },
        "KernelSpecification": {
            "Language": "CUDA", "KernelName": "k", "KernelFile": "gone/k.cu",
            "GlobalSize": {"X": "ProblemSize[0] // block_size_x"}, "LocalSize": {"X": "block_size_x"},
            "ProblemSize": [4096],
            "Arguments": [
                {"Name": "y", "Type": "float", "MemoryType": "Vector", "AccessType": "WriteOnly",
                 "FillType": "Constant", "FillValue": 0.0, "Size": "ProblemSize[0]", "Output": 1},
                {"Name": "n", "Type": "int32", "MemoryType": "Scalar", "FillValue": 4096}
            ]
        }
    }"#;
    std::fs::write(dir.path().join("k.json"), t1).unwrap();
    let out = tunebox(dir.path(), &["tune", "--list", "k.json"]);
    check(&out);
    assert_eq!(
        text(&out.stdout).lines().count(),
        5,
        "{}",
        text(&out.stdout)
    );
    let out = tunebox(dir.path(), &["tune", "k.json", "--no-cache"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("can be listed (--list) but not tuned")
            && stderr.contains("KernelSpecification.KernelFile = \"gone/k.cu\""),
        "{stderr}"
    );
}

/// `y = 2x + 1` in steps of STEP; BUG adds 1 more.
const AXPB: &str = r#"#include <stdint.h>
void axpb(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i += STEP)
        for (int64_t j = i; j < i + STEP && j < n; j++) y[j] = 2.0f * x[j] + (BUG ? 2.0f : 1.0f);
}
"#;

const MANIFEST: &str = r#"restrictions = ["not (STEP == 4 and BUG == 1)"]
[kernel]
source = "axpb.c"
entry = "axpb"
flags = ["-O2"]
[params]
STEP = [1, 2, 4]
BUG = [0, 1]
[timing]
warmup_ms = 1
rep_ms = 2
min_reps = 3
max_reps = 5
flush_cache = false
[verify]
reference = { choice = { STEP = 1, BUG = 0 } }
[[tensors]]
name = "x"
dtype = "f32"
shape = [1000]
[[tensors]]
name = "y"
dtype = "f32"
shape = [1000]
init = "zeros"
output = true
[[scalars]]
name = "n"
value = 1000
"#;

#[test]
fn t4_written_by_a_run_reads_back_as_the_same_ranking() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("axpb.c"), AXPB).unwrap();
    std::fs::write(dir.path().join("axpb.toml"), MANIFEST).unwrap();
    let out = tunebox(
        dir.path(),
        &[
            "tune",
            "axpb.toml",
            "--no-cache",
            "--json",
            "r.json",
            "--t4",
            "r.t4.json",
        ],
    );
    check(&out);
    let t4 = json(&dir.path().join("r.t4.json"));
    assert_eq!(t4["schema_version"], "1.1.0");
    assert_eq!(t4["metadata"]["timeunit"], "milliseconds");
    assert_eq!(t4["metadata"]["autotuner"], "tunebox");
    let results = t4["results"].as_array().unwrap();
    assert_eq!(results.len(), 5, "the restriction removes STEP=4 BUG=1");
    for r in results {
        let bug = r["configuration"]["BUG"] == 1;
        let (invalidity, correctness) = if bug {
            ("correctness", 0)
        } else {
            ("correct", 1)
        };
        assert_eq!(r["invalidity"], invalidity, "{r}");
        assert_eq!(r["correctness"], correctness, "{r}");
        assert_eq!(r["objectives"], serde_json::json!(["time"]), "{r}");
        // Measured before being judged: a wrong choice has its time too.
        let time = r["measurements"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "time")
            .unwrap_or_else(|| panic!("no time: {r}"));
        assert_eq!(time["unit"], "ms", "{r}");
        assert!(time["value"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["status"], if bug { "wrong" } else { "ok" }, "{r}");
    }
    // Read back: the same choices, statuses and times, in the same order.
    let out = tunebox(dir.path(), &["report", "r.t4.json", "--json", "back.json"]);
    check(&out);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("5 choices (3 ok, 2 wrong)"), "{stdout}");
    let key = |report: &serde_json::Value| -> Vec<(String, String, Option<f64>)> {
        report["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["choice"].to_string(),
                    r["status"].as_str().unwrap().to_owned(),
                    r["median_ms"].as_f64(),
                )
            })
            .collect()
    };
    assert_eq!(
        key(&json(&dir.path().join("back.json"))),
        key(&json(&dir.path().join("r.json")))
    );
}

#[test]
fn a_t1_c_kernel_tunes_and_writes_t4() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("axpb.c"), AXPB).unwrap();
    let t1 = r#"{
        "General": {"BenchmarkName": "axpb", "OutputFormat": "JSON"},
        "ConfigurationSpace": {
            "TuningParameters": [
                {"Name": "STEP", "Type": "int", "Values": "[2**i for i in range(3)]", "Default": 1},
                {"Name": "BUG", "Type": "int", "Values": "[0]", "Default": 0}
            ],
            "Conditions": [{"Expression": "STEP != 2", "Parameters": ["STEP"]}]
        },
        "KernelSpecification": {
            "Language": "C", "KernelName": "axpb", "KernelFile": "axpb.c",
            "CompilerOptions": ["-O2"],
            "GlobalSize": {"X": "1"}, "LocalSize": {"X": "1"},
            "ProblemSize": [1000],
            "Arguments": [
                {"Name": "x", "Type": "float", "MemoryType": "Vector", "AccessType": "ReadOnly",
                 "FillType": "Random", "FillValue": 1.0, "Size": "ProblemSize[0]"},
                {"Name": "y", "Type": "float", "MemoryType": "Vector", "AccessType": "WriteOnly",
                 "FillType": "Constant", "FillValue": 3.0, "Size": "ProblemSize[0] * max(BUG) + 1000"},
                {"Name": "n", "Type": "int64", "MemoryType": "Scalar", "FillValue": 1000}
            ]
        },
        "BenchmarkConfig": {"iterations": 4}
    }"#;
    std::fs::write(dir.path().join("axpb.json"), t1).unwrap();
    let out = tunebox(
        dir.path(),
        &[
            "tune",
            "axpb.json",
            "--no-cache",
            "--rounds",
            "0",
            "--json",
            "r.json",
            "--t4",
            "r.t4.json",
        ],
    );
    check(&out);
    let report = json(&dir.path().join("r.json"));
    assert_eq!(report["name"], "axpb");
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "STEP = 1 and 4: {report}");
    for r in results {
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["reps"], 4, "BenchmarkConfig.iterations: {r}");
    }
    let t4 = json(&dir.path().join("r.t4.json"));
    assert_eq!(t4["results"].as_array().unwrap().len(), 2);
}

#[test]
fn report_reads_a_kernel_tuner_cache_file() {
    let dir = tempfile::tempdir().unwrap();
    let cache = hub().join("cachefiles/convolution_milo/A100.json.gz");
    let cache = cache.to_str().unwrap();
    let out = tunebox(
        dir.path(),
        &[
            "report",
            cache,
            "--top",
            "3",
            "--json",
            "r.json",
            "--csv",
            "r.csv",
            "--t4",
            "r.t4.json",
        ],
    );
    check(&out);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("4362 choices (4201 ok, 6 compile_error, 155 error)"),
        "{stdout}"
    );
    assert!(stdout.contains("4362 records, 161 failed"), "{stdout}");
    let first = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("1  "))
        .unwrap_or_else(|| panic!("no first row: {stdout}"));
    assert!(
        first.contains("block_size_x=32 block_size_y=4 tile_size_x=1 tile_size_y=3 read_only=1")
            && first.contains("553.6 µs"),
        "{first}"
    );
    assert!(stdout.contains("… 4359 more (--top shows 3"), "{stdout}");
    let report = json(&dir.path().join("r.json"));
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 4362);
    assert!((results[0]["median_ms"].as_f64().unwrap() - 0.5536000076681376).abs() < 1e-12);
    let csv = std::fs::read_to_string(dir.path().join("r.csv")).unwrap();
    assert_eq!(csv.lines().count(), 4363);
    // The T4 form of the same file reads back as the same ranking.
    let out = tunebox(dir.path(), &["report", "r.t4.json", "--top", "3"]);
    check(&out);
    let again = text(&out.stdout);
    assert!(
        again.contains("4362 choices (4201 ok, 6 compile_error, 155 error)"),
        "{again}"
    );
    let first_again = again
        .lines()
        .find(|l| l.trim_start().starts_with("1  "))
        .unwrap();
    assert!(first_again.contains("553.6 µs"), "{first_again}");
}

#[test]
fn report_tells_formats_by_content_not_name() {
    let dir = tempfile::tempdir().unwrap();
    // A T4 file named like something else.
    let t4 = r#"{"schema_version": "1.0.0", "results": [
        {"configuration": {"a": 1}, "objectives": ["time"], "times": {"runtimes": [2.0, 4.0]},
         "invalidity": "correct", "correctness": 1,
         "measurements": [{"name": "time", "value": 3.0, "unit": "ms"}]},
        {"configuration": {"a": 2}, "objectives": ["time"], "times": {},
         "invalidity": "compile", "correctness": 1, "measurements": []}
    ]}"#;
    std::fs::write(dir.path().join("results.txt"), t4).unwrap();
    let out = tunebox(dir.path(), &["report", "results.txt"]);
    check(&out);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("2 choices (1 ok, 1 compile_error)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("a=1") && stdout.contains("3.000 ms"),
        "{stdout}"
    );
}
