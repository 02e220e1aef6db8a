//! Compiling and running real C kernels with the system compiler (`cc`). Every test uses its own
//! temporary cache directory; nothing touches the process environment or `~/.cache`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use tunebox_bench::Backend;
use tunebox_cpu::{CacheDir, CpuBackend, CpuError, Signature, compile};
use tunebox_protocol::{
    BenchError, BenchmarkRequest, CKernel, DType, Define, DiagnosticTask, Init, Kernel, Scalar,
    TensorSpec, TimingConfig,
};

const ADD: &str = "#include <stdint.h>\n\
                   void add(const float *a, const float *b, float *c, int64_t n) {\n\
                   \x20   for (int64_t i = 0; i < n; i++) c[i] = a[i] + b[i] + OFFSET;\n\
                   }\n";

fn add_kernel() -> CKernel {
    CKernel {
        source: ADD.into(),
        source_name: "kernels/add.c".into(),
        entry: "add".into(),
        defines: vec![Define::new("OFFSET", "0.5f")],
        flags: vec!["-O2".into()],
        compiler: "cc".into(),
    }
}

fn add_signature() -> Signature {
    Signature::new([DType::F32, DType::F32, DType::F32], 1)
}

fn tensor(name: &str, dtype: DType, len: u64, init: Init, output: bool) -> TensorSpec {
    TensorSpec {
        name: name.into(),
        dtype,
        shape: vec![len],
        init,
        output,
    }
}

fn quick_timing() -> TimingConfig {
    TimingConfig {
        warmup_ms: 0.5,
        rep_ms: 1.0,
        min_reps: 3,
        max_reps: 20,
        flush_cache: true,
    }
}

fn add_request(n: u64) -> BenchmarkRequest {
    BenchmarkRequest {
        kernel: Kernel::C(add_kernel()),
        tensors: vec![
            tensor("a", DType::F32, n, Init::Random { seed: 1 }, false),
            tensor("b", DType::F32, n, Init::Ones, false),
            tensor("c", DType::F32, n, Init::Zeros, true),
        ],
        scalars: vec![Scalar {
            name: "n".into(),
            value: n as i64,
        }],
        timing: quick_timing(),
    }
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

fn compile_error(kernel: &CKernel, signature: &Signature) -> (String, String) {
    let cache = tempfile::tempdir().unwrap();
    match compile(kernel, signature, &CacheDir::new(cache.path())) {
        Err(CpuError::Compile { command, log }) => (command, log),
        other => panic!("expected a compile error, got {other:?}"),
    }
}

/// Files in `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn runs_a_kernel_and_returns_its_outputs() {
    let cache = tempfile::tempdir().unwrap();
    let mut backend = CpuBackend::new(CacheDir::new(cache.path()));
    assert_eq!(backend.name(), "cpu");
    let request = add_request(1000);
    let result = backend.benchmark(&request).unwrap();

    assert_eq!(result.outputs.len(), 1);
    let c = &result.outputs[0];
    assert_eq!(
        (c.name.as_str(), c.dtype, c.shape.as_slice()),
        ("c", DType::F32, &[1000][..])
    );
    let a = tunebox_bench::HostTensor::allocate(&request.tensors[0]).unwrap();
    let expected: Vec<f32> = floats(a.bytes()).iter().map(|x| x + 1.0 + 0.5).collect();
    assert_eq!(floats(&c.bytes), expected);

    let stats = &result.stats;
    assert!((3..=20).contains(&stats.reps), "{stats:?}");
    assert!(
        stats.min_ms >= 0.0 && stats.min_ms <= stats.median_ms && stats.median_ms <= stats.max_ms
    );

    // A second request reuses the cached artifact and the flush buffer.
    let again = backend.benchmark(&request).unwrap();
    assert_eq!(again.outputs, result.outputs);
    assert_eq!(
        entries(cache.path()).len(),
        1,
        "{:?}",
        entries(cache.path())
    );
}

