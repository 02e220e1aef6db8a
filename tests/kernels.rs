//! Real C kernels through real workers: kernels with runtimes of their own (OpenMP), kernels
//! slower than their timeout allows, and a machine that reports a huge last-level cache.

use std::time::{Duration, Instant};

use tunebox_process::{ProcessError, TuningProcess};
use tunebox_protocol::{BenchError, BenchmarkRequest, CacheFlush, Define, Kernel, TimingConfig};

use crate::util::{AXPY, LONG, c_request, config};

/// `y = 2x + OFFSET` split over an OpenMP team: after the call, libgomp's threads stay alive
/// (spinning, then sleeping) in code of the kernel's libraries.
const OPENMP_AXPY: &str = "#include <stdint.h>\n\
#include <omp.h>\n\
void axpy(const float *x, float *y, int64_t n) {\n\
    #pragma omp parallel for\n\
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + OFFSET;\n\
}\n";

/// A request for `source`'s `axpy(x, y, n)` built with `-fopenmp` (and `-pthread`), `name`
/// defined as `value`, and a 2 ms rep budget.
fn openmp_request(source: &str, (name, value): (&str, String)) -> BenchmarkRequest {
    let mut request = c_request(source, "axpy", "1.0f");
    let Kernel::C(kernel) = &mut request.kernel else {
        unreachable!("c_request builds a C kernel")
    };
    kernel.flags.extend(["-fopenmp".into(), "-pthread".into()]);
    kernel.defines.push(Define::new(name, value));
    request.timing.rep_ms = 2.0;
    request
}

/// An OpenMP kernel: 50 requests, each a fresh kernel library (its own define) in a worker that
/// serves them all, must all succeed. The worker used to unload each library (and libgomp with
/// it) while the OpenMP threads still ran its code: a SIGSEGV in about one request in five.
#[test]
fn openmp_kernels_never_crash_their_worker() {
    let mut worker = TuningProcess::spawn(config().env("OMP_NUM_THREADS", "2")).unwrap();
    let pid = worker.pid();
    for i in 0..50 {
        // A new library every time, so each request loads (and used to unload) its own.
        let request = openmp_request(OPENMP_AXPY, ("VARIANT", i.to_string()));
        let result = worker.benchmark(request, Duration::from_secs(60));
        assert!(result.is_ok(), "request {i}: {:?}", result.err());
    }
    assert_eq!(worker.pid(), pid, "one worker served all 50");
}

/// `y = 2x + OFFSET` over an OpenMP team of `TEAM` threads.
const OPENMP_TEAM_AXPY: &str = "#include <stdint.h>\n\
void axpy(const float *x, float *y, int64_t n) {\n\
    #pragma omp parallel for num_threads(TEAM)\n\
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + OFFSET;\n\
}\n";

/// [`OPENMP_TEAM_AXPY`] that also starts a thread of its own on its first call, which spins
/// on after every call.
const SPINS_BESIDE_ITS_TEAM: &str = "#include <stdint.h>\n#include <pthread.h>\n\
    static volatile int stop;\n\
    static void *spin(void *arg) { (void)arg; while (!stop) {} return 0; }\n\
    void axpy(const float *x, float *y, int64_t n) {\n\
        static int started;\n\
        if (!started) { pthread_t t; pthread_create(&t, 0, spin, 0); started = 1; }\n\
        #pragma omp parallel for num_threads(TEAM)\n\
        for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + OFFSET;\n\
    }\n";

/// What a `suspicious (threads_after_call)` error `err` saw; panics on any other error.
fn work_left_running(err: &ProcessError) -> &str {
    let Some(BenchError::Suspicious { check, seen }) = err.bench_error() else {
        panic!("expected Suspicious, got {err:?}");
    };
    assert_eq!(check, "threads_after_call", "{seen}");
    seen
}

