//! Catching panics of ipc-channel's receive path without printing them.
//!
//! ipc-channel asserts on malformed input (a partial fragment, a fragmented message without its
//! side channel). A worker's kernel can write such bytes into its channel, and the parent must
//! turn that into an error for that worker, not a crash or a panic message that looks like a
//! tunebox bug.

use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

thread_local! {
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`, returning the panic message if it panicked. While `f` runs, panics on this thread
/// are not printed; the process's panic hook (installed once, wrapping the previous one) prints
/// every other panic as before.
pub(crate) fn catch_quietly<R>(f: impl FnOnce() -> R) -> Result<R, String> {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info);
            }
        }));
    });
    let was_quiet = QUIET.with(|q| q.replace(true));
    let result = panic::catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was_quiet));
    result.map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catches_and_returns() {
        assert_eq!(catch_quietly(|| 7), Ok(7));
        let err = catch_quietly(|| -> u8 { panic!("bad fragment {}", 3) }).unwrap_err();
        assert_eq!(err, "bad fragment 3");
        assert!(!QUIET.with(Cell::get), "quiet mode ends with the call");
    }
}
