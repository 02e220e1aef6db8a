//! Starting a worker and waiting, with a deadline, for its `Hello`.

use std::path::Path;
use std::process::ExitStatus;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ipc_channel::ipc::{IpcOneShotServer, IpcReceiver, IpcSender};
use tunebox_protocol::{
    Bootstrap, EXIT_NO_WORKER_ENTRY, EXIT_PROTOCOL_MISMATCH, Hello, PROTOCOL_VERSION,
};

use crate::child::Worker;
use crate::pids::{deadline_after, exit_parts};
use crate::quiet_panic::catch_quietly;
use crate::spawn::{Spawned, spawn_worker};
use crate::{ProcessConfig, ProcessError};

/// How often the parent checks whether a starting worker died before connecting.
const EXIT_POLL: Duration = Duration::from_millis(1);

/// How long to wait for a worker whose bootstrap connection broke to be seen dead.
const EXIT_GRACE: Duration = Duration::from_millis(200);

type Accepted = Result<(IpcReceiver<Bootstrap>, Bootstrap), String>;

/// Why a handshake did not produce a `Hello`.
enum Failure {
    Exited(ExitStatus),
    TimedOut,
    Garbled(String),
}

/// Starts a worker as configured and completes the handshake.
///
/// # Errors
///
/// [`ProcessError::Spawn`] at once when the executable cannot be started;
/// [`ProcessError::ExitedBeforeHandshake`] as soon as the child is seen dead before connecting
/// (within milliseconds); [`ProcessError::ProtocolMismatch`] when it speaks another version;
/// [`ProcessError::HandshakeTimeout`] when it neither connects nor exits in time (it is killed);
/// [`ProcessError::Protocol`] when its greeting cannot be decoded;
/// [`ProcessError::NoWorkerEntry`] when it exits with `EXIT_NO_WORKER_ENTRY`. In every case the
/// child is reaped and no thread stays blocked in `accept`.
///
/// A process that was itself started as a worker but never reached the worker entry point
/// does not get here: it exits (see `worker_entry`), before opening the bootstrap server.
pub(crate) fn start(config: &ProcessConfig) -> Result<Worker, ProcessError> {
    crate::worker_entry::refuse_to_spawn_if_forgotten();
    let exe = config
        .resolve_worker()
        .map_err(|source| ProcessError::Spawn {
            path: config.worker_description(),
            source,
        })?;
    log::debug!("starting worker `{}`", exe.display());
    let spawn_error = |source| ProcessError::Spawn {
        path: exe.clone(),
        source,
    };
    let (server, server_name) = bootstrap_server().map_err(spawn_error)?;
    let mut spawned = spawn_worker(&exe, config, &server_name).map_err(spawn_error)?;
    let acceptor = Acceptor::start(server, server_name);

    match wait_for_hello(acceptor, &mut spawned, config.handshake_timeout) {
        Ok(hello) if hello.protocol_version == PROTOCOL_VERSION => Ok(Worker {
            pid: spawned.child.id(),
            child: spawned.child,
            requests: hello.requests,
            responses: hello.responses,
            stderr: spawned.stderr,
            stdout: spawned.stdout,
            uses: 0,
            started: hello.started,
            watch: None,
            enclosure: spawned.enclosure,
        }),
        Ok(hello) => {
            spawned.end();
            Err(mismatch(&exe, hello.protocol_version.to_string()))
        }
        Err(failure) => Err(describe_failure(failure, &exe, &mut spawned, config)),
    }
}

/// Races the accept against the child's exit and the deadline. On failure the accept thread
/// has been released and joined; after a timeout the child has been killed, after a garbled
/// greeting it may still run (the caller kills it).
fn wait_for_hello(
    acceptor: Acceptor,
    spawned: &mut Spawned,
    timeout: Duration,
) -> Result<Hello, Failure> {
    let deadline = deadline_after(timeout);
    loop {
        if let Some(accepted) = acceptor.poll(EXIT_POLL) {
            acceptor.join();
            return match accepted {
                Ok((_, Bootstrap::Hello(hello))) => Ok(hello),
                Ok((_, Bootstrap::Cancel)) => Err(Failure::Garbled(
                    "the worker sent Cancel instead of Hello".into(),
                )),
                // A broken bootstrap connection usually means the child died mid-handshake.
                Err(detail) => match wait_exit(spawned, EXIT_GRACE) {
                    Some(status) => Err(Failure::Exited(status)),
                    None => Err(Failure::Garbled(detail)),
                },
            };
        }
        if let Ok(Some(status)) = spawned.child.try_wait() {
            // The worker may have sent its Hello just before dying: that is still a start,
            // and the first request will see the death.
            return match acceptor.cancel() {
                Some(Ok((_, Bootstrap::Hello(hello)))) => Ok(hello),
                _ => Err(Failure::Exited(status)),
            };
        }
        if Instant::now() >= deadline {
            // Kill first: a worker that connected but never speaks holds the accept thread in
            // its first read until the connection closes.
            spawned.end();
            acceptor.cancel();
            return Err(Failure::TimedOut);
        }
    }
}

