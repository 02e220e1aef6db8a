//! Compiling and running real C kernels with the system compiler (`cc`). Every test uses its own
//! temporary cache directory; nothing touches the process environment or `~/.cache`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use tunebox_bench::Backend;
use tunebox_cpu::{
    Artifact, CacheDir, CompileControl, CpuBackend, CpuError, Signature, compile, compile_with,
};
use tunebox_protocol::{
    BenchError, BenchmarkRequest, CKernel, DType, Define, DiagnosticTask, Init, Kernel, Scalar,
    TensorSpec, TimingConfig,
};

const ADD: &str = "#include <stdint.h>\n\
                   void add(const float *a, const float *b, float *c, int64_t n) {\n\
                   \x20   for (int64_t i = 0; i < n; i++) c[i] = a[i] + b[i] + OFFSET;\n\
                   }\n";

fn add_kernel() -> CKernel {
    let mut kernel = CKernel::new(ADD, "add").source_name("kernels/add.c");
    kernel.defines = vec![Define::new("OFFSET", "0.5f")];
    kernel.flags = vec!["-O2".into()];
    kernel
}

fn add_signature() -> Signature {
    Signature::new([DType::F32, DType::F32, DType::F32], 1)
}

fn tensor(name: &str, dtype: DType, len: u64, init: Init, output: bool) -> TensorSpec {
    let mut spec = TensorSpec::new(name, dtype, vec![len]).init(init);
    spec.output = output;
    spec
}

fn quick_timing() -> TimingConfig {
    TimingConfig::default()
        .warmup_ms(0.5)
        .rep_ms(1.0)
        .min_reps(3)
        .max_reps(20)
        .flush_cache(true)
}

fn add_request(n: u64) -> BenchmarkRequest {
    let mut request = BenchmarkRequest::new(Kernel::C(add_kernel())).timing(quick_timing());
    request.tensors = vec![
        tensor("a", DType::F32, n, Init::Random { seed: 1 }, false),
        tensor("b", DType::F32, n, Init::Ones, false),
        tensor("c", DType::F32, n, Init::Zeros, true),
    ];
    request.scalars = vec![Scalar::new("n", n as i64)];
    request
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
        Err(CpuError::Compile { command, log, .. }) => (command, log),
        other => panic!("expected a compile error, got {other:?}"),
    }
}

