/*
 * A kernel family that fails in every way tunebox must survive, for
 * `tunebox tune examples/faults-cpu.toml`.
 *
 *   y[i] = 2 * x[i] + 1,  i in [0, n)
 *
 *   MODE 0  correct                                        -> ok
 *   MODE 1  writes through an invalid pointer (SIGSEGV)    -> crashed
 *   MODE 2  calls abort() (SIGABRT)                        -> crashed
 *   MODE 3  spins forever                                  -> timeout
 *   MODE 4  wrong constant: y = 2x - 1, off by 2 everywhere -> wrong
 *   MODE 5  does not compile (#error)                      -> compile_error
 *
 *   VARIANT 1 or 2: unroll factor of the loop; harmless, it only doubles the choices.
 */
#include <stdint.h>
#include <stdlib.h>

#ifndef MODE
#define MODE 0
#endif
#ifndef VARIANT
#define VARIANT 1
#endif

#if MODE == 5
#error "choice MODE=5 does not compile (on purpose)"
#endif

#if MODE == 4
#define OFFSET (-1.0f) /* the bug */
#else
#define OFFSET 1.0f
#endif

void faulty(const float *x, float *y, int64_t n)
{
#if MODE == 1
    /* The address comes from a volatile, so the compiler can neither prove it invalid nor drop
     * the store: a real write to address 16 at run time. */
    volatile uintptr_t bad_address = 16;
    *(volatile float *)bad_address = x[0];
#elif MODE == 2
    abort();
#elif MODE == 3
    /* A volatile read every iteration: the loop cannot be proven finite or removed. */
    volatile int spin = 1;
    while (spin) {
    }
#endif

    int64_t i = 0;
#if VARIANT == 2
    for (; i + 2 <= n; i += 2) {
        y[i] = 2.0f * x[i] + OFFSET;
        y[i + 1] = 2.0f * x[i + 1] + OFFSET;
    }
#endif
    for (; i < n; i++) y[i] = 2.0f * x[i] + OFFSET;
}
