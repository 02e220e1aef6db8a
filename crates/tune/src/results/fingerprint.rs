//! Hashes that identify measurements: the results cache's keys and the manifest hash that shards
//! must share.
//!
//! A key covers everything that determines a choice's measurement: the tunebox version, the
//! kernel's source text and the contents of the local headers it includes (`#include "…"`), the
//! entry, language, flags or options, the C compiler and its version, the defines, tensors (with
//! their init, seed or data), scalars, timing, launch geometry, verification (tolerance and
//! reference), worker reuse, and the device. Not the timeout: a cached timeout is reused only
//! when it was given at least as long (see `cache.rs`). Nor the headers a C kernel finds
//! through `-I` or a define, known only after compiling: a cache line records the compiler's
//! dependency list and a lookup checks it (`cache::Deps`).

use std::time::Duration;

use tunebox_cpu::CompileControl;
use tunebox_process::Sandbox;
use tunebox_protocol::{BenchmarkRequest, Init, Kernel, ScalarKind, TensorSpec};

use crate::manifest::headers::local_headers;
use crate::manifest::launch::Launch;
use crate::manifest::{KernelSource, Language, Manifest, Reference};
use crate::space::{Choice, SearchSpace};

/// A hasher with unambiguous fields (each is length-prefixed).
struct Hasher(blake3::Hasher);

impl Hasher {
    fn new(domain: &str) -> Hasher {
        let mut h = Hasher(blake3::Hasher::new());
        h.field(domain.as_bytes());
        h.field(env!("CARGO_PKG_VERSION").as_bytes());
        h
    }

