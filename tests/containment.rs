//! Nothing a candidate starts outlives its run (issue 34), with or without the sandbox, and
//! with or without cgroups: the zoo's CHEAT=24 (fork; the child calls `setsid()` and forks
//! again; the grandchild sleeps 30 s) and CHEAT=25 (a daemon that forks itself away every
//! 2 ms), each run many times as a whole tuning run, after which no process of theirs may be
//! alive; and a reused worker whose candidate left a daemon has it killed at once, so that the
//! requests after it are not blamed for it. With cgroups the worker's cgroup is killed whole (`cgroup.kill`, the freezer, or
//! killing until empty); without (`TUNEBOX_CGROUPS=off`, which
//! `no_process_outlives_its_run_without_cgroups` runs this test binary again with), the worker
//! is a child subreaper and its process tree is killed.

use std::process::Command;

use tunebox_pool::Status;
use tunebox_process::{Containment, ProcessError, Sandbox, SandboxSupport, TuningProcess};
use tunebox_protocol::{BenchmarkRequest, CKernel};
use tunebox_tune::{CacheMode, Stop, TuneOptions};

use crate::util::{LONG, cache_root, cheat_of, compiled_xy, config, living_named, worker_exe};

/// Runs of each kind (sandboxed, plain).
const RUNS: usize = 20;

/// Set on the process `no_process_outlives_its_run_without_cgroups` starts: only then does
/// `outlive_check_without_cgroups` run.
const HELPER_ENV: &str = "TUNEBOX_TEST_NO_CGROUPS";

const MANIFEST: &str = r#"
name = "outlive"
timeout_s = 10
[kernel]
source = "zoo.c"
entry = "k"
flags = ["-O2", FLAGS]
[[tensors]]
name = "x"
dtype = "f32"
shape = [4096]
[[tensors]]
name = "y"
dtype = "f32"
shape = [4096]
init = "zeros"
output = true
[[scalars]]
name = "n"
value = 4096
[params]
CHEAT = [24, 25]
[timing]
warmup_ms = 1
rep_ms = 2
"#;

/// Whether this machine can sandbox at all (some of Landlock, seccomp, a namespace).
fn can_sandbox() -> bool {
    let support = SandboxSupport::probe();
    support.landlock_abi > 0 || support.seccomp || support.net_namespace || support.user_namespace
}

/// Runs the zoo's CHEAT 24 and 25 `RUNS` times sandboxed and `RUNS` times plain, and after
/// each run looks for a process they started: there must be none. Returns what it did.
fn check_nothing_outlives() -> String {
    // SAFETY: set before any worker starts; every test sets the same values (tests/tune.rs).
    unsafe {
        std::env::set_var("TUNEBOX_CACHE_DIR", cache_root());
        std::env::set_var("TUNEBOX_PROC_STAT", "/dev/null");
    }
    let dir = tempfile::tempdir().unwrap();
    let mark = format!("tbxout{:x}", std::process::id());
    let flags = format!("\"-DMARK=\\\"{mark}\\\"\"");
    std::fs::write(dir.path().join("zoo.c"), include_str!("zoo/zoo.c")).unwrap();
    let manifest = MANIFEST.replace("FLAGS", &flags);
    let options = TuneOptions::new()
        .worker(worker_exe())
        .cache(CacheMode::Off)
        .fresh(true)
        .rounds(0);
    let kinds: &[bool] = if can_sandbox() {
        &[true, false]
    } else {
        println!("sandboxed half skipped: this machine has no Landlock, seccomp or namespaces");
        &[false]
    };
    let started = std::time::Instant::now();
    for &sandboxed in kinds {
        let text = if sandboxed {
            format!("{manifest}[sandbox]\n")
        } else {
            manifest.clone()
        };
        std::fs::write(dir.path().join("m.toml"), text).unwrap();
        for run in 0..RUNS {
            let report =
                tunebox_tune::tune(&dir.path().join("m.toml"), &options, &(), &Stop::new())
                    .expect("the run survives its candidates");
            for result in &report.results {
                let error = result.error.as_deref().unwrap_or_default();
                assert!(
                    result.status == Status::Suspicious && error.contains("children_after_call"),
                    "sandboxed {sandboxed}, run {run}, CHEAT={}: {} {error}",
                    cheat_of(result),
                    result.status
                );
            }
            let left = living_named(&mark);
            for &pid in &left {
                crate::util::kill(pid, 9);
            }
            assert!(
                left.is_empty(),
                "sandboxed {sandboxed}, run {run}: processes {left:?} outlived the run"
            );
        }
    }
    format!(
        "{} runs each of {:?} (sandboxed, plain) in {:.1} s, held by {}: nothing left",
        RUNS,
        kinds,
        started.elapsed().as_secs_f64(),
        Containment::probe()
    )
}

/// A reused worker whose candidate left a daemon (CHEAT=24), reported by the worker's own
/// look, has it killed at once, and the worker is retired (work ran on in it): the innocent
/// requests after it are `ok`, in a fresh worker, and nothing of the daemon lives.
fn check_a_reused_worker_is_cleaned() {
    let mark = format!("tbxreu{:x}", std::process::id());
    let zoo = |cheat: u32| {
        let kernel = CKernel::new(include_str!("zoo/zoo.c"), "k")
            .define("CHEAT", cheat)
            .define("MARK", format!("\"{mark}\""))
            .flags(["-O2"]);
        compiled_xy(BenchmarkRequest::new(kernel), 4096)
    };
    for sandboxed in [false, true] {
        let config = config().sandbox(sandboxed.then(Sandbox::new));
        let mut worker = TuningProcess::spawn(config).expect("a worker starts");
        let pid = worker.pid();
        let err = worker.benchmark(zoo(24), LONG).unwrap_err();
        assert!(
            matches!(&err, ProcessError::Remote(e) if e.retires_worker()),
            "{err}"
        );
        assert!(err.to_string().contains("children_after_call"), "{err}");
        assert_eq!(
            living_named(&mark),
            Vec::<u32>::new(),
            "sandboxed {sandboxed}"
        );
        for _ in 0..2 {
            let innocent = worker.benchmark(zoo(0), LONG);
            assert!(innocent.is_ok(), "sandboxed {sandboxed}: {innocent:?}");
            assert_ne!(worker.pid(), pid, "the cheat's worker was retired");
        }
        assert_eq!(
            living_named(&mark),
            Vec::<u32>::new(),
            "sandboxed {sandboxed}"
        );
    }
}

#[test]
fn no_process_a_candidate_starts_outlives_its_run() {
    if std::env::var_os(HELPER_ENV).is_some() {
        return;
    }
    check_a_reused_worker_is_cleaned();
    println!("{}", check_nothing_outlives());
}

/// The same without cgroups: this test binary again, with `TUNEBOX_CGROUPS=off`.
#[test]
fn no_process_outlives_its_run_without_cgroups() {
    if std::env::var_os(HELPER_ENV).is_some() {
        return;
    }
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "containment::outlive_check_without_cgroups",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, "1")
        .env("TUNEBOX_CGROUPS", "off")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "the helper without cgroups failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("child subreaper"), "{stdout}");
    println!(
        "{}",
        stdout
            .lines()
            .find(|l| l.contains("runs each"))
            .unwrap_or("")
    );
}

/// Run by the test above, without cgroups; returns at once otherwise.
#[test]
fn outlive_check_without_cgroups() {
    if std::env::var_os(HELPER_ENV).is_none() {
        return;
    }
    assert_eq!(Containment::probe(), Containment::Subreaper);
    check_a_reused_worker_is_cleaned();
    println!("{}", check_nothing_outlives());
}
