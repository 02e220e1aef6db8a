//! Backends for task kinds defined outside tunebox ([`Task`]).

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tunebox_protocol::{
    BenchError, BenchmarkRequest, BenchmarkResult, Kernel, Scalar, Task, TensorData, TensorSpec,
    TimingConfig, TimingStats, decode, encode,
};

use crate::{Backend, HostTensor, Restore, Runner, do_bench_within};

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
    /// The tensors handed out by `allocate_tensors` that a timed closure must not write
    /// (inputs and `reset` tensors): their names and write flags.
    guarded: Vec<(String, Arc<AtomicBool>)>,
    /// Inputs a `bench_with` closure wrote, restored before every later call.
    mutated_inputs: Vec<String>,
}

impl<'a> TaskContext<'a> {
    /// The context of `request`, which began at `started`.
    pub fn new(request: &'a BenchmarkRequest, started: Instant) -> Self {
        TaskContext {
            request,
            started,
            stats: None,
            outputs: Vec::new(),
            guarded: Vec::new(),
            mutated_inputs: Vec::new(),
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

    /// Every tensor of the request, initialized from its spec: the same contents as in every
    /// other worker. A caller's shared buffer (`Init::Data`) is read in place
    /// ([`HostTensor::map`]: no copy until the task asks to write it); the rest is allocated
    /// ([`HostTensor::allocate`]).
    ///
    /// The context keeps watch of the inputs and `reset` tensors it hands out:
    /// [`TaskContext::bench`] refuses a closure that writes them (it could not put them back
    /// between calls); [`TaskContext::bench_with`] restores them.
    ///
    /// # Errors
    ///
    /// As [`HostTensor::allocate`]: a bad spec or no memory.
    pub fn allocate_tensors(&mut self) -> Result<Vec<HostTensor>, BenchError> {
        let mut tensors = self
            .request
            .tensors
            .iter()
            .map(HostTensor::map)
            .collect::<Result<Vec<_>, _>>()?;
        for tensor in &mut tensors {
            if !tensor.is_output() || tensor.resets_each_call() {
                let flag = tensor.watch_writes();
                self.guarded.push((tensor.name().to_owned(), flag));
            }
        }
        Ok(tensors)
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
    /// Every call must see the same inputs: a closure that writes an input or a `reset` tensor
    /// from [`TaskContext::allocate_tensors`] (takes mutable access to it) would time later
    /// calls on what earlier ones left (an in-place sort timing already sorted data), and
    /// `bench` cannot put it back, so the measurement is refused after the first call. Time
    /// such a closure with [`TaskContext::bench_with`], which restores them, or
    /// [`TaskContext::do_bench`] with a [`Runner`] whose [`Runner::restore`] does.
    ///
    /// # Errors
    ///
    /// As [`TaskContext::do_bench`]; an error of `call` ends the measurement;
    /// [`BenchError::InvalidRequest`] naming the tensor the closure wrote.
    pub fn bench<F>(&mut self, call: F) -> Result<TimingStats, BenchError>
    where
        F: FnMut() -> Result<(), BenchError>,
    {
        for (_, flag) in &self.guarded {
            flag.store(false, Ordering::Relaxed);
        }
        let guarded = std::mem::take(&mut self.guarded);
        let mut runner = ClosureRunner {
            call,
            guarded: &guarded,
            calls: 0,
        };
        let result = self.do_bench(&mut runner);
        self.guarded = guarded;
        result
    }

    /// Times `call` on `tensors` (those of [`TaskContext::allocate_tensors`]) as
    /// [`TaskContext::do_bench`] does, and gives every call the same inputs, as the C backend
    /// does: inputs (tensors not marked `output`) that the first call changed are put back
    /// before every later call, outside the timed window, and reported in the result's
    /// `mutated_inputs`; tensors marked `reset` are put back before every call. Outputs are
    /// left as the calls wrote them. Checking the inputs costs one pass over them after the
    /// first call; restoring, one copy of each changed input per call.
    ///
    /// ```
    /// # use tunebox_bench::TaskContext;
    /// # use tunebox_protocol::{BenchError, TaskRequest, DType, TensorSpec, TimingConfig};
    /// # fn sort(cx: &mut TaskContext<'_>) -> Result<f64, BenchError> {
    /// let mut tensors = cx.allocate_tensors()?;
    /// // An in-place sort: each call sorts the unsorted input again.
    /// let stats = cx.bench_with(&mut tensors, |t| {
    ///     t[0].as_mut_slice::<i32>()?.sort_unstable();
    ///     Ok(())
    /// })?;
    /// Ok(stats.median_ms)
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`TaskContext::do_bench`]; an error of `call` ends the measurement.
    pub fn bench_with<F>(
        &mut self,
        tensors: &mut [HostTensor],
        call: F,
    ) -> Result<TimingStats, BenchError>
    where
        F: FnMut(&mut [HostTensor]) -> Result<(), BenchError>,
    {
        let mut runner = TensorRunner {
            tensors,
            call,
            calls: 0,
            restore: None,
            written: Vec::new(),
        };
        let result = self.do_bench(&mut runner);
        for name in runner.written {
            if !self.mutated_inputs.contains(&name) {
                self.mutated_inputs.push(name);
            }
        }
        result
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

/// A closure timed by [`TaskContext::bench`], which refuses to go on once it wrote a tensor it
/// may not.
struct ClosureRunner<'g, F> {
    call: F,
    guarded: &'g [(String, Arc<AtomicBool>)],
    calls: u32,
}

impl<F: FnMut() -> Result<(), BenchError>> Runner for ClosureRunner<'_, F> {
    fn run(&mut self) -> Result<(), BenchError> {
        self.calls += 1;
        (self.call)()
    }

    fn flush(&mut self) -> Result<(), BenchError> {
        Ok(())
    }

    fn restore(&mut self) -> Result<(), BenchError> {
        if self.calls == 0 {
            return Ok(());
        }
        match self.guarded.iter().find(|(_, w)| w.load(Ordering::Relaxed)) {
            None => Ok(()),
            Some((name, _)) => Err(BenchError::InvalidRequest {
                detail: format!(
                    "the closure timed by TaskContext::bench writes tensor `{name}` (it takes \
                     mutable access to an input or a `reset` tensor), so later calls would run \
                     on what earlier ones left; time it with TaskContext::bench_with(&mut \
                     tensors, |t| …), which puts inputs back before every call, or mark the \
                     tensor as an output if its contents do not matter"
                ),
            }),
        }
    }
}

/// A closure timed by [`TaskContext::bench_with`] on tensors it may write.
struct TensorRunner<'t, F> {
    tensors: &'t mut [HostTensor],
    call: F,
    calls: u32,
    /// The tensors put back before every call, once the first call showed which inputs it
    /// writes (the rule of every backend: [`Restore`]).
    restore: Option<Restore>,
    /// The inputs the first call wrote.
    written: Vec<String>,
}

impl<F: FnMut(&mut [HostTensor]) -> Result<(), BenchError>> Runner for TensorRunner<'_, F> {
    fn run(&mut self) -> Result<(), BenchError> {
        self.calls += 1;
        (self.call)(self.tensors)
    }

