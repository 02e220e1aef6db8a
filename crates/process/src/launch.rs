//! Starting a worker: `clone3` straight into its cgroup where the kernel allows it, else `fork`;
//! then the child's steps and `execve`.
//!
//! Why not `std::process::Command`: a child that joins its cgroup by writing `cgroup.procs`
//! waits for an RCU grace period (the cgroup core's `percpu_down_write` of the threadgroup
//! lock), ~11 ms on a 2-vCPU KVM guest when spawns are ~50 ms apart, against ~1 ms for the whole
//! `clone3` with `CLONE_INTO_CGROUP` (Linux 5.7+, cgroup v2), which takes only the lock's read
//! side. A fresh worker per choice pays it once per choice. `Command` cannot pass clone flags.
//! Where `clone3` is refused (kernels before 5.7, seccomp filters that answer `ENOSYS`, as
//! Docker's default profile does), the child is forked and joins as before
//! ([`crate::sandbox::apply`]).

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};

/// `CLONE_INTO_CGROUP` (`linux/sched.h`), not in every libc release.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Set once `clone3` into a cgroup has been refused for good (no `clone3`, no
/// `CLONE_INTO_CGROUP`): later spawns fork at once.
static CLONE3_REFUSED: AtomicBool = AtomicBool::new(false);

/// The kernel's `struct clone_args` (`linux/sched.h`), its size as of Linux 5.7.
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// Where one of the child's output streams goes.
#[derive(Debug)]
pub(crate) enum Stream {
    /// This process's stream.
    Inherit,
    /// `/dev/null`.
    Null,
    /// An open file (appended to).
    File(OwnedFd),
    /// A pipe whose reading end [`Launched`] hands back.
    Pipe,
}

/// The child's steps between its birth and `execve`, given whether it was born in its cgroup
/// (then it must not join that one again). They run in a copy of a multi-threaded process, so
/// they may only make system calls on memory made before the spawn: no allocation, no lock.
pub(crate) type Hook = Box<dyn Fn(bool) -> io::Result<()> + Send + Sync>;

/// What to start: the program, its arguments and whole environment, its working directory,
/// its output streams, the cgroup (v2) to be born in, and the steps before `execve`. Stdin is
/// `/dev/null`, and the child leads a process group of its own.
pub(crate) struct Launch {
    pub(crate) program: OsString,
    pub(crate) args: Vec<OsString>,
    pub(crate) env: Vec<(OsString, OsString)>,
    pub(crate) cwd: Option<OsString>,
    pub(crate) stdout: Stream,
    pub(crate) stderr: Stream,
    /// A cgroup-v2 folder the child is made in (`CLONE_INTO_CGROUP`), where the kernel allows.
    pub(crate) cgroup: Option<OwnedFd>,
    pub(crate) hook: Hook,
}

/// A started child and the reading ends of its piped streams.
#[derive(Debug)]
pub(crate) struct Launched {
    pub(crate) child: WorkerChild,
    pub(crate) stdout: Option<OwnedFd>,
    pub(crate) stderr: Option<OwnedFd>,
}

/// A child process of this one, reaped by [`wait`](WorkerChild::wait) (as
/// `std::process::Child`: nothing happens when it is dropped).
#[derive(Debug)]
pub(crate) struct WorkerChild {
    pid: u32,
    status: Option<ExitStatus>,
}

impl WorkerChild {
    /// Its pid.
    pub(crate) fn id(&self) -> u32 {
        self.pid
    }

    /// Waits for it to exit and reaps it; its status (again, once reaped).
    ///
    /// # Errors
    ///
    /// `waitpid`'s error (`ECHILD` when something else reaped it).
    pub(crate) fn wait(&mut self) -> io::Result<ExitStatus> {
        loop {
            if let Some(status) = self.status {
                return Ok(status);
            }
            self.reap(0)?;
        }
    }

