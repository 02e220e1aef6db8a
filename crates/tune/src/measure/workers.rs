//! The run's side of its workers: a choice's `BenchmarkRequest`, the pool that measures the
//! requests one choice at a time (so that a time budget or Ctrl-C stops new choices from
//! starting), the reference's outputs, judging each result against them, and the probes of the
//! device (`probe_gpu`, `cpu_model`). The stages in `run/` call these.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tunebox_cpu::{CacheDir, CompileControl, CpuError, Signature};
use tunebox_pool::{PoolConfig, PoolError, Status, TuningProcessPool, verify_outputs};
use tunebox_process::{Output, ProcessConfig, ProcessError, TuningProcess};
use tunebox_protocol::{
    BenchmarkRequest, BenchmarkResult, CKernel, CudaCode, CudaKernel, Kernel, TensorData,
    TensorSpec, TimingConfig, TimingStats, VariedReps,
};

use crate::manifest::launch::Launch;
use crate::manifest::{KernelSource, Language, Manifest, Reference};
use crate::results::{Check, ChoiceResult};
use crate::space::Choice;

/// How long the probe worker may take (creating a CUDA context can take seconds).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// The request measuring `choice` of `source`, launched as `launch` says (CUDA), with Kernel
/// Tuner's grid and block macros from it in a manifest of Kernel Tuner's names (C and CUDA,
/// [`Launch::kernel_tuner_defines`]).
///
/// # Errors
///
/// The launch geometry cannot be evaluated for this choice, or a CUDA kernel has none.
pub(crate) fn request(
    manifest: &Manifest,
    source: &KernelSource,
    launch: Option<&Launch>,
    choice: &Choice,
) -> Result<BenchmarkRequest> {
    let mut flags = source.flags.clone();
    flags.push(format!("-I{}", source.dir.display()));
    // The params, and Kernel Tuner's grid and block macros in its names.
    let mut defines = choice.defines();
    if let Some(geometry) = launch.filter(|_| manifest.kernel_tuner_macros) {
        defines.extend(geometry.kernel_tuner_defines(choice).context("launch")?);
    }
    let kernel = match source.language {
        Language::C => {
            let mut kernel = CKernel::new(source.text.clone(), source.entry.clone())
                .source_name(source.source_name.clone())
                .compiler(source.compiler.clone());
            kernel.defines = defines;
            kernel.flags = flags;
            // The parent compiled the choice before a worker runs it: the identity it found
            // spares each fresh worker the compiler's `--version` (a worker per window).
            kernel.compiler_identity = tunebox_cpu::known_compiler_version(&source.compiler);
            Kernel::C(kernel)
        }
        Language::Cuda => {
            let mut kernel = CudaKernel::from_code(
                CudaCode::Source {
                    text: source.text.clone(),
                    name: source.source_name.clone(),
                },
                source.entry.clone(),
            )
            .launch(
                launch
                    .context("a CUDA kernel needs a launch geometry")?
                    .config(choice)
                    .context("launch")?,
            );
            kernel.defines = defines;
            kernel.options = flags;
            Kernel::Cuda(kernel)
        }
    };
    let mut request = BenchmarkRequest::new(kernel).timing(timing(manifest));
    request.tensors = manifest.tensors.clone();
    request.scalars = manifest.scalars.clone();
    request.args = manifest.args.clone();
    Ok(request)
}

/// The timing of every request of `manifest`'s run.
fn timing(manifest: &Manifest) -> TimingConfig {
    manifest
        .timing
        .clone()
        // Against a reference kernel, one last call on fresh inputs (crate::measure::integrity).
        .fresh_seed(verifies_against_kernel(manifest).then(crate::measure::integrity::fresh_seed))
        // And, in a sandbox or when asked, timed reps on varied inputs, some checked.
        .varied_reps(checked_reps(manifest).map(VariedReps::new))
        // Outputs travel back only when there is something to compare them with. They stay
        // outputs either way: a kernel writing them is not writing an input (listed in
        // `mutated_inputs` and put back before every call).
        .return_outputs(manifest.verify.is_some())
}

/// How many timed reps of each verified window are checked on varied inputs
/// ([`crate::manifest::Verify::checked_reps`]), for the manifest's sandbox; `None`: no rep varies.
fn checked_reps(manifest: &Manifest) -> Option<u32> {
    manifest
        .verify
        .as_ref()?
        .checked_reps(manifest.sandbox().is_some())
}

