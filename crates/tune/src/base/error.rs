//! The crate's one error type.
//!
//! Inside, the engine builds its errors with `anyhow` (context chains such as
//! `invalid manifest m.toml` → `kernel.source: cannot read ./k.c` → `No such file or
//! directory`); at the public
//! boundary they become a [`TuneError`] whose variant says which stage failed, whose message is
//! the chain's outermost part, and whose [`source`](std::error::Error::source) is the rest
//! ([`Cause`]), down to the root cause (an `io::Error` stays one, for a caller to downcast).
//! `{:#}` prints the whole chain joined by `: `, word for word what `tunebox` prints after
//! `tunebox: error:`.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

/// What stopped a stage of a run. A choice that fails is never an error: it is a result with
/// its status (`compile_error`, `crashed`, `timeout`, …).
///
/// Each variant's `message` is the outermost part of what went wrong (e.g. `invalid manifest
/// m.toml`), its `source` the rest of the chain, if any (e.g. `kernel.source: cannot read
/// ./k.c`, then the `io::Error`): a cause is in one of the two, never both. An error with no
/// cause under it (a TOML syntax error, say) is all message. `{}` prints the message, `{:#}`
/// the message and every cause, joined by `: ` (as `anyhow` does), which says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TuneError {
    /// The manifest cannot be read or is invalid, or its restrictions leave no choice.
    Manifest {
        /// Where it is wrong (`invalid manifest m.toml`), or the whole story when it has no
        /// cause.
        message: String,
        /// What is wrong there.
        source: Option<Cause>,
    },
    /// The caller's options are unusable: an output path that would overwrite an input or lies
    /// in a missing directory, a shard that cannot be resolved, the cache and a report on one
    /// file, an unknown strategy.
    Options {
        /// Which option.
        message: String,
        /// Why it is unusable.
        source: Option<Cause>,
    },
    /// The run could not go on: no GPU for a CUDA manifest, workers that cannot start, a
    /// reference that does not compile or fails, an unusable kernel or results cache.
    Run {
        /// What failed.
        message: String,
        /// Why, and how to fix it.
        source: Option<Cause>,
    },
    /// A report or results cache cannot be read or written, or is not one.
    Report {
        /// Which file.
        message: String,
        /// Why.
        source: Option<Cause>,
    },
    /// Shards' results cannot be merged (different manifests or versions, overlaps, …).
    Merge {
        /// Which files.
        message: String,
        /// Why not.
        source: Option<Cause>,
    },
}

/// A `Result` with this crate's [`TuneError`].
pub type Result<T, E = TuneError> = std::result::Result<T, E>;

impl TuneError {
    /// The variant's message: the outermost part of what went wrong.
    pub fn message(&self) -> &str {
        self.parts().0
    }

    /// The causes under the message, if any.
    pub fn cause(&self) -> Option<&Cause> {
        self.parts().1.as_ref()
    }

    fn parts(&self) -> (&str, &Option<Cause>) {
        match self {
            TuneError::Manifest { message, source }
            | TuneError::Options { message, source }
            | TuneError::Run { message, source }
            | TuneError::Report { message, source }
            | TuneError::Merge { message, source } => (message, source),
        }
    }

    /// `error` as an `Options` error, carried through the engine's internal `anyhow` chain
    /// (and kept as it is at the boundary).
    pub(crate) fn options(error: impl Into<anyhow::Error>) -> anyhow::Error {
        anyhow::Error::new(TuneError::invalid_options(error.into()))
    }

    /// `error` as the variant `kind` builds (its outermost message, the rest as its source),
    /// unless it already is one of ours (not wrapped in context), which is kept.
    fn from_chain(error: anyhow::Error, kind: fn(String, Option<Cause>) -> TuneError) -> TuneError {
        match error.downcast::<TuneError>() {
            Ok(ours) => ours,
            Err(error) => {
                let message = error.to_string();
                let source = (error.chain().nth(1).is_some()).then(|| Cause(Arc::new(error)));
                kind(message, source)
            }
        }
    }

    pub(crate) fn manifest(error: anyhow::Error) -> TuneError {
        TuneError::from_chain(error, |message, source| TuneError::Manifest {
            message,
            source,
        })
    }

    pub(crate) fn invalid_options(error: anyhow::Error) -> TuneError {
        TuneError::from_chain(error, |message, source| TuneError::Options {
            message,
            source,
        })
    }

