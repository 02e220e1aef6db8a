//! The `cuda` backend: compile (a cache hit), load, check the launch, allocate, call once, time.

use cudarc::driver::sys::CUfunction_attribute as F;
use tunebox_bench::{
    Backend, Restore, Runner, check_first_call, do_bench_within, fresh_inputs, report_progress,
    summarize,
};
use tunebox_protocol::{
    Arg, BenchError, BenchmarkRequest, BenchmarkResult, CudaKernel, DeviceInfo, Kernel, Phase,
    TensorData,
};

use crate::CacheDir;
use crate::compile;
use crate::device::{self, DeviceLimits};
use crate::driver::{self, Context, Device, Event, Function, Module, Stream};
use crate::launch::{FunctionLimits, check_parameters, validate_launch};
use crate::probe;
use crate::tensors::DeviceTensor;
use crate::timing::{Arguments, CudaRunner, DelayKernel, L2Flusher};

/// Runs [`Kernel::Cuda`] requests on the worker's first visible GPU; its [`Backend::name`] is
/// `"cuda"`.
///
/// Construction is cheap and cannot fail: nothing is loaded until the first request, so a worker
/// registers this backend on every machine, and on one without a GPU each request is answered
/// with [`BenchError::DriverUnavailable`] (or [`BenchError::CompilerUnavailable`] for a source
/// when NVRTC is missing).
///
/// For each request it compiles the kernel ([`CacheDir`]: normally a cache hit after
/// [`Backend::prepare`]), loads the module, checks the launch configuration against the device
/// and the kernel ([`validate_launch`]), allocates and initializes every tensor on the device,
/// calls the kernel once and returns the tensors marked `output` as they are after that call,
/// then times it with [`do_bench_within`] (within `timing.budget_ms` from the request's start)
/// and CUDA events (cold: the L2 flushed before every rep;
/// hot: batches of launches between one pair of events). Inputs the first call wrote, and
/// `reset` tensors, are restored before every later call. When there are outputs, they are then
/// filled with `0xFF`, the kernel is called once more, and those outputs are returned too, as
/// the cpu backend does: as `integrity.fresh_outputs` when `timing.fresh_seed` is set (that call
/// runs with every random input drawn again, [`tunebox_bench::fresh_inputs`]), else as
/// `outputs_after_reps`. Then, untimed: the outputs must be unchanged after a device-wide
/// synchronize, and one more call timed by its events must not leave the device busy well
/// past them (`Suspicious` `outputs_changed_after_call` / `work_outside_stream`, docs/sandbox.md).
/// With `timing.outputs_only` (a reference) it returns after the first call and, with a fresh
/// seed, the fresh-input call.
///
/// A sticky device fault (see [`stickiness`](crate::stickiness)) is returned as
/// [`BenchError::DeviceFault`] with `sticky: true`; the worker exits after answering it, and
/// this backend refuses every later request with the same error.
#[derive(Debug)]
pub struct CudaBackend {
    cache: Option<CacheDir>,
    device: Option<DeviceState>,
    /// Set by a sticky fault: the context is gone, and every later request gets this error.
    lost: Option<BenchError>,
}

/// The device this backend measures on, set up by the first request. Fields drop in order:
/// the flusher, the delay kernel and the stream before the context.
#[derive(Debug)]
struct DeviceState {
    flusher: Option<L2Flusher>,
    /// `None` until loaded; `Some(None)` when it could not be (timings then include the launch
    /// latency).
    delay: Option<Option<DelayKernel>>,
    stream: Stream,
    limits: DeviceLimits,
    context: Context,
}

// SAFETY: the driver handles in the device state (context, stream, module, function, device
// memory) are not tied to the thread that created them: the driver API accepts them from any
// thread whose current context is theirs, and every entry point of `CudaBackend` makes the
// context current on the calling thread (`CudaBackend::device` → `Context::bind`) before any
// other call, and dropping the state binds it too. The state is only reached through `&mut CudaBackend`, so no two threads use it at
// once.
unsafe impl Send for DeviceState {}

impl DeviceState {
    /// Loads what a request needs beside its kernel, once: the L2 flusher (for `cold` timing)
    /// and the delay kernel (none when it cannot be loaded: timings then include the launch
    /// latency).
    fn load_helpers(&mut self, cold: bool) -> Result<(), BenchError> {
        if cold && self.flusher.is_none() {
            self.flusher = Some(L2Flusher::new(self.limits.l2_cache_bytes)?);
        }
        if self.delay.is_none() {
            self.delay = Some(match DelayKernel::load() {
                Ok(delay) => Some(delay),
                Err(e) if e.ends_worker() => return Err(e),
                Err(e) => {
                    log::warn!("cuda: no delay kernel ({e}); timings include launch latency");
                    None
                }
            });
        }
        Ok(())
    }
}

