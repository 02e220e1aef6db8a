//! One isolated tunebox worker process: spawn, handshake, requests with deadlines, kill, restart.
//!
//! [`TuningProcess`] is the parent's handle on one worker (`tunebox-worker`, or any binary that
//! calls `tunebox_worker::run_if_worker`), as PyTorch Inductor's `TuningProcess` and TVM's
//! `PopenWorker`. [`ProcessConfig`] says how to start it ([`Output`] for its stdout and stderr,
//! a [`DeviceToken`] to pin it to a GPU), and [`ProcessError`] tells apart what can go wrong: a task
//! error (the worker lives), a timeout (the parent killed it) and a crash (it died by itself).
//! `tunebox-pool` runs many of these; the protocol types come from `tunebox-protocol`.
//!
//! Guarantees (Linux):
//! - every wait has a deadline enforced in the parent; a timed-out worker is SIGKILLed with
//!   everything it started and reaped before the error is returned;
//! - nothing a worker starts outlives it, sandboxed or not: each worker has cgroups of its own
//!   where they can be made (killed whole when it ends), and is a child subreaper whose process
//!   tree is killed otherwise ([`Containment`]);
//! - a worker that dies is reported as soon as its channel closes (or within 10 ms of its exit,
//!   when a process it forked holds the channel open), with its exit code or signal
//!   and the tail of its stderr, but only to a request it had begun: one it never began runs on
//!   a fresh worker;
//! - a worker that exits while idle can be noticed at once ([`TuningProcess::on_worker_exit`]),
//!   and a dead worker's pid is never reported;
//! - workers inherit no descriptor of the parent but their standard streams (everything from 3
//!   up is made close-on-exec in the child before exec);
//! - workers lead their own process group, have stdin closed, no core dumps, and die with the
//!   parent process (`PR_SET_PDEATHSIG`, armed from a spawner thread that lives as long as the
//!   process);
//! - workers inherit only a documented part of the parent's environment ([`INHERITED_ENV`],
//!   [`INHERITED_ENV_PREFIXES`]) plus what the config adds, and a worker named without a `/` is
//!   never taken from the current directory;
//! - replies are matched to requests by id, so a late reply is never taken for another's;
//! - a worker that writes more than [`ProcessConfig::write_limit`] (1 GiB) while it serves one
//!   request is killed then ([`ProcessError::WroteTooMuch`]), and one whose channel holds a
//!   partial message blocking the parent's read is killed within 5 s of it, not at the timeout;
//! - a program started as a worker that never reached the worker entry point (its `main`
//!   forgot `tunebox_worker::run_if_worker`) neither starts workers of its own nor runs on: it
//!   exits with `EXIT_NO_WORKER_ENTRY`, which the parent reports as
//!   [`ProcessError::NoWorkerEntry`], naming the fix.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use tunebox_process::{ProcessConfig, ProcessError, TuningProcess};
//! use tunebox_protocol::{BenchmarkRequest, DiagnosticTask, Kernel};
//!
//! let mut worker = TuningProcess::spawn(ProcessConfig::new().worker("target/release/tunebox-worker"))?;
//! println!("round trip: {:?}", worker.ping(Duration::from_secs(1))?);
//! let hang = BenchmarkRequest::new(Kernel::Diagnostic(DiagnosticTask::Hang));
//! let err = worker.benchmark(hang, Duration::from_millis(300)).unwrap_err();
//! assert!(matches!(err, ProcessError::Timeout { .. }));
//! // The next request gets a fresh worker.
//! worker.ping(Duration::from_secs(5))?;
//! assert_eq!(worker.restarts(), 1);
//! # Ok::<(), ProcessError>(())
//! ```
#![deny(missing_docs)]

mod capture;
mod child;
mod clock;
mod config;
mod containment;
mod cpu_times;
mod devices;
mod environment;
mod error;
mod exit;
mod exit_watch;
mod fresh_dir;
mod handshake;
mod held_outputs;
mod kill_switch;
mod launch;
mod pids;
mod process;
mod quiet_panic;
mod sandbox;
mod scratch;
mod spawn;
mod stop_watch;
mod watchdog;
mod worker_entry;
mod write_watch;

pub use config::{
    DeviceToken, FILE_OUTPUT_LIMIT, InitRequest, Output, ProcessConfig, WORKER_PATH_ENV,
};
pub use containment::Containment;
#[doc(hidden)]
pub use cpu_times::{CpuTicks, CpuTimes, USER_HZ};
pub use devices::{VisibleDevices, parse_visible_devices, visible_devices_from_env};
pub use environment::{INHERITED_ENV, INHERITED_ENV_PREFIXES, inherited_by_default};
pub use error::{ProcessError, SandboxStop, SystemCall};
pub use held_outputs::HELD_OUTPUTS_ENV;
pub use kill_switch::KillSwitch;
pub use process::TuningProcess;
pub use sandbox::{Sandbox, SandboxSupport};
