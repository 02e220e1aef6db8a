/*
 * Tiled single-precision matmul for `tunebox tune examples/matmul-cpu.toml`.
 *
 *   C[M,N] = A[M,K] x B[K,N], all row-major.
 *
 * Parameters (passed as -DNAME=VALUE by tunebox; the defaults let the file compile alone):
 *   BM, BN, BK  cache tile: rows of C, columns of C, depth of K per tile
 *   UNROLL      rows of the register tile: the micro-kernel keeps an UNROLL x 16 block of C
 *               in UNROLL*2 AVX registers and streams one 16-wide row of B per k step.
 *               UNROLL=1 is FMA-latency bound (2 independent accumulators); 4-6 fill the
 *               16 ymm registers of AVX2; 8 spills.
 *
 * Correct for any M, N, K: rows left over after the last full register tile go through the
 * UNROLL=1 micro-kernel, columns left over after the last full 16-wide strip through a scalar
 * loop. C is zeroed on every call (tunebox calls the kernel repeatedly on the same buffers).
 *
 * Every element of C is summed in the same order (k ascending, one fused multiply-add per k)
 * whatever the tile sizes, so all choices give the same result up to FMA contraction.
 * Uses GCC/Clang vector extensions only: no intrinsics header, builds with or without AVX.
 */
#include <stdint.h>

#ifndef BM
#define BM 96
#endif
#ifndef BN
#define BN 64
#endif
#ifndef BK
#define BK 256
#endif
#ifndef UNROLL
#define UNROLL 6
#endif

#if BM < 1 || BN < 1 || BK < 1 || UNROLL < 1 || UNROLL > 16
#error "BM, BN, BK must be >= 1 and 1 <= UNROLL <= 16"
#endif

#define MIN(a, b) ((a) < (b) ? (a) : (b))

typedef float v8f __attribute__((vector_size(32)));

/* Unaligned 8-float load/store (macros, not functions: no vector-ABI warnings without AVX). */
#define LOAD8(v, p) __builtin_memcpy(&(v), (p), sizeof(v8f))
#define STORE8(p, v) __builtin_memcpy((p), &(v), sizeof(v8f))

/* C[i..i+R, j..j+16] += A[i..i+R, k0..k1] x B[k0..k1, j..j+16]; R is a compile-time constant
 * after inlining, so acc[][] lives in registers. */
static inline __attribute__((always_inline)) void
micro(const int R, const float *restrict A, const float *restrict B, float *restrict C, int64_t N,
      int64_t K, int64_t i, int64_t j, int64_t k0, int64_t k1)
{
    v8f acc[UNROLL][2];
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
        LOAD8(acc[r][0], C + (i + r) * N + j);
        LOAD8(acc[r][1], C + (i + r) * N + j + 8);
    }
    for (int64_t k = k0; k < k1; k++) {
        v8f b0, b1;
        LOAD8(b0, B + k * N + j);
        LOAD8(b1, B + k * N + j + 8);
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) {
            float a = A[(i + r) * K + k];
            acc[r][0] += a * b0;
            acc[r][1] += a * b1;
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
        STORE8(C + (i + r) * N + j, acc[r][0]);
        STORE8(C + (i + r) * N + j + 8, acc[r][1]);
    }
}

/* Scalar fallback for the columns j0..j1 (< 16 of them) left at the right edge of a tile. */
static void edge(const float *restrict A, const float *restrict B, float *restrict C, int64_t N,
                 int64_t K, int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t k0, int64_t k1)
{
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = j0; j < j1; j++) {
            float s = C[i * N + j];
            for (int64_t k = k0; k < k1; k++) s += A[i * K + k] * B[k * N + j];
            C[i * N + j] = s;
        }
}

void matmul(const float *restrict A, const float *restrict B, float *restrict C, int64_t M,
            int64_t N, int64_t K)
{
    for (int64_t i = 0; i < M * N; i++) C[i] = 0.0f;

    for (int64_t i0 = 0; i0 < M; i0 += BM) {
        const int64_t i1 = MIN(i0 + BM, M);
        for (int64_t k0 = 0; k0 < K; k0 += BK) {
            const int64_t k1 = MIN(k0 + BK, K);
            for (int64_t j0 = 0; j0 < N; j0 += BN) {
                const int64_t j1 = MIN(j0 + BN, N);
                int64_t i = i0;
                for (; i + UNROLL <= i1; i += UNROLL) {
                    int64_t j = j0;
                    for (; j + 16 <= j1; j += 16) micro(UNROLL, A, B, C, N, K, i, j, k0, k1);
                    edge(A, B, C, N, K, i, i + UNROLL, j, j1, k0, k1);
                }
                for (; i < i1; i++) { /* leftover rows: one at a time */
                    int64_t j = j0;
                    for (; j + 16 <= j1; j += 16) micro(1, A, B, C, N, K, i, j, k0, k1);
                    edge(A, B, C, N, K, i, i + 1, j, j1, k0, k1);
                }
            }
        }
    }
}
