//! End-to-end tests of the `tunebox` binary, which also serves as its own worker.

mod careful;
mod community;
mod compile_deadline;
mod full_disk;
mod interference;
mod kernel_tuner;
mod messages;
mod open_kt_caches;
mod resume;
mod search;
mod shards;
mod snapshots;
mod terminal;
mod timing;
mod tune;
mod util;
mod worker_env;
