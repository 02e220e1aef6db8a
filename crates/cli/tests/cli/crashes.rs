//! Crashes and the results cache: a crash of the candidate's own (a fault) is its result for
//! good, one by a signal another process sends (the out-of-memory killer, `kill -9` from a
//! shell) says nothing sure about it and is measured again by the next run.

use crate::util::{check, json, mode_manifest, tunebox};

/// MODE 1 dies of SIGKILL, as from the out-of-memory killer or a shell's `kill -9`; MODE 2 of
/// a fault of its own (SIGSEGV).
const KILLED: &str = r#"#include <signal.h>
#include <stdint.h>
#include <unistd.h>
void killed(const float *x, float *y, int64_t n) {
    if (MODE == 1) kill(getpid(), SIGKILL);
    if (MODE == 2) *(volatile float *)16 = 1.0f;
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + 1.0f;
}
"#;

#[test]
fn a_worker_killed_by_another_s_signal_is_measured_again_by_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("killed.c"), KILLED).unwrap();
    let manifest = mode_manifest("killed", "10", 3, "warmup_ms = 1\nrep_ms = 5");
    std::fs::write(dir.path().join("m.toml"), manifest).unwrap();
    let run = || {
        let out = tunebox(dir.path(), &["tune", "m.toml", "-q", "--json", "r.json"]);
        check(&out);
        let report = json(&dir.path().join("r.json"));
        let result = |mode: i64| {
            report["results"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["choice"]["MODE"] == mode)
                .unwrap()
                .clone()
        };
        (result(1), result(2))
    };
    let (killed, faulted) = run();
    assert_eq!(killed["status"], "crashed", "{killed}");
    let error = killed["error"].as_str().unwrap();
    assert!(
        error.contains("SIGKILL") && error.contains("out-of-memory killer"),
        "{error}"
    );
    assert_eq!(faulted["status"], "crashed", "{faulted}");
    let (killed, faulted) = run();
    assert_eq!(killed["cached"], false, "measured again: {killed}");
    assert_eq!(killed["status"], "crashed", "{killed}");
    assert_eq!(
        faulted["cached"], true,
        "a fault of its own is kept: {faulted}"
    );
}

/// MODE 1 stops itself (SIGSTOP), MODE 2 as a terminal's Ctrl-Z would (SIGTSTP, sent to
/// itself alone).
const STOPPED: &str = r#"#include <signal.h>
#include <stdint.h>
#include <unistd.h>
void stopped(const float *x, float *y, int64_t n) {
    if (MODE == 1) raise(SIGSTOP);
    if (MODE == 2) kill(getpid(), SIGTSTP);
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + 1.0f;
}
"#;

#[test]
fn a_worker_that_stops_itself_is_killed_and_named_long_before_its_timeout() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("stopped.c"), STOPPED).unwrap();
    let manifest = mode_manifest("stopped", "120", 3, "warmup_ms = 1\nrep_ms = 5");
    std::fs::write(dir.path().join("m.toml"), manifest).unwrap();
    let started = std::time::Instant::now();
    let out = tunebox(dir.path(), &["tune", "m.toml", "-q", "--json", "r.json"]);
    check(&out);
    let elapsed = started.elapsed();
    let report = json(&dir.path().join("r.json"));
    let results = report["results"].as_array().unwrap();
    for (mode, signal) in [(1, "SIGSTOP"), (2, "SIGTSTP")] {
        let result = results
            .iter()
            .find(|r| r["choice"]["MODE"] == mode)
            .unwrap();
        assert_eq!(result["status"], "crashed", "{result}");
        let error = result["error"].as_str().unwrap();
        assert!(error.contains(&format!("stopped by {signal}")), "{error}");
    }
    let honest = results.iter().find(|r| r["choice"]["MODE"] == 0).unwrap();
    assert_eq!(honest["status"], "ok", "{honest}");
    // Each stop costs about a second, not the 120 s timeout (generous: a busy machine).
    assert!(elapsed.as_secs() < 60, "took {elapsed:?}");
    // A stop may have come from outside (a person's kill -STOP): measured again next run.
    let out = tunebox(dir.path(), &["tune", "m.toml", "-q", "--json", "r.json"]);
    check(&out);
    let report = json(&dir.path().join("r.json"));
    for result in report["results"].as_array().unwrap() {
        if result["choice"]["MODE"] != 0 {
            assert_eq!(result["cached"], false, "{result}");
        }
    }
}
