//! The whole backend — probe, cudarc's dynamic loading, contexts, memory, launches, events,
//! flushes, faults — against a fake libcuda (`tests/mock/mock_cuda.c`), on machines without a
//! GPU.
//!
//! The loader reads `LD_LIBRARY_PATH` when a process starts, so each scenario runs in a child:
//! `backend_against_the_mock_driver` compiles the mock with the system C compiler, then re-runs
//! this test executable with only one `mock_child_*` test selected and the mock's directory on
//! `LD_LIBRARY_PATH`. Outside such a child the `mock_child_*` tests return at once.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use tunebox_bench::Backend;
use tunebox_cuda::{CacheDir, CudaBackend};
use tunebox_protocol::{
    Arg, BenchError, BenchmarkRequest, CudaCode, CudaKernel, DType, Init, Kernel, LaunchConfig,
    Scalar, TensorSpec, TimingConfig,
};

/// Set in the children, to the mock's directory.
const CHILD_ENV: &str = "TUNEBOX_MOCK_CUDA_DIR";

/// Builds `libcuda.so` from the mock's source, once per test process.
fn mock_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mock/mock_cuda.c");
        let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let status = Command::new(&compiler)
            .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
            .arg(dir.path().join("libcuda.so"))
            .arg(&source)
            .status()
            .unwrap_or_else(|e| panic!("cannot run {compiler}: {e}"));
        assert!(status.success(), "the mock driver does not compile");
        dir
    })
    .path()
}

/// Runs the test `name` of this executable in a child with the mock driver; returns its output.
fn run_child(name: &str, extra_env: &[(&str, &str)]) -> String {
    let dir = mock_dir();
    let output = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env("LD_LIBRARY_PATH", dir)
        .env(CHILD_ENV, dir)
        .env("RUST_BACKTRACE", "0")
        .envs(extra_env.iter().copied())
        .output()
        .expect("the test executable runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{name} failed:\n{text}");
    assert!(text.contains("1 passed"), "{name} did not run:\n{text}");
    text
}

#[test]
fn backend_against_the_mock_driver() {
    for name in [
        "mock_child_devices_and_a_cold_measurement",
        "mock_child_hot_and_unflushed_measurements",
        "mock_child_inputs_are_restored_and_outputs_checked",
        "mock_child_the_cuda_zoo_is_caught",
        "mock_child_invalid_launches_keep_the_backend",
        "mock_child_load_errors",
        "mock_child_sticky_fault",
    ] {
        let text = run_child(name, &[]);
        assert!(!text.contains("panicked at"), "{name}:\n{text}");
    }
    let text = run_child("mock_child_no_device", &[("MOCK_CUDA_NO_DEVICE", "1")]);
    assert!(!text.contains("panicked at"), "{text}");
}

/// Whether this process is a child with the mock driver loaded; `false` (skip) otherwise.
fn in_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// The mock's test hooks.
struct Mock(libloading::Library);

impl Mock {
    fn open() -> Self {
        let path = PathBuf::from(std::env::var_os(CHILD_ENV).unwrap()).join("libcuda.so");
        // SAFETY: the mock has no initializers; it is the library the backend loaded.
        Self(unsafe { libloading::Library::new(path) }.expect("the mock loads"))
    }

    fn log(&self) -> String {
        // SAFETY: `mock_cuda_log` has this signature and returns a NUL-terminated buffer.
        unsafe {
            let f = self
                .0
                .get::<unsafe extern "C" fn() -> *const std::ffi::c_char>(b"mock_cuda_log")
                .unwrap();
            std::ffi::CStr::from_ptr(f()).to_string_lossy().into_owned()
        }
    }

    fn live(&self) -> i32 {
        // SAFETY: `mock_cuda_live` has this signature.
        unsafe {
            self.0
                .get::<unsafe extern "C" fn() -> i32>(b"mock_cuda_live")
                .unwrap()()
        }
    }

    fn context_refs(&self) -> i32 {
        // SAFETY: `mock_cuda_context_refs` has this signature.
        unsafe {
            self.0
                .get::<unsafe extern "C" fn() -> i32>(b"mock_cuda_context_refs")
                .unwrap()()
        }
    }
}

const N: u64 = 1000;

