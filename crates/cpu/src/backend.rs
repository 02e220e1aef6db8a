//! The `cpu` backend: compile (a cache hit), load, call once, time.

use std::ffi::c_void;
use std::path::Path;
use std::time::{Duration, Instant};

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
use tunebox_bench::{
    Backend, HostTensor, Restore, Runner, VariedReps, check_first_call, do_bench_after,
    report_progress, summarize, vary_with,
};
use tunebox_protocol::{
    BenchError, BenchmarkRequest, BenchmarkResult, CacheFlush, Integrity, Kernel, Phase,
    TensorData, TensorSpec,
};

use crate::error::with_sources;
use crate::flush::{EVICT_MAX_BYTES, EVICTS_LINES, evict};
use crate::integrity;
use crate::trampoline::TRAMPOLINE_SYMBOL;
use crate::{CacheDir, CacheFlusher, CompileControl, CpuError, Language, Signature, compile_with};

/// The one C signature every artifact is called through:
/// `void tunebox_trampoline(void *const *tunebox_tensors, const int64_t *tunebox_scalars)`.
type Trampoline = unsafe extern "C" fn(*const *mut c_void, *const i64);

/// Runs [`Kernel::C`] requests on the CPU; its [`Backend::name`] is `"cpu"`.
///
/// For each request it compiles the kernel with [`compile_with`] (normally a cache hit: the parent
/// precompiled it; a compiler that does run has no deadline of its own and stays in the caller's
/// process group, which in a worker is the group its parent kills at the request's timeout),
/// loads the shared object, allocates and initializes every tensor with
/// [`HostTensor::allocate`] (an input given `contents` maps them copy-on-write), calls the kernel once and returns the tensors marked `output` as they
/// are after that call, then times it with [`do_bench_after`] (within `timing.budget_ms` from
/// the request's start), evicting the cache lines of every tensor ([`evict`]) before every
/// timed rep when `timing.flush_cache` (or, with [`CacheFlush::LastLevelCache`], on
/// architectures without a line flush, and for tensors of more than 512 MiB in all, which no
/// cache holds and whose line flush would cost more than the buffer, writing a
/// [`CacheFlusher`] buffer twice the last-level cache). When there are outputs, it then fills them with `0xFF` bytes
/// ([`HostTensor::poison`]), calls the kernel once more and returns those outputs too
/// (`outputs_after_reps`), so that a kernel which does not overwrite its outputs on every call
/// cannot pass verification. With `timing.fresh_seed` that call runs on fresh inputs (every
/// random input refilled in place) and its outputs are `integrity.fresh_outputs`, so that a
/// memoized or replayed answer cannot pass either; with `timing.outputs_only` it returns after
/// the first call (and, with a fresh seed, one call on fresh inputs). In a worker process it
/// then looks for work the kernel left running ([`BenchError::Suspicious`]: runnable threads,
/// child processes, changing outputs, CPU time), and reports the request's time on its own
/// clock (`integrity.worker_ms`), which the parent checks against its own.
///
/// Inputs the kernel writes are restored before every later call (`mutated_inputs`).
///
/// Kernel libraries are loaded with `RTLD_NODELETE` and stay mapped until the worker exits: a
/// kernel's runtime (libgomp's OpenMP thread pool, a TBB arena) may keep threads running code of
/// the library after the call returns, and unmapping it under them crashes the worker.
#[derive(Debug)]
pub struct CpuBackend {
    cache: CacheDir,
    /// Allocated on the first request that flushes, then reused.
    flusher: Option<CacheFlusher>,
}

impl CpuBackend {
    /// A backend that compiles into and loads from `cache`.
    pub fn new(cache: CacheDir) -> Self {
        Self {
            cache,
            flusher: None,
        }
    }

    /// A backend using [`default_cache_dir`](crate::default_cache_dir) (`<cache root>/cpu`).
    ///
    /// # Errors
    ///
    /// [`CpuError::NoCacheDir`] when no cache directory can be derived from the environment.
    pub fn from_env() -> Result<Self, CpuError> {
        crate::default_cache_dir().map(Self::new)
    }

    /// The cache directory this backend uses.
    pub fn cache_dir(&self) -> &CacheDir {
        &self.cache
    }
}

