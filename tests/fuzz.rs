//! Garbage on the wire: decoding never panics, and a worker that sends garbage costs its own task.

use std::time::{Duration, Instant};

use ipc_channel::ipc::IpcMessage;
use proptest::prelude::*;
use tunebox_process::{ProcessError, TuningProcess};
use tunebox_protocol::{
    BenchError, Bootstrap, DiagnosticTask, Request, RequestBody, Response, ResponseBody,
};

use crate::util::{LONG, bytes, config, diag};

/// Cases per decoding property: `TUNEBOX_FUZZ_CASES` (set by `cargo xtask fuzz`), else `default`.
fn cases(default: u32) -> u32 {
    std::env::var("TUNEBOX_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Valid messages, encoded as they travel, to mutate.
fn encoded() -> Vec<Vec<u8>> {
    let responses = [
        ResponseBody::Pong,
        ResponseBody::Benchmark(Err(BenchError::Compile {
            command: "cc -O3 k.c".into(),
            log: "k.c:1:1: error: expected ';'".into(),
        })),
        ResponseBody::Prepared(Ok(())),
    ];
    let mut out: Vec<Vec<u8>> = responses
        .into_iter()
        .enumerate()
        .map(|(id, body)| postcard::to_allocvec(&Response::new(id as u64, body)).unwrap())
        .collect();
    out.push(
        postcard::to_allocvec(&Request::new(
            9,
            RequestBody::Benchmark(Box::new(diag(DiagnosticTask::Sleep { ms: 3 }))),
        ))
        .unwrap(),
    );
    out
}

/// Decodes `bytes` as every message type the two sides read; requests and responses must not
/// panic. A greeting (`Bootstrap`) carries channels, and ipc-channel panics on a corrupt channel
/// index there (its own FIXME); the parent decodes greetings only on its accept thread, under a
/// catch that turns that into a protocol error, as this does.
fn decode_all(bytes: &[u8]) {
    let _ = IpcMessage::from_data(bytes.to_vec()).to::<Request>();
    let _ = IpcMessage::from_data(bytes.to_vec()).to::<Response>();
    let greeting = bytes.to_vec();
    let _ = std::panic::catch_unwind(move || IpcMessage::from_data(greeting).to::<Bootstrap>());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(2000), ..ProptestConfig::default() })]

    #[test]
    fn decoding_arbitrary_bytes_never_panics(garbage in proptest::collection::vec(any::<u8>(), 0..512)) {
        decode_all(&garbage);
    }

    #[test]
    fn decoding_mutated_messages_never_panics(
        which in 0usize..4,
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(),
    ) {
        let mut message = encoded()[which].clone();
        for (at, value) in flips {
            let len = message.len();
            message[at % len] = value;
        }
        let cut = cut % (message.len() + 1);
        decode_all(&message[..cut]);
        decode_all(&message);
    }
}

proptest! {
    // Each case costs a worker restart.
    #![proptest_config(ProptestConfig { cases: cases(16 * 1000).div_ceil(1000), ..ProptestConfig::default() })]

    #[test]
    fn a_worker_writing_garbage_costs_its_task_only(garbage in proptest::collection::vec(any::<u8>(), 1..300)) {
        let mut worker = TuningProcess::spawn(config()).unwrap();
        let start = Instant::now();
        let outcome = worker.benchmark(
            diag(DiagnosticTask::WriteToSockets { bytes: bytes(&garbage) }),
            Duration::from_millis(300),
        );
        // Garbage may be a protocol error, a crash, or even read past; never a hang or a panic.
        prop_assert!(
            matches!(
                outcome,
                Ok(_) | Err(ProcessError::Protocol { .. } | ProcessError::WorkerCrashed { .. })
            ),
            "{outcome:?}"
        );
        prop_assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());
        let echo = worker.benchmark(diag(DiagnosticTask::Echo { bytes: bytes(&[1]) }), LONG);
        prop_assert!(echo.is_ok(), "the next task failed: {echo:?}");
    }
}
