//! Spaces too large to list (more than 50 million valid choices): counted, sampled, searched
//! and sharded without listing them.

use std::fmt::Write as _;
use std::path::Path;

use crate::util::{json, text, tunebox};

/// A C kernel whose time does not depend on its params.
const KERNEL: &str = r#"
#include <stdint.h>
void copy(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i];
}
"#;

/// A manifest of 11 params of 10 values (10^11 raw choices, 10^10 valid: too many to list)
/// whose one restriction reads only the last param, as a search over unroll factors and
/// tile sizes often has.
fn huge_manifest(dir: &Path) -> String {
    std::fs::write(dir.join("copy.c"), KERNEL).unwrap();
    let mut manifest = String::from(
        r#"restrictions = ["P10 == 0"]
[kernel]
source = "copy.c"
entry = "copy"
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
[timing]
warmup_ms = 1
rep_ms = 2
flush_cache = false
[params]
"#,
    );
    for p in 0..11 {
        writeln!(manifest, "P{p} = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]").unwrap();
    }
    std::fs::write(dir.join("huge.toml"), &manifest).unwrap();
    "huge.toml".into()
}

#[test]
fn a_space_too_large_to_list_is_counted_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = huge_manifest(dir.path());
    let out = tunebox(dir.path(), &["tune", &manifest, "--count"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "10000000000 valid choices (100000000000 before restrictions)\n"
    );
}

#[test]
fn random_search_samples_a_space_too_large_to_list() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = huge_manifest(dir.path());
    let list = |extra: &[&str]| {
        let mut args = vec!["tune", &manifest, "--list", "--strategy", "random"];
        args.extend(extra);
        tunebox(dir.path(), &args)
    };
    let out = list(&["--budget", "5", "--seed", "3"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert!(lines.iter().all(|l| l.ends_with("P10=0")), "{lines:?}");
    assert_eq!(
        text(&list(&["--budget", "5", "--seed", "3"]).stdout),
        lines.join("\n") + "\n",
        "seeded"
    );
    // Without a budget the search has no end: say so.
    let out = list(&[]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("needs --budget"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn brute_force_over_a_space_too_large_to_list_runs_by_shards_of_the_raw_product() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = huge_manifest(dir.path());
    let out = tunebox(dir.path(), &["tune", &manifest, "--list"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("--shard K/N") && stderr.contains("--budget"),
        "{stderr}"
    );
    // Shard 0 of 10^6: the raw product's first 10^5 choices, of which a tenth are valid.
    let out = tunebox(
        dir.path(),
        &["tune", &manifest, "--list", "--shard", "0/1000000"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 10_000);
    assert_eq!(
        lines[0],
        "P0=0 P1=0 P2=0 P3=0 P4=0 P5=0 P6=0 P7=0 P8=0 P9=0 P10=0"
    );
    assert_eq!(
        lines[9_999],
        "P0=0 P1=0 P2=0 P3=0 P4=0 P5=0 P6=9 P7=9 P8=9 P9=9 P10=0"
    );
}

#[test]
fn a_space_too_large_to_list_is_tuned_by_sampling() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = huge_manifest(dir.path());
    let out = tunebox(
        dir.path(),
        &[
            "tune",
            &manifest,
            "--strategy",
            "genetic",
            "--budget",
            "3",
            "--json",
            "out.json",
            "-q",
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let report = json(&dir.path().join("out.json"));
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 3, "{report}");
    for r in results {
        assert_eq!(r["status"], "ok", "{r}");
        assert_eq!(r["choice"]["P10"], 0, "{r}");
        // The index is the choice's rank in the raw product.
        let rank = (0..11).fold(0u64, |rank, p| {
            rank * 10 + r["choice"][format!("P{p}")].as_u64().unwrap()
        });
        assert_eq!(r["index"].as_u64(), Some(rank), "{r}");
    }
}
