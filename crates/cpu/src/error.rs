//! Why a C kernel could not be compiled, and how that becomes a [`BenchError`].

use std::error::Error;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tunebox_protocol::BenchError;

/// Why [`compile`](crate::compile()) (or finding the cache directory) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CpuError {
    /// The kernel's source text is empty (or only whitespace).
    #[error("C kernel `{source_name}` has an empty source")]
    EmptySource {
        /// The kernel's `source_name`.
        source_name: String,
    },
    /// The kernel names no entry function.
    #[error(
        "C kernel `{source_name}` has an empty entry; set it to the name of the function to call"
    )]
    EmptyEntry {
        /// The kernel's `source_name`.
        source_name: String,
    },
    /// The entry is not a C identifier.
    #[error(
        "entry `{entry}` of C kernel `{source_name}` is not a C identifier (ASCII letters, digits \
         and `_`, not starting with a digit)"
    )]
    InvalidEntry {
        /// The kernel's `source_name`.
        source_name: String,
        /// The entry as given.
        entry: String,
    },
    /// A define's name is not a C identifier.
    #[error(
        "define `{name}` of C kernel `{source_name}` is not a C identifier (ASCII letters, digits \
         and `_`, not starting with a digit)"
    )]
    InvalidDefine {
        /// The kernel's `source_name`.
        source_name: String,
        /// The define's name as given.
        name: String,
    },
    /// The request's argument order does not name each tensor and scalar exactly once
    /// ([`Signature::args`](crate::Signature::args)).
    #[error("the arguments of C kernel `{source_name}`: {detail}")]
    InvalidArguments {
        /// The kernel's `source_name`.
        source_name: String,
        /// What is wrong with the order.
        detail: String,
    },
    /// The compiler could not be found (or the kernel names none).
    #[error("{}", compiler_not_found(compiler))]
    CompilerNotFound {
        /// The compiler as named by the kernel.
        compiler: String,
    },
    /// The compiler exists but could not be started (permissions, resource limits, …).
    #[error("could not run the C compiler `{compiler}`")]
    CompilerSpawn {
        /// The compiler as named by the kernel.
        compiler: String,
        /// Why it could not be started.
        source: io::Error,
    },
    /// The compiler ran and rejected the kernel.
    #[error("compilation failed: `{command}`\n{log}")]
    Compile {
        /// The command line that was run, shell-quoted.
        command: String,
        /// The compiler's stderr then stdout (bounded; user diagnostics cite `source_name`).
        log: String,
        /// The files the compiler read before it gave up, from its dependency list (gcc and
        /// clang write one for errors after preprocessing); empty when it wrote none (a missing
        /// header stops them before). A caller that keeps the failure (tunebox's results
        /// cache) can tell from them whether a retry would fail the same way.
        dependencies: Vec<std::path::PathBuf>,
    },
    /// The compiler (or its `--version` probe) ran past the deadline of
    /// [`CompileControl::timeout`](crate::CompileControl::timeout) and was killed, with
    /// everything it started in its process group.
    #[error(
        "the C compiler did not finish within {} and was killed: `{command}`\nits last \
         output:\n{log}",
        seconds(*after)
    )]
    CompileTimeout {
        /// The command line that was run, shell-quoted.
        command: String,
        /// The deadline it ran past (the timeout it was given).
        after: Duration,
        /// The end of what the compiler printed, stderr then stdout (at most 4 KiB of each), or
        /// a note that it printed nothing.
        log: String,
    },
    /// [`CompileControl::cancel`](crate::CompileControl::cancel) asked to stop: the compiler
    /// was killed (or never started).
    #[error("compilation cancelled: `{command}`")]
    CompileCancelled {
        /// The command line that was (or would have been) run, shell-quoted.
        command: String,
    },
    /// A compile in the background ([`CompileControl::background`](crate::CompileControl::background))
    /// waited for a CPU and got almost none for `after`: the machine is busy with work of
    /// normal priority. The compiler was killed; compile it again in the foreground.
    #[error(
        "compilation starved in the background for {after:?} (the machine is busy): `{command}`"
    )]
    CompileStarved {
        /// The command line that was run, shell-quoted.
        command: String,
        /// How long it got almost no CPU.
        after: Duration,
    },
    /// The compiler succeeded but wrote no dependency list for `-MD -MF`, so the headers the kernel
    /// includes could not be tracked in the cache.
    #[error(
        "C compiler `{compiler}` wrote no dependency list to `{}`; tunebox passes `-MD -MF <file>` \
         (as gcc and clang understand it) to notice edited headers, so use such a compiler",
        path.display()
    )]
    NoDependencies {
        /// The compiler as named by the kernel.
        compiler: String,
        /// The file it was asked to write.
        path: PathBuf,
    },
    /// A file the kernel includes changed while it was being compiled, on every attempt, so no
    /// object built from known contents could be cached.
    #[error(
        "`{}`, included by C kernel `{source_name}`, changed while the kernel was being compiled; \
         compile again once it has stopped changing",
        path.display()
    )]
    DependencyChanged {
        /// The kernel's `source_name`.
        source_name: String,
        /// The file that changed.
        path: PathBuf,
    },
    /// None of `TUNEBOX_CACHE_DIR`, `XDG_CACHE_HOME` and `HOME` is set.
    #[error(
        "no cache directory for compiled kernels: set TUNEBOX_CACHE_DIR (or XDG_CACHE_HOME or HOME)"
    )]
    NoCacheDir,
    /// The cache directory could not be created.
    #[error(
        "could not create the kernel cache directory `{}`; set TUNEBOX_CACHE_DIR to a writable \
         directory",
        path.display()
    )]
    CacheDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// Another I/O operation failed: in the cache directory, or reading a file the kernel includes
    /// after compiling it. The message names what was being done and the path; the OS's reason is
    /// the [`source`](Error::source).
    #[error("could not {action} `{}`", path.display())]
    Io {
        /// What was being done, worded to precede the path, e.g. "write the kernel source to".
        action: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
}

