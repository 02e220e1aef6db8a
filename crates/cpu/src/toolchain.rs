//! The toolchain: the compiler command (split as a shell splits `CC`), the language it compiles
//! a kernel as, its identity (`--version`, probed once per process), the host CPU, and the
//! command lines and logs shown in errors.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tunebox_protocol::CKernel;

use crate::CpuError;
use crate::subprocess::{self, Captured, Limits, Outcome};

/// Flags added after the kernel's own, so they win: build a shared object, and turn the
/// diagnostics of a call that does not match the entry's prototype into errors (gcc 14 and clang
/// 16 already do; older ones only warn, and the kernel would then crash at run time instead).
const FIXED_FLAGS: [&str; 5] = [
    "-fPIC",
    "-shared",
    "-Werror=implicit-function-declaration",
    "-Werror=incompatible-pointer-types",
    "-Werror=int-conversion",
];

/// At most this much compiler output is kept in an error (the first errors are the useful ones).
const MAX_LOG_BYTES: usize = subprocess::HEAD_BYTES;

/// The language a [`CKernel`] is compiled as, decided by [`Language::of`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Language {
    /// C: the source is compiled from a `.c` file.
    C,
    /// C++: the source is compiled from a `.cpp` file, and the trampoline is `extern "C"`.
    Cxx,
}

impl Language {
    /// C++ when the compiler is a C++ driver (its file name contains `++`: `g++`, `c++`,
    /// `clang++`, `x86_64-linux-gnu-g++-12`, also behind a launcher: `ccache g++`), the source
    /// name has a C++ extension (`.cpp`,
    /// `.cc`, `.cxx`, `.c++`, `.C`, `.hpp`), or the flags say `-x c++`; C otherwise. Kernel
    /// Tuner's `lang = "C"` with its default compiler `g++` is C++.
    pub fn of(kernel: &CKernel) -> Language {
        // Any program word of the command (`ccache g++`), not its flags (`cc -std=c11`).
        let cxx_driver = compiler_words(&kernel.compiler)
            .unwrap_or_else(|| vec![kernel.compiler.clone()])
            .iter()
            .filter(|word| !word.starts_with('-'))
            .any(|word| {
                Path::new(word)
                    .file_name()
                    .is_some_and(|name| name.to_string_lossy().contains("++"))
            });
        let extension = Path::new(&kernel.source_name)
            .extension()
            .map(|e| e.to_string_lossy().into_owned())
            .unwrap_or_default();
        let x_cxx = kernel.flags.iter().enumerate().any(|(i, flag)| {
            flag == "-xc++" || (flag == "-x" && kernel.flags.get(i + 1).is_some_and(|l| l == "c++"))
        });
        if cxx_driver
            || ["cpp", "cc", "cxx", "c++", "C", "hpp"].contains(&extension.as_str())
            || x_cxx
        {
            Language::Cxx
        } else {
            Language::C
        }
    }

    /// The extension of the file the compiler is given: `.c` or `.cpp`.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Language::C => ".c",
            Language::Cxx => ".cpp",
        }
    }

    /// Flags added after the kernel's own: [`FIXED_FLAGS`] for C; for C++ only `-fPIC -shared`
    /// (the call's checks are C++'s own rules, and the C-only `-Werror=` options would draw a
    /// warning).
    pub(crate) fn fixed_flags(self) -> &'static [&'static str] {
        match self {
            Language::C => &FIXED_FLAGS,
            Language::Cxx => &FIXED_FLAGS[..2],
        }
    }
}

/// The words of a compiler command as make users write `CC`: `cc`, `/usr/bin/gcc-12`,
/// `ccache cc`, `cc -std=c11`, `"/opt/my tools/cc" -m64` (split as a POSIX shell splits words,
/// quotes and backslashes included). A path to an existing file is one word even with spaces in
/// it. `None` when the quotes do not balance.
pub(crate) fn compiler_words(compiler: &str) -> Option<Vec<String>> {
    if Path::new(compiler).is_file() {
        return Some(vec![compiler.to_owned()]);
    }
    shlex::split(compiler)
}

