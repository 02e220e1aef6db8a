//! Backends for task kinds defined outside tunebox ([`Task`]).

use std::marker::PhantomData;
use std::time::Instant;

use tunebox_protocol::{
    BenchError, BenchmarkRequest, BenchmarkResult, Kernel, Scalar, Task, TensorData, TensorSpec,
    TimingConfig, TimingStats, decode, encode,
};

use crate::{Backend, HostTensor, Runner, do_bench_within};

/// What the backend of a task kind sees of the request it runs, and the timing helpers it
/// measures with.
///
/// The tensors, scalars and timing budget are the ones the parent put in its
/// [`TaskRequest`](tunebox_protocol::TaskRequest). Measuring through [`TaskContext::do_bench`]
/// or [`TaskContext::bench`] follows the request's budget (which `TuningProcess` fits to the
/// timeout) and reports progress for the parent's timeout errors, as the built-in backends do;
/// the last measurement's statistics also fill the untyped reply's `stats`.
pub struct TaskContext<'a> {
    request: &'a BenchmarkRequest,
    started: Instant,
    stats: Option<TimingStats>,
    outputs: Vec<TensorData>,
}

impl<'a> TaskContext<'a> {
    /// The context of `request`, which began at `started`.
    pub fn new(request: &'a BenchmarkRequest, started: Instant) -> Self {
        TaskContext {
            request,
            started,
            stats: None,
            outputs: Vec::new(),
        }
    }

    /// The tensor specs of the request, in order.
    pub fn tensors(&self) -> &[TensorSpec] {
        &self.request.tensors
    }

    /// The scalars of the request, in order.
    pub fn scalars(&self) -> &[Scalar] {
        &self.request.scalars
    }

    /// The scalar called `name`, if the request has one (`Scalar::value` for an integer,
    /// `Scalar::as_f64` for any kind).
    pub fn scalar(&self, name: &str) -> Option<&Scalar> {
        self.request.scalars.iter().find(|s| s.name == name)
    }

    /// The warmup and rep budget (`budget_ms` included).
    pub fn timing(&self) -> &TimingConfig {
        &self.request.timing
    }

    /// Allocates and initializes every tensor of the request ([`HostTensor::allocate`]): the
    /// same contents as in every other worker, shared-memory data copied in.
    ///
    /// # Errors
    ///
    /// As [`HostTensor::allocate`]: a bad spec or no memory.
    pub fn allocate_tensors(&self) -> Result<Vec<HostTensor>, BenchError> {
        self.request
            .tensors
            .iter()
            .map(HostTensor::allocate)
            .collect()
    }

    /// Times `runner` as triton's `do_bench` ([`do_bench_within`]) under the request's timing
    /// budget, counted from the request's start, and returns the statistics (ms).
    ///
    /// # Errors
    ///
    /// As [`do_bench_within`]: a bad timing config, [`BenchError::DoesNotFit`], or the
    /// runner's own error.
    pub fn do_bench<R: Runner + ?Sized>(
        &mut self,
        runner: &mut R,
    ) -> Result<TimingStats, BenchError> {
        let stats = do_bench_within(runner, &self.request.timing, self.started)?;
        self.stats = Some(stats.clone());
        Ok(stats)
    }

    /// Times the closure `call` as [`TaskContext::do_bench`] does, without a cache flush
    /// between reps (a closure's data is its own; flush it inside `call`, or implement
    /// [`Runner`], when cold caches matter).
    ///
    /// # Errors
    ///
    /// As [`TaskContext::do_bench`]; an error of `call` ends the measurement.
    pub fn bench<F>(&mut self, call: F) -> Result<TimingStats, BenchError>
    where
        F: FnMut() -> Result<(), BenchError>,
    {
        self.do_bench(&mut ClosureRunner(call))
    }

    /// Returns `tensor` to the parent with the reply (in `BenchmarkResult::outputs`, shared
    /// memory when large).
    pub fn output(&mut self, tensor: TensorData) {
        self.outputs.push(tensor);
    }
}

/// A type name without its module paths (`a::b::Foo<c::Bar>` is `Foo<Bar>`): a parent and a
/// separate worker binary that share a task type's source still name it in different crates.
fn unqualified(type_name: &str) -> String {
    let mut out = String::with_capacity(type_name.len());
    let mut segment = String::new();
    for c in type_name.chars() {
        if c.is_alphanumeric() || c == '_' || c == ':' {
            segment.push(c);
        } else {
            out.push_str(segment.rsplit("::").next().unwrap_or_default());
            segment.clear();
            out.push(c);
        }
    }
    out.push_str(segment.rsplit("::").next().unwrap_or_default());
    out
}

struct ClosureRunner<F>(F);

impl<F: FnMut() -> Result<(), BenchError>> Runner for ClosureRunner<F> {
    fn run(&mut self) -> Result<(), BenchError> {
        (self.0)()
    }

    fn flush(&mut self) -> Result<(), BenchError> {
        Ok(())
    }
}

