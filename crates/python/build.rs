//! With the `worker-binary` feature (maturin's build, pyproject.toml): builds the workspace's
//! Rust worker, `tunebox-worker` (crates/worker: the `cpu`, `cuda` and `diagnostics`
//! backends), for the extension to carry (`src/worker_binary.rs`), and tells the compiler where
//! it is (`TUNEBOX_WORKER_EXE`) and a hash of its bytes (`TUNEBOX_WORKER_HASH`).
//!
//! The worker is built by a cargo of its own, with the same profile and `Cargo.lock` (the outer
//! build has fetched every crate it needs: this crate depends on tunebox-worker, so nothing is
//! downloaded), into a target directory under `OUT_DIR`: sharing the outer build's directory
//! would wait on its lock forever. Without the feature (`cargo build --workspace`, clippy, doc)
//! nothing is built.

use std::hash::Hasher as _;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    if std::env::var_os("CARGO_FEATURE_WORKER_BINARY").is_none() {
        return;
    }
    let crate_dir = PathBuf::from(var("CARGO_MANIFEST_DIR"));
    let workspace = crate_dir
        .parent()
        .and_then(Path::parent)
        .expect("crates/python lies two levels below the workspace root")
        .to_owned();
    // The worker's own sources, and what it links (as cargo would track them for a path
    // dependency): a change there builds it again.
    for watched in [
        "Cargo.lock",
        "Cargo.toml",
        "crates/protocol",
        "crates/bench",
        "crates/cpu",
        "crates/cuda",
        "crates/worker",
    ] {
        println!(
            "cargo:rerun-if-changed={}",
            workspace.join(watched).display()
        );
    }
    let out_dir = PathBuf::from(var("OUT_DIR"));
    let target_dir = out_dir.join("worker-target");
    let release = var("PROFILE") == "release";
    let mut cargo = Command::new(var("CARGO"));
    cargo
        .current_dir(&workspace)
        .args(["build", "-p", "tunebox-worker", "--bin", "tunebox-worker"])
        .arg("--target-dir")
        .arg(&target_dir)
        // The outer build's own settings for this package are not the worker's.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        // Shipped in a wheel: no debug info (the panic messages stay).
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo");
    if release {
        cargo.arg("--release");
    }
    let status = cargo
        .status()
        .unwrap_or_else(|e| panic!("cannot run cargo to build tunebox-worker: {e}"));
    assert!(
        status.success(),
        "building tunebox-worker for the Python package failed ({status}); its errors are above"
    );
    let exe = target_dir
        .join(if release { "release" } else { "debug" })
        .join("tunebox-worker");
    let bytes = std::fs::read(&exe)
        .unwrap_or_else(|e| panic!("cannot read the built worker {}: {e}", exe.display()));
    // Names the cached copy (src/worker_binary.rs): any hash that changes with the bytes.
    let mut hasher = std::hash::DefaultHasher::new();
    hasher.write(&bytes);
    println!("cargo:rustc-env=TUNEBOX_WORKER_EXE={}", exe.display());
    println!(
        "cargo:rustc-env=TUNEBOX_WORKER_HASH={:016x}{:08x}",
        hasher.finish(),
        bytes.len()
    );
}

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("cargo sets {name} for build scripts"))
}
