//! `cargo xtask <task>`: the checks CI runs, runnable by any developer.
//!
//! - `ci`: `cargo fmt --check`, `cargo clippy --workspace --all-targets -D warnings`,
//!   `cargo doc --workspace --no-deps` with `RUSTDOCFLAGS=-D warnings`, `code-metrics` with
//!   [`CODE_LIMITS`], `python-lint`, `cargo test --workspace`, `semver`, `html-test`.
//! - `semver [--baseline-rev REV]`: cargo-semver-checks on the library crates (every package
//!   but the CLI, the Python module, the xtask, the tests, the benchmarks and the examples)
//!   against the last release's commit, `release/BASELINE` (docs/extending.md).
//! - `bench [--quick] [--strict]`: builds `tunebox-worker` and `tunebox-benchmarks` in release,
//!   runs the overhead benchmarks (issue 9), prints their table and writes
//!   `target/bench/summary.json`. `--quick` runs fewer iterations (a smoke test, under a minute);
//!   `--strict` fails when a target is missed; `--only GROUP,…` runs some groups (e.g.
//!   `sandbox,cold-start`). See `docs/performance.md`.
//! - `soak [TASKS]`: builds the soak in release and runs it: 100,000 tasks (by default) of every
//!   kind (ok, error, panic, abort, segfault, timeout, exit, output floods, memory leaks) through
//!   a pool of 2 recycling workers, then checks that every task got one result of the right kind
//!   and that the parent's descriptors, memfds, threads, RSS and children are back to their
//!   baseline, with no socket or core file left (issue 7). Bounded: killed after 30 minutes
//!   (or 20 ms per task, if more).
//! - `fuzz [SECONDS]`: the protocol fuzz properties of `tests/fuzz.rs` (decoding arbitrary and
//!   mutated bytes, a worker writing garbage), in release, 20,000 cases per decoding property
//!   per round, new random seeds each round, until SECONDS (default 60) have passed.
//! - `loaded-test [--all]`: the CLI's end-to-end tests (`--all`: every test) and the faults
//!   example with 2 × `nproc` busy loops running (issue 13; `docs/reliability.md`).
//! - `agreement [RUNS] [--busy] [--no-kt] [--timing KEY=VALUE]… [--vs "ARGS"] [--vs-bin PATH] [-- TUNE_ARGS…]`: runs the main job RUNS (default 5)
//!   times from empty caches (idle, or with 2 × `nproc` busy loops) beside Kernel Tuner's runs
//!   of the same space, and reports pairwise rank correlation, top-1 regret and wall time
//!   against issue 23's targets (`docs/performance.md`).
//! - `space-bench [--no-kt]`: builds the 10.6-million raw GEMM-like space and the benchmark
//!   hub's T1 spaces (GEMM, hotspot, convolution, dedispersion) in release, each in a process of
//!   its own: valid and raw counts, build time, peak RSS; side by side with Kernel Tuner's
//!   `Searchspace` when `target/kernel-tuner-venv` (or `$KT_VENV`) has it (`docs/search.md`).
//! - `window-cost [--gib G] [--rounds N] [--json PATH]`: a manifest with three 1 GiB f32
//!   tensors (`c = a + b`) measured through the engine in fresh workers (release `tunebox` as
//!   the worker): per window its wall time, its kernel calls' time, the overhead and its ratio
//!   to the calls (issue 33; `docs/performance.md`).
//! - `strategies [FILES…] [--seeds N] [--budget-fraction F] [--loo] [--no-kt] [--kt-seeds N]`:
//!   every search strategy on recorded spaces (T1 and cache files by path; default the hub's in
//!   `data/benchmark_hub`), simulated, scored by the methodology of Willemsen et al. (FGCS 2024)
//!   as its `autotuning-methodology` package computes it; with Kernel Tuner's strategies side by side
//!   (its simulation mode, `benchmarks/kernel-tuner/strategies.py`) when `target/kernel-tuner-venv`
//!   (or `$KT_VENV`) has it; prints the table, writes `docs/search-strategies.svg`
//!   (`docs/search.md`).
//! - `code-metrics [--max-fn N] [--max-over-60 N] [--max-over-100 N] [--no-circles]`: functions
//!   outside tests over 60, 100 and 150 lines and the longest, module circles per crate (every
//!   workspace member), imports up the layers of `tunebox-tune`'s areas, its public items,
//!   README lines (issues 25 and 35; the flags fail past their limits).
//! - `gpu-test`: runs the GPU tests (`#[ignore = "needs a CUDA GPU"]`, and the NVRTC ones) of
//!   `tunebox-cuda` on this machine, one at a time, printing what ran.
//! - `gpu-bundle`: builds release `tunebox` and `tunebox-worker` and the GPU test executables,
//!   stripped, into `target/gpu-bundle/` with the CUDA examples and a `run.sh` that runs them on
//!   a GPU machine without a Rust toolchain (see `docs/gpu.md`).
//! - `html-test [--screenshots DIR]`, `html-bench [--choices N]`: the HTML report in a headless
//!   Chromium (`html.rs`): the pages of the main job, a replay, a comparison and the faults
//!   example drawn and fetching nothing; the page of a 100,000-choice report, its size and
//!   render time (`docs/cli.md`).
//! - `python-test`, `python-conformance`, `python-bench`: the Python package `tunebox`
//!   (crates/python) built into `target/python/venv`: its pytest suite, TVM's own pool test
//!   against it (and against TVM's pool), and its overheads against TVM's and Python's pools
//!   (`docs/python.md`). `python-test` runs `python-lint` first: `ruff check`, `ruff format
//!   --check` and `mypy` on the package (settings in the root `pyproject.toml`).
//! - `wheel [--compatibility TAG]`: the abi3 manylinux wheel (`maturin build --release --strip`)
//!   in `target/python/wheel/`; `wheel-test`: that wheel installed into a fresh environment and
//!   the pytest suite run against it with no Rust toolchain on the `PATH` (`docs/python.md`).

