//! What a parent asks a worker to measure.

use serde::{Deserialize, Serialize};

use crate::{BenchError, Bytes, CudaCode, CudaKernel, DType, Define, SharedData};

/// One measurement: a kernel, the tensors and scalars it is called with, and how to time it.
///
/// The worker allocates the tensors from their specs, calls the kernel once (its outputs are
/// returned for verification), then times it as triton's `do_bench` does (see [`TimingConfig`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BenchmarkRequest {
    /// What to run; also selects the backend ([`Kernel::backend`]).
    pub kernel: Kernel,
    /// Tensors, passed to the kernel as pointers.
    pub tensors: Vec<TensorSpec>,
    /// Scalars, passed by value, each as its C type ([`ScalarKind`]: `int64_t` by default).
    pub scalars: Vec<Scalar>,
    /// Warmup and repetition budget.
    pub timing: TimingConfig,
    /// The order of the kernel's arguments, as Kernel Tuner's argument list gives it (scalars
    /// may come before tensors): every tensor and every scalar exactly once, by index. Empty
    /// (the default): every tensor in order, then every scalar in order. Checked by
    /// [`BenchmarkRequest::arg_order`]; the builder methods fill it in when a tensor follows
    /// a scalar.
    #[serde(default)]
    pub args: Vec<Arg>,
}

impl BenchmarkRequest {
    /// A request for `kernel` (a [`Kernel`], or a [`CKernel`], [`CudaKernel`] or
    /// [`DiagnosticTask`] directly) with no tensors, no scalars and the default
    /// [`TimingConfig`]. Add the arguments with [`tensor`](BenchmarkRequest::tensor),
    /// [`scalar`](BenchmarkRequest::scalar) and [`typed_scalar`](BenchmarkRequest::typed_scalar)
    /// in the order the kernel takes them (scalars may come first, as in Kernel Tuner's
    /// argument lists).
    ///
    /// ```
    /// use tunebox_protocol::{BenchmarkRequest, CKernel, DType, TensorSpec, TimingConfig};
    ///
    /// const SOURCE: &str = "#include <stdint.h>
    /// void saxpy(float *x, float *y, int64_t n) { for (int64_t i = 0; i < n; i++) y[i] += 2 * x[i]; }";
    /// let request = BenchmarkRequest::new(CKernel::new(SOURCE, "saxpy").define("BLOCK", 64))
    ///     .tensor(TensorSpec::new("x", DType::F32, [1 << 20]).random(1))
    ///     .tensor(TensorSpec::new("y", DType::F32, [1 << 20]).output())
    ///     .scalar("n", 1 << 20)
    ///     .timing(TimingConfig::default().rep_ms(50.0));
    /// assert_eq!(request.kernel.backend(), "cpu");
    /// assert_eq!((request.tensors.len(), request.scalars[0].value), (2, 1 << 20));
    /// ```
    pub fn new(kernel: impl Into<Kernel>) -> Self {
        Self {
            kernel: kernel.into(),
            tensors: Vec::new(),
            scalars: Vec::new(),
            timing: TimingConfig::default(),
            args: Vec::new(),
        }
    }

    /// Appends a tensor argument: the kernel gets it as a pointer, after the arguments added
    /// before it. A tensor added after a scalar makes the order explicit in
    /// [`args`](BenchmarkRequest#structfield.args).
    ///
    /// ```
    /// use tunebox_protocol::{Arg, BenchmarkRequest, CKernel, DType, TensorSpec};
    ///
    /// // void k(int64_t n, float *y): the scalar first, as Kernel Tuner passes `[n, y]`.
    /// let request = BenchmarkRequest::new(CKernel::new("…", "k"))
    ///     .scalar("n", 4)
    ///     .tensor(TensorSpec::new("y", DType::F32, [4]).output());
    /// assert_eq!(request.args, [Arg::Scalar(0), Arg::Tensor(0)]);
    /// ```
    pub fn tensor(mut self, tensor: TensorSpec) -> Self {
        if self.args.is_empty() && !self.scalars.is_empty() {
            self.args = self.default_order();
        }
        if !self.args.is_empty() {
            self.args.push(Arg::Tensor(index(self.tensors.len())));
        }
        self.tensors.push(tensor);
        self
    }

    /// Appends an integer argument `name = value`, passed as `int64_t` after the arguments
    /// added before it.
    pub fn scalar(self, name: impl Into<String>, value: i64) -> Self {
        self.typed_scalar(Scalar::new(name, value))
    }

    /// Appends a scalar of any [`ScalarKind`] (`Scalar::f32("alpha", 0.5)`, …), passed by value
    /// as its C type after the arguments added before it.
    pub fn typed_scalar(mut self, scalar: Scalar) -> Self {
        if !self.args.is_empty() {
            self.args.push(Arg::Scalar(index(self.scalars.len())));
        }
        self.scalars.push(scalar);
        self
    }

    /// Replaces the argument order (see [`args`](BenchmarkRequest#structfield.args)); checked
    /// when the request runs ([`BenchmarkRequest::arg_order`]).
    pub fn args(mut self, args: impl IntoIterator<Item = Arg>) -> Self {
        self.args = args.into_iter().collect();
        self
    }

    /// The order of the kernel's arguments: [`args`](BenchmarkRequest#structfield.args), or
    /// every tensor then every scalar when it is empty.
    ///
    /// # Errors
    ///
    /// [`BenchError::InvalidRequest`] naming the first problem: an index past the tensors or
    /// scalars, an argument given twice, or one left out.
    ///
    /// ```
    /// use tunebox_protocol::{Arg, BenchmarkRequest, CKernel, DType, TensorSpec};
    ///
    /// let request = BenchmarkRequest::new(CKernel::new("…", "k"))
    ///     .tensor(TensorSpec::new("y", DType::F32, [4]))
    ///     .scalar("n", 4);
    /// assert_eq!(request.arg_order()?, [Arg::Tensor(0), Arg::Scalar(0)]);
    /// let twice = request.args([Arg::Tensor(0), Arg::Tensor(0)]);
    /// let err = twice.arg_order().unwrap_err().to_string();
    /// assert!(err.contains("tensor 0 (`y`) is given twice"), "{err}");
    /// # Ok::<(), tunebox_protocol::BenchError>(())
    /// ```
    pub fn arg_order(&self) -> Result<Vec<Arg>, BenchError> {
        let label = |arg: Arg| match arg {
            Arg::Tensor(i) | Arg::Untyped(i) => match self.tensors.get(i as usize) {
                Some(t) => format!("tensor {i} (`{}`)", t.name),
                None => format!("tensor {i}"),
            },
            Arg::Scalar(i) => match self.scalars.get(i as usize) {
                Some(s) => format!("scalar {i} (`{}`)", s.name),
                None => format!("scalar {i}"),
            },
        };
        resolve_order(&self.args, self.tensors.len(), self.scalars.len(), label)
            .map_err(|detail| BenchError::InvalidRequest { detail })
    }

    /// Checks every scalar ([`Scalar::check`]) and the argument order, and returns the order
    /// ([`BenchmarkRequest::arg_order`]): what a backend calls before running the request.
    ///
    /// # Errors
    ///
    /// [`BenchError::InvalidRequest`] naming the first bad scalar or the order's problem.
    pub fn check_args(&self) -> Result<Vec<Arg>, BenchError> {
        self.scalars.iter().try_for_each(Scalar::check)?;
        self.arg_order()
    }

    /// Every tensor, then every scalar: the order an empty `args` stands for.
    fn default_order(&self) -> Vec<Arg> {
        default_order(self.tensors.len(), self.scalars.len())
    }

