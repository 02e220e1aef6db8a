//! Compile deadlines: a compiler that hangs is killed at `compile_timeout_s` and its choice
//! reported `timeout`; Ctrl-C during a hanging compile stops the run at once, leaving no
//! compiler behind.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::util::{check, command, json, mode_manifest, text, tunebox};

/// `y = 2 x` for every MODE (the compiler decides what happens).
const DOUBLE: &str = r#"#include <stdint.h>
void twice(const float *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i];
}
"#;

/// A manifest over MODE = 0, 1, 2 (MODE = 0 the reference), with `top` lines at its top.
fn manifest(top: &str) -> String {
    format!(
        "{top}\n{}",
        mode_manifest("twice", "30", 3, "warmup_ms = 1\nrep_ms = 2")
    )
}

/// Writes the executable script `dir/name`: `cc` for `--version`, else `hang` (shell code) when
/// the arguments match the `case` pattern `when`, else `cc`. A hanging compile appends its pid
/// to `cc.pids` and that of a background `sleep` it starts to `child.pids`, prints a line and
/// sleeps. Returns its path once it can be executed.
fn hanging_compiler(dir: &Path, name: &str, when: &str) -> String {
    let script = dir.join(name);
    let d = dir.display();
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n\
             [ \"$1\" = --ready ] && exit 0\n\
             [ \"$1\" = --version ] && exec cc \"$@\"\n\
             case \" $* \" in\n\
             {when})\n\
             echo 'instantiating templates, please wait' >&2\n\
             echo $$ >> '{d}/cc.pids'\n\
             sleep 300 &\n\
             echo $! >> '{d}/child.pids'\n\
             sleep 300\n\
             exit 1;;\n\
             esac\n\
             exec cc \"$@\"\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // Another test's fork may briefly hold the new script open for writing (ETXTBSY).
    for _ in 0..500 {
        match std::process::Command::new(&script).arg("--ready").status() {
            Err(e) if e.raw_os_error() == Some(26) => std::thread::sleep(Duration::from_millis(10)),
            other => {
                assert!(other.unwrap().success());
                break;
            }
        }
    }
    script.to_string_lossy().into_owned()
}

/// The pids listed one a line in `path` (none if it does not exist).
fn pids(path: &Path) -> Vec<u32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Whether `pid` is a live process (not gone, not a zombie waiting for a reaper).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// Asserts that none of the compilers (and the `sleep`s they started) listed in `dir` is still
/// running, allowing a few seconds for SIGKILL to land.
fn assert_no_compiler_left(dir: &Path) {
    let all: Vec<u32> = [pids(&dir.join("cc.pids")), pids(&dir.join("child.pids"))].concat();
    assert!(!all.is_empty(), "no compiler hung");
    let deadline = Instant::now() + Duration::from_secs(10);
    while all.iter().any(|&p| alive(p)) {
        assert!(
            Instant::now() < deadline,
            "left behind: {:?}",
            all.iter().filter(|&&p| alive(p)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_hanging_compile_is_a_timeout_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("twice.c"), DOUBLE).unwrap();
    // MODE = 1 hangs; the compiler is named by the manifest. 3 s: under busy loops the
    // script's first line came after 1 s once, and the error quoted no output.
    let cc = hanging_compiler(dir.path(), "hang-cc", "*' -DMODE=1 '*");
    let text_of = manifest("compile_timeout_s = 3").replace(
        "flags = [\"-O1\"]",
        &format!("flags = [\"-O1\"]\ncompiler = \"{cc}\""),
    );
    std::fs::write(dir.path().join("m.toml"), text_of).unwrap();
    let start = Instant::now();
    let out = tunebox(dir.path(), &["tune", "m.toml", "--json", "r.json"]);
    let took = start.elapsed();
    check(&out);
    assert!(took < Duration::from_secs(60), "{took:?}");
    let report = json(&dir.path().join("r.json"));
    let results = report["results"].as_array().unwrap();
    let status = |mode: i64| {
        results
            .iter()
            .find(|r| r["choice"]["MODE"] == mode)
            .unwrap_or_else(|| panic!("no MODE {mode} in {report}"))
    };
    assert_eq!(status(0)["status"], "ok", "{report}");
    assert_eq!(status(2)["status"], "ok", "{report}");
    let hung = status(1);
    assert_eq!(hung["status"], "timeout", "{report}");
    let error = hung["error"].as_str().unwrap();
    assert!(
        error.starts_with(
            "compile timed out after 3 s (compile_timeout_s)\nthe compiler was killed (raise \
             compile_timeout_s if it is just slow): "
        ) && error.contains("hang-cc")
            && error.ends_with("the compiler's last output:\ninstantiating templates, please wait"),
        "{error}"
    );
    // The table says what happened, on the choice's line.
    let stdout = text(&out.stdout);
    assert!(
        stdout
            .lines()
            .any(|l| l.contains("timeout  compile timed out after 3 s (compile_timeout_s)")),
        "{stdout}"
    );
    assert_no_compiler_left(dir.path());

    // A compile timeout is not cached: the next run compiles MODE = 1 again.
    let cache = std::fs::read_to_string(dir.path().join("m.tunebox-cache.jsonl")).unwrap();
    // Two choices cached (one line after screening, one with all the rounds' windows).
    let keys: std::collections::HashSet<&str> = cache
        .lines()
        .filter_map(|l| l.split_once("\"key\":\"").map(|(_, k)| &k[..32]))
        .collect();
    assert_eq!(keys.len(), 2, "{cache}");
    // One compile of MODE = 1 a run, or two where a background compile, starved on a busy
    // machine before the script went to sleep, was handed to the foreground (docs/performance.md).
    let first_run = pids(&dir.path().join("cc.pids")).len();
    let again = tunebox(dir.path(), &["tune", "m.toml", "--json", "r.json"]);
    check(&again);
    let stderr = text(&again.stderr);
    assert!(
        stderr.contains("skipped 2 choices already measured"),
        "{stderr}"
    );
    let both_runs = pids(&dir.path().join("cc.pids")).len();
    assert!(
        both_runs > first_run,
        "the second run did not compile MODE = 1 again ({first_run} compiles, then {both_runs})"
    );
    let report = json(&dir.path().join("r.json"));
    assert!(
        report["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["choice"]["MODE"] == 1 && r["status"] == "timeout" && r["cached"] == false),
        "{report}"
    );
    assert_no_compiler_left(dir.path());
}

#[test]
fn a_hanging_reference_compile_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("twice.c"), DOUBLE).unwrap();
    std::fs::write(dir.path().join("m.toml"), manifest("compile_timeout_s = 1")).unwrap();
    let cc = hanging_compiler(dir.path(), "hang-ref-cc", "*' -DMODE=0 '*");
    let out = crate::util::tunebox_env(dir.path(), &["tune", "m.toml"], &[("CC", &cc)]);
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "the reference MODE=0 does not compile: compile timed out after 1 s \
             (compile_timeout_s)"
        ),
        "{stderr}"
    );
    assert_no_compiler_left(dir.path());
}

