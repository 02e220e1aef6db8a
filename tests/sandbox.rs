//! The hostile zoo: C candidates that cheat the harness or attack the machine, each run in a
//! sandboxed worker (`ProcessConfig::sandbox`), each caught and reported, none reaching the
//! parent, and an innocent candidate measured next to them unaffected.

use std::time::Duration;

use tunebox_pool::Status;
use tunebox_process::{ProcessConfig, ProcessError, Sandbox, SandboxSupport, TuningProcess};
use tunebox_protocol::{
    BenchmarkRequest, BenchmarkResult, CKernel, DType, TensorSpec, TimingConfig, VariedReps,
};
use tunebox_tune::{CacheMode, Stop, TuneOptions};

use crate::util::{cache_root, cheat_of, compiled_xy, config, stopped_at, worker_exe};

/// Elements of `x` and `y`.
const N: i64 = 4096;

/// `y = 2 x + 1`: the innocent candidate.
const INNOCENT: &str = "#include <stdint.h>\n\
void k(const float *x, float *y, int64_t n) {\n\
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + 1.0f;\n\
}\n";

/// A request for `k(x, y, n)` with `x` random and `y` the output, compiled here in the parent
/// (a sandboxed worker reads the cache but may not write it).
fn request(source: &str) -> BenchmarkRequest {
    compiled_xy(
        BenchmarkRequest::new(CKernel::new(source, "k").flags(["-O2"])),
        N as u64,
    )
}

/// The sandbox the zoo runs in: small limits, so that harm is cheap to provoke.
fn sandbox() -> Sandbox {
    Sandbox::new()
        .memory(Some(2 << 30))
        .tasks(Some(64))
        .file_size(Some(1 << 20))
        .cpu_time(Some(Duration::from_secs(20)))
}

fn sandboxed() -> ProcessConfig {
    config().sandbox(Some(sandbox()))
}

/// Runs `source` in a fresh sandboxed worker.
fn run(source: &str) -> Result<BenchmarkResult, ProcessError> {
    let mut worker = TuningProcess::spawn(sandboxed()).expect("a sandboxed worker starts");
    let result = worker.benchmark(request(source), Duration::from_secs(20));
    let _ = worker.shutdown(Duration::from_millis(500));
    result
}