    /// Whether the worker returns the contents of tensor `spec`: marked `output`, in a request
    /// whose timing returns outputs ([`TimingConfig::return_outputs`]).
    ///
    /// ```
    /// use tunebox_protocol::{BenchmarkRequest, CKernel, DType, TensorSpec, TimingConfig};
    ///
    /// let y = TensorSpec::new("y", DType::F32, [4]).output();
    /// let request = BenchmarkRequest::new(CKernel::new("…", "k")).tensor(y.clone());
    /// assert!(request.returns(&y));
    /// let round = request.timing(TimingConfig::default().return_outputs(false));
    /// assert!(!round.returns(&y) && round.tensors[0].output);
    /// ```
    pub fn returns(&self, spec: &TensorSpec) -> bool {
        spec.output && self.timing.return_outputs
    }

    /// Replaces the warmup and repetition budget (default: [`TimingConfig::default`]).
    pub fn timing(mut self, timing: TimingConfig) -> Self {
        self.timing = timing;
        self
    }

    /// How many shared-memory regions this request carries (each travels as a file
    /// descriptor; one message carries at most
    /// [`MAX_SHARED_PAYLOADS`](crate::MAX_SHARED_PAYLOADS)).
    pub fn shared_payloads(&self) -> usize {
        let data = self
            .tensors
            .iter()
            .filter(|t| matches!(t.init, Init::Data(_)))
            .count();
        let bytes = match &self.kernel {
            Kernel::Diagnostic(DiagnosticTask::Echo { bytes })
            | Kernel::Diagnostic(DiagnosticTask::Remember { bytes })
            | Kernel::Cuda(CudaKernel {
                code: CudaCode::Cubin(bytes),
                ..
            }) => usize::from(bytes.is_shared()),
            Kernel::Task(task) => task.shared_payloads(),
            _ => 0,
        };
        data + bytes
    }

    /// Approximate size in bytes of the variable-length data this request carries inline (source
    /// text, names, flags); compare with
    /// [`MAX_INLINE_REQUEST_BYTES`](crate::MAX_INLINE_REQUEST_BYTES).
    pub fn inline_bytes(&self) -> usize {
        let kernel = match &self.kernel {
            Kernel::C(c) => {
                c.source.len()
                    + c.source_name.len()
                    + c.entry.len()
                    + c.compiler.len()
                    + c.flags.iter().map(String::len).sum::<usize>()
                    + c.defines
                        .iter()
                        .map(|d| d.name.len() + d.value.len())
                        .sum::<usize>()
            }
            Kernel::Cuda(k) => {
                let code = match &k.code {
                    CudaCode::Source { text, name } => text.len() + name.len(),
                    CudaCode::Ptx(text) => text.len(),
                    CudaCode::Cubin(_) => 0,
                };
                code + k.entry.len()
                    + k.options.iter().map(String::len).sum::<usize>()
                    + k.defines
                        .iter()
                        .map(|d| d.name.len() + d.value.len())
                        .sum::<usize>()
            }
            // Large payloads travel as shared memory: only a handle is inline.
            Kernel::Diagnostic(_) => 0,
            Kernel::Task(task) => {
                task.backend.len()
                    + if task.payload.is_shared() {
                        0
                    } else {
                        task.payload.len()
                    }
            }
        };
        let tensors: usize = self
            .tensors
            .iter()
            .map(|t| t.name.len() + 8 * t.shape.len())
            .sum();
        let scalars: usize = self.scalars.iter().map(|s| s.name.len() + 17).sum();
        kernel + tensors + scalars + 5 * self.args.len()
    }
}

/// An argument index as stored in [`Arg`] (requests never hold 2^32 arguments).
fn index(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

/// `tensors` tensors then `scalars` scalars, in order.
fn default_order(tensors: usize, scalars: usize) -> Vec<Arg> {
    (0..tensors)
        .map(|i| Arg::Tensor(index(i)))
        .chain((0..scalars).map(|i| Arg::Scalar(index(i))))
        .collect()
}

/// `args` checked against `tensors` tensors and `scalars` scalars (the default order when it
/// is empty); `label` names an argument in the error.
fn resolve_order(
    args: &[Arg],
    tensors: usize,
    scalars: usize,
    label: impl Fn(Arg) -> String,
) -> Result<Vec<Arg>, String> {
    if args.is_empty() {
        return Ok(default_order(tensors, scalars));
    }
    let mut tensor_at = vec![None; tensors];
    let mut scalar_at = vec![None; scalars];
    for (position, &arg) in args.iter().enumerate() {
        let (slots, what, count) = match arg {
            Arg::Tensor(_) | Arg::Untyped(_) => (&mut tensor_at, "tensors", tensors),
            Arg::Scalar(_) => (&mut scalar_at, "scalars", scalars),
        };
        let i = arg.index() as usize;
        let Some(slot) = slots.get_mut(i) else {
            return Err(format!(
                "argument {position} of the argument order is {}, but the request has {count} \
                 {what}",
                label(arg)
            ));
        };
        if let Some(first) = *slot {
            return Err(format!(
                "{} is given twice in the argument order (arguments {first} and {position}); \
                 each tensor and scalar must appear exactly once",
                label(arg)
            ));
        }
        *slot = Some(position);
    }
    let missing = tensor_at
        .iter()
        .position(Option::is_none)
        .map(|i| Arg::Tensor(index(i)))
        .or_else(|| {
            scalar_at
                .iter()
                .position(Option::is_none)
                .map(|i| Arg::Scalar(index(i)))
        });
    if let Some(arg) = missing {
        return Err(format!(
            "{} is missing from the argument order ({} arguments for {tensors} tensors and \
                 {scalars} scalars); each tensor and scalar must appear exactly once",
            label(arg),
            args.len()
        ));
    }
    Ok(args.to_vec())
}

/// One argument of a kernel call, by its index in the request's `tensors` or `scalars`
/// ([`BenchmarkRequest::args`](BenchmarkRequest#structfield.args)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Arg {
    /// `tensors[i]`, passed as a pointer to its element type (`float *` for f32, …); a C
    /// kernel whose parameter has another pointer type fails to compile.
    Tensor(u32),
    /// `tensors[i]`, passed as an untyped pointer: C passes `void *`, which converts to the
    /// parameter's own pointer type, and so does C++. For parameters the element type cannot
    /// name (GCC vector types such as `vfloat *`, structs), as Kernel Tuner passes every array
    /// (`ctypes.c_void_p`), at the cost of the compiler's pointer-type check. CUDA passes it
    /// as [`Arg::Tensor`].
    Untyped(u32),
    /// `scalars[i]`, passed by value as its C type ([`ScalarKind`]).
    Scalar(u32),
}

impl Arg {
    /// The index into the request's tensors ([`Arg::Tensor`], [`Arg::Untyped`]) or scalars.
    pub fn index(self) -> u32 {
        match self {
            Arg::Tensor(i) | Arg::Untyped(i) | Arg::Scalar(i) => i,
        }
    }

    /// `args` checked against `tensors` tensors and `scalars` scalars: the order itself, or
    /// every tensor then every scalar when `args` is empty (what
    /// [`BenchmarkRequest::arg_order`] does, with arguments named by index only).
    ///
    /// # Errors
    ///
    /// The problem, in words: an index out of range, an argument given twice or left out.
    pub fn resolve(args: &[Arg], tensors: usize, scalars: usize) -> Result<Vec<Arg>, String> {
        resolve_order(args, tensors, scalars, |arg| match arg {
            Arg::Tensor(i) | Arg::Untyped(i) => format!("tensor {i}"),
            Arg::Scalar(i) => format!("scalar {i}"),
        })
    }
}