/// Tasks whose OpenMP teams grow from one to the next (a tuner's team sizes in shuffled
/// order) keep their worker: libgomp's pool, which a larger team grows (and a smaller one
/// shrinks), is not taken for threads the task left running, and stays for the next task as
/// the last team left it. Each task reports the threads its kernel had to start beyond it.
#[test]
fn openmp_teams_that_grow_from_task_to_task_keep_their_worker() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let threads = |worker: &TuningProcess| {
        std::fs::read_dir(format!("/proc/{}/task", worker.pid().unwrap()))
            .map(Iterator::count)
            .unwrap()
    };
    teams_in_one_worker(
        &mut worker,
        |team| openmp_request(OPENMP_TEAM_AXPY, ("TEAM", team.to_string())),
        |team, pool| (team - 1).saturating_sub(pool),
        |worker, team| {
            let pool = team - 1;
            assert!(
                threads(worker) > pool as usize,
                "team of {team}: its pool of {pool} is there for the next task"
            );
        },
    );
}

/// Tasks of `request(team)` for team sizes that grow and shrink (a tuner's, in shuffled order),
/// in `worker`: each leaves nothing behind, keeps the worker and reports `started(team, pool)`
/// threads started (`pool`: the last team's size less one); `after(worker, team)` then checks
/// what else it should.
fn teams_in_one_worker(
    worker: &mut TuningProcess,
    request: impl Fn(u32) -> BenchmarkRequest,
    started: impl Fn(u32, u32) -> u32,
    after: impl Fn(&TuningProcess, u32),
) {
    let mut pid = None;
    let mut pool = 0u32;
    for team in [2u32, 3, 5, 8, 2, 6] {
        let result = worker
            .benchmark(request(team), LONG)
            .unwrap_or_else(|e| panic!("team of {team}: {e}"));
        assert!(
            worker.left_behind().is_empty(),
            "team of {team}: {:?}",
            worker.left_behind()
        );
        assert_eq!(
            result.integrity.threads_started,
            Some(started(team, pool)),
            "team of {team} after a pool of {pool}"
        );
        let now = worker.pid();
        assert_eq!(
            *pid.get_or_insert(now),
            now,
            "team of {team}: the worker was replaced"
        );
        after(worker, team);
        pool = team - 1;
    }
}

/// A kernel whose smaller team lets the worker's kept libgomp pool shrink cannot start a thread
/// of its own unseen in the room that leaves: the look after the last call goes by the ids of
/// the threads there before, not by their count.
#[test]
fn a_thread_started_while_a_smaller_team_shrinks_the_pool_is_still_found() {
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let request = |source: &str, team: u32| openmp_request(source, ("TEAM", team.to_string()));
    // A pool of seven, kept for the next task.
    worker
        .benchmark(request(OPENMP_TEAM_AXPY, 8), LONG)
        .unwrap();
    let err = worker
        .benchmark(request(SPINS_BESIDE_ITS_TEAM, 2), LONG)
        .unwrap_err();
    work_left_running(&err);
}

/// An OpenMP kernel that also leaves a thread of its own (asleep, so no check inside the
/// request sees it work) still has its worker replaced: only libgomp's idle team is released.
#[test]
fn a_thread_an_openmp_kernel_leaves_of_its_own_still_retires_the_worker() {
    const LEAVES_A_THREAD: &str = "#include <stdint.h>\n#include <pthread.h>\n#include <unistd.h>\n\
        static void *nap(void *arg) { (void)arg; for (;;) pause(); return 0; }\n\
        void axpy(const float *x, float *y, int64_t n) {\n\
            static int started;\n\
            if (!started) { pthread_t t; pthread_create(&t, 0, nap, 0); started = 1; }\n\
            #pragma omp parallel for num_threads(4)\n\
            for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + OFFSET;\n\
        }\n";
    let mut worker = TuningProcess::spawn(config()).unwrap();
    let request = |source: &str| openmp_request(source, ("TEAM", "2".into()));
    // The first task of a worker may keep what it set up: an honest one goes first.
    worker.benchmark(request(OPENMP_TEAM_AXPY), LONG).unwrap();
    let pid = worker.pid();
    worker.benchmark(request(LEAVES_A_THREAD), LONG).unwrap();
    let leftover = worker
        .left_behind()
        .iter()
        .find(|l| l.what == "threads")
        .unwrap_or_else(|| panic!("no threads leftover in {:?}", worker.left_behind()));
    assert!(
        !leftover.restored && leftover.detail.contains("left 1 running"),
        "{leftover}"
    );
    worker.benchmark(request(OPENMP_TEAM_AXPY), LONG).unwrap();
    assert_ne!(worker.pid(), pid, "the worker it was left in was replaced");
}

