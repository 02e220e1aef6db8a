//! The workers' environment: filtered by default, a note when the kernel reads a variable that
//! was dropped, `[env]` and `--env` to pass or set variables, and results cached per
//! environment.

use std::path::Path;
use std::process::Output;

use crate::util::{check, text, tunebox_env};

/// Prints what it sees of `SCALE_FACTOR`, once per worker.
const KERNEL: &str = r#"#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
void scale(const float *x, float *y, int64_t n) {
    static int said;
    if (!said++) {
        const char *f = getenv("SCALE_FACTOR");
        printf("SCALE_FACTOR=%s\n", f ? f : "(unset)");
        fflush(stdout);
    }
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i];
}
"#;

fn manifest(env: &str) -> String {
    format!(
        r#"[kernel]
source = "scale.c"
entry = "scale"
[[tensors]]
name = "x"
dtype = "f32"
shape = [16]
[[tensors]]
name = "y"
dtype = "f32"
shape = [16]
output = true
[[scalars]]
name = "n"
value = 16
[params]
A = [1]
[timing]
warmup_ms = 1
rep_ms = 1
flush_cache = false
{env}"#
    )
}

/// Runs `tunebox tune m.toml ARGS` with SCALE_FACTOR=3 in its environment; what the kernel
/// saw (from the workers' stdout log the run names) and the run's output.
fn run(dir: &Path, args: &[&str]) -> (String, Output) {
    let mut all = vec!["tune", "m.toml", "-q"];
    all.extend(args);
    let out = tunebox_env(dir, &all, &[("SCALE_FACTOR", "3")]);
    check(&out);
    let stdout = text(&out.stdout);
    let seen = stdout
        .lines()
        .find(|l| l.contains("on stdout"))
        .and_then(|note| note.split(" in ").nth(1))
        .and_then(|rest| rest.split(" (").next())
        .map(|log| std::fs::read_to_string(log).unwrap())
        .unwrap_or_default();
    let seen = seen
        .lines()
        .last()
        .unwrap_or_else(|| panic!("nothing printed:\n{stdout}"))
        .to_owned();
    (seen, out)
}

#[test]
fn the_workers_environment_is_filtered_said_and_passed_on_request() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("scale.c"), KERNEL).unwrap();
    std::fs::write(dir.path().join("m.toml"), manifest("")).unwrap();

    // Filtered, and said: the kernel reads a variable the workers do not get.
    let (seen, out) = run(dir.path(), &[]);
    assert_eq!(seen, "SCALE_FACTOR=(unset)");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(
            "note: scale.c reads the environment variable SCALE_FACTOR (getenv), which is set \
             here but not passed to the workers"
        ) && stdout.contains("`[env] pass = [\"SCALE_FACTOR\"]`")
            && stdout.contains("`--env SCALE_FACTOR`"),
        "{stdout}"
    );

    // Passed for one run: measured again (the environment is part of the cache key), no note.
    let (seen, out) = run(dir.path(), &["--env", "SCALE_FACTOR"]);
    assert_eq!(seen, "SCALE_FACTOR=3");
    assert!(
        !text(&out.stderr).contains("skipped"),
        "{}",
        text(&out.stderr)
    );
    assert!(!text(&out.stdout).contains("reads the environment"));

    // Set by the manifest; --env NAME=VALUE wins for one run.
    std::fs::write(
        dir.path().join("m.toml"),
        manifest("[env]\nset = { SCALE_FACTOR = \"5\" }\n"),
    )
    .unwrap();
    assert_eq!(run(dir.path(), &[]).0, "SCALE_FACTOR=5");
    assert_eq!(
        run(dir.path(), &["--env", "SCALE_FACTOR=7"]).0,
        "SCALE_FACTOR=7"
    );
    // Passed by the manifest.
    std::fs::write(
        dir.path().join("m.toml"),
        manifest("[env]\npass = [\"SCALE_FACTOR\"]\n"),
    )
    .unwrap();
    assert_eq!(run(dir.path(), &["--fresh"]).0, "SCALE_FACTOR=3");

    // Bad input names what was written.
    std::fs::write(
        dir.path().join("m.toml"),
        manifest("[env]\npass = [\"A=B\"]\n"),
    )
    .unwrap();
    let out = tunebox_env(dir.path(), &["tune", "m.toml"], &[]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("env.pass[0]: \"A=B\" is not a variable to pass"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_tmpdir_that_does_not_exist_is_a_clear_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("scale.c"), KERNEL).unwrap();
    std::fs::write(dir.path().join("m.toml"), manifest("")).unwrap();
    let missing = dir.path().join("no-such-tmp");
    let out = tunebox_env(
        dir.path(),
        &["tune", "m.toml", "--no-cache"],
        &[("TMPDIR", missing.to_str().unwrap())],
    );
    let stderr = text(&out.stderr);
    assert_ne!(out.status.code(), Some(101), "a panic:\n{stderr}");
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("TMPDIR") && stderr.contains("no-such-tmp"),
        "the variable and its value are named:\n{stderr}"
    );
}

/// The variables the workers inherit that change how a kernel runs (`OMP_NUM_THREADS`, here)
/// are part of the results-cache key: a result measured with one team size is not given back
/// for another.
#[test]
fn inherited_threading_variables_are_part_of_the_cache_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("scale.c"), KERNEL).unwrap();
    std::fs::write(dir.path().join("m.toml"), manifest("")).unwrap();
    let cached = |threads: &str| {
        let out = tunebox_env(
            dir.path(),
            &["tune", "m.toml", "-q", "--json", "r.json"],
            &[("OMP_NUM_THREADS", threads)],
        );
        check(&out);
        let report = crate::util::json(&dir.path().join("r.json"));
        report["results"][0]["cached"].as_bool().unwrap()
    };
    assert!(!cached("1"), "the first run measures");
    assert!(cached("1"), "the same environment: from the cache");
    assert!(!cached("2"), "another team size: measured again");
    assert!(cached("1"), "each environment keeps its own result");
}
