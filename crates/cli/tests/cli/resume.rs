//! The results cache: re-runs and interrupted runs skip what was measured; Ctrl-C stops cleanly;
//! strategies, time budgets and refinement.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::{FAMILY, MANIFEST, check, command, json, mode_manifest, outcomes, text, tunebox};

/// A kernel that sleeps 4 ms per call: a choice takes ~0.1 s, long enough to interrupt a run.
const SLOW: &str = r#"#include <stdint.h>
#include <unistd.h>
void slow(const float *x, float *y, int64_t n) {
    usleep(4000 + 100 * MODE);
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i];
}
"#;

fn slow_manifest(modes: usize) -> String {
    mode_manifest(
        "slow",
        "10",
        modes,
        "warmup_ms = 1\nrep_ms = 5\nmin_reps = 5",
    )
}

fn write_slow(dir: &Path, modes: usize) {
    std::fs::write(dir.join("slow.c"), SLOW).unwrap();
    std::fs::write(dir.join("slow.toml"), slow_manifest(modes)).unwrap();
}

/// The choices a results cache holds: its distinct keys (a choice measured in rounds is
/// cached after screening and again with all its windows; the last line of a key wins).
fn cache_lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| {
            t.lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| {
                    serde_json::from_str::<serde_json::Value>(l)
                        .ok()
                        .and_then(|v| v["key"].as_str().map(str::to_owned))
                        .unwrap_or_else(|| l.to_owned())
                })
                .collect::<std::collections::HashSet<_>>()
                .len()
        })
        .unwrap_or(0)
}

/// The lines of a results cache.
fn raw_lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().filter(|l| !l.trim().is_empty()).count())
        .unwrap_or(0)
}

/// The number in "skipped N choices already measured", if said.
fn skipped(stderr: &str) -> Option<usize> {
    let (_, rest) = stderr.split_once("skipped ")?;
    rest.split_whitespace().next()?.parse().ok()
}

/// The number in "resuming N choices whose rounds were cut short", if said.
fn resumed(stderr: &str) -> Option<usize> {
    let (_, rest) = stderr.split_once("resuming ")?;
    rest.split_whitespace().next()?.parse().ok()
}

#[test]
fn a_second_run_measures_nothing() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("family.c"), FAMILY).unwrap();
    let manifest = MANIFEST.replace("MODE = [0, 1, 2, 3, 4, 5]", "MODE = [0, 1, 4, 5]");
    std::fs::write(dir.path().join("family.toml"), manifest).unwrap();
    let first = tunebox(dir.path(), &["tune", "family.toml", "--json", "r.json"]);
    check(&first);
    assert_eq!(skipped(&text(&first.stderr)), None);
    let cache = dir.path().join("family.tunebox-cache.jsonl");
    assert_eq!(cache_lines(&cache), 4, "one line per finished choice");
    let before = json(&dir.path().join("r.json"));

    let second = tunebox(dir.path(), &["tune", "family.toml", "--json", "r.json"]);
    check(&second);
    let stderr = text(&second.stderr);
    assert_eq!(skipped(&stderr), Some(4), "{stderr}");
    assert!(!stderr.contains("benchmarking"), "{stderr}");
    assert!(!stderr.contains("compiling"), "{stderr}");
    assert!(
        text(&second.stdout).contains("cache: 4 of them from family.tunebox-cache.jsonl"),
        "{}",
        text(&second.stdout)
    );
    assert_eq!(cache_lines(&cache), 4, "nothing new to cache");
    let after = json(&dir.path().join("r.json"));
    assert_eq!(outcomes(&before), outcomes(&after));
    let results = after["results"].as_array().unwrap();
    assert!(results.iter().all(|r| r["cached"] == true), "{after}");
    assert_eq!(results[0]["median_ms"], before["results"][0]["median_ms"]);

    // --fresh measures everything again, and appends.
    let raw_lines_before_fresh = raw_lines(&cache);
    let fresh = tunebox(
        dir.path(),
        &[
            "tune",
            "family.toml",
            "--json",
            "r.json",
            "--fresh",
            "--quiet",
        ],
    );
    check(&fresh);
    assert_eq!(skipped(&text(&fresh.stderr)), None);
    // (The cache's lines: each choice measured in rounds has two, its screening line and its
    // final one; the fresh run appended its own.)
    assert_eq!(raw_lines(&cache), 2 * raw_lines_before_fresh, "appended");
    assert_eq!(cache_lines(&cache), 4);
    // A changed kernel is a different key: measured again.
    let edited = FAMILY.replace("2.0f * x[i]", "2.0f * x[i] + 0.0f");
    std::fs::write(dir.path().join("family.c"), edited).unwrap();
    let changed = tunebox(dir.path(), &["tune", "family.toml", "--json", "r.json"]);
    check(&changed);
    assert_eq!(skipped(&text(&changed.stderr)), None);
}

