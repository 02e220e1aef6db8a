//! Caller data in shared memory: round trips, concurrency, limits, inputs kernels write.

use std::time::{Duration, Instant};

use tunebox_pool::{PoolConfig, PoolExecutor, Tolerance, verify_outputs};
use tunebox_process::{ProcessError, TuningProcess};
use tunebox_protocol::{
    BenchmarkRequest, DType, DiagnosticTask, Init, MAX_SHARED_PAYLOADS, SharedBuffer, TensorSpec,
    checksum,
};

use crate::util::{LONG, c_request, config, diag};

fn data_tensor(name: &str, buffer: &SharedBuffer, output: bool) -> TensorSpec {
    let mut spec = TensorSpec::new(name, DType::U8, vec![buffer.len() as u64])
        .init(Init::Data(buffer.share()));
    spec.output = output;
    spec
}

fn patterned(len: usize) -> SharedBuffer {
    // A 4 KiB pattern that is not a multiple of a word, so every offset differs.
    let pattern: Vec<u8> = (0..4093u32)
        .map(|i| (i.wrapping_mul(31) >> 3) as u8)
        .collect();
    let mut buffer = SharedBuffer::new(len).unwrap();
    for chunk in buffer.get_mut().unwrap().chunks_mut(pattern.len()) {
        chunk.copy_from_slice(&pattern[..chunk.len()]);
    }
    buffer
}

#[test]
fn payloads_of_every_size_round_trip_intact() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    for len in [0, 1, 65_535, 65_536, 65_537, 1 << 20, 16 << 20, 256 << 20] {
        let buffer = patterned(len);
        let expected = checksum(buffer.as_slice());
        // Read in place by the worker: the checksum comes back.
        let mut request = diag(DiagnosticTask::Checksum);
        request.tensors.push(data_tensor("in", &buffer, false));
        let result = worker.benchmark(request, LONG).unwrap();
        let sum = u64::from_ne_bytes(result.outputs[0].bytes[..8].try_into().unwrap());
        assert_eq!(sum, expected, "{len} bytes, read in place");
        // Copied into a tensor and handed back as a new shared buffer.
        let mut request = diag(DiagnosticTask::Sleep { ms: 0 });
        request.tensors.push(data_tensor("echo", &buffer, true));
        let result = worker.benchmark(request, LONG).unwrap();
        // A large one was held in the worker and read out of it before the reply came back
        // (protocol 13): it reads as itself, not as held bytes.
        assert!(!result.outputs[0].bytes.is_held(), "{len} bytes");
        assert_eq!(result.outputs[0].bytes.len(), len);
        assert_eq!(
            checksum(&result.outputs[0].bytes),
            expected,
            "{len} bytes, echoed"
        );
    }
}