/// The files an artifact occupies in its cache directory: `<base>.deps` and `<key>.so`, for each
/// of `artifacts`, sorted and without repeats.
fn cache_files<'a>(artifacts: impl IntoIterator<Item = &'a Artifact>) -> Vec<String> {
    let mut names: Vec<String> = artifacts
        .into_iter()
        .flat_map(|a| {
            let (base, deps) = a.key().split_once('-').unwrap();
            assert_eq!((base.len(), deps.len()), (64, 64), "{}", a.key());
            [
                format!("{base}.deps"),
                format!("{}.so", a.key()),
                format!("{}.so.blake3", a.key()),
            ]
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Files in `dir`, sorted (not folders: the kernel sources live in `src/`).
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| !e.file_type().unwrap().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
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
    // One dependency manifest, one object and its recorded hash.
    assert_eq!(
        entries(cache.path()).len(),
        3,
        "{:?}",
        entries(cache.path())
    );
}

/// `c = a + b`, then doubles `a` in place when `SCRIBBLE`: a kernel that writes its input.
const ADD_THEN_SCRIBBLE: &str = "#include <stdint.h>\n\
                   void add(float *a, const float *b, float *c, int64_t n) {\n\
                   \x20   for (int64_t i = 0; i < n; i++) c[i] = a[i] + b[i] + OFFSET;\n\
                   \x20   if (SCRIBBLE) for (int64_t i = 0; i < n; i += 1000) a[i] *= 2.0f;\n\
                   }\n";

#[test]
fn inputs_given_contents_are_read_in_place_and_a_kernel_writing_them_is_reported() {
    let cache = tempfile::tempdir().unwrap();
    let mut backend = CpuBackend::new(CacheDir::new(cache.path()));
    // 64 pages of floats, so that the contents can be mapped copy-on-write.
    let n = 16 * 4096;
    let scribbling = |scribble: bool, contents: bool| {
        let mut request = add_request(n);
        if let Kernel::C(kernel) = &mut request.kernel {
            kernel.source = ADD_THEN_SCRIBBLE.into();
            kernel
                .defines
                .push(Define::new("SCRIBBLE", if scribble { "1" } else { "0" }));
        }
        request.timing.fresh_seed = None;
        let made = request.tensors[0].make_contents().unwrap();
        if contents {
            request.tensors[0].contents = Some(made.share());
        }
        (request, made)
    };
    let (plain, _) = scribbling(false, false);
    let expected = backend.benchmark(&plain).unwrap();
    assert!(expected.mutated_inputs.is_empty());

    let (clean, _) = scribbling(false, true);
    let mapped = backend.benchmark(&clean).unwrap();
    assert!(
        mapped.mutated_inputs.is_empty(),
        "reading its input is no write"
    );
    assert_eq!(
        mapped.outputs, expected.outputs,
        "the same inputs either way"
    );

    let (scribbler, made) = scribbling(true, true);
    let before = made.as_slice().to_vec();
    let scribbled = backend.benchmark(&scribbler).unwrap();
    assert_eq!(scribbled.mutated_inputs, ["a"]);
    // Restored before every call: the call after the reps saw the original input too.
    assert_eq!(scribbled.outputs, expected.outputs);
    assert_eq!(scribbled.outputs_after_reps, expected.outputs);
    // The caller's contents were never written.
    assert_eq!(made.as_slice(), before.as_slice());
}

/// A kernel that spins 20 ms unless its input `a` reads as it was made (`a[0] == 1`), and
/// writes `a[0]`: each call after the first finds the input it changed unless the input is put
/// back before the call.
const SLOW_ON_ITS_OWN_WRITE: &str = "#include <stdint.h>\n\
    #include <time.h>\n\
    static double now_ms(void) {\n\
    \x20   struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);\n\
    \x20   return t.tv_sec * 1e3 + t.tv_nsec / 1e6;\n\
    }\n\
    void add(float *a, const float *b, float *c, int64_t n) {\n\
    \x20   if (a[0] != 1.0f) { double t0 = now_ms(); while (now_ms() - t0 < 20.0) {} }\n\
    \x20   for (int64_t i = 0; i < n; i++) c[i] = b[i];\n\
    \x20   if (WRITES) a[0] = 2.0f;\n\
    }\n";

/// A request that returns no outputs (a round's window) looks for written inputs once, after
/// its reps (that look also serves the input mappings the worker keeps); when it finds the
/// kernel wrote one, the reps are measured again with the input put back before each, as a
/// request that returns outputs measures them from its look after the first call. Both for an
/// input of the worker's own and one mapped copy-on-write from the caller's contents.
#[test]
fn a_window_returning_no_outputs_remeasures_a_kernel_that_wrote_its_input() {
    let cache = tempfile::tempdir().unwrap();
    let mut backend = CpuBackend::new(CacheDir::new(cache.path()));
    // 64 pages of floats, so that given contents are mapped copy-on-write.
    let n = 16 * 4096;
    for contents in [false, true] {
        for writes in [false, true] {
            for return_outputs in [true, false] {
                let mut request = add_request(n);
                if let Kernel::C(kernel) = &mut request.kernel {
                    kernel.source = SLOW_ON_ITS_OWN_WRITE.into();
                    kernel
                        .defines
                        .push(Define::new("WRITES", if writes { "1" } else { "0" }));
                }
                request.tensors[0] = tensor("a", DType::F32, n, Init::Ones, false);
                let made = request.tensors[0].make_contents().unwrap();
                if contents {
                    request.tensors[0].contents = Some(made.share());
                }
                request.timing = quick_timing()
                    .min_reps(5)
                    .max_reps(5)
                    .return_outputs(return_outputs);
                request.timing.fresh_seed = None;
                let case = format!(
                    "contents {contents}, writes {writes}, returns outputs {return_outputs}"
                );
                let result = backend.benchmark(&request).unwrap();
                let expected: &[&str] = if writes { &["a"] } else { &[] };
                assert_eq!(result.mutated_inputs, expected, "{case}");
                // Every rep on the input as made: none spun.
                assert!(
                    result.stats.max_ms < 10.0,
                    "{case}: a rep found the input the kernel changed ({} ms)",
                    result.stats.max_ms
                );
                assert_eq!(result.outputs.is_empty(), !return_outputs, "{case}");
            }
        }
    }
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
    let kernel = {
        let mut kernel = CKernel::new(
            format!(
                "#include <stdint.h>\nvoid many({}) {{\n{body}}}\n",
                params.join(", ")
            ),
            "many",
        )
        .source_name("many.c");
        kernel.flags = vec![];
        kernel
    };
    let request = {
        let mut request =
            BenchmarkRequest::new(Kernel::C(kernel)).timing(quick_timing().flush_cache(false));
        request.tensors = tensors;
        request.scalars = (0..5)
            .map(|i| Scalar::new(format!("s{i}"), 10 * i))
            .collect();
        request
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
        command.starts_with("cc -O2 -DOFFSET=0.5f -fPIC -Werror=") && command.contains(" -c "),
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
    // No temporary source, object or dependency file is left behind.
    assert_eq!(entries(cache_dir.path()), cache_files([&first]));
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
    assert_eq!(
        entries(cache_dir.path()),
        cache_files([&base, &defined, &native])
    );
    assert_eq!(entries(cache_dir.path()).len(), 9);
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
        text.contains("`tunebox-no-such-cc` was not found on PATH")
            && text.contains("CC or the manifest's `kernel.compiler`"),
        "{text}"
    );
}

/// `CC` as make users give it: a launcher before the compiler, flags after it.
#[test]
fn a_compiler_command_with_words_is_split_like_a_shell() {
    let cache = tempfile::tempdir().unwrap();
    let cache = CacheDir::new(cache.path());
    let mut kernel = add_kernel();
    // `env` runs the compiler, and the define comes from the command, not the flags.
    kernel.source = format!("#ifndef FROM_CC\n#error FROM_CC is not defined\n#endif\n{ADD}");
    kernel.compiler = "env 'TUNEBOX_UNUSED=a b' cc -DFROM_CC=1".into();
    let artifact = compile(&kernel, &add_signature(), &cache).unwrap();
    assert!(!artifact.was_cached());
    assert!(
        artifact
            .dependencies()
            .iter()
            .any(|d| d.ends_with("stdint.h")),
        "{:?}",
        artifact.dependencies()
    );
    let hit = compile(&kernel, &add_signature(), &cache).unwrap();
    assert!(hit.was_cached());
    assert_eq!(hit.dependencies(), artifact.dependencies());
    // A missing launcher is named as the program that was not found.
    kernel.compiler = "tunebox-no-such-launcher cc".into();
    let err = compile(&kernel, &add_signature(), &cache).unwrap_err();
    assert!(
        matches!(&err, CpuError::CompilerNotFound { compiler } if compiler == "tunebox-no-such-launcher"),
        "{err}"
    );
    kernel.compiler = "cc 'unbalanced".into();
    let err = compile(&kernel, &add_signature(), &cache).unwrap_err();
    assert!(
        err.to_string().contains("could not run the C compiler"),
        "{err}"
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
    assert_eq!(entries(cache_dir.path()), cache_files([&artifacts[0]]));
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

// Headers the kernel includes: the cache tracks their contents (`<base>.deps`).

const SCALE: &str = "#include <stdint.h>\n\
                     #include \"scale.h\"\n\
                     void scale(const float *x, float *y, int64_t n) {\n\
                     \x20   for (int64_t i = 0; i < n; i++) y[i] = SCALE * x[i];\n\
                     }\n";

/// A kernel that includes `scale.h` from `include_dir`, as the CLI does with `-I<source dir>`.
fn scale_kernel(include_dir: &Path) -> CKernel {
    let mut kernel = CKernel::new(SCALE, "scale").source_name("scale.c");
    kernel.flags = vec!["-O2".into(), format!("-I{}", include_dir.display())];
    kernel
}

fn scale_signature() -> Signature {
    Signature::new([DType::F32, DType::F32], 1)
}

/// Runs `kernel` (a `scale`) through the backend on ones and returns `y[0]`, i.e. `SCALE`.
fn run_scale(cache: &CacheDir, kernel: &CKernel) -> f32 {
    let request = {
        let mut request = BenchmarkRequest::new(Kernel::C(kernel.clone()))
            .timing(quick_timing().flush_cache(false));
        request.tensors = vec![
            tensor("x", DType::F32, 4, Init::Ones, false),
            tensor("y", DType::F32, 4, Init::Zeros, true),
        ];
        request.scalars = vec![Scalar::new("n", 4)];
        request
    };
    let result = CpuBackend::new(cache.clone()).benchmark(&request).unwrap();
    floats(&result.outputs[0].bytes)[0]
}

fn write(path: &Path, text: &str) {
    fs::write(path, text).unwrap();
}

#[test]
fn edited_headers_are_recompiled_and_variants_coexist() {
    let include = tempfile::tempdir().unwrap();
    let header = include.path().join("scale.h");
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = CacheDir::new(cache_dir.path());
    let kernel = scale_kernel(include.path());
    let compile = || compile(&kernel, &scale_signature(), &cache);

    write(&header, "#define SCALE 2.0f\n");
    let two = compile().unwrap();
    assert!(!two.was_cached());
    let again = compile().unwrap();
    assert!(again.was_cached());
    assert_eq!((again.path(), again.key()), (two.path(), two.key()));
    assert_eq!(run_scale(&cache, &kernel), 2.0);

    // The bug: an edited header used to load the stale object.
    write(&header, "#define SCALE 3.0f\n");
    let three = compile().unwrap();
    assert!(!three.was_cached());
    assert_ne!(three.path(), two.path());
    assert_eq!(three.key()[..64], two.key()[..64], "same base key");
    assert_eq!(run_scale(&cache, &kernel), 3.0);

    // Edited back: the first variant is still there.
    write(&header, "#define SCALE 2.0f\n");
    let back = compile().unwrap();
    assert!(back.was_cached());
    assert_eq!(back.path(), two.path());
    assert_eq!(run_scale(&cache, &kernel), 2.0);
    assert_eq!(entries(cache_dir.path()), cache_files([&two, &three]));

    // A deleted header is a compile error, not a stale hit.
    fs::remove_file(&header).unwrap();
    match compile() {
        Err(CpuError::Compile { log, .. }) => assert!(log.contains("scale.h"), "{log}"),
        other => panic!("expected a compile error, got {other:?}"),
    }
}

#[test]
fn a_header_that_gains_an_include_is_rebuilt() {
    let include = tempfile::tempdir().unwrap();
    let header = include.path().join("scale.h");
    let extra = include.path().join("extra.h");
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = CacheDir::new(cache_dir.path());
    let kernel = scale_kernel(include.path());
    let compile = || compile(&kernel, &scale_signature(), &cache).unwrap();

    write(&header, "#define SCALE 2.0f\n");
    let plain = compile();
    assert_eq!(run_scale(&cache, &kernel), 2.0);

    // The header now includes another one: a new dependency list.
    write(&extra, "#define EXTRA 4.0f\n");
    write(
        &header,
        "#include \"extra.h\"\n#define SCALE (EXTRA + 1.0f)\n",
    );
    let nested = compile();
    assert!(!nested.was_cached());
    assert_eq!(run_scale(&cache, &kernel), 5.0);

    // The nested header is tracked too.
    write(&extra, "#define EXTRA 6.0f\n");
    let nested6 = compile();
    assert!(!nested6.was_cached());
    assert_ne!(nested6.path(), nested.path());
    assert_eq!(run_scale(&cache, &kernel), 7.0);

    // Both lists are in the manifest: going back to either is a hit.
    write(&header, "#define SCALE 2.0f\n");
    let back = compile();
    assert!(back.was_cached());
    assert_eq!(back.path(), plain.path());
    assert_eq!(run_scale(&cache, &kernel), 2.0);
    // `extra.h` is no dependency of this variant: deleting it changes nothing.
    fs::remove_file(&extra).unwrap();
    assert_eq!(compile().path(), plain.path());
    write(&extra, "#define EXTRA 6.0f\n");
    write(
        &header,
        "#include \"extra.h\"\n#define SCALE (EXTRA + 1.0f)\n",
    );
    let forth = compile();
    assert!(forth.was_cached());
    assert_eq!(forth.path(), nested6.path());
    assert_eq!(run_scale(&cache, &kernel), 7.0);
}

#[test]
fn a_corrupt_manifest_is_a_miss() {
    let include = tempfile::tempdir().unwrap();
    write(&include.path().join("scale.h"), "#define SCALE 2.0f\n");
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = CacheDir::new(cache_dir.path());
    let kernel = scale_kernel(include.path());
    let compile = || compile(&kernel, &scale_signature(), &cache).unwrap();

    let first = compile();
    let base = &first.key()[..64];
    let manifest = cache_dir.path().join(format!("{base}.deps"));
    let good = fs::read(&manifest).unwrap();
    let text = String::from_utf8(good.clone()).unwrap();
    assert!(text.starts_with(&format!("tunebox-cpu deps v1\nbase {base}\nlist ")));
    assert!(
        text.contains("/scale.h\n") && text.ends_with("\nend\n"),
        "{text}"
    );

    let corruptions: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        ("truncated", good[..good.len() / 2].to_vec()),
        ("without its last newline", good[..good.len() - 1].to_vec()),
        ("garbage", (0..=255u8).cycle().take(5000).collect()),
        (
            "a huge count",
            format!("tunebox-cpu deps v1\nbase {base}\nlist 18446744073709551615\nend\n").into(),
        ),
        (
            "a missing file",
            format!("tunebox-cpu deps v1\nbase {base}\nlist 1\n/nonexistent/x.h\nend\n").into(),
        ),
        (
            "another base",
            text.replace(&format!("base {base}"), &format!("base {}", "0".repeat(64)))
                .into(),
        ),
        ("a bad escape", text.replace("scale.h", "scale\\q.h").into()),
    ];
    for (what, bytes) in corruptions {
        fs::write(&manifest, &bytes).unwrap();
        let rebuilt = compile();
        assert!(!rebuilt.was_cached(), "{what}");
        assert_eq!(rebuilt.path(), first.path(), "{what}");
        // Rewritten with the current list first (a valid but stale list may follow it).
        let rewritten = fs::read(&manifest).unwrap();
        assert!(
            rewritten.starts_with(&good[..good.len() - "end\n".len()])
                && rewritten.ends_with(b"end\n"),
            "{what}: {}",
            String::from_utf8_lossy(&rewritten)
        );
        assert!(compile().was_cached(), "{what}");
    }

    // A manifest whose artifact is gone is a miss too.
    fs::remove_file(first.path()).unwrap();
    let rebuilt = compile();
    assert!(!rebuilt.was_cached());
    assert!(rebuilt.path().is_file());
    assert_eq!(entries(cache_dir.path()), cache_files([&first]));
}

#[test]
fn odd_characters_in_paths_are_tracked() {
    // Spaces, `#`, `$` and `:` are all escaped (or not) differently in the compiler's `-MD` output.
    let root = tempfile::tempdir().unwrap();
    let include = root.path().join("inc lude #1 $x:y");
    let cache_dir = root.path().join("cache dir #2 $HOME a:b");
    fs::create_dir(&include).unwrap();
    let header = include.join("scale.h");
    write(&header, "#define SCALE 2.0f\n");
    let cache = CacheDir::new(&cache_dir);
    let kernel = scale_kernel(&include);
    let compile = || compile(&kernel, &scale_signature(), &cache).unwrap();

    let first = compile();
    assert!(!first.was_cached());
    assert!(compile().was_cached());
    let manifest = fs::read(cache_dir.join(format!("{}.deps", &first.key()[..64]))).unwrap();
    let manifest = String::from_utf8(manifest).unwrap();
    assert!(
        manifest.contains(&format!("\n{}\n", header.display())),
        "{manifest}"
    );
    assert!(
        !manifest.contains(".tunebox-"),
        "the temporary source is dropped: {manifest}"
    );

    write(&header, "#define SCALE 5.0f\n");
    assert!(!compile().was_cached());
    assert_eq!(run_scale(&cache, &kernel), 5.0);
}

#[test]
fn concurrent_compiles_with_a_header_agree() {
    let include = tempfile::tempdir().unwrap();
    let header = include.path().join("scale.h");
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = CacheDir::new(cache_dir.path());
    let kernel = scale_kernel(include.path());
    let many = || -> Vec<Artifact> {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..6)
                .map(|_| s.spawn(|| compile(&kernel, &scale_signature(), &cache)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap().unwrap())
                .collect()
        })
    };

    write(&header, "#define SCALE 2.0f\n");
    let first = many();
    assert!(first.iter().all(|a| a.path() == first[0].path()));
    write(&header, "#define SCALE 3.0f\n");
    let second = many();
    assert!(second.iter().all(|a| a.path() == second[0].path()));
    assert_ne!(second[0].path(), first[0].path());
    assert_eq!(run_scale(&cache, &kernel), 3.0);
    // No temporary file is left, and the manifest still finds both variants.
    assert_eq!(
        entries(cache_dir.path()),
        cache_files([&first[0], &second[0]])
    );
    write(&header, "#define SCALE 2.0f\n");
    assert!(
        many()
            .iter()
            .all(|a| a.was_cached() && a.path() == first[0].path())
    );
}

/// A compiler that runs `cc`, then rewrites `header` (always, or only the first time).
fn header_rewriting_compiler(dir: &Path, header: &Path, always: bool) -> String {
    let script = dir.join(if always { "cc-always" } else { "cc-once" });
    let marker = dir.join("rewritten");
    let rewrite = format!("echo '#define SCALE 9.0f' > '{}'", header.display());
    let body = if always {
        rewrite
    } else {
        format!(
            "if [ ! -e '{m}' ]; then : > '{m}'; {rewrite}; fi",
            m = marker.display()
        )
    };
    write(
        &script,
        &format!("#!/bin/sh\ncc \"$@\" || exit $?\n[ \"$1\" = --version ] && exit 0\n{body}\n"),
    );
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    // Another test's fork may briefly hold the new script open for writing (ETXTBSY): wait until
    // it can be executed.
    for _ in 0..100 {
        match std::process::Command::new(&script)
            .arg("--version")
            .output()
        {
            Err(e) if e.raw_os_error() == Some(26) => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            other => {
                assert!(other.unwrap().status.success());
                break;
            }
        }
    }
    script.to_string_lossy().into_owned()
}

#[test]
fn a_header_changed_during_compilation_is_not_cached_stale() {
    let include = tempfile::tempdir().unwrap();
    let header = include.path().join("scale.h");
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = CacheDir::new(cache_dir.path());

    // Rewritten once, while the first attempt compiles: the second attempt builds what is there.
    write(&header, "#define SCALE 2.0f\n");
    let mut kernel = scale_kernel(include.path());
    kernel.compiler = header_rewriting_compiler(include.path(), &header, false);
    let built = compile(&kernel, &scale_signature(), &cache).unwrap();
    assert!(!built.was_cached());
    assert_eq!(fs::read_to_string(&header).unwrap(), "#define SCALE 9.0f\n");
    assert_eq!(run_scale(&cache, &kernel), 9.0);

    // Rewritten on every attempt: an error, and nothing cached.
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = CacheDir::new(cache_dir.path());
    kernel.compiler = header_rewriting_compiler(include.path(), &header, true);
    match compile(&kernel, &scale_signature(), &cache) {
        Err(CpuError::DependencyChanged { path, source_name }) => {
            assert_eq!((path, source_name.as_str()), (header.clone(), "scale.c"));
        }
        other => panic!("expected DependencyChanged, got {other:?}"),
    }
    assert_eq!(entries(cache_dir.path()), Vec::<String>::new());
}

#[test]
fn a_cache_hit_runs_no_compiler_and_is_cheap() {
    let include = tempfile::tempdir().unwrap();
    write(&include.path().join("scale.h"), "#define SCALE 2.0f\n");
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = CacheDir::new(cache_dir.path());
    let kernel = scale_kernel(include.path());
    let first = compile(&kernel, &scale_signature(), &cache).unwrap();

    let mut times: Vec<std::time::Duration> = (0..101)
        .map(|_| {
            let start = std::time::Instant::now();
            let hit = compile(&kernel, &scale_signature(), &cache).unwrap();
            let elapsed = start.elapsed();
            assert!(hit.was_cached() && hit.path() == first.path());
            elapsed
        })
        .collect();
    times.sort();
    let median = times[times.len() / 2];
    eprintln!(
        "cache hit: median {median:?}, min {:?}, max {:?}",
        times[0],
        times[times.len() - 1]
    );
    // A compiler run takes tens of milliseconds; a hit hashes a few headers.
    assert!(median < std::time::Duration::from_millis(10), "{median:?}");
}

#[test]
fn a_tampered_or_truncated_artifact_is_rebuilt_not_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let cache = CacheDir::new(dir.path().join("cpu"));
    let first = compile(&add_kernel(), &add_signature(), &cache).unwrap();
    type Damage = fn(&Path);
    let damages: [(&str, Damage); 3] = [
        ("flipped byte", |p| {
            let mut bytes = fs::read(p).unwrap();
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0xFF;
            fs::write(p, bytes).unwrap();
        }),
        ("truncated", |p| {
            let bytes = fs::read(p).unwrap();
            fs::write(p, &bytes[..bytes.len() / 3]).unwrap();
        }),
        ("hash record removed", |p| {
            let mut record = p.as_os_str().to_owned();
            record.push(".blake3");
            fs::remove_file(record).unwrap();
        }),
    ];
    for (what, damage) in damages {
        damage(first.path());
        let damaged = fs::read(first.path()).unwrap();
        let again = compile(&add_kernel(), &add_signature(), &cache).unwrap();
        assert!(
            !again.was_cached(),
            "{what}: a damaged artifact must not be a hit"
        );
        assert_eq!(again.path(), first.path(), "{what}");
        let rebuilt = fs::read(again.path()).unwrap();
        assert!(
            rebuilt.starts_with(b"\x7fELF"),
            "{what}: rebuilt as a shared object"
        );
        if what != "hash record removed" {
            assert_ne!(rebuilt, damaged, "{what}: the damaged bytes were replaced");
        }
        assert!(
            compile(&add_kernel(), &add_signature(), &cache)
                .unwrap()
                .was_cached(),
            "{what}: the rebuilt artifact is a hit again"
        );
    }
}