mod agreement;
mod browser;
mod busy;
mod code_metrics;
mod html;
mod loaded;
mod python;
mod semver;
mod wheel;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The `code-metrics` arguments `cargo xtask ci` and `.ci/run` hold the code to.
const CODE_LIMITS: [&str; 7] = [
    "--max-fn",
    "150",
    "--max-over-60",
    "40",
    "--max-over-100",
    "8",
    "--no-circles",
];

const USAGE: &str = "usage: cargo xtask <task>

  ci                        fmt check, clippy -D warnings, docs -D warnings, code-metrics
                            --limits, python-lint, tests, semver, html-test
  semver [--baseline-rev REV]
                            cargo-semver-checks: the library crates' public API against the
                            last release (release/BASELINE); needs cargo-semver-checks 0.51.0
  bench [--quick] [--strict] [--only GROUP,…]
                            overhead benchmarks (release build): prints the table and writes
                            target/bench/summary.json; --quick: fewer iterations (smoke test);
                            --strict: fail when a target is missed; --only: some groups
                            (spawn, round-trips, cold-start, …, sandbox; see tunebox-benchmarks)
  soak [TASKS]              TASKS (default 100000) tasks of every kind through a recycling
                            pool, then a check that nothing leaked (release build)
  fuzz [SECONDS]            protocol fuzzing (tests/fuzz.rs, release) in rounds with new
                            seeds until SECONDS (default 60) have passed
  loaded-test [--all]       the CLI tests (--all: every test) and the faults example with
                            2 x nproc busy loops running
  agreement [RUNS] [--busy] [--no-kt] [--timing KEY=VALUE]… [--vs \"ARGS\"] [--vs-bin PATH] [-- TUNE_ARGS…]
                            the main job RUNS (default 5) times from empty caches (--busy:
                            with 2 x nproc busy loops), Kernel Tuner's runs beside: pairwise
                            Spearman, top-1 regret and wall time against the targets
  space-bench [--no-kt]     search-space construction: time and peak RSS (release), with
                            Kernel Tuner side by side when installed
  window-cost [--gib G] [--rounds N] [--json PATH]
                            three 1 GiB tensors through the engine: per window its wall
                            time, kernel calls, overhead and overhead / calls (release)
  strategies [FILES…] [--seeds N] [--max-seeds M] [--budget-fraction F] [--loo]
             [--loo-fractions F,…] [--choose a,b,…] [--runs FILE] [--strategy-time]
             [--package] [--no-kt] [--kt-seeds N] [--kt-traces FILE]
                            every strategy on recorded spaces (T1 + cache files by path; default
                            the hub's in data/), simulated, scored as autotuning-methodology
                            does, with standard errors and seeds until the leaders are settled;
                            docs/search-strategies.svg; Kernel Tuner's side by side when
                            installed
  code-metrics [--max-fn N] [--max-over-60 N] [--max-over-100 N] [--no-circles] | --limits
                            functions over 60/100/150 lines outside tests, module circles,
                            upward imports between tunebox-tune's areas, its public items,
                            README lines; --limits: fail past the limits CI holds the code to
  gpu-test                  the GPU tests of tunebox-cuda, on this machine's GPU (--ignored,
                            one at a time)
  gpu-bundle                release binaries, GPU test executables, CUDA examples and run.sh
                            in target/gpu-bundle/, to copy to a GPU machine and run there
  python-test [PYTEST_ARGS…]
                            python-lint, then the Python package's pytest suite (wheel
                            built into target/python/venv, _native.pyi checked by stubtest)
  python-lint               ruff check, ruff format --check and mypy on the Python package
  python-conformance [--no-tvm] [--kt-only] [--kt-size N]
                            TVM's own test_popen_pool.py against tunebox.popen_pool, then
                            against TVM's pool (apache-tvm from PyPI), both timed; Kernel
                            Tuner's examples/c/vector_add.py through tunebox.kernel_tuner and
                            Kernel Tuner 1.5, compared
  python-bench [ARGS…]      tunebox.popen_pool against TVM's PopenPoolExecutor and
                            ProcessPoolExecutor: cold start, round trip, throughput, crash,
                            256 MiB array
  html-test [--screenshots DIR]
                            the HTML report's pages (main job, replay, comparison, faults)
                            opened in headless Chromium: figures drawn, nothing fetched;
                            fails without Chromium (apt-get install -y chromium)
  html-bench [--choices N]  the page of a synthetic N-choice report (default 100000): write
                            time, size, and Chromium's load and draw time
  wheel [--compatibility TAG]
                            the abi3 manylinux wheel (maturin build --release --strip) in
                            target/python/wheel/
  wheel-test [--compatibility TAG] [-- PYTEST_ARGS…]
                            that wheel in a fresh venv, its pytest suite run with no Rust
                            toolchain on the PATH";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let task = args.first().cloned();
    let result = match task.as_deref() {
        Some("ci") => ci(),
        Some("bench") => bench(&args[1..]),
        Some("soak") => soak(&args[1..]),
        Some("fuzz") => fuzz(&args[1..]),
        Some("loaded-test") => loaded::loaded_test(&args[1..]),
        Some("agreement") => agreement::agreement(&args[1..]),
        // `--limits`: the limits CI holds the code to ([`CODE_LIMITS`]), as `.ci/run` asks.
        Some("code-metrics") if args[1..] == ["--limits"] => {
            code_metrics::code_metrics(&CODE_LIMITS.map(String::from))
        }
        Some("code-metrics") => code_metrics::code_metrics(&args[1..]),
        Some("gpu-test") => gpu_test(),
        Some("space-bench") => example("space_bench", &args[1..], &[]),
        Some("window-cost") => window_cost(&args[1..]),
        Some("strategies") => strategies(&args[1..]),
        Some("gpu-bundle") => gpu_bundle(),
        Some("python-test") => python::python_test(&args[1..]),
        Some("python-conformance") => python::python_conformance(&args[1..]),
        Some("python-bench") => python::python_bench(&args[1..]),
        Some("html-test") => html::html_test(&args[1..]),
        Some("html-bench") => html::html_bench(&args[1..]),
        Some("python-lint") => python::python_lint(),
        Some("wheel") => wheel::wheel(&args[1..]),
        Some("wheel-test") => wheel::wheel_test(&args[1..]),
        Some("semver") => semver::semver(&args[1..]),
        Some("help" | "--help" | "-h") | None => {
            println!("{USAGE}");
            return if task.is_some() {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
        Some(other) => Err(format!("unknown task `{other}`; run `cargo xtask help`")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn ci() -> Result<(), String> {
    cargo(&["fmt", "--all", "--", "--check"], &[])?;
    cargo(
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    cargo(
        &["doc", "--workspace", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    // Issue 25's limits: no function outside tests over 150 lines, no module circle; issue 35's:
    // no import up the layers of tunebox-tune's areas, at most 40 functions over 60 lines and 8
    // over 100.
    code_metrics::code_metrics(&CODE_LIMITS.map(String::from))?;
    // ruff and mypy on the Python package (its tests run in `cargo xtask python-test`).
    python::python_lint()?;
    cargo(&["test", "--workspace"], &[])?;
    // The library crates' public API against the last release (release/BASELINE).
    semver::semver(&[])?;
    // The HTML report in headless Chromium: fails, naming the fix, where it is not installed.
    html::html_test(&[])
}

/// `cargo xtask soak [TASKS]`.
fn soak(args: &[String]) -> Result<(), String> {
    let tasks = match args {
        [] => "100000".to_owned(),
        [n] if n.parse::<u64>().is_ok() => n.clone(),
        _ => return Err("usage: cargo xtask soak [TASKS]".into()),
    };
    let root = workspace_root();
    cargo(
        &["build", "--release", "--package", "tunebox-tests", "--bins"],
        &[],
    )?;
    let release = target_dir(&root).join("release");
    let mut soak = Command::new(release.join("tunebox-soak"))
        .arg(&tasks)
        .arg("--worker")
        .arg(release.join("tunebox-test-worker"))
        .spawn()
        .map_err(|e| format!("cannot run tunebox-soak: {e}"))?;
    let count: u64 = tasks.parse().unwrap_or(0);
    let limit = Duration::from_secs(30 * 60).max(Duration::from_millis(20 * count));
    let started = Instant::now();
    let status = loop {
        match soak.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() > limit => {
                let _ = soak.kill();
                let _ = soak.wait();
                return Err(format!(
                    "the soak ran past its limit of {limit:?} and was killed"
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(200)),
            Err(e) => return Err(format!("cannot wait for tunebox-soak: {e}")),
        }
    };
    if status.success() {
        Ok(())
    } else {
        Err(format!("the soak failed ({status})"))
    }
}

/// `cargo xtask fuzz [SECONDS]`: rounds of `tests/fuzz.rs` with fresh seeds until the time is up.
fn fuzz(args: &[String]) -> Result<(), String> {
    let seconds: u64 = match args {
        [] => 60,
        [n] => n.parse().map_err(|_| {
            format!("`{n}` is not a number of seconds; usage: cargo xtask fuzz [SECONDS]")
        })?,
        _ => return Err("usage: cargo xtask fuzz [SECONDS]".into()),
    };
    let test = [
        "test",
        "--release",
        "--package",
        "tunebox-tests",
        "--test",
        "integration",
        "--",
        "fuzz::",
        "--test-threads=2",
    ];
    let env = [("TUNEBOX_FUZZ_CASES", "20000")];
    let started = Instant::now();
    let mut rounds = 0;
    loop {
        cargo(&test, &env)?;
        rounds += 1;
        if started.elapsed() >= Duration::from_secs(seconds) {
            break;
        }
    }
    eprintln!(
        "xtask: fuzz: {rounds} round(s) of 2 x 20,000 decoding cases and 20 garbage-writing \
         workers, in {:.0?}, no failure",
        started.elapsed()
    );
    Ok(())
}

/// `cargo xtask bench [--quick] [--strict] [--only GROUP,…]`.
fn bench(args: &[String]) -> Result<(), String> {
    let mut extra = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" | "--strict" => extra.push(arg.as_str()),
            "--only" => {
                let groups = args
                    .next()
                    .ok_or("--only needs groups, e.g. --only sandbox,cold-start")?;
                extra.extend(["--only", groups.as_str()]);
            }
            other => {
                return Err(format!(
                    "unknown option `{other}` for bench; see `cargo xtask help`"
                ));
            }
        }
    }
    let started = Instant::now();
    let root = workspace_root();
    cargo(
        &[
            "build",
            "--release",
            "--package",
            "tunebox-worker",
            "--package",
            "tunebox-benchmarks",
        ],
        &[],
    )?;
    let release = target_dir(&root).join("release");
    let summary = target_dir(&root).join("bench").join("summary.json");
    let benchmarks = release.join("tunebox-benchmarks");
    let status = Command::new(&benchmarks)
        .arg("run")
        .arg("--worker")
        .arg(release.join("tunebox-worker"))
        .arg("--json")
        .arg(&summary)
        .args(&extra)
        .current_dir(&root)
        .status()
        .map_err(|e| format!("cannot run {}: {e}", benchmarks.display()))?;
    eprintln!(
        "xtask: bench took {:.1} s in all (build included)",
        started.elapsed().as_secs_f64()
    );
    if status.success() {
        Ok(())
    } else {
        Err(format!("the benchmarks failed ({status})"))
    }
}

/// The workspace root: the parent of this package's directory.
fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

/// A fresh, empty directory at `path` (what was there removed), for the agreement's kernel
/// cache and the browser's profile.
fn fresh_dir(path: &Path) -> Result<PathBuf, String> {
    let _ = std::fs::remove_dir_all(path);
    std::fs::create_dir_all(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    Ok(path.to_path_buf())
}

/// Cargo's target directory: `CARGO_TARGET_DIR` (relative to the workspace root, where the build
/// runs) or `<root>/target`.
fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => root.join(dir),
        _ => root.join("target"),
    }
}

/// `window-cost`: builds the release `tunebox` binary (the workers) and runs the
/// `window_cost` example of `tunebox-tune` with it.
fn window_cost(args: &[String]) -> Result<(), String> {
    cargo(&["build", "--release", "--quiet", "-p", "tunebox-cli"], &[])?;
    let worker = target_dir(&workspace_root())
        .join("release")
        .join("tunebox");
    let worker = worker.to_string_lossy().into_owned();
    example("window_cost", args, &["--worker", &worker])
}

/// Runs example `name` of tunebox-tune in release with `fixed` then `args`.
fn example(name: &str, args: &[String], fixed: &[&str]) -> Result<(), String> {
    let mut all = vec![
        "run",
        "--release",
        "--quiet",
        "-p",
        "tunebox-tune",
        "--example",
        name,
        "--",
    ];
    all.extend(fixed);
    all.extend(args.iter().map(String::as_str));
    cargo(&all, &[])
}

/// `cargo xtask strategies [ARGS]`: the strategy evaluation (`benchmarks/strategies`), writing
/// `docs/search-strategies.svg`.
fn strategies(args: &[String]) -> Result<(), String> {
    let mut all = vec![
        "run",
        "--release",
        "--quiet",
        "-p",
        "tunebox-strategies",
        "--",
        "--svg",
        "docs/search-strategies.svg",
    ];
    all.extend(args.iter().map(String::as_str));
    cargo(&all, &[])
}

/// Runs `cargo <args>` with extra environment, failing on a non-zero exit.
fn cargo(args: &[&str], env: &[(&str, &str)]) -> Result<(), String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    eprintln!("xtask: cargo {}", args.join(" "));
    let status = Command::new(&cargo)
        .args(args)
        .current_dir(workspace_root())
        .envs(env.iter().copied())
        .status()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`cargo {}` failed ({status})", args.join(" ")))
    }
}

/// The packages whose test executables hold GPU tests.
const GPU_TEST_PACKAGES: &[&str] = &["tunebox-cuda"];

/// Test targets of those packages that go into the bundle: the library's unit tests (NVRTC)
/// and `gpu`. The others (`no_gpu`, `mock_driver`, `examples`) are for machines without a GPU.
const GPU_TEST_TARGETS: &[&str] = &["tunebox_cuda", "gpu"];

/// A profile for the bundle, defined on the command line: release without debug info,
/// stripped, in its own target subdirectory (so it never invalidates `target/release`).
const BUNDLE_PROFILE: &[&str] = &[
    "--config",
    "profile.gpu-bundle-build.inherits=\"release\"",
    "--config",
    "profile.gpu-bundle-build.debug=false",
    "--config",
    "profile.gpu-bundle-build.strip=true",
    "--profile",
    "gpu-bundle-build",
];

/// `cargo xtask gpu-test`.
fn gpu_test() -> Result<(), String> {
    let mut args = vec!["test"];
    for package in GPU_TEST_PACKAGES {
        args.extend(["--package", package]);
    }
    args.extend(["--", "--ignored", "--nocapture", "--test-threads=1"]);
    eprintln!("xtask: running the GPU tests (they need an NVIDIA GPU, driver R580+, and NVRTC)");
    cargo(&args, &[])
}

/// `cargo xtask gpu-bundle`.
fn gpu_bundle() -> Result<(), String> {
    let root = workspace_root();
    let target = target_dir(&root);
    let bundle = target.join("gpu-bundle");
    let mut build = vec!["build"];
    build.extend(BUNDLE_PROFILE);
    build.extend(["--package", "tunebox-cli", "--package", "tunebox-worker"]);
    cargo(&build, &[])?;
    let executables = gpu_test_executables()?;

    if bundle.exists() {
        fs::remove_dir_all(&bundle)
            .map_err(|e| format!("cannot clear {}: {e}", bundle.display()))?;
    }
    for dir in ["tests", "examples/kernels"] {
        fs::create_dir_all(bundle.join(dir))
            .map_err(|e| format!("cannot create {}: {e}", bundle.join(dir).display()))?;
    }
    let built = target.join("gpu-bundle-build");
    for binary in ["tunebox", "tunebox-worker"] {
        copy(&built.join(binary), &bundle.join(binary))?;
    }
    for (name, path) in &executables {
        copy(path, &bundle.join("tests").join(name))?;
    }
    let examples = root.join("examples");
    for file in [
        "matmul-cuda.toml",
        "faults-cuda.toml",
        "kernels/matmul.cu",
        "kernels/faults.cu",
        "kernels/matmul_ref.c",
    ] {
        copy(&examples.join(file), &bundle.join("examples").join(file))?;
    }
    let script = bundle.join("run.sh");
    fs::write(&script, RUN_SH).map_err(|e| format!("cannot write {}: {e}", script.display()))?;
    make_executable(&script)?;

    let bytes = dir_size(&bundle);
    println!(
        "xtask: {} ({:.1} MiB): {} test executables, tunebox, tunebox-worker, examples, run.sh",
        bundle.display(),
        bytes as f64 / (1024.0 * 1024.0),
        executables.len()
    );
    println!("xtask: on the GPU machine: OUT=<dir> ./run.sh   (see docs/gpu.md)");
    Ok(())
}

/// Builds the GPU test executables (`cargo test --no-run`, bundle profile) and returns
/// `(name in the bundle, path)` for each target of [`GPU_TEST_TARGETS`].
fn gpu_test_executables() -> Result<Vec<(String, PathBuf)>, String> {
    let cargo_bin = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut args = vec!["test", "--no-run", "--message-format=json"];
    args.extend(BUNDLE_PROFILE);
    for package in GPU_TEST_PACKAGES {
        args.extend(["--package", package]);
    }
    eprintln!("xtask: cargo {}", args.join(" "));
    let output = Command::new(&cargo_bin)
        .args(&args)
        .current_dir(workspace_root())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {cargo_bin}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "`cargo {}` failed ({})",
            args.join(" "),
            output.status
        ));
    }
    let mut found = Vec::new();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        if !line.contains("\"reason\":\"compiler-artifact\"") || !line.contains("\"test\":true") {
            continue;
        }
        let (Some(name), Some(executable)) = (
            json_string_after(line, "\"target\":{", "\"name\":\""),
            json_string_after(line, "", "\"executable\":\""),
        ) else {
            continue;
        };
        if GPU_TEST_TARGETS.contains(&name.as_str()) {
            found.push((name, PathBuf::from(executable)));
        }
    }
    if found.len() != GPU_TEST_TARGETS.len() {
        return Err(format!(
            "expected the test executables {GPU_TEST_TARGETS:?}, found {:?}",
            found.iter().map(|(n, _)| n).collect::<Vec<_>>()
        ));
    }
    Ok(found)
}

