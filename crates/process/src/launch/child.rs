//! The child's side: what it runs between its birth and `execve`, on memory its parent made
//! before the birth.

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;

/// The child's steps between its birth and `execve`, given whether it was born in its cgroup
/// (then it must not join that one again). They run in a copy of a multi-threaded process, or
/// in its very memory (`Launch::may_share_memory`), so they may only make system calls on
/// memory made before the spawn: no allocation, no lock, no write but to their stack and
/// `errno`, no panic (its unwinding would run in the parent's memory), and no cancellation
/// point of glibc's (bare system calls: see `sandbox::write_file`).
pub(crate) type Hook = Box<dyn Fn(bool) -> io::Result<()> + Send + Sync>;

/// The program, its arguments and environment as C strings, and the pointer arrays `execve`
/// takes.
pub(super) struct Image {
    program: CString,
    cwd: Option<CString>,
    _strings: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
}

impl Image {
    /// `program` run with `args`, in `cwd` (`None`: this process's), with exactly `env`.
    pub(super) fn new(
        program: &OsStr,
        args: &[OsString],
        env: &[(OsString, OsString)],
        cwd: Option<&OsStr>,
    ) -> io::Result<Image> {
        let program = c_string(program)?;
        let cwd = cwd.map(c_string).transpose()?;
        let mut strings = vec![program.clone()];
        for arg in args {
            strings.push(c_string(arg)?);
        }
        let argc = strings.len();
        for (key, value) in env {
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
pub(super) struct ChildFds {
    pub(super) stdin: RawFd,
    pub(super) stdout: Option<RawFd>,
    pub(super) stderr: Option<RawFd>,
    pub(super) report: RawFd,
}

/// The child: default signal handling, its streams, a process group of its own, its working
/// directory, the hook, then `execve`. A failed step writes its `errno` to the report pipe
/// and exits with 127.
///
/// # Safety
///
/// Only in a child just born (in a copy of this process or in its memory), with `image` and
/// `fds` made before the birth.
pub(super) unsafe fn in_child(image: &Image, fds: &ChildFds, hook: &Hook, born: bool) -> ! {
    // SAFETY: system calls on descriptors and strings made before the birth.
    let error = unsafe { prepare_and_exec(image, fds, hook, born) };
    let errno = error.raw_os_error().unwrap_or(libc::EINVAL).to_ne_bytes();
    // SAFETY: a write of a local array, then the exit that runs no destructor or handler.
    unsafe {
        // A bare system call, as `sandbox::write_file`'s: glibc's `write` marks the calling
        // thread's cancellation state, which a child born in the parent's memory shares.
        libc::syscall(libc::SYS_write, fds.report, errno.as_ptr(), errno.len());
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