/// A GNU OpenMP team told to spin while idle (`OMP_WAIT_POLICY=active`: libgomp's threads never
/// sleep) is measured, not judged `suspicious`: past the look's deadline its pool is ended and
/// the process looked at once more. Used to be `threads_after_call`, with advice to use
/// `passive`.
#[test]
fn a_gnu_openmp_team_told_to_spin_is_measured() {
    let mut worker = TuningProcess::spawn(config().env("OMP_WAIT_POLICY", "active")).unwrap();
    let pid = worker.pid();
    for team in [2u32, 4] {
        let result = worker
            .benchmark(
                openmp_request(OPENMP_TEAM_AXPY, ("TEAM", team.to_string())),
                LONG,
            )
            .unwrap_or_else(|e| panic!("team of {team}: {e}"));
        // Its pool was ended for the look: each team is started afresh, and counted.
        assert_eq!(
            result.integrity.threads_started,
            Some(team - 1),
            "team of {team}"
        );
        assert!(
            worker.left_behind().is_empty(),
            "team of {team}: {:?}",
            worker.left_behind()
        );
    }
    assert_eq!(worker.pid(), pid, "one worker served both");
}

/// Whether `clang -fopenmp` builds and links a program here (clang and LLVM's `libomp`, as
/// Debian's `clang libomp-dev` give them). Without them the tests of LLVM's runtime say so and
/// pass, unless `TUNEBOX_REQUIRE_LIBOMP` is set (as `.ci/run` sets it, having installed them),
/// where they fail instead.
fn clang_openmp() -> bool {
    static BUILT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let built = *BUILT.get_or_init(clang_builds_openmp);
    assert!(
        built || std::env::var_os("TUNEBOX_REQUIRE_LIBOMP").is_none(),
        "TUNEBOX_REQUIRE_LIBOMP is set but `clang -fopenmp` cannot build a program (apt-get \
         install clang libomp-dev)"
    );
    if !built {
        eprintln!(
            "skipped: no `clang -fopenmp` with LLVM's libomp here (apt-get install clang libomp-dev)"
        );
    }
    built
}

/// Whether `clang -fopenmp` builds a program with a parallel region (once per test process).
fn clang_builds_openmp() -> bool {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("probe.c");
    std::fs::write(
        &source,
        "int main(void) {\n#pragma omp parallel\n{}\nreturn 0;\n}\n",
    )
    .unwrap();
    std::process::Command::new("clang")
        .arg("-fopenmp")
        .arg(&source)
        .arg("-o")
        .arg(dir.path().join("probe"))
        .output()
        .is_ok_and(|out| out.status.success())
}

/// [`openmp_request`] compiled by clang, so that its kernel runs on LLVM's `libomp`, whose
/// idle threads spin for `KMP_BLOCKTIME` (200 ms by default) after every region; run it in a
/// worker of [`llvm_config`].
fn llvm_openmp_request(source: &str, team: u32) -> BenchmarkRequest {
    let mut request = openmp_request(source, ("TEAM", team.to_string()));
    let Kernel::C(kernel) = &mut request.kernel else {
        unreachable!("c_request builds a C kernel")
    };
    kernel.compiler = "clang".into();
    request
}

/// A worker whose LLVM OpenMP teams spin for 200 ms after a region, whatever the machine: the
/// default, set, since libomp may stop spinning where a team has more threads than the machine
/// has CPUs unless it is set.
fn llvm_config() -> tunebox_process::ProcessConfig {
    config().env("KMP_BLOCKTIME", "200")
}

