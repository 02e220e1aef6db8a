//! The OpenMP runtimes a kernel loaded: their idle threads ended, and GNU's started again.
//!
//! An OpenMP runtime keeps the threads of a parallel region's team after the region ends, for
//! the next region to reuse. Two things in a worker mistook them for work a kernel left:
//!
//! - **The look for work left running after the last call** (the CPU backend's): LLVM's
//!   `libomp` (what `clang -fopenmp` links) and Intel's `libiomp5` keep their idle threads
//!   spinning for `KMP_BLOCKTIME`, 200 ms by default, before they sleep, so every
//!   multi-threaded `clang -fopenmp` kernel was judged `suspicious` ("still runnable 131 ms
//!   after the kernel's call returned"), as was a `gcc -fopenmp` one run with
//!   `OMP_WAIT_POLICY=active`. GNU's `libgomp` spins for well under a millisecond by default.
//! - **A reused worker's state checks after a task**: a task whose team was larger than any
//!   before it grew the pool, and the new threads looked left running, so the worker was
//!   replaced (one window in four of Kernel Tuner's `vector_add`, docs/performance.md,
//!   "Issue 33, sixteenth session").
//!
//! [`end_openmp_pools`] ends the pools of every runtime this process has loaded, with OpenMP
//! 5.0's `omp_pause_resource_all(omp_pause_hard)`, which each of these runtimes answers by
//! telling its pool threads to exit and joining them before it returns. Only the threads of
//! the runtime's own pools go: a thread a kernel started itself stays, for the checks to judge.
//! The next parallel region starts the runtime's team again (the first call of a window, which
//! is not timed). [`start_gnu_openmp_pool`] starts libgomp's again at once, with an empty region
//! of its own, where the worker keeps it between tasks; the LLVM family's is left for the next
//! region to start, as its new threads would spin for `KMP_BLOCKTIME` beside whatever the
//! machine does next.
//!
//! libgomp ends the calling thread's pool, LLVM's family shuts the whole runtime down (it
//! starts again with the next region, its settings read from the environment afresh). Either
//! waits for the pool's threads to be back in it, which after a kernel's call returned they are
//! (a region ends at a barrier that waits for every thread), and for each to exit: a thread
//! that runs something of the kernel's as it exits (a thread-local destructor) holds the caller
//! in the pause, which the CPU backend times (past 50 ms it is work left running).

use std::ffi::{CStr, c_int, c_uint, c_void};

/// GNU's runtime (`gcc -fopenmp`), by soname.
const GNU: &CStr = c"libgomp.so.1";

/// The runtimes of LLVM's code base, by soname: LLVM's `libomp` (`clang -fopenmp`; unversioned
/// as some distributions and conda ship it) and Intel's `libiomp5` (`icx -qopenmp`).
const LLVM_FAMILY: [&CStr; 3] = [c"libomp.so.5", c"libomp.so", c"libiomp5.so"];

/// `omp_pause_hard` of `omp.h`'s `omp_pause_resource_t`.
const OMP_PAUSE_HARD: c_int = 2;

/// Which OpenMP runtimes' pools [`end_openmp_pools`] ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtimes {
    /// LLVM's family (`libomp`, `libiomp5`), whose idle threads spin for `KMP_BLOCKTIME`
    /// (200 ms by default) after every region.
    SpinningWhenIdle,
    /// Those and GNU's `libgomp`, whose idle threads spin for well under a millisecond unless
    /// told otherwise (`OMP_WAIT_POLICY=active`, `GOMP_SPINCOUNT`).
    All,
}

/// Which runtimes [`end_openmp_pools`] asked to end their pools.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EndedPools {
    /// GNU's `libgomp`.
    pub gnu: bool,
    /// One of LLVM's family (`libomp`, `libiomp5`).
    pub llvm: bool,
}

impl EndedPools {
    /// Whether any runtime's pool was ended.
    pub fn any(self) -> bool {
        self.gnu || self.llvm
    }
}

/// Ends the idle threads of the OpenMP runtimes of `which` this process has loaded (none where
/// no kernel built with OpenMP ran), each joined before this returns, though `/proc/self/task` may list
/// one for a moment longer (`pthread_join` returns once a thread cleared its id, before the
/// kernel has removed it). Says which runtimes were asked; one without
/// `omp_pause_resource_all` (an OpenMP runtime older than 5.0) is not counted. Call it on the thread that
/// called the kernel, after its last call, and only in a process of tunebox's own (a worker):
/// an embedding program's teams would be ended too.
pub fn end_openmp_pools(which: Runtimes) -> EndedPools {
    let mut opened = Opened::default();
    EndedPools {
        gnu: which == Runtimes::All && opened.with(GNU, pause),
        // Every loaded one is asked (no short cut).
        llvm: LLVM_FAMILY
            .iter()
            .fold(false, |any, name| opened.with(name, pause) | any),
    }
}

