//! Starting a worker process: the one place that describes worker processes ([`Launch`]).

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io;
use std::path::Path;
use std::sync::OnceLock;
use std::sync::mpsc::{self, Sender};

use tunebox_protocol::{PARENT_PID_ENV, PROTOCOL_VERSION, PROTOCOL_VERSION_ENV, WORKER_SERVER_ENV};

use crate::capture::Tail;
use crate::containment::{self, Enclosure, WorkerCgroups};
use crate::launch::{self, Launch, Launched, Stream, WorkerChild};
use crate::sandbox;
use crate::{Output, ProcessConfig};

/// A started worker process and the tails of its captured streams.
pub(crate) struct Spawned {
    pub(crate) child: WorkerChild,
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
/// inherits no descriptor but its standard streams, gets the parent's variables that the
/// config's inheritance lets through, then the config's own variables, then the bootstrap
/// variables, and is made from the spawner thread (see [`spawn_on_spawner_thread`]) in its
/// cgroup ([`launch`]). Its cgroups, a sandbox or a memory limit are prepared here, before
/// the birth, and applied in the child just before `exec` ([`sandbox::apply`]).
pub(crate) fn spawn_worker(
    exe: &Path,
    config: &ProcessConfig,
    server_name: &str,
) -> io::Result<Spawned> {
    // Absolute: a relative path would be taken from the scratch folder the worker starts in.
    let exe = std::path::absolute(exe)?;
    let mut env = Environment::default();
    env.extend(config.inherit.filter(std::env::vars_os()));
    env.extend(config.env.iter().cloned());
    if let Some(device) = &config.device {
        env.set("CUDA_VISIBLE_DEVICES", device.as_str());
    }
    env.set(WORKER_SERVER_ENV, server_name);
    env.set(PARENT_PID_ENV, std::process::id().to_string());
    env.set(PROTOCOL_VERSION_ENV, PROTOCOL_VERSION.to_string());
    let mut launch = Launch {
        program: exe.clone().into_os_string(),
        args: config.args.clone(),
        env: Vec::new(),
        cwd: None,
        stdout: stream(&config.stdout)?,
        stderr: stream(&config.stderr)?,
        cgroup: None,
        hook: Box::new(|_| Ok(())),
        may_share_memory: true,
    };
    let mut enclosure = confine(&mut launch, &mut env, &exe, config)?;
    launch.env = env.0.into_iter().collect();

    let launched = spawn_on_spawner_thread(launch)?;
    enclosure.register(launched.child.id());
    let tail = |output: &Output, pipe: Option<std::os::fd::OwnedFd>, name| match (output, pipe) {
        (Output::Capture { tail_bytes }, Some(pipe)) => Some(Tail::drain(pipe, *tail_bytes, name)),
        _ => None,
    };
    Ok(Spawned {
        stdout: tail(&config.stdout, launched.stdout, "stdout"),
        stderr: tail(&config.stderr, launched.stderr, "stderr"),
        child: launched.child,
        enclosure,
    })
}

/// A process's environment being built: a later value of a variable replaces the earlier one.
/// A map, so that an inherited environment of many thousands of variables costs no more than
/// it did with `Command`.
#[derive(Default)]
struct Environment(std::collections::BTreeMap<OsString, OsString>);

impl Environment {
    fn set(&mut self, key: impl Into<OsString>, value: impl Into<OsString>) {
        self.0.insert(key.into(), value.into());
    }

    fn get(&self, key: &str) -> Option<&OsString> {
        self.0.get(std::ffi::OsStr::new(key))
    }