#[test]
fn many_arguments_and_every_dtype() {
    // 20 arguments: more than any fixed arity table would have held.
    let mut params = Vec::new();
    let mut body = String::new();
    let types = [
        ("float", DType::F32),
        ("double", DType::F64),
        ("int32_t", DType::I32),
        ("int64_t", DType::I64),
        ("uint8_t", DType::U8),
    ];
    let mut tensors = Vec::new();
    for (i, (c, dtype)) in types.iter().cycle().take(15).enumerate() {
        params.push(format!("{c} *t{i}"));
        body.push_str(&format!(
            "    t{i}[0] = ({c})(s0 + s1 + s2 + s3 + s4 + {i});\n"
        ));
        tensors.push(tensor(&format!("t{i}"), *dtype, 1, Init::Zeros, true));
    }
    for i in 0..5 {
        params.push(format!("int64_t s{i}"));
    }
    let kernel = CKernel {
        source: format!(
            "#include <stdint.h>\nvoid many({}) {{\n{body}}}\n",
            params.join(", ")
        ),
        source_name: "many.c".into(),
        entry: "many".into(),
        defines: vec![],
        flags: vec![],
        compiler: "cc".into(),
    };
    let request = BenchmarkRequest {
        kernel: Kernel::C(kernel),
        tensors,
        scalars: (0..5)
            .map(|i| Scalar {
                name: format!("s{i}"),
                value: 10 * i,
            })
            .collect(),
        timing: TimingConfig {
            flush_cache: false,
            ..quick_timing()
        },
    };
    let cache = tempfile::tempdir().unwrap();
    let result = CpuBackend::new(CacheDir::new(cache.path()))
        .benchmark(&request)
        .unwrap();
    assert_eq!(result.outputs.len(), 15);
    for (i, out) in result.outputs.iter().enumerate() {
        let want = 100 + i as i64;
        let got = match out.dtype {
            DType::F32 => f32::from_ne_bytes(out.bytes[..4].try_into().unwrap()) as i64,
            DType::F64 => f64::from_ne_bytes(out.bytes[..8].try_into().unwrap()) as i64,
            DType::I32 => i32::from_ne_bytes(out.bytes[..4].try_into().unwrap()) as i64,
            DType::I64 => i64::from_ne_bytes(out.bytes[..8].try_into().unwrap()),
            DType::U8 => out.bytes[0] as i64,
        };
        assert_eq!(got, want, "{}", out.name);
    }
}

#[test]
fn syntax_error_cites_the_users_file_and_line() {
    let mut kernel = add_kernel();
    kernel.source = "#include <stdint.h>\n\nvoid add(const float *a, const float *b, float *c, int64_t n) {\n    c[0] = a[0] +;\n}\n".into();
    let (command, log) = compile_error(&kernel, &add_signature());
    assert!(log.contains("kernels/add.c:4:"), "{log}");
    assert!(
        command.starts_with("cc -O2 -DOFFSET=0.5f -fPIC -shared "),
        "{command}"
    );
    assert!(
        command.contains("-Werror=incompatible-pointer-types"),
        "{command}"
    );
}

#[test]
fn arity_mismatch_is_a_compile_error() {
    let mut kernel = add_kernel();
    kernel.source = "void add(float *a, float *b) { a[0] = b[0]; }".into();
    let (_, log) = compile_error(&kernel, &Signature::new([DType::F32; 3], 0));
    assert!(log.contains("too many arguments"), "{log}");
    let (_, log) = compile_error(&kernel, &Signature::new([DType::F32], 0));
    assert!(log.contains("too few arguments"), "{log}");
}

#[test]
fn wrong_pointer_type_is_a_compile_error() {
    let mut kernel = add_kernel();
    kernel.source = "void add(float *x) { x[0] = 1; }".into();
    let (_, log) = compile_error(&kernel, &Signature::new([DType::F64], 0));
    assert!(log.contains("incompatible-pointer-types"), "{log}");
    // A tensor where the entry takes an integer.
    kernel.source = "#include <stdint.h>\nvoid add(int64_t n) { (void)n; }".into();
    let (_, log) = compile_error(&kernel, &Signature::new([DType::F32], 0));
    assert!(log.contains("int-conversion"), "{log}");
}

#[test]
fn missing_entry_is_a_compile_error() {
    let mut kernel = add_kernel();
    kernel.entry = "sub".into();
    let (_, log) = compile_error(&kernel, &add_signature());
    assert!(log.contains("implicit") && log.contains("sub"), "{log}");
}

#[test]
fn second_compile_is_a_cache_hit() {
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = CacheDir::new(cache_dir.path());
    let first = compile(&add_kernel(), &add_signature(), &cache).unwrap();
    assert!(!first.was_cached());
    assert_eq!(
        first.path(),
        cache_dir.path().join(format!("{}.so", first.key()))
    );
    let mtime = fs::metadata(first.path()).unwrap().modified().unwrap();

    let second = compile(&add_kernel(), &add_signature(), &cache).unwrap();
    assert!(second.was_cached());
    assert_eq!(second.path(), first.path());
    assert_eq!(
        fs::metadata(second.path()).unwrap().modified().unwrap(),
        mtime
    );
    // No temporary source or object is left behind.
    assert_eq!(entries(cache_dir.path()), [format!("{}.so", first.key())]);
}

