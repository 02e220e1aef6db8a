//! `--max-process-uses 0` (one worker for every choice): what a choice leaves running or open
//! in its worker is charged to it, never to the choices after it, and named in tunebox's own
//! warning style.

use std::path::Path;

use serde_json::Value;

use crate::util::{json, text, tunebox};

/// `CHEAT` 0, 4 and 5 are innocent; 1 leaves a child process running, 2 a spinning thread,
/// 3 a descriptor per call (of a file, not a device: a backend's first request may open
/// devices of its own).
const KERNEL: &str = r#"#include <stdint.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>
static void *spin(void *arg) { for (;;) {} return arg; }
void k(const float *x, float *y, int64_t n) {
#if CHEAT == 1
    static int forked;
    if (!forked) { forked = 1; if (fork() == 0) { sleep(60); _exit(0); } }
#elif CHEAT == 2
    static int started;
    if (!started) { pthread_t t; started = 1; pthread_create(&t, 0, spin, 0); }
#elif CHEAT == 3
    open("/proc/self/stat", O_RDONLY);
#endif
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i];
}
"#;

const MANIFEST: &str = r#"timeout_s = 20
[kernel]
source = "k.c"
entry = "k"
flags = ["-O1", "-pthread"]
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
CHEAT = [0, 1, 2, 3, 4, 5]
[timing]
warmup_ms = 1
rep_ms = 2
flush_cache = false
[verify]
reference = { choice = { CHEAT = 0 } }
"#;

fn statuses(report: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                format!("CHEAT={}", r["choice"]["CHEAT"]),
                r["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

fn write(dir: &Path) {
    std::fs::write(dir.join("k.c"), KERNEL).unwrap();
    std::fs::write(dir.join("m.toml"), MANIFEST).unwrap();
}

#[test]
fn what_a_choice_leaves_in_a_reused_worker_is_its_own() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path());
    let out = tunebox(
        dir.path(),
        &[
            "tune",
            "m.toml",
            "--max-process-uses",
            "0",
            "--no-cache",
            "--json",
            "r.json",
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let report = json(&dir.path().join("r.json"));
    // The culprits are caught, each by its own check; every innocent choice after them is ok.
    assert_eq!(
        statuses(&report),
        [
            ("CHEAT=0", "ok"),
            ("CHEAT=1", "suspicious"),
            ("CHEAT=2", "suspicious"),
            ("CHEAT=3", "ok"),
            ("CHEAT=4", "ok"),
            ("CHEAT=5", "ok"),
        ]
        .map(|(c, s)| (c.to_owned(), s.to_owned())),
        "{stdout}\n{stderr}"
    );
    let error = |cheat: i64| {
        report["results"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["choice"]["CHEAT"] == cheat)
            .and_then(|r| r["error"].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    assert!(error(1).contains("children_after_call"), "{}", error(1));
    assert!(
        error(2).contains("threads_after_call") || error(2).contains("cpu_after_call"),
        "{}",
        error(2)
    );
    // The descriptors' culprit is named once, in tunebox's warning style (no logger's line),
    // and the report's notes name it too.
    assert_eq!(
        stderr.matches("warning: CHEAT=3 left state behind").count(),
        1,
        "{stderr}"
    );
    assert!(stderr.contains("descriptors: left "), "{stderr}");
    assert!(!stderr.contains(" WARN "), "{stderr}");
    assert!(
        stdout.contains("note: 1 choice left state behind in a reused worker, which was replaced after each: CHEAT=3"),
        "{stdout}"
    );
}
