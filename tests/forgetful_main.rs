//! A program that forgets `tunebox_worker::run_if_worker`: its `main` builds a pool whose
//! workers are, by default, its own executable. Each worker then runs this same `main`.
//!
//! Every run of `main` appends `<pid> <parent pid>` to the file named by
//! `TUNEBOX_TEST_FORGETFUL_COUNTER` (workers inherit `TUNEBOX_*` variables). With
//! `TUNEBOX_TEST_FORGETFUL_MODE=return`, a run started as a worker returns from `main` at once
//! instead of building a pool (a program that never starts workers but never serves either).
//!
//! The top run prints the pool's error chain to stderr and exits 1 when building the pool fails,
//! 0 when it succeeds.

use std::io::Write;

use tunebox_pool::{PoolConfig, TuningProcessPool};
use tunebox_protocol::WORKER_SERVER_ENV;

fn main() {
    if let Some(path) = std::env::var_os("TUNEBOX_TEST_FORGETFUL_COUNTER") {
        let mut counter = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .expect("the counter file opens");
        // One write per line, so concurrent runs never interleave within a line.
        let line = format!(
            "{} {}\n",
            std::process::id(),
            std::os::unix::process::parent_id()
        );
        counter
            .write_all(line.as_bytes())
            .expect("the counter file is written");
    }
    let as_worker = std::env::var_os(WORKER_SERVER_ENV).is_some();
    let mode = std::env::var("TUNEBOX_TEST_FORGETFUL_MODE").unwrap_or_default();
    if as_worker && mode == "return" {
        return;
    }
    match TuningProcessPool::new(PoolConfig::new().max_workers(2)) {
        Ok(_) => println!("the pool was built"),
        Err(e) => {
            let mut chain = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(cause) = source {
                chain.push_str(&format!("\ncaused by: {cause}"));
                source = cause.source();
            }
            eprintln!("{chain}");
            std::process::exit(1);
        }
    }
}
