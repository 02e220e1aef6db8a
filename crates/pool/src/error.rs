//! Errors of the pool and of the candidates it runs.

use tunebox_process::ProcessError;

/// Why the pool could not produce a candidate's result, or could not be built.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// The candidate's request failed on its worker: a task error, a timeout, a crash, … (see
    /// [`ProcessError`]). The pool replaced the worker where needed and went on.
    #[error(transparent)]
    Process(#[from] ProcessError),
    /// A pool needs at least one worker.
    #[error("a pool needs at least one worker; {requested} were requested")]
    NoWorkers {
        /// The number requested.
        requested: usize,
    },
}
