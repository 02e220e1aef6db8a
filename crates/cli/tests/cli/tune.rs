//! `tunebox tune`: statuses, verification, process isolation, inputs from files, bad input.

use std::path::Path;

use serde_json::Value;

use crate::util::{FAMILY, MANIFEST, check, examples, json, outcomes, text, tunebox};

#[test]
fn tune_reports_every_status_and_writes_json() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("family.c"), FAMILY).unwrap();
    std::fs::write(dir.path().join("family.toml"), MANIFEST).unwrap();
    let out = tunebox(
        dir.path(),
        &[
            "tune",
            "family.toml",
            "--json",
            "out.json",
            "--workers",
            "2",
        ],
    );
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    for status in ["ok", "crashed", "timeout", "wrong", "compile_error"] {
        assert!(stdout.contains(status), "{status} missing from:\n{stdout}");
    }
    assert!(stdout.contains("best: MODE=0"), "{stdout}");

    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out.json")).unwrap())
            .unwrap();
    assert_eq!(json["backend"], "cpu");
    assert_eq!(json["tunebox_version"], env!("CARGO_PKG_VERSION"));
    let results = json["results"].as_array().unwrap();
    assert_eq!(results.len(), 6);
    let status_of = |mode: i64| {
        results
            .iter()
            .find(|r| r["choice"]["MODE"] == mode)
            .map(|r| r["status"].as_str().unwrap().to_owned())
            .unwrap()
    };
    assert_eq!(
        (0..6).map(status_of).collect::<Vec<_>>(),
        [
            "ok",
            "crashed",
            "crashed",
            "timeout",
            "wrong",
            "compile_error"
        ]
    );
    // Ranked: the ok choice first, with its timing; failures after, with their error.
    assert_eq!(results[0]["status"], "ok");
    assert!(results[0]["median_ms"].as_f64().unwrap() > 0.0);
    // At least 5 reps. (One clean-checkout CI run once gave this 1 us kernel two or three:
    // do_bench had fitted the reps to the window's budget on a first call that a loaded
    // machine stretched; it now re-fits them on the reps.)
    let reps = results[0]["reps"].as_u64().unwrap();
    assert!(reps >= 5, "{:#}", results[0]);
    assert!(results[0]["error"].is_null());
    assert_eq!(json["best"]["choice"]["MODE"], 0);
    let wrong = results.iter().find(|r| r["status"] == "wrong").unwrap();
    assert!((wrong["max_abs_error"].as_f64().unwrap() - 0.5).abs() < 1e-6);
    assert_eq!(wrong["mismatches"], 1024);
    let crashed = results.iter().find(|r| r["choice"]["MODE"] == 1).unwrap();
    assert!(
        crashed["error"].as_str().unwrap().contains("SIGSEGV"),
        "{crashed}"
    );
    let broken = results
        .iter()
        .find(|r| r["status"] == "compile_error")
        .unwrap();
    assert!(
        broken["error"]
            .as_str()
            .unwrap()
            .contains("MODE 5 does not compile")
    );
}