impl From<CpuError> for BenchError {
    /// Maps a compile error onto the wire: a rejected kernel is [`BenchError::Compile`], and so is
    /// a compiler killed at its deadline (its log says so and holds the compiler's last output),
    /// a bad kernel description [`BenchError::InvalidRequest`], a missing or unusable compiler
    /// [`BenchError::Compile`] naming it, and a cancelled compile and cache I/O
    /// [`BenchError::Failed`].
    fn from(err: CpuError) -> Self {
        let message = with_sources(&err);
        match err {
            CpuError::Compile { command, log, .. } => BenchError::Compile { command, log },
            CpuError::CompileTimeout {
                command,
                after,
                log,
            } => BenchError::Compile {
                command,
                log: format!(
                    "timed out after {} and was killed; its last output:\n{log}",
                    seconds(after)
                ),
            },
            CpuError::EmptySource { .. }
            | CpuError::EmptyEntry { .. }
            | CpuError::InvalidEntry { .. }
            | CpuError::InvalidDefine { .. }
            | CpuError::InvalidArguments { .. } => BenchError::InvalidRequest { detail: message },
            CpuError::CompilerNotFound { compiler }
            | CpuError::CompilerSpawn { compiler, .. }
            | CpuError::NoDependencies { compiler, .. } => BenchError::Compile {
                command: compiler,
                log: message,
            },
            CpuError::CompileCancelled { .. }
            | CpuError::CompileStarved { .. }
            | CpuError::DependencyChanged { .. }
            | CpuError::NoCacheDir
            | CpuError::CacheDir { .. }
            | CpuError::Io { .. } => BenchError::Failed { message },
        }
    }
}

/// The message of [`CpuError::CompilerNotFound`]: a bare name was looked up on PATH, a path was
/// not, and an empty name names nothing.
fn compiler_not_found(compiler: &str) -> String {
    const REMEDY: &str = "with CC or the manifest's `kernel.compiler` (e.g. gcc or /usr/bin/clang)";
    if compiler.trim().is_empty() {
        return format!("no C compiler is named; name one {REMEDY}");
    }
    let on_path = if Path::new(compiler).components().count() > 1 {
        ""
    } else {
        " on PATH"
    };
    format!("C compiler `{compiler}` was not found{on_path}; install it, or name another {REMEDY}")
}

/// `duration` in seconds as people write them: `120 s`, `1.5 s`, `0.25 s`.
pub(crate) fn seconds(duration: Duration) -> String {
    format!("{} s", duration.as_secs_f64())
}

/// `err`'s message followed by those of its sources, joined by `: ` (for the wire, where only a
/// string travels; libloading, for one, keeps `dlerror()`'s text in the source).
pub(crate) fn with_sources(err: &dyn Error) -> String {
    let mut message = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// An [`CpuError::Io`] maker: `action` on `path` failed.
pub(crate) fn io_err(
    action: &'static str,
    path: &Path,
) -> impl FnOnce(io::Error) -> CpuError + use<> {
    let path = path.to_path_buf();
    move |source| CpuError::Io {
        action,
        path,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_causes_reach_the_wire_message() {
        let err = CpuError::Io {
            action: "write the kernel source to",
            path: "/cache/x.c".into(),
            source: io::Error::new(io::ErrorKind::StorageFull, "disk full"),
        };
        let BenchError::Failed { message } = BenchError::from(err) else {
            panic!("expected Failed");
        };
        assert_eq!(
            message,
            "could not write the kernel source to `/cache/x.c`: disk full"
        );
    }

    #[test]
    fn missing_compiler_names_it_and_both_ways_to_choose_another() {
        let message = |compiler: &str| {
            CpuError::CompilerNotFound {
                compiler: compiler.into(),
            }
            .to_string()
        };
        assert_eq!(
            message("nocc"),
            "C compiler `nocc` was not found on PATH; install it, or name another with CC or \
             the manifest's `kernel.compiler` (e.g. gcc or /usr/bin/clang)"
        );
        assert!(
            message("/opt/x/cc").starts_with("C compiler `/opt/x/cc` was not found; install it"),
            "{}",
            message("/opt/x/cc")
        );
        assert!(
            message("").starts_with("no C compiler is named; name one with CC or"),
            "{}",
            message("")
        );
        let err = BenchError::from(CpuError::CompilerNotFound {
            compiler: "nocc".into(),
        });
        let text = err.to_string();
        assert!(text.contains("`nocc`") && text.contains("CC"), "{text}");
    }

    #[test]
    fn cache_dir_message_says_what_to_do_and_keeps_the_cause_in_source() {
        let err = CpuError::CacheDir {
            path: "/ro/tunebox/cpu".into(),
            source: io::Error::new(io::ErrorKind::PermissionDenied, "permission denied"),
        };
        assert_eq!(
            err.to_string(),
            "could not create the kernel cache directory `/ro/tunebox/cpu`; set \
             TUNEBOX_CACHE_DIR to a writable directory"
        );
        assert_eq!(err.source().unwrap().to_string(), "permission denied");
        assert_eq!(
            with_sources(&err),
            "could not create the kernel cache directory `/ro/tunebox/cpu`; set \
             TUNEBOX_CACHE_DIR to a writable directory: permission denied"
        );
    }
}
