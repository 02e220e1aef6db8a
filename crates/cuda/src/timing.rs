//! Timing on the device: the L2 flush, the launch-ahead delay, and the [`Runner`] that
//! [`do_bench`](tunebox_bench::do_bench) drives.
//!
//! One rep, cold (the default), is enqueued on the measuring stream as:
//!
//! ```text
//! [restore inputs] → L2 flush (cuMemsetD32Async over 2 × L2) → delay kernel (~20 µs)
//!   → start event → kernel → end event
//! ```
//!
//! Everything is on one stream, so the flush has completed when the start event is recorded, and
//! the events bracket the kernel alone. The delay kernel, one thread spinning on
//! `%globaltimer`, keeps the GPU busy while the host enqueues the start event and the launch:
//! without it the start event would be stamped as soon as it is enqueued, and the time the host
//! takes to launch the kernel (a few µs) would be counted as kernel time (nvbench's "blocking
//! kernel" solves the same problem with a host-released spin).

use std::ffi::c_void;

use tunebox_bench::{HostTensor, Restore, Runner};
use tunebox_protocol::{Arg, BenchError, LaunchConfig, Scalar, TensorData};

use crate::driver::{Context, DeviceBuffer, Event, Function, ImageKind, Module, Stream};
use crate::integrity::{self, StreamVsDevice};
use crate::tensors::DeviceTensor;

/// The flush buffer when the device reports no L2 size: triton's 256 MiB.
const FALLBACK_FLUSH_BYTES: u64 = 256 << 20;

/// The L2 flush buffer: twice the device's L2, cleared on the measuring stream before every
/// cold rep (nvbench's and Inductor's method). Allocated once per backend, on the first request
/// that flushes.
#[derive(Debug)]
pub(crate) struct L2Flusher {
    buffer: DeviceBuffer,
    value: u32,
}

impl L2Flusher {
    /// A flusher for a device with `l2_bytes` of L2.
    pub(crate) fn new(l2_bytes: u64) -> Result<Self, BenchError> {
        let bytes = flush_bytes(l2_bytes);
        log::debug!("cuda: L2 flush buffer of {bytes} bytes");
        Ok(Self {
            buffer: DeviceBuffer::alloc(bytes, "the L2 flush buffer")?,
            value: 0,
        })
    }

    /// Enqueues writing the whole buffer (a new value each time), which evicts every line the
    /// kernel's data held in L2.
    pub(crate) fn flush(&mut self, stream: &Stream) -> Result<(), BenchError> {
        self.value = self.value.wrapping_add(1);
        self.buffer.fill_words(stream, self.value)
    }
}

/// Bytes of the flush buffer for an L2 of `l2_bytes`: twice that, a multiple of 4 (the memset
/// writes 32-bit words), or [`FALLBACK_FLUSH_BYTES`] when the size is unknown.
pub(crate) fn flush_bytes(l2_bytes: u64) -> usize {
    let bytes = if l2_bytes == 0 {
        FALLBACK_FLUSH_BYTES
    } else {
        l2_bytes.saturating_mul(2)
    };
    usize::try_from(bytes.next_multiple_of(4)).unwrap_or(usize::MAX & !3)
}

/// PTX of the delay kernel: one thread spins until `ns` nanoseconds of `%globaltimer` have
/// passed. PTX 7.0 for `sm_75`, which the driver's JIT compiles for any newer GPU; checked with
/// `ptxas` for sm_75 through sm_120.
pub(crate) const DELAY_PTX: &str = "\
.version 7.0
.target sm_75
.address_size 64

.visible .entry tunebox_delay(
\t.param .u64 tunebox_delay_param_0
)
{
\t.reg .pred \t%p<2>;
\t.reg .b64 \t%rd<5>;

\tld.param.u64 \t%rd1, [tunebox_delay_param_0];
\tmov.u64 \t%rd2, %globaltimer;
$L__spin:
\tmov.u64 \t%rd3, %globaltimer;
\tsub.s64 \t%rd4, %rd3, %rd2;
\tsetp.lt.u64 \t%p1, %rd4, %rd1;
\t@%p1 bra \t$L__spin;
\tret;
}
";

