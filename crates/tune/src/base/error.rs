//! The crate's one error type.
//!
//! Inside, the engine builds its messages with `anyhow` (context chains such as
//! `invalid manifest m.toml: tensors[0].dtype = "f16": unknown dtype`); at the public boundary
//! they become an [`TuneError`] whose variant says which stage failed and whose message is the
//! whole chain, word for word what `tunebox` prints after `tunebox: error:`.

/// What stopped a stage of a run. A choice that fails is never an error: it is a result with
/// its status (`compile_error`, `crashed`, `timeout`, …).
///
/// Every variant's message is complete (causes included) and says what to do; none has a
/// `source()`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TuneError {
    /// The manifest cannot be read or is invalid, or its restrictions leave no choice.
    #[error("{message}")]
    Manifest {
        /// What is wrong, and where (`invalid manifest m.toml: …`).
        message: String,
    },
    /// The caller's options are unusable: an output path that would overwrite an input or lies
    /// in a missing directory, a shard that cannot be resolved, the cache and a report on one
    /// file.
    #[error("{message}")]
    Options {
        /// Which option, and why.
        message: String,
    },
    /// The run could not go on: no GPU for a CUDA manifest, workers that cannot start, a
    /// reference that does not compile or fails, an unusable kernel or results cache.
    #[error("{message}")]
    Run {
        /// What failed, and how to fix it.
        message: String,
    },
    /// A report or results cache cannot be read or written, or is not one.
    #[error("{message}")]
    Report {
        /// Which file, and why.
        message: String,
    },
    /// Shards' results cannot be merged (different manifests or versions, overlaps, …).
    #[error("{message}")]
    Merge {
        /// Why not.
        message: String,
    },
}

/// A `Result` with this crate's [`TuneError`].
pub type Result<T, E = TuneError> = std::result::Result<T, E>;

impl TuneError {
    /// An `Options` error carried through the engine's internal `anyhow` chain.
    pub(crate) fn options(message: impl std::fmt::Display) -> anyhow::Error {
        anyhow::Error::new(TuneError::Options {
            message: message.to_string(),
        })
    }

    /// `error` as the variant `kind` builds, unless it already is one of ours (not wrapped in
    /// context), which is kept.
    pub(crate) fn from_chain(error: anyhow::Error, kind: fn(String) -> TuneError) -> TuneError {
        match error.downcast::<TuneError>() {
            Ok(ours) => ours,
            Err(error) => kind(format!("{error:#}")),
        }
    }

    pub(crate) fn manifest(error: anyhow::Error) -> TuneError {
        TuneError::from_chain(error, |message| TuneError::Manifest { message })
    }

    pub(crate) fn run(error: anyhow::Error) -> TuneError {
        TuneError::from_chain(error, |message| TuneError::Run { message })
    }

    pub(crate) fn report(error: anyhow::Error) -> TuneError {
        TuneError::from_chain(error, |message| TuneError::Report { message })
    }

    pub(crate) fn merge(error: anyhow::Error) -> TuneError {
        TuneError::from_chain(error, |message| TuneError::Merge { message })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_the_whole_chain_and_ours_are_kept() {
        let chained = anyhow::anyhow!("unknown dtype").context("invalid manifest m.toml");
        let e = TuneError::manifest(chained);
        assert_eq!(e.to_string(), "invalid manifest m.toml: unknown dtype");
        assert!(matches!(e, TuneError::Manifest { .. }));
        let ours = TuneError::run(TuneError::options(
            "--json x: the directory y does not exist",
        ));
        assert!(matches!(ours, TuneError::Options { .. }));
        assert_eq!(ours.to_string(), "--json x: the directory y does not exist");
    }
}
