/*
 * A CUDA kernel family that fails in every way tunebox must survive, for
 * `tunebox tune examples/faults-cuda.toml`.
 *
 *   y[i] = 2 * x[i] + 1,  i in [0, n)
 *
 *   MODE 0  correct                                              -> ok
 *   MODE 1  writes through the invalid address 16 (error 700)     -> error, sticky: new worker
 *   MODE 2  executes a trap instruction (__trap)                  -> error, sticky: new worker
 *   MODE 3  fails a device-side assertion (error 710)             -> error, sticky: new worker
 *   MODE 4  spins forever                                         -> timeout: worker killed
 *   MODE 5  launches 2048 threads per block (block_size_x = 2048) -> left out of the space
 *                                                                    (more than 1024 threads,
 *                                                                    as Kernel Tuner does)
 *   MODE 6  wrong constant: y = 2x - 1, off by 2 everywhere       -> wrong
 *   MODE 7  does not compile (#error)                             -> compile_error
 *   MODE 8  a misaligned 4-byte store (error 716)                 -> error, sticky: new worker
 */
#ifndef MODE
#define MODE 0
#endif

#if MODE == 7
#error "choice MODE=7 does not compile (on purpose)"
#endif

extern "C" __global__ void faulty(const float *x, float *y, long long n)
{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n)
        return;
#if MODE == 1
    ((volatile float *)16)[i] = 2.0f * x[i] + 1.0f;
#elif MODE == 2
    __trap();
#elif MODE == 3
    // What assert(x[i] >= 2) expands to; NVRTC declares __assertfail without any header.
    if (x[i] < 2.0f)  // always: inputs are in [-1, 1)
        __assertfail("x[i] >= 2 (MODE 3 fails on purpose)", __FILE__, __LINE__, "faulty",
                     sizeof(char));
    y[i] = 2.0f * x[i] + 1.0f;
#elif MODE == 4
    // Spins on a volatile load from global memory, which the compiler must keep: the inputs are
    // in [-1, 1), so it never ends. (A `volatile int` local was optimized away by NVRTC 13, and
    // this choice ran in 7 us on an H200.)
    while (((volatile const float *)x)[0] < 2.0f) {
    }
    y[i] = 2.0f * x[i] + 1.0f;
#elif MODE == 6
    y[i] = 2.0f * x[i] - 1.0f;
#elif MODE == 8
    *(volatile float *)((char *)y + 4 * i + 1) = 2.0f * x[i] + 1.0f;
#else
    y[i] = 2.0f * x[i] + 1.0f;
#endif
}