/// Kernels on LLVM's OpenMP runtime (`clang -fopenmp`) are measured, not judged `suspicious`:
/// its idle team spins for 200 ms after the last call, which the look for work left running
/// took for work the kernel left (every multi-threaded choice of the histogram built by clang
/// was `suspicious`). The team is ended before the look, so teams that grow from task to task
/// keep their worker too, and each task reports the threads its team started.
#[test]
fn llvm_openmp_teams_are_measured_and_keep_their_worker() {
    if !clang_openmp() {
        return;
    }
    let mut worker = TuningProcess::spawn(llvm_config()).unwrap();
    // The runtime's pool was ended after the last task: each team starts afresh.
    teams_in_one_worker(
        &mut worker,
        |team| llvm_openmp_request(OPENMP_TEAM_AXPY, team),
        |team, _| team - 1,
        |_, _| {},
    );
}

/// The CPU time process `pid` has used so far (its threads', exited ones included).
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the name in parentheses: state is field 3, utime 14 and stime 15 (in clock ticks).
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf only reads a constant of the system.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_millis(ticks * 1000 / per_second)
}

/// A reference (`outputs_only`: its outputs returned, with no look for work left running after
/// its call) built on LLVM's OpenMP leaves no team spinning in its worker, which serves on
/// beside the candidates' windows: the worker's checks after the request end the pool it grew.
/// Left alone, the team's idle threads burn every CPU for 200 ms after each of its calls (200 ms
/// of CPU in the 100 ms watched here, on two cores, with those checks skipped).
#[test]
fn an_llvm_openmp_reference_leaves_no_team_spinning() {
    if !clang_openmp() {
        return;
    }
    let mut worker = TuningProcess::spawn(llvm_config()).unwrap();
    let mut request = llvm_openmp_request(OPENMP_TEAM_AXPY, 4);
    request.timing = request.timing.clone().outputs_only(true);
    worker.benchmark(request, LONG).unwrap();
    let pid = worker.pid().unwrap();
    let before = cpu_time(pid);
    std::thread::sleep(Duration::from_millis(100));
    let used = cpu_time(pid) - before;
    assert!(
        used < Duration::from_millis(40),
        "the reference's worker used {used:?} of CPU in the 100 ms after its reply"
    );
}

/// Ending LLVM's idle team before the look hides no work a kernel left of its own: a thread it
/// started that keeps spinning after the call is still found, and the worker retired.
#[test]
fn a_busy_thread_beside_an_llvm_openmp_team_is_still_work_left_running() {
    if !clang_openmp() {
        return;
    }
    let mut worker = TuningProcess::spawn(llvm_config()).unwrap();
    let err = worker
        .benchmark(llvm_openmp_request(SPINS_BESIDE_ITS_TEAM, 4), LONG)
        .unwrap_err();
    let seen = work_left_running(&err);
    assert!(seen.contains("1 thread(s) still runnable"), "{seen}");
    let pid = worker.pid();
    worker
        .benchmark(llvm_openmp_request(OPENMP_TEAM_AXPY, 2), LONG)
        .unwrap();
    assert_ne!(
        worker.pid(),
        pid,
        "the worker the thread runs in was retired"
    );
}