#[test]
fn different_defines_flags_or_signature_give_different_artifacts() {
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = CacheDir::new(cache_dir.path());
    let base = compile(&add_kernel(), &add_signature(), &cache).unwrap();

    let mut other = add_kernel();
    other.defines[0].value = "1.5f".into();
    let defined = compile(&other, &add_signature(), &cache).unwrap();
    assert_ne!(defined.path(), base.path());
    assert!(!defined.was_cached());

    let mut native = add_kernel();
    native.flags.push("-march=native".into());
    let native = compile(&native, &add_signature(), &cache).unwrap();
    assert_ne!(native.path(), base.path());
    assert_eq!(entries(cache_dir.path()).len(), 3);
}

#[test]
fn march_native_kernels_run() {
    let mut request = add_request(64);
    let Kernel::C(kernel) = &mut request.kernel else {
        unreachable!()
    };
    kernel.flags = vec!["-O3".into(), "-march=native".into()];
    let cache = tempfile::tempdir().unwrap();
    let result = CpuBackend::new(CacheDir::new(cache.path()))
        .benchmark(&request)
        .unwrap();
    assert_eq!(result.outputs[0].bytes.len(), 64 * 4);
}

#[test]
fn missing_compiler_is_a_clear_error() {
    let mut kernel = add_kernel();
    kernel.compiler = "tunebox-no-such-cc".into();
    let cache = tempfile::tempdir().unwrap();
    let err = compile(&kernel, &add_signature(), &CacheDir::new(cache.path())).unwrap_err();
    assert!(
        matches!(&err, CpuError::CompilerNotFound { compiler } if compiler == "tunebox-no-such-cc")
    );
    let text = err.to_string();
    assert!(
        text.contains("`tunebox-no-such-cc`") && text.contains("set CC"),
        "{text}"
    );
}

#[test]
fn empty_source_or_entry_is_refused_before_compiling() {
    let cache = tempfile::tempdir().unwrap();
    let cache = CacheDir::new(cache.path().join("never-created"));
    let mut kernel = add_kernel();
    kernel.source = String::new();
    let err = compile(&kernel, &add_signature(), &cache).unwrap_err();
    assert!(
        err.to_string()
            .contains("kernels/add.c` has an empty source"),
        "{err}"
    );
    let mut kernel = add_kernel();
    kernel.entry = String::new();
    let err = compile(&kernel, &add_signature(), &cache).unwrap_err();
    assert!(matches!(err, CpuError::EmptyEntry { .. }), "{err}");
    assert!(!cache.path().exists());
}

#[test]
fn cache_dir_is_created_private() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("tunebox").join("cpu");
    compile(&add_kernel(), &add_signature(), &CacheDir::new(&dir)).unwrap();
    for d in [&dir, &root.path().join("tunebox")] {
        let mode = fs::metadata(d).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{}", d.display());
    }
}

#[test]
fn concurrent_compiles_of_one_key_share_one_artifact() {
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = CacheDir::new(cache_dir.path());
    let mut kernel = add_kernel();
    kernel.defines.push(Define::new("CONCURRENT", "1"));
    let artifacts: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..6)
            .map(|_| s.spawn(|| compile(&kernel, &add_signature(), &cache)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect()
    });
    assert!(artifacts.iter().all(|a| a.path() == artifacts[0].path()));
    assert_eq!(
        entries(cache_dir.path()),
        [format!("{}.so", artifacts[0].key())]
    );
}

#[test]
fn backend_errors_travel_as_bench_errors() {
    let cache = tempfile::tempdir().unwrap();
    let mut backend = CpuBackend::new(CacheDir::new(cache.path()));

    let diag = BenchmarkRequest::new(Kernel::Diagnostic(DiagnosticTask::Hang));
    let err = backend.benchmark(&diag).unwrap_err();
    assert!(
        matches!(&err, BenchError::InvalidRequest { detail } if detail.contains("diagnostics")),
        "{err}"
    );

    let mut bad = add_request(4);
    let Kernel::C(kernel) = &mut bad.kernel else {
        unreachable!()
    };
    kernel.source.push_str("int oops = ;\n");
    let err = backend.benchmark(&bad).unwrap_err();
    assert!(
        matches!(&err, BenchError::Compile { log, .. } if log.contains("kernels/add.c:5:")),
        "{err}"
    );

    let mut wrong = add_request(4);
    wrong.tensors.pop();
    let err = backend.benchmark(&wrong).unwrap_err();
    assert!(
        matches!(&err, BenchError::Compile { log, .. } if log.contains("too few arguments")),
        "{err}"
    );

    let mut unresolved = add_request(4);
    let Kernel::C(kernel) = &mut unresolved.kernel else {
        unreachable!()
    };
    kernel
        .source
        .push_str("void tunebox_missing(void);\nvoid use_it(void) { tunebox_missing(); }\n");
    let err = backend.benchmark(&unresolved).unwrap_err();
    assert!(
        matches!(&err, BenchError::Load { detail, .. } if detail.contains("tunebox_missing")),
        "{err}"
    );
}
