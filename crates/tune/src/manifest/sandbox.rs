//! `[sandbox]`: run the workers in tunebox-process's sandbox, with explicit allowances.
//!
//! ```toml
//! [sandbox]                 # the table alone switches it on, with the defaults
//! network = false           # default false
//! read = ["data"]           # extra read-only paths, relative to the manifest
//! write = ["out"]           # extra read-write paths
//! memory_mb = 8192          # address space per worker; 0: unlimited (default: physical memory;
//!                           # unlimited for CUDA, whose driver reserves more than that)
//! cpu_time_s = 600          # CPU time per worker; 0 (default): unlimited
//! tasks = 256               # processes + threads per worker; 0: unlimited
//! file_size_mb = 1024       # largest file a worker may write; 0: unlimited
//! write_xor_execute = true  # W^X: writable memory never becomes executable (default true
//!                           # for C; false for CUDA, whose driver is not known to do without)
//! ```

use std::path::Path;
use std::time::Duration;

use anyhow::{Result, bail};
use tunebox_process::Sandbox;

use super::Language;
use super::raw::RawSandbox;

/// The sandbox `raw` asks for, with the manifest's folder (the kernel's sources and headers)
/// readable; `None` without a table or with `enabled = false`.
///
/// # Errors
///
/// A `read` or `write` path that does not exist (named, relative to the manifest's folder).
pub(super) fn sandbox(
    raw: Option<RawSandbox>,
    dir: &Path,
    language: Language,
) -> Result<Option<Sandbox>> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    if raw.enabled == Some(false) {
        return Ok(None);
    }
    let mut sandbox = for_kernel(dir, language).network(raw.network.unwrap_or(false));
    for (paths, what) in [(&raw.read, "read"), (&raw.write, "write")] {
        for path in paths {
            let full = dir.join(path);
            if !full.exists() {
                bail!(
                    "sandbox.{what}: `{path}` does not exist (paths are relative to the \
                     manifest's folder, {}); create it or remove it from the list",
                    dir.display()
                );
            }
            sandbox = match what {
                "read" => sandbox.read(full),
                _ => sandbox.write(full),
            };
        }
    }
    let limit = |value: Option<u64>, scale: u64| value.map(|v| (v > 0).then(|| v * scale));
    if let Some(memory) = limit(raw.memory_mb, 1 << 20) {
        sandbox = sandbox.memory(memory);
    }
    if let Some(cpu) = limit(raw.cpu_time_s, 1) {
        sandbox = sandbox.cpu_time(cpu.map(Duration::from_secs));
    }
    if let Some(tasks) = limit(raw.tasks, 1) {
        sandbox = sandbox.tasks(tasks);
    }
    if let Some(size) = limit(raw.file_size_mb, 1 << 20) {
        sandbox = sandbox.file_size(size);
    }
    if let Some(on) = raw.write_xor_execute {
        sandbox = sandbox.write_xor_execute(on);
    }
    Ok(Some(sandbox))
}

/// The default sandbox for a kernel in `dir`: the folder readable (the sources and headers the
/// cache check rereads); for CUDA no address-space limit (the driver maps more virtual memory
/// than the machine has) and no W^X (the driver has not been checked to run without making
/// memory executable). What `tunebox tune --sandbox` uses when the manifest has no
/// `[sandbox]`.
pub(crate) fn for_kernel(dir: &Path, language: Language) -> Sandbox {
    let sandbox = Sandbox::new().read(dir);
    match language {
        Language::Cuda => sandbox.memory(None).write_xor_execute(false),
        Language::C => sandbox,
    }
}
