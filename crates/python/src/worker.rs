//! The parent side: one isolated Python worker, as seen from Python (`tunebox._native.Worker`).
//!
//! A thin handle on a [`TuningProcess`]: the deadline, the process-group kill, the reaping, the
//! crash report with the worker's stderr tail, `maximum_process_uses` and the initializer on every
//! fresh process are tunebox-process's. This adds the Python calling convention (an op and the
//! pickle with its buffers, see `frame`), TVM's exception types, and eager replacement: after a
//! crash, a timeout or the last allowed use, the next worker starts on a helper thread at once.
//! From the first such event on (or from the start, with `maximum_uses`), a warm spare process is
//! kept: started, initialized, with the modules of the calls seen so far imported, so that the
//! call after a crash does not wait for Python and its imports to start again.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use pyo3::exceptions::{
    PyChildProcessError, PyOSError, PyRuntimeError, PyTimeoutError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use tunebox_process::{
    DeviceToken, InitRequest, KillSwitch, Output, ProcessConfig, ProcessError, TuningProcess,
};
use tunebox_protocol::{
    BenchmarkRequest, BenchmarkResult, Bytes, DType, Kernel, SharedBuffer, SharedData, TaskKernel,
    TensorSpec,
};

use crate::buffers::{self, Place, RawBuffer};
use crate::ckernel;
use crate::frame::{self, Op};
use crate::serve::{BACKEND, TASK_TYPE};

/// The exit code a Python worker ends itself with when a call runs past its timeout (its timer
/// thread, as TVM's worker has one): reported as `TimeoutError`, not as a crash.
const TIMED_OUT_EXIT: i32 = 211;

/// A wait with no timeout (TVM's `timeout=None`): 30 days.
const FOREVER: Duration = Duration::from_secs(30 * 24 * 3600);

/// How long a worker asked to shut down may take before it is killed.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(200);

/// How long importing the modules of earlier calls may take in a fresh worker.
const WARM_TIMEOUT: Duration = Duration::from_secs(300);

/// One worker process that runs pickled Python calls.
#[pyclass(module = "tunebox._native", name = "Worker", frozen)]
pub(crate) struct Worker {
    shared: Arc<Shared>,
}

/// What the worker's handle and its helper threads share.
struct Shared {
    state: Mutex<State>,
    config: ProcessConfig,
    maximum_uses: Option<u64>,
    /// A started, initialized and warmed process to take over from a dead or retired one.
    spare: Mutex<Option<TuningProcess>>,
    /// Whether to keep a spare (set by the first crash or timeout, or by `maximum_uses`).
    keep_spare: AtomicBool,
    /// A helper thread is starting a spare.
    spare_starting: AtomicBool,
    /// Modules of the calls seen so far, imported by every fresh process.
    preload: Mutex<Vec<String>>,
    /// The kill switch of the process a call is waiting on (its reply, its unpickling, a
    /// benchmark), which holds `state` until then: `kill` ends that wait through it instead of
    /// waiting for the lock (a watchdog thread killing a hung call, `shutdown(wait=False)`, the
    /// pool's finalizer at exit after Ctrl-C).
    waiting: Mutex<Option<KillSwitch>>,
    /// The last batch's results region: the worker writes it (its mapping is shared), the
    /// parent reads it after the reply or the worker's death.
    region: Mutex<Option<SharedData>>,
    /// The buffers of the last call sent: a reply may hand one back (an array the task
    /// returns) by reference instead of a copy.
    sent: Mutex<Vec<Option<SharedData>>>,
    /// The regions of those buffers, kept as spares (`buffers::keep_spare`) for the ones the
    /// worker says it let go of.
    regions: Mutex<Vec<SharedBuffer>>,
}

struct State {
    process: TuningProcess,
    /// Calls served by the current process.
    uses: u64,
}

