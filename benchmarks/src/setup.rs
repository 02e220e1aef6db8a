//! What every figure needs: the worker executable, a private compile cache, the run's size.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use tunebox_process::{Output, ProcessConfig};
use tunebox_protocol::{BenchmarkRequest, Bytes, DiagnosticTask, Kernel};

/// A generous deadline for requests that are expected to succeed quickly.
pub(crate) const LONG: Duration = Duration::from_secs(30);

/// The settings of one benchmark run.
#[derive(Debug)]
pub(crate) struct Setup {
    /// `tunebox-worker`, built in release by `cargo xtask bench`.
    pub(crate) worker: PathBuf,
    /// Compile cache of the CPU backend (`TUNEBOX_CACHE_DIR`), removed at the end of the run.
    cache: tempfile::TempDir,
    /// Fewer iterations (`--quick`), for smoke tests.
    pub(crate) quick: bool,
}

impl Setup {
    /// # Errors
    ///
    /// The worker executable does not exist, or no temporary directory can be made.
    pub(crate) fn new(worker: PathBuf, quick: bool) -> Result<Setup> {
        if !worker.is_file() {
            anyhow::bail!(
                "the worker executable {} does not exist; build it with \
                 `cargo build --release -p tunebox-worker` (cargo xtask bench does)",
                worker.display()
            );
        }
        let cache = tempfile::Builder::new()
            .prefix("tunebox-bench-cache-")
            .tempdir()
            .context("creating a temporary compile cache")?;
        Ok(Setup {
            worker,
            cache,
            quick,
        })
    }

    /// `full` iterations, or `quick` ones with `--quick`.
    pub(crate) fn n(&self, full: usize, quick: usize) -> usize {
        if self.quick { quick } else { full }
    }

    /// The private compile cache.
    pub(crate) fn cache_dir(&self) -> &Path {
        self.cache.path()
    }

    /// How every worker of the benchmark is started: the release worker, the private cache,
    /// stdout discarded, stderr captured (the default, so that crash errors quote it).
    pub(crate) fn config(&self) -> ProcessConfig {
        ProcessConfig::new()
            .worker(&self.worker)
            .env("TUNEBOX_CACHE_DIR", self.cache_dir())
            .stdout(Output::Null)
            .stderr(Output::Capture {
                tail_bytes: 16 * 1024,
            })
            .handshake_timeout(Duration::from_secs(10))
    }
}

/// A diagnostics request.
pub(crate) fn diag(task: DiagnosticTask) -> BenchmarkRequest {
    BenchmarkRequest::new(Kernel::Diagnostic(task))
}

/// The trivial task of every round-trip figure: echo zero bytes.
pub(crate) fn trivial() -> BenchmarkRequest {
    diag(DiagnosticTask::Echo {
        bytes: Bytes::empty(),
    })
}

/// `duration` in µs.
pub(crate) fn us(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}

/// `duration` in ms.
pub(crate) fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}