/// Starts `tunebox tune slow.toml`, waits until `lines` choices are in its cache, and sends
/// `signal`; returns the exit status and the output.
fn interrupt(dir: &Path, signal: &str, lines: usize) -> std::process::Output {
    let child = command(dir, &["tune", "slow.toml", "--json", "r.json"], &[])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let cache = dir.join("slow.tunebox-cache.jsonl");
    let deadline = Instant::now() + Duration::from_secs(60);
    while cache_lines(&cache) < lines {
        assert!(Instant::now() < deadline, "no result was cached");
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = std::process::Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    child.wait_with_output().unwrap()
}

#[test]
fn an_interrupted_run_resumes_without_measuring_again() {
    let dir = tempfile::tempdir().unwrap();
    write_slow(dir.path(), 10);
    let out = interrupt(dir.path(), "-INT", 2);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // The partial results are written: the table, the JSON, the cache.
    let stdout = text(&out.stdout);
    assert!(stdout.contains("interrupted: "), "{stdout}");
    let partial = json(&dir.path().join("r.json"));
    assert_eq!(partial["interrupted"], true);
    let measured = partial["results"].as_array().unwrap().len();
    let not_measured = partial["not_measured"].as_array().unwrap();
    assert_eq!(measured + not_measured.len(), 10, "{partial}");
    assert!(not_measured.iter().all(|n| n["reason"] == "interrupted"));
    let cached = cache_lines(&dir.path().join("slow.tunebox-cache.jsonl"));
    assert!((2..10).contains(&cached), "{cached} cached");
    assert_eq!(
        cached, measured,
        "every finished choice is cached, and only those"
    );

    // Screened before the stop, their rounds not begun: the table says what is left.
    assert!(
        stdout.contains(&format!(
            "interrupted: {} choices not measured, {cached} measured without all their rounds; \
             run the same command again to finish them",
            10 - cached
        )),
        "{stdout}"
    );
    assert_eq!(partial["unfinished"].as_array().map_or(0, Vec::len), cached);

    let again = tunebox(dir.path(), &["tune", "slow.toml", "--json", "r.json"]);
    check(&again);
    let stderr = text(&again.stderr);
    // Their screening windows are taken, not measured again; they get their rounds.
    assert_eq!(skipped(&stderr), None, "{stderr}");
    assert_eq!(resumed(&stderr), Some(cached), "{stderr}");
    assert!(
        stderr.contains(&format!("benchmarking {} choice", 10 - cached)),
        "{stderr}"
    );
    let full = json(&dir.path().join("r.json"));
    assert_eq!(full["interrupted"], false);
    let results = full["results"].as_array().unwrap();
    assert_eq!(results.len(), 10);
    assert!(results.iter().all(|r| r["status"] == "ok"), "{full}");
    // Measured in windows as an uninterrupted run measures them: none in one window only (a
    // choice settles after two windows at the earliest).
    let once = results
        .iter()
        .filter(|r| r["windows"]["medians_ms"].as_array().unwrap().len() == 1)
        .count();
    assert_eq!(once, 0, "{full}");
}

#[test]
fn two_signals_at_once_are_one_interrupt() {
    // `timeout -s INT 3 tunebox …` signals tunebox, then its process group: two SIGINTs at once.
    // They are one interrupt: the run stops cleanly and writes its results. The compiler (a
    // slow wrapper) keeps the run busy after the first, so that the second is handled before
    // the results are written.
    let dir = tempfile::tempdir().unwrap();
    write_slow(dir.path(), 10);
    let cc = dir.path().join("slow-cc");
    std::fs::write(
        &cc,
        "#!/bin/sh\n[ \"$1\" = --version ] && exec cc \"$@\"\ntouch \"$0.started\"\nsleep 1\n\
         exec cc \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&cc, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let started = dir.path().join("slow-cc.started");
    let child = command(
        dir.path(),
        &["tune", "slow.toml", "--json", "r.json"],
        &[("CC", cc.to_str().unwrap())],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !started.exists() {
        assert!(Instant::now() < deadline, "nothing was compiled");
        std::thread::sleep(Duration::from_millis(10));
    }
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    // Pending signals merge into one: give the first time to be delivered.
    std::thread::sleep(Duration::from_millis(50));
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(!stderr.contains("interrupted again"), "{stderr}");
    let stdout = text(&out.stdout);
    assert!(stdout.contains("interrupted: "), "{stdout}");
    let partial = json(&dir.path().join("r.json"));
    assert_eq!(partial["interrupted"], true);
    let not_measured = partial["not_measured"].as_array().unwrap();
    assert!(!not_measured.is_empty(), "{partial}");
    assert_eq!(
        partial["results"].as_array().unwrap().len() + not_measured.len(),
        10,
        "{partial}"
    );
}

#[test]
fn a_killed_run_loses_nothing_finished() {
    let dir = tempfile::tempdir().unwrap();
    write_slow(dir.path(), 6);
    let out = interrupt(dir.path(), "-KILL", 1);
    assert!(!out.status.success());
    let cached = cache_lines(&dir.path().join("slow.tunebox-cache.jsonl"));
    assert!(cached >= 1);
    let again = tunebox(dir.path(), &["tune", "slow.toml", "--json", "r.json"]);
    check(&again);
    // What the killed run cached is taken: as final, or (cut short before its rounds) with
    // its screening window, to be given its rounds.
    let stderr = text(&again.stderr);
    assert_eq!(
        skipped(&stderr).unwrap_or(0) + resumed(&stderr).unwrap_or(0),
        cached,
        "{stderr}"
    );
    assert_eq!(
        json(&dir.path().join("r.json"))["results"]
            .as_array()
            .unwrap()
            .len(),
        6
    );
}

#[test]
fn a_time_budget_stops_new_choices_and_says_how_many() {
    let dir = tempfile::tempdir().unwrap();
    write_slow(dir.path(), 8);
    // Each choice's screening window alone sleeps 20 reps of 4 ms (a quarter of 80): however
    // fast this machine compiles and starts workers, at most four choices start within the
    // 0.3 s (not the compile time nor the reference's, which a fast machine can make small).
    std::fs::write(
        dir.path().join("slow.toml"),
        mode_manifest("slow", "10", 8, "warmup_ms = 1\nrep_ms = 5\nmin_reps = 80"),
    )
    .unwrap();
    let out = tunebox(
        dir.path(),
        &[
            "tune",
            "slow.toml",
            "--json",
            "r.json",
            "--max-time",
            "0.3",
            "--quiet",
        ],
    );
    check(&out);
    let report = json(&dir.path().join("r.json"));
    let not_measured = report["not_measured"].as_array().unwrap();
    assert!(!not_measured.is_empty(), "{report}");
    assert!(not_measured.iter().all(|n| n["reason"] == "max_time"));
    assert_eq!(
        report["results"].as_array().unwrap().len() + not_measured.len(),
        8
    );
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "--max-time reached: {} choices not measured",
            not_measured.len()
        )),
        "{stdout}"
    );
}

