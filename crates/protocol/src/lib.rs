//! The wire vocabulary between a tunebox parent and its worker processes.
//!
//! A parent (`tunebox-process`'s `TuningProcess`, usually driven by `tunebox-pool`) spawns a
//! worker (`tunebox-worker`) and talks to it over [ipc-channel]. Everything that crosses that
//! boundary is defined here, and nothing else in tunebox derives `Serialize`:
//!
//! - the handshake: the worker connects to the parent's one-shot server and sends
//!   [`Bootstrap::Hello`] carrying [`Hello`] (its [`PROTOCOL_VERSION`], pid, backends, the two
//!   channels of the session, and the [`StartedCell`] in which it records each request it
//!   begins);
//! - the session: [`Request`]s (`Ping`, `Benchmark`, `Shutdown`) and [`Response`]s, matched by id;
//! - the payload: a [`BenchmarkRequest`] (a [`Kernel`], its [`TensorSpec`]s and scalars, a
//!   [`TimingConfig`]) answered by a [`BenchmarkResult`] ([`TimingStats`] in ms plus the output
//!   tensors) or a [`BenchError`] (errors as data: the task failed, the worker lives). Each is
//!   built in a line: `BenchmarkRequest::new(CKernel::new(source, "saxpy").define("BLOCK", 64))`
//!   with `.tensor(TensorSpec::new("x", DType::F32, [n]).random(1))` and `.scalar("n", n)`;
//! - open task kinds: a downstream crate implements [`Task`] for its own serde task type, with
//!   its own serde result type, and registers a backend for it in its worker; the task travels
//!   as [`Kernel::Task`] and its result as [`BenchmarkResult::value`] ([`TaskRequest`],
//!   [`decode_output`]).
//!
//! See `docs/protocol.md` in the repository for every message and the failure semantics.
//!
//! # Example
//!
//! ```
//! use tunebox_protocol::{BenchmarkRequest, DiagnosticTask, Request, RequestBody};
//!
//! // A request that makes the worker sleep for 5 ms: diagnostics need no compiler or GPU.
//! let request = BenchmarkRequest::new(DiagnosticTask::Sleep { ms: 5 });
//! assert_eq!(request.kernel.backend(), "diagnostics");
//! let message = Request::new(1, RequestBody::Benchmark(Box::new(request)));
//! assert_eq!(message.id, 1);
//! ```
//!
//! [ipc-channel]: https://docs.rs/ipc-channel
#![deny(missing_docs)]

/// Chainable setters, one per listed public field: `$setter(value) -> Self` sets `$field`.
/// The protocol's structs are `#[non_exhaustive]` (a new field breaks no downstream build),
/// so code outside this crate builds them with a constructor and these setters, not with a
/// struct expression.
macro_rules! setters {
    ($ty:ty { $($setter:ident => $field:ident: $t:ty),* $(,)? }) => {
        impl $ty {
            $(
                #[doc = concat!("Sets [`", stringify!($field), "`](Self::", stringify!($field), ").")]
                #[must_use]
                pub fn $setter(mut self, $field: $t) -> Self {
                    self.$field = $field;
                    self
                }
            )*
        }
    };
}

mod budget;
mod bytes;
mod cuda;
mod define;
mod dtype;
mod env;
mod error;
mod held;
mod machine;
mod message;
mod request;
mod result;
mod shared;
mod started;
mod task;

pub use bytes::{Bytes, INLINE_LIMIT, MAX_INLINE_REQUEST_BYTES, MAX_SHARED_PAYLOADS};
pub use cuda::{CudaCode, CudaKernel, DeviceInfo, LaunchConfig, Probe};
pub use define::Define;
pub use dtype::DType;
pub use env::{
    CACHE_DIR_ENV, PARENT_PID_ENV, PROTOCOL_VERSION_ENV, WORKER_SERVER_ENV, WORKER_USES_ENV,
    cache_root,
};
pub use env::{mark_worker_entry, worker_entry_reached};
pub use error::BenchError;
#[doc(hidden)]
pub use held::{SpareBuffers, hold_outputs_for_request};
pub use machine::physical_memory_bytes;
pub use message::{Bootstrap, Hello, Request, RequestBody, Response, ResponseBody};
pub use request::{
    Arg, BenchmarkRequest, CKernel, CacheFlush, DiagnosticTask, Element, Init, Kernel, RepClock,
    Scalar, ScalarKind, TaskKernel, TensorSpec, TimingConfig, VariedReps,
};
pub use result::{BenchmarkResult, CheckedRep, Integrity, Leftover, TensorData, TimingStats};
pub use shared::{SharedBuffer, SharedData, checksum};
pub use started::{Phase, Progress, StartedCell, short_duration, short_ms};
pub use task::{Task, TaskRequest, decode, decode_output, encode};

/// Version of the wire protocol. The parent refuses a worker whose [`Hello`] carries another one,
/// and a worker refuses to start when the parent announces another one in
/// [`PROTOCOL_VERSION_ENV`]. Bump it on every change to a serialized type.
pub const PROTOCOL_VERSION: u32 = 13;

/// Exit code of a worker that refused to start because the parent speaks another
/// [`PROTOCOL_VERSION`]. The parent turns it into a version-mismatch error.
pub const EXIT_PROTOCOL_MISMATCH: i32 = 86;

/// Exit code of a process that was started as a worker ([`WORKER_SERVER_ENV`] is set) but never
/// reached the worker entry point (`tunebox_worker::run_if_worker`): it was about to start
/// workers of its own, or its `main` returned. The parent turns it into a "no worker entry"
/// error that names the fix, instead of "exited before connecting".
pub const EXIT_NO_WORKER_ENTRY: i32 = 87;

/// What a worker writes to stderr, followed by the number and a newline, when the sandbox's
/// seccomp filter traps a system call (SIGSYS, `SECCOMP_RET_TRAP`), just before it dies of
/// that signal: the parent names the call in its `SandboxStop` error.
pub const REFUSED_SYSTEM_CALL_LINE: &str = "tunebox-worker: the sandbox refused system call ";