/// The program and leading arguments of the compiler command `compiler` ([`compiler_words`]).
pub(crate) fn compiler_command(compiler: &str) -> Result<(String, Vec<String>), CpuError> {
    let Some(mut words) = compiler_words(compiler) else {
        return Err(CpuError::CompilerSpawn {
            compiler: compiler.to_owned(),
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                "its quotes do not balance (the compiler command is split into words as a shell \
                 splits CC)",
            ),
        });
    };
    if words.is_empty() {
        return Err(CpuError::CompilerNotFound {
            compiler: String::new(),
        });
    }
    let program = words.remove(0);
    Ok((program, words))
}

pub(crate) fn spawn_error(compiler: &str, source: io::Error) -> CpuError {
    if source.kind() == io::ErrorKind::NotFound {
        CpuError::CompilerNotFound {
            compiler: compiler.to_owned(),
        }
    } else {
        CpuError::CompilerSpawn {
            compiler: compiler.to_owned(),
            source,
        }
    }
}

/// The exit status and output of a compiler that exited by itself; the error for one that was
/// killed at the deadline (`timeout`) or cancelled.
pub(crate) fn finished(
    outcome: Outcome,
    command: &str,
    timeout: Duration,
) -> Result<(ExitStatus, Captured), CpuError> {
    match outcome {
        Outcome::Exited { status, output } => Ok((status, output)),
        Outcome::TimedOut { output, late } => {
            log::debug!(
                "cpu: killed `{command}` at its {timeout:?} deadline; reaped {late:?} after it"
            );
            Err(CpuError::CompileTimeout {
                command: command.to_owned(),
                after: timeout,
                log: last_output(&output),
            })
        }
        Outcome::Cancelled => Err(CpuError::CompileCancelled {
            command: command.to_owned(),
        }),
        Outcome::Starved => Err(CpuError::CompileStarved {
            command: command.to_owned(),
            after: crate::subprocess::STARVED_AFTER,
        }),
    }
}

/// What [`compiler_identity`] learned, per compiler name.
static PROBES: Mutex<BTreeMap<String, Probe>> = Mutex::new(BTreeMap::new());

/// The identity [`compiler_identity`] already found for `compiler` in this process, without
/// running anything; `None` when it was never asked or did not answer.
pub(crate) fn known_identity(compiler: &str) -> Option<String> {
    let probes = PROBES.lock().unwrap_or_else(PoisonError::into_inner);
    match probes.get(compiler) {
        Some(Probe::Identity(identity)) => Some(identity.clone()),
        Some(Probe::Hung { .. }) | None => None,
    }
}

/// What [`compiler_identity`] learned about a compiler.
#[derive(Debug, Clone)]
enum Probe {
    /// The first lines of its `--version`.
    Identity(String),
    /// `--version` ran past a deadline of `after` and was killed, after printing `log`.
    Hung { after: Duration, log: String },
}