#[pymethods]
impl Worker {
    /// `program args…` is the worker command (`sys.executable -m tunebox._worker`); `stdout` and
    /// `stderr` are `(kind, path)` with kind `inherit`, `null`, `capture` or `file`;
    /// `initializer` is the pickle of `(fn, args, kwargs)` (no out-of-band buffers), run on every new process;
    /// `maximum_uses` retires a process after that many calls.
    #[new]
    #[pyo3(signature = (program, args, stdout, stderr, initializer=None, maximum_uses=None, init_timeout=None, env=Vec::new()))]
    #[allow(
        clippy::too_many_arguments,
        reason = "mirrors TVM's PopenWorker arguments"
    )]
    fn new(
        program: PathBuf,
        args: Vec<String>,
        stdout: (String, Option<PathBuf>),
        stderr: (String, Option<PathBuf>),
        initializer: Option<Vec<u8>>,
        maximum_uses: Option<u64>,
        init_timeout: Option<f64>,
        env: Vec<(String, String)>,
    ) -> PyResult<Worker> {
        if maximum_uses == Some(0) {
            return Err(PyValueError::new_err(
                "maximum_uses=0 allows no call at all: use None (no limit) or a positive count",
            ));
        }
        let mut config = ProcessConfig::new()
            .worker(program)
            .args(args)
            .inherit_all_env(true)
            .stdout(output(stdout)?)
            .stderr(output(stderr)?)
            // A general-purpose worker, as TVM's PopenWorker: its functions may write files of
            // any size (a saved dataset, a build's archive); no candidate kernel prints here
            // unseen.
            .write_limit(None);
        for (key, value) in env {
            // A device is pinned through tunebox-process, which owns CUDA_VISIBLE_DEVICES.
            config = if key == "CUDA_VISIBLE_DEVICES" {
                config.device(Some(DeviceToken::from(value)))
            } else {
                config.env(key, value)
            };
        }
        config = config.env("TUNEBOX_PYTHON_TIMED_OUT_EXIT", TIMED_OUT_EXIT.to_string());
        if let Some(pickle) = initializer {
            let init = InitRequest::new(request(Op::Init, &[&pickle])?)
                .timeout(init_timeout.map_or(FOREVER, seconds));
            config = config.initializer(init);
        }
        Ok(Worker {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    process: TuningProcess::lazy(config.clone()),
                    uses: 0,
                }),
                config,
                maximum_uses,
                spare: Mutex::new(None),
                keep_spare: AtomicBool::new(maximum_uses.is_some()),
                spare_starting: AtomicBool::new(false),
                preload: Mutex::new(Vec::new()),
                waiting: Mutex::new(None),
                region: Mutex::new(None),
                sent: Mutex::new(Vec::new()),
                regions: Mutex::new(Vec::new()),
            }),
        })
    }

    /// Sends a call (`op` 0: call, 2: run what `load` kept) without waiting; starts the worker
    /// (and its initializer) first if none runs.
    ///
    /// `buffers` are the pickle's out-of-band buffers as `(address, length)`, which the caller
    /// (`tunebox._calls`) holds alive for the call.
    ///
    /// `region` > 0 (op 5, a batch) adds a zeroed shared buffer of that many bytes as the
    /// request's last buffer, the batch's results region, kept for [`Worker::region`].
    #[pyo3(signature = (op, pickle, buffers=Vec::new(), region=0))]
    fn put(
        &self,
        py: Python<'_>,
        op: u8,
        pickle: Bound<'_, PyBytes>,
        buffers: Vec<RawBuffer>,
        region: usize,
    ) -> PyResult<()> {
        let op = op_of(op)?;
        self.shared.forget_last_call();
        // SAFETY: the caller holds the buffers alive (see above) and we hold the GIL.
        let (mut request, regions) = unsafe { call_request(op, pickle.as_bytes(), &buffers) }?;
        *lock(&self.shared.regions) = regions;
        let kept = if region > 0 {
            let buffer =
                SharedBuffer::new(region).map_err(|e| PyOSError::new_err(e.to_string()))?;
            let data = buffer.share();
            request
                .tensors
                .push(TensorSpec::new("region", DType::U8, [region as u64]).data(data.clone()));
            Some(data)
        } else {
            None
        };
        *lock(&self.shared.region) = kept;
        *lock(&self.shared.sent) = shared_buffers(&request);
        py.detach(|| {
            let mut state = self.shared.lock_state();
            self.shared.prepare_for_call(&mut state);
            state.process.put(request)
        })
        .map_err(|e| self.failed(e))
    }

    /// Waits up to `timeout` seconds (None: no limit) for the reply to the last `put`; returns
    /// `(status, pickle, buffers)`.
    ///
    /// Raises `TimeoutError` (the worker's process group was killed), `ChildProcessError` (the
    /// worker died; its stderr tail is quoted when captured) or `RuntimeError`.
    #[pyo3(signature = (timeout=None))]
    fn get<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyTuple>> {
        let wait = timeout.map_or(FOREVER, seconds);
        let maximum_uses = self.shared.maximum_uses;
        let (result, used_up) = py.detach(|| {
            let mut state = self.shared.lock_state();
            let result = self
                .shared
                .waiting_on(&mut state, |process| process.get(wait));
            state.uses += 1;
            (result, maximum_uses.is_some_and(|max| state.uses >= max))
        });
        if used_up {
            // TVM's maximum_uses: the process is retired by the next call, which finds its
            // successor ready.
            let shared = Arc::clone(&self.shared);
            std::thread::spawn(move || shared.ensure_spare());
        }
        let result = result.map_err(|e| self.failed(e))?;
        let sent = lock(&self.shared.sent).clone();
        let (reply, released) = reply(py, &result, &sent)?;
        self.shared.keep_released(&released);
        Ok(reply)
    }

    /// Unpickles a call in the worker and keeps it for the next `run` (op 2), waiting up to
    /// `timeout` seconds: the imports that unpickling does stay out of the call's own timeout.
    #[pyo3(signature = (pickle, buffers=Vec::new(), timeout=None))]
    fn load(
        &self,
        py: Python<'_>,
        pickle: Bound<'_, PyBytes>,
        buffers: Vec<RawBuffer>,
        timeout: Option<f64>,
    ) -> PyResult<()> {
        self.shared.forget_last_call();
        // SAFETY: as for `put`.
        let (request, regions) = unsafe { call_request(Op::Load, pickle.as_bytes(), &buffers) }?;
        *lock(&self.shared.regions) = regions;
        *lock(&self.shared.sent) = shared_buffers(&request);
        let wait = timeout.map_or(FOREVER, seconds);
        py.detach(|| {
            let mut state = self.shared.lock_state();
            self.shared.prepare_for_call(&mut state);
            self.shared
                .waiting_on(&mut state, |process| process.prepare(request, wait))
        })
        .map_err(|e| self.failed(e))
    }

    /// The last batch's results region as the worker left it, as `bytes` (its records are
    /// read by `tunebox._calls.region_records`, which alone knows their format); empty when the
    /// last call was no batch. Read after the reply, or after the worker died: what it finished
    /// before it died is there.
    fn region<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let region = lock(&self.shared.region);
        PyBytes::new(py, region.as_deref().unwrap_or_default())
    }

    /// Remembers a module that calls come from: every fresh process imports it before its first
    /// call (a spare, before it is needed).
    fn preload(&self, module: String) {
        let mut preload = lock(&self.shared.preload);
        if !preload.contains(&module) {
            preload.push(module);
        }
    }

    /// Compiles (cached) and times a C kernel with tunebox's `cpu` backend in this worker, as
    /// triton's `do_bench` (estimate, warmup, reps, cache flush between reps); `args` as
    /// `ckernel` describes. Returns the statistics (ms) and the output arrays' bytes.
    ///
    /// Raises as `get`; a compile or launch error is `RuntimeError` with the compiler's text.
    #[pyo3(signature = (source, entry, args, flags=None, compiler=None, defines=Vec::new(), warmup_ms=25.0, rep_ms=100.0, timeout=60.0))]
    #[allow(
        clippy::too_many_arguments,
        reason = "a kernel, its arguments and do_bench's budget"
    )]
    fn benchmark_c<'py>(
        &self,
        py: Python<'py>,
        source: String,
        entry: String,
        args: Vec<Bound<'py, PyTuple>>,
        flags: Option<Vec<String>>,
        compiler: Option<String>,
        defines: Vec<(String, String)>,
        warmup_ms: f64,
        rep_ms: f64,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyDict>> {
        let choice = ckernel::CChoice {
            source,
            entry,
            flags,
            compiler,
            defines,
            args,
            warmup_ms,
            rep_ms,
        };
        let request = ckernel::request(&choice)?;
        let result = py
            .detach(|| {
                let mut state = self.shared.lock_state();
                self.shared.prepare_for_call(&mut state);
                self.shared.waiting_on(&mut state, |process| {
                    process.benchmark(request, seconds(timeout))
                })
            })
            .map_err(|e| self.failed(e))?;
        ckernel::result(py, &result)
    }

    /// Starts the worker now if none runs (and runs its initializer).
    fn start(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.shared.lock_state().process.ensure_running())
            .map_err(|e| self.failed(e))
    }

    /// SIGKILLs the worker's process group and reaps it; the next call starts a new one, or,
    /// with `respawn`, a helper thread starts it now (the spare takes over, if there is one).
    /// A call another thread is waiting on ends at once (its `get` raises `ChildProcessError`).
    #[pyo3(signature = (respawn=false))]
    fn kill(&self, py: Python<'_>, respawn: bool) {
        py.detach(|| {
            self.shared.kill_waiting();
            let mut state = self.shared.lock_state();
            state.process.kill();
            // A kill that no waiting call reported is no error of the next call's.
            state.process.kill_switch().take_killed();
            state.uses = 0;
        });
        if respawn {
            self.shared.keep_spare.store(true, Ordering::Relaxed);
            self.replace();
        }
    }

    /// Asks the worker (and the spare) to exit, kills them after a short grace, reaps them. A
    /// call another thread is waiting on is killed first.
    fn shutdown(&self, py: Python<'_>) {
        py.detach(|| {
            self.shared.kill_waiting();
            let mut state = self.shared.lock_state();
            let _ = state.process.shutdown(SHUTDOWN_GRACE);
            state.uses = 0;
            if let Some(mut spare) = lock(&self.shared.spare).take() {
                let _ = spare.shutdown(SHUTDOWN_GRACE);
            }
        });
    }

    /// The pid of the running worker, or None.
    #[getter]
    fn pid(&self, py: Python<'_>) -> Option<u32> {
        py.detach(|| self.shared.lock_state().process.pid())
    }

    /// Whether a worker process is running now.
    fn is_alive(&self, py: Python<'_>) -> bool {
        py.detach(|| self.shared.lock_state().process.alive())
    }

    /// The captured stdout and stderr tails (empty unless `capture`).
    fn output_tails(&self, py: Python<'_>) -> (String, String) {
        py.detach(|| {
            let state = self.shared.lock_state();
            (state.process.stdout_tail(), state.process.stderr_tail())
        })
    }
}