    fn extend(&mut self, pairs: impl IntoIterator<Item = (OsString, OsString)>) {
        self.0.extend(pairs);
    }
}

/// Prepares the worker's enclosure (its cgroups, a scratch folder when the config or the
/// sandbox asks for one), its sandbox and limits, and has the child apply them just before
/// `exec`; a worker with a scratch folder starts in it and has it as `TMPDIR`.
fn confine(
    launch: &mut Launch,
    env: &mut Environment,
    exe: &Path,
    config: &ProcessConfig,
) -> io::Result<Enclosure> {
    let tasks = config.sandbox.as_ref().and_then(|s| s.tasks);
    let cgroups = WorkerCgroups::create(containment::bases(), tasks).unwrap_or_else(|e| {
        log::warn!("no cgroup for the worker ({e}); holding it through its process tree");
        None
    });
    let scratch = (config.scratch || config.sandbox.is_some())
        .then(crate::scratch::Scratch::create)
        .transpose()?;
    let enclosure = Enclosure::new(cgroups, scratch);
    let configured = |name: &str| env.get(name).cloned();
    let request = sandbox::Request {
        sandbox: config.sandbox.as_ref(),
        memory_limit: config.memory_limit,
        exe,
        env: &configured,
        enclosure: &enclosure,
    };
    let prepared = sandbox::prepare(&request)?;
    if let Some(dir) = enclosure.cgroups().and_then(WorkerCgroups::birth_dir) {
        // Where it cannot be opened, the child joins it by writing `cgroup.procs`.
        launch.cgroup = launch::open_cgroup(dir).ok();
    }
    if let Some(scratch) = enclosure.scratch() {
        let scratch = scratch.path();
        env.set("TMPDIR", scratch);
        launch.cwd = Some(scratch.into());
        // A relative cache folder would be looked for in the scratch folder.
        if let Some(cache) = env
            .get(tunebox_protocol::CACHE_DIR_ENV)
            .map(std::path::PathBuf::from)
            .filter(|c| c.is_relative() && !c.as_os_str().is_empty())
        {
            env.set(tunebox_protocol::CACHE_DIR_ENV, std::path::absolute(cache)?);
        }
    }
    // `sandbox::apply` makes only system calls on memory prepared before the birth
    // (documented there), and neither allocates nor locks.
    launch.may_share_memory = prepared.may_share_memory();
    launch.hook = Box::new(move |born| sandbox::apply(&prepared, born));
    Ok(enclosure)
}

fn stream(output: &Output) -> io::Result<Stream> {
    Ok(match output {
        Output::Inherit => Stream::Inherit,
        Output::Null => Stream::Null,
        Output::File(path) => {
            let file = OpenOptions::new().create(true).append(true).open(path)?;
            if file.metadata()?.len() >= crate::config::FILE_OUTPUT_LIMIT {
                Stream::Null
            } else {
                Stream::File(file.into())
            }
        }
        Output::Capture { .. } => Stream::Pipe,
    })
}

type SpawnJob = (Launch, Sender<io::Result<Launched>>);

/// Starts `launch` from a thread that lives as long as the process.
///
/// The worker arms `PR_SET_PDEATHSIG`, and Linux delivers that signal when the *thread* that
/// forked the child exits, not the process. Spawning from a pool thread or a short-lived
/// caller thread would kill the worker with that thread; the spawner thread never exits, so a
/// worker dies exactly when its parent process does.
fn spawn_on_spawner_thread(launch: Launch) -> io::Result<Launched> {
    static SPAWNER: OnceLock<io::Result<Sender<SpawnJob>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (jobs, incoming) = mpsc::channel::<SpawnJob>();
        std::thread::Builder::new()
            .name("tunebox-spawner".into())
            .spawn(move || {
                for (launch, reply) in incoming {
                    // The caller blocks on `reply` until this answers, so the send succeeds.
                    let _ = reply.send(launch::launch(launch));
                }
            })?;
        Ok(jobs)
    });
    let spawner = spawner
        .as_ref()
        .map_err(|e| io::Error::new(e.kind(), format!("no spawner thread: {e}")))?;
    let (reply, result) = mpsc::channel();
    spawner
        .send((launch, reply))
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    result
        .recv()
        .map_err(|_| io::Error::other("the spawner thread is gone"))?
}
