//! Interference seen and never cached as final (issue 23): a run whose windows another process
//! disturbs says so, ranks by its quiet windows or by a statistic disturbed windows cannot
//! move, and caches nothing as final that a quiet run should not replace.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::util::{check, json, mode_manifest, text, tunebox_env};

/// `WORK` rounds of arithmetic the compiler cannot fold: the time grows with `WORK` (~0.3 ms
/// per unit), so that a window lasts a few clock ticks and busy loops beside it show in them.
const KERNEL: &str = r#"#include <stdint.h>
void work(float *y, int64_t n) {
    float acc = y[0];
    for (int64_t r = 0; r < WORK * 200000; r++)
        acc = acc * 0.999f + (float)(r & 7);
    for (int64_t i = 0; i < n; i++) y[i] = acc;
}
"#;

const MANIFEST: &str = r#"
name = "work"
timeout_s = 30
[kernel]
source = "work.c"
entry = "work"
flags = ["-O1"]
[[tensors]]
name = "y"
dtype = "f32"
shape = [16]
init = "zeros"
output = true
[[scalars]]
name = "n"
value = 16
[params]
WORK = [4, 1]
[timing]
warmup_ms = 5
rep_ms = 100
flush_cache = false
"#;

fn write(dir: &Path) {
    std::fs::write(dir.join("work.c"), KERNEL).unwrap();
    std::fs::write(dir.join("work.toml"), MANIFEST).unwrap();
}

/// Serves a `/proc/stat` at `path` whose two CPUs are both always busy (as with a busy loop
/// beside the worker), until the returned flag is raised. `path` is a named pipe, and every
/// read of it gets a snapshot 50 ticks later than the one before: any two snapshots around a
/// window differ, however rarely the writer gets a CPU on a loaded machine (a file rewritten
/// every millisecond could be read twice unchanged, and its window then seemed quiet).
fn busy_proc_stat(path: &Path) -> (Arc<AtomicBool>, std::thread::JoinHandle<()>) {
    let made = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(made.success(), "mkfifo {}", path.display());
    let done = Arc::new(AtomicBool::new(false));
    let (flag, path) = (Arc::clone(&done), path.to_owned());
    let writer = std::thread::spawn(move || {
        let mut ticks = 1000u64;
        while !flag.load(Ordering::SeqCst) {
            // Opened without blocking (ENXIO while no reader has it open), so that the flag is
            // seen within a millisecond whatever the readers do: a writer blocked in `open`
            // could only be released by one more read, and a read that came after the writer
            // had stopped would wait forever.
            let opened = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&path);
            let mut pipe = match opened {
                Ok(pipe) => pipe,
                Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
                // The test's folder gone: stop.
                Err(_) => return,
            };
            ticks += 50;
            let text = format!(
                "cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 {ticks} 0 0 100 0 0 0 0 0 0\n\
                 cpu1 {ticks} 0 0 100 0 0 0 0 0 0\n"
            );
            // A snapshot is far smaller than a pipe's buffer: written at once. A reader that
            // went away (EPIPE) is no matter.
            let _ = std::io::Write::write_all(&mut pipe, text.as_bytes());
            drop(pipe);
            // Time for the reader to see the end of this snapshot before the pipe is opened
            // for the next (else it reads both as one).
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    (done, writer)
}

/// Stops [`busy_proc_stat`]'s writer (within a millisecond: it never blocks).
fn stop_proc_stat(done: &AtomicBool, writer: std::thread::JoinHandle<()>) {
    done.store(true, Ordering::SeqCst);
    writer.join().unwrap();
}

fn skipped(stderr: &str) -> Option<usize> {
    let (_, rest) = stderr.split_once("skipped ")?;
    rest.split_whitespace().next()?.parse().ok()
}

/// A run under interference warns, records it in the JSON, and caches nothing as final: the
/// next run measures everything again; a quiet run's results are then final.
#[test]
fn luck_is_never_cached() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path());
    let stat = dir.path().join("stat");
    let (done, writer) = busy_proc_stat(&stat);
    let stat_path = stat.to_str().unwrap();
    let args = ["tune", "work.toml", "--json", "r.json"];
    let busy = tunebox_env(dir.path(), &args, &[("TUNEBOX_PROC_STAT", stat_path)]);
    check(&busy);
    let stderr = text(&busy.stderr);
    assert!(stderr.contains("warning: the machine was busy"), "{stderr}");
    let report = json(&dir.path().join("r.json"));
    assert_eq!(report["conditions"]["busy"], true, "{report}");
    assert!(report["conditions"]["disturbed"].as_u64().unwrap() > 0);
    // Busy all along: no round is measured again (it would stay busy).
    assert_eq!(report["conditions"]["remeasured"], 0, "{report}");
    for r in report["results"].as_array().unwrap() {
        assert!(
            r["windows"]["disturbed"]
                .as_array()
                .unwrap()
                .iter()
                .all(|d| d == true),
            "{r}"
        );
    }
    assert!(text(&busy.stdout).contains("the machine was busy"));
    // Still busy: nothing was final, everything is measured again.
    let again = tunebox_env(dir.path(), &args, &[("TUNEBOX_PROC_STAT", stat_path)]);
    check(&again);
    assert_eq!(
        skipped(&text(&again.stderr)),
        None,
        "{}",
        text(&again.stderr)
    );
    stop_proc_stat(&done, writer);
    // Quiet (no interference seen): measured again, and now final.
    let quiet = tunebox_env(dir.path(), &args, &[]);
    check(&quiet);
    assert_eq!(skipped(&text(&quiet.stderr)), None);
    let cached = tunebox_env(dir.path(), &args, &[]);
    check(&cached);
    assert_eq!(skipped(&text(&cached.stderr)), Some(2));
}