impl Worker {
    /// Replaces a dead or retired process on a helper thread: the spare takes over (or a fresh
    /// process starts), then a new spare is started if spares are kept. The next call waits for
    /// the first step only.
    fn replace(&self) {
        let shared = Arc::clone(&self.shared);
        std::thread::spawn(move || {
            shared.replace_now();
            if shared.keep_spare.load(Ordering::Relaxed) {
                shared.ensure_spare();
            }
        });
    }

    /// TVM's exception for a failure, after starting the next worker when this one is gone.
    fn failed(&self, error: ProcessError) -> PyErr {
        let gone = matches!(
            error,
            ProcessError::Timeout { .. }
                | ProcessError::WorkerCrashed { .. }
                | ProcessError::OverMemoryLimit { .. }
                | ProcessError::WroteTooMuch { .. }
                | ProcessError::Stopped { .. }
        );
        if gone {
            self.shared.keep_spare.store(true, Ordering::Relaxed);
            self.replace();
        }
        to_python(error)
    }
}

impl Shared {
    fn lock_state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Runs `wait` (a call that waits on the worker) with the worker's kill switch offered to
    /// [`Shared::kill_waiting`] meanwhile.
    fn waiting_on<T>(&self, state: &mut State, wait: impl FnOnce(&mut TuningProcess) -> T) -> T {
        *lock(&self.waiting) = Some(state.process.kill_switch());
        let result = wait(&mut state.process);
        *lock(&self.waiting) = None;
        result
    }

