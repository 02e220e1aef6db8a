//! Runs the example as a user would and checks what it reports for every candidate: the
//! example is the proof that a downstream crate can bring its own task kind.

use std::process::Command;

#[test]
fn every_candidate_gets_its_own_outcome() {
    let output = Command::new(env!("CARGO_BIN_EXE_tunebox-example-rust-fns"))
        .arg("4096")
        .output()
        .expect("the example runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let status_of = |candidate: &str| -> &str {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(candidate))
            .unwrap_or_else(|| panic!("no line for {candidate} in:\n{stdout}"));
        line.split_once("  ")
            .map_or("", |(_, rest)| rest.trim_start())
    };
    for good in [
        "indexed/1",
        "iterator/1",
        "accumulators/4",
        "accumulators/16",
    ] {
        assert!(status_of(good).ends_with("ok"), "{good}:\n{stdout}");
    }
    let expectations = [
        (
            "off_by_one/1",
            "Exception: the backend panicked: index out of bounds",
        ),
        ("aborts/1", "(SIGABRT)"),
        ("spins/1", "Timeout: timed out after 3s"),
        ("drops_tail/16", "wrong: "),
        (
            "missing/1",
            "Exception: invalid request: no candidate called `missing`",
        ),
    ];
    for (candidate, expected) in expectations {
        let line = stdout.lines().find(|l| l.starts_with(candidate)).unwrap();
        assert!(line.contains(expected), "{candidate}: {line}\n{stdout}");
    }
    // Inductor's face: five finite timings for the sweep.
    let sweep = stdout
        .lines()
        .find(|l| l.starts_with("accumulators by unroll"))
        .expect("the sweep line");
    assert!(!sweep.contains("inf"), "{sweep}");
    assert!(stdout.contains("best: "), "{stdout}");
}
