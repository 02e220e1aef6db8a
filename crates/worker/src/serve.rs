//! The work loop.

use std::panic::{self, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ipc_channel::ipc::{IpcReceiver, IpcSender};
use ipc_channel::{IpcError, TryRecvError};
use tunebox_bench::Backend;
use tunebox_protocol::{
    BenchError, BenchmarkRequest, BenchmarkResult, Leftover, MAX_SHARED_PAYLOADS, Probe, Request,
    RequestBody, Response, ResponseBody, StartedCell,
};

use crate::diagnostics::take_exit_after_reply;
use crate::hygiene::Hygiene;
use crate::mappings::Mappings;
use crate::{Registry, WorkerError};

/// Serves requests until `Shutdown` arrives or the parent's end of `requests` closes.
///
/// Every `Benchmark` request gets exactly one response with its id. A backend that panics is
/// answered with [`BenchError::Panic`] and the loop goes on.
///
/// # Errors
///
/// [`WorkerError::Ipc`] when a request cannot be decoded or a response cannot be sent (the parent
/// is gone or the channel is broken); the worker should then exit.
pub fn serve(
    requests: &IpcReceiver<Request>,
    responses: &IpcSender<Response>,
    registry: &mut Registry,
) -> Result<(), WorkerError> {
    serve_recording(requests, responses, registry, None)
}

/// [`serve`], recording in `started` the id of each request as it is taken off the channel,
/// before it runs: the parent reads it after a death to tell a request this worker began (its
/// crash) from one it never saw (sent to a fresh worker instead).
pub(crate) fn serve_recording(
    requests: &IpcReceiver<Request>,
    responses: &IpcSender<Response>,
    registry: &mut Registry,
    started: Option<&StartedCell>,
) -> Result<(), WorkerError> {
    let mut mappings = Mappings::default();
    // The state every task should find, recorded before the first one.
    let mut hygiene = Hygiene::new();
    loop {
        let request = match next_request(requests) {
            Ok(request) => request,
            // The parent dropped its sender: it is shutting down or gone.
            Err(IpcError::Disconnected) => return Ok(()),
            Err(e) => {
                return Err(WorkerError::Ipc {
                    during: "receiving a request",
                    detail: e.to_string(),
                });
            }
        };
        if let Some(started) = started {
            started.record_start(request.id);
        }
        // The parent has read what the last request held (it reads before it sends again).
        tunebox_protocol::hold_outputs_for_request(request.hold_outputs);
        let mut left_behind = Vec::new();
        // The only owner of a body that came through the channel: no copy.
        let body = match Arc::unwrap_or_clone(request.body) {
            RequestBody::Ping => ResponseBody::Pong,
            RequestBody::Benchmark(mut benchmark) => {
                log::debug!(
                    "request {}: {} kernel",
                    request.id,
                    benchmark.kernel.backend()
                );
                let (result, leftovers) =
                    benchmark_whole(registry, &mut mappings, &mut hygiene, &mut benchmark);
                left_behind = leftovers;
                ResponseBody::Benchmark(result)
            }
            RequestBody::Prepare(mut benchmark) => {
                mappings.intern(&mut benchmark);
                let before = hygiene.before(&benchmark, false, checks_state(registry, &benchmark));
                let result = dispatch(registry, &benchmark, |backend, request| {
                    backend.prepare(request)
                });
                left_behind = hygiene.after(before, &benchmark, result.as_ref().err());
                ResponseBody::Prepared(result)
            }
            RequestBody::Probe => ResponseBody::Probe(probe(registry)),
            RequestBody::Shutdown => return Ok(()),
        };
        // A sticky device fault leaves the backend unusable: answer, then exit, so that the
        // next request gets a fresh process. Work a candidate left running retires the worker
        // too, but the parent ends it (and the processes it left, while this process still
        // holds them as their subreaper): exiting here would hand them to init.
        let ends = match &body {
            ResponseBody::Benchmark(Err(e)) | ResponseBody::Prepared(Err(e)) => e.ends_worker(),
            _ => false,
        };
        responses
            .send(Response::new(request.id, body).with_left_behind(left_behind))
            .map_err(|e| WorkerError::Ipc {
                during: "sending a response",
                detail: e.to_string(),
            })?;
        if ends {
            log::warn!("the device context is lost; the worker exits");
            return Ok(());
        }
        if let Some(code) = take_exit_after_reply() {
            // SAFETY: `_exit` ends the process at once, which is what the task asked for; no
            // destructor of ours needs to run (the parent owns everything that matters).
            unsafe { libc::_exit(code) };
        }
    }
}

/// Runs a benchmark request as a whole: maps its inputs, checks the worker's state around the
/// backend's run and fills what the worker itself measures of the request
/// (`Integrity::worker_ms`, `worker_cpu_ms`, `threads_started`). Returns the result and what
/// the request left behind.
fn benchmark_whole(
    registry: &mut Registry,
    mappings: &mut Mappings,
    hygiene: &mut Hygiene,
    benchmark: &mut BenchmarkRequest,
) -> (Result<BenchmarkResult, BenchError>, Vec<Leftover>) {
    // Everything the worker does for the request counts: mapping its inputs and the state
    // checks around the call too, not only the backend's part.
    let began = Instant::now();
    let cpu_before = tunebox_bench::process_cpu_ms();
    let threads_before = tunebox_bench::thread_count();
    mappings.intern(benchmark);
    let before = hygiene.before(benchmark, true, checks_state(registry, benchmark));
    let mut result = dispatch(registry, benchmark, |backend, request| {
        backend.benchmark(request)
    });
    // Counted before the state checks, which may release an OpenMP runtime's idle team.
    let threads_after = tunebox_bench::thread_count();
    // The kept mappings this request did not use are released before its growth is counted.
    tunebox_bench::end_request();
    let left_behind = hygiene.after(before, benchmark, result.as_ref().err());
    if let Ok(result) = &mut result {
        let integrity = &mut result.integrity;
        // The worker's clock covers the whole request as the parent's does: mapping the
        // inputs, the tensors' teardown and the state checks too, not only the backend's part
        // (a backend's own figure is never longer).
        let whole_ms = began.elapsed().as_secs_f64() * 1e3;
        integrity.worker_ms = integrity.worker_ms.map(|ms| ms.max(whole_ms));
        integrity.worker_cpu_ms = cpu_before
            .zip(tunebox_bench::process_cpu_ms())
            .map(|(before, after)| (after - before).max(0.0));
        // A backend that ended a pool the kernel started counted its threads before that.
        let counted = threads_before
            .zip(threads_after)
            .and_then(|(before, after)| u32::try_from(after.saturating_sub(before)).ok());
        integrity.threads_started = integrity.threads_started.max(counted);
    }
    (result, left_behind)
}

/// Whether the backend of `request` wants the worker's state checked around it (an unknown
/// backend is answered with an error before anything runs).
fn checks_state(registry: &mut Registry, request: &BenchmarkRequest) -> bool {
    registry
        .get_mut(request.kernel.backend())
        .is_none_or(|backend| backend.checks_worker_state())
}

/// Every backend's devices, and the backends that cannot list theirs.
fn probe(registry: &mut Registry) -> Probe {
    let backends = registry.names();
    let mut devices = Vec::new();
    let mut unavailable = Vec::new();
    for name in &backends {
        let Some(backend) = registry.get_mut(name) else {
            continue;
        };
        match panic::catch_unwind(AssertUnwindSafe(|| backend.devices())) {
            Ok(Ok(found)) => devices.extend(found),
            Ok(Err(e)) => unavailable.push((name.clone(), e)),
            Err(payload) => unavailable.push((name.clone(), panic_error(payload))),
        }
    }
    Probe::new(backends)
        .with_devices(devices)
        .with_unavailable(unavailable)
}

/// How long the worker looks for its next request without sleeping, after each answer.
const SPIN: Duration = Duration::from_micros(50);

/// The next request. A parent that sends requests back to back usually sends the next one
/// within microseconds of an answer; looking for it a moment before sleeping spares the cost of
/// waking this process, which is 50-90 µs across CPUs on some VMs.
fn next_request(requests: &IpcReceiver<Request>) -> Result<Request, IpcError> {
    let start = Instant::now();
    while start.elapsed() < SPIN {
        match requests.try_recv_timeout(Duration::ZERO) {
            Ok(request) => return Ok(request),
            Err(TryRecvError::Empty) => std::thread::yield_now(),
            Err(TryRecvError::IpcError(e)) => return Err(e),
        }
    }
    requests.recv()
}

/// Runs `operation` with the backend of `request`, turning a panic into [`BenchError::Panic`].
fn dispatch<T: SharedPayloads>(
    registry: &mut Registry,
    request: &BenchmarkRequest,
    operation: impl FnOnce(&mut dyn Backend, &BenchmarkRequest) -> Result<T, BenchError>,
) -> Result<T, BenchError> {
    let name = request.kernel.backend();
    let available = registry.names();
    let Some(backend) = registry.get_mut(name) else {
        return Err(BenchError::UnknownBackend {
            backend: name.to_owned(),
            available,
        });
    };
    // A panicking backend may leave its own state half-updated; backends keep no state that a
    // later request trusts blindly (caches are re-validated), so going on is sound.
    let result = panic::catch_unwind(AssertUnwindSafe(|| operation(backend, request)))
        .unwrap_or_else(|payload| Err(panic_error(payload)))?;
    if result.shared_payloads() > MAX_SHARED_PAYLOADS {
        return Err(BenchError::InvalidRequest {
            detail: format!(
                "{} large outputs cannot travel in one reply (at most {MAX_SHARED_PAYLOADS}); \
                 mark fewer tensors as outputs",
                result.shared_payloads()
            ),
        });
    }
    Ok(result)
}

/// What a caught panic said.
fn panic_error(payload: Box<dyn std::any::Any + Send>) -> BenchError {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-string payload".to_owned());
    BenchError::Panic { message }
}

/// Replies that may carry shared-memory regions.
trait SharedPayloads {
    fn shared_payloads(&self) -> usize;
}

impl SharedPayloads for BenchmarkResult {
    fn shared_payloads(&self) -> usize {
        BenchmarkResult::shared_payloads(self)
    }
}

impl SharedPayloads for () {
    fn shared_payloads(&self) -> usize {
        0
    }
}

#[cfg(test)]
mod tests {
    use ipc_channel::ipc;
    use tunebox_protocol::{DiagnosticTask, Kernel};

    use super::*;

    fn with_worker(test: impl FnOnce(&IpcSender<Request>, &IpcReceiver<Response>)) {
        let (request_tx, request_rx) = ipc::channel::<Request>().unwrap();
        let (response_tx, response_rx) = ipc::channel::<Response>().unwrap();
        let server = std::thread::spawn(move || {
            serve(&request_rx, &response_tx, &mut Registry::diagnostics_only())
        });
        test(&request_tx, &response_rx);
        drop(request_tx);
        server.join().unwrap().unwrap();
    }

    fn benchmark(id: u64, task: DiagnosticTask) -> Request {
        Request::new(
            id,
            RequestBody::Benchmark(Box::new(BenchmarkRequest::new(Kernel::Diagnostic(task)))),
        )
    }

    fn result(response: Response) -> Result<BenchmarkResult, BenchError> {
        match response.body {
            ResponseBody::Benchmark(result) => result,
            other => panic!("expected a benchmark response, got {other:?}"),
        }
    }

    #[test]
    fn panics_become_errors_and_the_loop_goes_on() {
        with_worker(|tx, rx| {
            let message = "kernel exploded".to_owned();
            tx.send(benchmark(1, DiagnosticTask::Panic { message }))
                .unwrap();
            let response = rx.recv().unwrap();
            assert_eq!(response.id, 1);
            assert_eq!(
                result(response),
                Err(BenchError::Panic {
                    message: "kernel exploded".into()
                })
            );
            let bytes = tunebox_protocol::Bytes::from_vec(vec![1, 2]).unwrap();
            tx.send(benchmark(2, DiagnosticTask::Echo { bytes }))
                .unwrap();
            let response = rx.recv().unwrap();
            assert_eq!(response.id, 2);
            assert_eq!(result(response).unwrap().outputs[0].bytes, vec![1, 2]);
        });
    }

    /// Every benchmark's reply says how much CPU time the worker process used on it, whatever
    /// its backend: a 30 ms busy wait used some, and no more than two CPUs' worth.
    #[test]
    fn a_reply_carries_the_cpu_time_the_worker_used() {
        with_worker(|tx, rx| {
            let spin = DiagnosticTask::Spin {
                ms: 30,
                block_signals: false,
            };
            tx.send(benchmark(1, spin)).unwrap();
            let used = result(rx.recv().unwrap()).unwrap().integrity.worker_cpu_ms;
            let used = used.expect("the worker reads its CPU clock");
            // A busy machine may take the CPU away for most of the wait: some of it, at least.
            assert!((1.0..1000.0).contains(&used), "{used} ms");
        });
    }

    #[test]
    fn unknown_backend_names_the_available_ones() {
        with_worker(|tx, rx| {
            let mut request = BenchmarkRequest::new(Kernel::C({
                let mut kernel =
                    tunebox_protocol::CKernel::new("void f(void) {}", "f").source_name("f.c");
                kernel.flags = vec![];
                kernel
            }));
            request.timing.min_reps = 1;
            tx.send(Request::new(3, RequestBody::Benchmark(Box::new(request))))
                .unwrap();
            let err = result(rx.recv().unwrap()).unwrap_err();
            assert_eq!(
                err,
                BenchError::UnknownBackend {
                    backend: "cpu".into(),
                    available: vec!["diagnostics".into()]
                }
            );
        });
    }

    #[test]
    fn shutdown_ends_the_loop() {
        let (request_tx, request_rx) = ipc::channel::<Request>().unwrap();
        let (response_tx, _response_rx) = ipc::channel::<Response>().unwrap();
        request_tx
            .send(Request::new(1, RequestBody::Shutdown))
            .unwrap();
        // `request_tx` is still alive: only the Shutdown message can end the loop.
        serve(&request_rx, &response_tx, &mut Registry::diagnostics_only()).unwrap();
    }
}
