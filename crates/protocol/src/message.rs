//! Handshake and session messages.

use std::sync::Arc;

use ipc_channel::ipc::{IpcReceiver, IpcSender};
use serde::{Deserialize, Serialize};

use crate::{BenchError, BenchmarkRequest, BenchmarkResult, Leftover, Probe, StartedCell};

/// The one message a worker sends on the parent's one-shot bootstrap server.
#[derive(Debug, Serialize, Deserialize)]
pub enum Bootstrap {
    /// The worker is up and these are its channels.
    Hello(Hello),
    /// Sent by the parent to itself to release a thread blocked in `accept` when the worker never
    /// connected. A worker never sends it.
    Cancel,
}

/// The worker's greeting: who it is, and the two channels of the session.
#[derive(Debug, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Hello {
    /// The worker's [`PROTOCOL_VERSION`](crate::PROTOCOL_VERSION); must equal the parent's.
    pub protocol_version: u32,
    /// The worker's process id.
    pub pid: u32,
    /// Names of the backends the worker can run (`"cpu"`, `"diagnostics"`, …).
    pub backends: Vec<String>,
    /// Where the parent sends [`Request`]s.
    pub requests: IpcSender<Request>,
    /// Where the parent receives [`Response`]s. The worker holds the only sender, so this
    /// receiver reports a disconnect as soon as the worker dies.
    pub responses: IpcReceiver<Response>,
    /// Where the worker records the id of each request as it begins it, so that after a death
    /// the parent knows whether the request in flight had started.
    pub started: StartedCell,
}

impl Hello {
    /// The greeting of the worker `pid` speaking `protocol_version` with `backends`, the
    /// session's two channels and its started cell.
    pub fn new(
        protocol_version: u32,
        pid: u32,
        backends: Vec<String>,
        channels: (IpcSender<Request>, IpcReceiver<Response>),
        started: StartedCell,
    ) -> Hello {
        let (requests, responses) = channels;
        Hello {
            protocol_version,
            pid,
            backends,
            requests,
            responses,
            started,
        }
    }
}

/// A request from the parent; the worker answers each with one [`Response`] of the same `id`,
/// except `Shutdown`, which it answers by exiting.
///
/// The body is shared (`Arc`; on the wire it is the body itself) so that the parent can keep
/// it, without a copy, to send it again to a fresh worker when the first one died before
/// starting it.
#[derive(Debug, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Request {
    /// Chosen by the parent, unique within one worker session.
    pub id: u64,
    /// What to do.
    pub body: Arc<RequestBody>,
    /// Whether the parent reads this request's large outputs out of the worker's memory
    /// (`process_vm_readv`): the worker then sends each as its address and keeps it until its
    /// next request, instead of copying it into a new shared-memory region
    /// ([`crate::Bytes::output_copy`]). Set by the parent that reads them
    /// ([`crate::BenchmarkResult::read_held`]); `false` from [`Request::new`].
    pub hold_outputs: bool,
}

impl Request {
    /// A request with id `id` asking for `body`.
    pub fn new(id: u64, body: RequestBody) -> Request {
        Request {
            id,
            body: Arc::new(body),
            hold_outputs: false,
        }
    }

    /// A request with id `id` asking for the shared `body` (the parent sends a body it kept
    /// again, without a copy).
    pub fn shared(id: u64, body: Arc<RequestBody>) -> Request {
        Request {
            id,
            body,
            hold_outputs: false,
        }
    }

    /// This request with [`Request::hold_outputs`] set to `hold`.
    pub fn holding_outputs(mut self, hold: bool) -> Request {
        self.hold_outputs = hold;
        self
    }
}

/// What a [`Request`] asks for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum RequestBody {
    /// Answer [`ResponseBody::Pong`] at once (liveness and round-trip measurements).
    Ping,
    /// Run one benchmark and answer [`ResponseBody::Benchmark`].
    Benchmark(Box<BenchmarkRequest>),
    /// Do everything but measure (compile into the cache, load, check the launch) and answer
    /// [`ResponseBody::Prepared`]: compiles spread over a pool's workers before benchmarking.
    Prepare(Box<BenchmarkRequest>),
    /// List the backends and devices, answered by [`ResponseBody::Probe`].
    Probe,
    /// Exit cleanly without answering.
    Shutdown,
}

/// A worker's answer to the [`Request`] with the same `id`.
#[derive(Debug, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Response {
    /// The id of the request this answers.
    pub id: u64,
    /// The answer.
    pub body: ResponseBody,
    /// What the request left changed in the worker process, as the worker found after it
    /// (empty for most requests); see [`BenchmarkResult::left_behind`]. A leftover that was not
    /// `restored` means the parent must replace this worker before the next request.
    pub left_behind: Vec<Leftover>,
}

impl Response {
    /// The answer `body` to the request `id`, with nothing left behind (set it with
    /// [`Response::with_left_behind`]).
    pub fn new(id: u64, body: ResponseBody) -> Response {
        Response {
            id,
            body,
            left_behind: Vec::new(),
        }
    }
}

setters!(Response {
    with_left_behind => left_behind: Vec<Leftover>,
});

/// What a [`Response`] carries.
#[derive(Debug, Serialize, Deserialize)]
#[expect(
    clippy::large_enum_variant,
    reason = "one per request, sent once and unpacked at once; boxing would allocate per reply"
)]
pub enum ResponseBody {
    /// Answer to [`RequestBody::Ping`].
    Pong,
    /// Answer to [`RequestBody::Benchmark`]: the measurement, or why there is none. An `Err` means
    /// the task failed; the worker lives on unless [`BenchError::ends_worker`].
    Benchmark(Result<BenchmarkResult, BenchError>),
    /// Answer to [`RequestBody::Prepare`].
    Prepared(Result<(), BenchError>),
    /// Answer to [`RequestBody::Probe`].
    Probe(Probe),
}