    /// Reaps it if it has exited; `None` while it runs.
    ///
    /// # Errors
    ///
    /// As [`wait`](WorkerChild::wait).
    pub(crate) fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.reap(libc::WNOHANG)?;
        }
        Ok(self.status)
    }

    fn reap(&mut self, options: libc::c_int) -> io::Result<()> {
        let mut status = 0;
        // SAFETY: `waitpid` on our own child's pid, writing into a live local.
        match unsafe { libc::waitpid(self.pid as libc::pid_t, &mut status, options) } {
            0 => Ok(()),
            -1 => match io::Error::last_os_error() {
                e if e.kind() == io::ErrorKind::Interrupted => Ok(()),
                e => Err(e),
            },
            _ => {
                self.status = Some(ExitStatus::from_raw(status));
                Ok(())
            }
        }
    }
}

/// Starts `launch`'s child. Call it from a thread that outlives the child: a worker's
/// `PR_SET_PDEATHSIG` fires when the thread that made it exits.
///
/// # Errors
///
/// A pipe or `/dev/null` that cannot be opened, a refused `fork` (`EAGAIN`: too many
/// processes), or the first failed step of the child (a cgroup it cannot join, a sandbox step,
/// `execve`: a missing program), with the child reaped.
pub(crate) fn launch(launch: Launch) -> io::Result<Launched> {
    let image = Image::new(&launch)?;
    let null = open_null()?;
    let (stdout_read, stdout_write) = parent_and_child_ends(&launch.stdout, &null)?;
    let (stderr_read, stderr_write) = parent_and_child_ends(&launch.stderr, &null)?;
    let (report_read, report_write) = pipe()?;
    let report_write = above_stdio(report_write)?;
    let fds = ChildFds {
        stdin: null.as_raw_fd(),
        stdout: stdout_write.as_ref().map(AsRawFd::as_raw_fd),
        stderr: stderr_write.as_ref().map(AsRawFd::as_raw_fd),
        report: report_write.as_raw_fd(),
    };
    let (pid, born) = match birth(launch.cgroup.as_ref())? {
        Birth::Child { born } => {
            // SAFETY: this is the new child; `in_child` only makes system calls on what was
            // made above, and never returns.
            unsafe { in_child(&image, &fds, &launch.hook, born) }
        }
        Birth::Parent { pid, born } => (pid, born),
    };
    drop((stdout_write, stderr_write, report_write));
    let mut child = WorkerChild { pid, status: None };
    match read_report(&report_read) {
        Ok(None) => {}
        Ok(Some(errno)) => {
            let _ = child.wait();
            return Err(io::Error::from_raw_os_error(errno));
        }
        Err(e) => {
            // Whether it reached `execve` is unknown: it is not left running or unreaped.
            // SAFETY: `kill` of our own unreaped child's pid.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            let _ = child.wait();
            return Err(e);
        }
    }
    log::trace!(
        "pid {pid}: started{}",
        if born { " in its cgroup" } else { "" }
    );
    Ok(Launched {
        child,
        stdout: stdout_read,
        stderr: stderr_read,
    })
}

/// The program, its arguments and environment as C strings, and the pointer arrays `execve`
/// takes.
struct Image {
    program: CString,
    cwd: Option<CString>,
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

impl Image {
    fn new(launch: &Launch) -> io::Result<Image> {
        let program = c_string(&launch.program)?;
        let cwd = launch.cwd.as_deref().map(c_string).transpose()?;
        let mut strings = vec![program.clone()];
        for arg in &launch.args {
            strings.push(c_string(arg)?);
        }
        let argc = strings.len();
        for (key, value) in &launch.env {
            let mut pair = key.clone();
            pair.push("=");
            pair.push(value);
            strings.push(c_string(&pair)?);
        }
        // The pointers stay valid: a `CString`'s bytes do not move when the vector does.
        let pointers = |s: &[CString]| -> Vec<*const libc::c_char> {
            s.iter()
                .map(|c| c.as_ptr())
                .chain([std::ptr::null()])
                .collect()
        };
        let argv = pointers(&strings[..argc]);
        let envp = pointers(&strings[argc..]);
        Ok(Image {
            program,
            cwd,
            _strings: strings,
            argv,
            envp,
        })
    }
}

fn c_string(s: &OsStr) -> io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{s:?} holds a NUL byte and cannot be passed to a process"),
        )
    })
}

/// The child's descriptors for its standard streams (`None`: inherited) and its report pipe.
struct ChildFds {
    stdin: RawFd,
    stdout: Option<RawFd>,
    stderr: Option<RawFd>,
    report: RawFd,
}

