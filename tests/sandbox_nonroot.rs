//! The sandbox's non-root path: a user namespace for the network namespace, and
//! `RLIMIT_NPROC` for the task limit where no pids cgroup can be made. A run started as root
//! never takes it, so when the tests run as root, `the_sandbox_holds_for_a_user_other_than_root`
//! starts this test binary again as `nobody` (uid 65534), running only `nonroot_protections`,
//! which checks the protections from there.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use tunebox_process::{ProcessConfig, ProcessError, Sandbox, SandboxSupport, TuningProcess};
use tunebox_protocol::{BenchmarkRequest, CKernel};

use crate::util::{cache_root, compiled_xy, config, stopped_at};

/// Set (to the helper's folder) only on the process `the_sandbox_holds_for_a_user_other_than_root`
/// starts: without it `nonroot_protections` returns at once.
const HELPER_ENV: &str = "TUNEBOX_TEST_NONROOT_DIR";

/// `nobody`.
const NOBODY: u32 = 65534;

/// The task limit the helper's sandbox sets.
const TASKS: u64 = 48;

#[test]
fn the_sandbox_holds_for_a_user_other_than_root() {
    // SAFETY: `geteuid` has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!(
            "skipped: not root, so every sandboxed test of this run takes the non-root path \
             already (tests/sandbox.rs)"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::chown(dir.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    let exe = std::env::current_exe().unwrap();
    // std's `uid` drops the supplementary groups too (setgroups(0) as root).
    let output = Command::new(&exe)
        .args([
            "sandbox_nonroot::nonroot_protections",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, dir.path())
        .env("TMPDIR", dir.path())
        .env("HOME", dir.path())
        .env_remove("TUNEBOX_CACHE_DIR")
        .env_remove("XDG_CACHE_HOME")
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    if let Some(reason) = stdout
        .lines()
        .find_map(|l| l.strip_prefix("nonroot skipped: "))
    {
        println!("skipped: {reason}");
        return;
    }
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "the helper as uid {NOBODY} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert!(stdout.contains("nonroot checked"), "{stdout}");
    println!("{stdout}");
}

/// Run as `nobody` by the test above; returns at once otherwise.
#[test]
fn nonroot_protections() {
    let Some(dir) = std::env::var_os(HELPER_ENV) else {
        return;
    };
    let dir = Path::new(&dir);
    // SAFETY: `geteuid` has no preconditions.
    assert_ne!(unsafe { libc::geteuid() }, 0, "the helper runs as nobody");
    let support = SandboxSupport::probe();
    println!("nonroot support: {support:?}");
    assert!(!support.root);
    if !support.seccomp || support.landlock_abi == 0 {
        println!("nonroot skipped: this kernel has no seccomp or no Landlock");
        return;
    }
    // SAFETY: set before any worker starts, in a process that runs this one test.
    unsafe { std::env::set_var("TUNEBOX_CACHE_DIR", cache_root()) };

    // A system call that reaches into another process: stopped, and named.
    let err = run(zoo(9, &[])).unwrap_err();
    assert!(stopped_at(&err, "ptrace"), "{err}");

    // The network: no connection reaches a listener of ours.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let result = run(zoo(13, &[("PORT", &port)])).expect("refused, not failed");
    assert_honest(&result);
    assert!(
        listener.accept().is_err(),
        "a sandboxed worker reached the network"
    );

    // Files: nothing written outside the scratch folder, even in a folder nobody owns.
    let escape = dir.join("escaped");
    let quoted = format!("\"{}\"", escape.display());
    assert_honest(&run(zoo(15, &[("ESCAPE", &quoted)])).expect("refused, not failed"));
    assert!(
        !escape.exists(),
        "a sandboxed worker wrote outside its folder"
    );

    // No way out through new namespaces, even with unprivileged user namespaces allowed.
    assert_honest(&run(zoo(16, &[])).expect("refused, not failed"));

    // W^X where the kernel has it.
    if support.write_xor_execute {
        assert_honest(&run(zoo(22, &[])).expect("refused, not failed"));
    }

    // The task limit: RLIMIT_NPROC (no pids cgroup for nobody) stops a fork loop short.
    let forks = run(fork_counter()).expect("the fork counter returns");
    let made = y(&forks)[0];
    assert!(
        made < TASKS as f32,
        "{made} processes made under a task limit of {TASKS}"
    );
    println!(
        "nonroot checked: uid {}, network namespace {}, task limit by {} ({made} forks made \
         under a limit of {TASKS})",
        // SAFETY: as above.
        unsafe { libc::geteuid() },
        if support.net_namespace {
            "directly"
        } else if support.user_namespace {
            "in a user namespace"
        } else {
            "absent (seccomp only)"
        },
        if support.pids_cgroup.is_some() {
            "a pids cgroup"
        } else {
            "RLIMIT_NPROC"
        }
    );
}

/// Forks until `fork` fails (or 1000 times) on its first call, kills what it made, and writes
/// the count into `y[0]` on every call.
const FORK_COUNTER: &str = "#include <stdint.h>\n#include <signal.h>\n#include <unistd.h>\n\
#include <sys/wait.h>\n\
static int made = -1;\n\
void k(const float *x, float *y, int64_t n) {\n\
    if (made < 0) {\n\
        static pid_t kids[1000];\n\
        for (made = 0; made < 1000; made++) {\n\
            pid_t p = fork();\n\
            if (p == 0) { pause(); _exit(0); }\n\
            if (p < 0) break;\n\
            kids[made] = p;\n\
        }\n\
        for (int i = 0; i < made; i++) { kill(kids[i], SIGKILL); waitpid(kids[i], 0, 0); }\n\
    }\n\
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + 1.0f;\n\
    y[0] = (float)made;\n\
}\n";

fn fork_counter() -> BenchmarkRequest {
    compiled_xy(
        BenchmarkRequest::new(CKernel::new(FORK_COUNTER, "k").flags(["-O2"])),
        4096,
    )
}

/// `zoo/zoo.c` as candidate `cheat`, with `defines`.
fn zoo(cheat: u32, defines: &[(&str, &str)]) -> BenchmarkRequest {
    let mut kernel = CKernel::new(include_str!("zoo/zoo.c"), "k")
        .flags(["-O2", "-pthread"])
        .define("CHEAT", cheat.to_string());
    for &(name, value) in defines {
        kernel = kernel.define(name, value);
    }
    compiled_xy(BenchmarkRequest::new(kernel), 4096)
}

fn sandboxed() -> ProcessConfig {
    config().sandbox(Some(
        Sandbox::new()
            .memory(Some(2 << 30))
            .tasks(Some(TASKS))
            .file_size(Some(1 << 20)),
    ))
}

fn run(request: BenchmarkRequest) -> Result<tunebox_protocol::BenchmarkResult, ProcessError> {
    let mut worker = TuningProcess::spawn(sandboxed()).expect("a sandboxed worker starts");
    let result = worker.benchmark(request, Duration::from_secs(30));
    let _ = worker.shutdown(Duration::from_millis(500));
    result
}

fn y(result: &tunebox_protocol::BenchmarkResult) -> Vec<f32> {
    result.outputs[0]
        .bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

/// `y[0]` is what `2 x + 1` gives, not the zoo's LEAKED marker of a successful attack.
fn assert_honest(result: &tunebox_protocol::BenchmarkResult) {
    assert_ne!(y(result)[0], 12345.0, "the attack succeeded");
}
