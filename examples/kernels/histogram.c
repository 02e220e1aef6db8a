/*
 * Multi-threaded (OpenMP) byte histogram for `tunebox tune examples/histogram-omp.toml`.
 *
 *   hist[b] = number of i in [0, n) with data[i] == b,  b in [0, 256)
 *
 * Parameters (passed as -DNAME=VALUE by tunebox; the defaults let the file compile alone):
 *   NTHREADS  the OpenMP team size (num_threads). Each thread counts one contiguous run of
 *             64 KiB blocks (schedule(static)). More threads than cores only time-share the
 *             cores: expected about flat from the core count up, ~2x slower with 1 thread on 2.
 *   COPIES    sub-histograms per thread: byte j of every 8 goes to copy j % COPIES, so
 *             increments of one bin close together hit different counters and do not wait for
 *             each other through memory (store-to-load forwarding). That is what makes them
 *             pay on data with runs of equal bytes (text, images); on uniform random bytes, as
 *             in the example, equal neighbours are rare (1 in 256) and the copies mostly cost
 *             their extra 1 KiB of L1 each: expect a few % between them.
 *   WORDS     0: read the input one byte at a time; 1: read 8 bytes at a time and take the
 *             bytes out of the 64-bit word with shifts (one load instead of eight): ~5-10 %.
 *   PRIVATE   1 (default): each thread counts into histograms of its own (on its stack) and
 *             adds them into the shared one once, at the end. 0: every thread increments the
 *             one shared histogram with `#pragma omp atomic` (a locked read-modify-write per
 *             byte; the counters' cache lines move between cores on every conflict), the naive
 *             version, COPIES unused. The example leaves it out of its params: on a 2-core EPYC
 *             it took 90-140 ms a call against 6-12 ms, so its 8 choices would only spend most of
 *             the run confirming that (add `PRIVATE = [0, 1]` and the restriction
 *             `PRIVATE == 1 or COPIES == 1` to see it).
 *
 * Expected fastest: NTHREADS at or above the number of cores, WORDS = 1; COPIES within a few %.
 *
 * Correct for any n: hist is zeroed on every call (tunebox calls the kernel repeatedly on the
 * same buffers), the bytes after the last full 8 of a block are counted one by one, and as the
 * per-thread counters are 32-bit the input is processed in slices of at most 2^31 bytes, each
 * added into the 64-bit shared counters before the next. Every choice gives exactly the same
 * counts: integer sums do not depend on the order. Compile with -fopenmp (without it the
 * pragmas are ignored and the kernel runs on one thread, still correct).
 */
#include <stdint.h>
#include <string.h>

#ifndef NTHREADS
#define NTHREADS 2
#endif
#ifndef PRIVATE
#define PRIVATE 1
#endif
#ifndef COPIES
#define COPIES 1
#endif
#ifndef WORDS
#define WORDS 1
#endif
#ifndef BLOCK
#define BLOCK 65536
#endif

#if NTHREADS < 1 || (PRIVATE != 0 && PRIVATE != 1) || (WORDS != 0 && WORDS != 1)
#error "NTHREADS must be >= 1, PRIVATE and WORDS 0 or 1"
#endif
#if COPIES != 1 && COPIES != 2 && COPIES != 4 && COPIES != 8
#error "COPIES must be 1, 2, 4 or 8 (a divisor of the 8 bytes of a word)"
#endif
#if BLOCK < 8 || BLOCK % 8 != 0
#error "BLOCK must be a positive multiple of 8"
#endif

#define BINS 256
#define MIN(a, b) ((a) < (b) ? (a) : (b))

#if PRIVATE
/* Counts the len bytes at p into the thread's COPIES sub-histograms. */
static inline void count_private(const uint8_t *restrict p, int64_t len, uint32_t local[COPIES][BINS])
{
    int64_t i = 0;
#if WORDS
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, sizeof w);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) local[j % COPIES][(w >> (8 * j)) & 0xff]++;
    }
#else
    for (; i + 8 <= len; i += 8) {
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) local[j % COPIES][p[i + j]]++;
    }
#endif
    for (; i < len; i++) local[0][p[i]]++;
}
#else
/* Adds the len bytes at p to the shared histogram, one atomic increment per byte. */
static inline void count_atomic(const uint8_t *restrict p, int64_t len, int64_t *hist)
{
    int64_t i = 0;
#if WORDS
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, sizeof w);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
#pragma omp atomic
            hist[(w >> (8 * j)) & 0xff]++;
        }
    }
#endif
    for (; i < len; i++) {
#pragma omp atomic
        hist[p[i]]++;
    }
}
#endif

/* Adds the counts of data[0, n) to hist; n < 2^31, so no 32-bit counter can overflow. */
static void histogram_slice(const uint8_t *restrict data, int64_t *hist, int64_t n)
{
    const int64_t blocks = (n + BLOCK - 1) / BLOCK;
#pragma omp parallel num_threads(NTHREADS)
    {
#if PRIVATE
        uint32_t local[COPIES][BINS];
        memset(local, 0, sizeof local);
#endif
#pragma omp for schedule(static) nowait
        for (int64_t b = 0; b < blocks; b++) {
            const int64_t start = b * BLOCK, len = MIN(BLOCK, n - start);
#if PRIVATE
            count_private(data + start, len, local);
#else
            count_atomic(data + start, len, hist);
#endif
        }
#if PRIVATE
        for (int k = 0; k < BINS; k++) {
            int64_t s = 0;
            for (int c = 0; c < COPIES; c++) s += local[c][k];
#pragma omp atomic
            hist[k] += s;
        }
#endif
    }
}

void histogram(const uint8_t *restrict data, int64_t *restrict hist, int64_t n)
{
    for (int k = 0; k < BINS; k++) hist[k] = 0;
    const int64_t slice = (int64_t)1 << 31;
    for (int64_t s = 0; s < n; s += slice) histogram_slice(data + s, hist, MIN(slice, n - s));
}
