//! `tunebox doctor`: checks what tuning needs — the C compiler, the kernel cache, a worker, a CPU
//! benchmark in it, and (through a worker's probe) the CUDA driver and NVRTC — and says how to
//! fix what fails.

use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::{Duration, Instant};

use tunebox_cpu::{CacheDir, Signature};
use tunebox_process::{
    Output, ProcessConfig, Sandbox, SandboxSupport, TuningProcess, WORKER_PATH_ENV,
};
use tunebox_protocol::{
    BenchmarkRequest, CKernel, CudaCode, CudaKernel, DType, Kernel, LaunchConfig, Probe,
    TensorSpec, TimingConfig,
};

use tunebox_tune::{PROBE_TIMEOUT, compiler, compiler_version};

/// A tiny C kernel: compiles in a blink with any C compiler.
const C_KERNEL: &str = "void tunebox_doctor(float *x) { x[0] = 1.0f; }\n";
/// A tiny CUDA kernel for NVRTC.
const CUDA_KERNEL: &str =
    "extern \"C\" __global__ void tunebox_doctor(float *x) { x[threadIdx.x] = 1.0f; }\n";

/// The outcome of one check.
enum Outcome {
    Pass(String),
    /// What failed, and how to fix it.
    Fail(String, String),
    /// Not checked, and why.
    Skip(String),
}

/// One line of the report.
struct Check {
    what: &'static str,
    /// Whether CPU tuning needs it.
    required: bool,
    outcome: Outcome,
}

/// Runs every check, prints ✓/✗ lines, and returns whether everything CPU tuning needs works.
pub(crate) fn run(out: &mut impl Write) -> std::io::Result<bool> {
    let mut checks = Vec::new();
    let compiler = compiler();
    checks.push(check_compiler(&compiler));
    let cache = tunebox_cpu::default_cache_dir();
    let compiled = match &cache {
        Ok(cache) => check_compile(&compiler, cache),
        Err(e) => Outcome::Fail(
            format!("no kernel cache directory: {e}"),
            "set TUNEBOX_CACHE_DIR (or HOME) to a directory of yours".into(),
        ),
    };
    let compiled_ok = matches!(compiled, Outcome::Pass(_));
    checks.push(Check {
        what: "C kernel build",
        required: true,
        outcome: compiled,
    });
    if let Ok(cache) = &cache {
        checks.push(Check {
            what: "kernel cache",
            required: true,
            outcome: check_cache_dir(cache),
        });
    }
    let (worker, probe) = check_worker();
    let worker_ok = matches!(worker.outcome, Outcome::Pass(_));
    checks.push(worker);
    checks.push(Check {
        what: "CPU benchmark",
        required: true,
        outcome: match (&cache, compiled_ok && worker_ok) {
            (Ok(_), true) => check_cpu_benchmark(&compiler),
            _ => Outcome::Skip("needs the C compiler and a worker".into()),
        },
    });
    let (cuda, device) = check_cuda(probe.as_ref());
    checks.push(Check {
        what: "CUDA driver",
        required: false,
        outcome: cuda,
    });
    checks.push(Check {
        what: "NVRTC",
        required: false,
        outcome: match device {
            Some(cc) => check_nvrtc(cc),
            None => Outcome::Skip("needs a GPU".into()),
        },
    });
    checks.push(Check {
        what: "sandbox",
        required: false,
        outcome: check_sandbox(),
    });

    let mut ok = true;
    for check in &checks {
        match &check.outcome {
            Outcome::Pass(detail) => writeln!(out, "✓ {}: {detail}", check.what)?,
            Outcome::Skip(why) => writeln!(out, "- {}: not checked ({why})", check.what)?,
            Outcome::Fail(what, fix) => {
                ok &= !check.required;
                let optional = if check.required {
                    ""
                } else {
                    " (optional: only CUDA manifests need it)"
                };
                writeln!(out, "✗ {}{optional}: {what}", check.what)?;
                writeln!(out, "    fix: {fix}")?;
            }
        }
    }
    writeln!(
        out,
        "{}",
        if ok {
            "everything CPU tuning needs works"
        } else {
            "CPU tuning will not work until the ✗ lines above are fixed"
        }
    )?;
    Ok(ok)
}

