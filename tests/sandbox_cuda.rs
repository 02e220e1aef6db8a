//! The CUDA zoo: CUDA candidates that cheat the harness (tests/zoo/zoo.cu), in one tuning run
//! judged against the innocent CHEAT=0, each caught and reported, the innocent ones ranked.
//! Needs a CUDA GPU: `#[ignore = "needs a CUDA GPU"]`, run by `cargo xtask gpu-test`. The
//! checks' logic is tested without one (crates/cuda's `integrity` unit tests, and the mock
//! driver's cheating kernels in crates/cuda/tests/mock_driver.rs).

use tunebox_pool::Status;
use tunebox_tune::{CacheMode, Stop, TuneOptions};

use crate::util::{cache_root, cheat_of, worker_exe};

/// The zoo's manifest: every candidate of `zoo/zoo.cu` as one choice, judged against CHEAT=0;
/// `SANDBOX` is replaced by a `[sandbox]` table or nothing.
const ZOO_MANIFEST: &str = r#"
name = "zoo-cuda"
timeout_s = 60
problem_size = [65536]
[kernel]
language = "cuda"
source = "zoo.cu"
entry = "k"
[[tensors]]
name = "x"
dtype = "f32"
shape = [65536]
[[tensors]]
name = "y"
dtype = "f32"
shape = [65536]
init = "zeros"
output = true
[[scalars]]
name = "n"
value = 65536
[params]
CHEAT = [0, 1, 2, 3, 99, 4, 5, 6]
[timing]
warmup_ms = 2
rep_ms = 10
[verify]
reference = { choice = { CHEAT = 0 } }
SANDBOX
"#;

/// Whether a zoo candidate ended as it must; `None` when it did.
fn misjudged(cheat: u32, status: Status, error: &str) -> Option<String> {
    let ok = match cheat {
        0 | 99 => status == Status::Ok,
        1 => status == Status::Wrong,
        // Right on the same inputs even with the outputs poisoned: only fresh inputs catch it.
        2 => status == Status::Wrong && error.contains("fresh inputs"),
        3 => status == Status::Wrong && error.contains("after the timed reps"),
        // Run right after CHEAT=99 in the same worker, its output buffer is likely the memory
        // 99's correct output was freed from, but it is initialized (zeros) before the call;
        // the reference's outputs live in another process (its own worker) and in the parent.
        4 => status == Status::Wrong,
        // The reference ran on its own, unmutated x.
        5 => status == Status::Wrong,
        // Fails to build without the device runtime; never ranked in any case.
        6 => status != Status::Ok,
        _ => unreachable!("no such candidate {cheat}"),
    };
    (!ok).then(|| format!("CHEAT={cheat}: {status} {error}"))
}

fn run_zoo(sandbox: &str) {
    // SAFETY: set before any worker starts; every test sets the same value (tests/tune.rs).
    unsafe { std::env::set_var("TUNEBOX_CACHE_DIR", cache_root()) };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("zoo.cu"), include_str!("zoo/zoo.cu")).unwrap();
    std::fs::write(
        dir.path().join("m.toml"),
        ZOO_MANIFEST.replace("SANDBOX", sandbox),
    )
    .unwrap();
    let report = tunebox_tune::tune(&dir.path().join("m.toml"), &options(), &(), &Stop::new())
        .expect("the run survives its candidates");
    assert_eq!(report.results.len(), 8, "every candidate has a result");
    let mut wrong = Vec::new();
    for result in &report.results {
        let cheat = cheat_of(result);
        let error = result.error.clone().unwrap_or_default();
        println!("CHEAT={cheat}: {} {error}", result.status);
        wrong.extend(misjudged(cheat, result.status, &error));
    }
    assert!(wrong.is_empty(), "misjudged:\n{}", wrong.join("\n"));
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_hostile_cuda_candidate_is_caught() {
    run_zoo("");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn every_hostile_cuda_candidate_is_caught_in_the_sandbox() {
    run_zoo("[sandbox]");
}

/// Whether the judge's verdicts are those the zoo expects, checked on made-up results (so
/// that the table above is itself tested without a GPU).
#[test]
fn the_cuda_zoo_expectations_accept_only_the_catches() {
    assert!(misjudged(0, Status::Ok, "").is_none());
    assert!(misjudged(0, Status::Wrong, "").is_some());
    assert!(
        misjudged(
            2,
            Status::Wrong,
            "wrong on a call after the timed reps, made on fresh inputs"
        )
        .is_none()
    );
    assert!(misjudged(2, Status::Wrong, "wrong on the first call").is_some());
    assert!(
        misjudged(4, Status::Ok, "").is_some(),
        "reused memory must not pass"
    );
    assert!(misjudged(6, Status::Error, "compile error").is_none());
    assert!(misjudged(6, Status::Ok, "").is_some());
}

/// The test worker, one worker reused for every choice (so that a candidate's output buffer is
/// likely the memory the previous, innocent candidate's output was freed from), no cache.
fn options() -> TuneOptions {
    TuneOptions::new()
        .max_process_uses(None)
        .worker(worker_exe())
        .cache(CacheMode::Off)
        .fresh(true)
        .rounds(0)
}
