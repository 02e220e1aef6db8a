//! Starting a worker process: the one place that builds worker `Command`s.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc::{self, Sender};

use tunebox_protocol::{PARENT_PID_ENV, PROTOCOL_VERSION, PROTOCOL_VERSION_ENV, WORKER_SERVER_ENV};

use crate::capture::Tail;
use crate::containment::{self, Enclosure, WorkerCgroups};
use crate::sandbox;
use crate::{Output, ProcessConfig};

/// A started worker process and the tails of its captured streams.
pub(crate) struct Spawned {
    pub(crate) child: Child,
    pub(crate) stdout: Option<Tail>,
    pub(crate) stderr: Option<Tail>,
    /// The worker's cgroups and scratch folder, removed when the worker is gone.
    pub(crate) enclosure: Enclosure,
}

impl Spawned {
    /// Kills the worker and everything it started, and reaps it.
    pub(crate) fn end(&mut self) -> Option<std::process::ExitStatus> {
        self.enclosure.end(self.child.id());
        self.child.wait().ok()
    }
}

/// Starts `exe` as a worker that will connect to the bootstrap server `server_name`.
///
/// The child leads its own process group (so the whole group can be killed), has stdin closed,
/// inherits no descriptor but its standard streams (see [`inherit_only_stdio`]), gets the
/// parent's variables that the config's inheritance lets through, then the config's own
/// variables, then the bootstrap variables, and is forked from the spawner thread (see
/// [`spawn_on_spawner_thread`]). Its cgroups, a sandbox or a memory limit are prepared here,
/// before the fork, and applied in the child just before `exec` ([`sandbox::apply`]).
pub(crate) fn spawn_worker(
    exe: &Path,
    config: &ProcessConfig,
    server_name: &str,
) -> io::Result<Spawned> {
    // Absolute: a relative path would be taken from the scratch folder the worker starts in.
    let exe = std::path::absolute(exe)?;
    let exe = exe.as_path();
    let mut command = Command::new(exe);
    command.args(&config.args);
    command.env_clear();
    command.envs(config.inherit.filter(std::env::vars_os()));
    command.envs(config.env.iter().map(|(k, v)| (k, v)));
    if let Some(device) = &config.device {
        command.env("CUDA_VISIBLE_DEVICES", device.as_str());
    }
    command
        .env(WORKER_SERVER_ENV, server_name)
        .env(PARENT_PID_ENV, std::process::id().to_string())
        .env(PROTOCOL_VERSION_ENV, PROTOCOL_VERSION.to_string())
        .stdin(Stdio::null())
        .stdout(stdio(&config.stdout)?)
        .stderr(stdio(&config.stderr)?)
        .process_group(0);
    inherit_only_stdio(&mut command);
    let mut enclosure = confine(&mut command, exe, config)?;

    let mut child = spawn_on_spawner_thread(command)?;
    enclosure.register(child.id());
    let stdout = match (&config.stdout, child.stdout.take()) {
        (Output::Capture { tail_bytes }, Some(pipe)) => {
            Some(Tail::drain(pipe, *tail_bytes, "stdout"))
        }
        _ => None,
    };
    let stderr = match (&config.stderr, child.stderr.take()) {
        (Output::Capture { tail_bytes }, Some(pipe)) => {
            Some(Tail::drain(pipe, *tail_bytes, "stderr"))
        }
        _ => None,
    };
    Ok(Spawned {
        child,
        stdout,
        stderr,
        enclosure,
    })
}

/// Prepares the worker's enclosure (its cgroups, a scratch folder when the config or the
/// sandbox asks for one), its sandbox and limits, and has the child apply them just before
/// `exec`; a worker with a scratch folder starts in it and has it as `TMPDIR`.
fn confine(command: &mut Command, exe: &Path, config: &ProcessConfig) -> io::Result<Enclosure> {
    let env = |name: &str| -> Option<std::ffi::OsString> {
        let configured = config.env.iter().rev().find(|(k, _)| k == name);
        match configured {
            Some((_, v)) => Some(v.clone()),
            None => config
                .inherit
                .filter(std::env::vars_os())
                .into_iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v),
        }
    };
    let tasks = config.sandbox.as_ref().and_then(|s| s.tasks);
    let cgroups = WorkerCgroups::create(containment::bases(), tasks).unwrap_or_else(|e| {
        log::warn!("no cgroup for the worker ({e}); holding it through its process tree");
        None
    });
    let scratch = (config.scratch || config.sandbox.is_some())
        .then(sandbox::make_scratch)
        .transpose()?;
    let enclosure = Enclosure::new(cgroups, scratch);
    let request = sandbox::Request {
        sandbox: config.sandbox.as_ref(),
        memory_limit: config.memory_limit,
        exe,
        env: &env,
        enclosure: &enclosure,
    };
    let prepared = sandbox::prepare(&request)?;
    if let Some(scratch) = enclosure.scratch() {
        command.env("TMPDIR", scratch).current_dir(scratch);
        // A relative cache folder would be looked for in the scratch folder.
        if let Some(cache) = env(tunebox_protocol::CACHE_DIR_ENV)
            .map(std::path::PathBuf::from)
            .filter(|c| c.is_relative() && !c.as_os_str().is_empty())
        {
            command.env(tunebox_protocol::CACHE_DIR_ENV, std::path::absolute(cache)?);
        }
    }
    let prepared = std::sync::Arc::new(prepared);
    // SAFETY: the closure runs in the child between fork and exec; `sandbox::apply` makes only
    // system calls on memory prepared before the fork (documented there), and neither
    // allocates nor locks.
    unsafe {
        command.pre_exec(move || sandbox::apply(&prepared));
    }
    Ok(enclosure)
}