#[test]
fn invalid_manifests_exit_non_zero_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("family.c"), FAMILY).unwrap();
    let bad = MANIFEST.replace(
        "dtype = \"f32\"\nshape = [1024]\n[[tensors]]",
        "dtype = \"f16\"\nshape = [1024]\n[[tensors]]",
    );
    std::fs::write(dir.path().join("bad.toml"), bad).unwrap();
    let out = tunebox(dir.path(), &["tune", "bad.toml"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("bad.toml"), "{stderr}");
    assert!(stderr.contains("tensors[0].dtype = \"f16\""), "{stderr}");

    let out = tunebox(dir.path(), &["tune", "missing.toml"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("cannot read the manifest missing.toml"));
}

#[test]
fn list_shows_the_choices_after_restrictions() {
    let out = tunebox(&examples(), &["tune", "--list", "matmul-cpu.toml"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let choices = text(&out.stdout).lines().count();
    assert!(
        choices >= 24,
        "the matmul example needs at least 24 choices, has {choices}"
    );
}

#[test]
fn histogram_example_has_32_choices_and_each_kind_counts_exactly() {
    let out = tunebox(&examples(), &["tune", "--count", "histogram-omp.toml"]);
    check(&out);
    assert!(
        text(&out.stdout).starts_with("32 valid choices"),
        "{}",
        text(&out.stdout)
    );
    let out = tunebox(&examples(), &["tune", "--list", "histogram-omp.toml"]);
    check(&out);
    assert_eq!(text(&out.stdout).lines().count(), 32);

    // The example at 200,003 bytes (3 blocks and a partial one, not a multiple of 8), with a
    // team of 3 and the extreme copies and loads, end to end: every choice must count exactly
    // as the reference (the whole example takes ~20 s).
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("kernels")).unwrap();
    for kernel in ["histogram.c", "histogram_ref.c"] {
        let from = examples().join("kernels").join(kernel);
        std::fs::copy(from, dir.path().join("kernels").join(kernel)).unwrap();
    }
    let manifest = std::fs::read_to_string(examples().join("histogram-omp.toml")).unwrap();
    let mut small = manifest.replace("33554432", "200003");
    for (from, to) in [
        ("NTHREADS = [1, 2, 4, 8]", "NTHREADS = [3]"),
        ("COPIES = [1, 2, 4, 8]", "COPIES = [1, 8]"),
        ("warmup_ms = 10", "warmup_ms = 1"),
        ("rep_ms = 50", "rep_ms = 2\nmin_reps = 2"),
    ] {
        assert!(small.contains(from), "histogram-omp.toml has no `{from}`");
        small = small.replace(from, to);
    }
    assert_eq!(small.matches("200003").count(), 2, "the data's shape and n");
    std::fs::write(dir.path().join("small.toml"), small).unwrap();
    let out = tunebox(
        dir.path(),
        &[
            "tune",
            "small.toml",
            "--no-cache",
            "--rounds",
            "0",
            "--quiet",
            "--json",
            "small.json",
        ],
    );
    check(&out);
    let report = json(&dir.path().join("small.json"));
    let statuses: Vec<_> = outcomes(&report).into_iter().map(|(_, s)| s).collect();
    assert_eq!(statuses, ["ok"; 4], "{report}");
}

#[test]
fn faults_example_reports_each_kind_of_failure() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("faults.json");
    let out = tunebox(
        &examples(),
        &[
            "tune",
            "faults-cpu.toml",
            "--workers",
            "2",
            "--quiet",
            "--json",
            json.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let statuses: Vec<&str> = json["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    for status in ["ok", "crashed", "timeout", "wrong", "compile_error"] {
        assert!(
            statuses.contains(&status),
            "{status} missing from {statuses:?}"
        );
    }
}

/// Kernels that pass a first-call check but must not pass verification, and one that corrupts
/// its process for whoever runs next.
const SNEAKY: &str = r#"#include <fenv.h>
#include <stdint.h>
void sneaky(const float *x, float *y, int64_t n) {
    static int calls = 0;
    calls++;
    if (MODE == 1) { /* accumulates instead of overwriting */
        for (int64_t i = 0; i < n; i++) y[i] += x[i] * 0.1f + 0.3f;
        return;
    }
    if (MODE == 2 && calls > 3) return; /* stops working after a few calls */
    if (MODE == 3) fesetround(FE_UPWARD); /* leaves its process rounding upward */
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * 0.1f + 0.3f; /* rounds */
}
"#;

fn sneaky_manifest(modes: &str) -> String {
    MANIFEST
        .replace("source = \"family.c\"", "source = \"sneaky.c\"")
        .replace("entry = \"family\"", "entry = \"sneaky\"")
        .replace("MODE = [0, 1, 2, 3, 4, 5]", &format!("MODE = [{modes}]"))
        .replace("rtol = 1e-6\natol = 1e-6", "rtol = 0\natol = 0")
}

fn statuses(json: &Path) -> Vec<(i64, String)> {
    let json: Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let mut statuses: Vec<(i64, String)> = json["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["choice"]["MODE"].as_i64().unwrap(),
                r["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    statuses.sort();
    statuses
}

#[test]
fn kernels_that_only_work_on_the_first_call_are_wrong() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("sneaky.c"), SNEAKY).unwrap();
    std::fs::write(dir.path().join("m.toml"), sneaky_manifest("0, 1, 2")).unwrap();
    let out = tunebox(
        dir.path(),
        &["tune", "m.toml", "--json", "r.json", "--quiet"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        statuses(&dir.path().join("r.json")),
        [(0, "ok".into()), (1, "wrong".into()), (2, "wrong".into())]
    );
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("r.json")).unwrap()).unwrap();
    let stopped = json["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["choice"]["MODE"] == 2)
        .unwrap();
    assert!(
        stopped["error"]
            .as_str()
            .unwrap()
            .contains("wrong on a call after the timed reps"),
        "{stopped}"
    );
}

#[test]
fn a_choice_that_corrupts_its_process_cannot_change_the_next_result() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("sneaky.c"), SNEAKY).unwrap();
    std::fs::write(dir.path().join("m.toml"), sneaky_manifest("3, 0")).unwrap();
    // By default every choice gets a fresh worker: MODE 3 is wrong, MODE 0 is not affected.
    let out = tunebox(
        dir.path(),
        &["tune", "m.toml", "--json", "fresh.json", "--quiet"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        statuses(&dir.path().join("fresh.json")),
        [(0, "ok".into()), (3, "wrong".into())]
    );
    // A reused worker puts MODE 3's rounding mode back before MODE 0 runs: the same verdicts.
    let out = tunebox(
        dir.path(),
        &[
            "tune",
            "m.toml",
            "--json",
            "reused.json",
            "--quiet",
            "--max-process-uses",
            "0",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        statuses(&dir.path().join("reused.json")),
        [(0, "ok".into()), (3, "wrong".into())]
    );
}

#[test]
fn bad_options_are_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("family.c"), FAMILY).unwrap();
    std::fs::write(dir.path().join("family.toml"), MANIFEST).unwrap();
    // Every file a run writes is checked the same way, before anything is measured.
    std::fs::create_dir(dir.path().join("out")).unwrap();
    let cases: [(&[&str], &str); 11] = [
        (
            &["tune", "family.toml", "--json", "family.toml"],
            "would overwrite the input",
        ),
        (
            &["tune", "family.toml", "--t4", "family.c"],
            "--t4 family.c would overwrite the input",
        ),
        (
            &["tune", "family.toml", "--html", "family.toml"],
            "--html family.toml would overwrite the input",
        ),
        (
            &["tune", "family.toml", "--t4", "missing/r.json"],
            "--t4 missing/r.json: the directory missing does not exist",
        ),
        (
            &["tune", "family.toml", "--html", "missing/r.html"],
            "--html missing/r.html: the directory missing does not exist",
        ),
        (
            &["tune", "family.toml", "--json", "family.c"],
            "would overwrite the input",
        ),
        (
            &["tune", "family.toml", "--json", "missing/r.json"],
            "does not exist",
        ),
        (
            &["tune", "family.toml", "--json", "out"],
            "--json out is a directory; give the path of a file in it",
        ),
        (
            // A folder no one can create files in, even root.
            &["tune", "family.toml", "--csv", "/proc/r.csv"],
            "--csv /proc/r.csv: cannot write in /proc",
        ),
        (
            &["tune", "family.toml", "--timeout", "1e30"],
            "--timeout must be",
        ),
        (
            &["tune", "family.toml", "--workers", "100000"],
            "--workers must be",
        ),
    ];
    for (args, expected) in cases {
        let out = tunebox(dir.path(), args);
        assert!(!out.status.success(), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("family.toml")).unwrap(),
        MANIFEST
    );
}

/// `y = 2x + 1` over caller data; SCRIBBLE also doubles `x` on every call.
const FROM_FILES: &str = r#"#include <stdint.h>
void scale(float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) { y[i] = 2.0f * x[i] + 1.0f; if (SCRIBBLE) x[i] *= 2.0f; }
}
"#;

