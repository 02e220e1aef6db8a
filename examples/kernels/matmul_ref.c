/*
 * Reference for examples/matmul-cpu.toml: C = A x B (row-major), the plain triple loop,
 * accumulated in double and rounded once to float, so it is the exact product to within
 * half an f32 ulp and the tolerance only has to cover the tuned kernel's own f32 rounding.
 *
 * Loop order i-k-j over a double row accumulator (same k-ascending sum per element as the
 * textbook i-j-k loop, bit for bit: a float x float product is exact in double) because it is
 * ~10x faster at 512^3 (~40 ms instead of ~400 ms per call).
 */
#include <stdint.h>
#include <stdlib.h>

void matmul_ref(const float *A, const float *B, float *C, int64_t M, int64_t N, int64_t K)
{
    double *acc = malloc((size_t)(N > 0 ? N : 1) * sizeof *acc);
    if (!acc) abort();
    for (int64_t i = 0; i < M; i++) {
        for (int64_t j = 0; j < N; j++) acc[j] = 0.0;
        for (int64_t k = 0; k < K; k++) {
            const double a = A[i * K + k];
            for (int64_t j = 0; j < N; j++) acc[j] += a * (double)B[k * N + j];
        }
        for (int64_t j = 0; j < N; j++) C[i * N + j] = (float)acc[j];
    }
    free(acc);
}
