//! Task kinds defined outside tunebox: a downstream crate's own serde task and result types.
//!
//! Inductor's `TuningProcess` runs any `BenchmarkRequest` subclass and TVM's `PopenPoolExecutor`
//! runs any picklable function; tunebox's counterpart is the [`Task`] trait. A crate implements it
//! for its task type (any serde type), names the backend that runs it in the worker
//! ([`Task::BACKEND`]) and its result type ([`Task::Output`], any serde type). On the wire a task
//! travels as [`Kernel::Task`](crate::Kernel::Task): the backend's name and the task encoded with
//! postcard, in shared memory when large (as every [`Bytes`]); its result comes back in
//! [`BenchmarkResult::value`](crate::BenchmarkResult::value), encoded the same way.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::{
    BenchError, BenchmarkRequest, BenchmarkResult, Bytes, Kernel, Scalar, TaskKernel, TensorSpec,
    TimingConfig,
};

/// A kind of work a downstream crate defines and a backend of its own runs in the worker.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use tunebox_protocol::{BenchmarkRequest, Task, TaskRequest};
///
/// /// Sum the first `n` integers, in a worker.
/// #[derive(Serialize, Deserialize)]
/// struct SumTo { n: u64 }
///
/// impl Task for SumTo {
///     const BACKEND: &'static str = "sums";
///     type Output = u64;
/// }
///
/// let request: BenchmarkRequest = TaskRequest::new(SumTo { n: 10 }).encode()?;
/// assert_eq!(request.kernel.backend(), "sums");
/// # Ok::<(), tunebox_protocol::BenchError>(())
/// ```
pub trait Task: Serialize + DeserializeOwned + Send + 'static {
    /// The name of the worker backend that runs this task (registered in the worker with
    /// `tunebox_worker::Registry::with_task`). A worker without it answers
    /// [`BenchError::UnknownBackend`], naming the backends it has. Choose a name unlikely to
    /// clash: the crate's name is a good one. `cpu`, `cuda` and `diagnostics` are tunebox's.
    const BACKEND: &'static str;
    /// What the backend returns for one task (timing statistics, a figure of merit, anything
    /// serde can encode).
    type Output: Serialize + DeserializeOwned + Send + 'static;
}

/// A [`Task`] with the tensors, scalars and timing budget it runs with: what the typed
/// `submit_task`/`run_task` methods of `tunebox-process` and `tunebox-pool` take. A bare task
/// converts into one with no tensors and the default [`TimingConfig`].
///
/// The worker allocates the tensors from their specs (shared-memory data included) for the
/// backend, which reaches them, the scalars and the timing budget through its task context.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TaskRequest<T> {
    /// The task.
    pub task: T,
    /// Tensors the worker allocates and initializes for the backend.
    pub tensors: Vec<TensorSpec>,
    /// Integer scalars, for the backend to use as it likes.
    pub scalars: Vec<Scalar>,
    /// The warmup and rep budget the backend's `do_bench` calls follow.
    pub timing: TimingConfig,
}

impl<T: Task> TaskRequest<T> {
    /// `task` with no tensors or scalars and the default [`TimingConfig`].
    pub fn new(task: T) -> Self {
        TaskRequest {
            task,
            tensors: Vec::new(),
            scalars: Vec::new(),
            timing: TimingConfig::default(),
        }
    }

    /// Adds a tensor.
    pub fn tensor(mut self, spec: TensorSpec) -> Self {
        self.tensors.push(spec);
        self
    }

    /// Adds an integer scalar.
    pub fn scalar(mut self, name: impl Into<String>, value: i64) -> Self {
        self.scalars.push(Scalar::new(name, value));
        self
    }

    /// Sets the timing budget.
    pub fn timing(mut self, timing: TimingConfig) -> Self {
        self.timing = timing;
        self
    }

    /// The request that carries this task to a worker.
    ///
    /// # Errors
    ///
    /// [`BenchError::InvalidRequest`] when the task cannot be encoded (a serde error of the
    /// task type) or its payload does not fit in shared memory.
    pub fn encode(&self) -> Result<BenchmarkRequest, BenchError> {
        Ok(BenchmarkRequest {
            kernel: Kernel::Task(TaskKernel {
                backend: T::BACKEND.to_owned(),
                task_type: std::any::type_name::<T>().to_owned(),
                payload: encode(&self.task)?,
            }),
            tensors: self.tensors.clone(),
            scalars: self.scalars.clone(),
            timing: self.timing.clone(),
            args: Vec::new(),
        })
    }
}

impl<T: Task> From<T> for TaskRequest<T> {
    fn from(task: T) -> Self {
        TaskRequest::new(task)
    }
}

/// Encodes a task or a result with postcard, into shared memory when large.
///
/// # Errors
///
/// [`BenchError::InvalidRequest`] naming the type when serde fails or no shared memory is left.
pub fn encode<V: Serialize + ?Sized>(value: &V) -> Result<Bytes, BenchError> {
    let bytes = postcard::to_stdvec(value).map_err(|e| BenchError::InvalidRequest {
        detail: format!("could not encode a `{}`: {e}", std::any::type_name::<V>()),
    })?;
    Bytes::from_vec(bytes).map_err(|e| BenchError::Failed {
        message: e.to_string(),
    })
}

/// Decodes what [`encode`] produced: exactly one `V`, with no bytes left over.
///
/// # Errors
///
/// [`BenchError::Decode`] naming the type when the bytes are not a `V`, or are a `V` followed by
/// more (the parent and the worker were built from different versions of the type).
pub fn decode<V: DeserializeOwned>(bytes: &[u8]) -> Result<V, BenchError> {
    let fail = |why: String| BenchError::Decode {
        detail: format!(
            "{} bytes are not a `{}`: {why} (are the parent and the worker built from the same \
             version of this type?)",
            bytes.len(),
            std::any::type_name::<V>(),
        ),
    };
    match postcard::take_from_bytes(bytes) {
        Ok((value, [])) => Ok(value),
        Ok((_, rest)) => Err(fail(format!("{} bytes are left over", rest.len()))),
        Err(e) => Err(fail(e.to_string())),
    }
}

/// Decodes the typed result of a task of kind `T` from a worker's reply (in the parent).
///
/// # Errors
///
/// [`BenchError::Decode`] when the reply carries no value (the backend of that name is not a
/// task backend) or the value is not a `T::Output`; the message says it is the reply of
/// `T::BACKEND`.
pub fn decode_output<T: Task>(result: &BenchmarkResult) -> Result<T::Output, BenchError> {
    let value = result.value.as_ref().ok_or_else(|| BenchError::Decode {
        detail: format!(
            "the reply of the worker's `{}` backend: it carries no value, so that backend is not \
             the task backend of `{}`",
            T::BACKEND,
            std::any::type_name::<T>()
        ),
    })?;
    decode(value).map_err(|e| match e {
        BenchError::Decode { detail } => BenchError::Decode {
            detail: format!(
                "the reply of the worker's `{}` backend: {detail}",
                T::BACKEND
            ),
        },
        other => other,
    })
}