#[test]
fn a_large_output_and_a_large_input_at_once_do_not_deadlock() {
    let executor = PoolExecutor::new(
        PoolConfig::new()
            .max_workers(2)
            .timeout(LONG)
            .process_config(config()),
    )
    .unwrap();
    let input = patterned(16 << 20);
    let start = Instant::now();
    for _ in 0..3 {
        let mut returns = diag(DiagnosticTask::Sleep { ms: 20 });
        returns.tensors.push({
            let mut spec =
                TensorSpec::new("out", DType::F32, vec![4 << 20]).init(Init::Random { seed: 1 });
            spec.output = true;
            spec
        });
        let mut sends = diag(DiagnosticTask::Checksum);
        sends.tensors.push(data_tensor("in", &input, false));
        let a = executor.submit(returns).unwrap();
        let b = executor.submit(sends).unwrap();
        assert_eq!(a.wait().unwrap().outputs[0].bytes.len(), 16 << 20);
        b.wait().unwrap();
    }
    // A deadlock is only broken by a request's 30 s timeout (and fails its wait); a bound below
    // that catches one broken silently, while leaving a loaded machine its 12.7 s (seen with
    // four builds running; 2 s idle).
    assert!(
        start.elapsed() < Duration::from_secs(25),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn too_many_buffers_fail_before_sending() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let pid = worker.pid();
    let buffers: Vec<SharedBuffer> = (0..100).map(|i| patterned(64 + i)).collect();
    let mut request = diag(DiagnosticTask::Checksum);
    for buffer in &buffers {
        request.tensors.push(data_tensor("b", buffer, false));
    }
    let err = worker.put(request).unwrap_err();
    assert!(
        matches!(err, ProcessError::TooManyBuffers { limit } if limit == MAX_SHARED_PAYLOADS),
        "{err:?}"
    );
    // Nothing was sent: the worker is the same and idle.
    assert_eq!(worker.pid(), pid);
    worker.ping(LONG).unwrap();
    // At the limit, every buffer arrives intact.
    let mut request = diag(DiagnosticTask::Checksum);
    for buffer in &buffers[..MAX_SHARED_PAYLOADS] {
        request.tensors.push(data_tensor("b", buffer, false));
    }
    let result = worker.benchmark(request, LONG).unwrap();
    let sums: Vec<u64> = result.outputs[0]
        .bytes
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
        .collect();
    let expected: Vec<u64> = buffers[..MAX_SHARED_PAYLOADS]
        .iter()
        .map(|b| checksum(b.as_slice()))
        .collect();
    assert_eq!(sums, expected);
}

/// `y = 2x + 1`, and the bad variant also doubles its input `x` on every call.
const WRITES_INPUT: &str = "#include <stdint.h>\n\
void axpy(float *x, float *y, int64_t n) {\n\
    for (int64_t i = 0; i < n; i++) {\n\
        y[i] = 2.0f * x[i] + OFFSET;\n\
        if (SCRIBBLE == 1 || (SCRIBBLE == 2 && i == n - 1)) x[i] *= 2.0f;\n\
    }\n\
}\n";

fn with_input(request: &mut BenchmarkRequest, input: &SharedBuffer, scribble: bool) {
    if let tunebox_protocol::Kernel::C(kernel) = &mut request.kernel {
        kernel.source = WRITES_INPUT.into();
        kernel.defines.push(tunebox_protocol::Define::new(
            "SCRIBBLE",
            if scribble { "1" } else { "0" },
        ));
    }
    request.tensors[0].init = Init::Data(input.share());
}

/// A request of `WRITES_INPUT` on `n` random floats whose contents the caller made once and
/// shares, as a pool shares a large input (mapped copy-on-write in the worker).
/// `scribble`: 0 writes nothing, 1 all of `x`, 2 its last element only (in its copied tail).
fn shared_input_request(n: u64, contents: &SharedBuffer, scribble: u8) -> BenchmarkRequest {
    let kernel = tunebox_protocol::CKernel::new(WRITES_INPUT, "axpy")
        .define("OFFSET", "1.0f")
        .define("SCRIBBLE", scribble.to_string())
        .flags(["-O2"]);
    let x = TensorSpec::new("x", DType::F32, [n])
        .random(5)
        .contents(contents.share());
    BenchmarkRequest::new(kernel)
        .tensor(x)
        .tensor(TensorSpec::new("y", DType::F32, [n]).output())
        .scalar("n", n as i64)
        .timing(
            tunebox_protocol::TimingConfig::default()
                .warmup_ms(1.0)
                .rep_ms(5.0)
                .flush_cache(false),
        )
}

/// Most inputs end within a page: the worker maps their whole pages and copies the rest, and a
/// kernel that writes all of it (the copied tail too) is caught, restored before every call,
/// and leaves the caller's contents as they were.
#[test]
fn a_shared_input_ending_within_a_page_is_restored_tail_and_all() {
    let n = 4 * 4096 / 4 + 3;
    let contents = TensorSpec::new("x", DType::F32, [n])
        .random(5)
        .make_contents()
        .unwrap();
    let before = checksum(contents.as_slice());
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let reference = worker
        .benchmark(shared_input_request(n, &contents, 0), LONG)
        .unwrap();
    assert!(reference.mutated_inputs.is_empty());
    let tolerance = Tolerance::new(0.0, 0.0);
    for scribble in [1, 2] {
        let scribbled = worker
            .benchmark(shared_input_request(n, &contents, scribble), LONG)
            .unwrap();
        assert_eq!(scribbled.mutated_inputs, ["x"], "scribble {scribble}");
        let (first, after) = (&scribbled.outputs, &scribbled.outputs_after_reps);
        assert!(verify_outputs(&reference.outputs, first, tolerance).passed());
        assert!(verify_outputs(&reference.outputs, after, tolerance).passed());
        assert_eq!(checksum(contents.as_slice()), before);
    }
    let next = worker
        .benchmark(shared_input_request(n, &contents, 0), LONG)
        .unwrap();
    assert!(verify_outputs(&reference.outputs, &next.outputs, tolerance).passed());
    assert!(next.mutated_inputs.is_empty());
}

#[test]
fn a_kernel_that_writes_its_input_is_restored_and_cannot_corrupt_the_next() {
    let mut input = SharedBuffer::new(4096 * 4).unwrap();
    for (i, chunk) in input.get_mut().unwrap().chunks_exact_mut(4).enumerate() {
        chunk.copy_from_slice(&(i as f32 / 4096.0).to_ne_bytes());
    }
    let before = checksum(input.as_slice());
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let mut reference = c_request(WRITES_INPUT, "axpy", "1.0f");
    with_input(&mut reference, &input, false);
    let reference = worker.benchmark(reference, LONG).unwrap();
    assert!(reference.mutated_inputs.is_empty());

    let mut scribbler = c_request(WRITES_INPUT, "axpy", "1.0f");
    with_input(&mut scribbler, &input, true);
    let scribbled = worker.benchmark(scribbler, LONG).unwrap();
    assert_eq!(scribbled.mutated_inputs, ["x"]);
    let tolerance = Tolerance::new(0.0, 0.0);
    // Restored before every call: even the call after the reps sees the original input.
    assert!(verify_outputs(&reference.outputs, &scribbled.outputs, tolerance).passed());
    assert!(verify_outputs(&reference.outputs, &scribbled.outputs_after_reps, tolerance).passed());
    // The caller's buffer was never written, and the next candidate is unaffected.
    assert_eq!(checksum(input.as_slice()), before);
    let mut next = c_request(WRITES_INPUT, "axpy", "1.0f");
    with_input(&mut next, &input, false);
    let next = worker.benchmark(next, LONG).unwrap();
    assert!(verify_outputs(&reference.outputs, &next.outputs, tolerance).passed());
}