/// How long the delay kernel spins before each timed rep: longer than the host needs to enqueue
/// an event and a launch (a few µs; more under virtualization), short next to a rep's overhead.
pub(crate) const DELAY_NS: u64 = 20_000;

/// The loaded delay kernel.
#[derive(Debug)]
pub(crate) struct DelayKernel {
    function: Function,
    /// Keeps `function` loaded.
    _module: Module,
}

impl DelayKernel {
    /// JIT-compiles and loads [`DELAY_PTX`].
    pub(crate) fn load() -> Result<Self, BenchError> {
        let module = Module::load(DELAY_PTX.as_bytes(), ImageKind::Ptx, "the delay kernel")?;
        let function = module.function("tunebox_delay", "the delay kernel")?;
        Ok(Self {
            function,
            _module: module,
        })
    }

    /// Enqueues one spin of [`DELAY_NS`].
    pub(crate) fn enqueue(&self, stream: &Stream) -> Result<(), BenchError> {
        let mut ns = DELAY_NS;
        let mut params = [(&mut ns as *mut u64).cast::<c_void>()];
        // SAFETY: the kernel takes one u64, and `params` holds one pointer to a u64 that lives
        // until this call returns (the driver copies parameter values at launch).
        unsafe {
            self.function
                .launch([1, 1, 1], [1, 1, 1], 0, stream, &mut params)
        }
    }
}

/// The arguments of a launch: one 8-byte slot per parameter, in the request's argument order (a
/// device pointer, or a scalar as its C type in the slot's first bytes: [`Scalar::slot`]), and
/// the array of pointers to them that `cuLaunchKernel` takes. The driver copies as many bytes
/// from each as the kernel's parameter has: 4 for an `int` or a `float`.
#[derive(Debug)]
pub(crate) struct Arguments {
    /// Boxed so that the pointers in `params` stay valid when `self` moves.
    values: Box<[u64]>,
    params: Vec<*mut c_void>,
}

impl Arguments {
    /// The tensors' device `pointers` and the `scalars` in `order` (checked:
    /// [`BenchmarkRequest::arg_order`](tunebox_protocol::BenchmarkRequest::arg_order)).
    pub(crate) fn new(pointers: &[u64], scalars: &[Scalar], order: &[Arg]) -> Self {
        let mut values: Box<[u64]> = order
            .iter()
            .map(|arg| match *arg {
                Arg::Tensor(i) | Arg::Untyped(i) => pointers[i as usize],
                Arg::Scalar(i) => u64::from_ne_bytes(scalars[i as usize].slot()),
            })
            .collect();
        let params = values
            .iter_mut()
            .map(|v| (v as *mut u64).cast::<c_void>())
            .collect();
        Self { values, params }
    }

    /// How many parameters.
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }
}

/// One request's kernel, bound to its arguments, as [`do_bench`](tunebox_bench::do_bench)
/// drives it.
pub(crate) struct CudaRunner<'a> {
    pub(crate) function: &'a Function,
    pub(crate) launch: LaunchConfig,
    pub(crate) arguments: Arguments,
    pub(crate) stream: &'a Stream,
    pub(crate) tensors: &'a [DeviceTensor],
    /// The tensors restored before every call after the first.
    pub(crate) restore: Restore,
    pub(crate) flusher: Option<&'a mut L2Flusher>,
    pub(crate) delay: Option<&'a DelayKernel>,
    pub(crate) start: Event,
    pub(crate) end: Event,
}

