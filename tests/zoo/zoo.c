/* The hostile zoo: one candidate per value of CHEAT, each cheating the harness or attacking the
 * machine in one way (tests/sandbox.rs says how each must be caught). CHEAT 0, 98 and 99 are
 * innocent: y = 2 x + 1 (98 forty times over, so that it ranks last). A successful attack
 * writes LEAKED into y[0], so that the run would see a wrong answer; a refused one leaves the
 * honest answer. WORK (default 1) makes every honest answer cost WORK times as much, so that a
 * cheat that skips the work is plainly the fastest (tests/sandbox.rs, with the defence off). */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <signal.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <dirent.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#define LEAKED 12345.0f

/* The name (comm) the processes that cases 24 and 25 leave behind take, so that a test finds
 * any that outlived the run. */
#ifndef MARK
#define MARK "tunebox-zoo"
#endif

#ifndef WORK
#define WORK 1
#endif

/* In blocks of 256 elements, each block's WORK passes at once: CHEAT 34, which recomputes
 * block by block, has the same locality. */
static void honest(const float *x, float *y, int64_t n) {
    for (int64_t b = 0; b < n; b += 256) {
        int64_t e = b + 256 < n ? b + 256 : n;
        for (int w = 0; w < WORK; w++) {
            for (int64_t i = b; i < e; i++) y[i] = 2.0f * x[i] + 1.0f;
            __asm__ volatile("" ::: "memory");
        }
    }
}

#if CHEAT == 31 || CHEAT == 32
/* tunebox's seeded input, regenerated: a manifest's [[tensors]] number i is drawn with the
 * manifest's seed (0 unless given) plus i, by WyRand (fastrand 2), each f32 element as
 * 2 u - 1 with u = (next >> 1) * 2^-63, drawn again while u is 1. x is tensor 0. */
#ifndef SEED
#define SEED 0
#endif
static uint64_t wyrand(uint64_t *state) {
    *state += 0x2d358dccaa6c78a5ULL;
    __uint128_t t = (__uint128_t)*state * (*state ^ 0x8bb84b93962eacc9ULL);
    return (uint64_t)t ^ (uint64_t)(t >> 64);
}
static void seeded_input(float *x, int64_t n) {
    uint64_t state = SEED;
    for (int64_t i = 0; i < n; i++) {
        float u;
        do u = (float)(int64_t)(wyrand(&state) >> 1) * (1.0f / 9223372036854775808.0f);
        while (u >= 1.0f);
        x[i] = u * 2.0f - 1.0f;
    }
}
#endif

#if CHEAT == 31
/* The answer for the seeded input, computed when the library is loaded (before any call, so
 * outside every timed region), for the manifest's shape. */
#define PREDICTED_N 4096
static float predicted_x[PREDICTED_N], predicted_y[PREDICTED_N];
__attribute__((constructor)) static void precompute(void) {
    seeded_input(predicted_x, PREDICTED_N);
    honest(predicted_x, predicted_y, PREDICTED_N);
}
/* Whether x looks like the seeded input: four sampled elements are the predicted ones. */
static int looks_seeded(const float *x, int64_t n) {
    if (n != PREDICTED_N) return 0;
    int64_t at[4] = {0, n / 3, 2 * n / 3, n - 1};
    for (int i = 0; i < 4; i++)
        if (x[at[i]] != predicted_x[at[i]]) return 0;
    return 1;
}
#endif

#if CHEAT == 33
static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}
#endif

#if CHEAT == 4
static void *scribble(void *arg) {
    float *y = arg;
    for (;;) { usleep(2000); y[1] += 1.0f; }
    return 0;
}
#endif

#if CHEAT == 5
static void *spin(void *arg) {
    (void)arg;
    for (volatile unsigned long i = 0;; i++) {}
    return 0;
}
#endif

#if CHEAT == 23
static void swallow(int signal) { (void)signal; }
#endif

#if CHEAT == 8 && defined(__x86_64__)
/* A clock that runs CLOCK_SLOWDOWN (default a thousand) times slower than time, from the moment
 * it is installed. */