impl Backend for CpuBackend {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn prepare(&mut self, request: &BenchmarkRequest) -> Result<(), BenchError> {
        self.load(request).map(drop)
    }

    fn benchmark(&mut self, request: &BenchmarkRequest) -> Result<BenchmarkResult, BenchError> {
        let started = Instant::now();
        report_progress(started, Phase::Setup, (0, 0), None, None);
        let library = self.load(request)?;

        let mut tensors = request
            .tensors
            .iter()
            .map(|spec| allocate(request, spec))
            .collect::<Result<Vec<_>, _>>()?;
        let pointers: Vec<*mut c_void> =
            tensors.iter_mut().map(|t| t.as_mut_ptr().cast()).collect();
        // One 8-byte slot per scalar, which the trampoline reads as the scalar's C type.
        let scalars: Vec<i64> = request
            .scalars
            .iter()
            .map(|s| i64::from_ne_bytes(s.slot()))
            .collect();
        let timing = &request.timing;
        let tensor_bytes: usize = tensors.iter().map(HostTensor::len).sum();
        let flush = Flush::of(timing, tensor_bytes, &mut self.flusher);
        // The reference's call on a checked rep's inputs: the same variation, its seed given.
        if let Some(seed) = timing.varied_seed.filter(|_| timing.outputs_only) {
            vary_with(&request.tensors, &mut tensors, seed);
        }
        let mut runner = CpuRunner {
            library: &library,
            pointers: &pointers,
            scalars: &scalars,
            tensors: &mut tensors,
            restore: Restore::resets(&request.tensors),
            flush,
            request,
            varied: VariedReps::new(timing, &request.tensors).filter(|_| !timing.outputs_only),
        };
        let measured = runner.measure(started)?;
        if timing.outputs_only {
            // A reference's time is taken before its library is closed.
            return Ok(measured.into_result(started));
        }
        drop(runner);
        drop(library);
        Ok(measured.into_result(started))
    }
}

/// What a request measured: its result but for the worker's time.
struct Measured {
    stats: tunebox_protocol::TimingStats,
    outputs: Vec<TensorData>,
    outputs_after_reps: Vec<TensorData>,
    mutated_inputs: Vec<String>,
    fresh_outputs: Vec<TensorData>,
    checked_reps: Vec<tunebox_protocol::CheckedRep>,
    /// Threads the kernel started that were there after its last call (an OpenMP runtime's
    /// pool among them, which the look for work left running may have ended since).
    threads_started: Option<u32>,
}

impl Measured {
    /// What a reference (`outputs_only`) measured: its first call's time (`first_ms`) and
    /// `outputs`, and its call on fresh inputs' `fresh_outputs`.
    fn reference(first_ms: f64, outputs: Vec<TensorData>, fresh_outputs: Vec<TensorData>) -> Self {
        Measured {
            stats: summarize(&[first_ms], 0),
            outputs,
            outputs_after_reps: Vec::new(),
            mutated_inputs: Vec::new(),
            fresh_outputs,
            checked_reps: Vec::new(),
            threads_started: None,
        }
    }

    /// The request's result, with the worker's time since `started` (the parent checks its
    /// clock against it).
    fn into_result(self, started: Instant) -> BenchmarkResult {
        BenchmarkResult::new(self.stats)
            .with_outputs(self.outputs)
            .with_outputs_after_reps(self.outputs_after_reps)
            .with_mutated_inputs(self.mutated_inputs)
            .with_integrity(
                Integrity::default()
                    .with_fresh_outputs(self.fresh_outputs)
                    .with_worker_ms(Some(started.elapsed().as_secs_f64() * 1e3))
                    .with_checked_reps(self.checked_reps)
                    .with_threads_started(self.threads_started),
            )
    }
}

