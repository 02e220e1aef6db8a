//! The child born in this process's memory (`CLONE_VM | CLONE_VFORK`, as `posix_spawn` is):
//! nothing of this process's memory map is copied, so a spawn costs the same however much it
//! maps, and no other thread of it waits meanwhile.
//!
//! A `fork` (or a `clone3` without `CLONE_VM`) copies the page tables of every private mapping
//! while it holds the memory map's lock for writing: 1 ms for a process of 70 MiB, 16 ms for
//! 1 GiB, 57 ms for 4 GiB (a 2-vCPU KVM guest), and every page this process writes next faults
//! once (copy-on-write until the child's `execve`). A thread of this process that faults
//! a page or maps memory meanwhile (a pool sending a request, decoding a reply) is blocked, not
//! runnable: on a loaded machine a fork preempted in its copy held such threads for tens of
//! ms, time no scheduler statistic shows as a wait.
//!
//! The child runs on a stack of its own ([`ChildStack`]) while the calling thread is suspended
//! until its `execve` (or its exit): it may write nothing but that stack, which the steps of
//! `child::in_child` already keep to (system calls on memory made before the birth), and
//! steps that change the memory map itself (`PR_SET_MDWE`, a new user namespace) are not run in
//! it (`Launch::may_share_memory`). Signals are blocked across the birth and the
//! child resets every handler to the default before it unblocks them, so that no handler of
//! this process runs in its memory from another process.

use std::ffi::c_void;
use std::io;
use std::os::fd::OwnedFd;
#[cfg(target_arch = "x86_64")]
use std::{os::fd::AsRawFd, sync::atomic::Ordering};

use super::child::{ChildFds, Hook, Image};
#[cfg(target_arch = "x86_64")]
use super::copy::{CLONE_INTO_CGROUP, CLONE3_REFUSED, CloneArgs};

/// The child's stack: ample for its steps (the sandbox's, the hook's), most of it never
/// touched; the lowest page is a guard.
const STACK_BYTES: usize = 256 * 1024;

/// A stack for the child, unmapped when dropped (after the child's `execve` or exit: the
/// calling thread waits for either).
struct ChildStack {
    base: *mut c_void,
}