/// Whether the manifest verifies against a kernel (a choice or a source), which can be run on
/// fresh inputs too, rather than against outputs given as files.
fn verifies_against_kernel(manifest: &Manifest) -> bool {
    manifest
        .verify
        .as_ref()
        .is_some_and(|v| !matches!(v.reference, Reference::Outputs(_)))
}

/// Compiles a C request into the cache (other kernels compile in their workers), within
/// `control`'s deadline and cancel check. Returns the files the compiler read (the headers;
/// none for other kernels).
pub(crate) fn precompile(
    request: &BenchmarkRequest,
    cache: &CacheDir,
    control: &CompileControl<'_>,
) -> Result<Vec<PathBuf>, CpuError> {
    match &request.kernel {
        Kernel::C(kernel) => {
            tunebox_cpu::compile_with(kernel, &Signature::of(request), cache, control)
                .map(|artifact| artifact.dependencies().to_vec())
        }
        _ => Ok(Vec::new()),
    }
}

/// The error of a compile that ran past `compile_timeout_s`: what timed out, the compiler's last
/// output, and what to change. `None` for other errors.
pub(crate) fn compile_timeout_message(error: &CpuError) -> Option<String> {
    let CpuError::CompileTimeout {
        command,
        after,
        log,
    } = error
    else {
        return None;
    };
    Some(format!(
        "compile timed out after {} s (compile_timeout_s)\nthe compiler was killed (raise \
         compile_timeout_s if it is just slow): {command}\nthe compiler's last output:\n{log}",
        after.as_secs_f64()
    ))
}

/// The reference to run, if the manifest verifies against a kernel (rather than files): its
/// label and request.
///
/// # Errors
///
/// The reference's launch cannot be evaluated.
pub(crate) fn reference_request(manifest: &Manifest) -> Result<Option<(String, BenchmarkRequest)>> {
    Ok(match manifest.verify.as_ref().map(|v| &v.reference) {
        Some(Reference::Choice(choice)) => Some((
            choice.label(),
            request(manifest, &manifest.kernel, manifest.launch.as_ref(), choice)
                .with_context(|| format!("the reference {}", choice.label()))?,
        )),
        Some(Reference::Source(source, launch)) => {
            let label = format!("{} ({})", source.entry, source.source_name);
            // The kernel's geometry is a CUDA reference's default; a C reference has none
            // (a C kernel's is only its macros, over the choice's params).
            let kernels = manifest.launch.as_ref();
            let launch = launch
                .as_deref()
                .or(kernels.filter(|_| source.language == Language::Cuda));
            let request = request(manifest, source, launch, &Choice::new(Default::default()))
                .with_context(|| {
                    format!(
                        "the reference {label} (a CUDA reference whose launch uses params needs \
                         its own `launch` in verify.reference)"
                    )
                })?;
            Some((label, request))
        }
        Some(Reference::Outputs(_)) | None => None,
    })
}

/// What measuring needs once the run has started it: the pool of workers, and the reference
/// outputs each choice's result is judged by (`None`: unverified).
pub(crate) struct Measuring {
    /// Where each choice is first measured, verified and judged (its screening window), and
    /// where a window that needs checking is measured again.
    pub pool: Arc<TuningProcessPool>,
    /// Where the later windows of choices that passed screening are measured (the rounds',
    /// the race's, those beside the compiles): workers reused from window to window
    /// ([`start_warm_pool`]); `None`: in [`Measuring::pool`] too.
    pub warm: Option<Arc<TuningProcessPool>>,
    pub reference: Option<Vec<TensorData>>,
    /// The reference kept running to check candidates' reps on varied inputs
    /// ([`varied_reference`]); `None` when no rep is checked.
    pub varied: Option<VariedReference>,
    /// Where batches of CUDA choices compile ([`CudaCompilers`]); `None`: on [`Measuring::pool`].
    pub cuda_compilers: Option<CudaCompilers>,
}

impl Measuring {
    /// The pool a later window of a choice that passed screening is measured in.
    pub(crate) fn windows_pool(&self) -> &TuningProcessPool {
        self.warm.as_deref().unwrap_or(&self.pool)
    }

    /// Shuts every pool down, giving idle workers `grace`.
    pub(crate) fn shutdown(&self, grace: Duration) {
        self.pool.shutdown(grace);
        if let Some(warm) = &self.warm {
            warm.shutdown(grace);
        }
        if let Some(varied) = &self.varied {
            varied.pool.shutdown(grace);
        }
    }
}