#[test]
fn a_cache_directory_others_can_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("shared");
    fs::create_dir(&open).unwrap();
    fs::set_permissions(&open, fs::Permissions::from_mode(0o777)).unwrap();
    let err = compile(&add_kernel(), &add_signature(), &CacheDir::new(&open)).unwrap_err();
    assert!(matches!(err, CpuError::CacheDir { .. }), "{err:?}");
    let chain = format!("{:?}", anyhow_chain(&err));
    assert!(chain.contains("chmod 700"), "{chain}");
}

fn anyhow_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

// Compile deadlines: fake compilers (shell scripts) that hang.

/// Writes an executable `#!/bin/sh` script `name` into `dir` that answers `--ready` at once and
/// otherwise runs `body`; returns its path once it can be executed.
fn fake_compiler(dir: &Path, name: &str, body: &str) -> String {
    let script = dir.join(name);
    write(
        &script,
        &format!("#!/bin/sh\n[ \"$1\" = --ready ] && exit 0\n{body}\n"),
    );
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    // Another test's fork may briefly hold the new script open for writing (ETXTBSY).
    for _ in 0..500 {
        match std::process::Command::new(&script).arg("--ready").status() {
            Err(e) if e.raw_os_error() == Some(26) => std::thread::sleep(Duration::from_millis(10)),
            other => {
                assert!(other.unwrap().success());
                break;
            }
        }
    }
    script.to_string_lossy().into_owned()
}

