/*
 * Reference for examples/histogram-omp.toml: the plain serial loop, one 64-bit counter per
 * bin, no OpenMP. Every choice of kernels/histogram.c must give exactly these counts.
 */
#include <stdint.h>

void histogram_ref(const uint8_t *data, int64_t *hist, int64_t n)
{
    for (int k = 0; k < 256; k++) hist[k] = 0;
    for (int64_t i = 0; i < n; i++) hist[data[i]]++;
}
