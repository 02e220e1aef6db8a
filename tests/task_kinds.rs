//! A task kind defined outside tunebox's crates, as a downstream tool would: registered in the
//! test worker (`worker_main.rs`) and submitted by the tests in `tasks.rs`.

use serde::{Deserialize, Serialize};
use tunebox_bench::TaskContext;
use tunebox_protocol::{BenchError, Task};

/// What the test backend does with one task.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum TestTask {
    /// Answer `n * n`.
    Square(u64),
    /// Answer the sum of the request's first tensor, read as `f64`.
    SumTensor,
    /// Answer `len` bytes, `i % 251` each: a value that travels as shared memory.
    Blob(usize),
    /// Time a trivial closure with the context's `do_bench` helper.
    Timed,
    /// Panic inside the backend.
    Panic,
    /// Abort the worker.
    Abort,
    /// Never return.
    Hang,
}

/// What the test backend answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum TestOutput {
    /// A number.
    Number(f64),
    /// Bytes.
    Blob(Vec<u8>),
    /// The number of timed reps.
    Reps(u32),
}

impl Task for TestTask {
    const BACKEND: &'static str = "test-tasks";
    type Output = TestOutput;
}

/// The backend of [`TestTask`].
pub(crate) fn run(task: TestTask, cx: &mut TaskContext<'_>) -> Result<TestOutput, BenchError> {
    Ok(match task {
        TestTask::Square(n) => TestOutput::Number((n * n) as f64),
        TestTask::SumTensor => {
            let tensors = cx.allocate_tensors()?;
            let first = tensors.first().ok_or_else(|| BenchError::InvalidRequest {
                detail: "SumTensor needs a tensor".into(),
            })?;
            TestOutput::Number(first.as_slice::<f64>()?.iter().sum())
        }
        TestTask::Blob(len) => TestOutput::Blob((0..len).map(|i| (i % 251) as u8).collect()),
        TestTask::Timed => TestOutput::Reps(cx.bench(|| Ok(()))?.reps),
        TestTask::Panic => panic!("the test task panicked on purpose"),
        TestTask::Abort => std::process::abort(),
        TestTask::Hang => loop {
            std::thread::sleep(std::time::Duration::from_secs(1));
        },
    })
}
