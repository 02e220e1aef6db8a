//! `tunebox tune`: enumerate, precompile, benchmark, verify, rank.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use rayon::prelude::*;
use tunebox_cpu::{CacheDir, CpuError, Signature};
use tunebox_pool::{PoolError, Status, TuningProcessPool, Verification, verify_outputs};
use tunebox_process::{Output, ProcessConfig, TuningProcess};
use tunebox_protocol::{
    BenchmarkRequest, BenchmarkResult, CKernel, CudaCode, CudaKernel, Kernel, TimingStats,
};

use crate::launch::Launch;
use crate::manifest::{KernelSource, Language, Manifest, Reference, Verify};
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
    /// Things the user should know about the run (sources outside the manifest's folder, …).
    pub(crate) notes: Vec<String>,
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
    // A choice whose request cannot be built (its launch geometry fails) is an error at once.
    let mut early: Vec<Option<(Status, String)>> = vec![None; choices.len()];
    let mut requests: Vec<Option<BenchmarkRequest>> = Vec::with_capacity(choices.len());
    for (i, choice) in choices.iter().enumerate() {
        match request(
            &manifest,
            &manifest.kernel,
            manifest.launch.as_ref(),
            choice,
        ) {
            Ok(request) => requests.push(Some(request)),
            Err(e) => {
                early[i] = Some((Status::Error, format!("{e:#}")));
                requests.push(None);
            }
        }
    }
    // A reference to run, unless the expected outputs were given as files.
    let reference = match manifest.verify.as_ref().map(|v| &v.reference) {
        Some(Reference::Choice(choice)) => Some((
            choice.label(),
            request(
                &manifest,
                &manifest.kernel,
                manifest.launch.as_ref(),
                choice,
            )
            .with_context(|| format!("the reference {}", choice.label()))?,
        )),
        Some(Reference::Source(source, launch)) => {
            let label = format!("{} ({})", source.entry, source.source_name);
            let launch = launch.as_deref().or(manifest.launch.as_ref());
            let request = request(&manifest, source, launch, &Choice::new(Default::default()))
                .with_context(|| {
                    format!(
                        "the reference {label} (a CUDA reference whose launch uses params needs \
                         its own `launch` in verify.reference)"
                    )
                })?;
            Some((label, request))
        }
        Some(Reference::Outputs(_)) | None => None,
    };

    // C kernels compile here, in parallel, so that compile errors surface early and workers only
    // load cached objects; CUDA kernels compile in the workers (below).
    let cache = CacheDir::from_env()?;
    std::fs::create_dir_all(cache.path()).with_context(|| {
        format!(
            "cannot create the kernel cache {}; set TUNEBOX_CACHE_DIR to a writable directory",
            cache.path().display()
        )
    })?;
    let c_kernels = requests
        .iter()
        .flatten()
        .filter(|r| matches!(r.kernel, Kernel::C(_)))
        .count();
    if c_kernels > 0 {
        progress.note(&format!(
            "compiling {c_kernels} choices with {} threads…",
            rayon::current_num_threads()
        ));
    }
    let compiled: Vec<Option<String>> = requests
        .par_iter()
        .map(|r| {
            r.as_ref()
                .and_then(|r| precompile(r, &cache).err())
                .map(|e| format!("{:#}", anyhow::Error::new(e)))
        })
        .collect();
    for (slot, error) in early.iter_mut().zip(compiled) {
        if let Some(error) = error {
            *slot = Some((Status::CompileError, error));
        }
    }
    if let Some((label, request)) = &reference
        && let Err(e) = precompile(request, &cache)
    {
        bail!(
            "the reference {label} does not compile: {:#}",
            anyhow::Error::new(e)
        );
    }

    // A GPU manifest needs a worker that sees a GPU: ask one first, so that a missing driver is
    // one clear error rather than an error per choice.
    let gpu = if manifest.kernel.language == Language::Cuda {
        Some(probe_gpu()?)
    } else {
        None
    };

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

    // GPU kernels compile in the workers (a compiler can crash too), spread over the pool.
    let to_prepare: Vec<usize> = (0..requests.len())
        .filter(|&i| {
            early[i].is_none()
                && matches!(&requests[i], Some(r) if matches!(r.kernel, Kernel::Cuda(_)))
        })
        .collect();
    if let Some((label, request)) = &reference
        && matches!(request.kernel, Kernel::Cuda(_))
        && let Err(e) = pool.prepare(std::slice::from_ref(request)).remove(0)
    {
        bail!("the reference {label} could not be prepared: {e}");
    }
    if !to_prepare.is_empty() {
        progress.note(&format!(
            "compiling {} choices on {workers} worker(s)…",
            to_prepare.len()
        ));
        let batch: Vec<BenchmarkRequest> = to_prepare
            .iter()
            .map(|&i| {
                requests[i]
                    .clone()
                    .expect("only built requests are prepared")
            })
            .collect();
        for (&i, result) in to_prepare.iter().zip(pool.prepare(&batch)) {
            if let Err(e) = result {
                early[i] = Some((Status::of_error(&e), format!("{:#}", anyhow::Error::new(e))));
            }
        }
    }

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
        .filter(|&i| early[i].is_none())
        .collect();
    progress.note(&format!(
        "benchmarking {} choices on {workers} worker(s), timeout {:?}…",
        runnable.len(),
        timeout
    ));
    let to_run: Vec<BenchmarkRequest> = runnable
        .iter()
        .map(|&i| requests[i].clone().expect("runnable choices have requests"))
        .collect();
    let measured = pool.benchmark_with(&to_run, |i, result| {
        progress.finished(to_run.len(), &choices[runnable[i]], result);
    });
    pool.shutdown(Duration::from_millis(500));

    // `measured` follows the runnable choices in order.
    let mut measured = measured.into_iter();
    let mut results: Vec<ChoiceResult> = choices
        .into_iter()
        .zip(early)
        .map(|(choice, early)| match early {
            Some((status, error)) => ChoiceResult {
                choice,
                status,
                stats: None,
                error: Some(error),
                verification: None,
                mutated_inputs: Vec::new(),
            },
            None => {
                let result = measured
                    .next()
                    .expect("one measurement per runnable choice");
                judge(choice, result, reference_outputs.as_deref(), &manifest)
            }
        })
        .collect();
    rank(&mut results);
    let mut notes = Vec::new();
    let mut sources = vec![&manifest.kernel];
    if let Some(Verify {
        reference: Reference::Source(source, _),
        ..
    }) = &manifest.verify
    {
        sources.push(source);
    }
    for source in sources.into_iter().filter(|s| s.outside) {
        notes.push(format!(
            "the source {} lies outside the manifest's folder",
            source.source_name
        ));
    }
    Ok(Report {
        manifest: manifest.path.clone(),
        name: manifest.name.clone(),
        kernel: format!(
            "{} ({})",
            manifest.kernel.entry, manifest.kernel.source_name
        ),
        device: gpu.unwrap_or_else(cpu_model),
        results,
        elapsed: start.elapsed(),
        workers,
        notes,
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
        reference: Reference::Source(source, _),
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

/// The request measuring `choice` of `source`, launched as `launch` says (CUDA).
///
/// # Errors
///
/// The launch geometry cannot be evaluated for this choice, or a CUDA kernel has none.
fn request(
    manifest: &Manifest,
    source: &KernelSource,
    launch: Option<&Launch>,
    choice: &Choice,
) -> Result<BenchmarkRequest> {
    let mut flags = source.flags.clone();
    flags.push(format!("-I{}", source.dir.display()));
    let kernel = match source.language {
        Language::C => Kernel::C(CKernel {
            source: source.text.clone(),
            source_name: source.source_name.clone(),
            entry: source.entry.clone(),
            defines: choice.defines(),
            flags,
            compiler: source.compiler.clone(),
        }),
        Language::Cuda => Kernel::Cuda(CudaKernel {
            code: CudaCode::Source {
                text: source.text.clone(),
                name: source.source_name.clone(),
            },
            entry: source.entry.clone(),
            defines: choice.defines(),
            options: flags,
            launch: launch
                .context("a CUDA kernel needs a launch geometry")?
                .config(choice)
                .context("launch")?,
        }),
    };
    let verify = manifest.verify.is_some();
    Ok(BenchmarkRequest {
        kernel,
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
    })
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

/// The GPU a worker sees, e.g. `NVIDIA H200 (sm_90, 132 SMs)`.
///
/// # Errors
///
/// No worker can start, or its `cuda` backend is missing or sees no GPU (the error says why:
/// no driver, no device).
fn probe_gpu() -> Result<String> {
    let mut worker = TuningProcess::spawn(ProcessConfig::new())
        .context("could not start a worker to look for a GPU")?;
    let probe = worker
        .probe(Duration::from_secs(60))
        .context("the probe worker failed")?;
    // The probe worker's exit status is of no interest.
    let _ = worker.shutdown(Duration::from_millis(500));
    if let Some(device) = probe.devices.first() {
        return Ok(format!(
            "{} (sm_{}{}, {} SMs)",
            device.name, device.compute_capability.0, device.compute_capability.1, device.sm_count
        ));
    }
    match probe
        .unavailable
        .iter()
        .find(|(backend, _)| backend == "cuda")
    {
        Some((_, why)) => {
            bail!("this manifest needs a GPU, but the cuda backend is unavailable: {why}")
        }
        None if !probe.backends.iter().any(|b| b == "cuda") => {
            bail!("this manifest needs a GPU, but the worker has no cuda backend")
        }
        None => {
            bail!("this manifest needs a GPU, but the worker sees none (CUDA_VISIBLE_DEVICES?)")
        }
    }
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