/// The code to benchmark. The variant decides which backend of the worker runs it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum Kernel {
    /// C source compiled into a shared object by the worker's `cpu` backend.
    C(CKernel),
    /// A CUDA kernel for the worker's `cuda` backend.
    Cuda(CudaKernel),
    /// A scripted behaviour of the worker's `diagnostics` backend (sleep, crash, hang, …), used
    /// by tests and `tunebox doctor` to exercise every failure path without a compiler or GPU.
    Diagnostic(DiagnosticTask),
    /// A task of a kind defined outside tunebox ([`Task`](crate::Task)), for the backend it
    /// names.
    Task(TaskKernel),
}

impl Kernel {
    /// Name of the backend that runs this kernel: `"cpu"`, `"cuda"`, `"diagnostics"`, or the
    /// backend a [`Kernel::Task`] names.
    pub fn backend(&self) -> &str {
        match self {
            Kernel::C(_) => "cpu",
            Kernel::Cuda(_) => "cuda",
            Kernel::Diagnostic(_) => "diagnostics",
            Kernel::Task(task) => &task.backend,
        }
    }
}

impl From<CKernel> for Kernel {
    fn from(kernel: CKernel) -> Self {
        Kernel::C(kernel)
    }
}

impl From<CudaKernel> for Kernel {
    fn from(kernel: CudaKernel) -> Self {
        Kernel::Cuda(kernel)
    }
}

impl From<DiagnosticTask> for Kernel {
    fn from(task: DiagnosticTask) -> Self {
        Kernel::Diagnostic(task)
    }
}

/// A task of a kind defined outside tunebox, as it travels: the backend that runs it and the
/// task itself, encoded with postcard.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TaskKernel {
    /// The worker backend that runs it ([`Task::BACKEND`](crate::Task::BACKEND)).
    pub backend: String,
    /// The task's Rust type (`std::any::type_name`), which the backend checks against its own
    /// before decoding, module paths aside (a separate worker binary names the same type from
    /// another crate): a worker built with another task type under the same backend name
    /// answers with both names instead of running a misread task.
    pub task_type: String,
    /// The task, postcard-encoded ([`encode`](crate::encode)); shared memory when larger than
    /// [`INLINE_LIMIT`](crate::INLINE_LIMIT).
    pub payload: Bytes,
}

impl TaskKernel {
    /// The task `payload` (postcard-encoded, [`encode`](crate::encode)) of Rust type
    /// `task_type` for the backend `backend`. [`TaskRequest::encode`](crate::TaskRequest::encode)
    /// builds one from a typed task.
    pub fn new(backend: impl Into<String>, task_type: impl Into<String>, payload: Bytes) -> Self {
        TaskKernel {
            backend: backend.into(),
            task_type: task_type.into(),
            payload,
        }
    }

    /// How many shared-memory regions the payload needs (0 or 1).
    pub(crate) fn shared_payloads(&self) -> usize {
        usize::from(self.payload.is_shared())
    }
}

/// A C kernel: a source text, an entry function, and the defines of one choice.
///
/// The entry is called as `entry(tensor_0, …, tensor_n, scalar_0, …, scalar_m)`: each tensor as a
/// pointer to its element type (`float *` for f32, …), each scalar as `int64_t`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct CKernel {
    /// The C source text.
    pub source: String,
    /// Name shown for the source in compiler messages (usually its path).
    pub source_name: String,
    /// The function to call.
    pub entry: String,
    /// `-DNAME=VALUE` defines: the choice's parameters.
    pub defines: Vec<Define>,
    /// Compiler flags, e.g. `["-O3", "-march=native"]`. `-fPIC -shared` are always added.
    pub flags: Vec<String>,
    /// The C compiler command, e.g. `"cc"`: a name on `PATH` or a path, optionally with
    /// leading words as make users give `CC` (`"ccache cc"`, `"cc -std=c11"`), split as a
    /// POSIX shell splits words (a path to an existing file is one word even with spaces).
    pub compiler: String,
    /// The first lines of `compiler --version`, as the parent found them when it compiled the
    /// kernel (`tunebox_cpu::compiler_version`): part of the kernel cache's key. A worker given
    /// it finds the parent's build without running the compiler, which a fresh worker per
    /// window would otherwise do once per window (a process start, ~2 ms). `None`: the worker
    /// asks the compiler itself.
    #[serde(default)]
    pub compiler_identity: Option<String>,
}

impl CKernel {
    /// Source name used by [`CKernel::new`].
    pub const DEFAULT_SOURCE_NAME: &'static str = "kernel.c";
    /// Compiler used by [`CKernel::new`]. The `tunebox` CLI uses `$CC` when it is set.
    pub const DEFAULT_COMPILER: &'static str = "cc";
    /// Flags used by [`CKernel::new`]: what the `tunebox` CLI gives a manifest's C kernel
    /// that sets no `flags`.
    pub const DEFAULT_FLAGS: [&'static str; 2] = ["-O3", "-march=native"];

    /// The kernel `entry` of the C `source` text, with the CLI's defaults: source name
    /// `kernel.c`, compiler `cc`, flags `-O3 -march=native`, no defines.
    ///
    /// ```
    /// use tunebox_protocol::CKernel;
    ///
    /// let kernel = CKernel::new("void k(float *x) { x[0] = BLOCK; }", "k")
    ///     .define("BLOCK", 64)
    ///     .flag("-ffast-math")
    ///     .source_name("k.c");
    /// assert_eq!(kernel.defines[0].value, "64");
    /// assert_eq!(kernel.flags, ["-O3", "-march=native", "-ffast-math"]);
    /// ```
    pub fn new(source: impl Into<String>, entry: impl Into<String>) -> Self {
        CKernel {
            source: source.into(),
            source_name: Self::DEFAULT_SOURCE_NAME.into(),
            entry: entry.into(),
            defines: Vec::new(),
            flags: Self::DEFAULT_FLAGS.map(String::from).to_vec(),
            compiler: Self::DEFAULT_COMPILER.into(),
            compiler_identity: None,
        }
    }

    /// Appends the define `-DNAME=VALUE`, `value` as its `Display` text (`64`, `1.5f`, …).
    pub fn define(mut self, name: impl Into<String>, value: impl std::fmt::Display) -> Self {
        self.defines.push(Define::new(name, value.to_string()));
        self
    }

    /// Appends one compiler flag to the current ones (by default [`CKernel::DEFAULT_FLAGS`]).
    pub fn flag(mut self, flag: impl Into<String>) -> Self {
        self.flags.push(flag.into());
        self
    }

    /// Replaces every compiler flag, the defaults included (`flags(["-O2"])`).
    pub fn flags<I, S>(mut self, flags: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.flags = flags.into_iter().map(Into::into).collect();
        self
    }

    /// The C compiler to run, a name on `PATH` or a path (default `cc`).
    pub fn compiler(mut self, compiler: impl Into<String>) -> Self {
        self.compiler = compiler.into();
        self
    }

    /// The compiler's identity as [`CKernel::compiler_identity`] documents it (default: the
    /// worker asks the compiler).
    pub fn compiler_identity(mut self, identity: impl Into<String>) -> Self {
        self.compiler_identity = Some(identity.into());
        self
    }

    /// The name compiler messages show for the source, usually its path (default `kernel.c`).
    pub fn source_name(mut self, name: impl Into<String>) -> Self {
        self.source_name = name.into();
        self
    }
}

/// A tensor the worker allocates, initializes and passes to the kernel.
///
/// Equality compares what the tensor is (name, dtype, shape, init, flags), not
/// [`contents`](TensorSpec#structfield.contents), which only says where its initial bytes
/// may be read from.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TensorSpec {
    /// Name used in errors and verification reports.
    pub name: String,
    /// Element type.
    pub dtype: DType,
    /// Dimensions, outermost first; the tensor is contiguous (row-major).
    pub shape: Vec<u64>,
    /// Initial contents.
    pub init: Init,
    /// Whether the worker returns this tensor's contents after the first call, for verification.
    pub output: bool,
    /// Re-initialize this tensor to its `init` contents before every call, outside the timed
    /// window (triton's `restore_value` / `reset_to_zero`): for in-place kernels and kernels that
    /// accumulate into their outputs. Inputs a kernel turns out to modify are restored before
    /// every call without it.
    #[serde(default)]
    pub reset: bool,
    /// The tensor's initial contents (what `init` gives), made once by the caller in shared
    /// memory ([`TensorSpec::make_contents`]; `TuningProcessPool` does it for large inputs):
    /// a worker maps them copy-on-write instead of filling the tensor itself, so that a 1 GiB
    /// input costs a worker neither a pass of the generator nor a gigabyte of fresh pages, and
    /// a kernel that writes the input writes private copies of the pages it touches. Must be
    /// exactly [`byte_len`](TensorSpec::byte_len) bytes of what `init` gives; a worker that
    /// cannot use them (another length, a backend that does not map) fills the tensor from
    /// `init` as without them. `None` (the default): the worker fills it.
    #[serde(default)]
    pub contents: Option<SharedData>,
    /// The contents of this input on the request's fresh inputs (what
    /// [`TensorSpec::fresh_input`] gives with its `TimingConfig::fresh_seed`), made once by
    /// the caller as `contents` are: the call on fresh inputs maps them in place of the
    /// input's pages (the same addresses) instead of generating and copying them. Must be
    /// exactly those bytes; `None` (the default): the worker generates them.
    #[serde(default)]
    pub fresh_contents: Option<SharedData>,
}