/// The reference, kept running for the run in a worker of its own, to compute its outputs on
/// the inputs of candidates' checked reps ([`TimingConfig::varied_reps`]): the request's
/// inputs varied with each rep's seed ([`TensorSpec::varied_block`]).
pub(crate) struct VariedReference {
    pool: Arc<TuningProcessPool>,
    /// The reference's request, one call and its outputs (`outputs_only`).
    request: BenchmarkRequest,
}

impl VariedReference {
    /// The reference's outputs on its inputs varied with `seed`.
    ///
    /// # Errors
    ///
    /// The reference's call failed (it crashed, timed out, or the run was stopped).
    pub(crate) fn outputs(&self, seed: u64) -> Result<Vec<TensorData>, PoolError> {
        let mut request = self.request.clone();
        request.timing.varied_seed = Some(seed);
        benchmark_one(&self.pool, &request).map(|r| r.outputs)
    }

    /// The pool, for the run's stop to watch.
    pub(crate) fn pool(&self) -> &Arc<TuningProcessPool> {
        &self.pool
    }
}

/// Starts the reference that checks candidates' reps on varied inputs
/// ([`VariedReference`]), when the manifest's reps are checked
/// ([`crate::manifest::Verify::checked_reps`]) against a C reference kernel (a CUDA backend
/// varies no rep); `None` otherwise. Its worker is reused from call to call (it is the
/// reference: nothing of a candidate's runs in it).
///
/// # Errors
///
/// The worker cannot start.
pub(crate) fn varied_reference(
    manifest: &Manifest,
    reference: Option<&(String, BenchmarkRequest)>,
    timeout: Duration,
    worker: (Option<&Path>, Option<&Path>),
) -> Result<Option<VariedReference>> {
    let (Some(verify), Some((_, request))) = (manifest.verify.as_ref(), reference) else {
        return Ok(None);
    };
    if checked_reps(manifest).is_none_or(|n| n == 0) || !matches!(request.kernel, Kernel::C(_)) {
        return Ok(None);
    }
    let mut request = request.clone();
    request.timing.outputs_only = true;
    request.timing.fresh_seed = None;
    request.timing.varied_reps = None;
    let timeout = verify.reference_timeout(timeout);
    let pool = start_pool(manifest, 1, timeout, None, worker)?;
    Ok(Some(VariedReference { pool, request }))
}

/// A worker's config: `worker` as its executable when given, else the default
/// (`$TUNEBOX_WORKER`, else the current executable); a scratch folder of its own as its
/// working directory, so that a candidate looking around it finds nothing of the run's (the
/// manifest's folder, the expected outputs, the results cache); and the parent's look for
/// processes a candidate left running after each reply, sandboxed or not.
fn process_config(worker: Option<&Path>) -> ProcessConfig {
    let config = ProcessConfig::new().scratch(true).check_children(true);
    match worker {
        Some(path) => config.worker(path),
        None => config,
    }
}

/// Says, through `note`, that the workers run sandboxed and which protections this kernel
/// cannot give (`SandboxSupport::missing`); nothing without a sandbox.
pub(crate) fn note_sandbox(manifest: &Manifest, note: impl Fn(&str)) {
    let Some(sandbox) = manifest.sandbox.as_ref() else {
        return;
    };
    let missing = tunebox_process::SandboxSupport::probe().missing(sandbox);
    if missing.is_empty() {
        note("sandbox: on (no network, Landlock, seccomp, limits; docs/sandbox.md)");
    } else {
        note(&format!(
            "sandbox: on, but this machine lacks: {}",
            missing.join("; ")
        ));
    }
}

/// The manifest's `[sandbox]` (or `--sandbox`'s) for a pool's workers.
fn sandboxed(config: ProcessConfig, manifest: &Manifest) -> ProcessConfig {
    config.sandbox(manifest.sandbox.clone())
}

/// Starts `workers` workers, with the manifest's `[env]` and in its sandbox if it has one;
/// with `cache_root`, that is their kernel cache root (`TUNEBOX_CACHE_DIR`: a run's private
/// one, when the user's cannot be written).
///
/// # Errors
///
/// The workers cannot start.
pub(crate) fn start_pool(
    manifest: &Manifest,
    workers: usize,
    timeout: Duration,
    max_process_uses: Option<u64>,
    (worker, cache_root): (Option<&Path>, Option<&Path>),
) -> Result<Arc<TuningProcessPool>> {
    crate::measure::integrity::prepare_floor(floor_bytes(manifest), &manifest.timing);
    let config = pool_config(
        manifest,
        workers,
        timeout,
        max_process_uses,
        (worker, cache_root),
    );
    let pool = TuningProcessPool::new(config).context("could not start the workers")?;
    Ok(Arc::new(pool))
}

