//! The worker binary the integration tests spawn: the same `main` as `tunebox-worker`.

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    std::process::exit(tunebox_worker::run_from_env(
        tunebox_worker::Registry::standard(),
    ));
}