#[test]
fn inputs_and_expected_outputs_from_files() {
    let dir = tempfile::tempdir().unwrap();
    let n = 1000usize;
    let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let y: Vec<f32> = x.iter().map(|v| 2.0 * v + 1.0).collect();
    let bytes = |v: &[f32]| v.iter().flat_map(|f| f.to_ne_bytes()).collect::<Vec<u8>>();
    std::fs::write(dir.path().join("x.bin"), bytes(&x)).unwrap();
    std::fs::write(dir.path().join("y.bin"), bytes(&y)).unwrap();
    std::fs::write(dir.path().join("scale.c"), FROM_FILES).unwrap();
    let manifest = format!(
        r#"
[kernel]
source = "scale.c"
entry = "scale"
flags = ["-O2"]
[[tensors]]
name = "x"
dtype = "f32"
shape = [{n}]
init = {{ file = "x.bin" }}
[[tensors]]
name = "y"
dtype = "f32"
shape = [{n}]
init = "zeros"
output = true
[[scalars]]
name = "n"
value = {n}
[params]
SCRIBBLE = [0, 1]
[timing]
warmup_ms = 1
rep_ms = 5
flush_cache = false
[verify]
rtol = 0
atol = 0
reference = {{ outputs = {{ y = "y.bin" }} }}
"#
    );
    // The results of tuning `manifest`, written as `name.toml`.
    let results_of = |name: &str, manifest: &str| -> Vec<Value> {
        std::fs::write(dir.path().join(format!("{name}.toml")), manifest).unwrap();
        let (toml, report) = (format!("{name}.toml"), format!("{name}.json"));
        let out = tunebox(dir.path(), &["tune", &toml, "--json", &report, "--quiet"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let json: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join(&report)).unwrap())
                .unwrap();
        json["results"].as_array().unwrap().clone()
    };
    for result in &results_of("m", &manifest) {
        // Both are right: the one that writes its input is restored before every call.
        assert_eq!(result["status"], "ok", "{result}");
        let scribbles = result["choice"]["SCRIBBLE"] == 1;
        assert_eq!(
            result["mutated_inputs"] == serde_json::json!(["x"]),
            scribbles,
            "{result}"
        );
    }
    // Without anything to compare with, the outputs are not sent back, but they stay outputs:
    // the kernel writing `y` is not writing an input (it was listed as one, and `y` put back
    // before every call).
    let unverified = &manifest[..manifest.find("[verify]").unwrap()];
    for result in &results_of("u", unverified) {
        assert_eq!(result["status"], "ok", "{result}");
        let scribbles = result["choice"]["SCRIBBLE"] == 1;
        let expected = if scribbles {
            serde_json::json!(["x"])
        } else {
            serde_json::json!([])
        };
        assert_eq!(result["mutated_inputs"], expected, "{result}");
    }
    // A file of the wrong size is named with the size it needs.
    std::fs::write(dir.path().join("x.bin"), [0u8; 12]).unwrap();
    let out = tunebox(dir.path(), &["tune", "m.toml"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("tensors[0].init"), "{stderr}");
    assert!(
        stderr.contains("has 12 bytes, but f32 × [1000] needs 4000"),
        "{stderr}"
    );
}

#[test]
fn devices_are_probed_in_a_worker() {
    let dir = tempfile::tempdir().unwrap();
    let out = tunebox(dir.path(), &["devices", "--json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let backends: Vec<&str> = json["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_str().unwrap())
        .collect();
    assert!(backends.contains(&"cpu"), "{json}");
    // Without a GPU driver, the GPU backend (when built in) says why instead of panicking.
    assert!(
        !text(&out.stderr).contains("panicked"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_gpu_manifest_without_a_gpu_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("scale.cu"),
        "extern \"C\" __global__ void scale(float *x, long long n) {\n\
         long long i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("m.toml"),
        "problem_size = [4096]\n[kernel]\nsource = \"scale.cu\"\nentry = \"scale\"\n\
         [[tensors]]\nname = \"x\"\ndtype = \"f32\"\nshape = [4096]\n\
         [[scalars]]\nname = \"n\"\nvalue = 4096\n[params]\nblock_size_x = [128, 256]\n",
    )
    .unwrap();
    let listed = tunebox(dir.path(), &["tune", "--list", "m.toml"]);
    assert!(listed.status.success(), "{}", text(&listed.stderr));
    assert_eq!(text(&listed.stdout).lines().count(), 2);
    if std::path::Path::new("/dev/nvidiactl").exists() {
        return; // A machine with a GPU runs it; `cargo xtask gpu-test` covers that.
    }
    let out = tunebox(dir.path(), &["tune", "m.toml"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("this manifest needs a GPU"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // What can be done here, not a backend that cannot run CUDA, nor every name tried.
    assert!(stderr.contains("--replay RECORDED"), "{stderr}");
    assert!(!stderr.contains("cpu backend"), "{stderr}");
    assert!(stderr.matches("libcuda").count() <= 2, "{stderr}");
}

#[test]
fn hostile_manifests_get_errors_naming_the_field_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("m")).unwrap();
    std::fs::write(dir.path().join("family.c"), FAMILY).unwrap();
    let cases = [
        (
            MANIFEST.replace(
                "shape = [1024]\n[[tensors]]",
                "shape = [100000, 100000, 100000]\n[[tensors]]",
            ),
            "more than this machine's",
        ),
        (
            MANIFEST.replace("dtype = \"f32\"", "dtype = 32"),
            "invalid type",
        ),
        (
            MANIFEST.replace("[params]", "[params]\nTILE = []"),
            "params.TILE has no values",
        ),
        (
            MANIFEST.replace(
                "timeout_s = 2",
                "timeout_s = 2\nrestrictions = [\"MODE <\"]",
            ),
            "restrictions[0]",
        ),
        (
            MANIFEST.replace("output = true", "output = true\ncolour = 1"),
            "unknown field `colour`",
        ),
        (
            MANIFEST.replace("shape = [1024]\n[[tensors]]", "shape = [0]\n[[tensors]]"),
            "tensors[0].shape = [0]: every dimension must be at least 1",
        ),
        (
            MANIFEST.replace("shape = [1024]\n[[tensors]]", "shape = [-4]\n[[tensors]]"),
            "tensors[0].shape = [-4]: every dimension must be at least 1",
        ),
        (
            MANIFEST.replacen("dtype = \"f32\"", "dtype = \"f17\"", 1),
            "unknown dtype; use one of f32, f64, i32, i64, u8",
        ),
        (
            MANIFEST.replace("entry = \"family\"\n", ""),
            "kernel.entry is missing: name the function to call",
        ),
        (
            MANIFEST.replace("source = \"family.c\"", "source = \"../latin1.c\""),
            "is not UTF-8 text",
        ),
    ];
    std::fs::write(
        dir.path().join("latin1.c"),
        b"void family(float *x, float *y, long n) {} /* caf\xe9 */\n",
    )
    .unwrap();
    for (manifest, expected) in cases {
        let manifest = manifest.replace("source = \"family.c\"", "source = \"../family.c\"");
        std::fs::write(dir.path().join("m/bad.toml"), manifest).unwrap();
        let out = tunebox(dir.path(), &["tune", "m/bad.toml"]);
        assert!(!out.status.success(), "{expected}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(expected), "{expected}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    // A source outside the manifest's folder is allowed, and said.
    let outside = MANIFEST
        .replace("source = \"family.c\"", "source = \"../family.c\"")
        .replace("MODE = [0, 1, 2, 3, 4, 5]", "MODE = [0]");
    std::fs::write(dir.path().join("m/outside.toml"), outside).unwrap();
    let out = tunebox(dir.path(), &["tune", "m/outside.toml", "--quiet"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout)
            .contains("note: the source ../family.c lies outside the manifest's folder"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn doctor_checks_what_tuning_needs() {
    let dir = tempfile::tempdir().unwrap();
    let out = tunebox(dir.path(), &["doctor"]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    for line in [
        "✓ C compiler: ",
        "✓ C kernel build: ",
        "✓ kernel cache: ",
        "✓ worker: started in ",
        "✓ CPU benchmark: ",
        "everything CPU tuning needs works",
    ] {
        assert!(stdout.contains(line), "{line} missing from:\n{stdout}");
    }
    // CUDA is checked through a worker, whatever this machine has, and never fails the doctor.
    assert!(stdout.contains(" CUDA driver"), "{stdout}");
    // A missing compiler is a failure, with its fix.
    let out = crate::util::tunebox_env(dir.path(), &["doctor"], &[("CC", "no-such-cc")]);
    assert!(!out.status.success());
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("✗ C compiler: `no-such-cc --version` does not run"),
        "{stdout}"
    );
    assert!(stdout.contains("    fix: install a C compiler"), "{stdout}");
    assert!(!text(&out.stderr).contains("panicked"));
}

/// `y = x + 1`; MODE=1 replays its first answer, MODE=2 traces its parent.
const HOSTILE: &str = r#"#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <unistd.h>
void k(const float *x, float *y, int64_t n) {
#if MODE == 1
    static float *memo;
    if (!memo) { memo = malloc(n * sizeof *memo); for (int64_t i = 0; i < n; i++) memo[i] = x[i] + 1; }
    memcpy(y, memo, n * sizeof *y);
#else
    if (MODE == 2) ptrace(PTRACE_ATTACH, getppid(), 0, 0);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] + 1;
#endif
}
"#;

const HOSTILE_MANIFEST: &str = r#"
timeout_s = 20
[kernel]
source = "k.c"
entry = "k"
flags = ["-O1"]
[[tensors]]
name = "x"
dtype = "f32"
shape = [256]
[[tensors]]
name = "y"
dtype = "f32"
shape = [256]
init = "zeros"
output = true
[[scalars]]
name = "n"
value = 256
[params]
MODE = [0, 1, 2]
[timing]
warmup_ms = 1
rep_ms = 2
[verify]
reference = { choice = { MODE = 0 } }
"#;

#[test]
fn sandbox_flag_catches_a_tracer_and_fresh_inputs_catch_a_replay() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("k.c"), HOSTILE).unwrap();
    std::fs::write(dir.path().join("m.toml"), HOSTILE_MANIFEST).unwrap();
    let out = tunebox(
        dir.path(),
        &[
            "tune",
            "m.toml",
            "--sandbox",
            "--no-cache",
            "--json",
            "out.json",
        ],
    );
    let stdout = text(&out.stdout);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stderr.contains("sandbox: on"), "{stderr}");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("out.json")).unwrap())
            .unwrap();
    let results = json["results"].as_array().unwrap();
    let of = |mode: i64| {
        results
            .iter()
            .find(|r| r["choice"]["MODE"] == mode)
            .map(|r| {
                (
                    r["status"].as_str().unwrap().to_owned(),
                    r["error"].as_str().unwrap_or("").to_owned(),
                )
            })
            .unwrap()
    };
    assert_eq!(of(0).0, "ok");
    let (status, error) = of(1);
    assert_eq!(status, "wrong", "{error}");
    assert!(error.contains("fresh inputs"), "{error}");
    let (status, error) = of(2);
    assert_eq!(status, "suspicious", "{error}");
    assert!(error.contains("stopped by the sandbox"), "{error}");
    assert!(stdout.contains("suspicious"), "{stdout}");
}