/// A pipe, both ends close-on-exec: (reading, writing).
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `pipe2` writes two descriptors into the array it is given.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just opened and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn open_null() -> io::Result<OwnedFd> {
    above_stdio(
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")?
            .into(),
    )
}

/// `fd`, or a close-on-exec copy of it numbered 3 or more when it is 0, 1 or 2 (this process's
/// own standard streams were closed): the child puts it in place of a standard stream with
/// `dup2`, which must neither be a no-op that keeps close-on-exec nor overwrite another of
/// the child's streams before it is placed.
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: `F_DUPFD_CLOEXEC` makes a new descriptor, which is owned by nothing else.
    unsafe {
        match libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) {
            -1 => Err(io::Error::last_os_error()),
            copy => Ok(OwnedFd::from_raw_fd(copy)),
        }
    }
}

/// For one output stream: the end this process keeps (a pipe's reading end) and the descriptor
/// the child puts in its place (`None`: inherited).
fn parent_and_child_ends(
    stream: &Stream,
    null: &OwnedFd,
) -> io::Result<(Option<OwnedFd>, Option<OwnedFd>)> {
    Ok(match stream {
        Stream::Inherit => (None, None),
        Stream::Null => (None, Some(above_stdio(null.try_clone()?)?)),
        Stream::File(file) => (None, Some(above_stdio(file.try_clone()?)?)),
        Stream::Pipe => {
            let (read, write) = pipe()?;
            (Some(read), Some(above_stdio(write)?))
        }
    })
}

/// Which side of the birth this is, and whether the child was born in its cgroup.
enum Birth {
    Child { born: bool },
    Parent { pid: u32, born: bool },
}

/// Makes the child: `clone3` into `cgroup` while the kernel allows it, else `fork`.
fn birth(cgroup: Option<&OwnedFd>) -> io::Result<Birth> {
    if let Some(cgroup) = cgroup.filter(|_| !CLONE3_REFUSED.load(Ordering::Relaxed)) {
        let mut args = CloneArgs {
            flags: CLONE_INTO_CGROUP,
            exit_signal: libc::SIGCHLD as u64,
            cgroup: cgroup.as_raw_fd() as u64,
            ..CloneArgs::default()
        };
        // SAFETY: `clone3` without `CLONE_VM` is `fork` with arguments: the child gets a copy of
        // this thread on a copy of its stack and returns here with 0.
        let pid = unsafe {
            libc::syscall(
                libc::SYS_clone3,
                &mut args as *mut CloneArgs,
                std::mem::size_of::<CloneArgs>(),
            )
        };
        match pid {
            0 => return Ok(Birth::Child { born: true }),
            pid if pid > 0 => {
                return Ok(Birth::Parent {
                    pid: pid as u32,
                    born: true,
                });
            }
            _ => {
                let error = io::Error::last_os_error();
                // No `clone3`, no `CLONE_INTO_CGROUP` or an older `clone_args`: for good.
                // Anything else (a cgroup that takes no process): this once, and the fork's
                // join below names it.
                if matches!(
                    error.raw_os_error(),
                    Some(libc::ENOSYS | libc::EINVAL | libc::E2BIG | libc::EPERM)
                ) {
                    CLONE3_REFUSED.store(true, Ordering::Relaxed);
                }
                log::debug!("clone3 into the worker's cgroup refused ({error}); forking");
            }
        }
    }
    // SAFETY: `fork` in a multi-threaded process: the child only makes system calls
    // (`in_child`) before `execve`.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Birth::Child { born: false }),
        pid => Ok(Birth::Parent {
            pid: pid as u32,
            born: false,
        }),
    }
}

/// The child: default signal handling, its streams, a process group of its own, its working
/// directory, the hook, then `execve`. A failed step writes its `errno` to the report pipe
/// and exits with 127.
///
/// # Safety
///
/// Only in the child of [`birth`], with `image` and `fds` made before it.
unsafe fn in_child(image: &Image, fds: &ChildFds, hook: &Hook, born: bool) -> ! {
    // SAFETY: system calls on descriptors and strings made before the birth.
    let error = unsafe { prepare_and_exec(image, fds, hook, born) };
    let errno = error.raw_os_error().unwrap_or(libc::EINVAL).to_ne_bytes();
    // SAFETY: a write of a local array, then the exit that runs no destructor or handler.
    unsafe {
        libc::write(fds.report, errno.as_ptr().cast(), errno.len());
        libc::_exit(127)
    }
}

