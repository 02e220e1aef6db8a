//! The worker binary the integration tests spawn: the same `main` as `tunebox-worker`, plus a
//! task kind of the tests' own (`task_kinds.rs`), as a downstream tool's worker would have.
//! With `TUNEBOX_TEST_REGISTRY=tasks` it has only that task kind and `diagnostics`, as the
//! worker of a tool without the built-in backends would.

#[allow(dead_code, reason = "shared with the tests, which use all of it")]
mod task_kinds;

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let registry = if std::env::var_os("TUNEBOX_TEST_REGISTRY").is_some_and(|v| v == "tasks") {
        tunebox_worker::Registry::diagnostics_only()
    } else {
        tunebox_worker::Registry::standard()
    };
    std::process::exit(tunebox_worker::run_from_env(
        registry.with_task(task_kinds::run),
    ));
}