/// Where a run's CUDA choices compile when there are more of them than workers: NVRTC needs no
/// GPU time, only CPU, so a batch is prepared (compiled into the kernel cache, loaded, its launch
/// checked) on up to one worker per CPU ([`CudaCompilers::workers_for`]), rather than on the one
/// worker per GPU that measures. Each worker compiles for the GPU the measuring workers see (it
/// inherits the run's `CUDA_VISIBLE_DEVICES`), and the measuring workers then load the cached
/// cubins. The workers live for one batch: started, given the batch, shut down.
#[derive(Debug, Clone)]
pub(crate) struct CudaCompilers {
    config: PoolConfig,
    /// The most workers a batch gets.
    most: usize,
}

/// The most compile workers a batch of CUDA choices gets, however many CPUs: each holds a CUDA
/// context on the GPU (a few hundred MiB of its memory) while it compiles.
const MOST_CUDA_COMPILERS: usize = 16;

/// The fewest CUDA choices a batch needs for compile workers of its own: starting one (a
/// process and a CUDA context, 0.4 s on an H200) costs about what compiling one choice does
/// (0.55 s there), so a batch of two or three gains little (an adaptive search's small rounds).
const MIN_CUDA_BATCH: usize = 4;

impl CudaCompilers {
    /// The compilers of a CUDA `manifest` (`None` for other kernels, or a machine with one
    /// CPU), with the pool's per-request `timeout` and `worker` (executable and kernel cache
    /// root, as [`start_pool`] takes them).
    pub(crate) fn new(
        manifest: &Manifest,
        timeout: Duration,
        worker: (Option<&Path>, Option<&Path>),
    ) -> Option<CudaCompilers> {
        if manifest.kernel.language != Language::Cuda {
            return None;
        }
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let most = cpus.min(MOST_CUDA_COMPILERS);
        (most > 1).then(|| CudaCompilers {
            config: pool_config(manifest, 1, timeout, None, worker),
            most,
        })
    }

    /// How many compile workers a batch of `choices` gets beside a measuring pool of
    /// `measuring` workers: none (prepare on the measuring pool) unless more than it, and none
    /// for a batch under [`MIN_CUDA_BATCH`].
    pub(crate) fn workers_for(&self, choices: usize, measuring: usize) -> Option<usize> {
        let workers = choices.min(self.most);
        (choices >= MIN_CUDA_BATCH && workers > measuring).then_some(workers)
    }

    /// Prepares `requests` on `workers` compile workers started for them (watched by `stop`
    /// while they work), one result per request in input order, as
    /// [`TuningProcessPool::prepare`].
    ///
    /// # Errors
    ///
    /// The workers cannot start (the caller prepares on its own pool instead).
    pub(crate) fn prepare(
        &self,
        requests: &[BenchmarkRequest],
        workers: usize,
        stop: &crate::base::stop::Stop,
    ) -> Result<Vec<Result<(), PoolError>>, PoolError> {
        let pool = Arc::new(TuningProcessPool::new(
            self.config.clone().max_workers(workers),
        )?);
        stop.watch_beside(Arc::clone(&pool));
        let prepared = pool.prepare(requests);
        pool.shutdown(Duration::from_millis(200));
        Ok(prepared)
    }
}

/// Starts the pool of `workers` reused workers that measure the later windows of the choices
/// that passed screening in `screening` (the rounds', the race's, those beside the compiles):
/// each is kept from window to window (no `max_process_uses`), so that a window costs its
/// calls, not a process start, a load and fresh pages for every tensor; it shares the large
/// inputs `screening` makes ([`TuningProcessPool::sibling`]). What a window changes in its
/// worker is put back or has the worker replaced by the worker's own checks (`hygiene`).
///
/// # Errors
///
/// The workers cannot start.
pub(crate) fn start_warm_pool(
    screening: &TuningProcessPool,
    manifest: &Manifest,
    workers: usize,
    timeout: Duration,
    worker: (Option<&Path>, Option<&Path>),
) -> Result<Arc<TuningProcessPool>> {
    let config = pool_config(manifest, workers, timeout, None, worker);
    let pool = screening
        .sibling(config)
        .context("could not start the workers of the rounds")?;
    Ok(Arc::new(pool))
}