/// The first two lines of `<compiler> --version`, memoized per compiler name for the life of the
/// process (the lock is held while probing, so each compiler is probed once), run within
/// `limits` (whose deadline is `timeout` after the compile began). A probe that timed out is
/// memoized too, and answers every later call whose timeout is no longer than its own.
pub(crate) fn compiler_identity(
    compiler: &str,
    timeout: Duration,
    limits: &Limits<'_>,
) -> Result<String, CpuError> {
    let (program, mut args) = compiler_command(compiler)?;
    args.push("--version".to_owned());
    let command = render_command(&program, &args);
    let hung = |after, log: &str| CpuError::CompileTimeout {
        command: command.clone(),
        after,
        log: log.to_owned(),
    };
    let mut probes = PROBES.lock().unwrap_or_else(PoisonError::into_inner);
    match probes.get(compiler) {
        Some(Probe::Identity(identity)) => return Ok(identity.clone()),
        Some(Probe::Hung { after, log }) if timeout <= *after => return Err(hung(*after, log)),
        Some(Probe::Hung { .. }) | None => {}
    }
    let outcome = subprocess::run(Command::new(&program).args(&args), limits)
        .map_err(|e| spawn_error(&program, e))?;
    let (status, output) = match finished(outcome, &command, timeout) {
        Ok(exited) => exited,
        Err(CpuError::CompileTimeout { after, log, .. }) => {
            probes.insert(
                compiler.to_owned(),
                Probe::Hung {
                    after,
                    log: log.clone(),
                },
            );
            return Err(hung(after, &log));
        }
        Err(e) => return Err(e),
    };
    let text = if output.stdout.is_blank() {
        output.stderr.head().0
    } else {
        output.stdout.head().0
    };
    let mut identity: String = String::from_utf8_lossy(text)
        .lines()
        .take(2)
        .collect::<Vec<_>>()
        .join("\n");
    if !status.success() {
        log::warn!(
            "cpu: `{compiler} --version` failed ({status}); cached kernels will not notice a \
             compiler upgrade"
        );
        let _ = write!(identity, "\n{status}");
    }
    probes.insert(compiler.to_owned(), Probe::Identity(identity.clone()));
    Ok(identity)
}

/// The host CPU as `/proc/cpuinfo` describes it, read once per process.
pub(crate) fn host_cpu() -> &'static str {
    static HOST_CPU: OnceLock<String> = OnceLock::new();
    HOST_CPU.get_or_init(|| {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        cpu_description(&cpuinfo)
    })
}

/// The architecture, the first core's model (x86 `model name`; arm `CPU implementer/part/…`)
/// and its feature flags (a hypervisor can mask features of an identically named model).
pub(crate) fn cpu_description(cpuinfo: &str) -> String {
    let field = |key: &str| {
        cpuinfo.lines().find_map(|line| {
            let (k, v) = line.split_once(':')?;
            (k.trim() == key).then(|| v.trim())
        })
    };
    let mut description = std::env::consts::ARCH.to_owned();
    for key in [
        "model name",
        "CPU implementer",
        "CPU variant",
        "CPU part",
        "flags",
        "Features",
    ] {
        if let Some(value) = field(key) {
            let _ = write!(description, "\n{key}: {value}");
        }
    }
    description
}

/// `compiler args…`, quoted for a POSIX shell so it can be pasted.
pub(crate) fn render_command(compiler: &str, args: &[String]) -> String {
    std::iter::once(compiler)
        .chain(args.iter().map(String::as_str))
        .map(shell_quote)
        .collect::<Vec<_>>()
        .join(" ")
}

