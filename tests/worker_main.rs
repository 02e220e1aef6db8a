//! The worker binary the integration tests spawn: the same `main` as `tunebox-worker`, plus a
//! task kind of the tests' own (`task_kinds.rs`), as a downstream tool's worker would have.

#[allow(dead_code, reason = "shared with the tests, which use all of it")]
mod task_kinds;

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    std::process::exit(tunebox_worker::run_from_env(
        tunebox_worker::Registry::standard().with_task(task_kinds::run),
    ));
}
