//! `tunebox tune`: enumerate, precompile, benchmark, verify, rank.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use rayon::prelude::*;
use tunebox_cpu::{CacheDir, CpuError, Signature};
use tunebox_pool::{PoolError, Status, TuningProcessPool, Verification, verify_outputs};
use tunebox_process::{Output, ProcessConfig};
use tunebox_protocol::{BenchmarkRequest, BenchmarkResult, CKernel, Kernel, TimingStats};

use crate::manifest::{KernelSource, Manifest, Reference, Verify};
use crate::space::{self, Choice};

/// What `tune` was asked to do.
#[derive(Debug)]
pub(crate) struct TuneOptions {
    pub(crate) manifest: PathBuf,
    pub(crate) workers: usize,
    pub(crate) timeout: Option<Duration>,
    /// Benchmarks per worker process before it is replaced (`None`: unlimited).
    pub(crate) max_process_uses: Option<u64>,
    pub(crate) quiet: bool,
    /// Where the JSON report will go (checked before the run).
    pub(crate) json: Option<PathBuf>,
}

/// What became of one choice.
#[derive(Debug)]
pub(crate) struct ChoiceResult {
    pub(crate) choice: Choice,
    pub(crate) status: Status,
    pub(crate) stats: Option<TimingStats>,
    /// Why it failed (the full message), for every status but `ok`.
    pub(crate) error: Option<String>,
    pub(crate) verification: Option<Verification>,
    /// Inputs the kernel wrote on its first call; restored before every later call.
    pub(crate) mutated_inputs: Vec<String>,
}

/// The outcome of a tuning run, ranked.
#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) manifest: PathBuf,
    pub(crate) name: String,
    pub(crate) kernel: String,
    pub(crate) device: String,
    /// `ok` by median ascending, then the others by status and input order.
    pub(crate) results: Vec<ChoiceResult>,
    pub(crate) elapsed: Duration,
    pub(crate) workers: usize,
}

/// The C compiler: `$CC`, else `cc`.
fn compiler() -> String {
    std::env::var("CC")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .unwrap_or_else(|| "cc".into())
}

/// The choices of the manifest at `path` that satisfy its restrictions.
///
/// # Errors
///
/// An invalid manifest.
pub(crate) fn list(path: &std::path::Path) -> Result<Vec<Choice>> {
    let manifest = Manifest::load(path, &compiler())?;
    choices(&manifest)
}

/// The manifest's choices; an error when restrictions leave none.
fn choices(manifest: &Manifest) -> Result<Vec<Choice>> {
    let choices = space::choices(&manifest.params, &manifest.restrictions)
        .with_context(|| format!("invalid manifest {}", manifest.path.display()))?;
    ensure!(
        !choices.is_empty(),
        "{}: no choice satisfies the restrictions; loosen `restrictions` or add values to `params`",
        manifest.path.display()
    );
    Ok(choices)
}