/// How long `doctor` waits for `<compiler> --version`.
const DOCTOR_COMPILER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// What `--sandbox` / `[sandbox]` gets on this machine, and what it lacks.
fn check_sandbox() -> Outcome {
    let support = SandboxSupport::probe();
    let mut have = Vec::new();
    if support.landlock_abi > 0 {
        have.push(format!("Landlock ABI {}", support.landlock_abi));
    }
    if support.seccomp {
        have.push("seccomp".to_owned());
    }
    if support.net_namespace {
        have.push("network namespace".to_owned());
    } else if support.user_namespace {
        have.push("user + network namespace".to_owned());
    }
    if support.pids_cgroup.is_some() {
        have.push("pids cgroup".to_owned());
    }
    if support.write_xor_execute {
        have.push("W^X".to_owned());
    }
    have.push(format!("workers held by {}", support.containment));
    let missing = support.missing(&Sandbox::new());
    let have = if have.is_empty() {
        "nothing".to_owned()
    } else {
        have.join(", ")
    };
    if missing.is_empty() {
        Outcome::Pass(format!("{have} (every protection of --sandbox)"))
    } else {
        Outcome::Pass(format!("{have}; missing here: {}", missing.join("; ")))
    }
}

fn check_compiler(compiler: &str) -> Check {
    let version = compiler_version(compiler, DOCTOR_COMPILER_TIMEOUT);
    Check {
        what: "C compiler",
        required: true,
        outcome: if version.is_empty() {
            Outcome::Fail(
                format!("`{compiler} --version` does not run, or does not answer within 10 s"),
                "install a C compiler (apt-get install gcc) or set CC to one".into(),
            )
        } else {
            Outcome::Pass(format!("{compiler}: {version}"))
        },
    }
}

fn c_request(compiler: &str) -> BenchmarkRequest {
    let mut request = BenchmarkRequest::new(Kernel::C({
        let mut kernel = CKernel::new(C_KERNEL, "tunebox_doctor")
            .source_name("doctor.c")
            .compiler(compiler);
        kernel.flags = vec!["-O2".into()];
        kernel
    }))
    .timing(
        TimingConfig::default()
            .warmup_ms(1.0)
            .rep_ms(2.0)
            .flush_cache(false),
    );
    request.tensors = vec![TensorSpec::new("x", DType::F32, vec![16]).output()];
    request
}

fn check_compile(compiler: &str, cache: &CacheDir) -> Outcome {
    let request = c_request(compiler);
    let Kernel::C(kernel) = &request.kernel else {
        unreachable!("a C request")
    };
    let start = Instant::now();
    match tunebox_cpu::compile(kernel, &Signature::of(&request), cache) {
        Ok(artifact) => Outcome::Pass(format!(
            "a tiny kernel {} in {:.0} ms",
            if artifact.was_cached() {
                "loaded from the cache"
            } else {
                "compiled"
            },
            start.elapsed().as_secs_f64() * 1e3
        )),
        Err(e) => Outcome::Fail(
            format!("a tiny kernel does not build: {:#}", anyhow::Error::new(e)),
            format!(
                "check that `{compiler} -shared -fPIC` works and that {} is writable by you \
                 alone",
                cache.path().display()
            ),
        ),
    }
}

fn check_cache_dir(cache: &CacheDir) -> Outcome {
    let path = cache.path();
    let fix_private = format!("chmod 700 {}", path.display());
    let metadata = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => {
            return Outcome::Fail(
                format!("{} cannot be read: {e}", path.display()),
                format!(
                    "mkdir -m 700 -p {}, or set TUNEBOX_CACHE_DIR to a directory of yours",
                    path.display()
                ),
            );
        }
    };
    if !metadata.is_dir() {
        return Outcome::Fail(
            format!("{} is not a directory", path.display()),
            "remove it, or set TUNEBOX_CACHE_DIR elsewhere".into(),
        );
    }
    let uid = rustix::process::getuid().as_raw();
    if metadata.uid() != uid {
        return Outcome::Fail(
            format!(
                "{} belongs to uid {}, not to you (uid {uid}); its objects would be loaded into \
                 your workers",
                path.display(),
                metadata.uid()
            ),
            "set TUNEBOX_CACHE_DIR to a directory of yours".into(),
        );
    }
    let mode = metadata.permissions().mode() & 0o777;
    if mode & 0o022 != 0 {
        return Outcome::Fail(
            format!(
                "{} is writable by others (mode {mode:o}): they could plant code in it",
                path.display()
            ),
            fix_private,
        );
    }
    let probe = path.join(format!(".doctor-{}", std::process::id()));
    match std::fs::write(&probe, b"ok").and_then(|()| std::fs::remove_file(&probe)) {
        Ok(()) => Outcome::Pass(format!(
            "{} (yours, mode {mode:o}, writable)",
            path.display()
        )),
        Err(e) => Outcome::Fail(
            format!("{} is not writable: {e}", path.display()),
            format!("chmod u+w {}", path.display()),
        ),
    }
}

