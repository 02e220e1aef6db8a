//! docs/extending.md's code is code that compiles and runs: every `rust` block of the page is a
//! piece of examples/rust-fns (a workspace member, run by its own test) or of examples/downstream
//! (a crate outside the workspace with the `tunebox` facade as its only dependency, built here
//! as a downstream user builds it, with its own lock file and features, and run).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The marker a code block of the docs uses for code it leaves out.
const ELISION: &str = "// …";

/// How long building the downstream crate may take: from scratch on a busy 2-core machine it is
/// a few minutes (it shares the workspace's target directory, so usually seconds).
const BUILD_DEADLINE: Duration = Duration::from_secs(30 * 60);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the repository")
        .to_path_buf()
}

fn read(path: &str) -> String {
    let path = root().join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The code blocks of `markdown` whose info string starts with `rust`, without their fences.
fn rust_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in markdown.lines() {
        match (&mut current, line.trim_start().strip_prefix("```")) {
            (None, Some(info)) if info.starts_with("rust") => current = Some(Vec::new()),
            (Some(lines), Some("")) => {
                blocks.push(lines.join("\n"));
                current = None;
            }
            (Some(lines), _) => lines.push(line),
            (None, _) => {}
        }
    }
    blocks
}

/// Whether `block` is a piece of `source`: its parts between [`ELISION`] lines each appear in
/// `source` verbatim (whole lines, indentation included), in order.
fn is_piece_of(block: &str, source: &str) -> bool {
    let mut rest = source;
    for part in block.split(&format!("\n{ELISION}\n")) {
        let part = part.trim_matches('\n');
        let Some(at) = rest.find(part) else {
            return false;
        };
        rest = &rest[at + part.len()..];
    }
    true
}

#[test]
fn every_code_block_of_extending_md_is_example_code() {
    let page = read("docs/extending.md");
    let sources = [
        read("examples/rust-fns/src/main.rs"),
        read("examples/downstream/src/main.rs"),
    ];
    let blocks = rust_blocks(&page);
    assert!(
        blocks.len() >= 5,
        "docs/extending.md has {} rust blocks",
        blocks.len()
    );
    for block in &blocks {
        assert!(
            sources.iter().any(|s| is_piece_of(block, s)),
            "this block of docs/extending.md is not a piece of examples/rust-fns/src/main.rs \
             or examples/downstream/src/main.rs (copy the code from there, eliding with \
             `{ELISION}` lines):\n{block}"
        );
    }
}

#[test]
fn a_block_that_differs_from_the_code_is_told_apart() {
    let source = "fn a() {\n    one();\n    two();\n    three();\n}\n";
    assert!(is_piece_of(
        "fn a() {\n    one();\n// …\n    three();\n}",
        source
    ));
    assert!(!is_piece_of(
        "fn a() {\n    three();\n// …\n    one();\n}",
        source
    ));
    assert!(!is_piece_of(
        "fn a() {\n    one();\n    three();\n}",
        source
    ));
}

/// The target directory `cargo test` builds in, so that the downstream build reuses its
/// artifacts.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

#[test]
fn the_downstream_example_builds_and_runs_outside_the_workspace() {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = root().join("examples/downstream/Cargo.toml");
    let mut build = Command::new(cargo)
        .args(["build", "--offline", "--locked", "--manifest-path"])
        .arg(&manifest)
        .env("CARGO_TARGET_DIR", target_dir())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cargo starts");
    let started = Instant::now();
    while build.try_wait().expect("waiting for cargo").is_none() {
        if started.elapsed() > BUILD_DEADLINE {
            let _ = build.kill();
            panic!(
                "building {} took over {BUILD_DEADLINE:?}",
                manifest.display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let built = build.wait_with_output().expect("cargo's output");
    assert!(
        built.status.success(),
        "{} does not build as a downstream crate:\n{}",
        manifest.display(),
        String::from_utf8_lossy(&built.stderr)
    );
    let run = Command::new(target_dir().join("debug/tunebox-example-downstream"))
        .output()
        .expect("the downstream example runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "{}\n{stdout}", run.status);
    assert!(
        stdout.contains("request: cpu kernel, 2 tensors, 1 scalar, rep_ms 20"),
        "{stdout}"
    );
    assert!(
        stdout.contains("result: median 1.5 ms over 3 reps (stopped: noise), worker Some(12.5) ms"),
        "{stdout}"
    );
    tunes_a_manifest(&target_dir().join("debug/tunebox-example-downstream"));
}

/// A manifest of two choices, `STEP` 1 and 2 of a loop over 4096 floats.
const TINY: &str = r#"[kernel]
source = "axpb.c"
entry = "axpb"
flags = ["-O2"]
[params]
STEP = [1, 2]
[timing]
warmup_ms = 1
rep_ms = 2
[[tensors]]
name = "x"
dtype = "f32"
shape = [4096]
[[tensors]]
name = "y"
dtype = "f32"
shape = [4096]
init = "zeros"
output = true
[[scalars]]
name = "n"
value = 4096
"#;

/// The downstream example's tuning path (`tunebox-example-downstream MANIFEST`): its workers
/// are the example itself, which must serve them (`run_if_worker` first in `main`).
fn tunes_a_manifest(example: &Path) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("axpb.c"),
        "void axpb(const float *x, float *y, long n) {\n    \
         for (long i = 0; i < n; i += STEP) y[i] = 2 * x[i] + 1;\n    \
         for (long i = 1; i < n; i += STEP) y[i] = 2 * x[i] + 1;\n}\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("m.toml"), TINY).unwrap();
    let run = Command::new(example)
        .arg(dir.path().join("m.toml"))
        .env("TUNEBOX_CACHE_DIR", dir.path().join("cache"))
        .env_remove("TUNEBOX_WORKER")
        .output()
        .expect("the downstream example runs");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{}\n{stdout}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("best: STEP="), "{stdout}");
}
