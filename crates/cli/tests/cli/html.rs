//! `--html` on `report`, `tune --replay` and `report A B`: the page is written, whole, and the
//! comparison's verdict is printed; what needs one report is refused with two.

use std::path::PathBuf;

use crate::util::{text, tunebox};

fn hub() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../data/benchmark_hub")
}

fn recorded_report() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tune/tests/data/matmul-cpu.report.json")
}

/// The page at `path`: a whole document with figures.
fn page(path: &std::path::Path) -> String {
    let html = std::fs::read_to_string(path).expect("the page was written");
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.trim_end().ends_with("</html>"));
    assert!(html.contains("Content-Security-Policy"));
    html
}

#[test]
fn report_and_replay_write_a_page() {
    let dir = tempfile::tempdir().unwrap();
    let out_page = dir.path().join("main.html");
    let out = tunebox(
        dir.path(),
        &[
            "report",
            recorded_report().to_str().unwrap(),
            "--html",
            out_page.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("wrote"), "{}", text(&out.stderr));
    let html = page(&out_page);
    assert!(html.contains("id=\"search-time\""));

    let replayed = dir.path().join("replay.html");
    let out = tunebox(
        dir.path(),
        &[
            "tune",
            hub()
                .join("kernels/convolution_milo.json")
                .to_str()
                .unwrap(),
            "--replay",
            hub()
                .join("cachefiles/convolution_milo/A100.json.gz")
                .to_str()
                .unwrap(),
            "--strategy",
            "random",
            "--budget",
            "50",
            "-q",
            "--html",
            replayed.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let html = page(&replayed);
    // The whole recording was read for the methodology's baseline.
    assert!(html.contains("random search, expected best"));
}

/// Two choices of a small kernel, quick to measure.
const SMALL: &str = r#"
name = "small"
[kernel]
source = "small.c"
entry = "small"
flags = ["-O1"]
[[tensors]]
name = "x"
dtype = "f32"
shape = [256]
init = "ones"
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
P = [1, 2]
[timing]
warmup_ms = 1
rep_ms = 2
flush_cache = false
"#;

#[test]
fn a_run_writes_its_page() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("small.c"),
        "#include <stdint.h>\nvoid small(const float *x, float *y, int64_t n) {\n\
         for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] * P;\n}\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("m.toml"), SMALL).unwrap();
    let out = tunebox(
        dir.path(),
        &["tune", "m.toml", "--no-cache", "-q", "--html", "run.html"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let html = page(&dir.path().join("run.html"));
    // Measured in windows on the run's clock: the measuring section draws them.
    for text in [
        "<h1>small: small (small.c)</h1>",
        "id=\"ranking\"",
        "id=\"param-0\"",
        "Conditions",
    ] {
        assert!(html.contains(text), "{text} missing");
    }
}

#[test]
fn two_reports_are_compared() {
    let dir = tempfile::tempdir().unwrap();
    let a = hub().join("cachefiles/convolution_milo/A100.json.gz");
    let b = hub().join("cachefiles/convolution_milo/A6000.json.gz");
    let compared = dir.path().join("compared.html");
    let out = tunebox(
        dir.path(),
        &[
            "report",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--html",
            compared.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("4362 in both"), "{stdout}");
    assert!(stdout.contains("best: "), "{stdout}");
    assert!(page(&compared).contains("id=\"rank-change\""));

    // What needs one report is refused, naming what applies.
    let out = tunebox(
        dir.path(),
        &[
            "report",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--top",
            "3",
        ],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("only --html applies"),
        "{}",
        text(&out.stderr)
    );

    // Reports of other spaces are refused.
    let other = hub().join("cachefiles/dedispersion_milo/A100.json.gz");
    let out = tunebox(
        dir.path(),
        &["report", a.to_str().unwrap(), other.to_str().unwrap()],
    );
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("not of one space"),
        "{}",
        text(&out.stderr)
    );
}