#[test]
fn ctrl_c_during_a_hanging_compile_stops_at_once_and_leaves_no_compiler() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("twice.c"), DOUBLE).unwrap();
    // Every compile hangs (the reference's first); the default compile timeout is far away.
    std::fs::write(dir.path().join("m.toml"), manifest("")).unwrap();
    let cc = hanging_compiler(dir.path(), "hang-all-cc", "*");
    let mut child = command(
        dir.path(),
        &["tune", "m.toml", "--json", "r.json"],
        &[("CC", &cc)],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while pids(&dir.path().join("child.pids")).is_empty() {
        assert!(Instant::now() < deadline, "nothing was compiled");
        std::thread::sleep(Duration::from_millis(10));
    }
    let signalled = Instant::now();
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    // Bounded wait: without compile deadlines tunebox would wait for the compiler for minutes.
    let within = Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if signalled.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tunebox was still running {within:?} after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = signalled.elapsed();
    eprintln!("Ctrl-C during a hanging compile: tunebox exited {took:?} after SIGINT");
    let out = child.wait_with_output().unwrap();
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert!(!stderr.contains("does not compile"), "{stderr}");
    assert_no_compiler_left(dir.path());
    let report = json(&dir.path().join("r.json"));
    assert_eq!(report["interrupted"], true);
    assert!(report["results"].as_array().unwrap().is_empty(), "{report}");
    let not_measured = report["not_measured"].as_array().unwrap();
    assert_eq!(not_measured.len(), 3, "{report}");
    assert!(not_measured.iter().all(|n| n["reason"] == "interrupted"));
}

/// A compiler that hangs even on `--version` (a wrapper that only sleeps) costs one
/// `compile_timeout_s`: the run ends with every choice a `timeout` (and `doctor` says the
/// compiler does not answer), instead of hanging where the cache key asks for its version.
#[test]
fn a_compiler_that_hangs_on_version_costs_one_deadline() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("twice.c"), DOUBLE).unwrap();
    let cc = dir.path().join("sleepy-cc");
    std::fs::write(&cc, "#!/bin/sh\nexec sleep 300\n").unwrap();
    std::fs::set_permissions(&cc, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let text_of = manifest("compile_timeout_s = 1").replace(
        "flags = [\"-O1\"]",
        &format!("flags = [\"-O1\"]\ncompiler = \"{}\"", cc.display()),
    );
    // Verification against files would need no compile; against a choice, the reference's
    // compile times out first and stops the run with that error.
    std::fs::write(dir.path().join("m.toml"), text_of).unwrap();
    let start = Instant::now();
    let out = tunebox(dir.path(), &["tune", "m.toml", "--no-cache"]);
    let took = start.elapsed();
    assert!(!out.status.success(), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("does not compile: compile timed out after 1 s"),
        "{stderr}"
    );
    // The version probe and the compile share the memoized deadline: well under a minute.
    assert!(took < Duration::from_secs(30), "{took:?}");
}