/// The pid a fake compiler wrote to `path`, waiting up to a minute for it.
fn read_pid(path: &Path) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(text) = fs::read_to_string(path)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "{} was never written",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether `pid` is a live process (not gone, not a zombie waiting for a reaper).
fn alive(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// Asserts that every one of `pids` is gone within a few seconds (SIGKILL is delivered
/// asynchronously; a grandchild is reaped by init).
fn assert_gone(pids: &[u32]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|&p| alive(p)) {
        assert!(
            Instant::now() < deadline,
            "left behind: {:?}",
            pids.iter().filter(|&&p| alive(p)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn with_timeout(timeout: Duration) -> CompileControl<'static> {
    CompileControl {
        timeout,
        ..CompileControl::default()
    }
}

/// A fake compiler that answers `--version`, then on a compile writes its pid to `cc.pid`,
/// starts a background `sleep` (its pid to `child.pid`), prints a line and sleeps itself.
fn hanging_compiler(dir: &Path, name: &str) -> String {
    let d = dir.display();
    fake_compiler(
        dir,
        name,
        &format!(
            "[ \"$1\" = --version ] && {{ echo 'fake cc 1.0'; exit 0; }}\n\
             echo $$ > '{d}/cc.pid.tmp' && mv '{d}/cc.pid.tmp' '{d}/cc.pid'\n\
             sleep 300 &\n\
             echo $! > '{d}/child.pid.tmp' && mv '{d}/child.pid.tmp' '{d}/child.pid'\n\
             echo 'thinking very hard about templates' >&2\n\
             sleep 300\n"
        ),
    )
}

#[test]
fn a_hanging_compiler_is_killed_at_the_deadline_with_everything_it_started() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let mut kernel = add_kernel();
    kernel.compiler = hanging_compiler(dir.path(), "hang-cc");
    let timeout = Duration::from_secs(1);
    let start = Instant::now();
    let err = compile_with(
        &kernel,
        &add_signature(),
        &CacheDir::new(cache.path()),
        &with_timeout(timeout),
    )
    .unwrap_err();
    let took = start.elapsed();
    eprintln!(
        "hanging compiler: returned {:?} after the {timeout:?} deadline",
        took.saturating_sub(timeout)
    );
    let CpuError::CompileTimeout {
        command,
        after,
        log,
    } = &err
    else {
        panic!("expected a compile timeout, got {err:?}");
    };
    assert_eq!(*after, timeout);
    assert!(
        command.contains("hang-cc") && command.contains(" -o "),
        "{command}"
    );
    assert_eq!(log, "thinking very hard about templates");
    assert!(took >= timeout, "{took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    let message = err.to_string();
    assert!(
        message.starts_with("the C compiler did not finish within 1 s and was killed: `")
            && message.ends_with("its last output:\nthinking very hard about templates"),
        "{message}"
    );
    // The script and the `sleep`s it started (foreground and background) are all gone.
    let pids = [
        read_pid(&dir.path().join("cc.pid")),
        read_pid(&dir.path().join("child.pid")),
    ];
    assert_gone(&pids);
    // On the wire: a compile failure that says it timed out.
    let BenchError::Compile { log, .. } = BenchError::from(err) else {
        panic!("expected BenchError::Compile");
    };
    assert!(
        log.starts_with("timed out after 1 s and was killed"),
        "{log}"
    );
    // Nothing half-written is left in the cache.
    assert!(
        entries(cache.path())
            .iter()
            .all(|e| !e.starts_with(".tunebox-")),
        "{:?}",
        entries(cache.path())
    );
}

#[test]
fn a_cancelled_compile_is_killed_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let mut kernel = add_kernel();
    kernel.compiler = hanging_compiler(dir.path(), "cancel-cc");
    let child_pid = dir.path().join("child.pid");
    let cancelled_at = std::sync::OnceLock::new();
    // Cancel as soon as the compiler has started its helper.
    let cancel = || {
        let now = child_pid.exists();
        if now {
            let _ = cancelled_at.set(Instant::now());
        }
        now
    };
    let control = CompileControl {
        timeout: Duration::from_secs(120),
        cancel: Some(&cancel),
        ..CompileControl::default()
    };
    let err = compile_with(
        &kernel,
        &add_signature(),
        &CacheDir::new(cache.path()),
        &control,
    )
    .unwrap_err();
    let after_cancel = cancelled_at.get().expect("cancel said stop").elapsed();
    eprintln!("cancelled compiler: returned {after_cancel:?} after the cancel check said stop");
    assert!(
        matches!(&err, CpuError::CompileCancelled { command } if command.contains("cancel-cc")),
        "{err:?}"
    );
    assert!(after_cancel < Duration::from_secs(5), "{after_cancel:?}");
    assert_gone(&[read_pid(&dir.path().join("cc.pid")), read_pid(&child_pid)]);
    assert!(matches!(
        BenchError::from(err),
        BenchError::Failed { message } if message.starts_with("compilation cancelled: `")
    ));

    // Cancelled before it starts: nothing runs.
    let never = tempfile::tempdir().unwrap();
    kernel.compiler = hanging_compiler(never.path(), "never-cc");
    let stop = || true;
    let control = CompileControl {
        cancel: Some(&stop),
        ..CompileControl::default()
    };
    let err = compile_with(
        &kernel,
        &add_signature(),
        &CacheDir::new(cache.path()),
        &control,
    )
    .unwrap_err();
    assert!(matches!(err, CpuError::CompileCancelled { .. }), "{err:?}");
    assert!(!never.path().join("cc.pid").exists());
}

#[test]
fn a_hanging_version_probe_is_bounded_and_remembered() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let mut kernel = add_kernel();
    kernel.compiler = fake_compiler(
        dir.path(),
        "hang-version-cc",
        &format!(
            "echo probe >> '{d}/probes'\n\
             echo $$ > '{d}/cc.pid.tmp' && mv '{d}/cc.pid.tmp' '{d}/cc.pid'\n\
             exec sleep 300\n"
        ),
    );
    let probe = |timeout| {
        let start = Instant::now();
        let err = compile_with(
            &kernel,
            &add_signature(),
            &CacheDir::new(cache.path()),
            &with_timeout(timeout),
        )
        .unwrap_err();
        (err, start.elapsed())
    };
    let (err, took) = probe(Duration::from_secs(1));
    assert!(
        matches!(&err, CpuError::CompileTimeout { command, log, .. }
            if command.ends_with("hang-version-cc --version") && log == "(it printed nothing)"),
        "{err:?}"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_gone(&[read_pid(&dir.path().join("cc.pid"))]);
    // The same hang is not waited for again with the same timeout…
    let (err, _) = probe(Duration::from_secs(1));
    assert!(matches!(err, CpuError::CompileTimeout { .. }), "{err:?}");
    let probes = || {
        fs::read_to_string(dir.path().join("probes"))
            .unwrap()
            .lines()
            .count()
    };
    assert_eq!(probes(), 1);
    // …but a longer timeout tries again.
    let (err, _) = probe(Duration::from_millis(1500));
    assert!(matches!(err, CpuError::CompileTimeout { .. }), "{err:?}");
    assert_eq!(probes(), 2);
}

#[test]
fn a_chatty_hanging_compiler_reports_its_last_lines_only() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let mut kernel = add_kernel();
    kernel.compiler = fake_compiler(
        dir.path(),
        "chatty-cc",
        "[ \"$1\" = --version ] && { echo 'chatty cc'; exit 0; }\n\
         seq 1 200000 >&2\n\
         seq 1 100000\n\
         echo 'still going' >&2\n\
         exec sleep 300\n",
    );
    let err = compile_with(
        &kernel,
        &add_signature(),
        &CacheDir::new(cache.path()),
        &with_timeout(Duration::from_secs(2)),
    )
    .unwrap_err();
    let CpuError::CompileTimeout { log, .. } = &err else {
        panic!("expected a compile timeout, got {err:?}");
    };
    // About 1.3 MB was printed: only the last lines of each stream are kept, from a whole line.
    assert!(log.len() < 9 * 1024, "{} bytes", log.len());
    assert!(
        log.starts_with("[…]\n") && log.contains("\n199999\n200000\nstill going\n[…]\n"),
        "{log}"
    );
    assert!(log.ends_with("\n99999\n100000"), "{log}");
}

#[test]
fn a_compiler_that_floods_its_output_and_fails_gives_a_bounded_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut kernel = add_kernel();
    kernel.compiler = fake_compiler(
        dir.path(),
        "flood-cc",
        "[ \"$1\" = --version ] && { echo 'flood cc'; exit 0; }\n\
         seq -f 'error: number %g' 1 300000 >&2\n\
         exit 1\n",
    );
    let (_, log) = compile_error(&kernel, &add_signature());
    assert!(
        log.starts_with("error: number 1\nerror: number 2\n"),
        "{log}"
    );
    assert!(log.len() < 65 * 1024, "{} bytes", log.len());
    assert!(log.ends_with(" more bytes of compiler output]"), "{log}");
}

