/*
 * Kernel Tuner wrapper for tunebox's examples/kernels/matmul.c (unchanged, #included).
 *
 * Kernel Tuner's C backend calls the tuned function and takes its float return value as
 * the time of that call in milliseconds; a void kernel would give meaningless times without a
 * warning. matmul_timed() therefore times one call of matmul() with clock_gettime
 * (CLOCK_MONOTONIC) and returns the elapsed ms. Kernel Tuner prepends `#define BM 32` etc.
 * for each choice; compile with -I pointing at examples/kernels (compare.py does).
 *
 * The extern "C" block keeps the symbol unmangled if the file is built as C++ (Kernel Tuner's
 * default compiler is g++); its presence also stops Kernel Tuner from wrapping the source in
 * extern "C" itself, which would not compile as C. compare.py builds it with a C compiler
 * (gcc/cc, as tunebox does), because matmul.c uses C99 `restrict`.
 */
#include <stdint.h>
#include <time.h>

#include "matmul.c"

#ifdef __cplusplus
extern "C" {
#endif

float matmul_timed(const float *A, const float *B, float *C, int64_t M, int64_t N, int64_t K)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    matmul(A, B, C, M, N, K);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (float)((double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6);
}

#ifdef __cplusplus
}
#endif