/// The config of a pool of `workers` workers (the executable `worker`, else the default; the
/// kernel cache at `cache_root` when the run compiles into a private one) with the manifest's
/// `[env]`, in its sandbox if it has one, replaced after `max_process_uses` tasks (`None`:
/// never).
fn pool_config(
    manifest: &Manifest,
    workers: usize,
    timeout: Duration,
    max_process_uses: Option<u64>,
    (worker, cache_root): (Option<&Path>, Option<&Path>),
) -> PoolConfig {
    let mut process = sandboxed(manifest.env.configure(process_config(worker)), manifest)
        .stdout(crate::measure::worker_stdout::output())
        .stderr(Output::Capture {
            tail_bytes: 16 * 1024,
        });
    if let Some(root) = cache_root {
        process = process.env(tunebox_protocol::CACHE_DIR_ENV, root);
    }
    PoolConfig::new()
        .max_workers(workers)
        .timeout(timeout)
        .process_config(process)
        .maximum_process_uses(max_process_uses)
}

/// Prepares (CUDA) and runs the reference once, in a worker of its own whose timeout is the
/// reference's (`verify.timeout_s`, see [`Verify::reference_timeout`]), returning its outputs;
/// for a reference given as files, those. The reference is called once, untimed
/// (`outputs_only`): its outputs are all a run needs from it. `worker` is the worker executable
/// and kernel cache root, as [`start_pool`] takes them; `watch` registers the worker's pool so
/// that Ctrl-C stops it.
///
/// # Errors
///
/// The reference cannot be prepared or fails (the message says how long it may take, and how
/// to give it longer): nothing could be verified.
///
/// [`Verify::reference_timeout`]: crate::manifest::Verify::reference_timeout
pub(crate) fn reference_outputs(
    manifest: &Manifest,
    reference: Option<&(String, BenchmarkRequest)>,
    timeout: Duration,
    worker: (Option<&Path>, Option<&Path>),
    watch: impl Fn(Arc<TuningProcessPool>),
    note: impl Fn(&str),
) -> Result<Option<Vec<TensorData>>> {
    let Some(verify) = manifest.verify.as_ref() else {
        return Ok(None);
    };
    let Some((label, request)) = reference else {
        return Ok(match &verify.reference {
            Reference::Outputs(outputs) => Some(outputs.clone()),
            Reference::Choice(_) | Reference::Source(..) => None,
        });
    };
    let timeout = verify.reference_timeout(timeout);
    let mut request = request.clone();
    request.timing.outputs_only = true;
    let pool = start_pool(manifest, 1, timeout, Some(1), worker)?;
    watch(Arc::clone(&pool));
    if matches!(request.kernel, Kernel::Cuda(_))
        && let Err(e) = pool.prepare(std::slice::from_ref(&request)).remove(0)
    {
        bail!("the reference {label} could not be prepared: {e}");
    }
    note(&format!(
        "running the reference {label} (once, timeout {timeout:?})…"
    ));
    let result = pool.benchmark(std::slice::from_ref(&request)).remove(0);
    pool.shutdown(Duration::from_millis(500));
    let outputs = result.map_err(|e| {
        let hint = if e.status() == Status::Timeout {
            " (one call of the reference may take verify.timeout_s; raise it if the reference \
             is just slow)"
        } else {
            ""
        };
        anyhow::anyhow!("the reference {label} failed: {e}{hint}")
    })?;
    // Kept here, in the parent, never in a candidate's worker; with its fresh-input outputs.
    Ok(Some(crate::measure::integrity::join_reference(outputs)))
}

/// Measures `request` on `pool`: its one result.
pub(crate) fn benchmark_one(
    pool: &TuningProcessPool,
    request: &BenchmarkRequest,
) -> Result<BenchmarkResult, PoolError> {
    pool.benchmark(std::slice::from_ref(request)).remove(0)
}

/// What [`InOrder::try_next`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// The next position in order, settled and measurable.
    Ready(usize),
    /// The next position in order has not settled yet (it is still compiling).
    Pending,
    /// No position is left.
    Done,
}

/// Hands out positions for measuring in a fixed order, each once it has settled: compiled
/// (measure it) or failed (skip it). Compiles finish in any order; measuring keeps the order
/// of the space, so that runs are reproducible and a worker reused across choices
/// (`--max-process-uses`) sees them in the same sequence every time.
pub(crate) struct InOrder {
    order: Vec<usize>,
    next: AtomicUsize,
    /// By position: `None` while pending, then whether it can be measured.
    settled: Mutex<Vec<Option<bool>>>,
    changed: Condvar,
}