impl CudaRunner<'_> {
    /// Enqueues one launch.
    fn enqueue(&mut self) -> Result<(), BenchError> {
        // SAFETY: `arguments` holds one pointer per parameter, each to a live 64-bit value (the
        // parameter count and sizes were checked against the kernel where the driver can tell,
        // and the compiled signature is otherwise the caller's contract, as in the protocol's
        // `CudaKernel` docs); the device pointers among them belong to `tensors`, which outlive
        // the runner and are synchronized before they are freed.
        unsafe {
            self.function.launch(
                self.launch.grid,
                self.launch.block,
                self.launch.shared_mem_bytes,
                self.stream,
                &mut self.arguments.params,
            )
        }
    }

    fn running(&self) -> String {
        format!("running kernel `{}`", self.function.name())
    }

    /// Times `calls` back-to-back launches between one pair of events, after the delay kernel.
    fn timed(&mut self, calls: u32) -> Result<f64, BenchError> {
        if let Some(delay) = self.delay {
            delay.enqueue(self.stream)?;
        }
        self.start.record(self.stream)?;
        for _ in 0..calls {
            self.enqueue()?;
        }
        self.end.record(self.stream)?;
        let during = self.running();
        self.end.synchronize(|| during)?;
        self.end.elapsed_since(&self.start)
    }
}

/// The integrity calls after the reps (crate::integrity): untimed by the reps, each one call.
impl CudaRunner<'_> {
    /// Enqueues filling the outputs (those not re-initialized before every call) with `0xFF`.
    fn poison_outputs(&self) -> Result<(), BenchError> {
        for tensor in self.tensors {
            if tensor.spec().output && !tensor.spec().reset {
                tensor.poison(self.stream)?;
            }
        }
        Ok(())
    }

    /// The outputs as they are now (waits for the stream).
    pub(crate) fn outputs(&self) -> Result<Vec<TensorData>, BenchError> {
        self.tensors
            .iter()
            .filter(|t| t.spec().output)
            .map(|t| t.to_data(self.stream))
            .collect()
    }

    /// One call on poisoned outputs, and on `fresh` inputs where given (by tensor index, from
    /// [`tunebox_bench::fresh_inputs`]; they stay in the buffers afterwards); its outputs.
    pub(crate) fn poisoned_call(
        &mut self,
        fresh: &[Option<HostTensor>],
    ) -> Result<Vec<TensorData>, BenchError> {
        self.restore()?;
        for (tensor, host) in self.tensors.iter().zip(fresh) {
            if let Some(host) = host {
                tensor.upload(host, self.stream)?;
            }
        }
        self.poison_outputs()?;
        // `run` synchronizes the stream, after which `fresh` may go.
        self.run()?;
        self.outputs()
    }

    /// The call after the reps: a kernel must overwrite its (poisoned) outputs completely every
    /// time, and with `fresh` inputs (any `Some`) it runs on inputs it has not seen — one call
    /// for both checks, as in the cpu backend; then the outputs must stay as they are across a
    /// device-wide synchronize. Returns `(outputs_after_reps, fresh_outputs)`, one of them
    /// empty: the call's outputs are the second with fresh inputs, else the first.
    pub(crate) fn after_reps(
        &mut self,
        context: &Context,
        fresh: &[Option<HostTensor>],
    ) -> Result<(Vec<TensorData>, Vec<TensorData>), BenchError> {
        let last = self.poisoned_call(fresh)?;
        self.check_outputs_settled(context, &last)?;
        Ok(if fresh.iter().any(Option::is_some) {
            (Vec::new(), last)
        } else {
            (last, Vec::new())
        })
    }

    /// Fails when the outputs differ from `last` (what the last call left, read through the
    /// stream) after a device-wide synchronize.
    fn check_outputs_settled(
        &self,
        context: &Context,
        last: &[TensorData],
    ) -> Result<(), BenchError> {
        let during = self.running();
        context.synchronize(|| during)?;
        integrity::outputs_settled(&integrity::changed_outputs(last, &self.outputs()?))
    }

    /// Times one more call by the events on the stream and by the host's clock across a
    /// device-wide synchronize, up to [`integrity::ESCAPE_LOOKS`] times (the first look that
    /// sees nothing outside the stream ends it); fails when every look did.
    pub(crate) fn check_work_in_stream(&mut self, context: &Context) -> Result<(), BenchError> {
        let mut looks = Vec::new();
        for _ in 0..integrity::ESCAPE_LOOKS {
            let look = self.stream_vs_device(context)?;
            looks.push(look);
            if !look.escaped() {
                break;
            }
        }
        integrity::work_outside_stream(&looks)
    }

    fn stream_vs_device(&mut self, context: &Context) -> Result<StreamVsDevice, BenchError> {
        self.restore()?;
        let during = self.running();
        self.stream.synchronize(|| during.clone())?;
        let started = std::time::Instant::now();
        self.start.record(self.stream)?;
        self.enqueue()?;
        self.end.record(self.stream)?;
        context.synchronize(|| during)?;
        let device_ms = started.elapsed().as_secs_f64() * 1e3;
        Ok(StreamVsDevice {
            event_ms: self.end.elapsed_since(&self.start)?,
            device_ms,
        })
    }
}