/// The child's steps up to `execve`; the error of the one that failed.
///
/// # Safety
///
/// As [`in_child`].
unsafe fn prepare_and_exec(image: &Image, fds: &ChildFds, hook: &Hook, born: bool) -> io::Error {
    let step = |ok: bool| {
        if ok {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    let steps = || -> io::Result<()> {
        // SAFETY: each call takes integers, or pointers to locals and to strings made before
        // the birth; none allocates.
        unsafe {
            // As `Command`: no signal blocked, SIGPIPE back to its default (Rust's runtime
            // ignores it, and an ignored signal stays ignored across `execve`).
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            step(libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) == 0)?;
            step(libc::signal(libc::SIGPIPE, libc::SIG_DFL) != libc::SIG_ERR)?;
            step(libc::dup2(fds.stdin, 0) == 0)?;
            for (fd, target) in [(fds.stdout, 1), (fds.stderr, 2)] {
                if let Some(fd) = fd {
                    step(libc::dup2(fd, target) == target)?;
                }
            }
            step(libc::setpgid(0, 0) == 0)?;
            // Only its standard streams: none of this process's descriptors that lack
            // close-on-exec (a pipe whose EOF the application waits for, a make jobserver),
            // nor a sibling's bootstrap socket that ipc-channel accepted without it a moment
            // ago. Close-on-exec rather than closed: the report pipe stays open until `execve`.
            mark_close_on_exec_from(3);
            if let Some(cwd) = &image.cwd {
                step(libc::chdir(cwd.as_ptr()) == 0)?;
            }
        }
        hook(born)?;
        // SAFETY: null-terminated arrays of pointers to live C strings.
        unsafe {
            libc::execve(
                image.program.as_ptr(),
                image.argv.as_ptr(),
                image.envp.as_ptr(),
            );
        }
        Err(io::Error::last_os_error())
    };
    match steps() {
        Ok(()) => io::Error::from_raw_os_error(libc::EINVAL),
        Err(e) => e,
    }
}

/// Descriptors above this are not examined on kernels without `close_range` (before Linux 5.11),
/// where each descriptor takes a system call.
const FALLBACK_FD_LIMIT: u64 = 65_536;

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

/// Reads the child's report: `None` when the pipe closed empty (`execve` closed it), else the
/// `errno` of the step that failed.
fn read_report(report: &OwnedFd) -> io::Result<Option<i32>> {
    let mut errno = [0u8; 4];
    let mut got = 0;
    while got < errno.len() {
        // SAFETY: reads into the unfilled part of a local array.
        let n = unsafe {
            libc::read(
                report.as_raw_fd(),
                errno[got..].as_mut_ptr().cast(),
                errno.len() - got,
            )
        };
        match n {
            0 => break,
            n if n > 0 => got += n as usize,
            _ => match io::Error::last_os_error() {
                e if e.kind() == io::ErrorKind::Interrupted => {}
                e => return Err(e),
            },
        }
    }
    Ok(match got {
        0 => None,
        4 => Some(i32::from_ne_bytes(errno)),
        _ => Some(libc::EIO),
    })
}

/// Opens the cgroup-v2 folder `dir` for [`Launch::cgroup`].
///
/// # Errors
///
/// The folder cannot be opened.
pub(crate) fn open_cgroup(dir: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    Ok(std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY)
        .open(dir)?
        .into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn echo(args: &[&str], hook: Hook) -> Launch {
        Launch {
            program: "/bin/sh".into(),
            args: ["-c"].iter().chain(args).map(OsString::from).collect(),
            env: vec![("GREETING".into(), "hello".into())],
            cwd: Some("/".into()),
            stdout: Stream::Pipe,
            stderr: Stream::Null,
            cgroup: None,
            hook,
        }
    }

    /// What the child wrote to its stdout; it exited successfully.
    fn printed(launched: Launched) -> String {
        let mut out = String::new();
        std::fs::File::from(launched.stdout.unwrap())
            .read_to_string(&mut out)
            .unwrap();
        let mut child = launched.child;
        assert!(child.wait().unwrap().success(), "{out}");
        out
    }

    /// A worker's cgroups with a v2 one to be born in; `None` (said) where there is none here.
    fn v2_cgroups() -> Option<crate::containment::WorkerCgroups> {
        let bases = crate::containment::bases();
        let Some(cgroups) = crate::containment::WorkerCgroups::create(bases, None).unwrap() else {
            println!("no cgroup can be made here: nothing to check");
            return None;
        };
        if cgroups.birth_dir().is_none() {
            println!("no cgroup-v2 folder here: workers fork and join");
            return None;
        }
        Some(cgroups)
    }

    #[test]
    fn a_child_gets_its_environment_folder_and_streams_only() {
        let out = printed(
            launch(echo(
                &["echo $GREETING $PWD; ls /proc/self/fd | wc -l; echo $HOME"],
                Box::new(|_| Ok(())),
            ))
            .unwrap(),
        );
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "hello /");
        // 0, 1, 2 and the descriptor `ls` reads /proc/self/fd through: nothing of this
        // process's leaks without close-on-exec.
        assert_eq!(lines[1].trim(), "4", "{out}");
        assert_eq!(lines[2], "", "only the given environment");
    }

    #[test]
    fn a_failed_step_is_the_spawns_error_and_the_child_is_reaped() {
        let error = launch(echo(
            &["exit 0"],
            Box::new(|_| Err(io::Error::from_raw_os_error(libc::EACCES))),
        ))
        .unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::EACCES));
        let mut missing = echo(&[], Box::new(|_| Ok(())));
        missing.program = "/nonexistent/worker".into();
        let error = launch(missing).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
    }

    /// Held by the tests that read or turn the process's `clone3` switch.
    static SWITCH: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn a_child_is_born_in_its_cgroup_without_joining_it() {
        let _switch = SWITCH
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(cgroups) = v2_cgroups() else {
            return;
        };
        let dir = cgroups.birth_dir().unwrap();
        let mut spec = echo(&["cat /proc/self/cgroup"], Box::new(|_| Ok(())));
        spec.cgroup = Some(open_cgroup(dir).unwrap());
        let out = printed(launch(spec).unwrap());
        // The hook joined nothing: the child (and `cat`, its child) is in the cgroup only if it
        // was born there, unless `clone3` is refused here (then it forked, outside).
        let name = dir.file_name().unwrap().to_str().unwrap();
        let v2_line = out
            .lines()
            .find(|l| l.starts_with("0::"))
            .unwrap_or_default();
        assert!(
            v2_line.ends_with(name) || CLONE3_REFUSED.load(Ordering::Relaxed),
            "{out}"
        );
    }

    #[test]
    fn where_clone3_is_refused_the_child_is_forked_and_joins_by_itself() {
        let _switch = SWITCH
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(cgroups) = v2_cgroups() else {
            return;
        };
        let dir = cgroups.birth_dir().unwrap();
        let procs = CString::new(dir.join("cgroup.procs").as_os_str().as_bytes()).unwrap();
        // What a seccomp profile answering ENOSYS, or a kernel before 5.7, leaves.
        let was = CLONE3_REFUSED.swap(true, Ordering::Relaxed);
        let mut spec = echo(
            &["cat /proc/self/cgroup"],
            Box::new(move |born| {
                // Told it was forked, it joins; told otherwise, it fails the spawn.
                if born {
                    return Err(io::Error::from_raw_os_error(libc::EEXIST));
                }
                crate::sandbox::write_file(&procs, b"0")
            }),
        );
        spec.cgroup = Some(open_cgroup(dir).unwrap());
        let launched = launch(spec);
        CLONE3_REFUSED.store(was, Ordering::Relaxed);
        let out = printed(launched.unwrap());
        let name = dir.file_name().unwrap().to_str().unwrap();
        assert!(
            out.lines()
                .any(|l| l.starts_with("0::") && l.ends_with(name)),
            "{out}"
        );
    }

    #[test]
    fn the_exit_status_is_kept_once_reaped() {
        let mut child = launch(echo(&["exit 3"], Box::new(|_| Ok(()))))
            .unwrap()
            .child;
        assert_eq!(child.wait().unwrap().code(), Some(3));
        assert_eq!(child.try_wait().unwrap().and_then(|s| s.code()), Some(3));
    }
}