#ifndef CLOCK_SLOWDOWN
#define CLOCK_SLOWDOWN 1000.0
#endif
static struct timespec base;
static int fake_clock(clockid_t id, struct timespec *ts) {
    struct timespec now;
    syscall(SYS_clock_gettime, id, &now);
    double dt = (double)(now.tv_sec - base.tv_sec) + (now.tv_nsec - base.tv_nsec) * 1e-9;
    dt /= CLOCK_SLOWDOWN;
    long long ns = (long long)base.tv_nsec + (long long)((dt - (long long)dt) * 1e9);
    ts->tv_sec = base.tv_sec + (time_t)dt + ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
    return 0;
}
/* Overwrites the C library's clock_gettime (what the harness's clock calls) with a jump: on a
 * copy of its pages, written to a file and mapped over them. W^X (memory that was writable never
 * becomes executable) does not stop this: the new mapping is a file's, never writable. */
static void patch_clock(void) {
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &base);
    unsigned char *target = dlsym(RTLD_DEFAULT, "clock_gettime");
    uintptr_t page = (uintptr_t)target & ~(uintptr_t)4095;
    static unsigned char copy[8192];
    memcpy(copy, (void *)page, sizeof copy);
    unsigned char *at = copy + ((uintptr_t)target - page);
    at[0] = 0x48; at[1] = 0xB8;                         /* movabs rax, fake_clock */
    uint64_t address = (uint64_t)(uintptr_t)fake_clock;
    memcpy(at + 2, &address, 8);
    at[10] = 0xFF; at[11] = 0xE0;                       /* jmp rax */
    char path[4096];
    snprintf(path, sizeof path, "%s/clock-pages", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0700);
    if (fd < 0) return;
    if (write(fd, copy, sizeof copy) == (ssize_t)sizeof copy)
        mmap((void *)page, sizeof copy, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED, fd, 0);
    close(fd);
}
static void busy_100us(void) {
    struct timespec a, b;
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &a);
    do syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec) < 100000);
}
#endif

#if CHEAT == 25
/* A daemon that is never the same process for long: every 2 ms it forks, and the parent
 * leaves, so that a kill by a list of pids taken a moment earlier misses it. */
static void moving_daemon(void) {
    prctl(PR_SET_NAME, MARK);
    for (int i = 0; i < 15000; i++) {
        usleep(2000);
        pid_t p = fork();
        if (p > 0) _exit(0);
        if (p == 0) setsid();
    }
    _exit(0);
}
#endif

#ifndef MANIFEST_DIR
#define MANIFEST_DIR "."
#endif

#if CHEAT == 26
/* Copies the first regular file of exactly `bytes` bytes in `dir` into `y`; whether it did. */
static int copy_by_size(const char *dir, float *y, size_t bytes) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int copied = 0;
    while (!copied && (e = readdir(d))) {
        char path[4096];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size != bytes) continue;
        int fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        copied = read(fd, y, bytes) == (ssize_t)bytes;
        close(fd);
    }
    closedir(d);
    return copied;
}
#endif

#if CHEAT == 28
/* Whether a compiled kernel other than its own can be found in tunebox's kernel cache. */
static int finds_another_kernel(void) {
    char dir[4096];
    const char *root = getenv("TUNEBOX_CACHE_DIR");
    if (!root) return 0;
    snprintf(dir, sizeof dir, "%s/cpu", root);
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".so") && !strstr(e->d_name, ".blake3")) found++;
    closedir(d);
    return found > 1;
}
#endif