/// The outputs `y` as floats.
fn y(result: &BenchmarkResult) -> Vec<f32> {
    result.outputs[0]
        .bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn an_innocent_candidate_runs_in_the_sandbox() {
    let result = run(INNOCENT).expect("the innocent candidate runs");
    assert_eq!(y(&result).len(), N as usize);
    assert!(result.stats.median_ms > 0.0);
}

#[test]
fn ptrace_kills_the_worker_with_a_sandbox_stop() {
    let source = "#include <stdint.h>\n#include <sys/ptrace.h>\n#include <unistd.h>\n\
void k(const float *x, float *y, int64_t n) {\n\
    ptrace(PTRACE_ATTACH, getppid(), 0, 0);\n\
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + 1.0f;\n\
}\n";
    let err = run(source).unwrap_err();
    assert!(stopped_at(&err, "ptrace"), "{err}");
    assert!(err.to_string().contains("ptrace (system call"), "{err}");
}

/// A kernel that watches its own process between calls: the entries of `/proc/self/fd` and the
/// lines of `/proc/self/maps` (what a shared-memory region adds). It counts the calls before
/// which they changed, from its third call on (after the first call the worker copies that
/// call's outputs out) and leaving out the call after the reps (its outputs poisoned: the reps
/// are over), and writes the count into `seen[0]` and its calls into `seen[1]`.
const WATCHER: &str = r#"#include <stdint.h>
#include <stdio.h>
#include <dirent.h>
static long state(void) {
    long n = 0;
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    if (d) { while ((e = readdir(d))) n++; closedir(d); }
    FILE *f = fopen("/proc/self/maps", "r");
    int c;
    if (f) { while ((c = fgetc(f)) != EOF) n += (c == '\n') * 1000000L; fclose(f); }
    return n;
}
static long last, calls, changes;
void k(const float *x, float *y, int64_t *seen, int64_t n) {
    int poisoned = y[0] != y[0];
    if (calls >= 2 && !poisoned && state() != last) changes++;
    calls++;
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + 1.0f;
    seen[0] = changes;
    seen[1] = calls;
    last = state();
}
"#;

/// A checked rep ends as every other rep does: nothing a candidate can see from its next
/// call (its descriptors, its mappings) tells it that the rep before was checked, so it cannot
/// count the checks and skip the reps after the last one. (Before, a checked rep's outputs
/// over 16 KiB went into a shared-memory region at once: one more descriptor and mapping.)
#[test]
fn a_checked_rep_leaves_no_trace_the_next_call_sees() {
    // 256 KiB of outputs: more than travels inline (`tunebox_protocol::INLINE_LIMIT`).
    let n = 1u64 << 16;
    let request = BenchmarkRequest::new(CKernel::new(WATCHER, "k").flags(["-O2"]))
        .tensor(TensorSpec::new("x", DType::F32, [n]).random(7))
        .tensor(TensorSpec::new("y", DType::F32, [n]).output())
        .tensor(TensorSpec::new("seen", DType::I64, [2]).output())
        .scalar("n", n as i64)
        .timing(
            TimingConfig::default()
                .warmup_ms(1.0)
                .rep_ms(5.0)
                .min_reps(12)
                .varied_reps(Some(VariedReps::new(4))),
        );
    let mut worker = TuningProcess::spawn(config()).expect("a worker starts");
    let result = worker
        .benchmark(request, Duration::from_secs(60))
        .expect("the watcher runs");
    let _ = worker.shutdown(Duration::from_millis(500));
    assert_eq!(result.integrity.checked_reps.len(), 4, "four reps checked");
    let seen: Vec<i64> = result.outputs_after_reps[1]
        .bytes
        .chunks_exact(8)
        .map(|c| i64::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    assert!(seen[1] >= 12, "calls: {seen:?}");
    assert_eq!(
        seen[0], 0,
        "calls after which its process had changed: {seen:?}"
    );
}

/// The zoo's manifest: every candidate of `zoo/zoo.c` as one choice of one run, judged
/// against the innocent CHEAT=0, in the sandbox with small limits.
const ZOO_MANIFEST: &str = r#"
name = "zoo"
timeout_s = 10
[kernel]
source = "zoo.c"
entry = "k"
flags = ["-O2", "-pthread", FLAGS]
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
CHEAT = CHEATS
[timing]
warmup_ms = 1
rep_ms = 5
[verify]
reference = { choice = { CHEAT = 0 } }
# Four checked reps (2 by default in a sandbox): CHEAT=29 escapes a checked rep only when its
# varied block meets one of its four samples (~6 %); four such reps in one window, ~1e-5.
checked_reps = 4
[sandbox]
memory_mb = 2048
tasks = 64
file_size_mb = 1
cpu_time_s = 2
"#;

/// The last hostile candidate of `zoo/zoo.c` (the innocent 98 and 99 come after it).
const LAST_CHEAT: u32 = 34;

/// The candidates that skip work on the timed reps and are caught only because some timed reps
/// run on varied inputs and are checked (`verify.checked_reps`).
const CAUGHT_BY_CHECKED_REPS: [u32; 3] = [30, 32, 33];

/// The candidates that skip work when a call's inputs repeat an earlier call's (in part or in a
/// sample), right on every call: on timed reps whose every input element is drawn again they do
/// all the work, and gain nothing.
const DEFEATED_BY_VARIED_REPS: [u32; 3] = [29, 31, 34];

/// How a zoo candidate must end: its status, and words its message must hold, on a machine
/// whose kernel has W^X (`wx`) or not.
fn expected(cheat: u32, wx: bool) -> (Status, &'static str) {
    match cheat {
        0 | 98 | 99 => (Status::Ok, ""),
        1 => (Status::Wrong, ""),
        2 => (Status::Wrong, "fresh inputs"),
        3 => (Status::Wrong, "after the timed reps"),
        5 => (Status::Suspicious, "threads_after_call"),
        6 | 7 | 24 | 25 => (Status::Suspicious, "children_after_call"),
        8 if cfg!(target_arch = "x86_64") => (Status::Suspicious, "clock"),
        8 => (Status::Ok, ""),
        // Named by the worker's SIGSYS handler.
        9 => (Status::Suspicious, "ptrace (system call"),
        10 => (Status::Suspicious, "process_vm_readv (system call"),
        22 if wx => (Status::Ok, ""),
        // Its own SIGSYS handler keeps it alive; the trapped call was still not made.
        23 => (Status::Ok, ""),
        22 => (Status::Wrong, ""),
        // Refused attacks: the honest answer stands (a successful one writes LEAKED).
        11..=16 | 21 | 26..=28 => (Status::Ok, ""),
        // Caught only on a timed rep whose inputs were varied, and checked (verify.checked_reps).
        30 | 32 | 33 => (Status::Wrong, "wrong on a timed rep"),
        // Right on every call, doing all the work on varied reps; what they gain is judged by
        // `the_cheats_varied_reps_defeat_gain_nothing_on_them`.
        29 | 31 | 34 => (Status::Ok, ""),
        17 => (Status::Timeout, ""),
        18 => (Status::Crashed, ""),
        19 => (Status::Suspicious, "file-size limit"),
        20 => (Status::Suspicious, "CPU-time limit"),
        _ => unreachable!("no such candidate {cheat}"),
    }
}

#[test]
fn every_hostile_candidate_is_caught_and_the_innocent_are_not() {
    // SAFETY: set before any worker starts; every test sets the same values (tests/tune.rs).
    unsafe {
        std::env::set_var("TUNEBOX_CACHE_DIR", cache_root());
        std::env::set_var("TUNEBOX_PROC_STAT", "/dev/null");
    }
    let dir = tempfile::tempdir().unwrap();
    // What a candidate must not read: a file of exactly the output's size (expected outputs,
    // CHEAT=26) and a results cache (CHEAT=27) beside the manifest.
    std::fs::write(dir.path().join("answers.bin"), vec![0u8; 4 * N as usize]).unwrap();
    std::fs::write(dir.path().join("zoo.tunebox-cache.jsonl"), "{}\n").unwrap();
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret");
    std::fs::write(&secret, "do not read").unwrap();
    let escape = outside.path().join("escaped");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();

    // The fork bomb only where something bounds it (a pids cgroup, or RLIMIT_NPROC for a user
    // other than root).
    let support = SandboxSupport::probe();
    let bounded = support.pids_cgroup.is_some() || !support.root;
    let mut cheats: Vec<u32> = (0..=LAST_CHEAT)
        .filter(|&c| c != 4 && (c != 17 || bounded))
        .collect();
    cheats.insert(cheats.len() / 2, 99);
    cheats.insert(cheats.len() / 3, 98);
    cheats.push(4);
    let mark = format!("tbxzoo{:x}", std::process::id());
    let flags = format!(
        "\"-DPORT={port}\", \"-DSECRET=\\\"{}\\\"\", \"-DESCAPE=\\\"{}\\\"\", \
         \"-DMANIFEST_DIR=\\\"{}\\\"\", \"-DMARK=\\\"{mark}\\\"\"",
        secret.display(),
        escape.display(),
        dir.path().display(),
    );
    let report = run_zoo(dir.path(), &flags, &cheats, true);
    let results = &report.results;
    assert_eq!(results.len(), cheats.len(), "every candidate has a result");
    let mut misjudged = Vec::new();
    for result in results {
        let cheat = cheat_of(result);
        let error = result.error.clone().unwrap_or_default();
        let ok = if cheat == 4 {
            // Caught by whichever check sees the scribble first: a wrong output, or an output
            // that changes after the call.
            matches!(result.status, Status::Wrong | Status::Suspicious)
        } else if cheat == 20 && result.status == Status::Timeout {
            // A machine too busy to give it 2 s of CPU within the 10 s timeout.
            true
        } else {
            let (status, words) = expected(cheat, support.write_xor_execute);
            result.status == status && error.contains(words)
        };
        if !ok {
            misjudged.push(format!("CHEAT={cheat}: {} {error}", result.status));
        }
    }
    assert!(misjudged.is_empty(), "misjudged:\n{}", misjudged.join("\n"));
    // Nothing reached the machine: no file outside, no connection, nothing planted.
    assert!(!escape.exists(), "a candidate wrote outside its folder");
    assert!(
        listener.accept().is_err(),
        "a candidate reached the network"
    );
    assert!(!cache_root().join("cpu/planted.so").exists());
    // Nothing a candidate started outlived the run (CHEAT=24 and 25 leave daemons).
    assert_eq!(
        crate::util::living_named(&mark),
        Vec::<u32>::new(),
        "left running"
    );
    // The innocent ranked as in a plain run of them alone: the slow one (98) last.
    let plain = run_zoo(dir.path(), &flags, &[0, 98, 99], false);
    assert_eq!(innocent_ranks(&plain.results), [false, false, true]);
    let ranked: Vec<u32> = results
        .iter()
        .filter(|r| r.status == Status::Ok && [0, 98, 99].contains(&cheat_of(r)))
        .map(cheat_of)
        .collect();
    assert_eq!(
        innocent_ranks(&report.results),
        [false, false, true],
        "ranked: {ranked:?}"
    );
}

/// The defence off: the cheats that varied reps catch or defeat win a plain run without them
/// (no `checked_reps`, no sandbox: every rep on the request's inputs): each is `ok` and faster
/// than the innocent CHEAT=0, whose honest answer costs 64 times its usual work here
/// (`-DWORK=64`), so that skipping it shows. What the other zoo tests catch or defeat is a
/// real win.
#[test]
fn the_cheats_varied_reps_catch_or_defeat_win_without_them() {
    // SAFETY: set before any worker starts; every test sets the same values (tests/tune.rs).
    unsafe {
        std::env::set_var("TUNEBOX_CACHE_DIR", cache_root());
        std::env::set_var("TUNEBOX_PROC_STAT", "/dev/null");
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cheats = vec![0];
    cheats.extend(CAUGHT_BY_CHECKED_REPS);
    cheats.extend(DEFEATED_BY_VARIED_REPS);
    let manifest = zoo_manifest("\"-DWORK=64\"", &cheats, false).replace("checked_reps = 4", "");
    let report = run_manifest(dir.path(), &manifest);
    let rank = |cheat: u32| {
        report
            .results
            .iter()
            .position(|r| cheat_of(r) == cheat)
            .expect("every choice has a result")
    };
    let innocent = &report.results[rank(0)];
    assert_eq!(innocent.status, Status::Ok, "{:?}", innocent.error);
    let mut lost = Vec::new();
    for &cheat in &cheats[1..] {
        let result = &report.results[rank(cheat)];
        if result.status != Status::Ok || rank(cheat) > rank(0) {
            lost.push(format!(
                "CHEAT={cheat}: {} at rank {} (the innocent's: {}) {}",
                result.status,
                rank(cheat),
                rank(0),
                result.error.clone().unwrap_or_default()
            ));
        }
    }
    assert!(
        lost.is_empty(),
        "did not win without varied reps:\n{}",
        lost.join("\n")
    );
}

/// The cheats right on every call that skip work when a call's inputs repeat an earlier call's
/// (CHEAT 29 keys a memo on four sampled elements, 31 recognizes the seeded input, 34
/// recomputes only the blocks of 256 elements that changed since its last call) gain nothing
/// where every rep draws every element of its input again (`checked_reps`), with the work 512
/// times the usual (`-DWORK=512`). CHEAT 34 ranked 15 times ahead of the honest kernel, under
/// the sandbox, when a varied rep drew 1/64 of its input again (a helper's hostile trial).
#[test]
fn the_cheats_varied_reps_defeat_gain_nothing_on_them() {
    // SAFETY: set before any worker starts; every test sets the same values (tests/tune.rs).
    unsafe {
        std::env::set_var("TUNEBOX_CACHE_DIR", cache_root());
        std::env::set_var("TUNEBOX_PROC_STAT", "/dev/null");
    }
    let dir = tempfile::tempdir().unwrap();
    // Two innocents (0 and 99, the same kernel): one window each, and a busy machine may slow
    // one of them (the honest 1.10 ms against three defeated cheats at 0.58 beside four busy
    // loops); the faster of the two is the honest time.
    let mut cheats = vec![0, 99];
    cheats.extend(DEFEATED_BY_VARIED_REPS);
    let manifest = zoo_manifest("\"-DWORK=512\"", &cheats, false)
        .replace("checked_reps = 4", "checked_reps = 2");
    let report = run_manifest(dir.path(), &manifest);
    let median = |cheat: u32| {
        let r = report
            .results
            .iter()
            .find(|r| cheat_of(r) == cheat)
            .expect("every choice has a result");
        assert_eq!(r.status, Status::Ok, "CHEAT={cheat}: {:?}", r.error);
        r.median_ms().expect("ok")
    };
    let honest = median(0).min(median(99));
    let gained: Vec<String> = DEFEATED_BY_VARIED_REPS
        .iter()
        .filter(|&&cheat| median(cheat) < 0.8 * honest)
        .map(|&cheat| format!("CHEAT={cheat}: {:.4} ms", median(cheat)))
        .collect();
    assert!(
        gained.is_empty(),
        "faster than the honest {honest:.4} ms on varied reps:\n{}",
        gained.join("\n")
    );
}

/// A clock slowed only a little (to 0.6 of real time: CHEAT 8 with `-DCLOCK_SLOWDOWN=1.67`),
/// over requests of ~100 ms (`rep_ms = 100`), is caught: the worker's main thread ran longer
/// than its clock saw. A helper's trial ranked such a kernel 1.9 times ahead of the honest one
/// at 0.52, under the sandbox, before the check held the clock to 95 % of the thread's time.
#[cfg(target_arch = "x86_64")]
#[test]
fn a_clock_slowed_to_six_tenths_is_caught() {
    // SAFETY: set before any worker starts; every test sets the same values (tests/tune.rs).
    unsafe {
        std::env::set_var("TUNEBOX_CACHE_DIR", cache_root());
        std::env::set_var("TUNEBOX_PROC_STAT", "/dev/null");
    }
    let dir = tempfile::tempdir().unwrap();
    let manifest = zoo_manifest("\"-DCLOCK_SLOWDOWN=1.67\"", &[0, 8], true)
        .replace("rep_ms = 5", "rep_ms = 100");
    let report = run_manifest(dir.path(), &manifest);
    for result in &report.results {
        let error = result.error.clone().unwrap_or_default();
        match cheat_of(result) {
            0 => assert_eq!(result.status, Status::Ok, "{error}"),
            _ => assert!(
                result.status == Status::Suspicious && error.contains("clock"),
                "{}: {error}",
                result.status
            ),
        }
    }
}

/// The zoo's manifest for `cheats`, sandboxed or not.
fn zoo_manifest(flags: &str, cheats: &[u32], sandboxed: bool) -> String {
    let mut manifest = ZOO_MANIFEST
        .replace("FLAGS", flags)
        .replace("CHEATS", &format!("{cheats:?}"));
    if !sandboxed {
        manifest.truncate(manifest.find("[sandbox]").expect("the table"));
    }
    manifest
}

/// Writes the zoo's manifest for `cheats` into `dir` (sandboxed or not) and runs it.
fn run_zoo(
    dir: &std::path::Path,
    flags: &str,
    cheats: &[u32],
    sandboxed: bool,
) -> tunebox_tune::Report {
    run_manifest(dir, &zoo_manifest(flags, cheats, sandboxed))
}

/// Writes `zoo/zoo.c` and `manifest` into `dir` and runs it.
fn run_manifest(dir: &std::path::Path, manifest: &str) -> tunebox_tune::Report {
    std::fs::write(dir.join("zoo.c"), include_str!("zoo/zoo.c")).unwrap();
    std::fs::write(dir.join("m.toml"), manifest).unwrap();
    tunebox_tune::tune(&dir.join("m.toml"), &zoo_options(), &(), &Stop::new())
        .expect("the run survives its candidates")
}

/// For each `ok` innocent of `results` (CHEAT 0, 98, 99), in rank order, whether it is the
/// slow one (98): `[false, false, true]` when the two fast ones rank first.
fn innocent_ranks(results: &[tunebox_tune::ChoiceResult]) -> Vec<bool> {
    results
        .iter()
        .filter(|r| r.status == Status::Ok && [0, 98, 99].contains(&cheat_of(r)))
        .map(|r| cheat_of(r) == 98)
        .collect()
}

/// Options for the zoo run: the test worker, one worker at a time, a fresh worker per choice.
fn zoo_options() -> TuneOptions {
    TuneOptions::new()
        .worker(worker_exe())
        .cache(CacheMode::Off)
        .fresh(true)
        .rounds(0)
}

/// Issue 24: a 4 GiB tensor under a 1 GiB memory limit fails at once, as one request's error,
/// instead of swapping the machine until the timeout; the worker lives on.
#[test]
fn a_4_gib_tensor_fails_fast_under_a_memory_limit() {
    let mut worker = TuningProcess::spawn(config().memory_limit(Some(1 << 30))).unwrap();
    let huge = BenchmarkRequest::new(CKernel::new(INNOCENT, "k").flags(["-O2"]))
        .tensor(TensorSpec::new("x", DType::F32, [1u64 << 30]).random(7))
        .tensor(TensorSpec::new("y", DType::F32, [16]).output())
        .scalar("n", 16);
    let started = std::time::Instant::now();
    let err = worker
        .benchmark(huge, Duration::from_secs(120))
        .unwrap_err();
    assert!(
        err.to_string().contains("out of memory allocating"),
        "{err}"
    );
    assert!(!err.worker_lost(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    // The same worker measures the next request.
    assert!(
        worker
            .benchmark(request(INNOCENT), Duration::from_secs(20))
            .is_ok()
    );
}

/// Missing protections are named, never pretended.
#[test]
fn the_sandbox_reports_what_the_kernel_lacks_without_failing() {
    let support = SandboxSupport::probe();
    let missing = support.missing(&Sandbox::new());
    if support.landlock_abi >= 6 && support.seccomp && support.pids_cgroup.is_some() {
        assert!(missing.is_empty(), "{missing:?}");
    } else {
        assert!(!missing.is_empty());
    }
    // A sandbox that allows the network asks nothing of the namespaces.
    let network = Sandbox::new().network(true).tasks(None);
    assert!(
        support
            .missing(&network)
            .iter()
            .all(|m| !m.contains("network namespace") && !m.contains("task limit"))
    );
}
