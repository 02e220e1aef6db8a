//! End-to-end tests of the `tunebox` binary, which also serves as its own worker.

mod careful;
mod compile_deadline;
mod crashes;
mod fair_formats;
mod floor;
mod full_disk;
mod html;
mod interference;
mod kernel_tuner;
mod kt_manifests;
mod messages;
mod open_kt_caches;
mod resume;
mod reused_workers;
mod search;
mod shards;
mod snapshots;
mod spaces;
mod terminal;
mod threads;
mod timing;
mod tune;
mod util;
mod varied;
mod worker_env;