/// Starts libgomp's pool again with `threads` idle threads: one empty parallel region of
/// `threads + 1` (the calling thread leads it). Whether it ran (libgomp loaded, with
/// `GOMP_parallel`).
pub fn start_gnu_openmp_pool(threads: usize) -> bool {
    let Ok(team) = c_uint::try_from(threads + 1) else {
        return false;
    };
    Opened::default().with(GNU, |gomp| {
        // SAFETY: libgomp's `void GOMP_parallel(void (*fn)(void *), void *data, unsigned
        // num_threads, unsigned flags)` (GCC 4.9 on), what `#pragma omp parallel` calls: `fn`
        // runs on every thread of the team with `data`, and it returns once all have.
        let parallel: Option<
            extern "C" fn(extern "C" fn(*mut c_void), *mut c_void, c_uint, c_uint),
        > = unsafe { symbol(gomp, c"GOMP_parallel") };
        parallel
            .map(|parallel| parallel(nothing, std::ptr::null_mut(), team, 0))
            .is_some()
    })
}

/// `omp_pause_resource_all(omp_pause_hard)` of the runtime `handle`; whether it has the
/// function and it succeeded.
fn pause(handle: *mut c_void) -> bool {
    // SAFETY: OpenMP 5.0 declares `int omp_pause_resource_all(omp_pause_resource_t kind)`, an
    // enum passed as an `int`.
    let pause: Option<extern "C" fn(c_int) -> c_int> =
        unsafe { symbol(handle, c"omp_pause_resource_all") };
    pause.is_some_and(|pause| pause(OMP_PAUSE_HARD) == 0)
}

/// The work of the empty region [`start_gnu_openmp_pool`] runs.
extern "C" fn nothing(_: *mut c_void) {}

/// The handles of the loaded runtimes looked up so far, each given back when this drops.
#[derive(Default)]
struct Opened(Vec<*mut c_void>);

impl Opened {
    /// Runs `with` on a handle of the runtime `name` if this process has it loaded and `with`
    /// has not run on it yet under another name; `false` otherwise.
    fn with(&mut self, name: &CStr, with: impl FnOnce(*mut c_void) -> bool) -> bool {
        // SAFETY: `name` is NUL-terminated; `RTLD_NOLOAD` only looks the library up among
        // those loaded (no code of a library not yet loaded runs) and counts a reference to
        // it, given back on drop.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            return false;
        }
        // One library under two names gives the same handle.
        let again = self.0.contains(&handle);
        self.0.push(handle);
        !again && with(handle)
    }
}

impl Drop for Opened {
    fn drop(&mut self) {
        for &handle in &self.0 {
            // SAFETY: gives back the reference each `dlopen` counted; the library was loaded
            // before it (a kernel library's dependency, never unloaded), so it stays loaded.
            unsafe { libc::dlclose(handle) };
        }
    }
}

/// The function `name` of the library `handle` as `F`, if it has one.
///
/// # Safety
///
/// `handle` is a live `dlopen` handle, and `F` is a function pointer type matching the
/// symbol's C declaration.
unsafe fn symbol<F: Copy>(handle: *mut c_void, name: &CStr) -> Option<F> {
    // SAFETY: as the caller promises; the name is NUL-terminated.
    let address = unsafe { libc::dlsym(handle, name.as_ptr()) };
    // SAFETY: a non-null symbol of the declared type, by the caller's promise; `F` is a
    // function pointer, the size of an address.
    (!address.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&address) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_happens_where_no_openmp_runtime_is_loaded() {
        // The crate's own tests never load an OpenMP runtime (and run on threads of their
        // own, so the process's thread count is no measure here: the workspace's
        // `tests/kernels.rs` checks real pools in real workers).
        for which in [Runtimes::SpinningWhenIdle, Runtimes::All] {
            assert_eq!(end_openmp_pools(which), EndedPools::default());
            assert!(!end_openmp_pools(which).any());
        }
        assert!(!start_gnu_openmp_pool(3));
    }
}
