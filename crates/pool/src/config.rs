//! `PoolConfig`: the settings of both pool faces.

use std::sync::Arc;
use std::time::Duration;

use tunebox_process::{
    DeviceToken, InitRequest, Output, ProcessConfig, TuningProcess, VisibleDevices,
};

/// How long a probe worker may take to list its devices (creating a CUDA context can take
/// seconds).
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

use crate::contents::Contents;
use crate::engine::Engine;
use crate::{Devices, PoolError};

/// How to run a pool: its workers, their timeout, recycling, initializer and output. Plain
/// chainable settings, as [`ProcessConfig`] is for one worker; both
/// [`TuningProcessPool::new`](crate::TuningProcessPool::new) and
/// [`PoolExecutor::new`](crate::PoolExecutor::new) take one, and nothing starts until then.
///
/// ```
/// use std::time::Duration;
/// use tunebox_pool::PoolConfig;
/// use tunebox_process::ProcessConfig;
///
/// let config = PoolConfig::new()
///     .max_workers(4)
///     .timeout(Duration::from_secs(10))
///     .maximum_process_uses(Some(100))
///     .process_config(ProcessConfig::new().worker("target/release/tunebox-worker"));
/// assert_eq!(config.timeout_value(), Duration::from_secs(10));
/// ```
#[derive(Debug, Clone)]
pub struct PoolConfig {
    pub(crate) devices: Devices,
    pub(crate) timeout: Duration,
    pub(crate) process: ProcessConfig,
    pub(crate) stdout: Option<Output>,
    pub(crate) stderr: Option<Output>,
    pub(crate) maximum_process_uses: Option<u64>,
    pub(crate) initializer: Option<InitRequest>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            devices: Devices::Cpu(std::thread::available_parallelism().map_or(1, |n| n.get())),
            timeout: Duration::from_secs(60),
            process: ProcessConfig::new(),
            stdout: None,
            stderr: None,
            maximum_process_uses: None,
            initializer: None,
        }
    }
}

impl PoolConfig {
    /// The defaults: one unpinned worker per CPU, 60 s per-task timeout, workers started as
    /// `ProcessConfig::new()` says, never recycled, no initializer.
    pub fn new() -> Self {
        Self::default()
    }

    /// One worker per device (default: one unpinned worker per CPU). Replaces
    /// [`max_workers`](PoolConfig::max_workers).
    pub fn devices(mut self, devices: Devices) -> Self {
        self.devices = devices;
        self
    }

    /// `n` workers not pinned to a device, as TVM's `max_workers`: `devices(Devices::Cpu(n))`.
    /// Zero is refused when the pool starts ([`PoolError::NoWorkers`]).
    pub fn max_workers(self, n: usize) -> Self {
        self.devices(Devices::Cpu(n))
    }

    /// Per-task timeout, from handing the task to a worker to its reply (default 60 s). A task
    /// that exceeds it fails with a timeout and its worker is replaced. Zero is refused when
    /// the pool starts ([`PoolError::ZeroTimeout`]).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How each worker is started (executable, environment, handshake timeout, output, …). The
    /// pool sets each worker's device on top of it, and this config's `maximum_process_uses`,
    /// initializer and outputs when they are given.
    pub fn process_config(mut self, config: ProcessConfig) -> Self {
        self.process = config;
        self
    }

    /// Where workers' stdout goes (overrides the process config's).
    pub fn stdout(mut self, output: Output) -> Self {
        self.stdout = Some(output);
        self
    }

    /// Where workers' stderr goes (overrides the process config's).
    pub fn stderr(mut self, output: Output) -> Self {
        self.stderr = Some(output);
        self
    }

    /// Replace a worker after it ran this many tasks, as TVM's `maximum_process_uses`; `None`
    /// (default) never does. Replacements start right after the last use, off the next task's
    /// path.
    pub fn maximum_process_uses(mut self, uses: Option<u64>) -> Self {
        self.maximum_process_uses = uses;
        self
    }

    /// Run `init` on every worker after each start (TVM's `initializer`).
    pub fn initializer(mut self, init: InitRequest) -> Self {
        self.initializer = Some(init);
        self
    }

    /// The configured per-task timeout.
    pub fn timeout_value(&self) -> Duration {
        self.timeout
    }

    /// Starts the workers: one per device, as configured, making large inputs into
    /// `contents` (a new pool's own, or the one of the pool it is started beside).
    pub(crate) fn start(&self, contents: Arc<Contents>) -> Result<Engine, PoolError> {
        if self.timeout.is_zero() {
            return Err(PoolError::ZeroTimeout {
                place: "PoolConfig::timeout",
            });
        }
        Engine::start(self.worker_configs()?, self.timeout, contents)
    }

    /// One device per worker. When `CUDA_VISIBLE_DEVICES` is unset, a probe worker counts the
    /// GPUs (the parent itself never loads a GPU library) and they are numbered from 0.
    fn device_slots(&self) -> Result<Vec<Option<DeviceToken>>, PoolError> {
        match self.devices.resolve() {
            Err(PoolError::DeviceCountUnknown { .. }) => {
                let count = self.count_gpus()?;
                let tokens = (0..count)
                    .map(|i| DeviceToken::from(i.to_string()))
                    .collect();
                self.devices.resolve_with(VisibleDevices::List(tokens))
            }
            other => other,
        }
    }

    /// The number of GPUs a worker sees, asked of a short-lived worker.
    fn count_gpus(&self) -> Result<usize, PoolError> {
        let mut worker = TuningProcess::spawn(self.process.clone())?;
        let probe = worker.probe(PROBE_TIMEOUT)?;
        // The probe worker's exit status is of no interest.
        let _ = worker.shutdown(Duration::from_millis(500));
        if probe.devices.is_empty() {
            return Err(match probe.unavailable.first() {
                Some((backend, why)) => PoolError::DeviceCountUnknown {
                    reason: format!("{backend}: {why}"),
                },
                None => PoolError::NoGpuInWorker {
                    backends: probe.backends.clone(),
                },
            });
        }
        Ok(probe.devices.len())
    }

    /// The config of each worker.
    fn worker_configs(&self) -> Result<Vec<ProcessConfig>, PoolError> {
        let devices = self.device_slots()?;
        Ok(devices
            .into_iter()
            .map(|device| {
                let mut config = self.process.clone().device(device);
                if self.maximum_process_uses.is_some() {
                    config = config.maximum_process_uses(self.maximum_process_uses);
                }
                if let Some(init) = &self.initializer {
                    config = config.initializer(init.clone());
                }
                if let Some(stdout) = &self.stdout {
                    config = config.stdout(stdout.clone());
                }
                if let Some(stderr) = &self.stderr {
                    config = config.stderr(stderr.clone());
                }
                config
            })
            .collect())
    }
}