#[test]
fn random_samples_are_seeded_and_refinement_reranks_the_best() {
    let dir = tempfile::tempdir().unwrap();
    write_slow(dir.path(), 8);
    let list = |extra: &[&str]| {
        let mut args = vec!["tune", "slow.toml", "--list"];
        args.extend(extra);
        let out = tunebox(dir.path(), &args);
        check(&out);
        text(&out.stdout)
    };
    let sample = list(&["--budget", "3", "--seed", "7"]);
    assert_eq!(sample.lines().count(), 3);
    assert_eq!(
        sample,
        list(&["--strategy", "random", "--budget", "3", "--seed", "7"])
    );
    assert_eq!(list(&["--budget", "100"]).lines().count(), 8);
    let out = tunebox(dir.path(), &["tune", "slow.toml", "--strategy", "random"]);
    assert!(text(&out.stderr).contains("--strategy random needs --budget N"));

    let out = tunebox(
        dir.path(),
        &[
            "tune",
            "slow.toml",
            "--json",
            "r.json",
            "--budget",
            "3",
            "--seed",
            "7",
            "--refine",
            "2",
        ],
    );
    check(&out);
    let report = json(&dir.path().join("r.json"));
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    let refined: Vec<&Value> = results.iter().filter(|r| r["refined"] == true).collect();
    assert_eq!(refined.len(), 2, "{report}");
    // Refined choices rank first, with more reps and their screening median kept.
    assert!(results[0]["refined"] == true && results[1]["refined"] == true);
    for r in &refined {
        assert!(r["screen_median_ms"].as_f64().unwrap() > 0.0);
        assert!(r["reps"].as_u64().unwrap() >= 5);
    }
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("random sample of 3 of 8 choices (seed 7)"),
        "{stdout}"
    );
    assert!(
        stdout.contains("* re-measured with 4x rep_ms (--refine 2)"),
        "{stdout}"
    );
    // Both measurements are cached: a re-run measures nothing.
    let again = tunebox(
        dir.path(),
        &[
            "tune",
            "slow.toml",
            "--json",
            "r.json",
            "--budget",
            "3",
            "--seed",
            "7",
            "--refine",
            "2",
        ],
    );
    check(&again);
    let stderr = text(&again.stderr);
    assert_eq!(skipped(&stderr), Some(3), "{stderr}");
    assert!(!stderr.contains("re-measuring"), "{stderr}");
}