fn wait_exit(spawned: &mut Spawned, grace: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + grace;
    loop {
        match spawned.child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(EXIT_POLL),
            _ => return None,
        }
    }
}

fn describe_failure(
    failure: Failure,
    exe: &Path,
    spawned: &mut Spawned,
    config: &ProcessConfig,
) -> ProcessError {
    let pid = spawned.child.id();
    match failure {
        Failure::Exited(status) => {
            let (exit_code, signal) = exit_parts(Some(status));
            if exit_code == Some(EXIT_PROTOCOL_MISMATCH) {
                return mismatch(exe, "another version (it refused ours)".into());
            }
            if exit_code == Some(EXIT_NO_WORKER_ENTRY) {
                return ProcessError::NoWorkerEntry {
                    path: exe.to_owned(),
                    pid,
                };
            }
            ProcessError::ExitedBeforeHandshake {
                pid,
                exit_code,
                signal,
                stderr_tail: spawned
                    .stderr
                    .as_ref()
                    .map(|t| t.text(EXIT_GRACE))
                    .unwrap_or_default(),
            }
        }
        Failure::TimedOut => ProcessError::HandshakeTimeout {
            after: config.handshake_timeout,
            pid,
            own_executable: config.worker_is_current_exe(),
        },
        Failure::Garbled(detail) => {
            spawned.end();
            ProcessError::Protocol {
                detail: format!(
                    "could not read the worker's Hello ({detail}); is `{}` a tunebox worker of \
                     the same release?",
                    exe.display()
                ),
                pid: Some(pid),
            }
        }
    }
}

fn mismatch(exe: &Path, worker: String) -> ProcessError {
    ProcessError::ProtocolMismatch {
        path: exe.to_owned(),
        worker,
        parent: PROTOCOL_VERSION,
    }
}

/// The one-shot server a new worker connects to. ipc-channel makes its socket in a new folder
/// under `TMPDIR`, and panics where that folder cannot be made (its conversion of tempfile's
/// error asserts an OS error): a `TMPDIR` that does not exist or cannot be written is an error
/// here that names it.
fn bootstrap_server() -> std::io::Result<(IpcOneShotServer<Bootstrap>, String)> {
    match catch_quietly(IpcOneShotServer::<Bootstrap>::new) {
        Ok(made) => made,
        Err(panic) => {
            let tmp = std::env::temp_dir();
            let why = match std::fs::metadata(&tmp) {
                Ok(meta) if !meta.is_dir() => "not a folder".to_owned(),
                Ok(_) => "not writable".to_owned(),
                Err(e) => e.to_string(),
            };
            Err(std::io::Error::other(format!(
                "cannot make the worker's bootstrap socket under TMPDIR `{}` ({why}; ipc-channel: \
                 {panic}): point TMPDIR at a folder this user can write, or unset it",
                tmp.display()
            )))
        }
    }
}

/// `IpcOneShotServer::accept` on a helper thread (it has no timeout of its own), raced by the
/// caller against a deadline and the child's exit.
struct Acceptor {
    server_name: String,
    thread: Option<JoinHandle<()>>,
    results: mpsc::Receiver<Accepted>,
}

impl Acceptor {
    fn start(server: IpcOneShotServer<Bootstrap>, server_name: String) -> Acceptor {
        let (tx, results) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("tunebox-accept".into())
            .spawn(move || {
                // ipc-channel can panic decoding a corrupt greeting (a channel index out of
                // range): that is a protocol error of this worker, not a parent crash.
                let accepted = catch_quietly(|| server.accept().map_err(|e| e.to_string()))
                    .unwrap_or_else(|panic| Err(format!("malformed greeting: {panic}")));
                let _ = tx.send(accepted);
            });
        let thread = match thread {
            Ok(thread) => Some(thread),
            Err(e) => {
                // The closure (and the server) were dropped; `poll` reports the failure.
                log::warn!("could not start the accept thread: {e}");
                None
            }
        };
        Acceptor {
            server_name,
            thread,
            results,
        }
    }

    /// Waits up to `timeout` for the accept to finish; `None` while it has not.
    fn poll(&self, timeout: Duration) -> Option<Accepted> {
        match self.results.recv_timeout(timeout) {
            Ok(accepted) => Some(accepted),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Some(Err("the accept thread ended without a result".into()))
            }
        }
    }

    /// Releases the accept thread if it is still blocked (by connecting to the server ourselves
    /// and sending `Cancel`), joins it, and returns what it accepted.
    fn cancel(self) -> Option<Accepted> {
        if let Some(accepted) = self.poll(Duration::ZERO) {
            self.join();
            return Some(accepted);
        }
        if let Ok(sender) = IpcSender::<Bootstrap>::connect(self.server_name.clone()) {
            let _ = sender.send(Bootstrap::Cancel);
        }
        let accepted = self.poll(Duration::from_secs(5));
        self.join();
        accepted
    }

    fn join(mut self) {
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