    fn field(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.update(&(bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    fn text(&mut self, text: &str) -> &mut Self {
        self.field(text.as_bytes())
    }

    fn finish(&self) -> String {
        self.0.finalize().to_hex()[..32].to_owned()
    }
}

/// What every choice of a manifest shares: the kernel (with its headers and compiler), tensors,
/// scalars and verification. Computed once per run.
pub(crate) fn setup_hash(manifest: &Manifest) -> String {
    let mut h = Hasher::new("tunebox setup");
    source(&mut h, &manifest.kernel, manifest.compile_timeout);
    for t in &manifest.tensors {
        tensor(&mut h, t);
    }
    for s in &manifest.scalars {
        h.text(&s.name).text(&s.value.to_string());
        // Typed scalars came later: an `i64` scalar hashes as before, so existing keys hold.
        if s.kind != ScalarKind::I64 || s.float != 0.0 {
            h.text(s.kind.name())
                .field(&s.float.to_bits().to_le_bytes());
        }
    }
    // So did the argument order: the default (empty) order adds nothing.
    if !manifest.args.is_empty() {
        h.text("args").text(&format!("{:?}", manifest.args));
    }
    // And `[env]`: what the workers get beyond the defaults (nothing adds nothing).
    for part in manifest.env.identity() {
        h.text("env").text(&part);
    }
    // And Kernel Tuner's grid and block macros of a C kernel, which the problem size and the
    // grid divisors decide beside the choice (a CUDA kernel's launch is in each choice's key;
    // a manifest without them adds nothing).
    if manifest.kernel_tuner_macros
        && manifest.kernel.language == Language::C
        && let Some(launch) = &manifest.launch
    {
        h.text("kernel tuner macros").text(&format!("{launch:?}"));
    }
    // And what they inherit that changes how a kernel runs (OMP_NUM_THREADS; none set adds
    // nothing).
    for part in crate::manifest::env::inherited_timing_identity(std::env::vars_os()) {
        h.text("inherited").text(&part);
    }
    verify(&mut h, manifest);
    h.finish()
}

/// What a manifest's verification decides: the tolerance and the reference.
fn verify(h: &mut Hasher, manifest: &Manifest) {
    let Some(v) = &manifest.verify else {
        h.text("no verify");
        return;
    };
    h.text(&format!("{:?}", v.tolerance));
    match &v.reference {
        Reference::Choice(choice) => {
            h.text("choice").text(&choice.label());
        }
        Reference::Source(reference, launch) => {
            h.text("source").text(&format!("{launch:?}"));
            source(h, reference, manifest.compile_timeout);
        }
        Reference::Outputs(outputs) => {
            h.text("outputs");
            for o in outputs {
                h.text(&o.name).field(&o.bytes);
            }
        }
    }
}

/// The manifest hash: the setup, the timing, and every choice after restrictions (with its
/// launch, for CUDA). Two files with the same manifest hash hold results of the same space,
/// measured the same way (on possibly different devices).
pub(crate) fn manifest_hash(setup: &str, manifest: &Manifest, space: &SearchSpace) -> String {
    let mut h = Hasher::new("tunebox manifest");
    h.text(setup).text(&format!("{:?}", manifest.timing));
    if space.is_listed() {
        for choice in space.choices() {
            h.text(&choice_identity(&choice, manifest.launch.as_ref()));
        }
    } else {
        // Too many choices to hash one by one: the definition of the space instead.
        for (name, values) in space.params() {
            h.text(name).text(&format!("{values:?}"));
        }
        for restriction in space.restrictions() {
            h.text(restriction);
        }
        h.text(&format!("{:?}", manifest.launch));
    }
    h.finish()
}

/// The cache key of one choice's request on `device`, with workers replaced after
/// `max_process_uses` choices (`None`: never), in `sandbox` (`None`: plain workers).
///
/// A sandboxed result is never served to a plain run, nor the other way round: the sandbox
/// decides outcomes (a refused call, a limit that stops a worker, W^X) even where it leaves
/// times alone. A plain run's key is that of earlier versions.
pub(crate) fn key(
    setup: &str,
    device: &str,
    request: &BenchmarkRequest,
    label: &str,
    max_process_uses: Option<u64>,
    sandbox: Option<&Sandbox>,
) -> String {
    let mut h = Hasher::new("tunebox choice");
    if let Some(sandbox) = sandbox {
        h.text(&sandbox_identity(sandbox));
    }
    h.text(setup)
        .text(device)
        .text(label)
        // The fresh-input seed changes from run to run; what it checks does not.
        .text(&format!("{:?}", request.timing.clone().fresh_seed(None)))
        .text(&format!("{max_process_uses:?}"));
    if let Kernel::Cuda(k) = &request.kernel {
        h.text(&format!("{:?}", k.launch));
    }
    h.finish()
}

/// What of a sandbox can change a measurement's outcome: the network, W^X and the limits. Not
/// the allowed paths, which hold the manifest's own (absolute) folder: moving a project must
/// not empty its cache.
fn sandbox_identity(sandbox: &Sandbox) -> String {
    format!(
        "sandbox network={} wx={} memory={:?} cpu={:?} tasks={:?} file={:?}",
        sandbox.network_value(),
        sandbox.write_xor_execute_value(),
        sandbox.memory_value(),
        sandbox.cpu_time_value(),
        sandbox.tasks_value(),
        sandbox.file_size_value()
    )
}

/// A text that identifies a choice together with its launch (for the manifest hash).
pub(crate) fn choice_identity(choice: &Choice, launch: Option<&Launch>) -> String {
    let label = choice.label();
    match launch.map(|l| l.config(choice)) {
        Some(Ok(config)) => format!("{label} {config:?}"),
        Some(Err(e)) => format!("{label} {e:#}"),
        None => label,
    }
}

fn source(h: &mut Hasher, s: &KernelSource, compile_timeout: Duration) {
    h.text(match s.language {
        Language::C => "c",
        Language::Cuda => "cuda",
    })
    .text(&s.entry)
    .text(&s.text);
    for flag in &s.flags {
        h.text(flag);
    }
    if s.language == Language::C {
        h.text(&s.compiler)
            .text(&compiler_version(&s.compiler, compile_timeout));
    }
    for (path, contents) in local_headers(&s.text, &s.dir, &s.flags) {
        h.text(&path.display().to_string()).field(&contents);
    }
}

fn tensor(h: &mut Hasher, t: &TensorSpec) {
    h.text(&t.name)
        .text(t.dtype.name())
        .text(&format!("{:?} {} {}", t.shape, t.output, t.reset));
    match &t.init {
        Init::Zeros => h.text("zeros"),
        Init::Ones => h.text("ones"),
        Init::Random { seed } => h.text("random").text(&seed.to_string()),
        Init::Data(data) => h.text("data").field(blake3::hash(data).as_bytes()),
    };
}

/// The first line of `compiler --version` (`cc (Debian 12.2.0-14) 12.2.0`), or `""` when it
/// cannot be run or does not answer within `timeout` (compiling will then say why).
pub fn compiler_version(compiler: &str, timeout: Duration) -> String {
    let control = CompileControl {
        timeout,
        ..CompileControl::default()
    };
    tunebox_cpu::compiler_version(compiler, &control)
        .ok()
        .and_then(|identity| identity.lines().next().map(|l| l.trim().to_owned()))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys of manifests that use none of the later fields (typed scalars, an argument order)
    /// are those of earlier versions, so existing caches stay valid; the new fields change them.
    #[test]
    fn new_argument_fields_keep_old_keys() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("k.c"), "void k(float *x, long n) {}\n").unwrap();
        let path = dir.path().join("m.toml");
        let setup = |extra: &str, scalar: &str| {
            std::fs::write(
                &path,
                format!(
                    "{extra}[kernel]\nsource = \"k.c\"\nentry = \"k\"\n\
                     [[tensors]]\nname = \"x\"\ndtype = \"f32\"\nshape = [4]\n\
                     [[scalars]]\nname = \"n\"\n{scalar}\n"
                ),
            )
            .unwrap();
            setup_hash(&Manifest::read(&path, "tunebox-no-such-cc").unwrap())
        };
        // An untyped integer scalar in the default order: hashed as before (name and value).
        let old = setup("", "value = 4");
        assert_eq!(setup("", "value = 4\ntype = \"i64\""), old);
        assert_eq!(setup("args = [\"x\", \"n\"]\n", "value = 4"), old);
        assert_ne!(setup("", "value = 4\ntype = \"i32\""), old);
        assert_ne!(setup("", "value = 4.0"), old);
        assert_ne!(setup("args = [\"n\", \"x\"]\n", "value = 4"), old);
    }

    /// Sandboxed and plain results never share a key; a plain key is the earlier one; limits
    /// count, allowed paths do not.
    #[test]
    fn the_sandbox_is_part_of_the_key() {
        let request = BenchmarkRequest::new(tunebox_protocol::DiagnosticTask::Sleep { ms: 1 });
        let key = |sandbox: Option<&Sandbox>| key("setup", "cpu", &request, "A=1", None, sandbox);
        let plain = key(None);
        let sandboxed = Sandbox::new();
        assert_ne!(key(Some(&sandboxed)), plain);
        assert_eq!(
            key(Some(&sandboxed.clone().read("/data"))),
            key(Some(&sandboxed))
        );
        assert_ne!(
            key(Some(&sandboxed.clone().tasks(Some(3)))),
            key(Some(&sandboxed))
        );
        assert_ne!(
            key(Some(&sandboxed.clone().network(true))),
            key(Some(&sandboxed))
        );
    }
}
