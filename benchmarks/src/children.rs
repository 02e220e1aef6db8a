//! The modes this binary runs in when it is its own child process.
//!
//! - `echo [--cpu N]`: the far end of the raw socketpair floor. Standard input is one end of a
//!   `UnixStream::pair()`; every 8-byte message read from it is written straight back, until the
//!   peer closes it. With `--cpu N` the process first pins itself to CPU `N`.
//! - `launch-busy WORKER`: a parent to SIGKILL for the orphan-cleanup figure. It starts a
//!   `TuningProcess` on `WORKER`, gives it a 60 s `Sleep` task, prints the worker's pid on a line
//!   of its own, and waits for the task.

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use tunebox_process::{Output, ProcessConfig, TuningProcess};
use tunebox_protocol::{BenchmarkRequest, DiagnosticTask, Kernel};

use crate::affinity;

/// Size of one message of the raw floor: a request id, as a `Request` header would carry.
pub(crate) const ECHO_MESSAGE: usize = 8;

/// `echo [--cpu N]`.
pub(crate) fn echo(args: &[String]) -> Result<()> {
    match args {
        [] => {}
        [flag, cpu] if flag == "--cpu" => {
            let cpu = cpu.parse().with_context(|| format!("--cpu {cpu}"))?;
            affinity::pin_current_thread(cpu)?;
        }
        other => bail!("echo takes [--cpu N], got {other:?}"),
    }
    let stdin = std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .context("duplicating standard input")?;
    let mut socket = UnixStream::from(stdin);
    let mut message = [0u8; ECHO_MESSAGE];
    loop {
        match socket.read_exact(&mut message) {
            Ok(()) => {}
            // The parent closed its end: the measurement is over.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e).context("reading from the socketpair"),
        }
        socket
            .write_all(&message)
            .context("writing to the socketpair")?;
    }
}

/// `launch-busy WORKER`.
pub(crate) fn launch_busy(args: &[String]) -> Result<()> {
    let [worker] = args else {
        bail!("launch-busy takes the worker executable, got {args:?}");
    };
    let config = ProcessConfig::new()
        .worker(worker)
        .stdout(Output::Null)
        .stderr(Output::Null);
    let mut process = TuningProcess::spawn(config).context("starting the worker")?;
    process
        .put(BenchmarkRequest::new(Kernel::Diagnostic(
            DiagnosticTask::Sleep { ms: 60_000 },
        )))
        .context("sending the 60 s task")?;
    let pid = process.pid().context("the worker has no pid")?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{pid}").context("printing the worker's pid")?;
    out.flush().context("printing the worker's pid")?;
    drop(out);
    // The benchmark kills this process long before the task ends.
    let _ = process.get(Duration::from_secs(120));
    Ok(())
}