impl PartialEq for TensorSpec {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.dtype == other.dtype
            && self.shape == other.shape
            && self.init == other.init
            && self.output == other.output
            && self.reset == other.reset
    }
}

impl TensorSpec {
    /// A contiguous tensor `name` of `dtype` with `shape` (outermost first, in elements),
    /// initialized to zeros, not returned, not reset between calls.
    ///
    /// ```
    /// use tunebox_protocol::{DType, Init, TensorSpec};
    ///
    /// let a = TensorSpec::new("a", DType::F32, [64, 32]).random(7);
    /// let c = TensorSpec::new("c", DType::F32, vec![64, 64]).output().reset();
    /// assert_eq!(a.init, Init::Random { seed: 7 });
    /// assert_eq!(c.byte_len(), Some(64 * 64 * 4));
    /// assert!(c.output && c.reset && c.init == Init::Zeros);
    /// ```
    pub fn new(
        name: impl Into<String>,
        dtype: DType,
        shape: impl IntoIterator<Item = u64>,
    ) -> Self {
        TensorSpec {
            name: name.into(),
            dtype,
            shape: shape.into_iter().collect(),
            init: Init::Zeros,
            output: false,
            reset: false,
            contents: None,
            fresh_contents: None,
        }
    }

    /// A one-dimensional tensor `name` holding a copy of `values`, which travels to the worker
    /// as shared memory ([`Init::Data`] of a new [`SharedBuffer`](crate::SharedBuffer)).
    ///
    /// ```
    /// use tunebox_protocol::{DType, TensorSpec};
    ///
    /// let x = TensorSpec::from_values("x", &[1.0f32, 2.0, 3.0])?;
    /// assert_eq!((x.dtype, x.shape.as_slice()), (DType::F32, &[3][..]));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The shared-memory region could not be created (out of memory or file descriptors).
    pub fn from_values<T: Element>(name: impl Into<String>, values: &[T]) -> std::io::Result<Self> {
        let buffer = crate::SharedBuffer::from_slice(element_bytes(values))?;
        Ok(TensorSpec::new(name, T::DTYPE, [values.len() as u64]).data(buffer.share()))
    }

    /// Sets the initial contents.
    pub fn init(mut self, init: Init) -> Self {
        self.init = init;
        self
    }

    /// Initial contents all zero bytes ([`Init::Zeros`], the default).
    pub fn zeros(self) -> Self {
        self.init(Init::Zeros)
    }

    /// Initial contents all ones ([`Init::Ones`]).
    pub fn ones(self) -> Self {
        self.init(Init::Ones)
    }

    /// Initial contents pseudo-random from `seed` ([`Init::Random`]): the same in every worker.
    pub fn random(self, seed: u64) -> Self {
        self.init(Init::Random { seed })
    }

    /// Initial contents copied from the caller's shared buffer ([`Init::Data`]), which must be
    /// exactly [`byte_len`](TensorSpec::byte_len) bytes long.
    pub fn data(self, data: SharedData) -> Self {
        self.init(Init::Data(data))
    }

    /// Returns the tensor's contents after the first call, for verification.
    pub fn output(mut self) -> Self {
        self.output = true;
        self
    }

    /// Re-initializes the tensor before every call, outside the timed window (triton's
    /// `restore_value`); see [`TensorSpec::reset`](TensorSpec#structfield.reset).
    pub fn reset(mut self) -> Self {
        self.reset = true;
        self
    }

    /// Sets the initial contents a worker may map instead of filling the tensor itself
    /// ([`contents`](TensorSpec#structfield.contents)), e.g. from
    /// [`TensorSpec::make_contents`] of an equal spec.
    pub fn contents(mut self, contents: SharedData) -> Self {
        self.contents = Some(contents);
        self
    }

