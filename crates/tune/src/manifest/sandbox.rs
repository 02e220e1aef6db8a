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

use super::raw::RawSandbox;
use super::{KernelSource, Language};

/// The sandbox `raw` asks for, with the local headers of `kernels` (the kernel's, the
/// reference source's) readable, file by file; `None` without a table or with
/// `enabled = false`.
///
/// # Errors
///
/// A `read` or `write` path that does not exist (named, relative to the manifest's folder).
pub(super) fn sandbox(
    raw: Option<RawSandbox>,
    dir: &Path,
    kernels: &[&KernelSource],
) -> Result<Option<Sandbox>> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    if raw.enabled == Some(false) {
        return Ok(None);
    }
    let mut sandbox = for_kernels(kernels).network(raw.network.unwrap_or(false));
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

/// The default sandbox for `kernels` (the kernel first, then a reference source): the local
/// headers they include readable, file by file — what a CUDA kernel's compile (NVRTC, in the
/// worker) reads, and what the C kernel cache's check rereads — and nothing else of the
/// manifest's folder (not the expected outputs, the results cache or the manifest); for CUDA
/// no address-space limit (the driver maps more virtual memory than the machine has) and no
/// W^X (the driver has not been checked to run without making memory executable). What
/// `tunebox tune --sandbox` uses when the manifest has no `[sandbox]`.
pub(crate) fn for_kernels(kernels: &[&KernelSource]) -> Sandbox {
    let mut sandbox = Sandbox::new();
    for kernel in kernels {
        for header in
            crate::manifest::headers::local_header_paths(&kernel.text, &kernel.dir, &kernel.flags)
        {
            sandbox = sandbox.read(header);
        }
    }
    match kernels.first().map(|k| k.language) {
        Some(Language::Cuda) => sandbox.memory(None).write_xor_execute(false),
        Some(Language::C) | None => sandbox,
    }
}

/// What a run whose reference is expected outputs (files, or arrays given in memory) should
/// know: a memoizing kernel cannot be caught against one fixed input (and how to get that
/// check), and, without a sandbox, that every worker can read the files. `None` when the
/// reference is a kernel.
///
/// # Errors
///
/// A file of expected outputs that `sandbox` lets a worker read (under an allowance, a system
/// folder or tunebox's cache), named with the fix.
pub(crate) fn answer_notes(
    verify: Option<&super::Verify>,
    sandbox: Option<&Sandbox>,
) -> Result<Vec<String>> {
    let Some(verify) = verify.filter(|v| matches!(v.reference, super::Reference::Outputs(_)))
    else {
        return Ok(Vec::new());
    };
    let mut notes = vec![
        "the reference is expected outputs (verify.reference.outputs, Kernel Tuner's answer) \
         for one fixed input: the inputs cannot change from call to call, so a kernel that \
         remembers an earlier call's answer and copies it is not caught; give a reference \
         kernel (`reference = { choice = { … } }` or `reference = { source = \"ref.c\" }`) \
         to check every choice on inputs it cannot predict"
            .to_owned(),
    ];
    let files = || {
        verify
            .answer_files
            .iter()
            .map(|f| format!("`{}`", f.display()))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match sandbox {
        Some(sandbox) => {
            if let Some(file) = verify.answer_files.iter().find(|f| sandbox.reaches(f)) {
                bail!(
                    "verify.reference.outputs: `{}` lies where the sandbox lets workers read \
                     (a [sandbox] read or write allowance, a system folder or tunebox's cache), \
                     so a candidate could copy the expected outputs; move the file elsewhere \
                     or narrow the allowance",
                    file.display()
                );
            }
        }
        None if !verify.answer_files.is_empty() => notes.push(format!(
            "the workers are not sandboxed: a candidate can read the expected outputs ({}) as \
             it can any file of this user's, and copy them; run with --sandbox (or a \
             [sandbox] table) to keep them out of its reach",
            files()
        )),
        None => {}
    }
    Ok(notes)
}
