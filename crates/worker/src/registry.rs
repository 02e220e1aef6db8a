//! The backends a worker can dispatch to.

use tunebox_bench::{Backend, TaskBackend, TaskContext};
#[cfg(feature = "cpu")]
use tunebox_cpu::CpuBackend;
#[cfg(feature = "cuda")]
use tunebox_cuda::CudaBackend;
use tunebox_protocol::{BenchError, BenchmarkRequest, BenchmarkResult, Task};

use crate::DiagnosticsBackend;

/// The backends of one worker, looked up by the name a request's kernel selects
/// (`Kernel::backend`).
pub struct Registry {
    backends: Vec<Box<dyn Backend>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry {
            backends: Vec::new(),
        }
    }

    /// The backends of the `tunebox-worker` binary: `cpu` (feature `cpu`; its cache directory
    /// from the environment, see `tunebox_cpu::default_cache_dir`), `cuda` (feature `cuda`;
    /// loads the driver and NVRTC on first use; on a machine without them it answers with why)
    /// and `diagnostics`. When no cache directory can be derived, `cpu` answers every request
    /// with that error.
    pub fn standard() -> Self {
        #[allow(
            unused_mut,
            reason = "without the backend features there is nothing to add"
        )]
        let mut registry = Registry::new();
        #[cfg(feature = "cpu")]
        {
            let cpu: Box<dyn Backend> = match CpuBackend::from_env() {
                Ok(cpu) => Box::new(cpu),
                Err(e) => Box::new(Unavailable {
                    name: "cpu",
                    reason: e.to_string(),
                }),
            };
            registry = registry.with(cpu);
        }
        #[cfg(feature = "cuda")]
        {
            registry = registry.with(Box::new(CudaBackend::new()));
        }
        registry.with(Box::new(DiagnosticsBackend::default()))
    }

    /// Only the `diagnostics` backend.
    pub fn diagnostics_only() -> Self {
        Registry::new().with(Box::new(DiagnosticsBackend::default()))
    }

    /// Adds a backend; it replaces one of the same name.
    pub fn with(mut self, backend: Box<dyn Backend>) -> Self {
        self.backends.retain(|b| b.name() != backend.name());
        self.backends.push(backend);
        self
    }

    /// Adds the backend of a task kind defined outside tunebox: `run` is called with each task
    /// of kind `T` (decoded) and its [`TaskContext`] (tensors, scalars, timing helpers), and
    /// what it returns goes back to the parent as the task's typed result. The backend is named
    /// [`Task::BACKEND`] and replaces one of the same name. `run` may keep state between tasks
    /// (it is `FnMut`): it lives as long as the worker process.
    ///
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// use tunebox_protocol::Task;
    /// use tunebox_worker::Registry;
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Square(u64);
    /// impl Task for Square {
    ///     const BACKEND: &'static str = "squares";
    ///     type Output = u64;
    /// }
    ///
    /// let registry = Registry::diagnostics_only().with_task(|Square(n), _cx| Ok(n * n));
    /// assert_eq!(registry.names(), ["diagnostics", "squares"]);
    /// ```
    pub fn with_task<T, F>(self, run: F) -> Self
    where
        T: Task,
        F: FnMut(T, &mut TaskContext<'_>) -> Result<T::Output, BenchError> + 'static,
    {
        self.with(Box::new(TaskBackend::new(run)))
    }

    /// The names of the registered backends, in registration order.
    pub fn names(&self) -> Vec<String> {
        self.backends.iter().map(|b| b.name().to_owned()).collect()
    }

    /// The backend called `name`.
    pub fn get_mut(&mut self, name: &str) -> Option<&mut (dyn Backend + 'static)> {
        self.backends
            .iter_mut()
            .find(|b| b.name() == name)
            .map(|b| b.as_mut())
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::standard()
    }
}

/// A backend that could not be set up: it answers every request with the reason.
#[cfg_attr(
    not(feature = "cpu"),
    expect(dead_code, reason = "only the cpu backend can fail to set up")
)]
struct Unavailable {
    name: &'static str,
    reason: String,
}

impl Backend for Unavailable {
    fn name(&self) -> &'static str {
        self.name
    }

    fn benchmark(&mut self, _: &BenchmarkRequest) -> Result<BenchmarkResult, BenchError> {
        Err(BenchError::Failed {
            message: format!(
                "the `{}` backend is unavailable: {}",
                self.name, self.reason
            ),
        })
    }
}