    /// A new shared buffer holding the tensor's initial contents: `init`'s bytes, the same as
    /// every worker writes ([`Init::fill`]), `byte_len` long. Takes one pass of the generator
    /// (about 1 s per GiB of random floats).
    ///
    /// ```
    /// use tunebox_protocol::{DType, TensorSpec};
    ///
    /// let x = TensorSpec::new("x", DType::I32, [3]).ones();
    /// let buffer = x.make_contents()?;
    /// assert_eq!(buffer.as_slice(), [1i32, 1, 1].map(i32::to_ne_bytes).concat());
    /// let x = x.contents(buffer.share());
    /// assert!(x.contents.is_some());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The size overflows, or the region could not be created (out of memory or file
    /// descriptors).
    pub fn make_contents(&self) -> std::io::Result<crate::SharedBuffer> {
        let len = self
            .byte_len()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| std::io::Error::other(format!("tensor `{}` is too large", self.name)))?;
        let mut buffer = crate::SharedBuffer::new(len)?;
        let bytes = buffer.get_mut().expect("a new buffer has no other handle");
        self.init.fill(self.dtype, bytes);
        Ok(buffer)
    }

    /// This tensor with `fresh` mixed into its seed, when it is a randomly initialized input:
    /// what the last verification call runs on instead (docs/sandbox.md), the same in every
    /// backend and in the caller; `None` for an output, or an input given as data or a
    /// constant (which cannot be drawn again). Its `contents` are the spec's
    /// `fresh_contents`, its own `fresh_contents` none.
    ///
    /// ```
    /// use tunebox_protocol::{DType, TensorSpec};
    ///
    /// let x = TensorSpec::new("x", DType::F32, [4]).random(7);
    /// let fresh = x.fresh_input(99).unwrap();
    /// assert_ne!(fresh.init, x.init);
    /// assert_eq!(x.fresh_input(99).unwrap().init, fresh.init, "deterministic");
    /// assert!(TensorSpec::new("y", DType::F32, [4]).output().fresh_input(1).is_none());
    /// ```
    pub fn fresh_input(&self, fresh: u64) -> Option<TensorSpec> {
        let Init::Random { seed } = self.init else {
            return None;
        };
        if self.output {
            return None;
        }
        let mut other = self.clone();
        other.init = Init::Random {
            seed: seed ^ fresh.rotate_left(17) ^ 0x9E37_79B9_7F4A_7C15,
        };
        other.contents = self.fresh_contents.clone();
        other.fresh_contents = None;
        Some(other)
    }

    /// Draws this input again for a timed rep on varied inputs ([`TimingConfig::varied_reps`])
    /// with the rep's `seed`, into `bytes` (the tensor's [`byte_len`](TensorSpec::byte_len)
    /// bytes): every element, from the same distribution as its `init`, with `seed` mixed into
    /// the spec's. Every element, so that no rep repeats any part of another's inputs: a kernel
    /// keeping its last call's inputs and answer and recomputing only the blocks that changed
    /// did 1/64 of its work on every rep when one block of 1/64 was drawn again, and ranked 15
    /// times ahead of the honest kernel under the sandbox (a helper's hostile trial); a kernel
    /// keying a memo on a sample of its inputs misses the change too. Returns `false`, leaving
    /// `bytes` as they are, for an output, a tensor reset before every call, an input not
    /// randomly initialized (given as data or a constant: nothing to draw from), or `bytes` of
    /// another length. The same in every process for the same spec and seed: the reference
    /// runs on exactly the inputs a candidate's rep ran on.
    ///
    /// ```
    /// use tunebox_protocol::{DType, TensorSpec};
    ///
    /// let x = TensorSpec::new("x", DType::F32, [4096]).random(7);
    /// let (mut a, mut b, mut c) = (vec![0u8; 4096 * 4], vec![0u8; 4096 * 4], vec![0u8; 4096 * 4]);
    /// assert!(x.vary_into(99, &mut a) && x.vary_into(99, &mut b) && x.vary_into(100, &mut c));
    /// assert_eq!(a, b, "deterministic");
    /// let same = a.chunks(4).zip(c.chunks(4)).filter(|(p, q)| p == q).count();
    /// assert!(same < 8, "another seed draws every element again ({same} equal)");
    /// assert!(!TensorSpec::new("y", DType::F32, [4]).output().vary_into(1, &mut [0u8; 16]));
    /// ```
    pub fn vary_into(&self, seed: u64, bytes: &mut [u8]) -> bool {
        let Init::Random { seed: own } = self.init else {
            return false;
        };
        if !self.varies() || self.byte_len() != Some(bytes.len() as u64) {
            return false;
        }
        let mixed = own ^ seed.rotate_left(29) ^ 0xD1B5_4A32_D192_ED03;
        Init::Random { seed: mixed }.fill(self.dtype, bytes);
        true
    }

    /// Whether a varied rep draws this tensor again ([`TensorSpec::vary_into`]): a randomly
    /// initialized input, not reset before every call.
    pub fn varies(&self) -> bool {
        matches!(self.init, Init::Random { .. }) && !self.output && !self.reset
    }

    /// The whole input as a varied rep with `seed` draws it ([`TensorSpec::vary_into`]), at
    /// byte offset 0; `None` where that draws nothing.
    ///
    /// ```
    /// use tunebox_protocol::{DType, TensorSpec};
    ///
    /// let x = TensorSpec::new("x", DType::F32, [4096]).random(7);
    /// let (offset, bytes) = x.varied_block(99).unwrap();
    /// assert_eq!((offset, bytes.len()), (0, 4096 * 4), "every element");
    /// assert!(TensorSpec::new("y", DType::F32, [4]).output().varied_block(1).is_none());
    /// ```
    pub fn varied_block(&self, seed: u64) -> Option<(usize, Vec<u8>)> {
        let mut bytes = vec![0u8; usize::try_from(self.byte_len()?).ok()?];
        self.vary_into(seed, &mut bytes).then_some((0, bytes))
    }

    /// Number of elements, or `None` if the product of the shape overflows `u64`.
    pub fn num_elements(&self) -> Option<u64> {
        self.shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d))
    }

    /// Size in bytes, or `None` on overflow.
    pub fn byte_len(&self) -> Option<u64> {
        self.num_elements()?
            .checked_mul(self.dtype.size_bytes() as u64)
    }
}

/// A Rust element type of tensors: `f32`, `f64`, `i32`, `i64`, `u8` (sealed). Backends read
/// host tensors as slices of it (`HostTensor::as_slice`), and callers build tensors from
/// slices of it ([`TensorSpec::from_values`]).
pub trait Element: Copy + sealed::Sealed + 'static {
    /// The tensor dtype holding this type.
    const DTYPE: DType;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! element {
    ($($t:ty => $dtype:ident),*) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$dtype;
        }
    )*};
}

element!(f32 => F32, f64 => F64, i32 => I32, i64 => I64, u8 => U8);

/// The bytes of `values`, in native byte order: what a tensor of them holds.
pub(crate) fn element_bytes<T: Element>(values: &[T]) -> &[u8] {
    // SAFETY: `Element` is sealed to primitive numbers, which have no padding and no invalid
    // byte patterns; the slice covers exactly the memory of `values`, borrowed as long as it.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), size_of_val(values)) }
}

/// Initial contents of a tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Init {
    /// All zero bytes.
    Zeros,
    /// All elements one.
    Ones,
    /// Uniform pseudo-random values from `seed`: floats in [-1, 1), signed integers in
    /// [-100, 100), bytes in [0, 255]. The same seed gives the same contents in every worker.
    Random {
        /// Seed of the generator.
        seed: u64,
    },
    /// The caller's bytes (native byte order, row-major), which must be exactly dtype × shape
    /// long. The worker copies them into the tensor (or maps them copy-on-write); the buffer
    /// itself is only read.
    Data(SharedData),
}

impl Init {
    /// Writes these contents for `dtype` elements into `bytes` (native byte order): what
    /// every worker fills a tensor of this init with, so a reference and a candidate measured
    /// in different processes, or a caller that makes the contents once
    /// ([`TensorSpec::make_contents`]), see the same bytes. `Random` draws from
    /// `fastrand::Rng::with_seed(seed)`, one value per element in order (for `U8`, eight
    /// elements per draw, `fastrand::Rng::fill`).
    ///
    /// # Panics
    ///
    /// With `Data`, when `bytes` is not exactly the data's length.
    pub fn fill(&self, dtype: DType, bytes: &mut [u8]) {
        match *self {
            Init::Zeros => bytes.fill(0),
            Init::Data(ref data) => bytes.copy_from_slice(data),
            Init::Ones => match dtype {
                DType::F32 => fill_elements(bytes, || 1f32.to_ne_bytes()),
                DType::F64 => fill_elements(bytes, || 1f64.to_ne_bytes()),
                DType::I32 => fill_elements(bytes, || 1i32.to_ne_bytes()),
                DType::I64 => fill_elements(bytes, || 1i64.to_ne_bytes()),
                DType::U8 => bytes.fill(1),
            },
            Init::Random { seed } => {
                let mut rng = fastrand::Rng::with_seed(seed);
                match dtype {
                    DType::F32 => fill_elements(bytes, || (rng.f32() * 2.0 - 1.0).to_ne_bytes()),
                    DType::F64 => fill_elements(bytes, || (rng.f64() * 2.0 - 1.0).to_ne_bytes()),
                    DType::I32 => fill_elements(bytes, || rng.i32(-100..100).to_ne_bytes()),
                    DType::I64 => fill_elements(bytes, || rng.i64(-100..100).to_ne_bytes()),
                    // Eight bytes a draw (`Rng::fill`), not one: a 32 MiB input is made in
                    // a few ms instead of ~150 ms in every window.
                    DType::U8 => rng.fill(bytes),
                }
            }
        }
    }
}

