//! Errors as data: why a worker could not measure a request.

use serde::{Deserialize, Serialize};

/// Why a benchmark request failed inside a worker that is still alive.
///
/// A worker that dies is not a `BenchError`: the parent sees that itself (a crash or a timeout).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
pub enum BenchError {
    /// The request names a backend this worker does not have.
    #[error("this worker has no `{backend}` backend (it has: {})", available.join(", "))]
    UnknownBackend {
        /// The backend the request needs.
        backend: String,
        /// The backends the worker has.
        available: Vec<String>,
    },
    /// The request is malformed (a bad tensor spec, too many arguments, …).
    #[error("invalid request: {detail}")]
    InvalidRequest {
        /// What is wrong and what to change.
        detail: String,
    },
    /// The kernel did not compile.
    #[error("compilation failed: `{command}`\n{log}")]
    Compile {
        /// The compiler command line that was run.
        command: String,
        /// The compiler's output.
        log: String,
    },
    /// The compiled kernel could not be loaded or its entry not found.
    #[error("could not load `{path}`: {detail}")]
    Load {
        /// The artifact.
        path: String,
        /// The loader's message.
        detail: String,
    },
    /// The backend panicked; the panic was caught and the worker lives.
    #[error("the backend panicked: {message}")]
    Panic {
        /// The panic message.
        message: String,
    },
    /// The backend failed for another reason (out of memory, I/O, …).
    #[error("{message}")]
    Failed {
        /// What failed.
        message: String,
    },
}