fn shell_quote(arg: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_=./,:+@%^".contains(c);
    if !arg.is_empty() && arg.chars().all(plain) {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

/// The compiler's stderr then stdout, at most [`MAX_LOG_BYTES`] of it.
pub(crate) fn compiler_log(status: ExitStatus, output: &Captured) -> String {
    let (stderr, stderr_more) = output.stderr.head();
    let (stdout, stdout_more) = output.stdout.head();
    let mut log = String::from_utf8_lossy(stderr).into_owned();
    let mut dropped = stderr_more;
    if output.stdout.is_blank() {
        dropped += stdout_more;
    } else {
        if !log.is_empty() && !log.ends_with('\n') {
            log.push('\n');
        }
        log.push_str(&String::from_utf8_lossy(stdout));
        dropped += stdout_more;
    }
    if log.trim().is_empty() && dropped == 0 {
        return format!("the compiler exited with {status} and printed nothing");
    }
    if log.len() > MAX_LOG_BYTES {
        let mut cut = MAX_LOG_BYTES;
        while !log.is_char_boundary(cut) {
            cut -= 1;
        }
        dropped += log.len() - cut;
        log.truncate(cut);
    }
    if dropped > 0 {
        let _ = write!(log, "\n[… {dropped} more bytes of compiler output]");
    }
    log
}

/// The last lines a killed compiler printed: the end of its stderr, then of its stdout (each at
/// most 4 KiB, from the start of a line, after `[…]` when earlier output was dropped), or a note
/// that it printed nothing.
fn last_output(output: &Captured) -> String {
    let mut parts: Vec<String> = Vec::new();
    for capture in [&output.stderr, &output.stdout] {
        if capture.is_blank() {
            continue;
        }
        let (tail, cut) = capture.tail();
        let text = String::from_utf8_lossy(tail);
        let text = if cut {
            // A cut tail starts mid-line: begin at the next whole line, if there is one.
            let whole = match text.split_once('\n') {
                Some((_, rest)) if !rest.trim().is_empty() => rest,
                _ => &text,
            };
            format!("[…]\n{}", whole.trim_end())
        } else {
            text.trim_end().to_owned()
        };
        parts.push(text);
    }
    if parts.is_empty() {
        return "(it printed nothing)".to_owned();
    }
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::test_kernel as kernel;

    #[test]
    fn compiler_commands_are_split_like_cc() {
        let words = |c: &str| compiler_words(c).unwrap();
        assert_eq!(words("cc"), ["cc"]);
        assert_eq!(words("ccache cc"), ["ccache", "cc"]);
        assert_eq!(words(" cc  -std=c11 "), ["cc", "-std=c11"]);
        assert_eq!(words("'/opt/my cc/gcc' -m64"), ["/opt/my cc/gcc", "-m64"]);
        assert_eq!(compiler_words("cc 'x"), None);
        let dir = tempfile::tempdir().unwrap();
        let spaced = dir.path().join("my cc");
        std::fs::write(&spaced, "").unwrap();
        let spaced = spaced.to_string_lossy().into_owned();
        assert_eq!(words(&spaced), std::slice::from_ref(&spaced));
        assert_eq!(
            compiler_command("ccache cc -O1").unwrap(),
            ("ccache".to_owned(), vec!["cc".to_owned(), "-O1".to_owned()])
        );
    }

    #[test]
    fn language_from_compiler_extension_or_flags() {
        let with = |compiler: &str, name: &str, flags: &[&str]| {
            let mut k = kernel();
            k.compiler = compiler.into();
            k.source_name = name.into();
            k.flags = flags.iter().map(|f| (*f).to_owned()).collect();
            Language::of(&k)
        };
        assert_eq!(with("cc", "k.c", &[]), Language::C);
        assert_eq!(with("ccache g++", "k.c", &[]), Language::Cxx);
        assert_eq!(with("cc -std=c11", "k.c", &[]), Language::C);
        assert_eq!(with("ccache cc -DX=\"a++\"", "k.c", &[]), Language::C);
        assert_eq!(with("/usr/bin/gcc-12", "dir.cpp/k.c", &[]), Language::C);
        assert_eq!(with("g++", "k.c", &[]), Language::Cxx);
        assert_eq!(with("/opt/bin/clang++-17", "k", &[]), Language::Cxx);
        assert_eq!(with("cc", "k.cpp", &[]), Language::Cxx);
        assert_eq!(with("cc", "k.c", &["-x", "c++"]), Language::Cxx);
        assert_eq!(with("cc", "k.c", &["-xc++"]), Language::Cxx);
    }

    #[test]
    fn cpu_description_reads_x86_and_arm() {
        let x86 = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu avx2\n\
                   processor\t: 1\nmodel name\t: AMD EPYC 7B13\n";
        let d = cpu_description(x86);
        assert!(
            d.contains("model name: AMD EPYC 7B13") && d.contains("flags: fpu avx2"),
            "{d}"
        );
        let arm =
            "processor\t: 0\nFeatures\t: fp asimd\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n";
        let d = cpu_description(arm);
        assert!(
            d.contains("CPU part: 0xd0c") && d.contains("Features: fp asimd"),
            "{d}"
        );
        assert_ne!(cpu_description(x86), cpu_description(arm));
    }

    #[test]
    fn commands_are_shell_quoted() {
        let args = ["-O3".to_owned(), "-DNAME=a b".to_owned(), "it's".to_owned()];
        assert_eq!(
            render_command("cc", &args),
            r"cc -O3 '-DNAME=a b' 'it'\''s'"
        );
    }
}