/// Starts a worker (cold start), pings it, and probes its backends.
fn check_worker() -> (Check, Option<Probe>) {
    let fix = match std::env::var_os(WORKER_PATH_ENV) {
        Some(path) => format!(
            "{WORKER_PATH_ENV}={} is set: point it at a tunebox-worker of this version, or unset \
             it",
            path.to_string_lossy()
        ),
        None => "run with RUST_LOG=debug for details; the worker is this executable, started \
                 with TUNEBOX_WORKER_SERVER set"
            .into(),
    };
    let start = Instant::now();
    let config = ProcessConfig::new().stderr(Output::Capture { tail_bytes: 4096 });
    let mut worker = match TuningProcess::spawn(config) {
        Ok(worker) => worker,
        Err(e) => {
            let check = Check {
                what: "worker",
                required: true,
                outcome: Outcome::Fail(format!("cannot start a worker: {e}"), fix),
            };
            return (check, None);
        }
    };
    let cold = start.elapsed();
    let ping = worker.ping(Duration::from_secs(10));
    let probe = worker.probe(PROBE_TIMEOUT);
    // The worker's exit status is of no interest.
    let _ = worker.shutdown(Duration::from_millis(500));
    let outcome = match (&ping, &probe) {
        (Ok(rtt), Ok(probe)) => Outcome::Pass(format!(
            "started in {:.1} ms, ping {:.0} µs, backends: {}",
            cold.as_secs_f64() * 1e3,
            rtt.as_secs_f64() * 1e6,
            probe.backends.join(", ")
        )),
        (Err(e), _) | (_, Err(e)) => {
            Outcome::Fail(format!("the worker started but does not answer: {e}"), fix)
        }
    };
    let check = Check {
        what: "worker",
        required: true,
        outcome,
    };
    (check, probe.ok())
}

fn check_cpu_benchmark(compiler: &str) -> Outcome {
    let result =
        TuningProcess::spawn(ProcessConfig::new().stderr(Output::Capture { tail_bytes: 4096 }))
            .and_then(|mut worker| {
                let result = worker.benchmark(c_request(compiler), Duration::from_secs(30));
                let _ = worker.shutdown(Duration::from_millis(500));
                result
            });
    match result {
        Ok(result) => Outcome::Pass(format!(
            "a tiny kernel ran in a worker ({} reps, median {:.2} µs)",
            result.stats.reps,
            result.stats.median_ms * 1e3
        )),
        Err(e) => Outcome::Fail(
            format!("a tiny kernel failed in a worker: {e}"),
            "run `tunebox tune` with -v for details".into(),
        ),
    }
}

/// The CUDA line, and the first GPU's compute capability when there is one.
fn check_cuda(probe: Option<&Probe>) -> (Outcome, Option<(u32, u32)>) {
    let Some(probe) = probe else {
        return (Outcome::Skip("needs a worker".into()), None);
    };
    if let Some(d) = probe.devices.first() {
        let more = match probe.devices.len() {
            1 => String::new(),
            n => format!(" (+{} more)", n - 1),
        };
        return (
            Outcome::Pass(format!(
                "{}, compute capability {}.{}, {:.0} GiB{more}",
                d.name,
                d.compute_capability.0,
                d.compute_capability.1,
                d.total_memory_bytes as f64 / (1u64 << 30) as f64
            )),
            Some(d.compute_capability),
        );
    }
    let outcome = match probe.unavailable.iter().find(|(b, _)| b == "cuda") {
        Some((_, why)) => Outcome::Fail(
            format!("the worker's cuda backend is unavailable: {why}"),
            "install the NVIDIA driver (R580+ for CUDA 13) and check `nvidia-smi`; in a \
             container, run it with the GPU exposed (--gpus all)"
                .into(),
        ),
        None if !probe.backends.iter().any(|b| b == "cuda") => Outcome::Fail(
            "this tunebox's worker has no cuda backend".into(),
            "use a tunebox built with the CUDA backend (tunebox-cuda)".into(),
        ),
        None => Outcome::Fail(
            "the worker sees no GPU".into(),
            "check CUDA_VISIBLE_DEVICES and `nvidia-smi`".into(),
        ),
    };
    (outcome, None)
}