/// Runs a tuning session as the manifest describes.
///
/// # Errors
///
/// An invalid manifest, an empty space, no usable cache directory, workers that cannot start,
/// or a reference that fails; a choice that fails is a result, not an error.
pub(crate) fn tune(options: &TuneOptions) -> Result<Report> {
    let start = Instant::now();
    let manifest = Manifest::load(&options.manifest, &compiler())?;
    if let Some(json) = &options.json {
        check_output_path(json, &manifest)?;
    }
    let choices = choices(&manifest)?;
    let progress = Progress::new(options.quiet);
    let requests: Vec<BenchmarkRequest> = choices
        .iter()
        .map(|c| request(&manifest, &manifest.kernel, c))
        .collect();
    // A reference to run, unless the expected outputs were given as files.
    let reference = manifest.verify.as_ref().and_then(|v| match &v.reference {
        Reference::Choice(choice) => {
            Some((choice.label(), request(&manifest, &manifest.kernel, choice)))
        }
        Reference::Source(source) => Some((
            format!("{} ({})", source.entry, source.source_name),
            request(&manifest, source, &Choice::new(Default::default())),
        )),
        Reference::Outputs(_) => None,
    });

    // Compile everything in parallel first, so compile errors surface early and workers only
    // load cached objects.
    let cache = CacheDir::from_env()?;
    std::fs::create_dir_all(cache.path()).with_context(|| {
        format!(
            "cannot create the kernel cache {}; set TUNEBOX_CACHE_DIR to a writable directory",
            cache.path().display()
        )
    })?;
    progress.note(&format!(
        "compiling {} choices with {} threads…",
        requests.len(),
        rayon::current_num_threads()
    ));
    let compiled: Vec<Result<(), CpuError>> =
        requests.par_iter().map(|r| precompile(r, &cache)).collect();
    if let Some((label, request)) = &reference
        && let Err(e) = precompile(request, &cache)
    {
        bail!(
            "the reference {label} does not compile: {:#}",
            anyhow::Error::new(e)
        );
    }

    // More workers than choices would only cost start-up time.
    let workers = options.workers.clamp(1, requests.len());
    let timeout = options.timeout.unwrap_or(manifest.timeout);
    let pool = TuningProcessPool::builder()
        .workers(workers)
        .timeout(timeout)
        .process_config(
            ProcessConfig::new()
                .stdout(Output::Capture { tail_bytes: 4096 })
                .stderr(Output::Capture {
                    tail_bytes: 16 * 1024,
                }),
        )
        .maximum_process_uses(options.max_process_uses)
        .build()
        .context("could not start the workers")?;

    let reference_outputs = match (&reference, manifest.verify.as_ref().map(|v| &v.reference)) {
        (Some((label, request)), _) => {
            progress.note(&format!("running the reference {label}…"));
            let result = pool.benchmark(std::slice::from_ref(request)).remove(0);
            Some(
                result
                    .map_err(|e| anyhow::anyhow!("the reference {label} failed: {e}"))?
                    .outputs,
            )
        }
        (None, Some(Reference::Outputs(outputs))) => Some(outputs.clone()),
        _ => None,
    };

    let runnable: Vec<usize> = (0..requests.len())
        .filter(|&i| compiled[i].is_ok())
        .collect();
    progress.note(&format!(
        "benchmarking {} choices on {workers} worker(s), timeout {:?}…",
        runnable.len(),
        timeout
    ));
    let to_run: Vec<BenchmarkRequest> = runnable.iter().map(|&i| requests[i].clone()).collect();
    let measured = pool.benchmark_with(&to_run, |i, result| {
        progress.finished(to_run.len(), &choices[runnable[i]], result);
    });
    pool.shutdown(Duration::from_millis(500));

    // `measured` follows the compiled choices in order.
    let mut measured = measured.into_iter();
    let mut results: Vec<ChoiceResult> = choices
        .into_iter()
        .zip(compiled)
        .map(|(choice, compiled)| match compiled {
            Err(e) => ChoiceResult {
                choice,
                status: Status::CompileError,
                stats: None,
                error: Some(format!("{:#}", anyhow::Error::new(e))),
                verification: None,
                mutated_inputs: Vec::new(),
            },
            Ok(()) => {
                let result = measured
                    .next()
                    .expect("one measurement per compiled choice");
                judge(choice, result, reference_outputs.as_deref(), &manifest)
            }
        })
        .collect();
    rank(&mut results);
    Ok(Report {
        manifest: manifest.path.clone(),
        name: manifest.name.clone(),
        kernel: format!(
            "{} ({})",
            manifest.kernel.entry, manifest.kernel.source_name
        ),
        device: cpu_model(),
        results,
        elapsed: start.elapsed(),
        workers,
    })
}

/// Refuses a `--json` path that would overwrite the manifest or a kernel source, or whose
/// directory does not exist, before any time is spent.
fn check_output_path(json: &Path, manifest: &Manifest) -> Result<()> {
    let same = |other: &Path| {
        json.canonicalize()
            .ok()
            .zip(other.canonicalize().ok())
            .is_some_and(|(a, b)| a == b)
    };
    let mut inputs = vec![manifest.path.clone(), manifest.kernel.path.clone()];
    if let Some(Verify {
        reference: Reference::Source(source),
        ..
    }) = &manifest.verify
    {
        inputs.push(source.path.clone());
    }
    if let Some(input) = inputs.iter().find(|input| same(input)) {
        bail!(
            "--json {} would overwrite the input {}; write the report elsewhere",
            json.display(),
            input.display()
        );
    }
    let dir = match json.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    ensure!(
        dir.is_dir(),
        "--json {}: the directory {} does not exist",
        json.display(),
        dir.display()
    );
    Ok(())
}