    pub(crate) fn run(error: anyhow::Error) -> TuneError {
        TuneError::from_chain(error, |message, source| TuneError::Run { message, source })
    }

    pub(crate) fn report(error: anyhow::Error) -> TuneError {
        TuneError::from_chain(error, |message, source| TuneError::Report {
            message,
            source,
        })
    }

    pub(crate) fn merge(error: anyhow::Error) -> TuneError {
        TuneError::from_chain(error, |message, source| TuneError::Merge {
            message,
            source,
        })
    }
}

impl fmt::Display for TuneError {
    /// The message; with `{:#}`, the message and every cause under it, joined by `: `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())?;
        if f.alternate() {
            let mut cause = self.source();
            while let Some(error) = cause {
                write!(f, ": {error}")?;
                cause = error.source();
            }
        }
        Ok(())
    }
}

impl StdError for TuneError {
    /// The first cause under the message, as the error it is (an `io::Error` downcasts to one);
    /// its own `source()` leads on to the root cause.
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.cause().map(Cause::error)
    }
}

/// The causes under a [`TuneError`]'s message: the rest of the chain the engine built, the
/// next cause first (`tensors[0].dtype = "f16"`), down to the root cause (`unknown dtype`, or
/// an `io::Error`). [`TuneError::source`](StdError::source) is [`Cause::error`].
#[derive(Clone)]
pub struct Cause(Arc<anyhow::Error>);

impl Cause {
    /// The first cause, as the error it is; its `source()` is the next.
    pub fn error(&self) -> &(dyn StdError + 'static) {
        self.0
            .chain()
            .nth(1)
            .expect("a Cause is made only of a chain with a cause")
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.error(), f)
    }
}

impl fmt::Debug for Cause {
    /// Every cause, down to the root: `Cause(["tensors[0].file = \"x.bin\"", "No such file or
    /// directory (os error 2)"])`, so that `main() -> Result<(), TuneError>` shows them all.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let causes: Vec<String> = self.0.chain().skip(1).map(ToString::to_string).collect();
        f.debug_tuple("Cause").field(&causes).finish()
    }
}

impl PartialEq for Cause {
    /// Causes are equal when they read the same, cause by cause.
    fn eq(&self, other: &Cause) -> bool {
        let chain = |c: &Cause| {
            c.0.chain()
                .skip(1)
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
        };
        chain(self) == chain(other)
    }
}

impl Eq for Cause {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_is_the_outermost_part_and_the_causes_are_the_source() {
        let root = std::io::Error::new(std::io::ErrorKind::NotFound, "no such file");
        let chained = anyhow::Error::new(root)
            .context("tensors[0].file = \"x.bin\"")
            .context("invalid manifest m.toml");
        let e = TuneError::manifest(chained);
        assert!(matches!(e, TuneError::Manifest { .. }));
        assert_eq!(e.to_string(), "invalid manifest m.toml");
        assert_eq!(
            format!("{e:#}"),
            "invalid manifest m.toml: tensors[0].file = \"x.bin\": no such file"
        );
        let cause = e.source().expect("a cause");
        assert_eq!(cause.to_string(), "tensors[0].file = \"x.bin\"");
        assert_eq!(e.cause().map(ToString::to_string), Some(cause.to_string()));
        let debug = format!("{e:?}");
        assert!(
            debug.contains("no such file"),
            "Debug shows every cause: {debug}"
        );
        let root = cause.source().expect("the root cause");
        let io = root
            .downcast_ref::<std::io::Error>()
            .expect("the root cause is the io::Error itself");
        assert_eq!(io.kind(), std::io::ErrorKind::NotFound);
        assert!(root.source().is_none());
    }

    #[test]
    fn an_error_without_causes_is_its_message_and_ours_are_kept() {
        let e = TuneError::run(anyhow::anyhow!("no GPU"));
        assert_eq!(format!("{e:#}"), "no GPU");
        assert!(e.source().is_none());
        let ours = TuneError::run(TuneError::options(
            anyhow::anyhow!("the directory y does not exist").context("--json x"),
        ));
        assert!(matches!(ours, TuneError::Options { .. }));
        assert_eq!(ours.to_string(), "--json x");
        assert_eq!(
            format!("{ours:#}"),
            "--json x: the directory y does not exist"
        );
    }
}
