//! Where the workers' stdout goes: not to the terminal (it would mix with the table on
//! tunebox's own stdout), not nowhere. Every worker of a run appends it to one log file of
//! this process, `<cache root>/logs/worker-stdout-<pid>.log` (the cache root is the kernel
//! cache's: `$TUNEBOX_CACHE_DIR`, else `$XDG_CACHE_HOME/tunebox`, else `~/.cache/tunebox`; the
//! folder is private, mode 0700), and a run whose choices printed anything says so in a note
//! naming the file. A run that printed nothing leaves no file. Once the file holds
//! [`tunebox_process::FILE_OUTPUT_LIMIT`] (1 GiB), workers started after that write to
//! `/dev/null`, and the note says so.
//!
//! With one worker (the default) the file holds the choices' output in the order they ran;
//! with several, their lines interleave. C's stdio buffers a file fully: what a kernel
//! `printf`s without `fflush(stdout)` reaches the file when its worker exits.

use std::fs::{DirBuilder, OpenOptions};
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;

use tunebox_process::Output;

/// This process's log file of the workers' stdout.
fn path() -> Option<PathBuf> {
    let root = tunebox_protocol::cache_root(|name| std::env::var_os(name))?;
    Some(
        root.join("logs")
            .join(format!("worker-stdout-{}.log", std::process::id())),
    )
}

/// Where workers' stdout goes: appended to the log file, or, when it cannot be created,
/// captured into a small ring buffer as before (and then lost).
pub(crate) fn output() -> Output {
    let Some(path) = path() else {
        return Output::Capture { tail_bytes: 4096 };
    };
    let created = path.parent().is_some_and(|dir| {
        DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .is_ok()
    }) && OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .is_ok();
    if created {
        Output::File(path)
    } else {
        Output::Capture { tail_bytes: 4096 }
    }
}

/// The log's length when a run started, to tell what the run's workers wrote.
#[derive(Debug)]
pub(crate) struct Watch {
    before: u64,
}

impl Watch {
    /// Notes the log's length now (0 when there is none yet).
    pub(crate) fn start() -> Watch {
        Watch {
            before: length().unwrap_or(0),
        }
    }

    /// A note naming the log when the run's workers wrote to it; an empty log is removed.
    pub(crate) fn note(self) -> Option<String> {
        let path = path()?;
        let after = length()?;
        if after == 0 {
            let _ = std::fs::remove_file(&path);
            return None;
        }
        let written = after.saturating_sub(self.before);
        let full = if after >= tunebox_process::FILE_OUTPUT_LIMIT {
            "; it reached its limit, and workers started after that wrote to /dev/null"
        } else {
            ""
        };
        (written > 0).then(|| {
            format!(
                "choices wrote {written} bytes on stdout; the workers' stdout is kept out of the \
                 table, in {} (appended to, one file per tunebox process){full}",
                path.display()
            )
        })
    }
}

fn length() -> Option<u64> {
    std::fs::metadata(path()?).ok().map(|m| m.len())
}