impl CpuBackend {
    /// Compiles the request's kernel (normally a cache hit) and loads it.
    fn load(&self, request: &BenchmarkRequest) -> Result<KernelLibrary, BenchError> {
        let Kernel::C(kernel) = &request.kernel else {
            return Err(BenchError::InvalidRequest {
                detail: format!(
                    "the cpu backend runs C kernels only; this request is for the `{}` backend",
                    request.kernel.backend()
                ),
            });
        };
        request.check_args()?;
        // A worker decides no deadline: it leads a process group that its parent kills at the
        // request's timeout, and the compiler stays in that group, so the kill takes it along.
        let control = CompileControl {
            timeout: Duration::MAX,
            cancel: None,
            own_process_group: false,
            background: false,
        };
        let artifact = compile_with(kernel, &Signature::of(request), &self.cache, &control)?;
        KernelLibrary::load(artifact.path(), Language::of(kernel))
    }
}

/// The tensor of `spec` for `request`: an output that the request does not return (a round's
/// window) and that is not `reset` may start with what an earlier request left in its memory
/// ([`HostTensor::allocate_overwritten`]): the requests that return it check that the kernel
/// overwrites it, and no rep of any request finds it as initialized.
fn allocate(request: &BenchmarkRequest, spec: &TensorSpec) -> Result<HostTensor, BenchError> {
    if spec.output && !spec.reset && !request.returns(spec) {
        HostTensor::allocate_overwritten(spec)
    } else {
        HostTensor::allocate(spec)
    }
}

/// Fails with [`BenchError::OutOfBounds`] when the kernel wrote outside any tensor.
fn check_bounds(tensors: &[HostTensor]) -> Result<(), BenchError> {
    tensors.iter().try_for_each(HostTensor::check_bounds)
}

/// Copies of the tensors the request returns ([`BenchmarkRequest::returns`]), in request
/// order.
fn output_data(
    request: &BenchmarkRequest,
    tensors: &[HostTensor],
) -> Result<Vec<TensorData>, BenchError> {
    integrity::outputs(request, tensors)
        .map(HostTensor::to_data)
        .collect()
}

/// The tensors the request returns after the call after the reps, against `first`, the copies
/// made after the first call ([`output_data`]): a tensor holding the same bytes as its first
/// copy (a deterministic kernel called on the same inputs) is sent as that copy again (for a
/// large one the same shared-memory region under a second handle), any other is copied. A
/// compare reads pages that exist; a copy into a new region faults in, zeroes and charges
/// every page of it: ~0.2 s against ~0.02 s for a 288 MiB output on a 2-vCPU EPYC guest.
fn output_data_after_reps(
    request: &BenchmarkRequest,
    tensors: &[HostTensor],
    first: &[TensorData],
) -> Result<Vec<TensorData>, BenchError> {
    let mut first = first.iter();
    integrity::outputs(request, tensors)
        .map(|tensor| match first.next() {
            Some(copy) if copy.name == tensor.name() && copy.bytes[..] == *tensor.bytes() => {
                Ok(copy.clone())
            }
            _ => tensor.to_data(),
        })
        .collect()
}

/// What [`CpuRunner::last_checks`] found after the reps.
struct LastChecks {
    /// The call after the reps' outputs (without a fresh seed).
    outputs_after_reps: Vec<TensorData>,
    /// The call on fresh inputs' outputs (with one).
    fresh_outputs: Vec<TensorData>,
    /// Threads there after the last call that were not before the first, where listed
    /// ([`integrity::check_deferred_work`]).
    threads: Option<usize>,
}

/// A loaded artifact and its trampoline. Dropping it closes the handle, but the library stays
/// mapped (`RTLD_NODELETE`) until the process exits.
struct KernelLibrary {
    trampoline: Trampoline,
    /// Keeps the code behind `trampoline` mapped; never used otherwise.
    _library: Library,
}

