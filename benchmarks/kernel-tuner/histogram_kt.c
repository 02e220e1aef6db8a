/*
 * Kernel Tuner wrapper for tunebox's examples/kernels/histogram.c (unchanged, #included), as
 * matmul_kt.c is for matmul.c.
 *
 * Kernel Tuner's C backend calls the tuned function and takes its float return value as the
 * time of that call in milliseconds; histogram_timed() therefore times one call of histogram()
 * with clock_gettime (CLOCK_MONOTONIC) and returns the elapsed ms. Kernel Tuner prepends
 * `#define NTHREADS 2` etc. for each choice; compile with -I pointing at examples/kernels and
 * with -fopenmp (compare.py passes the manifest's flags).
 *
 * Kernel Tuner decides whether a kernel uses OpenMP by looking for the text "#pragma omp" in the
 * source it is given (this file, not the files it includes): without it, it unloads each
 * choice's library after use, and unloading a library whose libgomp threads are still alive
 * crashes the process. This comment carries that text, so the wrapper counts as OpenMP code:
 * #pragma omp
 *
 * The extern "C" block keeps the symbol unmangled if the file is built as C++ (Kernel Tuner's
 * default compiler is g++); its presence also stops Kernel Tuner from wrapping the source in
 * extern "C" itself, which would not compile as C. compare.py builds it with a C compiler
 * (gcc/cc, as tunebox does), because histogram.c uses C99 `restrict`.
 */
#include <stdint.h>
#include <time.h>

#include "histogram.c"

#ifdef __cplusplus
extern "C" {
#endif

float histogram_timed(const uint8_t *data, int64_t *hist, int64_t n)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    histogram(data, hist, n);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (float)((double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6);
}

#ifdef __cplusplus
}
#endif