/// Busy loops, killed and reaped on drop.
struct Hogs(Vec<Child>);

impl Drop for Hogs {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Busy loops started beside the kernel on every CPU (twice as many as CPUs): the run sees
/// them in /proc/stat, warns, and still ranks the choice with a quarter of the work first.
#[test]
fn a_kernel_disturbed_by_busy_loops_still_ranks_right_and_is_flagged() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path());
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let hogs = Hogs(
        (0..2 * cpus)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .stdin(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect(),
    );
    let out = tunebox_env(
        dir.path(),
        &["tune", "work.toml", "--json", "r.json", "--no-cache"],
        &[("TUNEBOX_PROC_STAT", "/proc/stat")],
    );
    drop(hogs);
    check(&out);
    let report = json(&dir.path().join("r.json"));
    let results = report["results"].as_array().unwrap();
    let order: Vec<i64> = results
        .iter()
        .map(|r| r["choice"]["WORK"].as_i64().unwrap())
        .collect();
    assert_eq!(order, [1, 4], "{report}");
    assert!(
        report["conditions"]["disturbed"].as_u64().unwrap() > 0,
        "{report}"
    );
    assert_eq!(report["conditions"]["busy"], true, "{report}");
    assert!(
        text(&out.stderr).contains("warning: the machine was busy"),
        "{}",
        text(&out.stderr)
    );
}

/// A run asks its compiler for its version once, in the parent, not once per window: every
/// window's fresh worker gets the identity with its request. The windows say when they ended,
/// in the order they ran.
#[test]
fn the_compiler_is_probed_once_per_run_not_per_window() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    write(dir.path());
    let log = dir.path().join("cc.log");
    let cc = dir.path().join("logging-cc");
    std::fs::write(
        &cc,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexec cc \"$@\"\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&cc, std::fs::Permissions::from_mode(0o755)).unwrap();
    let args = ["tune", "work.toml", "--no-cache", "--json", "r.json"];
    check(&tunebox_env(
        dir.path(),
        &args,
        &[("CC", cc.to_str().unwrap())],
    ));
    let report = json(&dir.path().join("r.json"));
    let windows: Vec<&serde_json::Value> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["windows"])
        .collect();
    let ended: Vec<f64> = windows
        .iter()
        .flat_map(|w| w["ended_s"].as_array().unwrap())
        .map(|t| t.as_f64().unwrap())
        .collect();
    assert!(ended.len() >= 2 * windows.len(), "{windows:?}");
    for w in &windows {
        let times: Vec<f64> = w["ended_s"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_f64().unwrap())
            .collect();
        assert_eq!(times.len(), w["medians_ms"].as_array().unwrap().len());
        assert!(times.windows(2).all(|p| p[0] < p[1]), "{times:?}");
    }
    let commands = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        commands.matches("--version").count(),
        1,
        "{} windows; the compiler ran:\n{commands}",
        ended.len()
    );
}

