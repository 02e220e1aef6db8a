//! Kernels as Kernel Tuner passes them, with the system compilers (`cc`, `g++`): argument
//! orders with scalars first, typed scalars (`numpy.int32`, `numpy.float32`, `numpy.float64`),
//! C++ sources, pointers of GCC vector types, and OpenMP. Every test uses its own temporary
//! cache directory.

use tunebox_bench::Backend;
use tunebox_cpu::{CacheDir, CpuBackend, Language, Signature, compile};
use tunebox_protocol::{
    Arg, BenchError, BenchmarkRequest, BenchmarkResult, CKernel, DType, Scalar, ScalarKind,
    TensorSpec, TimingConfig,
};

fn quick() -> TimingConfig {
    TimingConfig::default()
        .warmup_ms(0.5)
        .rep_ms(1.0)
        .min_reps(3)
        .max_reps(10)
        .flush_cache(false)
}

fn run(request: BenchmarkRequest) -> Result<BenchmarkResult, BenchError> {
    let cache = tempfile::tempdir().unwrap();
    CpuBackend::new(CacheDir::new(cache.path())).benchmark(&request.timing(quick()))
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

fn doubles(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(8)
        .map(|c| f64::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

/// `k(int n, float *y)`: Kernel Tuner's `[numpy.int32(n), y]`, the scalar first.
#[test]
fn a_scalar_before_a_tensor() {
    const SOURCE: &str = "void fill(int n, float *y) { for (int i = 0; i < n; i++) y[i] = i; }";
    let request = BenchmarkRequest::new(CKernel::new(SOURCE, "fill"))
        .typed_scalar(Scalar::i32("n", 3))
        .tensor(TensorSpec::new("y", DType::F32, [4]).output());
    assert_eq!(request.args, [Arg::Scalar(0), Arg::Tensor(0)]);
    let result = run(request).unwrap();
    // Only the first n = 3 elements are written.
    assert_eq!(floats(&result.outputs[0].bytes), [0.0, 1.0, 2.0, 0.0]);

    // The same order given explicitly, with an `int64_t` scalar the prototype converts.
    let request = BenchmarkRequest::new(CKernel::new(SOURCE, "fill"))
        .tensor(TensorSpec::new("y", DType::F32, [4]).output())
        .scalar("n", 2)
        .args([Arg::Scalar(0), Arg::Tensor(0)]);
    let result = run(request).unwrap();
    assert_eq!(floats(&result.outputs[0].bytes), [0.0, 1.0, 0.0, 0.0]);
}

/// Each scalar is passed as its own C type: a `float` parameter gets `0.1f` exactly, a `double`
/// gets a value no `float` holds, an `int` and an `int64_t` beyond 32 bits keep their values.
#[test]
fn float_double_and_integer_scalars() {
    const SOURCE: &str = "#include <stdint.h>\n\
        void k(float a, double *out, double b, int32_t i, int64_t big, float *fout) {\n\
        \x20   out[0] = a; out[1] = b; out[2] = i; out[3] = (double)big;\n\
        \x20   fout[0] = a;\n\
        }\n";
    let big = (1i64 << 40) + 1;
    let request = BenchmarkRequest::new(CKernel::new(SOURCE, "k"))
        .typed_scalar(Scalar::f32("a", 0.1))
        .tensor(TensorSpec::new("out", DType::F64, [4]).output())
        .typed_scalar(Scalar::f64("b", 1.0 + 1e-12))
        .typed_scalar(Scalar::i32("i", -7))
        .scalar("big", big)
        .tensor(TensorSpec::new("fout", DType::F32, [1]).output());
    let result = run(request).unwrap();
    assert_eq!(
        doubles(&result.outputs[0].bytes),
        [f64::from(0.1f32), 1.0 + 1e-12, -7.0, big as f64]
    );
    assert_eq!(floats(&result.outputs[1].bytes), [0.1f32]);

    // A `double` scalar given to a `float` parameter is converted by the prototype.
    const NARROW: &str = "void k(float a, float *out) { out[0] = a; }";
    let request = BenchmarkRequest::new(CKernel::new(NARROW, "k"))
        .typed_scalar(Scalar::f64("a", 0.25))
        .tensor(TensorSpec::new("out", DType::F32, [1]).output());
    assert_eq!(floats(&run(request).unwrap().outputs[0].bytes), [0.25]);
}

#[test]
fn a_wrong_order_or_scalar_is_an_invalid_request() {
    const SOURCE: &str = "void fill(int n, float *y) { y[0] = n; }";
    let base = BenchmarkRequest::new(CKernel::new(SOURCE, "fill"))
        .typed_scalar(Scalar::i32("n", 1))
        .tensor(TensorSpec::new("y", DType::F32, [1]).output());
    let detail = |request: BenchmarkRequest| match run(request) {
        Err(BenchError::InvalidRequest { detail }) => detail,
        other => panic!("expected an invalid request, got {other:?}"),
    };
    let twice = detail(base.clone().args([Arg::Scalar(0), Arg::Scalar(0)]));
    assert!(
        twice.contains("scalar 0 (`n`) is given twice in the argument order (arguments 0 and 1)"),
        "{twice}"
    );
    let missing = detail(base.clone().args([Arg::Scalar(0)]));
    assert!(
        missing.contains("tensor 0 (`y`) is missing from the argument order"),
        "{missing}"
    );
    let range = detail(base.clone().args([Arg::Scalar(0), Arg::Tensor(1)]));
    assert!(
        range.contains(
            "argument 1 of the argument order is tensor 1, but the request has 1 tensors"
        ),
        "{range}"
    );
    let mut wide = base.clone();
    wide.scalars[0].value = 1 << 40;
    let wide = detail(wide);
    assert!(
        wide.contains("scalar `n` (i32) = 1099511627776 does not fit in an int32_t"),
        "{wide}"
    );
    let mut mixed = base;
    mixed.scalars[0].float = 0.5;
    let mixed = detail(mixed);
    assert!(mixed.contains("has the float value 0.5"), "{mixed}");

    // A signature compiled directly is checked too.
    let cache = tempfile::tempdir().unwrap();
    let err = compile(
        &CKernel::new(SOURCE, "fill"),
        &Signature::with_scalars([DType::F32], [ScalarKind::I32]).args([Arg::Scalar(0)]),
        &CacheDir::new(cache.path()),
    )
    .unwrap_err();
    let err = BenchError::from(err);
    assert!(
        matches!(&err, BenchError::InvalidRequest { detail } if detail.contains("tensor 0 is missing")),
        "{err}"
    );
}

/// C++ compiled with `g++`: the trampoline is `extern "C"`, so it is found; the entry may be a
/// C++ function (with an overload, even) or `extern "C"`.
#[test]
fn cxx_kernels_with_gxx() {
    const SOURCE: &str = "#include <vector>\n\
        template <typename T> static T twice(T x) { return x + x; }\n\
        void scale(float *y, int n) { std::vector<float> v(n, 1.5f); \
        for (int i = 0; i < n; i++) y[i] = twice(v[i]); }\n\
        void scale(double *y, int n) { y[0] = n; }\n";
    let kernel = CKernel::new(SOURCE, "scale").compiler("g++");
    assert_eq!(Language::of(&kernel), Language::Cxx);
    let request = BenchmarkRequest::new(kernel)
        .tensor(TensorSpec::new("y", DType::F32, [2]).output())
        .typed_scalar(Scalar::i32("n", 2));
    assert_eq!(floats(&run(request).unwrap().outputs[0].bytes), [3.0, 3.0]);

    // `cc` with a `.cpp` source name compiles C++ too.
    const EXTERN_C: &str = "extern \"C\" void k(float *y) { y[0] = sizeof(bool); }";
    let request = BenchmarkRequest::new(CKernel::new(EXTERN_C, "k").source_name("k.cpp"))
        .tensor(TensorSpec::new("y", DType::F32, [1]).output());
    assert_eq!(floats(&run(request).unwrap().outputs[0].bytes), [1.0]);
}

/// Pointer parameters of GCC vector types: a typed tensor is a compile error (the trampoline's
/// check), an untyped one is what Kernel Tuner passes, in C and in C++.
#[test]
fn vector_type_pointers_are_passed_untyped() {
    const SOURCE: &str = "typedef float vfloat __attribute__((vector_size(16)));\n\
        void vadd(vfloat *c, const vfloat *a, int n) {\n\
        \x20   for (int i = 0; i < n / 4; i++) c[i] = a[i] + a[i];\n\
        }\n";
    let request = |compiler: &str, args: [Arg; 3]| {
        let ramp: Vec<f32> = (0..8).map(|i| i as f32).collect();
        BenchmarkRequest::new(CKernel::new(SOURCE, "vadd").compiler(compiler))
            .tensor(TensorSpec::new("c", DType::F32, [8]).output())
            .tensor(TensorSpec::from_values("a", &ramp).unwrap())
            .typed_scalar(Scalar::i32("n", 8))
            .args(args)
    };
    let typed = [Arg::Tensor(0), Arg::Tensor(1), Arg::Scalar(0)];
    match run(request("cc", typed)) {
        Err(BenchError::Compile { log, .. }) => {
            assert!(log.contains("incompatible"), "{log}")
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    let untyped = [Arg::Untyped(0), Arg::Untyped(1), Arg::Scalar(0)];
    for compiler in ["cc", "g++"] {
        let result = run(request(compiler, untyped)).unwrap();
        let want: Vec<f32> = (0..8).map(|i| 2.0 * i as f32).collect();
        assert_eq!(floats(&result.outputs[0].bytes), want, "{compiler}");
    }
}

/// Kernel Tuner's C vector_add example with OpenMP, as written (C++, `extern "C"`, vector
/// types, `#pragma omp parallel`, a `float` return value the trampoline ignores), compiled with
/// `g++ -fopenmp -O3` and its tuning parameters as defines.
#[test]
fn kernel_tuners_openmp_vector_add_runs_as_written() {
    const SOURCE: &str = r#"
#include <omp.h>

typedef float vfloat __attribute__ ((vector_size (vecsize*4)));

extern "C" float vector_add(vfloat *c, vfloat *a, vfloat *b, int n) {
    double start = omp_get_wtime();
    int chunk = n/(vecsize*nthreads);

    #pragma omp parallel num_threads(nthreads)
    {
        int offset = omp_get_thread_num()*chunk;
        for (int i = offset; i<offset+chunk && i<n; i++) {
            c[i] = a[i] + b[i];
        }
    }

    return (float)((omp_get_wtime() - start)*1e3);
}
"#;
    let size = 1024u64;
    let a: Vec<f32> = (0..size).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..size).map(|i| 0.5 * i as f32).collect();
    for (vecsize, nthreads) in [(1, 1), (4, 2), (8, 4)] {
        let kernel = CKernel::new(SOURCE, "vector_add")
            .compiler("g++")
            .flags(["-fopenmp", "-O3"])
            .define("vecsize", vecsize)
            .define("nthreads", nthreads);
        let request = BenchmarkRequest::new(kernel)
            .tensor(TensorSpec::new("c", DType::F32, [size]).output())
            .tensor(TensorSpec::from_values("a", &a).unwrap())
            .tensor(TensorSpec::from_values("b", &b).unwrap())
            .typed_scalar(Scalar::i32("n", size as i32))
            .args([
                Arg::Untyped(0),
                Arg::Untyped(1),
                Arg::Untyped(2),
                Arg::Scalar(0),
            ]);
        let result = run(request).unwrap();
        let c = floats(&result.outputs[0].bytes);
        let want: Vec<f32> = (0..size).map(|i| 1.5 * i as f32).collect();
        assert_eq!(c, want, "vecsize {vecsize}, nthreads {nthreads}");
    }
}

/// A C kernel with `#pragma omp parallel for`, compiled with `cc -fopenmp`.
#[test]
fn openmp_parallel_for_in_c() {
    const SOURCE: &str = "void vector_add(float *c, const float *a, const float *b, int n) {\n\
        \x20   #pragma omp parallel for num_threads(nthreads)\n\
        \x20   for (int i = 0; i < n; i++) c[i] = a[i] + b[i];\n\
        }\n";
    let n = 4096u64;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let kernel = CKernel::new(SOURCE, "vector_add")
        .flags(["-fopenmp", "-O2"])
        .define("nthreads", 3);
    let request = BenchmarkRequest::new(kernel)
        .tensor(TensorSpec::new("c", DType::F32, [n]).output())
        .tensor(TensorSpec::from_values("a", &a).unwrap())
        .tensor(TensorSpec::from_values("b", &a).unwrap())
        .typed_scalar(Scalar::i32("n", n as i32));
    let result = run(request).unwrap();
    let want: Vec<f32> = (0..n).map(|i| 2.0 * i as f32).collect();
    assert_eq!(floats(&result.outputs[0].bytes), want);
}

/// Params and macros of the kernel's named as the trampoline's variables once were (`T`,
/// `pointer`, `tensors`, `scalars`: a param `T` is common) do not reach into it, in C and in
/// C++ with untyped tensors: every such kernel failed to compile.
#[test]
fn the_kernels_macros_do_not_reach_into_the_trampoline() {
    const SOURCE: &str = "void scale(float *y, const float *x, int n) {\n\
        \x20   for (int i = 0; i < n; i++) y[i] = T * x[i] + pointer + tensors + scalars;\n\
        }\n";
    for compiler in ["cc", "g++"] {
        let request =
            BenchmarkRequest::new(CKernel::new(SOURCE, "scale").compiler(compiler).flags([
                "-DT=2",
                "-Dpointer=0",
                "-Dtensors=0",
                "-Dscalars=1",
            ]))
            .tensor(TensorSpec::new("y", DType::F32, [4]).output())
            .tensor(TensorSpec::from_values("x", &[1.0f32, 2.0, 3.0, 4.0]).unwrap())
            .typed_scalar(Scalar::i32("n", 4))
            .args([Arg::Untyped(0), Arg::Untyped(1), Arg::Scalar(0)]);
        let result = run(request).unwrap_or_else(|e| panic!("{compiler}: {e}"));
        assert_eq!(
            floats(&result.outputs[0].bytes),
            [3.0, 5.0, 7.0, 9.0],
            "{compiler}"
        );
    }
}
