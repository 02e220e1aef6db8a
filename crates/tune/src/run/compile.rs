//! Stage 3 of a run, compiling: a C choice compiles in the parent into the kernel cache, so
//! that workers only load it; a compile that fails is the choice's result. (CUDA choices
//! compile in their workers, when measured.)

use std::path::PathBuf;

use anyhow::Context;
use tunebox_cpu::{CacheDir, CompileControl, CpuError};
use tunebox_pool::Status;

use super::lookup::{Setup, Todo};
use crate::base::stop::Stop;
use crate::measure::workers;
use crate::results::ChoiceResult;

/// What compiling one choice gave.
#[derive(Debug)]
pub enum Compiled {
    /// In the kernel cache (a C kernel), or left to its worker (CUDA): ready to measure.
    Ready {
        /// The files the compiler read besides the source (every header, from its
        /// dependency list; none for a kernel compiled in its worker): a cached result of the
        /// choice holds only while they are unchanged.
        dependencies: Vec<PathBuf>,
    },
    /// It did not compile: its result, `compile_error` (cached: the same source fails the
    /// same way), or `timeout` when its compiler ran past `compile_timeout_s` (not cached: a
    /// less loaded machine may compile it).
    Failed {
        /// The choice's result.
        result: Box<ChoiceResult>,
        /// Whether the results cache may keep it.
        cacheable: bool,
        /// The files the compiler read before the error (none when one was missing, or the
        /// compiler timed out): a cached `compile_error` holds only while they are unchanged,
        /// and one without them is compiled again.
        dependencies: Vec<PathBuf>,
    },
    /// The compile was cancelled (a stop was requested): it says nothing about the choice.
    Cancelled,
}

/// Stage 3: compiles `todo` (a C choice) into the kernel cache (`$TUNEBOX_CACHE_DIR`, else
/// the user's cache folder), within the manifest's `compile_timeout_s`; a raised `stop` kills
/// the compiler. Other kernels are [`Compiled::Ready`] at once.
///
/// # Errors
///
/// The kernel cache cannot be created ([`crate::TuneError::Run`]); a compile that fails is a
/// [`Compiled::Failed`], not an error.
pub fn compile(setup: &Setup<'_>, todo: &Todo, stop: &Stop) -> crate::Result<Compiled> {
    let kernel_cache = kernel_cache().map_err(crate::TuneError::run)?;
    let cancel = || stop.requested();
    let control = CompileControl {
        timeout: setup.manifest.compile_timeout,
        cancel: Some(&cancel),
        ..CompileControl::default()
    };
    Ok(judge_compile(
        setup,
        todo,
        workers::precompile(&todo.request, &kernel_cache, &control),
    ))
}

/// The kernel cache, created.
pub(crate) fn kernel_cache() -> anyhow::Result<CacheDir> {
    let cache = tunebox_cpu::default_cache_dir()?;
    create(&cache)?;
    Ok(cache)
}

/// Creates the kernel cache `dir` (and its parents) unless it exists.
pub(crate) fn create(dir: &CacheDir) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir.path()).with_context(|| {
        format!(
            "cannot create the kernel cache {}; set TUNEBOX_CACHE_DIR to a writable directory",
            dir.path().display()
        )
    })
}

/// The kernel cache of a whole run: the user's (`$TUNEBOX_CACHE_DIR/cpu`, else the user's
/// cache folder), or, when that cannot be made or written (a read-only file system, no
/// permission, no such folder possible, not private), a private temporary folder that lives
/// as long as the run, as the results cache goes on when its file cannot be written. The
/// workers are given its root (`TUNEBOX_CACHE_DIR`), so that they load what the parent
/// compiled there (and CUDA workers compile into it).
#[derive(Debug)]
pub(crate) struct KernelCache {
    dir: CacheDir,
    /// The private root, when the user's cache could not be used (removed when dropped).
    private: Option<tempfile::TempDir>,
}

