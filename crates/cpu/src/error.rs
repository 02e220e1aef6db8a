//! Why a C kernel could not be compiled, and how that becomes a [`BenchError`].

use std::error::Error;
use std::io;
use std::path::PathBuf;

use tunebox_protocol::BenchError;

/// Why [`compile`](crate::compile) (or finding the cache directory) failed.
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
    /// The compiler could not be found (or the kernel names none).
    #[error(
        "C compiler `{compiler}` was not found; install a C compiler, or set CC to one that is on \
         PATH (e.g. CC=gcc or CC=/usr/bin/clang)"
    )]
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
    },
    /// None of `TUNEBOX_CACHE_DIR`, `XDG_CACHE_HOME` and `HOME` is set.
    #[error(
        "no cache directory for compiled kernels: set TUNEBOX_CACHE_DIR (or XDG_CACHE_HOME or HOME)"
    )]
    NoCacheDir,
    /// The cache directory could not be created.
    #[error("could not create the kernel cache directory `{}`", path.display())]
    CacheDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// Another I/O operation in the cache directory failed.
    #[error("could not {action} `{}`", path.display())]
    Io {
        /// What was being done, e.g. "write the kernel source to".
        action: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
}

impl From<CpuError> for BenchError {
    /// Maps a compile error onto the wire: a rejected kernel is [`BenchError::Compile`], a bad
    /// kernel description [`BenchError::InvalidRequest`], a missing or unusable compiler
    /// [`BenchError::Compile`] naming it, and cache I/O [`BenchError::Failed`].
    fn from(err: CpuError) -> Self {
        let message = with_sources(&err);
        match err {
            CpuError::Compile { command, log } => BenchError::Compile { command, log },
            CpuError::EmptySource { .. }
            | CpuError::EmptyEntry { .. }
            | CpuError::InvalidEntry { .. }
            | CpuError::InvalidDefine { .. } => BenchError::InvalidRequest { detail: message },
            CpuError::CompilerNotFound { compiler } | CpuError::CompilerSpawn { compiler, .. } => {
                BenchError::Compile {
                    command: compiler,
                    log: message,
                }
            }
            CpuError::NoCacheDir | CpuError::CacheDir { .. } | CpuError::Io { .. } => {
                BenchError::Failed { message }
            }
        }
    }
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
    fn missing_compiler_names_it_and_cc() {
        let err = BenchError::from(CpuError::CompilerNotFound {
            compiler: "nocc".into(),
        });
        let text = err.to_string();
        assert!(text.contains("`nocc`") && text.contains("CC"), "{text}");
    }
}
