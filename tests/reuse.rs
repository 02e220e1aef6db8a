//! Reused workers (`maximum_process_uses` = `None`, the CLI's `--max-process-uses 0`): state a
//! task changes is put back before the next one, what it leaves behind is named in its own
//! result, and a worker it damaged is replaced before an innocent task runs in it.

use tunebox_pool::{PoolConfig, PoolExecutor};
use tunebox_process::{ProcessError, TuningProcess};
use tunebox_protocol::{Leftover, TaskRequest};

use crate::task_kinds::{TestOutput, TestTask};
use crate::util::{LONG, config};

fn number(output: TestOutput) -> f64 {
    match output {
        TestOutput::Number(n) => n,
        other => panic!("a number, got {other:?}"),
    }
}

fn words(output: TestOutput) -> String {
    match output {
        TestOutput::Blob(bytes) => String::from_utf8(bytes).unwrap(),
        other => panic!("words, got {other:?}"),
    }
}

fn find<'a>(left: &'a [Leftover], what: &str) -> &'a Leftover {
    left.iter()
        .find(|l| l.what == what)
        .unwrap_or_else(|| panic!("no `{what}` leftover in {left:?}"))
}

#[test]
fn a_leaked_floating_point_mode_does_not_reach_the_next_task() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let pid = worker.pid();
    let fresh = number(worker.run_task(TestTask::FpProbe, LONG).unwrap());
    assert!(fresh > 0.0, "a denormal in a fresh worker: {fresh}");
    assert!(
        worker.left_behind().is_empty(),
        "{:?}",
        worker.left_behind()
    );

    worker.run_task(TestTask::SetFpModes, LONG).unwrap();
    let leftover = find(worker.left_behind(), "floating-point environment").clone();
    assert!(leftover.restored, "{leftover}");
    assert!(
        leftover.detail.contains("flush-to-zero") && leftover.detail.contains("toward zero"),
        "{leftover}"
    );
    // The same code after it computes what it computed before: the modes were put back, and the
    // worker (nothing lost) serves on.
    let after = number(worker.run_task(TestTask::FpProbe, LONG).unwrap());
    assert_eq!(after, fresh);
    assert!(worker.left_behind().is_empty());
    assert_eq!(worker.pid(), pid);
}

#[test]
fn changed_process_state_is_put_back_and_named() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let pid = worker.pid();
    let fresh = words(worker.run_task(TestTask::StateProbe, LONG).unwrap());
    worker.run_task(TestTask::Meddle, LONG).unwrap();
    let left = worker.left_behind().to_vec();
    for what in [
        "working directory",
        "umask",
        "environment",
        "signal dispositions",
        "signal mask",
    ] {
        assert!(find(&left, what).restored, "{left:?}");
    }
    assert!(
        find(&left, "signal dispositions")
            .detail
            .contains("SIGUSR1 ignored")
    );
    assert!(
        find(&left, "signal mask")
            .detail
            .contains("blocked SIGUSR2")
    );
    assert!(
        find(&left, "environment")
            .detail
            .contains("set TUNEBOX_TEST_MEDDLED")
    );
    let after = words(worker.run_task(TestTask::StateProbe, LONG).unwrap());
    assert_eq!(after, fresh);
    assert_eq!(worker.pid(), pid, "restored state needs no new worker");
}

#[test]
fn a_task_that_leaks_descriptors_is_named_and_its_worker_replaced() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    // A first task of the backend: what the backend itself sets up is not counted later.
    worker.run_task(TestTask::Square(2), LONG).unwrap();
    let pid = worker.pid();
    worker.run_task(TestTask::LeakFds(40), LONG).unwrap();
    let leftover = find(worker.left_behind(), "descriptors").clone();
    assert!(!leftover.restored);
    assert!(
        leftover.detail.contains("left 40 open: /dev/null ×40"),
        "{leftover}"
    );
    // The innocent task after it runs in a fresh worker, which it finds clean.
    worker.run_task(TestTask::Square(3), LONG).unwrap();
    assert_ne!(worker.pid(), pid, "the damaged worker was replaced");
    assert!(
        worker.left_behind().is_empty(),
        "{:?}",
        worker.left_behind()
    );
}

#[test]
fn a_task_that_leaves_a_thread_running_has_its_worker_replaced() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    worker.run_task(TestTask::Square(2), LONG).unwrap();
    let pid = worker.pid();
    worker.run_task(TestTask::LeakThread, LONG).unwrap();
    let leftover = find(worker.left_behind(), "threads").clone();
    assert!(
        !leftover.restored && leftover.detail.contains("left 1 running"),
        "{leftover}"
    );
    worker.run_task(TestTask::Square(3), LONG).unwrap();
    assert_ne!(worker.pid(), pid);
}

#[test]
fn the_pool_names_the_culprit_in_its_result_and_spares_the_innocent() {
    let ex = PoolExecutor::new(
        PoolConfig::new()
            .max_workers(1)
            .timeout(LONG)
            .maximum_process_uses(None)
            .process_config(config()),
    )
    .unwrap();
    let tasks = [
        TestTask::Square(1),
        TestTask::LeakFds(25),
        TestTask::Square(2),
        TestTask::Square(3),
    ];
    let results: Vec<_> = tasks
        .iter()
        .map(|t| {
            ex.submit(TaskRequest::new(t.clone()).encode().unwrap())
                .unwrap()
                .wait()
        })
        .collect();
    let culprit = results[1].as_ref().unwrap();
    assert!(
        culprit
            .left_behind
            .iter()
            .any(|l| l.what == "descriptors" && !l.restored && l.detail.contains("left 25 open")),
        "{:?}",
        culprit.left_behind
    );
    for innocent in [&results[2], &results[3]] {
        let innocent = innocent.as_ref().unwrap();
        assert!(
            innocent.left_behind.is_empty(),
            "{:?}",
            innocent.left_behind
        );
    }
}