impl KernelCache {
    /// The user's kernel cache, created and checked writable; else a private temporary one,
    /// with the warning that says why and what to do.
    ///
    /// # Errors
    ///
    /// Neither the user's cache nor a temporary folder can be made.
    pub(crate) fn resolve() -> anyhow::Result<(KernelCache, Option<String>)> {
        let usable = tunebox_cpu::default_cache_dir()
            .map_err(|e| e.to_string())
            .and_then(|dir| writable(&dir).map(|()| dir).map_err(|e| e.to_string()));
        let reason = match usable {
            Ok(dir) => return Ok((KernelCache { dir, private: None }, None)),
            Err(reason) => reason,
        };
        let private = tempfile::Builder::new()
            .prefix("tunebox-kernels-")
            .tempdir()
            .with_context(|| {
                format!(
                    "{reason}, and no temporary folder could be made for this run's kernels                      either; set TUNEBOX_CACHE_DIR to a writable directory"
                )
            })?;
        let dir = CacheDir::new(private.path().join("cpu"));
        let warning = format!(
            "{reason}: this run compiles into the private folder {} instead, removed when it              ends; set TUNEBOX_CACHE_DIR to a writable directory to keep compiled kernels              between runs",
            private.path().display()
        );
        Ok((
            KernelCache {
                dir,
                private: Some(private),
            },
            Some(warning),
        ))
    }

    /// The directory C kernels compile into.
    pub(crate) fn dir(&self) -> &CacheDir {
        &self.dir
    }

    /// The cache root to give the workers (`TUNEBOX_CACHE_DIR`): the private one, when the
    /// user's could not be used (`None`: theirs, as they resolve it).
    pub(crate) fn worker_root(&self) -> Option<&std::path::Path> {
        self.private.as_ref().map(tempfile::TempDir::path)
    }
}

/// Creates `dir` (private, as [`CacheDir::ensure`] does) and writes a file in it, to be sure
/// that compiles can: a read-only file system lets an existing folder be "created".
fn writable(dir: &CacheDir) -> std::io::Result<()> {
    let describe = |e: std::io::Error| {
        std::io::Error::new(
            e.kind(),
            format!(
                "the kernel cache {} cannot be used ({e})",
                dir.path().display()
            ),
        )
    };
    dir.ensure().map_err(describe)?;
    tempfile::Builder::new()
        .prefix(".tunebox-probe-")
        .tempfile_in(dir.path())
        .map(drop)
        .map_err(describe)
}

