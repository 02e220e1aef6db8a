/*
 * Does where a kernel's tensors lie in memory move its time? (issue 33, "each window an
 * independent sample")
 *
 *   placements HUGE ROUNDS LIB.so...
 *
 * Makes 8 placements of the main job's three 512 x 512 f32 matrices (A, B, C), each tensor in
 * a mapping of its own at a random page offset (HUGE = 1: advised into transparent huge pages
 * as tunebox's tensors are; 0: small pages), with the same values in every placement. Then,
 * ROUNDS times, calls every kernel of LIB.so... (`matmul` of examples/kernels/matmul.c, one
 * choice each) on every placement in turn: one warm call, then the median of 3 calls, each
 * after writing a 64 MiB buffer to evict the caches. Prints one line per round and placement:
 * `ROUND PLACEMENT MS...` (one time per library). Placements measured in the same round lie
 * milliseconds apart, so a machine whose speed drifts over seconds moves them together;
 * `placements.py` compares each placement with the others of its round.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define PLACEMENTS 8
#define N 512
#define HUGE_PAGE (2u << 20)
#define FLUSH_BYTES (64u << 20)

typedef void (*matmul_fn)(const float *, const float *, float *, int64_t, int64_t, int64_t);

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static char *flush_buffer;

static void evict(void)
{
    for (size_t i = 0; i < FLUSH_BYTES; i += 64)
        flush_buffer[i]++;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* `bytes` at `offset` bytes into a mapping of their own that starts on a huge page. */
static float *place(size_t bytes, size_t offset, int huge)
{
    size_t len = bytes + offset + 2 * HUGE_PAGE;
    char *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    char *start = (char *)(((uintptr_t)map + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
    madvise(start, len - (size_t)(start - map), huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    return (float *)(start + offset);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: placements HUGE ROUNDS LIB.so...\n");
        return 2;
    }
    int huge = atoi(argv[1]), rounds = atoi(argv[2]), kernels = argc - 3;
    matmul_fn *fn = calloc((size_t)kernels, sizeof *fn);
    for (int k = 0; k < kernels; k++) {
        void *lib = dlopen(argv[3 + k], RTLD_NOW);
        if (!lib || !(fn[k] = (matmul_fn)dlsym(lib, "matmul"))) {
            fprintf(stderr, "%s: %s\n", argv[3 + k], dlerror());
            return 1;
        }
    }
    flush_buffer = malloc(FLUSH_BYTES);
    memset(flush_buffer, 1, FLUSH_BYTES);
    size_t bytes = (size_t)N * N * sizeof(float);
    float *a[PLACEMENTS], *b[PLACEMENTS], *c[PLACEMENTS];
    srand(777);
    for (int p = 0; p < PLACEMENTS; p++) {
        a[p] = place(bytes, (size_t)(rand() % 512) * 4096, huge);
        b[p] = place(bytes, (size_t)(rand() % 512) * 4096, huge);
        c[p] = place(bytes, (size_t)(rand() % 512) * 4096, huge);
        unsigned seed = 1;
        for (size_t i = 0; i < (size_t)N * N; i++) {
            a[p][i] = (float)(rand_r(&seed) % 2000) / 1000.0f - 1.0f;
            b[p][i] = (float)(rand_r(&seed) % 2000) / 1000.0f - 1.0f;
            c[p][i] = 0.0f;
        }
    }
    for (int r = 0; r < rounds; r++) {
        for (int p = 0; p < PLACEMENTS; p++) {
            printf("%d %d", r, p);
            for (int k = 0; k < kernels; k++) {
                double ms[3];
                fn[k](a[p], b[p], c[p], N, N, N);
                for (int i = 0; i < 3; i++) {
                    evict();
                    double start = now_ms();
                    fn[k](a[p], b[p], c[p], N, N, N);
                    ms[i] = now_ms() - start;
                }
                qsort(ms, 3, sizeof ms[0], by_value);
                printf(" %.4f", ms[1]);
            }
            printf("\n");
        }
        fflush(stdout);
    }
    return 0;
}