impl KernelLibrary {
    /// `dlopen`s the artifact with `RTLD_NOW` (an unresolved symbol fails here, not mid-run),
    /// `RTLD_LOCAL` and `RTLD_NODELETE` (never unmapped: threads a kernel's runtime started may
    /// still run its code), and resolves the trampoline.
    fn load(path: &Path, language: Language) -> Result<Self, BenchError> {
        let load_error = |detail: String| BenchError::Load {
            path: path.display().to_string(),
            detail,
        };
        // SAFETY: loading runs the object's initializers. The object was built by `compile` from
        // the request's own C source; running that code is exactly what this worker exists for,
        // and a fault in it costs only this worker process.
        let library =
            unsafe { Library::open(Some(path), RTLD_NOW | RTLD_LOCAL | libc::RTLD_NODELETE) }
                .map_err(|e| load_error(with_sources(&e)))?;
        // SAFETY: every artifact defines `tunebox_trampoline` in the trampoline that `compile`
        // appends, with the C type `void (void *const *, const int64_t *)`, which is `Trampoline`.
        // The pointer is copied out of the symbol but stored next to `library`, which keeps it
        // mapped for as long as `self` lives.
        let trampoline = unsafe { library.get::<Trampoline>(TRAMPOLINE_SYMBOL) }
            .map(|symbol| *symbol)
            .map_err(|e| {
                let hint = match language {
                    // Compiled as C++ all the same (a C++ compiler under another name, `-x c++`
                    // in a response file): the unmarked trampoline got a mangled name.
                    Language::C => {
                        "; if the compiler compiled it as C++, name a C++ compiler (g++, \
                         clang++) or give the source a C++ extension (.cpp), so that the \
                         trampoline is declared extern \"C\""
                    }
                    Language::Cxx => "",
                };
                load_error(format!(
                    "no `{TRAMPOLINE_SYMBOL}`: {}{hint}",
                    with_sources(&e)
                ))
            })?;
        Ok(Self {
            trampoline,
            _library: library,
        })
    }
}

/// One request's kernel, bound to its arguments, as [`do_bench`] drives it.
struct CpuRunner<'a> {
    library: &'a KernelLibrary,
    /// One pointer per tensor (the allocations' own pointers), in the order of the request and
    /// of the compiled signature.
    pointers: &'a [*mut c_void],
    /// The scalars, in order.
    scalars: &'a [i64],
    /// The tensors behind `pointers`, to restore between calls.
    tensors: &'a mut [HostTensor],
    /// The tensors re-initialized before every call after the first.
    restore: Restore,
    flush: Flush<'a>,
    /// The request: its tensors' specs, to vary and to copy outputs by.
    request: &'a BenchmarkRequest,
    /// Timed reps on varied inputs, when the request asks for them.
    varied: Option<VariedReps>,
}