/// What a compile's `outcome` (the files the compiler read, or why it failed) means for `todo`.
pub(crate) fn judge_compile(
    setup: &Setup<'_>,
    todo: &Todo,
    outcome: Result<Vec<PathBuf>, CpuError>,
) -> Compiled {
    let failed = |status, error| {
        ChoiceResult::failed(
            todo.index,
            todo.choice.clone(),
            status,
            error,
            &setup.device,
        )
    };
    match outcome {
        Ok(dependencies) => Compiled::Ready { dependencies },
        // Killed by a stop: says nothing about the choice.
        Err(CpuError::CompileCancelled { .. }) => Compiled::Cancelled,
        // Killed at compile_timeout_s: a `timeout`, not cached (a slow compiler, a loaded
        // machine or a larger compile_timeout_s may let the next run compile it).
        Err(e) => match workers::compile_timeout_message(&e) {
            Some(message) => Compiled::Failed {
                result: Box::new(failed(Status::Timeout, message)),
                cacheable: false,
                dependencies: Vec::new(),
            },
            None => {
                // The headers read before the error (none when one was missing: then the next
                // run compiles it again).
                let dependencies = match &e {
                    CpuError::Compile { dependencies, .. } => dependencies.clone(),
                    _ => Vec::new(),
                };
                let error = format!("{:#}", anyhow::Error::new(e));
                let error = match entry_hint(setup.manifest, &error) {
                    Some(hint) => format!("{hint}\n{error}"),
                    None => error,
                };
                Compiled::Failed {
                    result: Box::new(failed(Status::CompileError, error)),
                    cacheable: true,
                    dependencies,
                }
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use tunebox_protocol::{DType, TensorSpec};

    use super::*;
    use crate::manifest::Manifest;
    use crate::run::lookup::lookup_cached;
    use crate::space::SearchSpace;

    #[test]
    fn a_kernel_that_does_not_compile_is_a_compile_error_result() {
        let cache = tempfile::tempdir().unwrap();
        // SAFETY: this crate's unit tests that compile all set the same value.
        unsafe { std::env::set_var("TUNEBOX_CACHE_DIR", cache.path()) };
        let manifest = Manifest::builder("k")
            .c_source(
                "k.c",
                "void k(float *y) { y[0] = X; }\n#if X == 2\n#error two is wrong\n#endif\n",
                "k",
            )
            .compiler(crate::compiler())
            .flags(["-O0"])
            .tensor(TensorSpec::new("y", DType::F32, [1]).output())
            .param("X", [1, 2])
            .build()
            .unwrap();
        let space = SearchSpace::new(&manifest.params, &manifest.restrictions).unwrap();
        let setup = Setup::new(&manifest, "test-cpu", None, None);
        let lookup = lookup_cached(&setup, &space, &[0, 1], None);
        let stop = Stop::new();
        let ok = compile(&setup, &lookup.todo[0], &stop).unwrap();
        match &ok {
            // The compiler's dependency list: the headers it read (`stdint.h`, at least).
            Compiled::Ready { dependencies } => assert!(
                dependencies.iter().any(|d| d.ends_with("stdint.h")),
                "{dependencies:?}"
            ),
            other => panic!("{other:?}"),
        }
        match compile(&setup, &lookup.todo[1], &stop).unwrap() {
            Compiled::Failed {
                result,
                cacheable,
                dependencies: _,
            } => {
                assert!(cacheable);
                assert_eq!(result.status, Status::CompileError);
                assert_eq!(result.index, 1);
                let error = result.error.unwrap_or_default();
                assert!(error.contains("two is wrong"), "{error}");
            }
            other => panic!("{other:?}"),
        }
        // A stop before the compile cancels it.
        stop.request();
        let fresh = Setup::new(&manifest, "other", None, None);
        let cancelled = compile(&fresh, &lookup.todo[1], &stop).unwrap();
        assert!(
            matches!(cancelled, Compiled::Cancelled | Compiled::Failed { .. }),
            "{cancelled:?}"
        );
    }
}

/// When the call tunebox generates (`<tunebox trampoline>`) fails because the kernel source
/// declares no function named `entry`, the error for what the user wrote: the manifest's
/// `entry`, the compiler's "did you mean" suggestion, and the fix.
fn entry_hint(manifest: &crate::manifest::Manifest, error: &str) -> Option<String> {
    let entry = &manifest.kernel.entry;
    let line = error.lines().find(|l| {
        l.contains("<tunebox trampoline>")
            && (l.contains("implicit declaration of function") || l.contains("undeclared function"))
            && quoted(l).first().is_some_and(|name| name == entry)
    })?;
    let suggestion = line
        .split_once("did you mean")
        .and_then(|(_, rest)| quoted(rest).into_iter().next())
        .map_or_else(String::new, |name| format!("; did you mean `{name}`?"));
    Some(format!(
        "error: [kernel] entry = \"{entry}\", but {} declares no function `{entry}`{suggestion} \
         (fix `entry` in the manifest)",
        manifest.kernel.source_name
    ))
}

/// The names quoted in a compiler's message, in order: `'name'` (C locale) or `‘name’` (UTF-8).
fn quoted(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(['\'', '‘']) {
        let open = rest[start..].chars().next().unwrap_or('\'');
        let after = &rest[start + open.len_utf8()..];
        let close = if open == '‘' { '’' } else { '\'' };
        let Some(end) = after.find(close) else { break };
        names.push(after[..end].to_owned());
        rest = &after[end + close.len_utf8()..];
    }
    names
}

#[cfg(test)]
mod entry_hint_tests {
    use super::quoted;

    #[test]
    fn quoted_names_in_either_locale() {
        let gcc = "<tunebox trampoline>:7:5: error: implicit declaration of function ‘scal’; did \
                   you mean ‘scale’? [-Werror=implicit-function-declaration]";
        assert_eq!(quoted(gcc), ["scal", "scale"]);
        let clang = "<tunebox trampoline>:7:5: error: call to undeclared function 'scal'; ISO C99";
        assert_eq!(quoted(clang), ["scal"]);
    }
}