/// PTX whose entries the mock finds by name, with their parameter lists.
const PTX: &str = "
.version 8.0
.target sm_90
.address_size 64
.visible .entry axpy(.param .u64 x, .param .u64 y, .param .u64 n) { ret; }
.visible .entry scribble(.param .u64 x, .param .u64 y, .param .u64 n) { ret; }
.visible .entry accumulate(.param .u64 y, .param .u64 n) { ret; }
.visible .entry heavy(.param .u64 x, .param .u64 y, .param .u64 n) { ret; }
.visible .entry illegal(.param .u64 x, .param .u64 y, .param .u64 n) { ret; }
.visible .entry memoize(.param .u64 x, .param .u64 y, .param .u64 n) { ret; }
.visible .entry once(.param .u64 x, .param .u64 y, .param .u64 n) { ret; }
.visible .entry late_write(.param .u64 x, .param .u64 y, .param .u64 n) { ret; }
.visible .entry hidden_work(.param .u64 x, .param .u64 y, .param .u64 n) { ret; }
";

fn tensor(name: &str, init: Init, output: bool) -> TensorSpec {
    let mut spec = TensorSpec::new(name, DType::F32, vec![N]).init(init);
    spec.output = output;
    spec
}

fn timing() -> TimingConfig {
    TimingConfig::default()
        .warmup_ms(1.0)
        .rep_ms(5.0)
        .min_reps(10)
        .max_reps(20)
}