impl Runner for CudaRunner<'_> {
    fn run(&mut self) -> Result<(), BenchError> {
        self.enqueue()?;
        let during = self.running();
        self.stream.synchronize(|| during)
    }

    fn flush(&mut self) -> Result<(), BenchError> {
        match self.flusher.as_deref_mut() {
            Some(flusher) => flusher.flush(self.stream),
            None => Ok(()),
        }
    }

    fn restore(&mut self) -> Result<(), BenchError> {
        for &i in self.restore.indices() {
            self.tensors[i].reset(self.stream)?;
        }
        Ok(())
    }

    fn run_timed(&mut self) -> Result<f64, BenchError> {
        self.timed(1)
    }

    fn run_batch_timed(&mut self, calls: u32) -> Result<f64, BenchError> {
        self.timed(calls)
    }

    /// Device events time the launches: the host thread's CPU time says nothing of them.
    fn host_timed(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flush_buffer_is_twice_the_l2() {
        assert_eq!(flush_bytes(50 << 20), 100 << 20);
        assert_eq!(flush_bytes(60_000_000), 120_000_000);
        assert_eq!(flush_bytes(3), 8);
        assert_eq!(flush_bytes(0), 256 << 20);
    }

    #[test]
    fn arguments_point_at_their_values() {
        let scalars = [
            Scalar::new("a", 7),
            Scalar::new("b", -1),
            Scalar::i32("c", -2),
            Scalar::f32("d", 0.5),
            Scalar::f64("e", 0.25),
        ];
        let order = [
            Arg::Scalar(2),
            Arg::Tensor(0),
            Arg::Scalar(0),
            Arg::Scalar(1),
            Arg::Untyped(1),
            Arg::Scalar(3),
            Arg::Scalar(4),
        ];
        let arguments = Arguments::new(&[0xd000, 0xe000], &scalars, &order);
        assert_eq!(arguments.len(), 7);
        let moved = arguments;
        // SAFETY: the pointers point into `moved.values`, alive here, each at an aligned u64.
        let read = |i: usize| unsafe { *moved.params[i].cast::<u64>() };
        // SAFETY: as above; the first 4 of the slot's 8 bytes are in bounds, `[u8; 4]` has
        // alignment 1.
        let read4 = |i: usize| unsafe { *moved.params[i].cast::<[u8; 4]>() };
        // An `int` parameter reads the first 4 bytes: the int32 itself.
        assert_eq!(i32::from_ne_bytes(read4(0)), -2);
        assert_eq!(read(1), 0xd000);
        assert_eq!(read(2), 7);
        assert_eq!(read(3), u64::MAX);
        assert_eq!(read(4), 0xe000);
        // A `float` parameter reads the f32's 4 bytes; a `double` all 8.
        assert_eq!(f32::from_ne_bytes(read4(5)), 0.5);
        assert_eq!(f64::from_bits(read(6)), 0.25);
    }

    #[test]
    fn the_delay_kernel_declares_its_entry() {
        assert!(DELAY_PTX.contains(".visible .entry tunebox_delay("));
        assert!(DELAY_PTX.contains("%globaltimer"));
    }
}
