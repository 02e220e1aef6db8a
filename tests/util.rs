//! Helpers shared by the integration tests.

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use tunebox_pool::{PoolConfig, TuningProcessPool};
use tunebox_process::{Output, ProcessConfig};
use tunebox_protocol::{
    BenchmarkRequest, CKernel, DType, DiagnosticTask, TensorSpec, TimingConfig,
};

/// Path of the worker binary built by this package.
pub(crate) fn worker_exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tunebox-test-worker"))
}

/// A compile cache shared by all tests of this run, so nothing goes to `~/.cache`.
pub(crate) fn cache_root() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temporary directory"))
        .path()
}

/// A worker config: the test worker, a private cache, stdout discarded, stderr captured.
pub(crate) fn config() -> ProcessConfig {
    ProcessConfig::new()
        .worker(worker_exe())
        .env("TUNEBOX_CACHE_DIR", cache_root())
        .stdout(Output::Null)
        .stderr(Output::Capture {
            tail_bytes: 16 * 1024,
        })
        .handshake_timeout(Duration::from_secs(20))
}

/// A pool of `workers` test workers ([`config`]) with per-task `timeout`.
pub(crate) fn pool(workers: usize, timeout: Duration) -> TuningProcessPool {
    TuningProcessPool::new(
        PoolConfig::new()
            .max_workers(workers)
            .timeout(timeout)
            .process_config(config()),
    )
    .unwrap()
}

/// A diagnostics request.
pub(crate) fn diag(task: DiagnosticTask) -> BenchmarkRequest {
    BenchmarkRequest::new(task)
}

/// A payload for echo-like diagnostic tasks.
pub(crate) fn bytes(data: &[u8]) -> tunebox_protocol::Bytes {
    tunebox_protocol::Bytes::copy_from_slice(data).expect("a payload")
}

/// A generous timeout for tasks that should succeed.
pub(crate) const LONG: Duration = Duration::from_secs(30);

/// `y[i] = 2 * x[i] + OFFSET` over `n` floats; `OFFSET` other than 1 is a wrong answer.
pub(crate) const AXPY: &str = "#include <stdint.h>\n\
void axpy(const float *x, float *y, int64_t n) {\n\
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + OFFSET;\n\
}\n";

/// A request for a C kernel called as `entry(x, y, n)` with `x` random and `y` the output.
pub(crate) fn c_request(source: &str, entry: &str, offset: &str) -> BenchmarkRequest {
    let kernel = CKernel::new(source, entry)
        .define("OFFSET", offset)
        .flags(["-O2"]);
    with_xy(BenchmarkRequest::new(kernel), 4096, 1)
}

/// `request` with the arguments of a kernel `k(x, y, n)` (`x`: `n` f32 random from `seed`,
/// `y`: the output) and a short timing.
fn with_xy(request: BenchmarkRequest, n: u64, seed: u64) -> BenchmarkRequest {
    request
        .tensor(TensorSpec::new("x", DType::F32, [n]).random(seed))
        .tensor(TensorSpec::new("y", DType::F32, [n]).output())
        .scalar("n", n as i64)
        .timing(
            TimingConfig::default()
                .warmup_ms(1.0)
                .rep_ms(5.0)
                .flush_cache(false),
        )
}

/// Whether `pid` exists at all (running or zombie).
pub(crate) fn pid_exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Path of the launcher binary: a parent process the tests can kill.
pub(crate) fn launcher_exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_tunebox-test-launcher"))
}

/// Sends `signal` to `pid`.
pub(crate) fn kill(pid: u32, signal: i32) {
    let status = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("kill(1) runs");
    assert!(status.success(), "kill -{signal} {pid} failed");
}

/// Whether `pid` is dead: gone, or a zombie. An orphan re-parented to this sandbox's init may stay
/// a zombie for a while; it is dead all the same.
pub(crate) fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Waits up to `limit` for `pid` to die (see [`is_dead`]); returns how long it took, or `None`.
pub(crate) fn wait_gone(pid: u32, limit: Duration) -> Option<Duration> {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if is_dead(pid) {
            return Some(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

/// `request` with the tensors of a kernel `k(x, y, n)` (`x`: `n` random f32, `y`: the output),
/// a short timing, compiled here in the parent: a sandboxed worker reads the kernel cache but
/// may not write it.
pub(crate) fn compiled_xy(request: BenchmarkRequest, n: u64) -> BenchmarkRequest {
    let request = with_xy(request, n, 7);
    let tunebox_protocol::Kernel::C(kernel) = &request.kernel else {
        unreachable!("compiled_xy takes C kernels")
    };
    tunebox_cpu::compile(
        kernel,
        &tunebox_cpu::Signature::of(&request),
        &tunebox_cpu::CacheDir::new(cache_root().join("cpu")),
    )
    .expect("the candidate compiles");
    request
}

/// The number `N` of a zoo candidate's result (its choice is `CHEAT=N`).
pub(crate) fn cheat_of(result: &tunebox_tune::ChoiceResult) -> u32 {
    let label = result.choice.label();
    label
        .trim_start_matches("CHEAT=")
        .parse()
        .unwrap_or_else(|e| panic!("{label}: {e}"))
}

/// Whether `err` is the sandbox stopping a worker at the forbidden system call `name`.
pub(crate) fn stopped_at(err: &tunebox_process::ProcessError, name: &str) -> bool {
    use tunebox_process::{ProcessError, SandboxStop, SystemCall};
    matches!(
        err,
        ProcessError::SandboxStop {
            stop: SandboxStop::ForbiddenSystemCall {
                call: Some(SystemCall { name: Some(call), .. })
            },
            ..
        } if *call == name
    )
}

/// The living (not zombie) processes whose name (`comm`) is `name`: what a test's candidate
/// left behind under a name of its own.
pub(crate) fn living_named(name: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == name)
                && !is_dead(pid)
        })
        .collect()
}
