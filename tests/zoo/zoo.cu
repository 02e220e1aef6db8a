/* The CUDA zoo: one candidate per value of CHEAT, each cheating the harness in one way
 * (tests/sandbox_cuda.rs says how each must be caught). CHEAT 0 and 99 are innocent:
 * y = 2 x + 1. Module globals (__device__) live as long as the module: the whole request. */
#define N_MAX (1 << 16)

#if CHEAT == 2
__device__ float memo[N_MAX];
__device__ unsigned char memoized[N_MAX];
#endif
#if CHEAT == 3
__device__ unsigned char written[N_MAX];
#endif

#if CHEAT == 6
/* Launched from the device into the fire-and-forget stream: work the host's stream never
 * sees. Needs relocatable device code (-rdc) and the device runtime, which tunebox does not
 * link: it must fail to build, or be caught if it ever runs. */
__global__ void later(const float *x, float *y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;
}
#endif

extern "C" __global__ void k(const float *x, float *y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= n) return;
#if CHEAT == 0 || CHEAT == 99
    y[i] = 2.0f * x[i] + 1.0f;
#elif CHEAT == 1 /* returns zeros */
    y[i] = 0.0f;
#elif CHEAT == 2 /* memoizes its first answer in device memory and replays it */
    if (!memoized[i]) { memo[i] = 2.0f * x[i] + 1.0f; memoized[i] = 1; }
    y[i] = memo[i];
#elif CHEAT == 3 /* writes the output once and skips later calls */
    if (!written[i]) { y[i] = 2.0f * x[i] + 1.0f; written[i] = 1; }
#elif CHEAT == 4 /* does nothing: hopes y is memory the reference's output was freed from */
    (void)x;
#elif CHEAT == 5 /* writes zeros and mutates x so that a reference run next on the same x
                    would agree (2 x + 1 = 0) */
    y[i] = 0.0f;
    ((float *)x)[i] = -0.5f;
#elif CHEAT == 6 /* early return: leaves the work to a grid on another stream */
    if (i == 0) later<<<(unsigned)((n + 255) / 256), 256, 0, cudaStreamFireAndForget>>>(x, y, n);
#endif
}
