//! A preprocessor define of a kernel's compile (`-DNAME=VALUE`): how a choice reaches the
//! compiler.

use serde::{Deserialize, Serialize};

/// One preprocessor define, passed to the compiler as `-DNAME=VALUE`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Define {
    /// Macro name, a C identifier.
    pub name: String,
    /// Macro value, verbatim.
    pub value: String,
}

impl Define {
    /// `NAME=VALUE`.
    pub fn new(name: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            value: value.into(),
        }
    }

    /// Whether `name` is a C identifier (`[A-Za-z_][A-Za-z0-9_]*`), as a define's name, a
    /// kernel's entry and a tensor's C name must be.
    ///
    /// ```
    /// use tunebox_protocol::Define;
    /// assert!(Define::is_c_identifier("BLOCK_M"));
    /// assert!(!Define::is_c_identifier("2D") && !Define::is_c_identifier("A-B"));
    /// ```
    pub fn is_c_identifier(name: &str) -> bool {
        let mut chars = name.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    }
}