/// A compiler command that records each of its command lines in `log`, then runs `cc`.
fn logging_compiler(dir: &Path, log: &Path) -> String {
    let script = dir.join("logging-cc");
    fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\nexec cc \"$@\"\n",
            log.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    script.display().to_string()
}

/// A kernel that carries its compiler's identity (as the parent sends it to a fresh worker) is
/// found in the cache without running the compiler at all, not even `--version`; without it,
/// the probe runs. The identity is part of the key: another identity is another build.
#[test]
fn a_kernel_with_its_compilers_identity_runs_no_probe() {
    let tools = tempfile::tempdir().unwrap();
    let log = tools.path().join("commands.log");
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = CacheDir::new(cache_dir.path());
    let mut kernel = add_kernel();
    kernel.compiler = logging_compiler(tools.path(), &log);
    assert_eq!(tunebox_cpu::known_compiler_version(&kernel.compiler), None);
    let built = compile(&kernel, &add_signature(), &cache).unwrap();
    // What the compile found is known without running anything again.
    let identity = tunebox_cpu::known_compiler_version(&kernel.compiler).unwrap();
    assert!(identity.contains(' '), "{identity}");
    let commands = || fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(commands().matches("--version").count(), 1, "{}", commands());
    fs::remove_file(&log).unwrap();

    let given = kernel.clone().compiler_identity(identity);
    let hit = compile(&given, &add_signature(), &cache).unwrap();
    assert!(hit.was_cached() && hit.path() == built.path());
    assert_eq!(commands(), "", "a hit with the identity given runs nothing");

    let other = kernel.compiler_identity("cc (Other) 99.1");
    let rebuilt = compile(&other, &add_signature(), &cache).unwrap();
    assert!(!rebuilt.was_cached() && rebuilt.path() != built.path());
    assert!(!commands().contains("--version"), "{}", commands());
}

