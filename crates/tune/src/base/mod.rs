//! The base every area stands on: the crate's error, one line of an error, writing a file whole,
//! shards, interrupting a run and the observer a run reports to.
//!
//! It imports no other area.

pub(crate) mod error;
pub(crate) mod error_line;
pub(crate) mod observer;
pub(crate) mod shard;
pub(crate) mod stop;
pub(crate) mod whole_file;