impl ChildStack {
    fn new() -> io::Result<ChildStack> {
        // SAFETY: a fresh private anonymous mapping, owned by the returned value.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                STACK_BYTES,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = ChildStack { base };
        // SAFETY: the mapping's first page, which nothing uses: an overflow faults there
        // instead of writing below the mapping.
        if unsafe { libc::mprotect(base, page_size(), libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// Its highest address (stacks grow down), 16-byte aligned as both ABIs want.
    fn top(&self) -> *mut c_void {
        self.base.wrapping_byte_add(STACK_BYTES)
    }
}

impl Drop for ChildStack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, which no child uses any more.
        unsafe { libc::munmap(self.base, STACK_BYTES) };
    }
}

fn page_size() -> usize {
    // SAFETY: `sysconf` takes an integer.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

/// What the child runs: `child::in_child` with these.
struct Start<'a> {
    image: &'a Image,
    fds: &'a ChildFds,
    hook: &'a Hook,
    born: bool,
}

/// The child's first function, on its own stack: default signal handlers, then the steps.
/// Only the entry of a child born by [`birth`], with `start` a [`Start`] on the suspended
/// caller's stack (safe in name only: `clone` takes a safe function).
extern "C" fn child_main(start: *mut c_void) -> libc::c_int {
    // SAFETY: `birth` passes a live `Start`; the caller waits until this child execs or exits.
    let start = unsafe { &*start.cast::<Start<'_>>() };
    default_handlers();
    // SAFETY: this is the new child; `in_child` makes only system calls on what the parent
    // made before the birth, and never returns.
    unsafe { super::child::in_child(start.image, start.fds, start.hook, start.born) }
}

/// Every signal this process handles back to its default in the child (which has its own copy
/// of the handler table: no `CLONE_SIGHAND`), so that none runs in the shared memory once the
/// child unblocks them; ignored ones stay ignored, as across `execve`. glibc refuses to change
/// its own two (cancellation, `setxid`), which it sends only by thread id to this process's
/// threads, never to the child.
fn default_handlers() {
    for signal in 1..=libc::SIGRTMAX() {
        // SAFETY: reads the disposition into a local; a number that is no signal, or one that
        // cannot be caught, fails and is skipped.
        unsafe {
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut old) != 0 {
                continue;
            }
            if old.sa_sigaction != libc::SIG_DFL && old.sa_sigaction != libc::SIG_IGN {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
    }
}

/// Every signal blocked on this thread until dropped (then its mask as before), glibc's own
/// two (cancellation, `setxid`) too, which `pthread_sigmask` leaves out: as `posix_spawn`,
/// with a bare `rt_sigprocmask` of a 64-signal set (x86_64, aarch64, riscv64). `None`: the
/// kernel refused that size (another architecture), and nothing was blocked.
struct Blocked(Option<u64>);

impl Blocked {
    fn all() -> Blocked {
        let mut before = 0u64;
        let set = sigprocmask(&u64::MAX, Some(&mut before));
        Blocked(set.then_some(before))
    }
}

impl Drop for Blocked {
    fn drop(&mut self) {
        if let Some(before) = &self.0 {
            sigprocmask(before, None);
        }
    }
}

/// `rt_sigprocmask(SIG_SETMASK, mask, before)` with a 64-signal set; whether it was set.
fn sigprocmask(mask: &u64, before: Option<&mut u64>) -> bool {
    let before = before.map_or(std::ptr::null_mut(), |b| b as *mut u64);
    // SAFETY: reads `mask` and fills `before` (or nothing), both 8 bytes, the size passed.
    let done = unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            mask as *const u64,
            before,
            std::mem::size_of::<u64>(),
        )
    };
    done == 0
}

/// Starts the child in this process's memory and runs `child::in_child` in it: born in
/// `cgroup` where that is possible here (`clone3`, written for x86_64 only: see
/// `launch::shares_memory`), else outside it (`clone`; then its hook joins). Returns its pid
/// and whether it was born in `cgroup`, once it has called `execve` or exited.
///
/// # Errors
///
/// The stack cannot be mapped; the kernel refused the birth (`EAGAIN`: too many processes).
pub(super) fn birth(
    image: &Image,
    fds: &ChildFds,
    hook: &Hook,
    cgroup: Option<&OwnedFd>,
) -> io::Result<(u32, bool)> {
    let stack = ChildStack::new()?;
    let _blocked = Blocked::all();
    let mut start = Start {
        image,
        fds,
        hook,
        born: true,
    };
    if let Some(pid) = born_in(cgroup, &stack, &mut start) {
        return Ok((pid, true));
    }
    start.born = false;
    let flags = libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD;
    // SAFETY: the child runs `child_main` on `stack`, which outlives it (this thread waits
    // until it execs or exits: `CLONE_VFORK`), with `start`, which lives as long.
    let pid = unsafe { libc::clone(child_main, stack.top(), flags, (&raw mut start).cast()) };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((pid as u32, false))
}

/// The child born in `cgroup` with `start` (`Some(pid)`), unless there is none, `clone3` into
/// it is refused (remembered: `CLONE3_REFUSED`) or this machine is not x86_64 (`None`: to be
/// born outside it).
#[cfg(target_arch = "x86_64")]
fn born_in(cgroup: Option<&OwnedFd>, stack: &ChildStack, start: &mut Start<'_>) -> Option<u32> {
    let cgroup = cgroup.filter(|_| !CLONE3_REFUSED.load(Ordering::Relaxed))?;
    clone3_in(cgroup, stack, start)
        .map_err(|error| super::copy::note_clone3_refusal(&error))
        .ok()
}

#[cfg(not(target_arch = "x86_64"))]
fn born_in(_: Option<&OwnedFd>, _: &ChildStack, _: &mut Start<'_>) -> Option<u32> {
    None
}

/// `clone3` with `CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP`: the child starts on `stack`
/// in `child_main(start)`. glibc has no such call, so the birth is written here: after the
/// system call the child never returns into compiled code (its stack pointer is not the one
/// the code was compiled for) but calls `child_main` at once.
#[cfg(target_arch = "x86_64")]
fn clone3_in(cgroup: &OwnedFd, stack: &ChildStack, start: &mut Start<'_>) -> io::Result<u32> {
    let mut args = CloneArgs {
        flags: (libc::CLONE_VM | libc::CLONE_VFORK) as u64 | CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        stack: stack.base as u64,
        stack_size: STACK_BYTES as u64,
        cgroup: cgroup.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    let entry: extern "C" fn(*mut c_void) -> libc::c_int = child_main;
    let arg: *mut c_void = (start as *mut Start<'_>).cast();
    let ret: i64;
    // SAFETY: `clone3` (x86_64: number in rax, arguments in rdi and rsi; it clobbers rcx and
    // r11). The parent gets the pid (or -errno) in rax and goes on as compiled. The child
    // (rax 0) is on `stack`, whose top the kernel put in rsp: it aligns it, passes `arg` and
    // calls `entry`, which never returns (it execs or exits); `ud2` stops it if it did. r12
    // and r13 survive the system call in both.
    unsafe {
        std::arch::asm!(
            "syscall",
            "test rax, rax",
            "jnz 2f",
            "xor ebp, ebp",
            "and rsp, -16",
            "mov rdi, r12",
            "call r13",
            "ud2",
            "2:",
            inlateout("rax") libc::SYS_clone3 => ret,
            in("rdi") &raw mut args,
            in("rsi") std::mem::size_of::<CloneArgs>(),
            in("r12") arg,
            in("r13") entry,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    match ret {
        pid if pid > 0 => Ok(pid as u32),
        errno => Err(io::Error::from_raw_os_error(-errno as i32)),
    }
}
