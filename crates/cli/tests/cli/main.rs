//! End-to-end tests of the `tunebox` binary, which also serves as its own worker.

mod careful;
mod community;
mod compile_deadline;
mod kernel_tuner;
mod kt_manifests;
mod resume;
mod search;
mod shards;
mod snapshots;
mod spaces;
mod timing;
mod tune;
mod util;