/// Descriptors above this are not examined on kernels without `close_range` (before Linux 5.11),
/// where each descriptor takes a system call.
const FALLBACK_FD_LIMIT: u64 = 65_536;

/// Makes every descriptor but 0, 1 and 2 close on exec in the child, so that a worker holds only
/// its standard streams (it connects to the parent by name afterwards): none of the parent's
/// descriptors that lack close-on-exec (a pipe whose EOF the application waits for, a make
/// jobserver) nor a sibling's bootstrap socket that ipc-channel accepted without close-on-exec a
/// moment before this fork.
///
/// Close-on-exec rather than closed: the standard library reports a failed `exec` through a
/// close-on-exec pipe of its own, which must stay open until the `exec`.
fn inherit_only_stdio(command: &mut Command) {
    // SAFETY: the closure runs in the child between fork and exec, where only async-signal-safe
    // operations are allowed; it makes raw system calls (`close_range`, `getrlimit`, `fcntl`)
    // that only change descriptor flags, and takes no lock and allocates nothing.
    unsafe {
        command.pre_exec(|| {
            mark_close_on_exec_from(3);
            Ok(())
        });
    }
}

/// Sets close-on-exec on every descriptor from `first` up. Async-signal-safe.
fn mark_close_on_exec_from(first: libc::c_uint) {
    // SAFETY: `close_range` with `CLOSE_RANGE_CLOEXEC` only sets a flag on open descriptors
    // (Linux 5.11); on older kernels it fails with ENOSYS or EINVAL and changes nothing.
    let marked = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    } == 0;
    if marked {
        return;
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` fills the struct it is given, a live local.
    let end = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        limit.rlim_cur.min(FALLBACK_FD_LIMIT)
    } else {
        1024
    };
    for fd in u64::from(first)..end {
        // SAFETY: `F_SETFD` on a descriptor number only sets its flags (FD_CLOEXEC is the only
        // one); an unused number fails with EBADF, which is ignored.
        unsafe {
            libc::fcntl(fd as libc::c_int, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

fn stdio(output: &Output) -> io::Result<Stdio> {
    Ok(match output {
        Output::Inherit => Stdio::inherit(),
        Output::Null => Stdio::null(),
        Output::File(path) => OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?
            .into(),
        Output::Capture { .. } => Stdio::piped(),
    })
}

type SpawnJob = (Command, Sender<io::Result<Child>>);

/// Spawns `command` from a thread that lives as long as the process.
///
/// The worker arms `PR_SET_PDEATHSIG`, and Linux delivers that signal when the *thread* that
/// forked the child exits, not the process. Spawning from a pool thread or a short-lived
/// caller thread would kill the worker with that thread; the spawner thread never exits, so a
/// worker dies exactly when its parent process does.
fn spawn_on_spawner_thread(command: Command) -> io::Result<Child> {
    static SPAWNER: OnceLock<io::Result<Sender<SpawnJob>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (jobs, incoming) = mpsc::channel::<SpawnJob>();
        std::thread::Builder::new()
            .name("tunebox-spawner".into())
            .spawn(move || {
                for (mut command, reply) in incoming {
                    // The caller blocks on `reply` until this answers, so the send succeeds.
                    let _ = reply.send(command.spawn());
                }
            })?;
        Ok(jobs)
    });
    let spawner = spawner
        .as_ref()
        .map_err(|e| io::Error::new(e.kind(), format!("no spawner thread: {e}")))?;
    let (reply, result) = mpsc::channel();
    spawner
        .send((command, reply))
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    result
        .recv()
        .map_err(|_| io::Error::other("the spawner thread is gone"))?
}
