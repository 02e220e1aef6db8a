//! On a machine without the NVIDIA driver (CI, this project's development machines), the
//! backend answers every call with `DriverUnavailable` and nothing panics — checked in a child
//! process, as a worker would run it, so that a panic message on stderr cannot hide.

use std::process::Command;

use tunebox_bench::Backend;
use tunebox_cuda::CudaBackend;
use tunebox_protocol::{
    BenchError, BenchmarkRequest, CudaCode, CudaKernel, DType, Kernel, LaunchConfig, TensorSpec,
};

const CHILD_ENV: &str = "TUNEBOX_NO_GPU_CHILD";

/// Whether a CUDA driver library can be loaded here (then these tests have nothing to check).
fn driver_present() -> bool {
    cudarc::get_lib_name_candidates("cuda").iter().any(|name| {
        // SAFETY: only probing whether the driver library exists; it is closed at once.
        unsafe { libloading::Library::new(name) }.is_ok()
    })
}

fn request() -> BenchmarkRequest {
    let mut request = BenchmarkRequest::new(Kernel::Cuda(
        CudaKernel::from_code(
            CudaCode::Source {
                text: "extern \"C\" __global__ void k(float *y) { y[threadIdx.x] = 1.0f; }".into(),
                name: "k.cu".into(),
            },
            "k",
        )
        .launch(LaunchConfig::new([1, 1, 1], [32, 1, 1])),
    ));
    request
        .tensors
        .push(TensorSpec::new("y", DType::F32, vec![32]).output());
    request
}

#[test]
fn without_a_driver_every_call_is_driver_unavailable_and_nothing_panics() {
    if driver_present() {
        eprintln!("a CUDA driver is installed here: nothing to check");
        return;
    }
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["child_calls_the_backend", "--exact", "--nocapture"])
        .env(CHILD_ENV, "1")
        .output()
        .expect("the test executable runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("1 passed"), "{stdout}");
    assert!(!stderr.contains("panicked at"), "{stderr}");
    assert!(!stdout.contains("panicked at"), "{stdout}");
}

#[test]
fn child_calls_the_backend() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    // Construction never touches the driver.
    let mut backend = CudaBackend::new();
    assert_eq!(backend.name(), "cuda");
    let errors = [
        backend.devices().map(drop).unwrap_err(),
        backend.benchmark(&request()).map(drop).unwrap_err(),
        backend.prepare(&request()).unwrap_err(),
    ];
    for err in errors {
        let BenchError::DriverUnavailable { library, detail } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(library, "libcuda.so.1");
        assert!(detail.contains("NVIDIA driver"), "{detail}");
        assert!(
            !err.ends_worker(),
            "a missing driver must not restart workers"
        );
        println!("{err}");
    }
    // A malformed request is refused as such, before the driver is looked for.
    let mut empty = request();
    let Kernel::Cuda(kernel) = &mut empty.kernel else {
        unreachable!()
    };
    kernel.code = CudaCode::Source {
        text: String::new(),
        name: "empty.cu".into(),
    };
    let err = backend.benchmark(&empty).unwrap_err();
    assert!(matches!(err, BenchError::InvalidRequest { .. }), "{err:?}");
    // A kernel of another backend.
    let err = backend
        .benchmark(&BenchmarkRequest::new(Kernel::Diagnostic(
            tunebox_protocol::DiagnosticTask::Pid,
        )))
        .unwrap_err();
    assert!(err.to_string().contains("CUDA kernels only"), "{err}");
}