/// Nor can a kernel hide work in the ending of the team itself: pool threads that run a
/// thread-local destructor of the kernel's as they exit (here one that takes 300 ms, as one
/// waiting for work left running would) hold the worker in the runtime's pause, which is timed.
/// Untimed, the look that followed it found a quiet process and passed the kernel.
#[test]
fn work_hidden_in_the_ending_of_an_llvm_openmp_team_is_still_found() {
    if !clang_openmp() {
        return;
    }
    const LINGERS: &str = "#include <stdint.h>\n#include <pthread.h>\n#include <time.h>\n\
        static pthread_key_t key;\n\
        static pthread_once_t once = PTHREAD_ONCE_INIT;\n\
        static void linger(void *p) { (void)p; struct timespec t = {0, 300000000}; nanosleep(&t, 0); }\n\
        static void make_key(void) { pthread_key_create(&key, linger); }\n\
        void axpy(const float *x, float *y, int64_t n) {\n\
            #pragma omp parallel num_threads(TEAM)\n\
            {\n\
                pthread_once(&once, make_key);\n\
                pthread_setspecific(key, (void *)1);\n\
                #pragma omp for\n\
                for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + OFFSET;\n\
            }\n\
        }\n";
    let mut worker = TuningProcess::spawn(llvm_config()).unwrap();
    let err = worker
        .benchmark(llvm_openmp_request(LINGERS, 2), LONG)
        .unwrap_err();
    let seen = work_left_running(&err);
    assert!(
        seen.contains("ending the OpenMP runtime's idle threads took"),
        "{seen}"
    );
}

/// A kernel whose `min_reps` cannot fit its timeout is measured with fewer reps, not killed:
/// 150 ms a call, at least 10 reps (about 2.5 s with estimate and warmup) within 1.5 s.
#[test]
fn a_slow_kernel_gets_fewer_reps_instead_of_a_timeout() {
    const SLOW: &str = "#include <stdint.h>\n#include <time.h>\n\
        void slow(const float *x, float *y, int64_t n) {\n\
            struct timespec t = {0, 150000000};\n\
            nanosleep(&t, 0);\n\
            for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + OFFSET;\n\
        }\n";
    let mut request = c_request(SLOW, "slow", "1.0f");
    request.timing = TimingConfig::default().min_reps(10);
    let mut worker = TuningProcess::spawn(config()).unwrap();
    // Compile first: the budget is for measuring, and a loaded machine compiles slowly.
    worker
        .prepare(request.clone(), Duration::from_secs(60))
        .unwrap();
    let timeout = Duration::from_millis(1500);
    let started = Instant::now();
    let result = worker.benchmark(request.clone(), timeout).unwrap();
    assert_eq!(result.stats.stopped, "budget");
    assert!(
        (1..10).contains(&result.stats.reps),
        "{} reps",
        result.stats.reps
    );
    assert!(started.elapsed() < timeout);
    assert!((result.stats.median_ms - 150.0).abs() < 100.0);

    // A call that alone outlasts the timeout is still a timeout.
    let err = worker
        .benchmark(request.clone(), Duration::from_millis(100))
        .unwrap_err();
    assert!(matches!(err, ProcessError::Timeout { .. }), "{err:?}");

    // Calls that fit the timeout one by one, but not the four a measurement needs (the first,
    // an estimate run, one rep, the final call): an error saying what timeout would do, before
    // the deadline, not a kill.
    let started = Instant::now();
    let err = worker
        .benchmark(request, Duration::from_millis(400))
        .unwrap_err();
    // A kill at the deadline would be a `Timeout`, caught below; the bound only says it did
    // not wait for the calls it refused (generous: a busy machine answers late).
    assert!(started.elapsed() < Duration::from_millis(1200), "{err:?}");
    let Some(BenchError::DoesNotFit { call_ms, .. }) = err.bench_error() else {
        panic!("expected DoesNotFit, got {err:?}");
    };
    assert!(*call_ms >= 150.0, "{err}");
    assert!(
        err.to_string().contains("give it a timeout of at least"),
        "{err}"
    );
}

