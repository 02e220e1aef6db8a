//! Starting up as a worker: process setup, handshake, then the work loop.

use ipc_channel::ipc::{self, IpcSender};
use rustix::process::{Resource, Rlimit, Signal};
use tunebox_protocol::{
    Bootstrap, Hello, PARENT_PID_ENV, PROTOCOL_VERSION, PROTOCOL_VERSION_ENV, Request, Response,
    StartedCell, WORKER_SERVER_ENV,
};

use crate::serve::serve_recording;
use crate::{Registry, WorkerError};

/// Runs the worker if this process was started as one (the parent's bootstrap server is named in
/// [`WORKER_SERVER_ENV`]), then exits; returns at once otherwise.
///
/// Call it first thing in `main` of a binary that a `TuningProcess` may spawn as its worker; the
/// `tunebox` CLI does. Before returning to the OS the worker has served every request.
pub fn run_if_worker(registry: impl FnOnce() -> Registry) {
    if std::env::var_os(WORKER_SERVER_ENV).is_some() {
        // Before anything else (building the registry included): `exit` below runs the atexit
        // check of tunebox-process, which must see the entry reached.
        tunebox_protocol::mark_worker_entry();
        std::process::exit(run_from_env(registry()));
    }
}

/// Sets the process up as a worker, connects to the parent named in the environment, sends
/// `Hello` and serves requests with `registry`. Returns the process exit code: 0 after a
/// `Shutdown` or when the parent went away, non-zero after an error (printed to stderr).
///
/// Setup, in order: `PR_SET_PDEATHSIG(SIGKILL)` so the worker dies with the thread that spawned
/// it, then a check that the parent is still the process in [`PARENT_PID_ENV`] (it may have died
/// before the signal was armed); core dumps off (`RLIMIT_CORE` = 0) unless
/// `TUNEBOX_CORE_DUMPS=1`; SIGSEGV and SIGBUS at their default action; a SIGSYS handler that names the
/// system call the sandbox refused on stderr before the worker dies of it; the parent's [`PROTOCOL_VERSION_ENV`] must equal ours (otherwise exit
/// code [`EXIT_PROTOCOL_MISMATCH`](tunebox_protocol::EXIT_PROTOCOL_MISMATCH)).
pub fn run_from_env(mut registry: Registry) -> i32 {
    // This is the worker entry point: a process started as a worker that gets here is no
    // program that forgot to call it (see `tunebox_protocol::EXIT_NO_WORKER_ENTRY`).
    tunebox_protocol::mark_worker_entry();
    match connect_and_serve(&mut registry) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("tunebox-worker: {e}");
            e.exit_code()
        }
    }
}

fn connect_and_serve(registry: &mut Registry) -> Result<(), WorkerError> {
    let server = std::env::var(WORKER_SERVER_ENV).map_err(|_| WorkerError::NotAWorker {
        var: WORKER_SERVER_ENV,
    })?;
    quiet_panic_hook();
    check_protocol_version()?;
    arm_parent_death_signal()?;
    disable_core_dumps()?;
    default_fault_signals();
    crate::sigsys::install();

    let bootstrap: IpcSender<Bootstrap> =
        IpcSender::connect(server).map_err(|e| ipc("connecting to the parent", e))?;
    let (request_tx, request_rx) =
        ipc::channel::<Request>().map_err(|e| ipc("creating channels", e))?;
    let (response_tx, response_rx) =
        ipc::channel::<Response>().map_err(|e| ipc("creating channels", e))?;
    let started = StartedCell::new().map_err(|e| ipc("creating the started-request cell", e))?;
    let parents_cell = started
        .try_clone()
        .map_err(|e| ipc("creating the started-request cell", e))?;
    bootstrap
        .send(Bootstrap::Hello(Hello::new(
            PROTOCOL_VERSION,
            std::process::id(),
            registry.names(),
            (request_tx, response_rx),
            parents_cell,
        )))
        .map_err(|e| ipc("sending Hello", e))?;
    drop(bootstrap);
    // Measurements say how far they got in the cell, for the parent's timeout errors.
    let started = std::sync::Arc::new(started);
    let sink = std::sync::Arc::clone(&started);
    tunebox_bench::install_progress_sink(move |progress| sink.record_progress(progress));
    serve_recording(&request_rx, &response_tx, registry, Some(&started))
}

/// Backend panics are caught and answered; the hook only notes them on stderr (which crash
/// errors quote), without a backtrace: capturing one under `RUST_BACKTRACE=1` can take longer
/// than a short task's timeout. `TUNEBOX_WORKER_BACKTRACE=1` keeps the default hook.
fn quiet_panic_hook() {
    if std::env::var_os("TUNEBOX_WORKER_BACKTRACE").is_some_and(|v| v == "1") {
        return;
    }
    std::panic::set_hook(Box::new(|info| eprintln!("tunebox-worker: {info}")));
}

fn ipc(during: &'static str, error: impl std::fmt::Display) -> WorkerError {
    WorkerError::Ipc {
        during,
        detail: error.to_string(),
    }
}

fn check_protocol_version() -> Result<(), WorkerError> {
    match std::env::var(PROTOCOL_VERSION_ENV) {
        // A parent that does not announce a version is checked by the parent itself, on Hello.
        Err(_) => Ok(()),
        Ok(parent) if parent.trim() == PROTOCOL_VERSION.to_string() => Ok(()),
        Ok(parent) => Err(WorkerError::ProtocolMismatch {
            worker: PROTOCOL_VERSION,
            parent,
        }),
    }
}

/// Dies with the parent: arms `PR_SET_PDEATHSIG`, then closes the race where the parent died
/// before it was armed (we would have been re-parented already).
fn arm_parent_death_signal() -> Result<(), WorkerError> {
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL)).map_err(|e| {
        WorkerError::Setup {
            what: "PR_SET_PDEATHSIG".into(),
            source: e.into(),
        }
    })?;
    let expected = std::env::var(PARENT_PID_ENV)
        .ok()
        .and_then(|pid| pid.trim().parse::<u32>().ok());
    if let Some(expected) = expected {
        let actual = rustix::process::getppid().map(|pid| pid.as_raw_nonzero().get() as u32);
        if actual != Some(expected) {
            return Err(WorkerError::ParentGone { expected });
        }
    }
    Ok(())
}

/// Gives SIGSEGV and SIGBUS back their default action (death). Rust's runtime handles them to
/// report stack overflows, and for any other fault it restores the default and *returns*,
/// counting on the faulting instruction to fault again; a kernel that `raise(SIGSEGV)`s is then
/// not stopped at all and runs on. With the default action it dies there, and is reported as
/// crashed by SIGSEGV; a stack overflow in a kernel or the worker is a SIGSEGV too.
fn default_fault_signals() {
    for signal in [libc::SIGSEGV, libc::SIGBUS] {
        // SAFETY: installing SIG_DFL runs no code of ours in signal context, and this runs
        // before any kernel is loaded.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
        }
    }
}

fn disable_core_dumps() -> Result<(), WorkerError> {
    if std::env::var_os("TUNEBOX_CORE_DUMPS").is_some_and(|v| v == "1") {
        return Ok(());
    }
    let current = rustix::process::getrlimit(Resource::Core);
    rustix::process::setrlimit(
        Resource::Core,
        Rlimit {
            current: Some(0),
            maximum: current.maximum,
        },
    )
    .map_err(|e| WorkerError::Setup {
        what: "RLIMIT_CORE".into(),
        source: e.into(),
    })
}