/// Writes `next()` into every `N`-byte element of `bytes`, in order.
fn fill_elements<const N: usize>(bytes: &mut [u8], mut next: impl FnMut() -> [u8; N]) {
    for element in bytes.chunks_exact_mut(N) {
        element.copy_from_slice(&next());
    }
}

/// A named scalar argument, passed by value as its C type ([`ScalarKind`]; Kernel Tuner's
/// `numpy.int32`, `numpy.float32`, …).
///
/// An integer scalar ([`ScalarKind::I64`], the default, or [`ScalarKind::I32`]) holds its
/// value in `value`, and `float` is 0; a float scalar ([`ScalarKind::F32`], [`ScalarKind::F64`])
/// holds it in `float`, and `value` is 0. Outside this crate a scalar is built with
/// [`Scalar::new`] (`int64_t`), [`Scalar::i32`], [`Scalar::f32`] or [`Scalar::f64`] (the
/// struct is `#[non_exhaustive]`).
///
/// ```
/// use tunebox_protocol::{Scalar, ScalarKind};
///
/// let n = Scalar::i32("n", 1024);
/// let alpha = Scalar::f32("alpha", 0.5);
/// assert_eq!((n.kind, n.value, n.kind.c_type()), (ScalarKind::I32, 1024, "int32_t"));
/// assert_eq!((alpha.float, alpha.as_f64()), (0.5, 0.5));
/// assert_eq!(Scalar::new("k", 3).kind, ScalarKind::I64);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Scalar {
    /// Name used in errors.
    pub name: String,
    /// The value of an integer scalar; 0 for a float one.
    pub value: i64,
    /// The C type it is passed as (default [`ScalarKind::I64`], `int64_t`).
    #[serde(default)]
    pub kind: ScalarKind,
    /// The value of a float scalar; 0 for an integer one.
    #[serde(default)]
    pub float: f64,
}

impl Scalar {
    /// The `int64_t` scalar `name = value`.
    pub fn new(name: impl Into<String>, value: i64) -> Self {
        Scalar {
            name: name.into(),
            value,
            ..Scalar::default()
        }
    }

    /// The `int32_t` scalar `name = value` (a C `int`; CUDA passes it in 4 bytes).
    pub fn i32(name: impl Into<String>, value: i32) -> Self {
        Scalar {
            kind: ScalarKind::I32,
            ..Scalar::new(name, value.into())
        }
    }

    /// The `float` scalar `name = value`.
    pub fn f32(name: impl Into<String>, value: f32) -> Self {
        Scalar {
            name: name.into(),
            kind: ScalarKind::F32,
            float: value.into(),
            ..Scalar::default()
        }
    }

    /// The `double` scalar `name = value`.
    pub fn f64(name: impl Into<String>, value: f64) -> Self {
        Scalar {
            name: name.into(),
            kind: ScalarKind::F64,
            float: value,
            ..Scalar::default()
        }
    }

    /// The value as an `f64`, whatever the kind (for expressions over scalars; an `i64` above
    /// 2^53 is rounded).
    pub fn as_f64(&self) -> f64 {
        if self.kind.is_float() {
            self.float
        } else {
            self.value as f64
        }
    }

    /// The value as its C type, in native byte order, in the first
    /// [`ScalarKind::size_bytes`] bytes of an 8-byte slot: what a kernel parameter of that type
    /// holds. The rest of the slot is the sign extension of an integer (so the slot read as an
    /// `int64_t` is the value) and zero after an `f32`.
    pub fn slot(&self) -> [u8; 8] {
        match self.kind {
            ScalarKind::I32 | ScalarKind::I64 => self.value.to_ne_bytes(),
            ScalarKind::F64 => self.float.to_ne_bytes(),
            ScalarKind::F32 => {
                let mut slot = [0; 8];
                slot[..4].copy_from_slice(&(self.float as f32).to_ne_bytes());
                slot
            }
        }
    }

    /// Checks that the value fits the kind: an `I32` within `i32`, an `F32` finite as `f32`
    /// when it is finite, and the other value field 0.
    ///
    /// # Errors
    ///
    /// [`BenchError::InvalidRequest`] naming the scalar and what is wrong.
    pub fn check(&self) -> Result<(), BenchError> {
        let invalid = |what: String| {
            Err(BenchError::InvalidRequest {
                detail: format!("scalar `{}` ({}) {what}", self.name, self.kind.name()),
            })
        };
        match self.kind {
            ScalarKind::I32 | ScalarKind::I64 if self.float != 0.0 => invalid(format!(
                "has the float value {}: an integer scalar's value is `value`; make it f32 or \
                 f64 to pass a float",
                self.float
            )),
            ScalarKind::F32 | ScalarKind::F64 if self.value != 0 => invalid(format!(
                "has the integer value {}: a float scalar's value is `float`",
                self.value
            )),
            ScalarKind::I32 if i32::try_from(self.value).is_err() => invalid(format!(
                "= {} does not fit in an int32_t ({} to {}); make it i64",
                self.value,
                i32::MIN,
                i32::MAX
            )),
            ScalarKind::F32 if self.float.is_finite() && !(self.float as f32).is_finite() => {
                invalid(format!(
                    "= {} does not fit in a float (at most {:e}); make it f64",
                    self.float,
                    f32::MAX
                ))
            }
            _ => Ok(()),
        }
    }
}

/// The C type a [`Scalar`] is passed as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ScalarKind {
    /// `int32_t` (C `int`; `numpy.int32`).
    I32,
    /// `int64_t` (`numpy.int64`); the default, and what every scalar was before kinds.
    #[default]
    I64,
    /// `float` (`numpy.float32`).
    F32,
    /// `double` (`numpy.float64`, a Python `float`).
    F64,
}

impl ScalarKind {
    /// Every kind, in declaration order.
    pub const ALL: [ScalarKind; 4] = [
        ScalarKind::I32,
        ScalarKind::I64,
        ScalarKind::F32,
        ScalarKind::F64,
    ];

    /// The short name used in manifests: `i32`, `i64`, `f32`, `f64`.
    pub fn name(self) -> &'static str {
        match self {
            ScalarKind::I32 => "i32",
            ScalarKind::I64 => "i64",
            ScalarKind::F32 => "f32",
            ScalarKind::F64 => "f64",
        }
    }

    /// Parses a manifest name ([`ScalarKind::name`]).
    pub fn from_name(name: &str) -> Option<ScalarKind> {
        ScalarKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// The C type: `int32_t`, `int64_t`, `float`, `double`.
    pub fn c_type(self) -> &'static str {
        match self {
            ScalarKind::I32 => "int32_t",
            ScalarKind::I64 => "int64_t",
            ScalarKind::F32 => "float",
            ScalarKind::F64 => "double",
        }
    }

    /// Size in bytes of the C type (4 or 8).
    pub fn size_bytes(self) -> usize {
        match self {
            ScalarKind::I32 | ScalarKind::F32 => 4,
            ScalarKind::I64 | ScalarKind::F64 => 8,
        }
    }

    /// Whether it is `F32` or `F64`.
    pub fn is_float(self) -> bool {
        matches!(self, ScalarKind::F32 | ScalarKind::F64)
    }
}