impl CpuRunner<'_> {
    /// Measures the request (`started`: when it started): the first call on freshly
    /// initialized tensors (its outputs are the ones verified, its time the stats of an
    /// `outputs_only` reference, which then makes only its fresh-input call); then the timed
    /// reps within the request's budget, the call after them ([`CpuRunner::final_call`]) and,
    /// untimed, a look for work the kernel left running. Inputs the kernel wrote are looked
    /// for after the first call, or, in a request that returns no outputs, after the reps.
    fn measure(&mut self, started: Instant) -> Result<Measured, BenchError> {
        let request = self.request;
        let timing = &request.timing;
        let threads_before = integrity::thread_ids().unwrap_or_default();
        // Children an earlier task of a reused worker left are not this choice's.
        let children_before = integrity::child_processes();
        // The first call runs on freshly initialized tensors; its outputs are the ones verified.
        report_progress(started, Phase::FirstCall, (0, 1), None, None);
        let first_ms = self.run_timed()?;
        check_bounds(self.tensors)?;
        let outputs = output_data(request, self.tensors)?;
        if timing.outputs_only {
            let fresh_outputs = self.fresh_call(request)?;
            return Ok(Measured::reference(first_ms, outputs, fresh_outputs));
        }
        // Inputs the kernel wrote are put back before every later call (triton's
        // restore_value). A request that returns outputs looks after the first call. One that
        // returns none (a round's window) has no call after its reps: it looks once, after
        // them, and that look also spares the second one that keeping an input's mapping for
        // the worker's next request would take (a walk of its page tables, ~10 ms per GiB).
        let look_after_reps = outputs.is_empty() && self.varied.is_none();
        let mut mutated_inputs = if look_after_reps {
            Vec::new()
        } else {
            self.written_inputs()?
        };
        // A kernel too slow for its time budget says so now, rather than being killed later
        // (after a second call where the first alone did not fit: the estimate to go on with).
        let estimate_ms = check_first_call(self, timing, started, first_ms, 3)?;
        let mut stats = do_bench_after(self, timing, started, Some(estimate_ms))?;
        check_bounds(self.tensors)?;
        if let Some(varied) = &mut self.varied {
            // The last rep's inputs, drawn for it, before any call on the request's own.
            varied.put_back(self.tensors);
        }
        let checked_reps = self
            .varied
            .take()
            .map(VariedReps::into_checked)
            .transpose()?
            .unwrap_or_default();
        let before = (threads_before.as_slice(), children_before.as_slice());
        let mut last = self.last_checks(&stats, started, &outputs, before)?;
        if look_after_reps {
            mutated_inputs = self.written_inputs()?;
            if !mutated_inputs.is_empty() {
                // Its reps ran on inputs it had changed: measured again, each rep on the
                // inputs put back, as a request that returns outputs measures them at once.
                let estimate_ms = estimate_ms.min(stats.median_ms);
                stats = do_bench_after(self, timing, started, Some(estimate_ms))?;
                check_bounds(self.tensors)?;
                let again = self.last_checks(&stats, started, &outputs, before)?;
                last.threads = last.threads.max(again.threads);
            }
        }
        Ok(Measured {
            stats,
            outputs,
            outputs_after_reps: last.outputs_after_reps,
            mutated_inputs,
            fresh_outputs: last.fresh_outputs,
            checked_reps,
            threads_started: last.threads.and_then(|n| u32::try_from(n).ok()),
        })
    }

    /// The inputs (neither outputs nor `reset`) the kernel has written so far, added to the
    /// tensors put back before every later call; their names (the result's `mutated_inputs`).
    fn written_inputs(&mut self) -> Result<Vec<String>, BenchError> {
        let tensors = &*self.tensors;
        self.restore.add_written_inputs(&self.request.tensors, |i| {
            Ok::<_, BenchError>(!tensors[i].is_pristine())
        })
    }

    /// After the reps (`stats`): the call after them when there are `outputs` (the first
    /// call's copies, [`CpuRunner::final_call`]), then, untimed, a look for work the kernel
    /// left running against the copies of the last call's outputs made for the reply
    /// (`before`: the worker's threads and children before the first call).
    fn last_checks(
        &mut self,
        stats: &tunebox_protocol::TimingStats,
        started: Instant,
        outputs: &[TensorData],
        before: (&[u32], &[u32]),
    ) -> Result<LastChecks, BenchError> {
        let (outputs_after_reps, fresh_outputs) = if outputs.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            self.final_call(stats, started, outputs)?
        };
        let last_copies = if fresh_outputs.is_empty() {
            &outputs_after_reps
        } else {
            &fresh_outputs
        };
        let threads =
            integrity::check_deferred_work(self.request, self.tensors, before, last_copies)?;
        Ok(LastChecks {
            outputs_after_reps,
            fresh_outputs,
            threads,
        })
    }

    /// One more call after the reps (`stats`), on poisoned outputs: a kernel must overwrite
    /// them completely every time. With a fresh seed it also runs on inputs the kernel has not
    /// seen (one untimed call for both checks, which the budget already counts); without one,
    /// on the same inputs, its outputs compared with `first`, the first call's copies
    /// ([`output_data_after_reps`]). Returns `(outputs_after_reps, fresh_outputs)`, one of them
    /// empty.
    fn final_call(
        &mut self,
        stats: &tunebox_protocol::TimingStats,
        started: Instant,
        first: &[TensorData],
    ) -> Result<(Vec<TensorData>, Vec<TensorData>), BenchError> {
        let request = self.request;
        // The reps' median is the estimate of this call.
        let median = Duration::from_secs_f64(stats.median_ms.max(0.0) / 1e3);
        report_progress(started, Phase::FinalCall, (0, 1), None, Some(median));
        let fresh_outputs = self.fresh_call(request)?;
        if !fresh_outputs.is_empty() {
            return Ok((Vec::new(), fresh_outputs));
        }
        self.restore()?;
        self.poison_outputs(request);
        self.run()?;
        check_bounds(self.tensors)?;
        let outputs_after_reps = output_data_after_reps(request, self.tensors, first)?;
        Ok((outputs_after_reps, fresh_outputs))
    }

    /// Fills the outputs (those not re-initialized before every call) with `0xFF` bytes.
    fn poison_outputs(&mut self, request: &BenchmarkRequest) {
        for (spec, tensor) in request.tensors.iter().zip(self.tensors.iter_mut()) {
            if spec.output && !spec.reset {
                tensor.poison();
            }
        }
    }

    /// With `timing.fresh_seed`, refills the random inputs with it ([`integrity::refill_fresh`]),
    /// poisons the outputs, calls the kernel once and returns its outputs; empty without a
    /// seed, outputs or random inputs.
    fn fresh_call(&mut self, request: &BenchmarkRequest) -> Result<Vec<TensorData>, BenchError> {
        let Some(fresh) = request.timing.fresh_seed else {
            return Ok(Vec::new());
        };
        if !request.tensors.iter().any(|t| request.returns(t)) {
            return Ok(Vec::new());
        }
        self.restore()?;
        if !integrity::refill_fresh(request, self.tensors, fresh)? {
            return Ok(Vec::new());
        }
        self.poison_outputs(request);
        self.run()?;
        check_bounds(self.tensors)?;
        output_data(request, self.tensors)
    }
}

