//! Helpers shared by the CLI tests: running `tunebox`, the test kernels and manifests.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Runs `tunebox args…` in `dir`, with a kernel cache of its own.
pub(crate) fn tunebox(dir: &Path, args: &[&str]) -> Output {
    tunebox_env(dir, args, &[])
}

/// As [`tunebox`], with extra environment variables.
pub(crate) fn tunebox_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    output_within(command(dir, args, env), HANG)
}

/// Longer than any test's run of `tunebox` takes on a loaded machine, by far: a run still going
/// after it is hung.
const HANG: Duration = Duration::from_secs(600);

/// `command`'s output, as [`Command::output`], or a panic showing what it printed when it is
/// still running after `limit` (killed first): a hung run fails its test instead of holding the
/// whole suite until CI gives up on it, saying nothing.
pub(crate) fn output_within(mut command: Command, limit: Duration) -> Output {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tunebox runs");
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("tunebox is waited for") {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            // The workers may still hold the pipes open: what was printed so far is enough.
            std::thread::sleep(Duration::from_secs(1));
            let printed = |h: std::thread::JoinHandle<Vec<u8>>| {
                if h.is_finished() {
                    text(&h.join().unwrap_or_default())
                } else {
                    "(its pipe is still held open)".to_owned()
                }
            };
            panic!(
                "{command:?} still running after {limit:?}: killed\nstdout:\n{}\nstderr:\n{}",
                printed(stdout),
                printed(stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// The command [`tunebox_env`] runs, to spawn it.
pub(crate) fn command(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    // Compiled kernels go beside the test's files, or for runs in examples/ (whose tree must
    // stay clean) to cargo's scratch directory for tests (private to this build, unlike /tmp).
    let kernel_cache = if dir.canonicalize().ok() == examples().canonicalize().ok() {
        Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-cache")
    } else {
        dir.join("cache")
    };
    let mut command = Command::new(env!("CARGO_BIN_EXE_tunebox"));
    command
        .args(args)
        .current_dir(dir)
        .env("TUNEBOX_CACHE_DIR", kernel_cache)
        // No interference seen (conditions unknown), so that what a run caches does not depend
        // on what else this machine runs; a test of interference sets TUNEBOX_PROC_STAT.
        .env("TUNEBOX_PROC_STAT", "/dev/null")
        .env_remove("TUNEBOX_SYSFS_CPU")
        .env_remove("TUNEBOX_WORKER")
        .env_remove("RUST_LOG")
        .env_remove("COLUMNS");
    for var in [
        "SLURM_ARRAY_TASK_ID",
        "SLURM_ARRAY_TASK_COUNT",
        "SLURM_ARRAY_TASK_MIN",
        "SLURM_ARRAY_TASK_MAX",
        "SLURM_ARRAY_TASK_STEP",
        "JOB_COMPLETION_INDEX",
    ] {
        command.env_remove(var);
    }
    for (key, value) in env {
        command.env(key, value);
    }
    command
}

/// Reads `pipe` to its end on a thread of its own (nothing for `None`).
fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    })
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts that `out` succeeded, showing its output otherwise.
pub(crate) fn check(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}

pub(crate) fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// A JSON file.
pub(crate) fn json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `(choice, status)` of every result of a JSON report, sorted.
pub(crate) fn outcomes(report: &Value) -> Vec<(String, String)> {
    let mut outcomes: Vec<(String, String)> = report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["choice"].to_string(),
                r["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    outcomes.sort();
    outcomes
}

/// A manifest for `entry(x, y, n)` over 64 floats in `name.c`, with MODE = 0..modes, MODE = 0 as
/// the reference, and the given timeout and `[timing]` lines.
pub(crate) fn mode_manifest(name: &str, timeout_s: &str, modes: usize, timing: &str) -> String {
    let modes: Vec<String> = (0..modes).map(|m| m.to_string()).collect();
    format!(
        r#"timeout_s = {timeout_s}
[kernel]
source = "{name}.c"
entry = "{name}"
flags = ["-O1"]
[[tensors]]
name = "x"
dtype = "f32"
shape = [64]
[[tensors]]
name = "y"
dtype = "f32"
shape = [64]
init = "zeros"
output = true
[[scalars]]
name = "n"
value = 64
[params]
MODE = [{}]
[timing]
{timing}
flush_cache = false
[verify]
reference = {{ choice = {{ MODE = 0 }} }}
"#,
        modes.join(", ")
    )
}

/// A kernel family with one choice per outcome.
pub(crate) const FAMILY: &str = r#"#include <stdint.h>
#include <stdlib.h>
#if MODE == 5
#error "MODE 5 does not compile"
#endif
void family(const float *x, float *y, int64_t n) {
    if (MODE == 1) *(volatile float *)16 = 1.0f;
    if (MODE == 2) abort();
    if (MODE == 3) for (volatile int spin = 1; spin;) {}
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + (MODE == 4 ? 1.5f : 1.0f);
}
"#;

pub(crate) const MANIFEST: &str = r#"
timeout_s = 2
[kernel]
source = "family.c"
entry = "family"
flags = ["-O2"]
[[tensors]]
name = "x"
dtype = "f32"
shape = [1024]
[[tensors]]
name = "y"
dtype = "f32"
shape = [1024]
init = "zeros"
output = true
[[scalars]]
name = "n"
value = 1024
[params]
MODE = [0, 1, 2, 3, 4, 5]
[timing]
warmup_ms = 1
rep_ms = 5
flush_cache = false
[verify]
rtol = 1e-6
atol = 1e-6
reference = { choice = { MODE = 0 } }
"#;