/// The [`Backend`] of task kind `T`: decodes each task, calls `run` with it and its
/// [`TaskContext`], and encodes what it returns. Built by
/// `tunebox_worker::Registry::with_task`; named [`Task::BACKEND`].
pub struct TaskBackend<T, F> {
    run: F,
    task: PhantomData<fn(T)>,
}

impl<T, F> TaskBackend<T, F>
where
    T: Task,
    F: FnMut(T, &mut TaskContext<'_>) -> Result<T::Output, BenchError>,
{
    /// The backend that runs tasks of kind `T` with `run`.
    pub fn new(run: F) -> Self {
        TaskBackend {
            run,
            task: PhantomData,
        }
    }
}

impl<T, F> Backend for TaskBackend<T, F>
where
    T: Task,
    F: FnMut(T, &mut TaskContext<'_>) -> Result<T::Output, BenchError>,
{
    fn name(&self) -> &'static str {
        T::BACKEND
    }

    fn benchmark(&mut self, request: &BenchmarkRequest) -> Result<BenchmarkResult, BenchError> {
        let started = Instant::now();
        let Kernel::Task(kernel) = &request.kernel else {
            return Err(BenchError::InvalidRequest {
                detail: format!(
                    "the `{}` backend runs `{}` tasks, not {} kernels",
                    T::BACKEND,
                    std::any::type_name::<T>(),
                    request.kernel.backend()
                ),
            });
        };
        let ours = std::any::type_name::<T>();
        if unqualified(&kernel.task_type) != unqualified(ours) {
            return Err(BenchError::Decode {
                detail: format!(
                    "the task: the parent sent a `{}` to the `{}` backend, which runs `{ours}` in \
                     this worker (two task types under one backend name, or a worker built from \
                     another version of the program)",
                    kernel.task_type,
                    T::BACKEND
                ),
            });
        }
        let task: T = decode(&kernel.payload)?;
        let mut context = TaskContext::new(request, started);
        let output = (self.run)(task, &mut context)?;
        Ok(BenchmarkResult {
            stats: context.stats.unwrap_or_else(TimingStats::unmeasured),
            value: Some(encode(&output)?),
            outputs: context.outputs,
            outputs_after_reps: Vec::new(),
            mutated_inputs: Vec::new(),
            integrity: Default::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};
    use tunebox_protocol::{TaskRequest, decode_output};

    use super::*;

    #[derive(Serialize, Deserialize)]
    struct Square(u32);

    impl Task for Square {
        const BACKEND: &'static str = "squares";
        type Output = (u64, String);
    }

    #[test]
    fn a_task_round_trips_through_its_backend() {
        let mut backend = TaskBackend::new(|task: Square, cx: &mut TaskContext<'_>| {
            let stats = cx.bench(|| Ok(()))?;
            Ok((u64::from(task.0).pow(2), format!("{} reps", stats.reps)))
        });
        let timing = TimingConfig {
            warmup_ms: 0.1,
            rep_ms: 0.5,
            ..TimingConfig::default()
        };
        let request = TaskRequest::new(Square(12))
            .timing(timing)
            .encode()
            .unwrap();
        let result = backend.benchmark(&request).unwrap();
        let (square, note) = decode_output::<Square>(&result).unwrap();
        assert_eq!(square, 144);
        assert_eq!(note, format!("{} reps", result.stats.reps));
        assert!(result.stats.reps >= 10 && !result.stats.median_ms.is_nan());
    }

    #[test]
    fn a_task_that_times_nothing_reports_unmeasured_stats() {
        let mut backend = TaskBackend::new(|task: Square, cx: &mut TaskContext<'_>| {
            assert_eq!(cx.scalar("k").map(|s| s.value), Some(3));
            assert_eq!(cx.scalar("missing"), None);
            Ok((u64::from(task.0), String::new()))
        });
        let request = TaskRequest::new(Square(2)).scalar("k", 3).encode().unwrap();
        let result = backend.benchmark(&request).unwrap();
        assert!(result.stats.median_ms.is_nan());
        assert_eq!(result.stats.stopped, "unmeasured");
    }

    #[test]
    fn garbage_payloads_and_foreign_kernels_are_clear_errors() {
        let mut backend =
            TaskBackend::new(|_: Square, _: &mut TaskContext<'_>| Ok((0, String::new())));
        let mut request = TaskRequest::new(Square(2)).encode().unwrap();
        if let Kernel::Task(kernel) = &mut request.kernel {
            kernel.payload = tunebox_protocol::Bytes::from_vec(vec![0xff; 9]).unwrap();
        }
        let err = backend.benchmark(&request).unwrap_err().to_string();
        assert!(
            err.contains("could not decode") && err.contains("Square"),
            "{err}"
        );
        let foreign =
            BenchmarkRequest::new(Kernel::Diagnostic(tunebox_protocol::DiagnosticTask::Hang));
        let err = backend.benchmark(&foreign).unwrap_err().to_string();
        assert!(err.contains("runs") && err.contains("diagnostics"), "{err}");
    }
}