    /// Kills the worker a call is waiting on, if one is: the wait ends (reporting the kill as
    /// the worker's death) and frees the state.
    fn kill_waiting(&self) {
        if let Some(switch) = lock(&self.waiting).as_ref() {
            switch.kill();
        }
    }

    /// Drops this side's handles on the last call's buffers, so that their regions can be
    /// reused for the next call's (`buffers::keep_spare`).
    fn forget_last_call(&self) {
        lock(&self.sent).clear();
        lock(&self.regions).clear();
    }

    /// Keeps as spares the regions of the last call's buffers that the worker let go of
    /// (`released`: a byte per request buffer, 1 for let go of).
    fn keep_released(&self, released: &[u8]) {
        lock(&self.sent).clear();
        let regions = std::mem::take(&mut *lock(&self.regions));
        for (region, &flag) in regions.into_iter().zip(released) {
            if flag == 1 {
                buffers::keep_spare(region);
            }
        }
    }

    /// The current process replaced by the spare if it is dead (or retired), started and
    /// warmed. A process the caller started meanwhile is kept.
    fn replace_now(&self) {
        let mut state = self.lock_state();
        if !state.process.alive() {
            self.wait_for_starting_spare();
        }
        let fresh = !self.take_spare_if_dead(&mut state) && !state.process.alive();
        if let Err(e) = state.process.ensure_running() {
            // The next call starts it again and reports the error.
            debug_log(&format!("starting the next Python worker failed: {e}"));
            return;
        }
        if fresh {
            self.warm(&mut state.process);
        }
    }