/// How a [`CpuRunner`] evicts the kernel's data before a timed rep.
enum Flush<'a> {
    None,
    /// Evict the lines of every tensor.
    Tensors,
    /// Write a buffer twice the last-level cache.
    Buffer(&'a mut CacheFlusher),
}

impl<'a> Flush<'a> {
    /// How a request with `tensor_bytes` of tensors is flushed, as `timing` asks: not at all
    /// (no flush, or an `outputs_only` reference), by evicting the tensors' lines where the
    /// architecture can and they are small enough, else by writing `flusher` (allocated here
    /// once).
    fn of(
        timing: &tunebox_protocol::TimingConfig,
        tensor_bytes: usize,
        flusher: &'a mut Option<CacheFlusher>,
    ) -> Self {
        match timing.cache_flush {
            _ if !timing.flush_cache || timing.outputs_only => Flush::None,
            CacheFlush::Tensors if EVICTS_LINES && tensor_bytes <= EVICT_MAX_BYTES => {
                Flush::Tensors
            }
            // LastLevelCache, larger tensors, and any way of flushing added later.
            _ => Flush::Buffer(flusher.get_or_insert_with(CacheFlusher::new)),
        }
    }
}

impl Runner for CpuRunner<'_> {
    fn run(&mut self) -> Result<(), BenchError> {
        // The kernel may write any tensor through its pointer: a look at one is out of date.
        tunebox_bench::note_kernel_call();
        // SAFETY: the library was compiled for `Signature::of(request)` (the signature is part of
        // its cache key), so the trampoline reads exactly `pointers.len()` pointers and
        // `scalars.len()` 8-byte scalar slots (each scalar's C type is at most 8 bytes, copied
        // out of its slot), both arrays live for `'a`. Each pointer is the allocation
        // pointer of a live `HostTensor` (`self.tensors`, borrowed for `'a`) of at least the
        // spec's byte length, and no Rust reference to those buffers exists during the call
        // (`restore` and `poison` borrow them only between calls). What the kernel does with them is the kernel's own behaviour;
        // the worker process is the isolation boundary for it.
        unsafe { (self.library.trampoline)(self.pointers.as_ptr(), self.scalars.as_ptr()) };
        Ok(())
    }

    fn restore(&mut self) -> Result<(), BenchError> {
        for &i in self.restore.indices() {
            self.tensors[i].reset();
        }
        Ok(())
    }

    fn before_rep(&mut self) -> Result<(), BenchError> {
        if let Some(varied) = &mut self.varied {
            varied.vary(&self.request.tensors, self.tensors);
        }
        Ok(())
    }

    fn after_rep(&mut self, rep: u32, planned: u32) -> Result<(), BenchError> {
        let Some(varied) = &mut self.varied else {
            return Ok(());
        };
        varied.end_rep(rep, planned, self.tensors);
        Ok(())
    }

    fn flush(&mut self) -> Result<(), BenchError> {
        match &mut self.flush {
            Flush::None => {}
            Flush::Tensors => self.tensors.iter().for_each(|t| evict(t.bytes())),
            Flush::Buffer(flusher) => flusher.flush(),
        }
        Ok(())
    }
}