/// The request measuring `choice` of `source`.
fn request(manifest: &Manifest, source: &KernelSource, choice: &Choice) -> BenchmarkRequest {
    let mut flags = source.flags.clone();
    flags.push(format!("-I{}", source.dir.display()));
    let verify = manifest.verify.is_some();
    BenchmarkRequest {
        kernel: Kernel::C(CKernel {
            source: source.text.clone(),
            source_name: source.source_name.clone(),
            entry: source.entry.clone(),
            defines: choice.defines(),
            flags,
            compiler: source.compiler.clone(),
        }),
        // Outputs travel back only when there is something to compare them with.
        tensors: manifest
            .tensors
            .iter()
            .cloned()
            .map(|mut t| {
                t.output &= verify;
                t
            })
            .collect(),
        scalars: manifest.scalars.clone(),
        timing: manifest.timing.clone(),
    }
}

fn precompile(request: &BenchmarkRequest, cache: &CacheDir) -> Result<(), CpuError> {
    match &request.kernel {
        Kernel::C(kernel) => tunebox_cpu::compile(kernel, &Signature::of(request), cache).map(drop),
        Kernel::Cuda(_) | Kernel::Diagnostic(_) => Ok(()),
    }
}

/// Turns a pool result into a choice result, verifying outputs when there is a reference.
fn judge(
    choice: Choice,
    result: Result<BenchmarkResult, PoolError>,
    reference: Option<&[tunebox_protocol::TensorData]>,
    manifest: &Manifest,
) -> ChoiceResult {
    let status = Status::of(&result);
    match result {
        Err(e) => ChoiceResult {
            choice,
            status,
            stats: None,
            error: Some(e.to_string()),
            verification: None,
            mutated_inputs: Vec::new(),
        },
        Ok(measured) => {
            let verification = reference
                .zip(manifest.verify.as_ref())
                .map(|(reference, v)| {
                    let first = verify_outputs(reference, &measured.outputs, v.tolerance);
                    // Backends that make no call after the reps return no such outputs.
                    let after = if measured.outputs_after_reps.is_empty() {
                        first.clone()
                    } else {
                        verify_outputs(reference, &measured.outputs_after_reps, v.tolerance)
                    };
                    (first, after)
                });
            let error = verification.as_ref().and_then(|(first, after)| {
                if !first.passed() {
                    Some(first.summary())
                } else if !after.passed() {
                    Some(format!(
                        "correct on the first call, wrong on a call after the timed reps (the \
                         kernel must overwrite its outputs on every call): {}",
                        after.summary()
                    ))
                } else {
                    None
                }
            });
            ChoiceResult {
                choice,
                status: if error.is_some() {
                    Status::Wrong
                } else {
                    Status::Ok
                },
                stats: Some(measured.stats),
                error,
                verification: verification.map(
                    |(first, after)| {
                        if first.passed() { after } else { first }
                    },
                ),
                mutated_inputs: measured.mutated_inputs,
            }
        }
    }
}

/// Sorts `ok` results by median, then the rest by status, keeping input order among equals.
fn rank(results: &mut [ChoiceResult]) {
    results.sort_by(|a, b| {
        let key = |r: &ChoiceResult| match (r.status, &r.stats) {
            (Status::Ok, Some(stats)) => (0, stats.median_ms),
            (status, _) => (1 + status as u8, 0.0),
        };
        let (ka, kb) = (key(a), key(b));
        ka.0.cmp(&kb.0).then(ka.1.total_cmp(&kb.1))
    });
}

/// The CPU's model name and core count, e.g. `AMD EPYC (2 cores)`.
fn cpu_model() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_owned());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!("{model} ({cores} cores)")
}

/// Progress lines on stderr.
struct Progress {
    quiet: bool,
    done: std::sync::atomic::AtomicUsize,
}

impl Progress {
    fn new(quiet: bool) -> Progress {
        Progress {
            quiet,
            done: Default::default(),
        }
    }

    fn note(&self, message: &str) {
        if !self.quiet {
            eprintln!("tunebox: {message}");
        }
    }

    fn finished(&self, total: usize, choice: &Choice, result: &Result<BenchmarkResult, PoolError>) {
        let done = self.done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if self.quiet {
            return;
        }
        let outcome = match result {
            Ok(r) => format!("{:.4} ms", r.stats.median_ms),
            Err(_) => Status::of(result).to_string(),
        };
        let width = total.to_string().len();
        eprintln!("  [{done:>width$}/{total}] {} {outcome}", choice.label());
    }
}
