//! The idle threads of an OpenMP runtime, released when a task's calls are done.
//!
//! GNU OpenMP (libgomp) keeps the threads of a parallel region's team in a pool after the
//! region ends, for the next region to reuse. Two checks took them for work a task left
//! behind: the CPU backend's look for work still running after the last call (libgomp's
//! threads spin for a while before they sleep: a longer watch), and a reused worker's state
//! checks, where a task whose team was larger than any before it grew the pool and had the
//! worker replaced, so that the next window paid a fresh process (its inputs mapped again, its
//! outputs faulted in). With Kernel Tuner's `vector_add` (team sizes 1-32 in shuffled order)
//! that was one later window in four (docs/performance.md, "Issue 33, sixteenth session").
//!
//! OpenMP 5.0's `omp_pause_resource_all(omp_pause_hard)` ends the pool's threads: libgomp tells
//! each to exit and joins it before it returns, so that the next parallel region starts a team
//! of its own. It frees the pool only: the settings a task made (`omp_set_num_threads`,
//! `omp_set_schedule`, …) stay for the next. Only the pool of the calling thread, the one
//! that called the kernel, is released, and only once its threads are back in it: after a
//! kernel's call returned they are (a region ends at a barrier that waits for every thread), and
//! a pool thread a hostile kernel kept busy would hold the worker there until the parent's
//! timeout ends the task. A thread the kernel started itself stays, and the checks after this
//! see it as before. Only libgomp is asked (the runtime of `gcc -fopenmp`, and the one tested):
//! another runtime's threads still count as before.

use std::ffi::{CStr, c_int};
use std::time::{Duration, Instant};

/// The OpenMP runtimes whose pool is released, by soname.
const RUNTIMES: [&CStr; 1] = [c"libgomp.so.1"];

/// `omp_pause_hard` of `omp.h`'s `omp_pause_resource_t`.
const OMP_PAUSE_HARD: c_int = 2;

/// How long released threads may take to leave `/proc/self/task`: `pthread_join` returns once
/// a thread cleared its thread id, which it does before the kernel has removed it. Waited out
/// in full only where threads other than the pool's stay (a task's own: the checks after this
/// judge them), so it is generous for a loaded machine.
const GONE_WITHIN: Duration = Duration::from_millis(200);

/// Releases the idle threads of every OpenMP runtime already loaded in this process (libgomp;
/// none is loaded where no kernel built with `-fopenmp` ran), then waits until the threads of
/// this process are no more than `threads`, or at most 200 ms. Returns the runtimes released.
/// To be called on the thread that called the kernel, after its last call.
pub fn release_openmp_threads(threads: usize) -> usize {
    let released = RUNTIMES.iter().filter(|name| pause(name)).count();
    if released > 0 {
        let start = Instant::now();
        while crate::thread_count().is_some_and(|n| n > threads) && start.elapsed() < GONE_WITHIN {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    released
}

/// Calls `omp_pause_resource_all(omp_pause_hard)` of the runtime `name` if this process has it
/// loaded; whether it did and the runtime said it succeeded.
fn pause(name: &CStr) -> bool {
    // SAFETY: `name` is a NUL-terminated string; `RTLD_NOLOAD` only looks the library up among
    // those loaded (no code of a library not yet loaded runs) and counts a reference to it,
    // given back by `dlclose` below.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return false;
    }
    // SAFETY: `handle` is a live handle from `dlopen`; the symbol name is NUL-terminated.
    let symbol = unsafe { libc::dlsym(handle, c"omp_pause_resource_all".as_ptr()) };
    let paused = !symbol.is_null() && {
        // SAFETY: OpenMP 5.0 declares `int omp_pause_resource_all(omp_pause_resource_t kind)`,
        // an enum passed as an `int`; the library stays loaded while it is called (the handle
        // holds a reference).
        let pause_all: extern "C" fn(c_int) -> c_int = unsafe { std::mem::transmute(symbol) };
        pause_all(OMP_PAUSE_HARD) == 0
    };
    // SAFETY: gives back the reference `dlopen` counted; the library was loaded before it, so
    // it stays loaded.
    unsafe { libc::dlclose(handle) };
    paused
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_released_where_no_runtime_is_loaded() {
        // These tests never load libgomp.
        let threads = crate::thread_count().unwrap_or(0);
        assert_eq!(release_openmp_threads(threads), 0);
    }
}
