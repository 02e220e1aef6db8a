//! Why a worker stopped serving.

/// A failure of the worker itself (not of a task: those are `BenchError`s sent to the parent).
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The worker was started without a parent's bootstrap server.
    #[error("{var} is not set: tunebox-worker is started by tunebox (TuningProcess), not by hand")]
    NotAWorker {
        /// The missing variable.
        var: &'static str,
    },
    /// The parent speaks another protocol version.
    #[error(
        "protocol version mismatch: this worker speaks {worker}, the parent speaks {parent}; \
         use a worker binary from the same tunebox release as the parent"
    )]
    ProtocolMismatch {
        /// The worker's version.
        worker: u32,
        /// What the parent announced.
        parent: String,
    },
    /// The parent died before the worker could arm its death signal.
    #[error("the parent (pid {expected}) exited before the worker started")]
    ParentGone {
        /// The pid the parent announced.
        expected: u32,
    },
    /// Setting up the process (death signal, rlimits) failed.
    #[error("could not set up the worker process: {what}")]
    Setup {
        /// What failed.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The IPC transport failed.
    #[error("IPC with the parent failed while {during}: {detail}")]
    Ipc {
        /// What the worker was doing.
        during: &'static str,
        /// The transport's message.
        detail: String,
    },
}

impl WorkerError {
    /// The exit code the worker process uses for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            WorkerError::ProtocolMismatch { .. } => tunebox_protocol::EXIT_PROTOCOL_MISMATCH,
            _ => 2,
        }
    }
}