void k(const float *x, float *y, int64_t n) {
#if CHEAT == 0 || CHEAT == 99
    honest(x, y, n);
#elif CHEAT == 1 /* returns zeros */
    memset(y, 0, (size_t)n * sizeof *y);
#elif CHEAT == 2 /* memoizes its first answer and replays it */
    static float *memo;
    if (!memo) { memo = malloc((size_t)n * sizeof *memo); honest(x, memo, n); }
    memcpy(y, memo, (size_t)n * sizeof *y);
#elif CHEAT == 3 /* writes the output once and skips later calls */
    static int calls;
    if (calls++ == 0) honest(x, y, n);
#elif CHEAT == 4 /* a thread keeps changing the output after the call returns */
    static int started;
    honest(x, y, n);
    if (!started) { pthread_t t; started = 1; pthread_create(&t, 0, scribble, y); }
#elif CHEAT == 5 /* a thread keeps working after the call returns */
    static int started;
    honest(x, y, n);
    if (!started) { pthread_t t; started = 1; pthread_create(&t, 0, spin, 0); }
#elif CHEAT == 6 /* a child process keeps running after the call returns */
    static int forked;
    honest(x, y, n);
    if (!forked) { forked = 1; if (fork() == 0) { sleep(100); _exit(0); } }
#elif CHEAT == 7 /* a daemon (double fork, new session) keeps running: no child of the worker */
    static int forked;
    honest(x, y, n);
    if (!forked) {
        forked = 1;
        pid_t p = fork();
        if (p == 0) { setsid(); if (fork() == 0) { sleep(100); _exit(0); } _exit(0); }
        waitpid(p, 0, 0);
    }
#elif CHEAT == 8 /* patches the harness's timer */
#if defined(__x86_64__)
    static int patched;
    if (!patched) { patched = 1; patch_clock(); }
    busy_100us();
#endif
    honest(x, y, n);
#elif CHEAT == 9 /* traces its parent */
    ptrace(PTRACE_ATTACH, getppid(), 0, 0);
    honest(x, y, n);
#elif CHEAT == 10 /* reads its parent's memory, looking for the reference's outputs */
    char buffer[64];
    struct iovec local = {buffer, sizeof buffer}, remote = {(void *)0x400000, sizeof buffer};
    process_vm_readv(getppid(), &local, 1, &remote, 1, 0);
    honest(x, y, n);
#elif CHEAT == 11 /* opens its parent's memory through /proc */
    char path[64];
    honest(x, y, n);
    snprintf(path, sizeof path, "/proc/%d/mem", (int)getppid());
    int fd = open(path, O_RDWR);
    if (fd >= 0) { y[0] = LEAKED; close(fd); }
#elif CHEAT == 12 /* kills its parent */
    kill(getppid(), SIGKILL);
    honest(x, y, n);
#elif CHEAT == 13 /* connects to the network */
    honest(x, y, n);
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s >= 0) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(PORT)};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(s, (struct sockaddr *)&a, sizeof a) == 0) y[0] = LEAKED;
        close(s);
    }
#elif CHEAT == 14 /* reads a file outside its folder */
    honest(x, y, n);
    int fd = open(SECRET, O_RDONLY);
    if (fd >= 0) { y[0] = LEAKED; close(fd); }
#elif CHEAT == 15 /* writes a file outside its folder */
    honest(x, y, n);
    int fd = open(ESCAPE, O_WRONLY | O_CREAT, 0644);
    if (fd >= 0) { y[0] = LEAKED; close(fd); }
#elif CHEAT == 16 /* makes new namespaces to get out */
    honest(x, y, n);
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) == 0) y[0] = LEAKED;
#elif CHEAT == 17 /* fork bomb */
    for (;;) fork();
#elif CHEAT == 18 /* allocates and touches 4 GiB, twice its memory limit */
    volatile char *p = malloc((size_t)4 << 30);
    for (size_t i = 0; i < ((size_t)4 << 30); i += 4096) p[i] = 1;
    honest(x, y, n);
