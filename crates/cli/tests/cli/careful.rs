//! The results cache and the compiler, checked like a careful user: a header edited between two
//! runs (found through a relative `-I`, from another directory) is measured again, another
//! `--json` name measures nothing twice, `CC` is split as make users write it, and a missing
//! compiler is one error.

use std::path::Path;

use crate::util::{check, json, text, tunebox, tunebox_env};

/// `y = SCALE * x`, with SCALE from a header found only through `-Iinc`.
const SCALED: &str = r#"#include <stdint.h>
#include "scale.h"
void scaled(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = SCALE * x[i] + 0 * P;
}
"#;

const SCALED_MANIFEST: &str = r#"
[kernel]
source = "scaled.c"
entry = "scaled"
flags = ["-O1", "-Iinc"]     # relative to this manifest's folder
[[tensors]]
name = "x"
dtype = "f32"
shape = [64]
init = "ones"
[[tensors]]
name = "y"
dtype = "f32"
shape = [64]
init = "zeros"
output = true
[[scalars]]
name = "n"
value = 64
[params]
P = [1, 2]
[timing]
warmup_ms = 1
rep_ms = 2
flush_cache = false
[verify]
reference = { outputs = { y = "twos.bin" } }
"#;

fn write_scaled(project: &Path, scale: &str) {
    std::fs::create_dir_all(project.join("inc")).unwrap();
    std::fs::write(
        project.join("inc/scale.h"),
        format!("#define SCALE {scale}\n"),
    )
    .unwrap();
}

fn statuses(report: &serde_json::Value) -> Vec<String> {
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_owned())
        .collect()
}

/// The number in "skipped N choices already measured", if said.
fn skipped(stderr: &str) -> Option<usize> {
    let (_, rest) = stderr.split_once("skipped ")?;
    rest.split_whitespace().next()?.parse().ok()
}

#[test]
fn the_cache_follows_headers_found_through_dash_i_and_belongs_to_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    // The manifest lies in proj/, and tunebox runs from its parent: `-Iinc` means proj/inc.
    let project = dir.path().join("proj");
    write_scaled(&project, "2.0f");
    std::fs::write(project.join("scaled.c"), SCALED).unwrap();
    std::fs::write(project.join("m.toml"), SCALED_MANIFEST).unwrap();
    let twos: Vec<u8> = (0..64).flat_map(|_| 2.0f32.to_ne_bytes()).collect();
    std::fs::write(project.join("twos.bin"), twos).unwrap();

    let first = tunebox(dir.path(), &["tune", "proj/m.toml", "--json", "a.json"]);
    check(&first);
    assert_eq!(statuses(&json(&dir.path().join("a.json"))), ["ok", "ok"]);
    assert!(project.join("m.tunebox-cache.jsonl").is_file());

    // Another report name, or none: the manifest's cache answers, nothing is measured twice.
    for args in [
        &["tune", "proj/m.toml", "--json", "b.json"][..],
        &["tune", "proj/m.toml"][..],
    ] {
        let again = tunebox(dir.path(), args);
        check(&again);
        let stderr = text(&again.stderr);
        assert_eq!(skipped(&stderr), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("compiling"), "{args:?}: {stderr}");
    }

    // The header changes: both choices are compiled and measured again, and are now wrong.
    write_scaled(&project, "3.0f");
    let edited = tunebox(dir.path(), &["tune", "proj/m.toml", "--json", "c.json"]);
    check(&edited);
    let stderr = text(&edited.stderr);
    assert_eq!(skipped(&stderr), None, "{stderr}");
    assert_eq!(
        statuses(&json(&dir.path().join("c.json"))),
        ["wrong", "wrong"]
    );

    // Restored: measured again (the newest lines describe the edited header), then cached.
    write_scaled(&project, "2.0f");
    let restored = tunebox(dir.path(), &["tune", "proj/m.toml", "--json", "d.json"]);
    check(&restored);
    assert_eq!(statuses(&json(&dir.path().join("d.json"))), ["ok", "ok"]);
    let again = tunebox(dir.path(), &["tune", "proj/m.toml", "--json", "d.json"]);
    assert_eq!(skipped(&text(&again.stderr)), Some(2));
}

/// `y = 2x + 1`, which compiles only when `CC` carries `-DFROM_CC=1`.
const FROM_CC: &str = r#"#include <stdint.h>
#ifndef FROM_CC
#error "FROM_CC is not defined: CC was not split into words"
#endif
void scaled(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + 0 * P;
}
"#;

#[test]
fn cc_is_split_into_words_and_a_missing_compiler_is_one_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("scaled.c"), FROM_CC).unwrap();
    let manifest = SCALED_MANIFEST
        .replace("flags = [\"-O1\", \"-Iinc\"]", "flags = [\"-O1\"]")
        .replace(
            "[verify]\nreference = { outputs = { y = \"twos.bin\" } }\n",
            "",
        );
    std::fs::write(dir.path().join("m.toml"), manifest).unwrap();

    // As make users give it: a launcher, then the compiler and a flag.
    let out = tunebox_env(
        dir.path(),
        &["tune", "m.toml", "--json", "r.json", "--no-cache"],
        &[("CC", "env cc -DFROM_CC=1")],
    );
    check(&out);
    assert_eq!(statuses(&json(&dir.path().join("r.json"))), ["ok", "ok"]);

    // A compiler that is not there: one error naming it and the ways out, a failing exit.
    let out = tunebox_env(
        dir.path(),
        &["tune", "m.toml", "--json", "missing.json", "--no-cache"],
        &[("CC", "tunebox-no-such-cc -O2")],
    );
    assert!(!out.status.success(), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("C compiler `tunebox-no-such-cc` was not found on PATH; install it")
            && stderr.contains("CC")
            && stderr.contains("kernel.compiler")
            && stderr.contains("nothing was measured"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("not found").count(), 1, "{stderr}");
    assert!(!dir.path().join("missing.json").exists());
}