/// Sleeps 20 ms per call; MODE 1 aborts after 30 calls in one worker process, which screening
/// (10 fixed reps) never reaches but refining (40 reps) does.
const REFINE_KERNEL: &str = r#"#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
static int calls;
void refine(const float *x, float *y, int64_t n) {
    usleep(20000);
    if (MODE == 1 && ++calls > 30) abort();
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i];
}
"#;

/// A screening measurement (~18 calls, ~0.4 s) fits in `timeout_s`; a refined one (~48 calls,
/// ~1 s) does not.
fn refine_manifest() -> String {
    mode_manifest(
        "refine",
        "0.8",
        2,
        "warmup_ms = 1\nrep_ms = 100\nmin_reps = 10\nmax_reps = 10",
    )
}

#[test]
fn refinement_gets_a_longer_timeout_and_a_failed_one_keeps_the_screening_result() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("refine.c"), REFINE_KERNEL).unwrap();
    std::fs::write(dir.path().join("refine.toml"), refine_manifest()).unwrap();
    // One screening window of the manifest's fixed 10 reps, then the refinement's 40.
    let args = [
        "tune",
        "refine.toml",
        "--json",
        "r.json",
        "--refine",
        "2",
        "--rounds",
        "0",
    ];
    let out = tunebox(dir.path(), &args);
    check(&out);
    let report = json(&dir.path().join("r.json"));
    let results = report["results"].as_array().unwrap();
    let mode = |m: i64| {
        results
            .iter()
            .find(|r| r["choice"]["MODE"] == m)
            .unwrap_or_else(|| panic!("no MODE={m} in {report}"))
    };
    // Both stay ok and ranked: MODE 0 refined (within 4x the timeout), MODE 1 with its
    // screening result after its refinement crashed.
    assert_eq!(outcomes(&report).len(), 2);
    for r in results {
        assert_eq!(r["status"], "ok", "{report}");
        assert!(r["rank"].as_u64().is_some(), "{report}");
    }
    assert_eq!(mode(0)["refined"], true, "{report}");
    assert_eq!(mode(0)["reps"], 40, "{report}");
    assert_eq!(mode(0)["rank"], 1, "{report}");
    assert_eq!(mode(1)["refined"], false, "{report}");
    assert_eq!(mode(1)["reps"], 10, "{report}");
    assert_eq!(mode(1)["rank"], 2, "{report}");
    let note = "refine of MODE=1 failed (crashed: ";
    let notes = report["notes"].to_string();
    assert!(
        notes.contains(note) && notes.contains("kept its screening result"),
        "{report}"
    );
    let stdout = text(&out.stdout);
    assert!(stdout.contains(&format!("note: {note}")), "{stdout}");
    assert!(
        stdout.contains("* re-measured with 4x rep_ms (--refine 2)"),
        "{stdout}"
    );

    // A re-run takes everything from the cache, the failed refinement included, and says so.
    let again = tunebox(dir.path(), &args);
    check(&again);
    let stderr = text(&again.stderr);
    assert_eq!(skipped(&stderr), Some(2), "{stderr}");
    assert!(!stderr.contains("re-measuring"), "{stderr}");
    let rerun = json(&dir.path().join("r.json"));
    assert_eq!(outcomes(&rerun), outcomes(&report));
    assert!(
        rerun["notes"]
            .to_string()
            .contains("refine of MODE=1 failed (results cache) (crashed: "),
        "{rerun}"
    );
    // `tunebox report` on the cache keeps the screening result too.
    let cached = tunebox(dir.path(), &["report", "refine.tunebox-cache.jsonl"]);
    check(&cached);
    let table = text(&cached.stdout);
    assert!(!table.contains("crashed"), "{table}");
}