/// Compiling and linking are two commands (a compiler launcher such as ccache caches only the
/// first): the compile of a stable source, with `-c`, then the link of its object, without
/// the flags only compiling reads.
#[test]
fn compile_and_link_are_separate_commands() {
    let tools = tempfile::tempdir().unwrap();
    let log = tools.path().join("commands.log");
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = CacheDir::new(cache_dir.path());
    let mut kernel = add_kernel();
    kernel.compiler = logging_compiler(tools.path(), &log);
    kernel.flags = vec![
        "-O2".into(),
        "-I".into(),
        "/nonexistent".into(),
        "-lm".into(),
    ];
    let first = compile(&kernel, &add_signature(), &cache).unwrap();
    let commands = fs::read_to_string(&log).unwrap();
    let commands: Vec<&str> = commands
        .lines()
        .filter(|l| !l.contains("--version"))
        .collect();
    assert_eq!(commands.len(), 2, "{commands:?}");
    let (compile_line, link_line) = (commands[0], commands[1]);
    assert!(
        compile_line.contains(" -c ") && !compile_line.contains("-shared"),
        "{compile_line}"
    );
    assert!(compile_line.contains("-DOFFSET=0.5f") && compile_line.contains("-I /nonexistent"));
    assert!(
        compile_line.contains("/src/") && compile_line.ends_with(".c"),
        "{compile_line}"
    );
    assert!(
        link_line.contains("-shared") && link_line.ends_with(".o"),
        "{link_line}"
    );
    assert!(
        link_line.contains("-O2") && link_line.contains("-lm"),
        "{link_line}"
    );
    assert!(
        !link_line.contains("-DOFFSET") && !link_line.contains("/nonexistent"),
        "{link_line}"
    );
    // The object still runs, is cached, and nothing temporary is left.
    assert!(
        compile(&kernel, &add_signature(), &cache)
            .unwrap()
            .was_cached()
    );
    assert_eq!(entries(cache_dir.path()), cache_files([&first]));
}

