//! End-to-end tests of the `tunebox` binary, which also serves as its own worker.

mod careful;
mod community;
mod compile_deadline;
mod interference;
mod kernel_tuner;
mod resume;
mod search;
mod shards;
mod snapshots;
mod timing;
mod tune;
mod util;