    fn flush(&mut self) -> Result<(), BenchError> {
        Ok(())
    }

    fn restore(&mut self) -> Result<(), BenchError> {
        if self.calls == 0 {
            // Fresh from their specs.
            return Ok(());
        }
        if self.restore.is_none() {
            let specs: Vec<TensorSpec> = self.tensors.iter().map(HostTensor::spec).collect();
            let mut restore = Restore::resets(&specs);
            let tensors = &*self.tensors;
            self.written = restore
                .add_written_inputs(&specs, |i| {
                    Ok::<_, std::convert::Infallible>(!tensors[i].is_pristine())
                })
                .unwrap_or_else(|never| match never {});
            self.restore = Some(restore);
        }
        for &i in self.restore.iter().flat_map(Restore::indices) {
            self.tensors[i].reset();
        }
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
        Ok(
            BenchmarkResult::new(context.stats.unwrap_or_else(TimingStats::unmeasured))
                .with_value(Some(encode(&output)?))
                .with_outputs(context.outputs)
                .with_mutated_inputs(context.mutated_inputs),
        )
    }
}

#[cfg(test)]
mod tests {
    use serde::{Deserialize, Serialize};
    use tunebox_protocol::{TaskRequest, TensorSpec, decode_output};

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
        let timing = TimingConfig::default().warmup_ms(0.1).rep_ms(0.5);
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