/// Compiles a tiny kernel with NVRTC in a worker.
fn check_nvrtc(cc: (u32, u32)) -> Outcome {
    let request = {
        let mut request = BenchmarkRequest::new(Kernel::Cuda(
            CudaKernel::from_code(
                CudaCode::Source {
                    text: CUDA_KERNEL.into(),
                    name: "doctor.cu".into(),
                },
                "tunebox_doctor",
            )
            .launch(LaunchConfig::new([1, 1, 1], [32, 1, 1])),
        ));
        request.tensors = vec![TensorSpec::new("x", DType::F32, vec![32])];
        request
    };
    let result = TuningProcess::spawn(ProcessConfig::new()).and_then(|mut worker| {
        let result = worker.prepare(request, PROBE_TIMEOUT);
        let _ = worker.shutdown(Duration::from_millis(500));
        result
    });
    match result {
        Ok(()) => Outcome::Pass(format!(
            "a tiny kernel compiled for sm_{}{} and loaded",
            cc.0, cc.1
        )),
        Err(e) => Outcome::Fail(
            format!("a tiny kernel does not compile or load: {e}"),
            "put libnvrtc.so.13 and libnvrtc-builtins on the loader path (LD_LIBRARY_PATH), \
             e.g. from the CUDA toolkit or the nvidia-cuda-nvrtc wheel"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tunebox_protocol::{BenchError, DeviceInfo};

    fn probe(backends: &[&str], unavailable: bool, gpu: bool) -> Probe {
        Probe::new(backends.iter().map(|b| (*b).to_owned()).collect())
            .with_devices(if gpu {
                vec![
                    DeviceInfo::new(0, "NVIDIA H200")
                        .with_uuid("GPU-0".into())
                        .with_compute_capability((9, 0))
                        .with_total_memory_bytes(141 << 30)
                        .with_l2_cache_bytes(60 << 20)
                        .with_sm_count(132)
                        .with_clock_khz(1_980_000)
                        .with_memory_clock_khz(3_201_000),
                ]
            } else {
                Vec::new()
            })
            .with_unavailable(if unavailable {
                vec![(
                    "cuda".into(),
                    BenchError::DriverUnavailable {
                        library: "libcuda.so.1".into(),
                        detail: "not found".into(),
                    },
                )]
            } else {
                Vec::new()
            })
    }

    fn fails_with(outcome: &Outcome, text: &str) -> bool {
        matches!(outcome, Outcome::Fail(what, _) if what.contains(text))
    }

    #[test]
    fn cuda_line_for_every_kind_of_worker() {
        // A worker built without the cuda backend.
        let (outcome, cc) = check_cuda(Some(&probe(&["cpu", "diagnostics"], false, false)));
        assert!(fails_with(&outcome, "has no cuda backend") && cc.is_none());
        // A cuda backend that cannot load the driver.
        let (outcome, cc) = check_cuda(Some(&probe(&["cpu", "cuda"], true, false)));
        assert!(fails_with(&outcome, "unavailable") && cc.is_none());
        // A driver that sees no device.
        let (outcome, _) = check_cuda(Some(&probe(&["cpu", "cuda"], false, false)));
        assert!(fails_with(&outcome, "sees no GPU"));
        // A GPU.
        let (outcome, cc) = check_cuda(Some(&probe(&["cpu", "cuda"], false, true)));
        assert!(matches!(outcome, Outcome::Pass(ref s) if s.contains("NVIDIA H200")));
        assert_eq!(cc, Some((9, 0)));
        // No worker at all.
        assert!(matches!(check_cuda(None).0, Outcome::Skip(_)));
    }
}