impl Drop for DeviceState {
    /// Makes the context current on the dropping thread, so that the fields' releases (which
    /// follow) reach it.
    fn drop(&mut self) {
        if let Err(e) = self.context.bind() {
            log::debug!("cuda: releasing the device state: {e}");
        }
    }
}

impl CudaBackend {
    /// A backend caching compiled kernels in [`CacheDir::from_env`] (or nowhere, when the
    /// environment names no cache directory). Touches neither the disk nor the driver.
    pub fn new() -> Self {
        Self::with_cache(CacheDir::from_env(crate::cache::BACKEND))
    }

    /// A backend caching compiled kernels in `cache`, or nowhere with `None`.
    pub fn with_cache(cache: Option<CacheDir>) -> Self {
        Self {
            cache,
            device: None,
            lost: None,
        }
    }

    /// The cache directory, if any.
    pub fn cache_dir(&self) -> Option<&CacheDir> {
        self.cache.as_ref()
    }

    /// The device state, set up on first use, with its context current on this thread.
    fn device(&mut self) -> Result<&mut DeviceState, BenchError> {
        probe::driver()?;
        if self.device.is_none() {
            if driver::device_count()? == 0 {
                return Err(BenchError::DriverUnavailable {
                    library: probe::DRIVER_LIBRARY.into(),
                    detail: format!(
                        "the driver sees no GPU (CUDA_VISIBLE_DEVICES={:?})",
                        std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_default()
                    ),
                });
            }
            let context = Context::retain(Device::get(0)?)?;
            let limits = device::limits(&context.device())?;
            let stream = Stream::new()?;
            self.device = Some(DeviceState {
                flusher: None,
                delay: None,
                stream,
                limits,
                context,
            });
        }
        let state = self.device.as_mut().expect("set above");
        state.context.bind()?;
        Ok(state)
    }

    /// Remembers a sticky fault: the context is lost, so the device state is abandoned without
    /// any further driver call (freeing into a lost context only fails again), and every later
    /// request gets `error`.
    fn note(&mut self, result: &Result<impl Sized, BenchError>) {
        if let Err(error) = result
            && error.ends_worker()
        {
            log::warn!("cuda: the context is lost: {error}");
            std::mem::forget(self.device.take());
            self.lost = Some(error.clone());
        }
    }

    fn check_alive(&self) -> Result<(), BenchError> {
        match &self.lost {
            Some(error) => Err(error.clone()),
            None => Ok(()),
        }
    }

    fn run(&mut self, request: &BenchmarkRequest) -> Result<BenchmarkResult, BenchError> {
        let started = std::time::Instant::now();
        report_progress(started, Phase::Setup, (0, 0), None, None);
        let kernel = cuda_kernel(request)?;
        compile::validate(kernel)?;
        let order = request.check_args()?;
        let cache = self.cache.clone();
        let state = self.device()?;
        let loaded = Loaded::new(kernel, request, &order, &state.limits, cache.as_ref())?;

        let tensors = request
            .tensors
            .iter()
            .map(|spec| DeviceTensor::new(spec, &state.stream))
            .collect::<Result<Vec<_>, _>>()?;
        let cold =
            request.timing.flush_cache && !request.timing.hot && !request.timing.outputs_only;
        state.load_helpers(cold)?;
        let stream = &state.stream;
        let mut runner = CudaRunner {
            function: &loaded.function,
            launch: kernel.launch,
            arguments: Arguments::new(
                &tensors
                    .iter()
                    .map(DeviceTensor::device_ptr)
                    .collect::<Vec<_>>(),
                &request.scalars,
                &order,
            ),
            stream,
            tensors: &tensors,
            restore: Restore::resets(&request.tensors),
            flusher: if cold { state.flusher.as_mut() } else { None },
            delay: state.delay.as_ref().and_then(Option::as_ref),
            start: Event::new()?,
            end: Event::new()?,
        };
        debug_assert_eq!(
            runner.arguments.len(),
            tensors.len() + request.scalars.len()
        );
        let measured = measure(&mut runner, request, &state.context, started)?;
        if request.timing.outputs_only {
            // A reference's time is taken before its tensors are freed.
            return Ok(measured.into_result(started));
        }
        drop(runner);
        // Everything enqueued has completed (the last call synchronized): free the tensors,
        // then unload the module.
        drop(tensors);
        drop(loaded);
        Ok(measured.into_result(started))
    }

