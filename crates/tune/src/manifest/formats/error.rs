//! The one error type of the format readers and writers.

use std::path::PathBuf;

/// What went wrong reading or writing a T1, Kernel Tuner cache or T4 file.
///
/// Every variant names the file. A bad field is named by its JSON path (`$` is the document,
/// `.Key` an object member, `[i]` an array element), e.g.
/// `` `convolution.json`: $.ConfigurationSpace.TuningParameters[2].Values: … ``.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum FormatError {
    /// The file could not be opened or read (the I/O error is the `source`).
    #[error("cannot read `{}`", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A `.gz` file is not valid gzip (the decoder's error is the `source`).
    #[error("cannot decompress `{}` (not valid gzip)", path.display())]
    Gzip {
        /// The file.
        path: PathBuf,
        /// The decoder's error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not JSON: the message is serde_json's, with line and column.
    #[error("`{}` is not valid JSON: {message}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// serde_json's message (it says where).
        message: String,
    },
    /// The file is JSON, but one field is missing, of the wrong type or has a bad value.
    #[error("`{}`: {field}: {problem}", path.display())]
    Field {
        /// The file.
        path: PathBuf,
        /// JSON path of the field, e.g. `$.cache["16,1,1"].time`.
        field: String,
        /// What is wrong, and what was expected.
        problem: String,
    },
    /// The file could not be written (the I/O error is the `source`).
    #[error("cannot write `{}`", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}