    /// Before a call: retires a process that served `maximum_uses` calls (killed and reaped),
    /// and puts the spare in place of one that is not running.
    fn prepare_for_call(&self, state: &mut State) {
        if self.maximum_uses.is_some_and(|max| state.uses >= max) {
            state.process.kill();
            state.uses = 0;
        }
        self.take_spare_if_dead(state);
    }

    /// Puts a live spare in place of a process that is not running; whether it did.
    fn take_spare_if_dead(&self, state: &mut State) -> bool {
        if state.process.alive() {
            return false;
        }
        let Some(spare) = lock(&self.spare).take() else {
            return false;
        };
        let mut spare = spare;
        if !spare.alive() {
            return false;
        }
        std::mem::swap(&mut state.process, &mut spare);
        // The old one is dead or killed: reap it before the next call can see its pid.
        spare.kill();
        state.uses = 0;
        true
    }

    /// Waits while a helper thread is starting a spare: it is further along than a process
    /// started now would be.
    fn wait_for_starting_spare(&self) {
        let deadline = std::time::Instant::now() + WARM_TIMEOUT;
        while self.spare_starting.load(Ordering::Acquire)
            && lock(&self.spare).is_none()
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Starts, initializes and warms a spare unless one is ready or being started.
    fn ensure_spare(&self) {
        if self.spare_starting.swap(true, Ordering::AcqRel) {
            return;
        }
        let ready = lock(&self.spare).as_mut().is_some_and(TuningProcess::alive);
        if !ready {
            let mut spare = TuningProcess::lazy(self.config.clone());
            match spare.ensure_running() {
                Ok(()) => {
                    self.warm(&mut spare);
                    *lock(&self.spare) = Some(spare);
                }
                Err(e) => debug_log(&format!("starting a spare Python worker failed: {e}")),
            }
        }
        self.spare_starting.store(false, Ordering::Release);
    }

    /// Imports the modules of the calls seen so far in `process`; a failure only loses time.
    fn warm(&self, process: &mut TuningProcess) {
        let modules = lock(&self.preload).join("\n");
        if modules.is_empty() {
            return;
        }
        if let Ok(request) = request(Op::Warm, &[modules.as_bytes()])
            && let Err(e) = process.prepare(request, WARM_TIMEOUT)
        {
            debug_log(&format!("warming a Python worker failed: {e}"));
        }
    }
}

/// A lock whose poisoning is ignored: a panic while holding it leaves a `TuningProcess` that is
/// still consistent (its methods reap before they return).
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn debug_log(message: &str) {
    if std::env::var_os("TUNEBOX_PYTHON_DEBUG").is_some() {
        eprintln!("tunebox: {message}");
    }
}

fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(FOREVER)
}

fn op_of(byte: u8) -> PyResult<Op> {
    Op::from_byte(byte).ok_or_else(|| PyValueError::new_err(format!("unknown op {byte}")))
}

fn output((kind, path): (String, Option<PathBuf>)) -> PyResult<Output> {
    Ok(match (kind.as_str(), path) {
        ("inherit", _) => Output::Inherit,
        ("null", _) => Output::Null,
        ("capture", _) => Output::Capture {
            tail_bytes: 64 * 1024,
        },
        ("file", Some(path)) => Output::File(path),
        (other, _) => {
            return Err(PyValueError::new_err(format!(
                "unknown output `{other}`: use inherit, null, capture or file with a path"
            )));
        }
    })
}