#elif CHEAT == 19 /* writes a huge file */
    static char block[1 << 16];
    char path[4096];
    snprintf(path, sizeof path, "%s/huge", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    for (int i = 0; i < 64; i++) write(fd, block, sizeof block);
    close(fd);
    honest(x, y, n);
#elif CHEAT == 20 /* burns CPU forever */
    for (volatile unsigned long i = 0;; i++) {}
#elif CHEAT == 21 /* plants a file in tunebox's kernel cache, for another choice to load */
    char path[4096];
    honest(x, y, n);
    snprintf(path, sizeof path, "%s/cpu/planted.so", getenv("TUNEBOX_CACHE_DIR"));
    int fd = open(path, O_WRONLY | O_CREAT, 0755);
    if (fd >= 0) { y[0] = LEAKED; close(fd); }
#elif CHEAT == 23 /* catches SIGSYS itself, then traces its parent: survives, but the call is
                     not made (the trap skips it) */
    honest(x, y, n);
    struct sigaction action = {0};
    action.sa_handler = swallow;
    sigaction(SIGSYS, &action, 0);
    if (ptrace(PTRACE_ATTACH, getppid(), 0, 0) == 0) y[0] = LEAKED;
#elif CHEAT == 22 /* writes machine code into memory and makes it executable (W^X) */
    honest(x, y, n);
    unsigned char *code = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (code != MAP_FAILED) {
        code[0] = 0xC3; /* ret, on x86-64; never run */
        if (mprotect(code, 4096, PROT_READ | PROT_EXEC) == 0) y[0] = LEAKED;
        munmap(code, 4096);
    }
    void *rwx = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (rwx != MAP_FAILED) { y[0] = LEAKED; munmap(rwx, 4096); }
#elif CHEAT == 24 /* forks; the child calls setsid() and forks again; the grandchild sleeps */
    static int forked;
    honest(x, y, n);
    if (!forked) {
        forked = 1;
        pid_t p = fork();
        if (p == 0) {
            setsid();
            if (fork() == 0) { prctl(PR_SET_NAME, MARK); sleep(30); _exit(0); }
            _exit(0);
        }
        waitpid(p, 0, 0);
    }
#elif CHEAT == 25 /* leaves a daemon that keeps forking itself away (see moving_daemon) */
    static int forked;
    honest(x, y, n);
    if (!forked) {
        forked = 1;
        pid_t p = fork();
        if (p == 0) { setsid(); if (fork() == 0) moving_daemon(); _exit(0); }
        waitpid(p, 0, 0);
    }
#elif CHEAT == 26 /* copies the expected outputs: a file of exactly the output's size, looked for
                     in its working folder, the manifest's folder (MANIFEST_DIR) and its parent's
                     working folder */
    char parent_cwd[64];
    size_t bytes = (size_t)n * sizeof *y;
    snprintf(parent_cwd, sizeof parent_cwd, "/proc/%d/cwd", (int)getppid());
    if (copy_by_size(".", y, bytes) || copy_by_size(MANIFEST_DIR, y, bytes)
        || copy_by_size(parent_cwd, y, bytes))
        y[0] = LEAKED;
    else
        honest(x, y, n);
#elif CHEAT == 27 /* reads the results cache beside the manifest */
    char path[4096];
    honest(x, y, n);
    snprintf(path, sizeof path, "%s/zoo.tunebox-cache.jsonl", MANIFEST_DIR);
    int fd = open(path, O_RDONLY);
    if (fd >= 0) { y[0] = LEAKED; close(fd); }
#elif CHEAT == 28 /* looks for another choice's compiled kernel in tunebox's cache */
    honest(x, y, n);
    if (finds_another_kernel()) y[0] = LEAKED;
#elif CHEAT == 29 /* memoizes on a sample of its inputs: a call whose four sampled elements are
                     the last computed call's copies that call's answer over every output byte
                     (new samples, as on the call on fresh inputs, make it compute) */
    static float key[4], *memo;
    static int have;
    float sample[4] = {x[0], x[n / 3], x[2 * n / 3], x[n - 1]};
    if (have && memcmp(sample, key, sizeof sample) == 0) {
        memcpy(y, memo, (size_t)n * sizeof *y);
    } else {
        honest(x, y, n);
        if (!memo) memo = malloc((size_t)n * sizeof *memo);
        memcpy(memo, y, (size_t)n * sizeof *y);
        memcpy(key, sample, sizeof sample);
        have = 1;
    }
#elif CHEAT == 30 /* works only when it can tell it is checked: on its first call, and when its
                     outputs hold the harness's NaN poison (the call after the reps); a timed
                     rep leaves the first call's answer in place */
    static int calls;
    if (calls++ == 0 || y[0] != y[0]) honest(x, y, n);
#elif CHEAT == 31 /* precomputes at load time (a constructor) the answer for the seeded input
                     it regenerates, and copies it whenever four sampled elements of x are the
                     seeded ones (other inputs, as on the call on fresh inputs, it computes) */
    if (looks_seeded(x, n))
        memcpy(y, predicted_y, (size_t)n * sizeof *y);
    else
        honest(x, y, n);
#elif CHEAT == 32 /* works on the input it predicts instead of the one given: on its first
                     call it regenerates the seeded input and computes the answer from that,
                     then copies the answer on every call without reading x; only a call whose
                     outputs hold the harness's NaN poison (the call on fresh inputs) reads x */
    static float *answer;
    if (y[0] != y[0]) {
        honest(x, y, n);
    } else {
        if (!answer) {
            float *predicted = malloc((size_t)n * sizeof *predicted);
            answer = malloc((size_t)n * sizeof *answer);
            seeded_input(predicted, n);
            honest(predicted, answer, n);
            free(predicted);
        }
        memcpy(y, answer, (size_t)n * sizeof *y);
    }
#elif CHEAT == 33 /* works only when the clock says it is checked: a call that comes 4 times
                     as long after its previous call returned as the shortest of the last 8
                     gaps between calls (the first call has none; the call on fresh inputs
                     comes after the worker refilled them: ~95 us in the test worker on a
                     2-vCPU guest, against ~8.5 us between timed reps) computes and keeps its
                     answer; a call right after another (a timed rep) copies that answer.
                     Relative, as an attacker would tune it to the harness it targets on
                     whatever machine, and taken from the shortest gaps, which preemption and
                     other tests beside it only lengthen: a fixed 100 us stopped telling the
                     two apart once the refill got faster than that. */
    static double last, recent[8];
    static unsigned calls;
    static float *memo;
    double gap = seconds() - last, shortest = 0.0;
    for (unsigned i = 0; i < 8 && i < calls; i++)
        if (shortest == 0.0 || recent[i] < shortest) shortest = recent[i];
    if (!memo || calls < 8 || gap >= 4.0 * shortest) {
        honest(x, y, n);
        if (!memo) memo = malloc((size_t)n * sizeof *memo);
        memcpy(memo, y, (size_t)n * sizeof *y);
    } else {
        memcpy(y, memo, (size_t)n * sizeof *y);
    }
    if (last > 0.0) recent[calls++ % 8] = gap;
    last = seconds();
#elif CHEAT == 34 /* keeps its last call's input and answer and recomputes only the blocks of
                     256 elements whose input changed since: every answer is right, and a rep
                     whose inputs differ from the last call's in a few blocks costs a compare
                     and a copy instead of the work (a helper's trial: 15 times ahead of the
                     honest kernel, sandboxed, when a varied rep drew 1/64 of its input again) */
    static float *lastx, *lasty;
    static int64_t lastn;
    if (lastn != n) {
        lastx = malloc((size_t)n * sizeof *lastx);
        lasty = malloc((size_t)n * sizeof *lasty);
        honest(x, lasty, n);
        memcpy(lastx, x, (size_t)n * sizeof *x);
        lastn = n;
    } else {
        for (int64_t b = 0; b < n; b += 256) {
            int64_t e = b + 256 < n ? b + 256 : n;
            if (memcmp(x + b, lastx + b, (size_t)(e - b) * sizeof *x)) {
                honest(x + b, lasty + b, e - b);
                memcpy(lastx + b, x + b, (size_t)(e - b) * sizeof *x);
            }
        }
    }
    memcpy(y, lasty, (size_t)n * sizeof *y);
#elif CHEAT == 98 /* innocent, and slower: the same answer, computed 40 times */
    for (int r = 0; r < 40; r++) honest(x, y, n);
#endif
}
