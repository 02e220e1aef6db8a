//! A parent process for the integration tests to kill: it starts a worker and reports its pid.
//!
//! `tunebox-test-launcher busy WORKER` starts a worker, gives it a 60 s task, prints the worker's
//! pid and waits. `… thread WORKER` starts the worker from a thread that exits at once, prints the
//! pid and waits. `… flood WORKER` runs a task that writes 2 MiB to stdout and 2 MiB to stderr
//! with both streams inherited, twice, and exits 0 if each took under 1 s.

use std::io::Write;
use std::time::{Duration, Instant};

use tunebox_process::{Output, ProcessConfig, TuningProcess};
use tunebox_protocol::{BenchmarkRequest, DiagnosticTask, Kernel};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (mode, worker) = (args[1].as_str(), args[2].clone());
    let config = ProcessConfig::new().worker(worker);
    match mode {
        "busy" => {
            let mut process = TuningProcess::spawn(config).expect("worker starts");
            process
                .put(BenchmarkRequest::new(Kernel::Diagnostic(
                    DiagnosticTask::Sleep { ms: 60_000 },
                )))
                .expect("put");
            report(process.pid());
            let _ = process.get(Duration::from_secs(120));
        }
        "thread" => {
            let process = std::thread::spawn(move || TuningProcess::spawn(config))
                .join()
                .expect("the spawning thread")
                .expect("worker starts");
            // The spawning thread is gone; the worker must outlive it.
            report(process.pid());
            std::thread::sleep(Duration::from_secs(120));
        }
        "flood" => {
            let config = config.stdout(Output::Inherit).stderr(Output::Inherit);
            let mut process = TuningProcess::spawn(config).expect("worker starts");
            for _ in 0..2 {
                let start = Instant::now();
                process
                    .benchmark(
                        BenchmarkRequest::new(Kernel::Diagnostic(DiagnosticTask::Print {
                            stdout_bytes: 2 << 20,
                            stderr_bytes: 2 << 20,
                        })),
                        Duration::from_secs(30),
                    )
                    .expect("the flood task succeeds");
                if start.elapsed() >= Duration::from_secs(1) {
                    std::process::exit(1);
                }
            }
        }
        other => panic!("unknown mode {other}"),
    }
}

fn report(pid: Option<u32>) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", pid.expect("a running worker")).expect("stdout");
    out.flush().expect("stdout");
}
