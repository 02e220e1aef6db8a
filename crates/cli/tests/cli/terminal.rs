//! What the terminal shows: identical errors grouped with their hint and a way to the whole
//! message; progress and notes that say each thing once.

use crate::util::{check, text, tunebox};

const SCALE: &str = r#"#include <stdint.h>
void scale(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i];
}
"#;

/// `scale(x, y, n)` with `entry` as given and six choices.
fn manifest(entry: &str) -> String {
    format!(
        r#"[kernel]
source = "scale.c"
entry = "{entry}"
[[tensors]]
name = "x"
dtype = "f32"
shape = [64]
[[tensors]]
name = "y"
dtype = "f32"
shape = [64]
output = true
[[scalars]]
name = "n"
value = 64
[params]
A = [1, 2, 3]
B = [1, 2]
[timing]
warmup_ms = 1
rep_ms = 2
flush_cache = false
"#
    )
}

/// A misspelled `entry`: six identical compile errors are one row, counted, with the
/// manifest's field, the compiler's "did you mean" and the fix in a footnote, and the way to
/// the whole message; `--errors` prints it.
#[test]
fn identical_errors_are_grouped_with_their_hint() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("scale.c"), SCALE).unwrap();
    std::fs::write(dir.path().join("m.toml"), manifest("scal")).unwrap();
    let out = tunebox(dir.path(), &["tune", "m.toml", "-q"]);
    check(&out);
    let stdout = text(&out.stdout);
    assert_eq!(stdout.matches("compile_error  [1]").count(), 2, "{stdout}");
    assert!(stdout.contains("… 5 more"), "{stdout}");
    assert!(
        stdout.contains(
            "[1] 6 choices (A=1 B=1, A=1 B=2, A=2 B=1, A=2 B=2 and 2 more; --errors lists \
             them): error: [kernel] entry = \"scal\", but scale.c declares no function \
             `scal`; did you mean `scale`? (fix `entry` in the manifest)"
        ),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "whole error messages: run with --errors (or `tunebox report \
             m.tunebox-cache.jsonl --errors`)"
        ),
        "{stdout}"
    );
    let out = tunebox(dir.path(), &["report", "m.tunebox-cache.jsonl", "--errors"]);
    check(&out);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("compile_error (A=1 B=1, A=1 B=2, A=2 B=1, A=2 B=2, A=3 B=1, A=3 B=2):"),
        "{stdout}"
    );
    assert!(stdout.contains("    compilation failed: `"), "{stdout}");
    assert!(!stdout.contains("whole error messages"), "{stdout}");
}

/// An adaptive search asks a choice or two at a time: its progress counts the whole run (one
/// `[k/budget]` count, one start line), and a re-run on a full cache says "skipped" once.
#[test]
fn adaptive_search_progress_counts_the_whole_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("scale.c"), SCALE).unwrap();
    std::fs::write(dir.path().join("m.toml"), manifest("scale")).unwrap();
    let args = ["tune", "m.toml", "--strategy", "ils", "--budget", "4"];
    let out = tunebox(dir.path(), &args);
    check(&out);
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr.matches("tunebox: benchmarking").count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.matches("tunebox: compiling").count() <= 1,
        "{stderr}"
    );
    for k in 1..=4 {
        assert!(stderr.contains(&format!("[{k}/4]")), "{stderr}");
    }
    assert!(!stderr.contains("/1]"), "{stderr}");

    let out = tunebox(dir.path(), &args);
    check(&out);
    let stderr = text(&out.stderr);
    assert_eq!(stderr.matches("skipped").count(), 1, "{stderr}");
    assert!(
        stderr.contains("skipped 4 choices already measured"),
        "{stderr}"
    );
}

fn hub() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/benchmark_hub")
}

/// `report` and `--replay` show recorded data: ties are said, but `--refine` (an option of
/// `tune`, measuring) is not suggested for data another tool recorded; for tunebox's own
/// results, the whole command is.
#[test]
fn reports_suggest_only_what_can_be_run() {
    let dir = tempfile::tempdir().unwrap();
    let recorded = hub().join("cachefiles/convolution_milo/A4000.json.gz");
    let out = tunebox(
        dir.path(),
        &["report", recorded.to_str().unwrap(), "--top", "1"],
    );
    check(&out);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("tied within the noise"), "{stdout}");
    assert!(!stdout.contains("--refine"), "{stdout}");
}

/// A replay is titled with the manifest's `name`, as a run of it is, not the file's name.
#[test]
fn replays_are_titled_with_the_manifests_name() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("scale.c"), SCALE).unwrap();
    std::fs::write(
        dir.path().join("m.toml"),
        format!("name = \"scale-64\"\n{}", manifest("scale")),
    )
    .unwrap();
    check(&tunebox(dir.path(), &["tune", "m.toml", "-q"]));
    let out = tunebox(
        dir.path(),
        &["tune", "m.toml", "--replay", "m.tunebox-cache.jsonl", "-q"],
    );
    check(&out);
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("scale-64: replay of m.tunebox-cache.jsonl"),
        "{stdout}"
    );
    assert!(!stdout.contains("--refine"), "{stdout}");
}

/// What successful choices print on stdout is kept out of the table but not lost: a note names
/// the file it went to; a run that printed nothing says nothing and leaves no file.
#[test]
fn the_stdout_of_choices_is_kept_and_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("scale.c"),
        SCALE.replace(
            "void scale(const float *x, float *y, int64_t n) {",
            "#include <stdio.h>\nvoid scale(const float *x, float *y, int64_t n) {\n    \
             printf(\"A=%d B=%d here\\n\", A, B); fflush(stdout);",
        ),
    )
    .unwrap();
    std::fs::write(dir.path().join("m.toml"), manifest("scale")).unwrap();
    let out = tunebox(dir.path(), &["tune", "m.toml", "-q", "--no-cache"]);
    check(&out);
    let stdout = text(&out.stdout);
    assert!(!stdout.contains("here"), "{stdout}");
    let note = stdout
        .lines()
        .find(|l| l.contains("on stdout"))
        .unwrap_or_else(|| panic!("no note:\n{stdout}"));
    let log = note
        .split(" in ")
        .nth(1)
        .and_then(|rest| rest.split(" (").next())
        .unwrap();
    assert!(
        log.starts_with(dir.path().join("cache").to_str().unwrap()),
        "{note}"
    );
    let logged = std::fs::read_to_string(log).unwrap();
    for (a, b) in [(1, 1), (3, 2)] {
        assert!(logged.contains(&format!("A={a} B={b} here")), "{logged}");
    }

    std::fs::write(dir.path().join("scale.c"), SCALE).unwrap();
    let out = tunebox(dir.path(), &["tune", "m.toml", "-q", "--no-cache"]);
    check(&out);
    assert!(
        !text(&out.stdout).contains("on stdout"),
        "{}",
        text(&out.stdout)
    );
    let logs: Vec<_> = std::fs::read_dir(dir.path().join("cache/logs"))
        .unwrap()
        .collect();
    assert_eq!(logs.len(), 1, "only the first run's log stays");
}