    fn run_prepare(&mut self, request: &BenchmarkRequest) -> Result<(), BenchError> {
        let kernel = cuda_kernel(request)?;
        compile::validate(kernel)?;
        let order = request.check_args()?;
        let cache = self.cache.clone();
        let state = self.device()?;
        Loaded::new(kernel, request, &order, &state.limits, cache.as_ref()).map(drop)
    }
}

impl Default for CudaBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn benchmark(&mut self, request: &BenchmarkRequest) -> Result<BenchmarkResult, BenchError> {
        self.check_alive()?;
        let result = self.run(request);
        self.note(&result);
        result
    }

    /// Compiles the kernel into the cache, loads it and checks its launch configuration and
    /// parameters, without allocating tensors or measuring.
    fn prepare(&mut self, request: &BenchmarkRequest) -> Result<(), BenchError> {
        self.check_alive()?;
        let result = self.run_prepare(request);
        self.note(&result);
        result
    }

    /// Every visible GPU, in ordinal order.
    fn devices(&mut self) -> Result<Vec<DeviceInfo>, BenchError> {
        // Device queries need no context: nothing to bind.
        self.check_alive()?;
        probe::driver()?;
        (0..driver::device_count()?)
            .map(|ordinal| device::info(&Device::get(ordinal)?))
            .collect()
    }
}

/// What a request measured: its result but for the worker's time.
struct Measured {
    stats: tunebox_protocol::TimingStats,
    outputs: Vec<TensorData>,
    outputs_after_reps: Vec<TensorData>,
    mutated_inputs: Vec<String>,
    fresh_outputs: Vec<TensorData>,
}

impl Measured {
    /// The request's result, with the worker's time since `started` (the parent checks its
    /// clock against it).
    fn into_result(self, started: std::time::Instant) -> BenchmarkResult {
        BenchmarkResult::new(self.stats)
            .with_outputs(self.outputs)
            .with_outputs_after_reps(self.outputs_after_reps)
            .with_mutated_inputs(self.mutated_inputs)
            .with_integrity(
                tunebox_protocol::Integrity::default()
                    .with_fresh_outputs(self.fresh_outputs)
                    // The parent checks its clock against this one.
                    .with_worker_ms(Some(started.elapsed().as_secs_f64() * 1e3)),
            )
    }
}

/// Measures a request with its `runner` (`started`: when the request started): the first call
/// on freshly initialized tensors (its outputs are the ones verified, its wall time the stats
/// of an `outputs_only` reference); then the timed reps within the request's budget, one more
/// call on poisoned outputs (fresh inputs with a fresh seed) and a look for work outside the
/// measuring stream, both untimed.
fn measure(
    runner: &mut CudaRunner<'_>,
    request: &BenchmarkRequest,
    context: &Context,
    started: std::time::Instant,
) -> Result<Measured, BenchError> {
    let (tensors, stream) = (runner.tensors, runner.stream);
    report_progress(started, Phase::FirstCall, (0, 1), None, None);
    let first = std::time::Instant::now();
    runner.run()?;
    let first_ms = first.elapsed().as_secs_f64() * 1e3;
    let outputs = output_data(request, tensors, stream)?;
    // The fresh inputs of the call after the reps (none without a seed, outputs or random
    // inputs); kept alive until that call has synchronized.
    let fresh = match request.timing.fresh_seed {
        Some(seed) if !outputs.is_empty() => fresh_inputs(request, seed)?,
        _ => Vec::new(),
    };
    if request.timing.outputs_only {
        return reference(runner, &fresh, first_ms, outputs);
    }
    // Inputs the kernel wrote are put back before every later call (triton's restore_value).
    let mutated_inputs = runner.restore.add_written_inputs(&request.tensors, |i| {
        tensors[i].is_pristine(stream).map(|pristine| !pristine)
    })?;
    // A kernel too slow for its time budget says so now, rather than being killed later (after
    // a second call, on the inputs put back, where the first with its module loading alone did
    // not fit).
    check_first_call(runner, &request.timing, started, first_ms, 3)?;

    let stats = do_bench_within(runner, &request.timing, started)?;

    // One more call on poisoned outputs, on fresh inputs with a fresh seed (untimed).
    let (outputs_after_reps, fresh_outputs) = if outputs.is_empty() {
        (Vec::new(), Vec::new())
    } else {
        // The reps' median is the estimate of this call.
        let median = std::time::Duration::from_secs_f64(stats.median_ms.max(0.0) / 1e3);
        report_progress(started, Phase::FinalCall, (0, 1), None, Some(median));
        runner.after_reps(context, &fresh)?
    };
    // Then a look for work outside the measuring stream (untimed).
    runner.check_work_in_stream(context)?;
    Ok(Measured {
        stats,
        outputs,
        outputs_after_reps,
        mutated_inputs,
        fresh_outputs,
    })
}

