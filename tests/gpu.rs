//! GPU faults across worker processes (issue 6): a sticky fault costs its worker, a non-sticky
//! one does not, a hang costs a timeout. Needs a CUDA GPU and a worker whose standard registry
//! has the `cuda` backend (`tunebox_cuda::CudaBackend::new()`); every test is
//! `#[ignore = "needs a CUDA GPU"]`. Wire it in with `mod gpu;` in `main.rs`.

use std::time::{Duration, Instant};

use tunebox_process::{ProcessError, TuningProcess};
use tunebox_protocol::{BenchError, BenchmarkRequest, CudaKernel, DType, TensorSpec, TimingConfig};

use crate::util;

const N: u64 = 1 << 16;

/// `entry(x, y, n)` compiled from `body` (the statement run by each thread `i < n`).
fn cuda(entry: &str, body: &str, block_x: u32) -> BenchmarkRequest {
    let text = format!(
        "extern \"C\" __global__ void {entry}(const float *x, float *y, long long n) {{\n\
         long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;\n\
         if (i >= n) return;\n{body}\n}}\n"
    );
    let kernel = CudaKernel::new(text, entry)
        .source_name(format!("{entry}.cu"))
        .grid([(N as u32).div_ceil(block_x), 1, 1])
        .block([block_x, 1, 1]);
    BenchmarkRequest::new(kernel)
        .tensor(TensorSpec::new("x", DType::F32, [N]).random(1))
        .tensor(TensorSpec::new("y", DType::F32, [N]).output())
        .scalar("n", N as i64)
        .timing(TimingConfig::default().warmup_ms(2.0).rep_ms(10.0))
}

fn valid() -> BenchmarkRequest {
    cuda("axpy", "y[i] = 2.0f * x[i] + 1.0f;", 256)
}

fn sticky_code(result: Result<impl std::fmt::Debug, ProcessError>) -> i32 {
    match result {
        Err(ProcessError::Remote(BenchError::DeviceFault {
            code, sticky: true, ..
        })) => code,
        other => panic!("expected a sticky device fault, got {other:?}"),
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn trap_valid_invalid_launch_valid_assert_costs_exactly_two_restarts() {
    let mut process = TuningProcess::spawn(util::config()).unwrap();
    let first = process.pid().unwrap();

    let code = sticky_code(process.benchmark(cuda("trap", "__trap();", 256), util::LONG));
    assert!([715, 719].contains(&code), "{code}");
    assert_eq!(process.pid(), None, "the faulted worker is gone");

    process.benchmark(valid(), util::LONG).unwrap();
    let second = process.pid().unwrap();
    assert_ne!(second, first);

    match process.benchmark(cuda("axpy", "y[i] = 1.0f;", 2048), util::LONG) {
        Err(ProcessError::Remote(BenchError::InvalidLaunch { detail })) => {
            assert!(
                detail.contains("(requested 2048, allowed 1024)"),
                "{detail}"
            )
        }
        other => panic!("expected an invalid launch, got {other:?}"),
    }
    assert_eq!(
        process.pid(),
        Some(second),
        "an invalid launch keeps the worker"
    );

    process.benchmark(valid(), util::LONG).unwrap();
    assert_eq!(process.pid(), Some(second));

    let assert = "if (x[i] < 2.0f) __assertfail(\"x < 2\", __FILE__, __LINE__, \"a\", 1);";
    assert_eq!(
        sticky_code(process.benchmark(cuda("asserts", assert, 256), util::LONG)),
        710
    );
    process.benchmark(valid(), util::LONG).unwrap();
    let third = process.pid().unwrap();
    assert!(third != second && third != first);
    assert_eq!(process.restarts(), 2);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_hanging_kernel_times_out_and_the_next_one_runs_within_5_s() {
    let mut process = TuningProcess::spawn(util::config()).unwrap();
    let hang = cuda("hang", "volatile int forever = 1; while (forever) {}", 256);
    match process.benchmark(hang, Duration::from_secs(2)) {
        Err(ProcessError::Timeout { .. }) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    let start = Instant::now();
    process.benchmark(valid(), util::LONG).unwrap();
    let took = start.elapsed();
    println!(
        "tunebox-figure: after_hang_next_result_s = {:.2}",
        took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
}