/// On a machine whose CPU reports a 260 MiB last-level cache (a cloud VM seeing its host's
/// L3), the default flush evicts the tensors' lines: the worker holds no flush buffer and a
/// small kernel's measurement costs no more than on a small-cache machine. The last-level
/// cache flush, still available, writes a 512 MiB buffer (the cap) there.
#[test]
fn a_huge_reported_cache_costs_nothing_with_the_default_flush() {
    let huge = || config().env("TUNEBOX_LLC_BYTES", "260M");
    let request = |flush: CacheFlush| -> BenchmarkRequest {
        let mut request = c_request(AXPY, "axpy", "1.0f");
        request.timing = TimingConfig::default()
            .warmup_ms(1.0)
            .rep_ms(5.0)
            .min_reps(10)
            .max_reps(10)
            .flush_cache(true)
            .cache_flush(flush);
        request
    };
    let rss_kib = |worker: &TuningProcess| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", worker.pid().unwrap()))
            .expect("the worker's status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/PID/status")
    };

    let mut worker = TuningProcess::spawn(huge()).unwrap();
    let started = Instant::now();
    let stats = worker
        .benchmark(request(CacheFlush::Tensors), Duration::from_secs(60))
        .unwrap()
        .stats;
    let tensors_s = started.elapsed().as_secs_f64();
    assert_eq!(stats.reps, 10);
    // The worker never allocated a flush buffer: well under the 512 MiB it would hold.
    let tensors_rss = rss_kib(&worker);
    assert!(tensors_rss < 128 * 1024, "peak RSS {tensors_rss} KiB");

    let mut worker = TuningProcess::spawn(huge()).unwrap();
    let started = Instant::now();
    worker
        .benchmark(request(CacheFlush::LastLevelCache), Duration::from_secs(60))
        .unwrap();
    let llc_s = started.elapsed().as_secs_f64();
    let llc_rss = rss_kib(&worker);
    assert!(llc_rss > 500 * 1024, "peak RSS {llc_rss} KiB");
    eprintln!(
        "260 MiB LLC: tensors flush {tensors_s:.3} s, {tensors_rss} KiB; \
         llc flush {llc_s:.3} s, {llc_rss} KiB"
    );
}

/// A timeout says where the request was: the kernel hangs on call `HANG_AFTER + 1` (each call
/// before it sleeps 2 ms), and the error names that call.
#[test]
fn a_timeout_says_which_call_hung() {
    const HANGS: &str = "#include <stdint.h>\n#include <time.h>\n\
        void hangs(const float *x, float *y, int64_t n) {\n\
            static int calls = 0;\n\
            if (++calls > HANG_AFTER) for (volatile int spin = 1; spin;) {}\n\
            struct timespec t = {0, 2000000};\n\
            nanosleep(&t, 0);\n\
            for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + OFFSET;\n\
        }\n";
    let mut worker = TuningProcess::spawn(config()).unwrap();
    // 1 first call, 5 estimate runs, 1 warmup call (warmup_ms = 0), then the reps.
    for (hang_after, expected, advice) in [
        (
            0,
            "in the first call of the kernel (no call returned)",
            "the kernel hangs, or one call takes longer than the timeout",
        ),
        (
            3,
            "in estimate run 3 of 5 (the last call took",
            "where calls took",
        ),
        (
            8,
            "in timed rep 2 of 10 (calls took",
            "the kernel hangs at this call",
        ),
    ] {
        let mut request = c_request(HANGS, "hangs", "1.0f");
        let Kernel::C(kernel) = &mut request.kernel else {
            unreachable!("c_request builds a C kernel")
        };
        kernel
            .defines
            .push(Define::new("HANG_AFTER", hang_after.to_string()));
        request.timing = TimingConfig::default()
            .warmup_ms(0.0)
            .rep_ms(0.0)
            .min_reps(10)
            .max_reps(10)
            .flush_cache(false);
        worker
            .prepare(request.clone(), Duration::from_secs(60))
            .unwrap();
        let err = worker
            .benchmark(request, Duration::from_secs(2))
            .unwrap_err();
        let ProcessError::Timeout { progress, .. } = &err else {
            panic!("HANG_AFTER={hang_after}: expected a timeout, got {err:?}");
        };
        assert!(progress.is_some(), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains(expected),
            "HANG_AFTER={hang_after}: {message}"
        );
        let pid = err.pid().expect("a timeout names its worker");
        assert!(
            message.contains(&format!("worker {pid} was killed")),
            "{message}"
        );
        assert!(
            message.contains(advice),
            "HANG_AFTER={hang_after}: {message}"
        );
    }
}