impl InOrder {
    /// `order` (positions below `len`), every position pending.
    pub(crate) fn new(order: Vec<usize>, len: usize) -> InOrder {
        InOrder {
            order,
            next: AtomicUsize::new(0),
            settled: Mutex::new(vec![None; len]),
            changed: Condvar::new(),
        }
    }

    /// Settles `position`: measurable or not.
    pub(crate) fn settle(&self, position: usize, measurable: bool) {
        self.lock()[position] = Some(measurable);
        self.changed.notify_all();
    }

    /// Settles every position still pending.
    pub(crate) fn settle_rest(&self, measurable: bool) {
        self.lock()
            .iter_mut()
            .filter(|s| s.is_none())
            .for_each(|s| *s = Some(measurable));
        self.changed.notify_all();
    }

    /// Without waiting: the next measurable position, or that the next one in order is still
    /// pending ([`InOrder::wait`] for it to settle), or that none is left.
    pub(crate) fn try_next(&self) -> Next {
        loop {
            let at = self.next.load(Ordering::SeqCst);
            let Some(&position) = self.order.get(at) else {
                return Next::Done;
            };
            let Some(measurable) = self.lock()[position] else {
                return Next::Pending;
            };
            if self
                .next
                .compare_exchange(at, at + 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
                && measurable
            {
                return Next::Ready(position);
            }
        }
    }

    /// Waits until a position settles, or `timeout` passes.
    pub(crate) fn wait(&self, timeout: Duration) {
        let settled = self.lock();
        let _ = self.changed.wait_timeout(settled, timeout);
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Option<bool>>> {
        self.settled.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether a pool error says nothing sure about the choice (the run was stopped, its worker
/// could not start, or another process killed it: the out-of-memory killer, a person): such a
/// result is not cached, so a re-run tries the choice again. A worker killed with `kill -9`
/// from a shell was cached as the choice's `crashed` for good.
pub(crate) fn is_transient(error: &PoolError) -> bool {
    match error {
        PoolError::ShutDown | PoolError::Cancelled | PoolError::Unavailable { .. } => true,
        PoolError::Process(e) if e.killed_from_outside() => true,
        PoolError::Process(e) => matches!(
            e,
            ProcessError::Spawn { .. }
                | ProcessError::HandshakeTimeout { .. }
                | ProcessError::ExitedBeforeHandshake { .. }
                | ProcessError::NoWorkerEntry { .. }
                | ProcessError::ProtocolMismatch { .. }
                | ProcessError::InitializerFailed { .. }
        ),
        _ => false,
    }
}

/// Turns a pool result into a choice result, verifying outputs when there is a reference.
pub(crate) fn judge(
    index: usize,
    choice: Choice,
    result: Result<BenchmarkResult, PoolError>,
    reference: Option<&[TensorData]>,
    varied: Option<&VariedReference>,
    manifest: &Manifest,
    device: &str,
) -> ChoiceResult {
    let mut measured = match result {
        Err(e) => {
            return ChoiceResult::failed(index, choice, e.status(), e.to_string(), device);
        }
        Ok(measured) => measured,
    };
    let (reference, fresh_reference) = match reference {
        Some(r) => {
            let (first, fresh) =
                crate::measure::integrity::split_reference(r, measured.outputs.len());
            (Some(first), fresh)
        }
        None => (None, None),
    };
    let verification = reference
        .zip(manifest.verify.as_ref())
        .map(|(reference, v)| {
            let first = verify_outputs(reference, &measured.outputs, v.tolerance);
            // Backends that make no call after the reps return no such outputs; outputs
            // the reps left byte for byte as the first call did compare the same (a memcmp
            // instead of a second pass over every element).
            let after = if measured.outputs_after_reps.is_empty()
                || same_bytes(&measured.outputs, &measured.outputs_after_reps)
            {
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
            Some(wrong_after_reps(after, manifest))
        } else {
            manifest
                .verify
                .as_ref()
                .and_then(|v| {
                    crate::measure::integrity::fresh_mismatch(
                        fresh_reference,
                        &measured,
                        v.tolerance,
                    )
                })
                .map(|fresh| {
                    let told = wrong_after_reps(&fresh.verification, manifest);
                    crate::measure::integrity::fresh_message(&fresh, told)
                })
                .or_else(|| {
                    let tolerance = manifest.verify.as_ref()?.tolerance;
                    let varied = varied?;
                    crate::measure::integrity::varied_mismatch(
                        |seed| varied.outputs(seed),
                        &measured,
                        tolerance,
                    )
                })
        }
    });
    if error.is_none()
        && let Some(floor) = crate::measure::integrity::below_floor_of(
            measured.stats.median_ms,
            floor_bytes(manifest),
            &manifest.timing,
        )
    {
        return ChoiceResult::failed(index, choice, Status::Suspicious, floor, device);
    }
    let metrics = manifest.metrics.evaluate(&choice, measured.stats.median_ms);
    let stats = std::mem::replace(&mut measured.stats, TimingStats::unmeasured());
    let mutated_inputs = std::mem::take(&mut measured.mutated_inputs);
    // Its outputs are judged: unmapping them is not the next window's wait.
    crate::measure::release::release(measured);
    ChoiceResult {
        index,
        choice,
        status: if error.is_some() {
            Status::Wrong
        } else {
            Status::Ok
        },
        stats: Some(stats),
        error,
        check: verification
            .map(|(first, after)| Check::from(if first.passed() { &after } else { &first })),
        mutated_inputs,
        metrics,
        screen_median_ms: None,
        cached: false,
        device: device.to_owned(),
        windows: None,
        objective: None,
    }
}

/// Whether tensor `t` of `manifest` travels back from a worker as an output: an output, when
/// there is something to compare it with.
fn returned(manifest: &Manifest, t: &TensorSpec) -> bool {
    t.output && manifest.verify.is_some()
}

/// The output bytes the physical floor holds a time of `manifest`'s kernel to
/// ([`crate::measure::integrity::below_floor_of`]): those of the outputs a worker returns
/// ([`request`]) for a C kernel, but for `reset` ones (put back before every call, so a kernel
/// may update a few of their elements, a histogram's or a scatter's: honest kernels writing
/// 16 KiB of a 4 MiB `reset` output were called impossible); none for a CUDA kernel, since
/// the floor's bandwidth is the host's (a GPU's memory is 10 to 50 times faster) and a GPU's
/// write-back L2 (50 MiB and more) takes outputs it holds faster than its memory could. Held
/// to the host's, honest kernels writing 4 MiB in 7 µs on an H200 were called suspicious.
pub(crate) fn floor_bytes(manifest: &Manifest) -> usize {
    if manifest.kernel.language == Language::Cuda {
        return 0;
    }
    let bytes: u64 = manifest
        .tensors
        .iter()
        .filter(|t| returned(manifest, t) && !t.reset)
        .filter_map(TensorSpec::byte_len)
        .sum();
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

/// Whether two lists of outputs are the same tensors with the same bytes.
fn same_bytes(a: &[TensorData], b: &[TensorData]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(a, b)| {
            a.name == b.name
                && a.dtype == b.dtype
                && a.shape == b.shape
                && a.bytes[..] == b.bytes[..]
        })
}

/// The GPU a worker sees, e.g. `NVIDIA H200 (sm_90, 132 SMs)`.
///
/// # Errors
///
/// No worker can start, or its `cuda` backend is missing or sees no GPU (the error says why:
/// no driver, no device).
pub(crate) fn probe_gpu(worker: Option<&Path>) -> Result<String> {
    let mut worker = TuningProcess::spawn(process_config(worker))
        .context("could not start a worker to look for a GPU")?;
    let probe = worker
        .probe(PROBE_TIMEOUT)
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
            bail!(
                "this manifest needs a GPU, but the cuda backend is unavailable: {why}.\n\
                 Tune it on a machine with an NVIDIA GPU. Here, --list and --count show its \
                 choices, and --replay RECORDED simulates a search on measurements recorded \
                 elsewhere (a Kernel Tuner cache file, a T4 file or a results cache)"
            )
        }
        None if !probe.backends.iter().any(|b| b == "cuda") => {
            bail!("this manifest needs a GPU, but the worker has no cuda backend")
        }
        None => {
            bail!("this manifest needs a GPU, but the worker sees none (CUDA_VISIBLE_DEVICES?)")
        }
    }
}

/// The error of a choice whose first call was correct and whose call after the timed reps (on
/// outputs filled with garbage, unless `reset`) was not: what the kernel did to each tensor
/// that differs, named as the manifest has it, and the fix.
fn wrong_after_reps(after: &tunebox_pool::Verification, manifest: &Manifest) -> String {
    let fixes: Vec<String> = after
        .tensors
        .iter()
        .filter(|t| !t.passed())
        .filter_map(|t| manifest.tensors.iter().find(|s| s.name == t.name))
        .map(|spec| {
            let name = &spec.name;
            if spec.reset {
                format!(
                    "`{name}` differs although it is re-initialized before every call (reset): \
                     the kernel's results vary from call to call (state kept between calls, a \
                     race, or a nondeterministic order of float operations; for the last, loosen \
                     verify.rtol/atol)"
                )
            } else if matches!(spec.init, tunebox_protocol::Init::Zeros) {
                format!(
                    "the kernel reads `{name}` before writing it (it accumulates into it, \
                     `{name}[i] += …`: set `reset = true` on `{name}`, so that every call starts \
                     from its init), or leaves part of it unwritten (then write every element: \
                     a later call finds what the one before left)"
                )
            } else {
                format!(
                    "the kernel updates `{name}` in place (it is an input and an output), so each \
                     call changes it further: set `reset = true` on `{name}`, so that it is \
                     re-initialized before every call, outside the timed window"
                )
            }
        })
        .collect();
    format!(
        "correct on the first call, wrong on a call after the timed reps ({}): {}",
        after.summary(),
        if fixes.is_empty() {
            "a later call gives other outputs".to_owned()
        } else {
            fixes.join("; ")
        }
    )
}

/// The CPU's model name and core count, e.g. `AMD EPYC 7B13 (2 cores)`.
pub(crate) fn cpu_model() -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_choices_compile_on_more_workers_only_when_there_are_more_of_them_than_measuring_workers()
     {
        let compilers = CudaCompilers {
            config: PoolConfig::new(),
            most: 16,
        };
        assert_eq!(compilers.workers_for(40, 1), Some(16), "at most `most`");
        assert_eq!(compilers.workers_for(5, 1), Some(5), "one per choice");
        assert_eq!(
            compilers.workers_for(3, 1),
            None,
            "too few to pay for new workers"
        );
        assert_eq!(
            compilers.workers_for(1, 1),
            None,
            "one choice: the pool's worker"
        );
        assert_eq!(
            compilers.workers_for(40, 16),
            None,
            "as many measuring workers"
        );
        assert_eq!(compilers.workers_for(0, 1), None);
    }

    #[test]
    fn outputs_are_the_same_only_with_the_same_names_and_bytes() {
        let tensor = |name: &str, bytes: Vec<u8>| {
            TensorData::new(
                name,
                tunebox_protocol::DType::U8,
                vec![bytes.len() as u64],
                tunebox_protocol::Bytes::from_vec(bytes).unwrap(),
            )
        };
        let first = [tensor("y", vec![1, 2, 3])];
        assert!(same_bytes(&first, &[tensor("y", vec![1, 2, 3])]));
        assert!(!same_bytes(&first, &[tensor("y", vec![1, 2, 4])]));
        assert!(!same_bytes(&first, &[tensor("z", vec![1, 2, 3])]));
        assert!(!same_bytes(&first, &[]));
    }

    /// Every position `gate` hands out, waiting for each to settle.
    fn taken(gate: &InOrder) -> Vec<usize> {
        let mut taken = Vec::new();
        loop {
            match gate.try_next() {
                Next::Ready(p) => taken.push(p),
                Next::Pending => gate.wait(Duration::from_millis(50)),
                Next::Done => return taken,
            }
        }
    }

    #[test]
    fn positions_are_handed_out_in_order_once_settled() {
        let gate = InOrder::new(vec![0, 1, 2, 3], 4);
        std::thread::scope(|scope| {
            let taker = scope.spawn(|| taken(&gate));
            // Settled out of order, and one of them fails.
            for (position, ok) in [(2, true), (3, true), (1, false), (0, true)] {
                std::thread::sleep(Duration::from_millis(5));
                gate.settle(position, ok);
            }
            assert_eq!(taker.join().unwrap(), [0, 2, 3]);
        });
        // Positions nobody settles (a compile thread that died) end the wait too.
        let gate = InOrder::new(vec![0, 1], 2);
        gate.settle(0, true);
        gate.settle_rest(false);
        assert_eq!(taken(&gate), [0]);
        // Without waiting: pending until settled, failed ones skipped, then done.
        let gate = InOrder::new(vec![0, 1, 2], 3);
        assert_eq!(gate.try_next(), Next::Pending);
        gate.settle(0, true);
        gate.settle(1, false);
        assert_eq!(gate.try_next(), Next::Ready(0));
        assert_eq!(gate.try_next(), Next::Pending);
        gate.settle(2, true);
        assert_eq!(gate.try_next(), Next::Ready(2));
        assert_eq!(gate.try_next(), Next::Done);
    }
}