/// With `CC="ccache cc"`, a build tunebox's own cache no longer has is a ccache hit (when
/// ccache is installed; `apt-get install ccache`).
#[test]
fn ccache_gets_hits_on_a_second_build() {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("ccache").is_file()));
    if !found {
        eprintln!(
            "skipped: ccache is not installed (compile_and_link_are_separate_commands checks the two commands)"
        );
        return;
    }
    let ccache_dir = tempfile::tempdir().unwrap();
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = CacheDir::new(cache_dir.path().join("cpu"));
    let mut kernel = add_kernel();
    kernel.compiler = format!("env CCACHE_DIR={} ccache cc", ccache_dir.path().display());
    let first = compile(&kernel, &add_signature(), &cache).unwrap();
    assert!(!first.was_cached());
    // tunebox's own cache is gone: the next build runs the compiler again, through ccache.
    fs::remove_dir_all(cache_dir.path().join("cpu")).unwrap();
    let second = compile(&kernel, &add_signature(), &cache).unwrap();
    assert!(!second.was_cached());
    assert_eq!(
        second.key(),
        first.key(),
        "the same headers, the same artifact key"
    );
    let stats = std::process::Command::new("ccache")
        .arg("--print-stats")
        .env("CCACHE_DIR", ccache_dir.path())
        .output()
        .unwrap();
    let stats = String::from_utf8_lossy(&stats.stdout).into_owned();
    let count = |name: &str| -> u64 {
        stats
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0)
    };
    assert!(
        count("direct_cache_hit") + count("preprocessed_cache_hit") >= 1,
        "{stats}"
    );
    assert_eq!(count("cache_miss"), 1, "{stats}");
}

// Compiles in the background: the lowest priority, and a compiler the machine starves.

