//! Catching a program that was started as a worker but never reached the worker entry point.
//!
//! The default worker is the current executable, which must call
//! `tunebox_worker::run_if_worker` first thing in `main`. A program that forgets runs its own
//! `main` in every worker; if that builds a pool, each worker starts workers of its own, and so
//! on. Two guards make that impossible, both keyed on [`WORKER_SERVER_ENV`] being set (we were
//! started as a worker) while `tunebox_protocol::worker_entry_reached()` is false:
//!
//! - [`refuse_to_spawn_if_forgotten`], called before every worker is started, prints one line
//!   naming the fix and `_exit`s with [`EXIT_NO_WORKER_ENTRY`];
//! - a life-before-main hook registers an `atexit` handler that does the same when such a
//!   program exits without ever starting a worker.
//!
//! The parent turns that exit code, before the handshake, into `ProcessError::NoWorkerEntry`.

use tunebox_protocol::{EXIT_NO_WORKER_ENTRY, WORKER_SERVER_ENV, worker_entry_reached};

use crate::error::no_worker_entry_line;

/// `WORKER_SERVER_ENV` as a C string, for `getenv` before `main`.
const WORKER_SERVER_ENV_C: &std::ffi::CStr = c"TUNEBOX_WORKER_SERVER";

/// Whether this process was started as a worker (the parent's bootstrap server is named in its
/// environment) and has not reached the worker entry point.
fn forgotten() -> bool {
    std::env::var_os(WORKER_SERVER_ENV).is_some() && !worker_entry_reached()
}

/// Prints the fix to stderr and ends the process at once with [`EXIT_NO_WORKER_ENTRY`],
/// running no destructor and no `atexit` handler.
fn die() -> ! {
    let line = no_worker_entry_line();
    // SAFETY: `write` reads `line.len()` bytes from a live buffer; `_exit` ends the process
    // without running anything of ours. A short or failed write only shortens the message.
    unsafe {
        libc::write(libc::STDERR_FILENO, line.as_ptr().cast(), line.len());
        libc::_exit(EXIT_NO_WORKER_ENTRY)
    }
}

/// Called before a worker is started: a process that was itself started as a worker but never
/// reached the worker entry point must not start workers (each would do the same, recursively).
/// It prints the fix and exits with [`EXIT_NO_WORKER_ENTRY`], which its parent reports as
/// `ProcessError::NoWorkerEntry`.
///
/// A worker that did reach the entry point (a backend that starts workers of its own) is let
/// through: its workers get a bootstrap server of their own.
pub(crate) fn refuse_to_spawn_if_forgotten() {
    if forgotten() {
        die();
    }
}

/// The `atexit` handler registered in a process started as a worker: it runs when the program
/// calls `exit` or returns from `main`. A worker that reached the entry point (`run_if_worker`
/// exits through here too) is let through.
extern "C" fn at_exit() {
    if !worker_entry_reached() {
        die();
    }
}

/// Runs before `main` (see [`INIT`]): in a process started as a worker, registers [`at_exit`].
extern "C" fn before_main() {
    // `std::env` is not used before `main`; libc's `getenv` reads the environment the loader
    // set up, which is complete by the time `.init_array` functions run.
    // SAFETY: `getenv` with a NUL-terminated name; nothing modifies the environment yet.
    let set = unsafe { !libc::getenv(WORKER_SERVER_ENV_C.as_ptr()).is_null() };
    if set {
        // SAFETY: `at_exit` is an `extern "C" fn()` that lives as long as the program. A
        // failure to register (out of memory) only loses this check.
        unsafe {
            libc::atexit(at_exit);
        }
    }
}

/// A life-before-main hook: the dynamic loader (or the static startup code) calls every function
/// pointer in `.init_array` before `main`.
///
/// SAFETY (of the `unsafe` attribute): placing a pointer to an `extern "C" fn()` in
/// `.init_array` is what the ELF ABI expects there; `before_main` takes no argument, touches no
/// Rust runtime state (only libc's `getenv` and `atexit`), cannot panic, and runs once. `#[used]`
/// keeps the static, and with it the hook, in every binary that links this crate.
#[cfg(target_os = "linux")]
#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = before_main;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_c_name_is_the_protocol_s() {
        assert_eq!(WORKER_SERVER_ENV_C.to_str().unwrap(), WORKER_SERVER_ENV);
    }
}