/// How long to warm up and measure, as triton's `do_bench(warmup=25, rep=100)`.
///
/// The worker estimates one run, then runs `warmup_ms / estimate` untimed warmup calls and
/// `rep_ms / estimate` timed reps, each count clamped to `[min_reps, max_reps]` (see
/// `tunebox_bench::do_bench` for the cap that keeps cache flushes from dominating).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct TimingConfig {
    /// Warmup budget in ms (default 25).
    pub warmup_ms: f64,
    /// Measurement budget in ms (default 100).
    pub rep_ms: f64,
    /// Fewest timed reps (default 10).
    pub min_reps: u32,
    /// Most timed reps, and most warmup calls (default 1000).
    pub max_reps: u32,
    /// Flush the last-level cache before every timed rep, outside the timed window (default on).
    pub flush_cache: bool,
    /// Hot mode: time batches of back-to-back calls between one pair of timestamps, without a
    /// flush, and report the time per call. For kernels of a few µs, where the per-launch
    /// overhead of timing each call would dominate. Default off (cold).
    #[serde(default)]
    pub hot: bool,
    /// nvbench-style stopping: once `min_reps` are done, stop as soon as the relative standard
    /// deviation of the reps falls below this (e.g. 0.005). `None` (default): the rep count
    /// follows `rep_ms`.
    #[serde(default)]
    pub max_noise: Option<f64>,
    /// With `max_noise`: stop after this much measuring time in ms even if the noise is still
    /// above it (default 1000 when `max_noise` is set).
    #[serde(default)]
    pub max_time_ms: Option<f64>,
    /// How the CPU backend evicts the kernel's data before each timed rep when `flush_cache` is
    /// on (default [`CacheFlush::Tensors`]). GPU backends always write a buffer twice the L2,
    /// which costs microseconds there.
    #[serde(default)]
    pub cache_flush: CacheFlush,
    /// Wall time in ms the whole request may take in the worker, from the moment it starts it
    /// (tensor setup, first call, estimate, warmup, reps and the final call). The worker fits
    /// warmup and reps into what is left after the estimate, giving fewer than `min_reps` reps
    /// (`stopped = "budget"`) rather than running past it; a single call longer than the budget
    /// still runs to its end. `None` (default): no budget. Callers with a per-request timeout
    /// set it below that timeout (the CLI uses 80 % of it), so that a slow but working kernel is
    /// measured with fewer reps instead of being killed.
    #[serde(default)]
    pub budget_ms: Option<f64>,
    /// Call the kernel once on fresh tensors and return its outputs, without warmup or timed
    /// reps (a reference run for verification). The stats describe that one call
    /// (`reps = 1`, `stopped = "single"`). Default off.
    #[serde(default)]
    pub outputs_only: bool,
    /// Return the tensors marked `output` (default on). Off for a window whose outputs were
    /// verified already (a tuning round's): the outputs stay outputs (written by the kernel,
    /// never restored before a call as a written input is, never mapped from shared contents),
    /// but none is copied back, and no call after the reps is made. See
    /// [`BenchmarkRequest::returns`].
    #[serde(default = "returned_by_default")]
    pub return_outputs: bool,
    /// Verify on inputs the candidate has not seen: the call after the timed reps (or, with
    /// `outputs_only`, one more call after the first) runs with every randomly initialized
    /// input refilled with this value mixed into its seed, the outputs poisoned first, and
    /// returns its outputs as [`Integrity::fresh_outputs`](crate::Integrity::fresh_outputs)
    /// instead of `outputs_after_reps`. The parent picks it per run and asks the reference for
    /// the same. `None` (default): the call after the reps uses the same inputs.
    #[serde(default)]
    pub fresh_seed: Option<u64>,
    /// Runs that estimate one call's time before warmup (`None`: 5, as triton's `do_bench`).
    /// A short window of a tuning round uses 0: a backend that makes a first call before
    /// timing (the CPU backend) gives its time as the estimate (one flush is timed for the
    /// flush's cost), since every further estimate run of a slow kernel costs a whole call;
    /// a backend that makes none runs one estimate run.
    #[serde(default)]
    pub estimate_runs: Option<u32>,
    /// How a host-timed rep (the CPU backend, Python callables) is timed: by default
    /// ([`RepClock::Preemption`]) its wall time, except that a rep during which the calling
    /// thread was preempted, or lost time to the hypervisor, counts the thread's own CPU time
    /// instead. GPU backends time on the device and ignore it.
    #[serde(default)]
    pub clock: RepClock,
    /// Time every rep on inputs a candidate cannot predict, and check some of them (docs/
    /// sandbox.md): before each timed rep, outside the timed region, every randomly initialized
    /// input is drawn again ([`TensorSpec::vary_into`]) with a seed the worker picks for that
    /// rep from the operating system's randomness, and put back after the reps; of the
    /// request's reps, up to [`VariedReps::checked`], picked at random once they have run (so
    /// that nothing told a checked rep from another while it ran), return their seeds and
    /// outputs ([`Integrity::checked_reps`](crate::Integrity::checked_reps)), which the parent
    /// compares with the reference's on the same inputs. A kernel that answers from a memo of
    /// earlier inputs answers a varied rep wrong. `None` (default): every rep on the request's
    /// inputs.
    #[serde(default)]
    pub varied_reps: Option<VariedReps>,
    /// With `outputs_only` (the reference): its call runs on the request's inputs varied with
    /// this seed ([`TensorSpec::vary_into`]): what a candidate's checked rep ran on. `None`
    /// (default): unvaried.
    #[serde(default)]
    pub varied_seed: Option<u64>,
}

/// Timed reps on varied inputs ([`TimingConfig::varied_reps`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct VariedReps {
    /// How many reps, at most, return their seeds and outputs for checking (0: the inputs
    /// vary, nothing is checked: a window whose outputs are not returned).
    pub checked: u32,
}

/// How a timed rep measured on the host is turned into a time (see [`TimingConfig::clock`]).
///
/// A busy machine mostly slows a single-threaded kernel by taking its CPU away: another process
/// is scheduled on it (an involuntary context switch) or the hypervisor runs another guest
/// (steal time). Both inflate the rep's wall time by however long the kernel was not running,
/// while the calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) counts only the time it ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum RepClock {
    /// Wall time, except for a rep whose thread was preempted (`getrusage(RUSAGE_THREAD)`'s
    /// involuntary context switches went up) or whose wall time exceeds its thread's CPU time
    /// by more than 5 % with no switch at all (time stolen by the hypervisor): such a rep counts
    /// the thread's CPU time. A rep keeps its wall time when the kernel blocked (a voluntary
    /// switch: sleeping, waiting for I/O or a lock is part of its time) or when other threads
    /// of the worker ran during it (a multi-threaded kernel: its calling thread's CPU time is
    /// not its time). The stats count the corrected reps ([`TimingStats::preempted_reps`]).
    ///
    /// [`TimingStats::preempted_reps`]: crate::TimingStats::preempted_reps
    #[default]
    Preemption,
    /// Wall time of every rep (the monotonic clock), as triton's `do_bench` and Kernel Tuner.
    Wall,
}

impl RepClock {
    /// The manifest name: `preemption` or `wall`.
    pub fn name(self) -> &'static str {
        match self {
            RepClock::Preemption => "preemption",
            RepClock::Wall => "wall",
        }
    }

    /// Parses a manifest name ([`RepClock::name`]).
    pub fn from_name(name: &str) -> Option<RepClock> {
        [RepClock::Preemption, RepClock::Wall]
            .into_iter()
            .find(|c| c.name() == name)
    }
}

