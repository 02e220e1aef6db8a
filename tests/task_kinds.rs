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
    /// Turn on flush-to-zero, denormals-are-zero and rounding toward zero, and leave them on.
    SetFpModes,
    /// Answer `f64::MIN_POSITIVE / 4` as computed here: 0 under flush-to-zero.
    FpProbe,
    /// Open `/dev/null` this many times and never close it.
    LeakFds(usize),
    /// Start a thread that sleeps for a minute, and leave it running.
    LeakThread,
    /// Change the working directory, umask, an environment variable, SIGUSR1's disposition and
    /// the signal mask, and leave them so.
    Meddle,
    /// Answer the state `Meddle` changes, in words.
    StateProbe,
    /// Fail with "Too many open files" unless this is the first task of the worker process.
    FailIfReused,
    /// Open `/dev/null` this many times, never close it, and fail with "Too many open files":
    /// a task that uses up its worker's descriptors itself.
    LeakThenFail(usize),
    /// Fail to allocate 4 GiB as Rust's allocator reports it (`memory allocation of … bytes
    /// failed`, a backtrace under `RUST_BACKTRACE=1`, then abort).
    AllocFailure,
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
        TestTask::SetFpModes => {
            set_fp_modes();
            TestOutput::Number(0.0)
        }
        TestTask::FpProbe => {
            TestOutput::Number(std::hint::black_box(f64::MIN_POSITIVE) / std::hint::black_box(4.0))
        }
        TestTask::LeakFds(n) => {
            for _ in 0..n {
                let file = std::fs::File::open("/dev/null").map_err(failed)?;
                std::mem::forget(file);
            }
            TestOutput::Number(n as f64)
        }
        TestTask::LeakThread => {
            std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_secs(60)));
            TestOutput::Number(1.0)
        }
        TestTask::Meddle => {
            std::env::set_current_dir("/").map_err(failed)?;
            // SAFETY: the test worker runs tasks on one thread; these calls only change
            // process state, which is what the task is for.
            unsafe {
                std::env::set_var("TUNEBOX_TEST_MEDDLED", "1");
                libc::umask(0o077);
                libc::signal(libc::SIGUSR1, libc::SIG_IGN);
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGUSR2);
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            }
            TestOutput::Number(0.0)
        }
        TestTask::StateProbe => TestOutput::Blob(state_words().into_bytes()),
        TestTask::AllocFailure => {
            let layout = std::alloc::Layout::from_size_align(1 << 32, 8).expect("a layout");
            std::alloc::handle_alloc_error(layout)
        }
        TestTask::LeakThenFail(n) => {
            for _ in 0..n {
                std::mem::forget(std::fs::File::open("/dev/null").map_err(failed)?);
            }
            return Err(BenchError::Failed {
                message: "cannot open scratch file: Too many open files (os error 24)".into(),
            });
        }
        TestTask::FailIfReused => {
            use std::sync::atomic::{AtomicBool, Ordering};
            static RAN: AtomicBool = AtomicBool::new(false);
            if RAN.swap(true, Ordering::Relaxed) {
                return Err(BenchError::Failed {
                    message: "cannot open scratch file: Too many open files (os error 24)".into(),
                });
            }
            TestOutput::Number(1.0)
        }
    })
}

fn failed(e: std::io::Error) -> BenchError {
    BenchError::Failed {
        message: e.to_string(),
    }
}

#[cfg(target_arch = "x86_64")]
fn set_fp_modes() {
    let mut mxcsr: u32 = 0;
    // SAFETY: reads MXCSR into a local, then loads it with FTZ (bit 15), DAZ (bit 6) and
    // round-toward-zero (bits 13-14) set: exactly what a careless fast-math kernel does.
    unsafe {
        std::arch::asm!("stmxcsr [{}]", in(reg) &raw mut mxcsr, options(nostack));
        mxcsr |= (1 << 15) | (1 << 6) | (3 << 13);
        std::arch::asm!("ldmxcsr [{}]", in(reg) &raw const mxcsr, options(nostack));
    }
}

#[cfg(target_arch = "aarch64")]
fn set_fp_modes() {
    // SAFETY: sets FPCR's FZ (bit 24) and round-toward-zero (bits 22-23).
    unsafe {
        let fpcr: u64;
        std::arch::asm!("mrs {}, fpcr", out(reg) fpcr, options(nomem, nostack));
        std::arch::asm!("msr fpcr, {}", in(reg) fpcr | (1 << 24) | (3 << 22), options(nomem, nostack));
    }
}

/// The working directory, umask, `TUNEBOX_TEST_MEDDLED`, SIGUSR1's disposition and whether
/// SIGUSR2 is blocked, in words.
fn state_words() -> String {
    let cwd = std::env::current_dir().map(|p| p.display().to_string());
    // SAFETY: `umask` twice puts the mask back; `sigaction` with a null new action and
    // `pthread_sigmask` with a null new set only read.
    let (umask, ignored, blocked) = unsafe {
        let umask = libc::umask(0o022);
        libc::umask(umask);
        let mut action: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGUSR1, std::ptr::null(), &mut action);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_SETMASK, std::ptr::null(), &mut set);
        (
            umask,
            action.sa_sigaction == libc::SIG_IGN,
            libc::sigismember(&set, libc::SIGUSR2) == 1,
        )
    };
    format!(
        "cwd {cwd:?} umask {umask:03o} env {:?} usr1 ignored {ignored} usr2 blocked {blocked}",
        std::env::var_os("TUNEBOX_TEST_MEDDLED")
    )
}