/// A compile in the background runs at the lowest priority the kernel has: `SCHED_IDLE`
/// (policy 5) and nice 19, the compiler's children included.
#[test]
fn a_background_compile_runs_at_the_lowest_priority() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    // Fields 19 and 41 of /proc/<pid>/stat: nice and policy (`sh`'s comm has no spaces).
    let cc = fake_compiler(
        dir.path(),
        "idle-cc",
        &format!(
            "[ \"$1\" = --version ] && {{ echo 'fake cc 1.0'; exit 0; }}\n\
             sh -c 'cut -d\" \" -f19,41 /proc/$$/stat' > '{d}/priority'\nexit 1\n"
        ),
    );
    let kernel = {
        let mut v = add_kernel();
        v.compiler = cc;
        v
    };
    let cache = CacheDir::new(dir.path().join("cache"));
    let control = CompileControl {
        background: true,
        ..with_timeout(Duration::from_secs(60))
    };
    // Other tests keep the CPUs busy: a compile at the lowest priority may be starved before
    // its child writes anything (as it should be); the child's first line is what counts.
    let written = dir.path().join("priority");
    for _ in 0..20 {
        let err = compile_with(&kernel, &add_signature(), &cache, &control).unwrap_err();
        assert!(
            matches!(
                err,
                CpuError::Compile { .. } | CpuError::CompileStarved { .. }
            ),
            "{err}"
        );
        if fs::read_to_string(&written).is_ok_and(|t| !t.trim().is_empty()) {
            break;
        }
    }
    let priority = fs::read_to_string(&written).unwrap();
    assert_eq!(
        priority.trim(),
        "19 5",
        "nice and policy of the compiler's child"
    );
    // In the foreground, as this process runs.
    let control = with_timeout(Duration::from_secs(60));
    compile_with(&kernel, &add_signature(), &cache, &control).unwrap_err();
    let priority = fs::read_to_string(dir.path().join("priority")).unwrap();
    let stat = fs::read_to_string("/proc/self/stat").unwrap();
    let ours: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    // Fields 19 and 41 are the 17th and 39th after the comm.
    assert_eq!(priority.trim(), format!("{} {}", ours[16], ours[38]));
}

/// On a machine whose every CPU is kept busy at normal priority, a background compile gets
/// almost no CPU: it is killed and says so (for the caller to compile it in the foreground),
/// long before its deadline.
#[test]
fn a_background_compile_starved_by_a_busy_machine_says_so() {
    if !tunebox_cpu::can_compile_in_background() {
        eprintln!("skipped: this kernel has no /proc/<pid>/schedstat to tell starvation by");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A compiler that always wants the CPU.
    let cc = fake_compiler(
        dir.path(),
        "spin-cc",
        "[ \"$1\" = --version ] && { echo 'fake cc 1.0'; exit 0; }\nwhile :; do :; done\n",
    );
    let kernel = {
        let mut v = add_kernel();
        v.compiler = cc;
        v
    };
    let cache = CacheDir::new(dir.path().join("cache"));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let hogs: Vec<_> = (0..cpus)
        .map(|_| {
            let stop = std::sync::Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::black_box(0u64);
                }
            })
        })
        .collect();
    let control = CompileControl {
        background: true,
        ..with_timeout(Duration::from_secs(120))
    };
    let started = Instant::now();
    let err = compile_with(&kernel, &add_signature(), &cache, &control).unwrap_err();
    let took = started.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for hog in hogs {
        hog.join().unwrap();
    }
    assert!(matches!(err, CpuError::CompileStarved { .. }), "{err}");
    assert!(took < Duration::from_secs(60), "{took:?}");
}

#[test]
fn the_call_after_the_reps_returns_each_output_as_it_found_it() {
    // `c` comes out the same on every call, `calls` counts the calls: the call after the
    // reps must send `c` as it was after the first call and `calls` as it is now, however
    // each is carried (the first call's copy again, or a new one).
    const COUNTING: &str = "#include <stdint.h>\n\
                            static float count;\n\
                            void add(const float *a, const float *b, float *c, float *calls, \
                            int64_t n) {\n\
                            \x20   count += 1.0f;\n\
                            \x20   for (int64_t i = 0; i < n; i++) { c[i] = a[i] + b[i]; \
                            calls[i] = count; }\n\
                            }\n";
    let cache = tempfile::tempdir().unwrap();
    let mut backend = CpuBackend::new(CacheDir::new(cache.path()));
    // Larger than what travels inline, so that the outputs are shared-memory regions.
    let n = 16 * 4096;
    let mut request = add_request(n);
    if let Kernel::C(kernel) = &mut request.kernel {
        kernel.source = COUNTING.into();
    }
    request.timing.fresh_seed = None;
    request
        .tensors
        .push(tensor("calls", DType::F32, n, Init::Zeros, true));
    let result = backend.benchmark(&request).unwrap();
    let [c, calls] = &result.outputs[..] else {
        panic!("two outputs: {:?}", result.outputs)
    };
    let [c_after, calls_after] = &result.outputs_after_reps[..] else {
        panic!(
            "two outputs after the reps: {:?}",
            result.outputs_after_reps
        )
    };
    assert!(c.bytes.is_shared() && c_after.bytes.is_shared());
    assert_eq!(
        (c_after.name.as_str(), calls_after.name.as_str()),
        ("c", "calls")
    );
    assert_eq!(c_after.bytes, c.bytes);
    assert!(floats(&calls.bytes).iter().all(|&x| x == 1.0));
    let last = floats(&calls_after.bytes);
    assert!(
        last[0] > 2.0 && last.iter().all(|&x| x == last[0]),
        "{}",
        last[0]
    );
}

#[test]
fn a_window_that_returns_no_outputs_keeps_them_outputs() {
    // A tuning round's window: its outputs are written by the kernel but neither returned nor
    // taken for inputs the kernel wrote (which would be restored before every call).
    let cache = tempfile::tempdir().unwrap();
    let mut backend = CpuBackend::new(CacheDir::new(cache.path()));
    let mut request = add_request(16 * 4096);
    request.timing = request.timing.return_outputs(false);
    let c = request.tensors[2].clone();
    assert!(c.output && !request.returns(&c));
    let result = backend.benchmark(&request).unwrap();
    assert!(result.outputs.is_empty() && result.outputs_after_reps.is_empty());
    assert!(result.integrity.fresh_outputs.is_empty());
    assert!(
        result.mutated_inputs.is_empty(),
        "{:?}",
        result.mutated_inputs
    );
    assert!(result.stats.reps >= 3);
    // Returned, the same request's outputs come back as before.
    request.timing = request.timing.return_outputs(true);
    let returned = backend.benchmark(&request).unwrap();
    assert_eq!(returned.outputs.len(), 1);
    assert!(returned.mutated_inputs.is_empty());
}
