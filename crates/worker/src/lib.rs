//! The tunebox worker: the child process that runs candidates so the parent never has to.
//!
//! A parent (`tunebox-process`) starts a worker with the name of its bootstrap server in
//! [`WORKER_SERVER_ENV`](tunebox_protocol::WORKER_SERVER_ENV). The worker then:
//!
//! 1. arms `PR_SET_PDEATHSIG` (and checks that the parent did not already die), turns core dumps
//!    off, and checks the parent's protocol version ([`run_from_env`]);
//! 2. connects and sends `Hello` with its request and response channels;
//! 3. serves requests ([`serve`]) with the backends of a [`Registry`] (`cpu` from `tunebox-cpu`
//!    and `cuda` from `tunebox-cuda` with their features, [`DiagnosticsBackend`], and the task
//!    kinds a binary adds with [`Registry::with_task`]), catching backend panics as
//!    `BenchError::Panic`; after each task it puts back the process state the task changed
//!    (floating-point modes, signal handlers, working directory, …) and names in the reply what
//!    the task left behind (`Response::left_behind`), descriptors, threads or memory included,
//!    which make the parent replace the worker;
//! 4. exits on `Shutdown`, or when the parent's end of the channel closes.
//!
//! Binaries other than `tunebox-worker` can serve as workers too: call [`run_if_worker`] first
//! thing in `main` (the `tunebox` CLI does), and a parent can spawn that binary itself.
//!
//! Modules: `bootstrap.rs` ([`run_if_worker`], [`run_from_env`]: the steps above up to the
//! handshake), `serve.rs` ([`serve`]: the request loop, recording each request in the parent's
//! `StartedCell`), `registry.rs` ([`Registry`]: backends by name), `diagnostics.rs`
//! ([`DiagnosticsBackend`]: every failure path without a compiler or GPU), `mappings.rs` (the
//! caller's shared buffers, kept mapped by id), `hygiene/` (the process state between tasks),
//! `error.rs` ([`WorkerError`]); the binary is
//! `bin/tunebox-worker.rs`.
//!
//! # Example
//!
//! Serving over in-process channels, as the tests do:
//!
//! ```
//! use ipc_channel::ipc;
//! use tunebox_protocol::{Request, RequestBody, Response, ResponseBody};
//! use tunebox_worker::{serve, Registry};
//!
//! let (request_tx, request_rx) = ipc::channel::<Request>().unwrap();
//! let (response_tx, response_rx) = ipc::channel::<Response>().unwrap();
//! let server = std::thread::spawn(move || {
//!     serve(&request_rx, &response_tx, &mut Registry::diagnostics_only())
//! });
//! request_tx.send(Request::new(7, RequestBody::Ping)).unwrap();
//! let response = response_rx.recv().unwrap();
//! assert_eq!(response.id, 7);
//! assert!(matches!(response.body, ResponseBody::Pong));
//! request_tx.send(Request::new(8, RequestBody::Shutdown)).unwrap();
//! server.join().unwrap().unwrap();
//! ```
#![deny(missing_docs)]

mod bootstrap;
mod diagnostics;
mod error;
mod hygiene;
mod mappings;
mod registry;
mod serve;
mod sigsys;

pub use bootstrap::{run_from_env, run_if_worker};
pub use diagnostics::DiagnosticsBackend;
pub use error::WorkerError;
pub use registry::Registry;
pub use serve::serve;
