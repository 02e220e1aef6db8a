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
//!
//! The child is born in this process's memory where its steps allow it ([`shared_memory`]):
//! a `fork` copies the page tables, which costs in proportion to what this process maps and
//! blocks its other threads meanwhile.

mod child;
mod copy;
mod shared_memory;

pub(crate) use child::Hook;
use child::{ChildFds, Image, in_child};
use copy::{Birth, CLONE3_REFUSED, birth};

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::atomic::Ordering;

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
    /// Whether `hook` may run in a child that shares this process's memory until its
    /// `execve` ([`shared_memory`]): it changes nothing that belongs to the memory map rather
    /// than the process (`PR_SET_MDWE`; `unshare` of a user namespace, which the kernel
    /// refuses to a process sharing its memory).
    pub(crate) may_share_memory: bool,
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
    let image = Image::new(
        &launch.program,
        &launch.args,
        &launch.env,
        launch.cwd.as_deref(),
    )?;
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
    let (pid, born) = if shares_memory(&launch) {
        shared_memory::birth(&image, &fds, &launch.hook, launch.cgroup.as_ref())?
    } else {
        match birth(launch.cgroup.as_ref())? {
            Birth::Child { born } => {
                // SAFETY: this is the new child; `in_child` only makes system calls on what
                // was made above, and never returns.
                unsafe { in_child(&image, &fds, &launch.hook, born) }
            }
            Birth::Parent { pid, born } => (pid, born),
        }
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

/// Whether `launch`'s child is born in this process's memory: where its hook allows, unless it
/// is to be born in a cgroup on a machine where only a copy can be (the birth in shared memory
/// and a cgroup is written for x86_64; elsewhere joining the cgroup costs an RCU grace
/// period, ~11 ms, more than copying a small process's page tables).
fn shares_memory(launch: &Launch) -> bool {
    launch.may_share_memory
        && (cfg!(target_arch = "x86_64")
            || launch.cgroup.is_none()
            || CLONE3_REFUSED.load(Ordering::Relaxed))
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
    use std::ffi::CString;
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;

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
            may_share_memory: true,
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

    /// [`SWITCH`] held, and a worker's cgroups with a v2 one to be born in ([`v2_cgroups`]).
    fn switch_and_cgroups() -> Option<(
        std::sync::MutexGuard<'static, ()>,
        crate::containment::WorkerCgroups,
    )> {
        let switch = SWITCH
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Some((switch, v2_cgroups()?))
    }

    #[test]
    fn a_child_is_born_in_its_cgroup_without_joining_it() {
        let Some((_switch, cgroups)) = switch_and_cgroups() else {
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
        let Some((_switch, cgroups)) = switch_and_cgroups() else {
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

    /// This thread's minor page faults so far.
    fn minor_faults() -> i64 {
        // SAFETY: `getrusage` fills a local.
        unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, &mut usage), 0);
            usage.ru_minflt
        }
    }

    /// The page faults of writing every page of 64 MiB this thread wrote before a spawn of
    /// `spec` (the child has exited by then).
    fn faults_writing_after(spec: Launch) -> i64 {
        let mut pages = vec![1u8; 64 << 20];
        let mut child = launch(spec).unwrap().child;
        assert!(child.wait().unwrap().success());
        let before = minor_faults();
        for byte in pages.iter_mut().step_by(4096) {
            *byte = 2;
        }
        std::hint::black_box(&pages);
        minor_faults() - before
    }

    /// Born in this process's memory, the child copies none of it: after a fork every private
    /// page of this process is write-protected until the child's `execve`, and its next write
    /// faults (once per page, or per huge page), which is also why a fork's cost grows with
    /// what this process maps.
    #[test]
    fn a_child_born_in_shared_memory_copies_nothing_of_this_process() {
        let shared = faults_writing_after(echo(&["exit 0"], Box::new(|_| Ok(()))));
        let mut forked = echo(&["exit 0"], Box::new(|_| Ok(())));
        forked.may_share_memory = false;
        let forked = faults_writing_after(forked);
        // 64 MiB: 16384 pages of 4 KiB, or 32 huge pages.
        assert!(
            forked >= 32,
            "the fork left {forked} faults: the check sees nothing"
        );
        assert!(shared < 8, "born in shared memory, yet {shared} faults");
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