/// `WORK` rounds of arithmetic, three times as many in every other worker process that runs
/// the choice (a counter file per choice, `COUNTER-WORK`, that the test owns): each choice's
/// windows alternate fast, slow, fast, slow, as on a VM whose vCPU switches between a fast
/// and a slow mode, with nothing in `/proc/stat` to show it.
const DRIFTING: &str = r#"#include <stdint.h>
#include <stdio.h>
static int slow = -1;
void work(float *y, int64_t n) {
    if (slow < 0) {
        char path[512];
        int k = 0;
        snprintf(path, sizeof path, "%s-%d", COUNTER, (int)WORK);
        FILE *f = fopen(path, "r");
        if (f) {
            if (fscanf(f, "%d", &k) != 1) k = 0;
            fclose(f);
        }
        f = fopen(path, "w");
        if (f) {
            fprintf(f, "%d\n", k + 1);
            fclose(f);
        }
        slow = k % 2;
    }
    float acc = y[0];
    for (int64_t r = 0; r < WORK * 20000 * (slow ? 3 : 1); r++)
        acc = acc * 0.999f + (float)(r & 7);
    for (int64_t i = 0; i < n; i++) y[i] = acc;
}
"#;

/// A run whose choices' own windows disagree (every other worker three times slower), on a
/// machine whose `/proc/stat` shows nothing else running, says its ranking is less sure: a
/// warning, `drift` in the JSON, the table's windows line and the `best:` line.
#[test]
fn a_machine_whose_speed_drifts_between_windows_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    std::fs::write(dir.path().join("work.c"), DRIFTING).unwrap();
    let manifest = MANIFEST
        .replace(
            "flags = [\"-O1\"]",
            &format!("flags = [\"-O1\", '-DCOUNTER=\"{}\"']", counter.display()),
        )
        .replace("WORK = [4, 1]", "WORK = [4, 2, 1]");
    std::fs::write(dir.path().join("work.toml"), manifest).unwrap();
    // A quiet /proc/stat: no window is disturbed, so none is measured again.
    let stat = dir.path().join("stat");
    std::fs::write(
        &stat,
        "cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 100 0 0 100 0 0 0 0 0 0\ncpu1 100 0 0 100 0 0 0 0 0 0\n",
    )
    .unwrap();
    // Every window in a fresh worker: the kernel picks its speed once per process.
    let args = [
        "tune",
        "work.toml",
        "--no-cache",
        "--workers",
        "1",
        "--fresh-windows",
        "--json",
        "r.json",
    ];
    let out = tunebox_env(
        dir.path(),
        &args,
        &[("TUNEBOX_PROC_STAT", stat.to_str().unwrap())],
    );
    check(&out);
    let report = json(&dir.path().join("r.json"));
    let conditions = &report["conditions"];
    assert_eq!(conditions["disturbed"], 0, "{conditions}");
    let drift = conditions["drift"].as_f64().unwrap();
    assert!(drift > 0.5, "every other window is 3x slower: {conditions}");
    let stderr = text(&out.stderr);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("so less sure than it looks"), "{stdout}");
    // The parent's speed probe can still call a loaded machine busy (the CPUs this test
    // shares): that warning then stands for both.
    if conditions["busy"] == false {
        assert!(
            stderr.contains("warning: the machine's speed drifted while measuring"),
            "{stderr}"
        );
        assert!(stdout.contains("the machine's speed drifted"), "{stdout}");
    }
    // Fast, slow, fast, …: the rounds go on until two windows agree, three at least.
    let windows = std::fs::read_to_string(dir.path().join("counter-1")).unwrap();
    assert!(windows.trim().parse::<u32>().unwrap() >= 3, "{windows}");
}

/// Honest in the first worker process that runs it (a counter file the test owns, at
/// `COUNTER`), then, in every later one, back at once without computing anything: screening
/// verifies it, the rounds' windows (which return no outputs) would see only its speed.
const LATER_CHEAT: &str = r#"#include <stdint.h>
#include <stdio.h>
static int later = -1;
void work(const float *x, float *y, int64_t n) {
#if MODE == 1
    if (later < 0) {
        int k = 0;
        FILE *f = fopen(COUNTER, "r+");
        if (f) {
            if (fscanf(f, "%d", &k) != 1) k = 0;
            rewind(f);
            fprintf(f, "%d\n", k + 1);
            fclose(f);
        }
        later = k > 0;
    }
    if (later) return;
#endif
    for (int64_t i = 0; i < n; i++) {
        float acc = x[i];
        for (int r = 0; r < 20000; r++) acc = acc * 0.999f + 0.001f;
        y[i] = acc;
    }
}
"#;