    #[derive(Serialize, Deserialize)]
    struct Sort;

    impl Task for Sort {
        const BACKEND: &'static str = "sorts";
        type Output = Vec<String>;
    }

    fn quick() -> TimingConfig {
        TimingConfig::default().warmup_ms(0.1).rep_ms(0.5)
    }

    fn sort_request() -> BenchmarkRequest {
        TaskRequest::new(Sort)
            .tensor(TensorSpec::new("x", tunebox_protocol::DType::I32, [1000]).random(7))
            .timing(quick())
            .encode()
            .unwrap()
    }

    #[test]
    fn bench_with_gives_an_in_place_sort_unsorted_data_every_call() {
        let mut backend = TaskBackend::new(|_: Sort, cx: &mut TaskContext<'_>| {
            let mut tensors = cx.allocate_tensors()?;
            let mut sorted_before = 0;
            let stats = cx.bench_with(&mut tensors, |t| {
                let x = t[0].as_mut_slice::<i32>()?;
                if x.is_sorted() {
                    sorted_before += 1;
                }
                x.sort_unstable();
                Ok(())
            })?;
            assert_eq!(sorted_before, 0, "every call sorts unsorted data");
            Ok(vec![stats.reps.to_string()])
        });
        let result = backend.benchmark(&sort_request()).unwrap();
        assert_eq!(result.mutated_inputs, vec!["x".to_owned()]);
    }

    #[test]
    fn bench_refuses_a_closure_that_writes_an_input() {
        let mut backend = TaskBackend::new(|_: Sort, cx: &mut TaskContext<'_>| {
            let mut tensors = cx.allocate_tensors()?;
            cx.bench(|| {
                tensors[0].as_mut_slice::<i32>()?.sort_unstable();
                Ok(())
            })?;
            Ok(Vec::new())
        });
        let err = backend.benchmark(&sort_request()).unwrap_err().to_string();
        assert!(
            err.contains("writes tensor `x`") && err.contains("bench_with"),
            "{err}"
        );
        // Reading is fine.
        let mut backend = TaskBackend::new(|_: Sort, cx: &mut TaskContext<'_>| {
            let tensors = cx.allocate_tensors()?;
            let stats = cx.bench(|| {
                std::hint::black_box(tensors[0].as_slice::<i32>()?.iter().sum::<i32>());
                Ok(())
            })?;
            Ok(vec![stats.reps.to_string()])
        });
        let result = backend.benchmark(&sort_request()).unwrap();
        assert!(result.mutated_inputs.is_empty());
    }

    #[test]
    fn shared_inputs_are_read_in_place_and_copied_only_when_written() {
        let bytes: Vec<u8> = (0..4096u32).flat_map(|v| v.to_ne_bytes()).collect();
        let buffer = tunebox_protocol::SharedBuffer::from_slice(&bytes).unwrap();
        let request = TaskRequest::new(Sort)
            .tensor(TensorSpec::new("x", tunebox_protocol::DType::I32, [4096]).data(buffer.share()))
            .encode()
            .unwrap();
        let mut context = TaskContext::new(&request, Instant::now());
        let mut tensors = context.allocate_tensors().unwrap();
        assert!(tensors[0].is_mapped());
        assert_eq!(
            tensors[0].bytes().as_ptr(),
            buffer.as_slice().as_ptr(),
            "no copy"
        );
        tensors[0].as_mut_slice::<i32>().unwrap()[0] = -1;
        assert!(!tensors[0].is_mapped());
        assert_eq!(tensors[0].as_slice::<i32>().unwrap()[..2], [-1, 1]);
        assert_eq!(
            buffer.as_slice()[..4],
            0u32.to_ne_bytes(),
            "the caller's buffer is intact"
        );
        tensors[0].check_bounds().unwrap();
        tensors[0].reset();
        assert!(tensors[0].is_pristine());
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