/// What a reference (`outputs_only`) measured: the first call's `outputs` and wall time
/// (`first_ms`), and its outputs on the `fresh` inputs (that call is made when there are any).
fn reference(
    runner: &mut CudaRunner<'_>,
    fresh: &[Option<tunebox_bench::HostTensor>],
    first_ms: f64,
    outputs: Vec<TensorData>,
) -> Result<Measured, BenchError> {
    let fresh_outputs = if fresh.iter().any(Option::is_some) {
        runner.poisoned_call(fresh)?
    } else {
        Vec::new()
    };
    Ok(Measured {
        stats: summarize(&[first_ms], 0),
        outputs,
        outputs_after_reps: Vec::new(),
        mutated_inputs: Vec::new(),
        fresh_outputs,
    })
}

/// The request's CUDA kernel.
fn cuda_kernel(request: &BenchmarkRequest) -> Result<&CudaKernel, BenchError> {
    match &request.kernel {
        Kernel::Cuda(kernel) => Ok(kernel),
        other => Err(BenchError::InvalidRequest {
            detail: format!(
                "the cuda backend runs CUDA kernels only; this request is for the `{}` backend",
                other.backend()
            ),
        }),
    }
}

/// A kernel loaded and checked, ready to launch.
struct Loaded {
    function: Function,
    /// Keeps `function` loaded; unloaded on drop.
    _module: Module,
}

impl Loaded {
    /// Compiles (or finds in the cache) and loads `kernel`, checks its launch configuration and
    /// parameters, and opts in to the shared memory the launch needs.
    fn new(
        kernel: &CudaKernel,
        request: &BenchmarkRequest,
        order: &[Arg],
        limits: &DeviceLimits,
        cache: Option<&CacheDir>,
    ) -> Result<Self, BenchError> {
        let (artifact, origin) = compile::artifact(kernel, limits.arch(), cache)?;
        let module = Module::load(&artifact.image, artifact.kind, &origin)?;
        let function = module.function(&artifact.lowered_name, &origin)?;
        let attribute = |a| -> Result<u32, BenchError> {
            Ok(u32::try_from(function.attribute(a)?).unwrap_or(0))
        };
        let function_limits = FunctionLimits {
            max_threads_per_block: attribute(F::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
            registers_per_thread: attribute(F::CU_FUNC_ATTRIBUTE_NUM_REGS)?,
            static_shared_bytes: attribute(F::CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES)?,
            max_dynamic_shared_bytes: attribute(
                F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            )?,
        };
        let plan = validate_launch(&kernel.launch, &kernel.entry, limits, &function_limits)?;
        if let Some(bytes) = plan.opt_in_dynamic_shared_bytes {
            let bytes = i32::try_from(bytes).unwrap_or(i32::MAX);
            function.set_attribute(F::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes)?;
        }
        if probe::driver()?.has_param_info {
            match function.parameter_sizes() {
                Some(sizes) => {
                    let kinds: Vec<_> = request.scalars.iter().map(|s| s.kind).collect();
                    check_parameters(&kernel.entry, &sizes, order, &kinds)?
                }
                None => log::debug!("cuda: the driver cannot list the parameters of `{origin}`"),
            }
        }
        Ok(Self {
            function,
            _module: module,
        })
    }
}

/// Copies of the tensors the request returns ([`BenchmarkRequest::returns`]), in request order
/// (waits for the stream).
fn output_data(
    request: &BenchmarkRequest,
    tensors: &[DeviceTensor],
    stream: &Stream,
) -> Result<Vec<TensorData>, BenchError> {
    tensors
        .iter()
        .filter(|t| request.returns(t.spec()))
        .map(|t| t.to_data(stream))
        .collect()
}