/// `entry(x, y, n)` from [`PTX`], on 4 blocks of 256 threads.
fn request(entry: &str) -> BenchmarkRequest {
    let mut request = BenchmarkRequest::new(Kernel::Cuda(
        CudaKernel::from_code(CudaCode::Ptx(PTX.into()), entry)
            .launch(LaunchConfig::new([4, 1, 1], [256, 1, 1])),
    ))
    .timing(timing());
    request.tensors = vec![
        tensor("x", Init::Random { seed: 3 }, false),
        tensor("y", Init::Zeros, true),
    ];
    request.scalars = vec![Scalar::new("n", N as i64)];
    request
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

fn backend() -> CudaBackend {
    CudaBackend::with_cache(Some(CacheDir::new(std::env::temp_dir().join("unused"))))
}

/// The host bytes every backend derives from `x`'s spec.
fn x_values() -> Vec<f32> {
    let host =
        tunebox_bench::HostTensor::allocate(&tensor("x", Init::Random { seed: 3 }, false)).unwrap();
    floats(host.bytes())
}

#[test]
fn mock_child_devices_and_a_cold_measurement() {
    if !in_child() {
        return;
    }
    let mock = Mock::open();
    let mut backend = backend();
    let devices = backend.devices().unwrap();
    assert_eq!(devices.len(), 1);
    let device = &devices[0];
    assert_eq!(device.name, "Mock H200");
    assert_eq!(device.uuid, "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f");
    assert_eq!(device.compute_capability, (9, 0));
    assert_eq!(device.l2_cache_bytes, 1 << 20);
    assert_eq!((device.sm_count, device.clock_khz), (132, 1_980_000));

    let result = backend.benchmark(&request("axpy")).unwrap();
    let expected: Vec<f32> = x_values().iter().map(|x| 2.0 * x + 1.0).collect();
    assert_eq!(floats(&result.outputs[0].bytes), expected);
    assert_eq!(result.outputs_after_reps[0].bytes, result.outputs[0].bytes);
    assert!(result.mutated_inputs.is_empty());
    // The events bracket the kernel alone: not the flush, not the delay kernel.
    assert!(
        (result.stats.median_ms - 0.5).abs() < 1e-4,
        "{:?}",
        result.stats
    );
    assert!((10..=20).contains(&result.stats.reps));

    let log = mock.log();
    // A timed rep: flush (2 x 1 MiB of L2 = 524288 words), delay, start, kernel, end.
    let rep = "memset32 524288\nlaunch tunebox_delay grid=1,1,1 block=1,1,1 shared=0\nrecord\n\
               launch axpy grid=4,1,1 block=256,1,1 shared=0\nrecord\n";
    assert!(
        log.matches(rep).count() >= 15,
        "5 estimate runs and at least 10 reps follow a flush:\n{log}"
    );
    // The poisoned final call: outputs filled with 0xFF before it.
    assert!(log.contains("memset8 4000 0xff\nlaunch axpy"), "{log}");

    drop(backend);
    assert_eq!(mock.live(), 0, "leaked driver objects:\n{}", mock.log());
    assert_eq!(mock.context_refs(), 0);
}

#[test]
fn mock_child_hot_and_unflushed_measurements() {
    if !in_child() {
        return;
    }
    let mock = Mock::open();
    let mut backend = backend();
    let mut hot = request("axpy");
    hot.timing.hot = true;
    let result = backend.benchmark(&hot).unwrap();
    // Batches of back-to-back launches between one event pair, divided by their size.
    assert!(
        (result.stats.median_ms - 0.5).abs() < 1e-4,
        "{:?}",
        result.stats
    );
    assert!(
        mock.log()
            .contains("record\nlaunch axpy grid=4,1,1 block=256,1,1 shared=0\nlaunch axpy"),
        "no batch:\n{}",
        mock.log()
    );
    assert!(!mock.log().contains("memset32"), "hot mode does not flush");

    // On another thread (no context current there until the backend binds it), then dropped
    // there: every call reaches the context.
    let result = std::thread::spawn(move || {
        let mut cold_unflushed = request("axpy");
        cold_unflushed.timing.flush_cache = false;
        let result = backend.benchmark(&cold_unflushed);
        drop(backend);
        result
    })
    .join()
    .unwrap()
    .unwrap();
    assert!((result.stats.median_ms - 0.5).abs() < 1e-4);
    assert!(!mock.log().contains("memset32"), "flush_cache = false");
    assert_eq!(mock.live(), 0, "leaked driver objects");
    assert_eq!(mock.context_refs(), 0);
}

#[test]
fn mock_child_inputs_are_restored_and_outputs_checked() {
    if !in_child() {
        return;
    }
    let mock = Mock::open();
    let mut backend = backend();
    // `scribble` writes x[0] after computing y: restoring x before every call keeps y right.
    let result = backend.benchmark(&request("scribble")).unwrap();
    assert_eq!(result.mutated_inputs, ["x"]);
    assert_eq!(result.outputs_after_reps[0].bytes, result.outputs[0].bytes);
    assert_eq!(
        floats(&result.outputs[0].bytes)[0],
        2.0 * x_values()[0] + 1.0
    );

    // `accumulate` adds 1 to y: the first call gives 1, the poisoned final call NaN.
    let mut accumulate = request("accumulate");
    accumulate.tensors = vec![tensor("y", Init::Zeros, true)];
    let result = backend.benchmark(&accumulate).unwrap();
    assert!(floats(&result.outputs[0].bytes).iter().all(|&v| v == 1.0));
    assert!(
        floats(&result.outputs_after_reps[0].bytes)
            .iter()
            .all(|v| v.is_nan())
    );
    // With `reset`, y is zeroed before every call (a memset), and so is never poisoned.
    accumulate.tensors[0].reset = true;
    let result = backend.benchmark(&accumulate).unwrap();
    assert!(
        floats(&result.outputs_after_reps[0].bytes)
            .iter()
            .all(|&v| v == 1.0)
    );
    assert!(mock.log().contains("memset8 4000 0x00\nmemset32"));
}

/// The seed of the fresh-input call in the zoo's requests.
const FRESH: u64 = 0xF00D;

/// `2 x + 1` over `x`'s values drawn again with [`FRESH`].
fn fresh_expected() -> Vec<f32> {
    let spec =
        tunebox_bench::fresh_input_spec(&tensor("x", Init::Random { seed: 3 }, false), FRESH)
            .unwrap();
    let host = tunebox_bench::HostTensor::allocate(&spec).unwrap();
    floats(host.bytes()).iter().map(|x| 2.0 * x + 1.0).collect()
}

fn with_fresh_seed(entry: &str) -> BenchmarkRequest {
    let mut r = request(entry);
    r.timing.fresh_seed = Some(FRESH);
    r
}

fn suspicious_check(result: Result<tunebox_protocol::BenchmarkResult, BenchError>) -> String {
    match result {
        Err(BenchError::Suspicious { check, .. }) => check,
        other => panic!("not suspicious: {other:?}"),
    }
}

/// The CUDA zoo against the mock: an honest kernel passes every check; a memoizing one
/// replays its first answer on fresh inputs (where the poisoned call alone does not see it);
/// one that writes once leaves the poison; work finished after the stream said done, and work
/// the events do not bracket, are suspicious.
#[test]
fn mock_child_the_cuda_zoo_is_caught() {
    if !in_child() {
        return;
    }
    let mock = Mock::open();
    let mut backend = backend();
    let first: Vec<f32> = x_values().iter().map(|x| 2.0 * x + 1.0).collect();

    let honest = backend.benchmark(&with_fresh_seed("axpy")).unwrap();
    assert_eq!(floats(&honest.outputs[0].bytes), first);
    assert_eq!(
        floats(&honest.integrity.fresh_outputs[0].bytes),
        fresh_expected()
    );
    assert_ne!(fresh_expected(), first, "fresh inputs differ");
    assert!(
        honest.outputs_after_reps.is_empty(),
        "one call for both checks"
    );
    assert!(mock.log().contains("ctx-synchronize"), "{}", mock.log());

    // The reference (outputs only) makes its fresh-input call too.
    let mut reference = with_fresh_seed("axpy");
    reference.timing.outputs_only = true;
    let reference = backend.benchmark(&reference).unwrap();
    assert_eq!(
        floats(&reference.integrity.fresh_outputs[0].bytes),
        fresh_expected()
    );

    // Memoized: right on the same inputs even when poisoned, caught only on fresh ones.
    let memo = backend.benchmark(&request("memoize")).unwrap();
    assert_eq!(memo.outputs_after_reps[0].bytes, memo.outputs[0].bytes);
    let memo = backend.benchmark(&with_fresh_seed("memoize")).unwrap();
    assert_eq!(
        memo.integrity.fresh_outputs[0].bytes, memo.outputs[0].bytes,
        "replayed"
    );
    assert_ne!(
        floats(&memo.integrity.fresh_outputs[0].bytes),
        fresh_expected()
    );

    // Written once: the poison stays.
    let once = backend.benchmark(&with_fresh_seed("once")).unwrap();
    assert_eq!(floats(&once.outputs[0].bytes), first);
    assert!(
        floats(&once.integrity.fresh_outputs[0].bytes)
            .iter()
            .all(|v| v.is_nan())
    );

    assert_eq!(
        suspicious_check(backend.benchmark(&request("late_write"))),
        "outputs_changed_after_call"
    );
    assert_eq!(
        suspicious_check(backend.benchmark(&request("hidden_work"))),
        "work_outside_stream"
    );
    // An honest kernel after them is measured as before.
    assert!(backend.benchmark(&request("axpy")).is_ok());
    drop(backend);
    assert_eq!(mock.live(), 0, "leaked driver objects:\n{}", mock.log());
}

#[test]
fn mock_child_invalid_launches_keep_the_backend() {
    if !in_child() {
        return;
    }
    let mock = Mock::open();
    let mut backend = backend();
    let invalid =
        |request: &BenchmarkRequest, backend: &mut CudaBackend| match backend.benchmark(request) {
            Err(BenchError::InvalidLaunch { detail }) => detail,
            other => panic!("not an invalid launch: {other:?}"),
        };
    let with_launch = |entry: &str, block: [u32; 3], shared_mem_bytes: u32| {
        let mut r = request(entry);
        let Kernel::Cuda(k) = &mut r.kernel else {
            unreachable!()
        };
        k.launch.block = block;
        k.launch.shared_mem_bytes = shared_mem_bytes;
        r
    };
    let launches_before = mock.log().matches("launch axpy").count();
    let detail = invalid(&with_launch("axpy", [2048, 1, 1], 0), &mut backend);
    assert!(
        detail.contains("(requested 2048, allowed 1024)"),
        "{detail}"
    );
    let detail = invalid(&with_launch("heavy", [512, 1, 1], 0), &mut backend);
    assert!(detail.contains("255 registers per thread"), "{detail}");
    let detail = invalid(&with_launch("axpy", [256, 1, 1], 300_000), &mut backend);
    assert!(detail.contains("allowed 232448"), "{detail}");
    assert_eq!(mock.log().matches("launch axpy").count(), launches_before);

    // Above 48 KiB of dynamic shared memory: the backend opts in (the mock refuses otherwise).
    backend
        .benchmark(&with_launch("axpy", [256, 1, 1], 100_000))
        .unwrap();
    assert!(mock.log().contains("opt-in 100000"));

    // The kernel's parameters are checked against the request.
    let mut missing = request("axpy");
    missing.scalars.clear();
    let err = backend.benchmark(&missing).unwrap_err();
    assert!(
        err.to_string()
            .contains("kernel `axpy` takes 3 parameters, but the request passes 2 tensors and 0"),
        "{err}"
    );
    // A float scalar must meet a parameter of its own size (`n` is a .u64 here).
    let mut float = request("axpy");
    float.scalars[0] = Scalar::f32("n", 1.0);
    let err = backend.benchmark(&float).unwrap_err();
    assert!(
        err.to_string()
            .contains("parameter 2 of kernel `axpy` is 8 bytes, but scalar 0 is passed as a float"),
        "{err}"
    );
    // The argument order is checked before anything is loaded.
    let twice = request("axpy").args([Arg::Tensor(0), Arg::Tensor(0), Arg::Scalar(0)]);
    let err = backend.benchmark(&twice).unwrap_err();
    assert!(
        matches!(&err, BenchError::InvalidRequest { detail } if detail.contains("tensor 0 (`x`) is given twice")),
        "{err}"
    );
    // prepare checks the same, without measuring.
    let before = mock.log().len();
    let err = backend
        .prepare(&with_launch("axpy", [1, 1, 128], 0))
        .unwrap_err();
    assert!(matches!(err, BenchError::InvalidLaunch { .. }), "{err}");
    backend.prepare(&request("axpy")).unwrap();
    assert!(!mock.log()[before..].contains("launch"), "prepare launched");
    // And the backend still measures.
    backend.benchmark(&request("axpy")).unwrap();
}

#[test]
fn mock_child_load_errors() {
    if !in_child() {
        return;
    }
    let mut backend = backend();
    let mut bad = request("axpy");
    let Kernel::Cuda(k) = &mut bad.kernel else {
        unreachable!()
    };
    k.code = CudaCode::Ptx(format!("{PTX}\n// MOCK_BAD_PTX"));
    match backend.benchmark(&bad).unwrap_err() {
        BenchError::Load { path, detail } => {
            assert_eq!(path, "PTX");
            assert!(
                detail.contains("CUDA_ERROR_INVALID_PTX") && detail.contains("line 3"),
                "{detail}"
            );
        }
        other => panic!("{other:?}"),
    }
    match backend.benchmark(&request("missing")).unwrap_err() {
        BenchError::Load { detail, .. } => {
            assert!(detail.contains("no kernel `missing`"), "{detail}")
        }
        other => panic!("{other:?}"),
    }
    // A source needs NVRTC, which this child cannot load (only the mock is on its path) unless
    // the machine has it installed system-wide.
    let mut source = request("axpy");
    let Kernel::Cuda(k) = &mut source.kernel else {
        unreachable!()
    };
    k.code = CudaCode::Source {
        text: "extern \"C\" __global__ void axpy() {}".into(),
        name: "axpy.cu".into(),
    };
    match backend.benchmark(&source) {
        Err(BenchError::CompilerUnavailable { detail }) => {
            assert!(detail.contains("libnvrtc"), "{detail}")
        }
        other => eprintln!("NVRTC is installed here; skipped ({other:?})"),
    }
    backend.benchmark(&request("axpy")).unwrap();
}

#[test]
fn mock_child_sticky_fault() {
    if !in_child() {
        return;
    }
    let mock = Mock::open();
    let mut backend = backend();
    let err = backend.benchmark(&request("illegal")).unwrap_err();
    let BenchError::DeviceFault {
        code,
        name,
        message,
        sticky,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(
        (*code, name.as_str(), *sticky),
        (700, "CUDA_ERROR_ILLEGAL_ADDRESS", true)
    );
    assert!(
        message.contains("mock description of CUDA_ERROR_ILLEGAL_ADDRESS")
            && message.contains("running kernel `illegal`"),
        "{message}"
    );
    assert!(err.ends_worker());
    // Every later request gets the same error, without calling the driver again.
    let log = mock.log();
    assert_eq!(backend.benchmark(&request("axpy")).unwrap_err(), err);
    assert_eq!(backend.devices().unwrap_err(), err);
    assert_eq!(mock.log(), log);
}

#[test]
fn mock_child_no_device() {
    if !in_child() {
        return;
    }
    let mut backend = backend();
    for err in [
        backend.devices().unwrap_err(),
        backend.benchmark(&request("axpy")).unwrap_err(),
    ] {
        let BenchError::DriverUnavailable { library, detail } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(library, "libcuda.so");
        assert!(
            detail.contains("cuInit failed with CUDA_ERROR_NO_DEVICE (100)"),
            "{detail}"
        );
    }
}
