//! Sharding as Slurm job arrays and Kubernetes Indexed Jobs run it, simulated with local
//! processes and fake scheduler variables, and `tunebox merge`.

use std::path::Path;
use std::process::Stdio;

use serde_json::Value;

use crate::util::{FAMILY, MANIFEST, check, command, json, outcomes, text, tunebox};

/// 10 choices: ok, crashed (SIGSEGV, SIGABRT), wrong and compile_error, twice each (no hang: a
/// timeout would cost seconds).
fn write_family(dir: &Path) {
    std::fs::write(dir.join("family.c"), FAMILY).unwrap();
    let manifest = MANIFEST
        .replace(
            "MODE = [0, 1, 2, 3, 4, 5]",
            "MODE = [0, 1, 2, 4, 5]\nV = [1, 2]",
        )
        .replace(
            "reference = { choice = { MODE = 0 } }",
            "reference = { choice = { MODE = 0, V = 1 } }",
        );
    std::fs::write(dir.join("family.toml"), manifest).unwrap();
}

/// One shard's extra arguments and environment.
type Shard<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>);

/// Runs the shards as separate processes at once, each told its shard as its scheduler would.
fn run_shards(dir: &Path, shards: &[Shard<'_>]) {
    let children: Vec<_> = shards
        .iter()
        .map(|(args, env)| {
            let mut all = vec!["tune", "family.toml", "--quiet"];
            all.extend(args);
            command(dir, &all, env)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        check(&child.wait_with_output().unwrap());
    }
}

fn four_shards(dir: &Path) {
    run_shards(
        dir,
        &[
            // Shard 0 by hand.
            (vec!["--shard", "0/4", "--json", "s0.json"], vec![]),
            // Slurm: --array=0-3.
            (
                vec!["--shard", "auto", "--json", "s1.json"],
                vec![
                    ("SLURM_ARRAY_TASK_ID", "1"),
                    ("SLURM_ARRAY_TASK_COUNT", "4"),
                ],
            ),
            // Slurm: --array=1-4, task 3 is shard 2.
            (
                vec!["--shard", "auto", "--json", "s2.json"],
                vec![
                    ("SLURM_ARRAY_TASK_ID", "3"),
                    ("SLURM_ARRAY_TASK_MIN", "1"),
                    ("SLURM_ARRAY_TASK_MAX", "4"),
                ],
            ),
            // Kubernetes: an Indexed Job with completions: 4 (the default file name).
            (
                vec!["--shard", "auto", "--shards", "4"],
                vec![("JOB_COMPLETION_INDEX", "3")],
            ),
        ],
    );
}

#[test]
fn four_shards_merge_into_the_unsharded_result() {
    let dir = tempfile::tempdir().unwrap();
    write_family(dir.path());
    let full = tunebox(
        dir.path(),
        &["tune", "family.toml", "--json", "full.json", "-q"],
    );
    check(&full);
    four_shards(dir.path());
    let files = ["s0.json", "s1.json", "s2.json", "family.shard-3-of-4.json"];
    for (k, file) in files.iter().enumerate() {
        let shard = json(&dir.path().join(file));
        assert_eq!(shard["shard"]["index"], k, "{file}");
        assert_eq!(shard["shard"]["count"], 4, "{file}");
        assert!(!shard["device"].as_str().unwrap().is_empty());
        // Round robin by stable index.
        for r in shard["results"].as_array().unwrap() {
            assert_eq!(r["index"].as_u64().unwrap() % 4, k as u64, "{file}: {r}");
        }
    }
    let mut args = vec!["merge"];
    args.extend(files);
    args.extend(["--json", "merged.json", "--csv", "merged.csv"]);
    let merged = tunebox(dir.path(), &args);
    check(&merged);
    assert!(
        !text(&merged.stderr).contains("MISSING"),
        "{}",
        text(&merged.stderr)
    );
    let merged_json = json(&dir.path().join("merged.json"));
    let full_json = json(&dir.path().join("full.json"));
    assert_eq!(outcomes(&merged_json), outcomes(&full_json));
    assert_eq!(merged_json["manifest_hash"], full_json["manifest_hash"]);
    assert_eq!(merged_json["merged_from"].as_array().unwrap().len(), 4);
    assert!(merged_json.get("missing").is_none(), "{merged_json}");
    assert_eq!(merged_json["best"]["choice"]["MODE"], 0);
    let csv = std::fs::read_to_string(dir.path().join("merged.csv")).unwrap();
    assert_eq!(
        csv.lines().count(),
        11,
        "a header and a row per choice:\n{csv}"
    );
    assert!(
        csv.starts_with("rank,index,MODE,V,status,median_ms"),
        "{csv}"
    );

    // The caches are results files too.
    let merged = tunebox(
        dir.path(),
        &[
            "merge",
            // Each shard's cache belongs to the manifest, whatever its --json.
            "family.shard-0-of-4.tunebox-cache.jsonl",
            "family.shard-1-of-4.tunebox-cache.jsonl",
            "family.shard-2-of-4.tunebox-cache.jsonl",
            "family.shard-3-of-4.tunebox-cache.jsonl",
            "--json",
            "from-caches.json",
        ],
    );
    check(&merged);
    assert_eq!(
        outcomes(&json(&dir.path().join("from-caches.json"))),
        outcomes(&full_json)
    );

    // A missing shard is named.
    let out = tunebox(dir.path(), &["merge", "s0.json", "s1.json", "s2.json"]);
    check(&out);
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("MISSING: shard 3/4 has no file, so its 2 choices (#3, #7) are missing"),
        "{stderr}"
    );
    // A file given twice: its choices are duplicated.
    let out = tunebox(
        dir.path(),
        &["merge", "s0.json", "s0.json", "s1.json", "s2.json"],
    );
    check(&out);
    assert!(
        text(&out.stdout).contains("3 choices are in more than one file"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn more_shards_than_choices() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("family.c"), FAMILY).unwrap();
    let manifest = MANIFEST.replace("MODE = [0, 1, 2, 3, 4, 5]", "MODE = [0, 4]");
    std::fs::write(dir.path().join("family.toml"), manifest).unwrap();
    let shards: Vec<Shard<'_>> = ["0", "1", "2", "3", "4"]
        .iter()
        .map(|k| {
            (
                vec!["--shard", "auto", "--no-cache"],
                vec![("SLURM_ARRAY_TASK_ID", *k), ("SLURM_ARRAY_TASK_COUNT", "5")],
            )
        })
        .collect();
    run_shards(dir.path(), &shards);
    let files: Vec<String> = (0..5)
        .map(|k| format!("family.shard-{k}-of-5.json"))
        .collect();
    for file in &files[2..] {
        let empty = json(&dir.path().join(file));
        assert_eq!(empty["results"].as_array().unwrap().len(), 0, "{file}");
    }
    let mut args = vec!["merge", "--json", "merged.json"];
    args.extend(files.iter().map(String::as_str));
    let out = tunebox(dir.path(), &args);
    check(&out);
    assert!(!text(&out.stderr).contains("MISSING"));
    let merged = json(&dir.path().join("merged.json"));
    assert_eq!(
        outcomes(&merged),
        [
            ("{\"MODE\":0}".to_string(), "ok".to_string()),
            ("{\"MODE\":4}".to_string(), "wrong".to_string())
        ]
    );
    // An empty shard is not a missing one; a missing shard with choices is.
    let out = tunebox(
        dir.path(),
        &["merge", &files[1], &files[2], &files[3], &files[4]],
    );
    assert!(
        text(&out.stderr)
            .contains("MISSING: shard 0/5 has no file, so its 1 choice (#0) is missing")
    );
}

/// Rewrites a JSON file.
fn edit(path: &Path, change: impl FnOnce(&mut Value)) {
    let mut value = json(path);
    change(&mut value);
    std::fs::write(path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
}

#[test]
fn merge_refuses_mismatches_and_keeps_devices_apart() {
    let dir = tempfile::tempdir().unwrap();
    write_family(dir.path());
    run_shards(
        dir.path(),
        &[
            (
                vec!["--shard", "0/2", "--json", "a.json", "--no-cache"],
                vec![],
            ),
            (
                vec!["--shard", "1/2", "--json", "b.json", "--no-cache"],
                vec![],
            ),
        ],
    );
    let b = dir.path().join("b.json");
    std::fs::copy(&b, dir.path().join("other-manifest.json")).unwrap();
    edit(&dir.path().join("other-manifest.json"), |v| {
        v["manifest_hash"] = "0123".into();
    });
    let out = tunebox(dir.path(), &["merge", "a.json", "other-manifest.json"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "cannot merge a.json with other-manifest.json: they come from different manifests"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("with hash 0123"), "{stderr}");

    std::fs::copy(&b, dir.path().join("old.json")).unwrap();
    edit(&dir.path().join("old.json"), |v| {
        v["tunebox_version"] = "0.0.1".into()
    });
    let out = tunebox(dir.path(), &["merge", "a.json", "old.json"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("old.json (tunebox 0.0.1)"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    // Shard 1 on another CPU model: ranked apart, unless asked.
    edit(&b, |v| {
        v["device"] = "Other CPU (8 cores)".into();
        for r in v["results"].as_array_mut().unwrap() {
            r["device"] = "Other CPU (8 cores)".into();
        }
    });
    let out = tunebox(
        dir.path(),
        &["merge", "a.json", "b.json", "--json", "apart.json"],
    );
    check(&out);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("on Other CPU (8 cores)"), "{stdout}");
    assert!(
        stdout.contains("each device's results are ranked apart"),
        "{stdout}"
    );
    let apart = json(&dir.path().join("apart.json"));
    assert_eq!(
        apart["best_per_device"].as_array().unwrap().len(),
        2,
        "{apart}"
    );
    // Every choice is present once, on one device or the other.
    assert!(apart.get("missing").is_none());
    let out = tunebox(
        dir.path(),
        &["merge", "a.json", "b.json", "--across-devices"],
    );
    check(&out);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("  device  "), "{stdout}");
    assert!(stdout.contains("ranked across 2 devices"), "{stdout}");
}
