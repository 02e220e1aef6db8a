//! Environment variables through which a parent bootstraps a worker.

/// Name of the parent's one-shot IPC server; its presence puts a tunebox binary in worker mode.
pub const WORKER_SERVER_ENV: &str = "TUNEBOX_WORKER_SERVER";

/// The parent's pid, so the worker can tell whether its parent died before it armed
/// `PR_SET_PDEATHSIG`.
pub const PARENT_PID_ENV: &str = "TUNEBOX_PARENT_PID";

/// The parent's [`PROTOCOL_VERSION`](crate::PROTOCOL_VERSION), checked by the worker before it
/// connects.
pub const PROTOCOL_VERSION_ENV: &str = "TUNEBOX_PROTOCOL_VERSION";
