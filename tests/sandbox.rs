//! The hostile zoo: C candidates that cheat the harness or attack the machine, each run in a
//! sandboxed worker (`ProcessConfig::sandbox`), each caught and reported, none reaching the
//! parent, and an innocent candidate measured next to them unaffected.

use std::time::Duration;

use tunebox_cpu::{CacheDir, Signature, compile};
use tunebox_process::{ProcessConfig, ProcessError, Sandbox, SandboxStop, TuningProcess};
use tunebox_protocol::{
    BenchmarkRequest, BenchmarkResult, CKernel, DType, Kernel, TensorSpec, TimingConfig,
};

use crate::util::{cache_root, config};

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
    let request = BenchmarkRequest::new(CKernel::new(source, "k").flags(["-O2"]))
        .tensor(TensorSpec::new("x", DType::F32, [N as u64]).random(7))
        .tensor(TensorSpec::new("y", DType::F32, [N as u64]).output())
        .scalar("n", N)
        .timing(TimingConfig {
            warmup_ms: 1.0,
            rep_ms: 5.0,
            flush_cache: false,
            ..TimingConfig::default()
        });
    let Kernel::C(kernel) = &request.kernel else {
        unreachable!()
    };
    compile(
        kernel,
        &Signature::of(&request),
        &CacheDir::new(cache_root().join("cpu")),
    )
    .expect("the candidate compiles");
    request
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
    assert!(
        matches!(
            err,
            ProcessError::SandboxStop {
                stop: SandboxStop::ForbiddenSystemCall,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("ptrace"), "{err}");
}
