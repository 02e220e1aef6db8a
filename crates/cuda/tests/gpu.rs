//! Tests on a real GPU: `#[ignore = "needs a CUDA GPU"]`, run by `cargo xtask gpu-test` or the
//! GPU bundle's `run.sh` (`--ignored --test-threads=1`: concurrent measurements would perturb
//! each other).
//!
//! Each measurement prints a `tunebox-figure: NAME = VALUE` line; `run.sh` collects them for
//! `docs/gpu.md`. Faults lose the process's CUDA context, so each fault test runs its kernel in a
//! child process (this executable again, with one `child_*` test selected); outside such a
//! child those tests return at once.

use std::process::Command;

use tunebox_bench::Backend;
use tunebox_cuda::{CacheDir, CudaBackend};
use tunebox_protocol::{
    BenchError, BenchmarkRequest, BenchmarkResult, CudaCode, CudaKernel, DType, Define, Init,
    Kernel, LaunchConfig, Scalar, TensorSpec, TimingConfig,
};

const GPU: &str = "needs a CUDA GPU";
const CHILD_ENV: &str = "TUNEBOX_GPU_TEST_CHILD";

fn backend() -> CudaBackend {
    let dir = std::env::temp_dir().join(format!("tunebox-gpu-test-{}", std::process::id()));
    CudaBackend::with_cache(Some(CacheDir::new(dir)))
}

fn figure(name: &str, value: impl std::fmt::Display) {
    println!("tunebox-figure: {name} = {value}");
}

fn kernel(text: &str, entry: &str, grid: [u32; 3], block: [u32; 3]) -> CudaKernel {
    CudaKernel::from_code(
        CudaCode::Source {
            text: text.into(),
            name: format!("{entry}.cu"),
        },
        entry,
    )
    .launch(LaunchConfig::new(grid, block))
}

fn f32_tensor(name: &str, len: u64, init: Init, output: bool) -> TensorSpec {
    let mut spec = TensorSpec::new(name, DType::F32, vec![len]).init(init);
    spec.output = output;
    spec
}

fn scalar(name: &str, value: i64) -> Scalar {
    Scalar::new(name, value)
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

const SPIN: &str = r#"
extern "C" __global__ void spin(long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < (unsigned long long)ns);
}
"#;

const EMPTY: &str = r#"extern "C" __global__ void empty() {}"#;

const AXPY: &str = r#"
extern "C" __global__ void axpy(const float *x, float *y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}
"#;