setters!(TimingConfig {
    warmup_ms => warmup_ms: f64,
    rep_ms => rep_ms: f64,
    min_reps => min_reps: u32,
    max_reps => max_reps: u32,
    flush_cache => flush_cache: bool,
    hot => hot: bool,
    max_noise => max_noise: Option<f64>,
    max_time_ms => max_time_ms: Option<f64>,
    cache_flush => cache_flush: CacheFlush,
    budget_ms => budget_ms: Option<f64>,
    outputs_only => outputs_only: bool,
    return_outputs => return_outputs: bool,
    fresh_seed => fresh_seed: Option<u64>,
    estimate_runs => estimate_runs: Option<u32>,
    clock => clock: RepClock,
    varied_reps => varied_reps: Option<VariedReps>,
    varied_seed => varied_seed: Option<u64>,
});

impl VariedReps {
    /// Varied reps of which at most `checked` return their seeds and outputs.
    pub fn new(checked: u32) -> VariedReps {
        VariedReps { checked }
    }
}

impl TimingConfig {
    /// Share of a request's timeout that [`TimingConfig::fit_to_timeout`] gives the worker as
    /// `budget_ms`: the rest absorbs what the budget cannot see (the reply, a loaded machine
    /// stretching the final call).
    pub const BUDGET_SHARE: f64 = crate::budget::BUDGET_SHARE;

    /// Sets `budget_ms` to [`TimingConfig::BUDGET_SHARE`] of `timeout` unless the caller chose
    /// one: what `TuningProcess::benchmark` and the pools do with their timeout, so that a slow
    /// kernel gets fewer reps rather than being killed at the deadline.
    pub fn fit_to_timeout(&mut self, timeout: std::time::Duration) {
        self.budget_ms
            .get_or_insert(timeout.as_secs_f64() * 1e3 * Self::BUDGET_SHARE);
    }
}

/// How the CPU backend evicts a kernel's data from the caches before each timed rep.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum CacheFlush {
    /// Evict every cache line of the request's tensors (x86-64: `clflush` line by line, then a
    /// fence), as TVM's CPU timer does: the cost grows with the tensors, not with the
    /// machine's cache. On other architectures this falls back to
    /// [`CacheFlush::LastLevelCache`].
    #[default]
    Tensors,
    /// Write a buffer twice the last-level cache (as sysfs reports it, capped at 512 MiB), as
    /// triton's `do_bench` does for the GPU L2: evicts everything, including data the kernel
    /// reaches through other pointers, at a cost that grows with the machine's cache (hundreds
    /// of MiB on servers and cloud VMs that report their host's L3).
    LastLevelCache,
}

impl CacheFlush {
    /// The manifest name: `tensors` or `llc`.
    pub fn name(self) -> &'static str {
        match self {
            CacheFlush::Tensors => "tensors",
            CacheFlush::LastLevelCache => "llc",
        }
    }

    /// Parses a manifest name ([`CacheFlush::name`]).
    pub fn from_name(name: &str) -> Option<CacheFlush> {
        [CacheFlush::Tensors, CacheFlush::LastLevelCache]
            .into_iter()
            .find(|f| f.name() == name)
    }
}

/// [`TimingConfig::return_outputs`]'s default.
fn returned_by_default() -> bool {
    true
}

impl Default for TimingConfig {
    fn default() -> Self {
        Self {
            warmup_ms: 25.0,
            rep_ms: 100.0,
            min_reps: 10,
            max_reps: 1000,
            flush_cache: true,
            hot: false,
            max_noise: None,
            max_time_ms: None,
            cache_flush: CacheFlush::Tensors,
            budget_ms: None,
            outputs_only: false,
            return_outputs: true,
            fresh_seed: None,
            estimate_runs: None,
            clock: RepClock::Preemption,
            varied_reps: None,
            varied_seed: None,
        }
    }
}

/// Scripted worker behaviours of the `diagnostics` backend. Each exercises one way a real
/// candidate can succeed or fail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub enum DiagnosticTask {
    /// Sleep `ms` milliseconds, then succeed with a result of that duration.
    Sleep {
        /// Duration in ms.
        ms: u64,
    },
    /// Busy-wait `ms` milliseconds; with `block_signals`, SIGTERM, SIGINT and SIGALRM are
    /// blocked first (a candidate that ignores polite signals).
    Spin {
        /// Duration in ms.
        ms: u64,
        /// Block SIGTERM/SIGINT/SIGALRM while spinning.
        block_signals: bool,
    },
    /// Never return.
    Hang,
    /// Call `abort()` (SIGABRT).
    Abort,
    /// Die of SIGSEGV, as a kernel that dereferences a bad pointer.
    Segfault,
    /// Exit at once with `code`, without answering.
    Exit {
        /// Exit status.
        code: i32,
    },
    /// Panic with `message` inside the backend; the worker answers `BenchError::Panic`.
    Panic {
        /// Panic message.
        message: String,
    },
    /// Fail with `BenchError::Failed { message }`; the worker lives.
    Fail {
        /// Error message.
        message: String,
    },
    /// Succeed, returning `bytes` as a `u8` output tensor named `echo`.
    Echo {
        /// Bytes to return.
        bytes: Bytes,
    },
    /// Succeed, keeping `bytes` in the worker's memory for a later [`DiagnosticTask::Recall`]
    /// (state that an initializer sets up for the tasks after it).
    Remember {
        /// Bytes to keep.
        bytes: Bytes,
    },
    /// Succeed, returning the bytes of the last [`DiagnosticTask::Remember`] in this worker
    /// process (empty if none) as a `u8` output tensor named `recall`.
    Recall,
    /// Succeed, returning one `u64` checksum (the wrapping sum of the bytes read as
    /// little-endian `u64` words, then the remaining bytes) per tensor initialized from
    /// `Init::Data`, read straight from the shared mapping: a round trip that touches every page
    /// of the caller's buffers without copying them.
    Checksum,
    /// Fail as a GPU fault would: `BenchError::DeviceFault` with `code` and `sticky`; a sticky
    /// one makes the worker exit after answering, as a lost CUDA context does.
    DeviceFault {
        /// The CUDA error code to report (700 = illegal address).
        code: i32,
        /// Whether the context is lost.
        sticky: bool,
    },
    /// Write `bytes` into every socket the worker has open (its IPC channels included), then
    /// succeed: a kernel scribbling garbage over file descriptors it does not own, to test that
    /// the parent turns any such mess into an error for this task only.
    WriteToSockets {
        /// The garbage.
        bytes: Bytes,
    },
    /// Allocate `bytes`, touch every page and never free them, then succeed: a candidate that
    /// leaks memory, which only replacing its worker (`maximum_process_uses`) reclaims.
    Leak {
        /// Bytes to leak.
        bytes: u64,
    },
    /// Succeed, returning the worker's pid as decimal text in a `u8` output tensor named `pid`.
    Pid,
    /// Fail with `BenchError::Failed` if the file `path` exists, else succeed: a task whose
    /// outcome a test can switch from outside (an initializer that starts failing, say).
    FailIfExists {
        /// The file to look for.
        path: String,
    },
    /// Succeed, returning the value of the worker's environment variable `name` (empty when
    /// unset) as a `u8` output tensor named after the variable.
    EnvVar {
        /// Variable name.
        name: String,
    },
    /// Write `stdout_bytes` to stdout and `stderr_bytes` to stderr with raw `write(2)`, then
    /// succeed.
    Print {
        /// Bytes to write to stdout.
        stdout_bytes: u64,
        /// Bytes to write to stderr.
        stderr_bytes: u64,
    },
    /// Succeed, and have the worker `_exit(code)` the moment its reply is sent: a kernel that
    /// ends its process right after answering. The reply always arrives; the request after it
    /// finds the worker gone (or going) before it could start, and must run on a fresh worker.
    ExitAfterReply {
        /// Exit status.
        code: i32,
    },
}