/// The JSON string that follows `key` after the first `scope` in `line` (cargo's messages: no
/// escapes in target names and paths of this workspace; a string with one is skipped).
fn json_string_after(line: &str, scope: &str, key: &str) -> Option<String> {
    let scoped = &line[line.find(scope)? + scope.len()..];
    let value = &scoped[scoped.find(key)? + key.len()..];
    let value = &value[..value.find('"')?];
    (!value.contains('\\')).then(|| value.to_owned())
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    fs::copy(from, to)
        .map(drop)
        .map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))
}

fn make_executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    fs::set_permissions(path, fs::Permissions::from_mode(0o755))
        .map_err(|e| format!("cannot make {} executable: {e}", path.display()))
}

/// Total size in bytes of the files under `dir`.
fn dir_size(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(t) if t.is_dir() => dir_size(&entry.path()),
            _ => entry.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

/// The bundle's script: GPU tests, then the CUDA examples, with logs and a summary in `$OUT`.
const RUN_SH: &str = r#"#!/bin/bash
# tunebox GPU bundle (made by `cargo xtask gpu-bundle`): runs the CUDA backend's GPU tests and the
# CUDA examples on this machine's GPU. Needs the NVIDIA driver (R580+, CUDA 13) and NVRTC 13
# (libnvrtc.so.13 + libnvrtc-builtins; found under /usr/local/cuda or /usr, /opt when not on the
# loader path), and a C compiler (cc) for the matmul example's CPU reference.
#
#   OUT=/some/dir ./run.sh        results in $OUT (default: ./out), at most 8 files:
#     summary.txt figures.txt devices.txt tests.log matmul-cuda.log matmul-cuda.json
#     faults-cuda.log faults-cuda.json
set -u
here=$(cd "$(dirname "$0")" && pwd)
cd "$here" || exit 1
out=${OUT:-$here/out}
mkdir -p "$out"
export TUNEBOX_CACHE_DIR=$(mktemp -d)
export TUNEBOX_WORKER="$here/tunebox-worker"
export RUST_BACKTRACE=1

if ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc.so.13 '; then
  nvrtc=$(ls /usr/local/cuda/lib64/libnvrtc.so.13 /usr/local/cuda*/targets/*/lib/libnvrtc.so.13 2>/dev/null | head -n 1)
  [ -n "$nvrtc" ] || nvrtc=$(find /usr /opt -name 'libnvrtc.so.13' 2>/dev/null | head -n 1)
  if [ -n "$nvrtc" ]; then
    export LD_LIBRARY_PATH="$(dirname "$nvrtc")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
fi

summary="$out/summary.txt"
: >"$summary"
status=0
note() { echo "$*" | tee -a "$summary"; }
note "tunebox gpu bundle, $(date -u +%Y-%m-%dT%H:%M:%SZ), LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"

{ nvidia-smi -L 2>&1; echo; ./tunebox devices 2>&1; } >"$out/devices.txt"
note "devices: $(head -n 1 "$out/devices.txt")"

: >"$out/tests.log"
for t in tests/*; do
  start=$(date +%s)
  if "./$t" --ignored --nocapture --test-threads=1 >>"$out/tests.log" 2>&1; then
    note "PASS $t ($(( $(date +%s) - start )) s)"
  else
    note "FAIL $t ($(( $(date +%s) - start )) s)"; status=1
  fi
done

for example in matmul-cuda faults-cuda; do
  start=$(date +%s)
  if timeout 600 ./tunebox tune "examples/$example.toml" --json "$out/$example.json" >"$out/$example.log" 2>&1; then
    note "PASS tunebox tune examples/$example.toml ($(( $(date +%s) - start )) s)"
  else
    note "FAIL tunebox tune examples/$example.toml ($(( $(date +%s) - start )) s)"; status=1
  fi
done

grep -h 'tunebox-figure:' "$out/tests.log" | sed 's/^.*tunebox-figure: //' >"$out/figures.txt"
cat "$out/figures.txt" >>"$summary"
echo "--- figures"; cat "$out/figures.txt"
echo "--- test results"; grep -E '^test result|FAILED|panicked' "$out/tests.log" | head -n 40
for example in matmul-cuda faults-cuda; do echo "--- $example"; head -n 60 "$out/$example.log"; done
rm -rf "$TUNEBOX_CACHE_DIR"
exit $status
"#;