#[test]
fn a_task_that_runs_out_of_a_resource_in_a_reused_worker_is_measured_again_in_a_fresh_one() {
    let ex = PoolExecutor::new(
        PoolConfig::new()
            .max_workers(1)
            .timeout(LONG)
            .maximum_process_uses(None)
            .process_config(config()),
    )
    .unwrap();
    let submit = |task: TestTask| {
        ex.submit(TaskRequest::new(task).encode().unwrap())
            .unwrap()
            .wait()
    };
    submit(TestTask::FailIfReused).unwrap();
    // A task that fails with "Too many open files" in the reused worker: the worker is replaced
    // and the task measured again there, where it succeeds; its result says what happened.
    let result = submit(TestTask::FailIfReused).unwrap();
    let leftover = find(&result.left_behind, "resources");
    assert!(
        leftover.detail.contains("ran out of file descriptors")
            && leftover.detail.contains("Too many open files")
            && leftover.detail.contains("had run 1 tasks before it")
            && leftover.detail.contains("measured again in a fresh worker"),
        "{leftover}"
    );
}

/// A task that uses up the descriptors itself, in a worker whose earlier task left none: it is
/// named as its own culprit, not an innocent before it, nor nobody.
#[test]
fn a_task_that_uses_up_a_resource_itself_is_named_as_the_culprit() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    assert_eq!(
        number(worker.run_task(TestTask::Square(3), LONG).unwrap()),
        9.0
    );
    let err = worker
        .run_task(TestTask::LeakThenFail(30), LONG)
        .unwrap_err();
    assert!(matches!(err, ProcessError::Remote(_)), "{err:?}");
    let leftover = find(worker.left_behind(), "resources");
    assert!(
        leftover.detail.contains("ran out of file descriptors")
            && leftover
                .detail
                .contains("likely culprit: this task itself (`test-tasks task `")
            && leftover.detail.contains(
                "which left 30 descriptors behind while it ran; the 1 tasks before it left none"
            ),
        "{leftover}"
    );
}

#[test]
fn a_crash_quote_under_rust_backtrace_keeps_the_cause() {
    let mut worker = TuningProcess::spawn(config().env("RUST_BACKTRACE", "1")).unwrap();
    let err = worker.run_task(TestTask::AllocFailure, LONG).unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, ProcessError::WorkerCrashed { .. }), "{err:?}");
    assert!(
        message.contains("memory allocation of 4294967296 bytes failed"),
        "{message}"
    );
    let ProcessError::WorkerCrashed { stderr_tail, .. } = err else {
        unreachable!()
    };
    // Where the worker printed a backtrace, its frames are one line of the quote.
    if stderr_tail.lines().count() > 20 {
        assert!(message.contains("backtrace frame lines]"), "{message}");
    }
}

/// `y = x * 1e-39f`: denormal results, which flush-to-zero turns into zeros (and makes fast).
/// With `LEAK` 1 the kernel first turns on flush-to-zero, denormals-are-zero and rounding toward
/// zero, and leaves them on, as a careless `-ffast-math` kernel does.
#[cfg(target_arch = "x86_64")]
const DENORMALS: &str = "#include <stdint.h>\n\
#include <xmmintrin.h>\n\
void scale(const float *x, float *y, int64_t n) {\n\
    if (LEAK) _mm_setcsr(_mm_getcsr() | 0x8040 | 0x6000);\n\
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * 1e-39f;\n\
}\n";

#[cfg(target_arch = "x86_64")]
#[test]
fn identical_c_choices_after_one_that_leaks_flush_to_zero_compute_alike() {
    use tunebox_protocol::{BenchmarkRequest, CKernel, DType, TensorSpec, TimingConfig};

    let request = |leak: &str| {
        BenchmarkRequest::new(CKernel::new(DENORMALS, "scale").define("LEAK", leak))
            .tensor(TensorSpec::new("x", DType::F32, [4096]).random(1))
            .tensor(TensorSpec::new("y", DType::F32, [4096]).output())
            .scalar("n", 4096)
            .timing(
                TimingConfig::default()
                    .warmup_ms(1.0)
                    .rep_ms(5.0)
                    .flush_cache(false),
            )
    };
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let fresh = worker.benchmark(request("0"), LONG).unwrap();
    assert!(
        fresh.outputs[0].bytes.iter().any(|&b| b != 0),
        "denormals, not zeros, in a fresh worker"
    );
    let culprit = worker.benchmark(request("1"), LONG).unwrap();
    let leftover = find(&culprit.left_behind, "floating-point environment");
    assert!(
        leftover.restored && leftover.detail.contains("flush-to-zero"),
        "{leftover}"
    );
    // The same code as the first choice, after the culprit in the same worker: the same bytes,
    // not the zeros (and the 10× speed) flush-to-zero would give it.
    let after = worker.benchmark(request("0"), LONG).unwrap();
    assert_eq!(after.outputs[0].bytes, fresh.outputs[0].bytes);
    assert!(after.left_behind.is_empty(), "{:?}", after.left_behind);
}