fn axpy_request(n: u64) -> BenchmarkRequest {
    let mut request = BenchmarkRequest::new(Kernel::Cuda(kernel(
        AXPY,
        "axpy",
        [n.div_ceil(256) as u32, 1, 1],
        [256, 1, 1],
    )))
    .timing(TimingConfig::default().warmup_ms(5.0).rep_ms(20.0));
    request.tensors = vec![
        f32_tensor("x", n, Init::Random { seed: 1 }, false),
        f32_tensor("y", n, Init::Zeros, true),
    ];
    request.scalars = vec![scalar("n", n as i64)];
    request
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_devices_are_listed() {
    let _ = GPU;
    let devices = backend().devices().unwrap();
    assert!(!devices.is_empty());
    for d in &devices {
        println!("{d:?}");
        assert!(!d.name.is_empty() && d.uuid.starts_with("GPU-"), "{d:?}");
        assert!(d.compute_capability >= (7, 5), "{d:?}");
        assert!(d.l2_cache_bytes > 0 && d.sm_count > 0 && d.total_memory_bytes > 0);
    }
    figure("device", &devices[0].name);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_axpy_is_correct_and_verified_twice() {
    let n = 1 << 20;
    let result = backend().benchmark(&axpy_request(n)).unwrap();
    let x =
        tunebox_bench::HostTensor::allocate(&f32_tensor("x", n, Init::Random { seed: 1 }, false))
            .unwrap();
    let expected: Vec<f32> = floats(x.bytes()).iter().map(|x| 2.0 * x + 1.0).collect();
    assert_eq!(floats(&result.outputs[0].bytes), expected);
    assert_eq!(result.outputs_after_reps[0].bytes, result.outputs[0].bytes);
    println!("{:?}", result.stats);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_spin_kernel_of_one_ms_is_measured_within_2_percent() {
    let request = {
        let mut request =
            BenchmarkRequest::new(Kernel::Cuda(kernel(SPIN, "spin", [1, 1, 1], [1, 1, 1])));
        request.scalars = vec![scalar("ns", 1_000_000)];
        request
    };
    let stats = backend().benchmark(&request).unwrap().stats;
    println!("{stats:?}");
    let error = (stats.median_ms - 1.0) / 1.0;
    figure("spin_1ms_median_ms", format!("{:.5}", stats.median_ms));
    figure("spin_1ms_error_pct", format!("{:+.3}", 100.0 * error));
    assert!(error.abs() < 0.02, "median {} ms", stats.median_ms);
}

fn empty_request(flush_cache: bool, hot: bool) -> BenchmarkRequest {
    BenchmarkRequest::new(Kernel::Cuda(kernel(EMPTY, "empty", [1, 1, 1], [32, 1, 1])))
        .timing(TimingConfig::default().flush_cache(flush_cache).hot(hot))
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_empty_kernel_flush_on_and_off_differ_by_under_3_us() {
    let mut backend = backend();
    let on = backend
        .benchmark(&empty_request(true, false))
        .unwrap()
        .stats;
    let off = backend
        .benchmark(&empty_request(false, false))
        .unwrap()
        .stats;
    let hot = backend
        .benchmark(&empty_request(false, true))
        .unwrap()
        .stats;
    println!("flush on: {on:?}\nflush off: {off:?}\nhot: {hot:?}");
    figure("empty_flush_on_us", format!("{:.2}", on.median_ms * 1e3));
    figure("empty_flush_off_us", format!("{:.2}", off.median_ms * 1e3));
    figure("empty_hot_us", format!("{:.2}", hot.median_ms * 1e3));
    assert!(
        (on.median_ms - off.median_ms).abs() < 0.003,
        "flush on {} ms, off {} ms",
        on.median_ms,
        off.median_ms
    );
    assert!(hot.median_ms < 0.05, "hot {} ms", hot.median_ms);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_nvrtc_errors_name_the_line() {
    let text = "extern \"C\" __global__ void broken(float *y) {\n    y[0] = 1.0f\n}\n";
    let mut request = axpy_request(32);
    request.kernel = Kernel::Cuda(kernel(text, "broken", [1, 1, 1], [32, 1, 1]));
    match backend().benchmark(&request).unwrap_err() {
        BenchError::Compile { command, log } => {
            println!("{command}\n{log}");
            assert!(command.contains("--gpu-architecture=sm_"), "{command}");
            assert!(
                log.contains("broken.cu(2)") || log.contains("broken.cu(3)"),
                "{log}"
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_invalid_launches_are_refused_and_the_backend_goes_on() {
    let mut backend = backend();
    for (block, shared, limit) in [
        ([2048, 1, 1], 0, "maximum block dimension x"),
        ([512, 4, 1], 0, "maximum threads per block"),
        ([1, 1, 128], 0, "maximum block dimension z"),
        ([256, 1, 1], 1 << 20, "shared memory per block"),
    ] {
        let mut request = axpy_request(1024);
        let Kernel::Cuda(k) = &mut request.kernel else {
            unreachable!()
        };
        k.launch.block = block;
        k.launch.shared_mem_bytes = shared;
        match backend.benchmark(&request).unwrap_err() {
            BenchError::InvalidLaunch { detail } => {
                println!("{detail}");
                assert!(detail.contains(limit), "{detail}");
            }
            other => panic!("{other:?}"),
        }
    }
    // 100 KiB of dynamic shared memory needs the opt-in, which the backend makes.
    let mut request = axpy_request(1024);
    let Kernel::Cuda(k) = &mut request.kernel else {
        unreachable!()
    };
    k.launch.shared_mem_bytes = 100 * 1024;
    backend.benchmark(&request).unwrap();
}

/// `C = A x B` on the CPU, in f64.
/// The CUDA zoo at the backend (crate::integrity): kernels that cheat, each body run by
/// thread `i < n` of `zoo(x, y, n)`, with module globals declared by `globals`.
fn zoo_request(globals: &str, body: &str, n: u64) -> BenchmarkRequest {
    let text = format!(
        "{globals}\nextern \"C\" __global__ void zoo(const float *x, float *y, long long n) {{\n\
         long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n\
         if (i >= n) return;\n{body}\n}}\n"
    );
    let mut request = axpy_request(n);
    request.kernel = Kernel::Cuda(kernel(
        &text,
        "zoo",
        [n.div_ceil(256) as u32, 1, 1],
        [256, 1, 1],
    ));
    request.timing.fresh_seed = Some(0xF00D);
    request
}

/// `2 x + 1` over `request`'s x drawn again with its fresh seed.
fn fresh_expected(request: &BenchmarkRequest) -> Vec<f32> {
    let seed = request.timing.fresh_seed.unwrap();
    let spec = tunebox_bench::fresh_input_spec(&request.tensors[0], seed).unwrap();
    floats(tunebox_bench::HostTensor::allocate(&spec).unwrap().bytes())
        .iter()
        .map(|x| 2.0 * x + 1.0)
        .collect()
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_fresh_inputs_catch_a_memoizing_kernel_and_honest_ones_pass_every_check() {
    let n = 1 << 16;
    let mut backend = backend();
    let honest = zoo_request("", "y[i] = 2.0f * x[i] + 1.0f;", n);
    let result = backend.benchmark(&honest).unwrap();
    assert_eq!(
        floats(&result.integrity.fresh_outputs[0].bytes),
        fresh_expected(&honest)
    );

    let memo = zoo_request(
        "__device__ float memo[1 << 16]; __device__ unsigned char seen[1 << 16];",
        "if (!seen[i]) { memo[i] = 2.0f * x[i] + 1.0f; seen[i] = 1; } y[i] = memo[i];",
        n,
    );
    let result = backend.benchmark(&memo).unwrap();
    assert_eq!(
        result.integrity.fresh_outputs[0].bytes, result.outputs[0].bytes,
        "a memoized answer is replayed on fresh inputs"
    );
    assert_ne!(
        floats(&result.integrity.fresh_outputs[0].bytes),
        fresh_expected(&memo)
    );

    let once = zoo_request(
        "__device__ unsigned char written[1 << 16];",
        "if (!written[i]) { y[i] = 2.0f * x[i] + 1.0f; written[i] = 1; }",
        n,
    );
    let result = backend.benchmark(&once).unwrap();
    assert!(
        floats(&result.integrity.fresh_outputs[0].bytes)
            .iter()
            .all(|v| v.is_nan())
    );

    // A 5 ms spin, honest: its events and a device-wide wait agree (no work_outside_stream).
    let spin = {
        let mut request =
            BenchmarkRequest::new(Kernel::Cuda(kernel(SPIN, "spin", [1, 1, 1], [1, 1, 1])))
                .timing(TimingConfig::default().warmup_ms(10.0).rep_ms(50.0));
        request.scalars = vec![scalar("ns", 5_000_000)];
        request
    };
    backend.benchmark(&spin).unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_a_kernel_that_writes_nothing_gets_initialized_outputs_not_freed_memory() {
    let n = 1 << 16;
    let mut backend = backend();
    // The innocent candidate's output is freed when its request ends; the next request of the
    // same size likely gets that memory back.
    let honest = backend.benchmark(&axpy_request(n)).unwrap();
    assert!(floats(&honest.outputs[0].bytes).iter().any(|&v| v != 0.0));
    let lazy = backend.benchmark(&zoo_request("", "(void)x;", n)).unwrap();
    assert!(
        floats(&lazy.outputs[0].bytes).iter().all(|&v| v == 0.0),
        "the output is initialized before the first call"
    );
    assert!(
        floats(&lazy.integrity.fresh_outputs[0].bytes)
            .iter()
            .all(|v| v.is_nan())
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_input_mutation_is_reported_and_undone() {
    let n = 1 << 16;
    let mut backend = backend();
    let request = zoo_request("", "y[i] = 2.0f * x[i] + 1.0f; ((float *)x)[i] = -0.5f;", n);
    let result = backend.benchmark(&request).unwrap();
    assert_eq!(result.mutated_inputs, ["x"]);
    // x is put back (then drawn fresh) before every later call: the answers stay right.
    assert_eq!(
        floats(&result.integrity.fresh_outputs[0].bytes),
        fresh_expected(&request)
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_a_device_side_launch_onto_another_stream_fails_to_build() {
    // Work left to a grid on the fire-and-forget stream (the device's way to return early with
    // work still queued): it needs relocatable device code and the device runtime, which
    // tunebox does not link, so it fails to build. (Were it to run, a parent grid completes
    // only after its children, inside the measuring stream's events.)
    let request = zoo_request(
        "__global__ void later(const float *x, float *y, long long n) {\n\
         long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n\
         if (i < n) y[i] = 2.0f * x[i] + 1.0f; }",
        "if (i == 0) later<<<(unsigned)((n + 255) / 256), 256, 0, cudaStreamFireAndForget>>>(x, y, n);",
        1 << 16,
    );
    let result = backend().benchmark(&request);
    println!("{result:?}");
    assert!(
        matches!(result, Err(BenchError::Compile { .. })),
        "{result:?}"
    );
}

fn reference_matmul(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
    let mut c = vec![0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let sum: f64 = (0..k)
                .map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j]))
                .sum();
            c[i * n + j] = sum as f32;
        }
    }
    c
}

fn matmul_request(size: u64, choice: [(&str, u32); 5]) -> BenchmarkRequest {
    let source = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/kernels/matmul.cu"
    ))
    .or_else(|_| std::fs::read_to_string("examples/kernels/matmul.cu"))
    .expect("examples/kernels/matmul.cu (run from the bundle's folder or the repository)");
    let get = |name: &str| choice.iter().find(|(n, _)| *n == name).unwrap().1;
    let (bx, by, wm, wn) = (
        get("block_size_x"),
        get("block_size_y"),
        get("WM"),
        get("WN"),
    );
    let mut k = kernel(
        &source,
        "matmul",
        [
            (size as u32).div_ceil(bx * wn),
            (size as u32).div_ceil(by * wm),
            1,
        ],
        [bx, by, 1],
    );
    k.code = CudaCode::Source {
        text: source,
        name: "examples/kernels/matmul.cu".into(),
    };
    k.defines = choice
        .iter()
        .map(|(n, v)| Define::new(*n, v.to_string()))
        .collect();
    let matrix = |name: &str, init, output| {
        let mut spec = TensorSpec::new(name, DType::F32, vec![size, size]).init(init);
        spec.output = output;
        spec
    };
    {
        let mut request = BenchmarkRequest::new(Kernel::Cuda(k));
        request.tensors = vec![
            matrix("A", Init::Random { seed: 0 }, false),
            matrix("B", Init::Random { seed: 1 }, false),
            matrix("C", Init::Zeros, true),
        ];
        request.scalars = ["M", "N", "K"]
            .iter()
            .map(|n| scalar(n, size as i64))
            .collect();
        request
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_matmul_example_is_correct() {
    let mut backend = backend();
    let size = 256u64;
    let host = |r: &BenchmarkRequest, i: usize| {
        floats(
            tunebox_bench::HostTensor::allocate(&r.tensors[i])
                .unwrap()
                .bytes(),
        )
    };
    for choice in [
        [
            ("block_size_x", 16),
            ("block_size_y", 16),
            ("WM", 1),
            ("WN", 1),
            ("TILE_K", 16),
        ],
        [
            ("block_size_x", 32),
            ("block_size_y", 8),
            ("WM", 4),
            ("WN", 4),
            ("TILE_K", 16),
        ],
        [
            ("block_size_x", 16),
            ("block_size_y", 8),
            ("WM", 2),
            ("WN", 4),
            ("TILE_K", 32),
        ],
    ] {
        let request = matmul_request(size, choice);
        let result: BenchmarkResult = backend.benchmark(&request).unwrap();
        let expected = reference_matmul(
            &host(&request, 0),
            &host(&request, 1),
            size as usize,
            size as usize,
            size as usize,
        );
        for outputs in [&result.outputs, &result.outputs_after_reps] {
            let got = floats(&outputs[0].bytes);
            let worst = got
                .iter()
                .zip(&expected)
                .map(|(g, e)| (g - e).abs())
                .fold(0f32, f32::max);
            assert!(worst < 1e-3, "{choice:?}: max abs error {worst}");
        }
    }
    // One larger run, for the figures.
    let choice = [
        ("block_size_x", 32),
        ("block_size_y", 8),
        ("WM", 4),
        ("WN", 4),
        ("TILE_K", 16),
    ];
    let size = 1024u64;
    let stats = backend
        .benchmark(&matmul_request(size, choice))
        .unwrap()
        .stats;
    let gflops = 2.0 * (size as f64).powi(3) / (stats.median_ms * 1e-3) / 1e9;
    figure(
        "matmul_1024_32x8_4x4_16_median_ms",
        format!("{:.4}", stats.median_ms),
    );
    figure("matmul_1024_32x8_4x4_16_gflops", format!("{gflops:.0}"));
}

/// Runs the `child_*` test `name` in a child process and returns its output.
fn run_child(name: &str) -> String {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--ignored", "--nocapture"])
        .env(CHILD_ENV, "1")
        .output()
        .expect("the test executable runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success(), "{name}:\n{text}");
    assert!(text.contains("1 passed"), "{name} did not run:\n{text}");
    text
}

/// In a child: runs `body` of `entry`, expects a sticky fault with one of `codes`, and checks
/// that the backend then refuses everything with it.
fn expect_sticky(text: &str, entry: &str, codes: &[i32]) {
    let mut backend = backend();
    let n = 1024;
    let mut request = axpy_request(n);
    request.kernel = Kernel::Cuda(kernel(text, entry, [4, 1, 1], [256, 1, 1]));
    let err = backend.benchmark(&request).unwrap_err();
    println!("{err}");
    let BenchError::DeviceFault { code, sticky, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(*sticky && codes.contains(code), "{err:?}");
    figure(&format!("{entry}_error_code"), code);
    assert_eq!(backend.benchmark(&axpy_request(n)).unwrap_err(), err);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_trap_is_a_sticky_fault() {
    run_child("child_trap");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn child_trap() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let text =
        r#"extern "C" __global__ void trap(const float *x, float *y, long long n) { __trap(); }"#;
    // A trap is reported as an illegal instruction (715) or an unspecified launch failure (719).
    expect_sticky(text, "trap", &[715, 719]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_device_assert_is_a_sticky_fault() {
    run_child("child_assert");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn child_assert() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let text = r#"extern "C" __global__ void fails_assert(const float *x, float *y, long long n) {
        if (x[0] < 2.0f) __assertfail("x[0] >= 2", __FILE__, __LINE__, "fails_assert", 1);
    }"#;
    expect_sticky(text, "fails_assert", &[710]);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_illegal_address_is_a_sticky_fault() {
    run_child("child_illegal_address");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn child_illegal_address() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let text = r#"extern "C" __global__ void illegal(const float *x, float *y, long long n) {
        ((volatile float *)16)[threadIdx.x] = 1.0f;
    }"#;
    expect_sticky(text, "illegal", &[700]);
}