/// A choice that behaves while screened and skips its work in the rounds' windows is caught
/// there: a window under half its first one is measured again with its outputs checked, and
/// the choice's result is `wrong`, saying in which round; the honest choice is the pick.
#[test]
fn a_choice_that_cheats_only_after_screening_is_caught_in_its_round() {
    let dir = tempfile::tempdir().unwrap();
    let counter = dir.path().join("counter");
    std::fs::write(&counter, "0\n").unwrap();
    std::fs::write(dir.path().join("work.c"), LATER_CHEAT).unwrap();
    let manifest = mode_manifest("work", "30", 2, "warmup_ms = 2\nrep_ms = 12").replace(
        "flags = [\"-O1\"]",
        &format!("flags = [\"-O1\", '-DCOUNTER=\"{}\"']", counter.display()),
    );
    std::fs::write(dir.path().join("later.toml"), manifest).unwrap();
    let args = [
        "tune",
        "later.toml",
        "--no-cache",
        "--workers",
        "1",
        "--json",
        "r.json",
    ];
    let out = tunebox_env(dir.path(), &args, &[]);
    check(&out);
    let report = json(&dir.path().join("r.json"));
    let results = report["results"].as_array().unwrap();
    let by_mode = |mode: i64| {
        results
            .iter()
            .find(|r| r["choice"]["MODE"] == mode)
            .unwrap()
    };
    let cheat = by_mode(1);
    assert_eq!(cheat["status"], "wrong", "{cheat}");
    let error = cheat["error"].as_str().unwrap();
    assert!(error.contains("in round"), "{error}");
    assert!(
        error.contains("measured again with its outputs checked"),
        "{error}"
    );
    assert_eq!(by_mode(0)["status"], "ok");
    assert_eq!(report["best"]["choice"]["MODE"], 0, "{}", report["best"]);
    // Said as a note; the progress counted the choice once, at screening (it read `[3/2]`).
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("MODE=1 failed in round") && stderr.contains("(wrong)"),
        "{stderr}"
    );
    assert!(!stderr.contains("[3/2]"), "{stderr}");
}

/// `WORK` rounds of arithmetic, and the pid of every process that calls it written once to
/// the file `PIDS` (each choice's library records its own first call in a process).
const PIDS_KERNEL: &str = r#"#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
static int recorded;
void work(float *y, int64_t n) {
    if (!recorded) {
        recorded = 1;
        FILE *f = fopen(PIDS, "a");
        if (f) {
            fprintf(f, "%d\n", (int)getpid());
            fclose(f);
        }
    }
    float acc = y[0];
    for (int64_t r = 0; r < WORK * 200000; r++)
        acc = acc * 0.999f + (float)(r & 7);
    for (int64_t i = 0; i < n; i++) y[i] = acc;
}
"#;

/// Runs the two-choice job with `extra` arguments, its kernel recording the pid of every
/// worker process that called it: the report's windows, and the distinct pids.
fn windows_and_workers(extra: &[&str]) -> (u64, usize) {
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    std::fs::write(dir.path().join("work.c"), PIDS_KERNEL).unwrap();
    let manifest = MANIFEST.replace(
        "flags = [\"-O1\"]",
        &format!("flags = [\"-O1\", '-DPIDS=\"{}\"']", pids.display()),
    );
    std::fs::write(dir.path().join("work.toml"), manifest).unwrap();
    let mut args = vec!["tune", "work.toml", "--no-cache", "--json", "r.json"];
    args.extend(extra);
    let out = tunebox_env(dir.path(), &args, &[]);
    check(&out);
    let report = json(&dir.path().join("r.json"));
    let windows = report["conditions"]["windows"].as_u64().unwrap();
    let recorded = std::fs::read_to_string(&pids).unwrap();
    let distinct: std::collections::BTreeSet<&str> = recorded.lines().collect();
    (windows, distinct.len())
}

/// A choice's first window, where it is verified, runs in a fresh worker; its later windows
/// (the rounds', the race's) in workers reused from window to window: two choices, each
/// screened in a process of its own, then every later window in the one reused worker.
/// `--fresh-windows` gives every window a process of its own, as before issue 33.
#[test]
fn later_windows_reuse_their_workers_and_first_windows_do_not() {
    let (windows, workers) = windows_and_workers(&[]);
    assert!(windows > 2, "two choices, with rounds: {windows} windows");
    assert_eq!(
        workers, 3,
        "2 screening workers and 1 reused one, for {windows} windows"
    );
    let (windows, workers) = windows_and_workers(&["--fresh-windows"]);
    assert!(windows > 2, "{windows} windows");
    assert_eq!(workers as u64, windows, "a fresh worker for every window");
}