/// The request that carries a framed call to the `python` backend.
fn request(op: Op, parts: &[&[u8]]) -> PyResult<BenchmarkRequest> {
    let payload = Bytes::from_vec(frame::encode(op as u8, parts))
        .map_err(|e| PyOSError::new_err(e.to_string()))?;
    Ok(BenchmarkRequest::new(Kernel::Task(TaskKernel::new(
        BACKEND.to_owned(),
        TASK_TYPE.to_owned(),
        payload,
    ))))
}

/// The request for a pickled call and its out-of-band buffers.
///
/// # Safety
///
/// As `buffers::tensors`: the buffers are alive and readable for the call.
unsafe fn call_request(
    op: Op,
    pickle: &[u8],
    buffers: &[RawBuffer],
) -> PyResult<(BenchmarkRequest, Vec<SharedBuffer>)> {
    let mut request = request(op, &[pickle])?;
    // SAFETY: the caller's contract.
    let (tensors, regions) = unsafe { buffers::tensors(buffers) }?;
    request.tensors = tensors;
    Ok((request, regions))
}

/// The shared buffers of a request, in order (kept by the parent for [`reply`]).
fn shared_buffers(request: &BenchmarkRequest) -> Vec<Option<SharedData>> {
    request
        .tensors
        .iter()
        .map(|t| match &t.init {
            tunebox_protocol::Init::Data(data) => Some(data.clone()),
            _ => None,
        })
        .collect()
}

/// `(status, pickle, [bytearray…])` from a reply: the framed status and pickle, and the
/// out-of-band buffers as its outputs; and the worker's release flags of the request's buffers
/// (`buffers::released`; empty from a worker that sends none).
fn reply<'py>(
    py: Python<'py>,
    result: &BenchmarkResult,
    sent: &[Option<SharedData>],
) -> PyResult<(Bound<'py, PyTuple>, Vec<u8>)> {
    let value = result
        .value
        .as_ref()
        .ok_or_else(|| PyRuntimeError::new_err("the worker's reply carries no value"))?;
    let (status, parts) = frame::decode(value).map_err(PyRuntimeError::new_err)?;
    let pickle = parts.first().copied().unwrap_or_default();
    let places = match parts.get(1) {
        Some(places) => Place::decode(places).map_err(PyRuntimeError::new_err)?,
        None => vec![Place::Output; result.outputs.len()],
    };
    let released = parts.get(2).map(|r| r.to_vec()).unwrap_or_default();
    let buffers = buffers::from_outputs(py, &places, &result.outputs, sent)?;
    let reply = (status, PyBytes::new(py, pickle), buffers).into_pyobject(py)?;
    Ok((reply, released))
}

/// TVM's exception types: `TimeoutError` for a deadline, `ChildProcessError` for a worker that
/// died or broke the protocol, `OSError` when it cannot start, `ValueError` for a call too large
/// to send, `RuntimeError` otherwise. The message is tunebox's (pid, signal, stderr tail).
fn to_python(error: ProcessError) -> PyErr {
    let message = with_sources(&error);
    match error {
        ProcessError::Timeout { .. } => PyTimeoutError::new_err(message),
        ProcessError::WorkerCrashed {
            pid,
            exit_code: Some(TIMED_OUT_EXIT),
            ..
        } => PyTimeoutError::new_err(format!(
            "the call ran past its timeout; worker {pid} ended itself and was replaced"
        )),
        ProcessError::WorkerCrashed { .. }
        | ProcessError::WroteTooMuch { .. }
        | ProcessError::Stopped { .. }
        | ProcessError::ExitedBeforeHandshake { .. }
        | ProcessError::HandshakeTimeout { .. }
        | ProcessError::SendTimeout { .. }
        | ProcessError::NoWorkerEntry { .. }
        | ProcessError::ProtocolMismatch { .. }
        | ProcessError::Protocol { .. } => PyChildProcessError::new_err(message),
        ProcessError::Spawn { .. } => PyOSError::new_err(message),
        ProcessError::RequestTooLarge { .. } | ProcessError::TooManyBuffers { .. } => {
            PyValueError::new_err(message)
        }
        _ => PyRuntimeError::new_err(message),
    }
}

fn with_sources(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}
