/*
 * Tiled f32 matmul for examples/matmul-cuda.toml: C = A x B, row-major, A is M x K, B is K x N.
 *
 * A block of block_size_x x block_size_y threads computes a BM x BN tile of C
 * (BM = block_size_y * WM rows, BN = block_size_x * WN columns): each thread accumulates WM x WN
 * outputs in registers, over TILE_K-wide slices of A and B staged in shared memory. Thread
 * (tx, ty) owns rows ty + i * block_size_y and columns tx + j * block_size_x, so a warp reads
 * consecutive columns of the B tile and writes consecutive columns of C. Every bound is checked,
 * so any M, N, K works; C is overwritten (never accumulated into) on every call.
 *
 * The params arrive as -D defines (NVRTC), as Kernel Tuner passes them.
 */
#if !defined(block_size_x) || !defined(block_size_y) || !defined(WM) || !defined(WN) || !defined(TILE_K)
#error "define block_size_x, block_size_y, WM, WN and TILE_K"
#endif

#define BM (block_size_y * WM)
#define BN (block_size_x * WN)
#define THREADS (block_size_x * block_size_y)

extern "C" __global__ void __launch_bounds__(THREADS)
matmul(const float *__restrict__ A, const float *__restrict__ B, float *__restrict__ C,
       long long M, long long N, long long K)
{
    // Transposed A tile (As[k][m]) so that both inner-loop reads index the fast dimension.
    __shared__ float As[TILE_K][BM];
    __shared__ float Bs[TILE_K][BN];

    const int tx = threadIdx.x;
    const int ty = threadIdx.y;
    const int tid = ty * block_size_x + tx;
    const long long row0 = (long long)blockIdx.y * BM;
    const long long col0 = (long long)blockIdx.x * BN;

    float acc[WM][WN];
#pragma unroll
    for (int i = 0; i < WM; ++i)
#pragma unroll
        for (int j = 0; j < WN; ++j)
            acc[i][j] = 0.0f;

    for (long long k0 = 0; k0 < K; k0 += TILE_K) {
        for (int e = tid; e < BM * TILE_K; e += THREADS) {
            const int m = e / TILE_K, k = e % TILE_K;
            const long long r = row0 + m, c = k0 + k;
            As[k][m] = (r < M && c < K) ? A[r * K + c] : 0.0f;
        }
        for (int e = tid; e < TILE_K * BN; e += THREADS) {
            const int k = e / BN, n = e % BN;
            const long long r = k0 + k, c = col0 + n;
            Bs[k][n] = (r < K && c < N) ? B[r * N + c] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TILE_K; ++k) {
            float a[WM], b[WN];
#pragma unroll
            for (int i = 0; i < WM; ++i)
                a[i] = As[k][ty + i * block_size_y];
#pragma unroll
            for (int j = 0; j < WN; ++j)
                b[j] = Bs[k][tx + j * block_size_x];
#pragma unroll
            for (int i = 0; i < WM; ++i)
#pragma unroll
                for (int j = 0; j < WN; ++j)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }

#pragma unroll
    for (int i = 0; i < WM; ++i) {
        const long long r = row0 + ty + i * block_size_y;
#pragma unroll
        for (int j = 0; j < WN; ++j) {
            const long long c = col0 + tx + j * block_size_x;
            if (r < M && c < N)
                C[r * N + c] = acc[i][j];
        }
    }
}
