/*
 * A fake libcuda.so for testing tunebox-cuda on machines without a GPU.
 *
 * It exports the driver functions the backend calls (and the probe checks for), with the same
 * C signatures, and behaves like one small GPU ("Mock H200", compute capability 9.0):
 *
 * - "device memory" is host memory (malloc), so copies and memsets are memcpy/memset;
 * - every stream operation runs at once, in order, and is appended to an operation log that a
 *   test reads back (mock_cuda_log) to check what was enqueued, and in which order;
 * - a fake clock advances with each operation (a launch of most kernels: 0.5 ms; the delay
 *   kernel: 0.02 ms; a memset: 0.01 ms); events read it, so a measurement of a 0.5 ms kernel
 *   is exactly 0.5 ms when the events bracket the kernel alone;
 * - kernels are PTX text: a function exists when the module has `.entry NAME(`, and its
 *   parameters are the `.param` declarations that follow; launching runs a C stand-in chosen by
 *   the kernel's name (axpy computes y = 2x + 1; illegal and trap lose the context);
 * - a context must be current for every call that needs one (CUDA_ERROR_INVALID_CONTEXT
 *   otherwise); after a sticky fault every call fails with it, as a real driver does;
 * - live objects are counted (mock_cuda_live) to find leaks;
 * - some kernels cheat (the CUDA zoo's integrity checks): memoize replays its first answer from
 *   a module global, once writes y on its first launch only, late_write leaves y to be written
 *   at the next cuCtxSynchronize (work queued outside the stream), hidden_work writes y at once
 *   but keeps the "device" busy for 5 ms of real time that only cuCtxSynchronize waits for.
 *
 * Only error codes that exist in CUDA 13's enum are returned (cudarc reads them as a Rust enum).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;

struct mock_ctx { int refs; };
struct mock_stream { unsigned flags; };
struct mock_event { double t; int recorded; };
struct mock_module { char *image; float *memo; int done; }; /* memo, done: module globals */
struct mock_func { char name[256]; struct mock_module *module; int max_dynamic_shared; };

enum {
    SUCCESS = 0,
    INVALID_VALUE = 1,
    OUT_OF_MEMORY = 2,
    NO_DEVICE = 100,
    INVALID_DEVICE = 101,
    INVALID_CONTEXT = 201,
    INVALID_PTX = 218,
    NOT_FOUND = 500,
    ILLEGAL_ADDRESS = 700,
    ILLEGAL_INSTRUCTION = 715,
};

static struct mock_ctx the_context;
static __thread struct mock_ctx *current;
static int sticky;
static double clock_ms;
static int live_allocations, live_streams, live_events, live_modules;
static char op_log[1 << 20];
/* Work "queued outside the stream": done by the next cuCtxSynchronize. */
static float *pending_x, *pending_y;
static long long pending_n;
static int pending_busy_ms;
static size_t op_len;

static void op(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    int n = vsnprintf(op_log + op_len, sizeof op_log - op_len, format, args);
    va_end(args);
    if (n > 0 && op_len + (size_t)n + 1 < sizeof op_log) {
        op_len += (size_t)n;
        op_log[op_len++] = '\n';
        op_log[op_len] = 0;
    }
}

#define NEED_CONTEXT                                                                            \
    do {                                                                                        \
        if (sticky)                                                                             \
            return sticky;                                                                      \
        if (!current)                                                                           \
            return INVALID_CONTEXT;                                                             \
    } while (0)

/* --- test hooks --------------------------------------------------------------------------- */

const char *mock_cuda_log(void) { return op_log; }

int mock_cuda_live(void) { return live_allocations + live_streams + live_events + live_modules; }

int mock_cuda_context_refs(void) { return the_context.refs; }

/* --- errors, init, devices ----------------------------------------------------------------- */

static const char *name_of(CUresult e)
{
    switch (e) {
    case SUCCESS: return "CUDA_SUCCESS";
    case INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
    case OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
    case NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
    case INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
    case INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
    case INVALID_PTX: return "CUDA_ERROR_INVALID_PTX";
    case NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
    case ILLEGAL_ADDRESS: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case ILLEGAL_INSTRUCTION: return "CUDA_ERROR_ILLEGAL_INSTRUCTION";
    default: return NULL;
    }
}

CUresult cuGetErrorName(CUresult e, const char **name)
{
    *name = name_of(e);
    return *name ? SUCCESS : INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult e, const char **text)
{
    static char buffer[128];
    const char *name = name_of(e);
    if (!name)
        return INVALID_VALUE;
    snprintf(buffer, sizeof buffer, "mock description of %s", name);
    *text = buffer;
    return SUCCESS;
}

CUresult cuInit(unsigned flags)
{
    (void)flags;
    return getenv("MOCK_CUDA_NO_DEVICE") ? NO_DEVICE : SUCCESS;
}

CUresult cuDriverGetVersion(int *version)
{
    *version = 13000;
    return SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    *count = 1;
    return SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    if (ordinal != 0)
        return INVALID_DEVICE;
    *device = 0;
    return SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice device)
{
    (void)device;
    snprintf(name, (size_t)len, "Mock H200");
    return SUCCESS;
}

CUresult cuDeviceGetUuid_v2(char *uuid, CUdevice device)
{
    (void)device;
    for (int i = 0; i < 16; i++)
        uuid[i] = (char)i;
    return SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice device)
{
    (void)device;
    *bytes = (size_t)141 << 30;
    return SUCCESS;
}

CUresult cuDeviceGetAttribute(int *value, int attribute, CUdevice device)
{
    (void)device;
    switch (attribute) {
    case 1: *value = 1024; break;                   /* max threads per block */
    case 2: case 3: *value = 1024; break;           /* max block dim x, y */
    case 4: *value = 64; break;                     /* max block dim z */
    case 5: *value = 2147483647; break;             /* max grid dim x */
    case 6: case 7: *value = 65535; break;          /* max grid dim y, z */
    case 8: *value = 48 * 1024; break;              /* shared memory per block */
    case 10: *value = 32; break;                    /* warp size */
    case 12: *value = 65536; break;                 /* registers per block */
    case 13: *value = 1980000; break;               /* clock, kHz */
    case 16: *value = 132; break;                   /* SMs */
    case 36: *value = 3201000; break;               /* memory clock, kHz */
    case 38: *value = 1 << 20; break;               /* L2: 1 MiB (a small flush buffer) */
    case 75: *value = 9; break;                     /* compute capability */
    case 76: *value = 0; break;
    case 97: *value = 227 * 1024; break;            /* shared memory per block, opt-in */
    default: return INVALID_VALUE;
    }
    return SUCCESS;
}

/* --- contexts, streams, events ------------------------------------------------------------- */

CUresult cuDevicePrimaryCtxRetain(struct mock_ctx **context, CUdevice device)
{
    (void)device;
    if (sticky)
        return sticky;
    the_context.refs++;
    *context = &the_context;
    return SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice device)
{
    (void)device;
    the_context.refs--;
    return sticky ? sticky : SUCCESS;
}

CUresult cuCtxSetCurrent(struct mock_ctx *context)
{
    if (sticky)
        return sticky;
    current = context;
    return SUCCESS;
}

CUresult cuCtxSynchronize(void)
{
    NEED_CONTEXT;
    op("ctx-synchronize");
    if (pending_busy_ms) {
        struct timespec busy = {0, (long)pending_busy_ms * 1000000L};
        nanosleep(&busy, NULL);
        pending_busy_ms = 0;
    }
    if (pending_y) {
        for (long long i = 0; i < pending_n; i++)
            pending_y[i] = 2.0f * pending_x[i] + 1.0f;
        pending_y = NULL;
    }
    return SUCCESS;
}

CUresult cuStreamCreate(struct mock_stream **stream, unsigned flags)
{
    NEED_CONTEXT;
    *stream = calloc(1, sizeof **stream);
    (*stream)->flags = flags;
    live_streams++;
    op("stream-create flags=%u", flags);
    return SUCCESS;
}

CUresult cuStreamDestroy_v2(struct mock_stream *stream)
{
    free(stream);
    live_streams--;
    return sticky ? sticky : SUCCESS;
}

CUresult cuStreamSynchronize(struct mock_stream *stream)
{
    (void)stream;
    NEED_CONTEXT;
    return SUCCESS;
}

CUresult cuEventCreate(struct mock_event **event, unsigned flags)
{
    (void)flags;
    NEED_CONTEXT;
    *event = calloc(1, sizeof **event);
    live_events++;
    return SUCCESS;
}

CUresult cuEventDestroy_v2(struct mock_event *event)
{
    free(event);
    live_events--;
    return sticky ? sticky : SUCCESS;
}

CUresult cuEventRecord(struct mock_event *event, struct mock_stream *stream)
{
    NEED_CONTEXT;
    if (!stream)
        return INVALID_VALUE; /* the backend must record on its own stream */
    event->t = clock_ms;
    event->recorded = 1;
    op("record");
    return SUCCESS;
}

CUresult cuEventSynchronize(struct mock_event *event)
{
    NEED_CONTEXT;
    return event->recorded ? SUCCESS : INVALID_VALUE;
}

CUresult cuEventElapsedTime_v2(float *ms, struct mock_event *start, struct mock_event *end)
{
    NEED_CONTEXT;
    if (!start->recorded || !end->recorded)
        return INVALID_VALUE;
    *ms = (float)(end->t - start->t);
    return SUCCESS;
}

/* --- memory ------------------------------------------------------------------------------- */

CUresult cuMemAlloc_v2(CUdeviceptr *ptr, size_t bytes)
{
    NEED_CONTEXT;
    if (bytes == 0)
        return INVALID_VALUE;
    if (bytes > ((size_t)1 << 34))
        return OUT_OF_MEMORY;
    void *p = calloc(1, bytes);
    if (!p)
        return OUT_OF_MEMORY;
    *ptr = (CUdeviceptr)(uintptr_t)p;
    live_allocations++;
    return SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr ptr)
{
    free((void *)(uintptr_t)ptr);
    live_allocations--;
    return sticky ? sticky : SUCCESS;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes,
                              struct mock_stream *stream)
{
    NEED_CONTEXT;
    if (!stream)
        return INVALID_VALUE;
    memcpy((void *)(uintptr_t)dst, src, bytes);
    op("htod %zu", bytes);
    return SUCCESS;
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, struct mock_stream *stream)
{
    NEED_CONTEXT;
    if (!stream)
        return INVALID_VALUE;
    memcpy(dst, (void *)(uintptr_t)src, bytes);
    op("dtoh %zu", bytes);
    return SUCCESS;
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t n, struct mock_stream *stream)
{
    NEED_CONTEXT;
    if (!stream)
        return INVALID_VALUE;
    memset((void *)(uintptr_t)dst, value, n);
    op("memset8 %zu 0x%02x", n, value);
    return SUCCESS;
}

CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned value, size_t n, struct mock_stream *stream)
{
    NEED_CONTEXT;
    if (!stream)
        return INVALID_VALUE;
    unsigned *words = (unsigned *)(uintptr_t)dst;
    for (size_t i = 0; i < n; i++)
        words[i] = value;
    clock_ms += 0.01;
    op("memset32 %zu", n);
    return SUCCESS;
}

/* --- modules and functions ---------------------------------------------------------------- */

CUresult cuModuleLoadDataEx(struct mock_module **module, const void *image, unsigned n,
                            int *options, void **values)
{
    NEED_CONTEXT;
    const char *text = image;
    if (strstr(text, "MOCK_BAD_PTX")) {
        char *log = NULL;
        size_t size = 0;
        for (unsigned i = 0; i < n; i++) {
            if (options[i] == 5)
                log = values[i];
            if (options[i] == 6)
                size = (size_t)(uintptr_t)values[i];
        }
        if (log && size)
            snprintf(log, size, "ptxas application ptx input, line 3; error: mock syntax error");
        return INVALID_PTX;
    }
    *module = calloc(1, sizeof **module);
    (*module)->image = strdup(text);
    live_modules++;
    op("module-load");
    return SUCCESS;
}

CUresult cuModuleUnload(struct mock_module *module)
{
    free(module->image);
    free(module->memo);
    free(module);
    live_modules--;
    return sticky ? sticky : SUCCESS;
}

/* Where `.entry NAME(` starts in the module, or NULL. */
static const char *find_entry(const struct mock_module *module, const char *name)
{
    char pattern[300];
    snprintf(pattern, sizeof pattern, ".entry %s(", name);
    return strstr(module->image, pattern);
}

CUresult cuModuleGetFunction(struct mock_func **function, struct mock_module *module,
                             const char *name)
{
    NEED_CONTEXT;
    if (!find_entry(module, name))
        return NOT_FOUND;
    /* One handle per lookup, kept for the life of the process, as a real CUfunction is. */
    struct mock_func *f = calloc(1, sizeof *f);
    snprintf(f->name, sizeof f->name, "%s", name);
    f->module = module;
    f->max_dynamic_shared = 48 * 1024;
    *function = f;
    return SUCCESS;
}

CUresult cuFuncGetAttribute(int *value, int attribute, struct mock_func *f)
{
    NEED_CONTEXT;
    switch (attribute) {
    case 0: *value = strstr(f->name, "heavy") ? 256 : 1024; break; /* max threads per block */
    case 1: *value = 0; break;                                       /* static shared memory */
    case 4: *value = strstr(f->name, "heavy") ? 255 : 32; break;    /* registers */
    case 8: *value = f->max_dynamic_shared; break;
    default: *value = 0;
    }
    return SUCCESS;
}

CUresult cuFuncSetAttribute(struct mock_func *f, int attribute, int value)
{
    NEED_CONTEXT;
    if (attribute == 8) {
        if (value > 227 * 1024)
            return INVALID_VALUE;
        f->max_dynamic_shared = value;
        op("opt-in %d", value);
    }
    return SUCCESS;
}

/* Parameter `index` of `f`, from the `.param .TYPE name` list of its entry. */
CUresult cuFuncGetParamInfo(struct mock_func *f, size_t index, size_t *offset, size_t *size)
{
    NEED_CONTEXT;
    const char *p = find_entry(f->module, f->name);
    const char *end = strchr(p, ')');
    size_t i = 0, at = 0;
    while ((p = strstr(p, ".param")) && p < end) {
        p += 6;
        while (*p == ' ' || *p == '\t')
            p++;
        size_t bytes = (strncmp(p, ".u32", 4) == 0 || strncmp(p, ".s32", 4) == 0 ||
                        strncmp(p, ".f32", 4) == 0)
                           ? 4
                           : 8;
        if (i == index) {
            *offset = at;
            *size = bytes;
            return SUCCESS;
        }
        at += bytes;
        i++;
    }
    return INVALID_VALUE;
}

CUresult cuLaunchKernel(struct mock_func *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shared, struct mock_stream *stream,
                        void **params, void **extra)
{
    NEED_CONTEXT;
    if (!stream || extra)
        return INVALID_VALUE;
    if ((unsigned long long)bx * by * bz > 1024 || gy > 65535 || gz > 65535)
        return INVALID_VALUE;
    if ((int)shared > f->max_dynamic_shared)
        return INVALID_VALUE;
    op("launch %s grid=%u,%u,%u block=%u,%u,%u shared=%u", f->name, gx, gy, gz, bx, by, bz,
       shared);
    const char *name = f->name;
    if (strcmp(name, "tunebox_delay") == 0) {
        clock_ms += 0.02;
        return SUCCESS;
    }
    clock_ms += 0.5;
    if (strcmp(name, "axpy") == 0 || strcmp(name, "scribble") == 0) {
        float *x = *(float **)params[0];
        float *y = *(float **)params[1];
        long long n = *(long long *)params[2];
        for (long long i = 0; i < n; i++)
            y[i] = 2.0f * x[i] + 1.0f;
        if (strcmp(name, "scribble") == 0)
            x[0] = 42.0f; /* writes an input */
    } else if (strcmp(name, "memoize") == 0 || strcmp(name, "once") == 0 ||
               strcmp(name, "late_write") == 0 || strcmp(name, "hidden_work") == 0) {
        float *x = *(float **)params[0];
        float *y = *(float **)params[1];
        long long n = *(long long *)params[2];
        struct mock_module *m = f->module;
        if (strcmp(name, "memoize") == 0) {
            if (!m->memo) {
                m->memo = malloc((size_t)n * sizeof *m->memo);
                for (long long i = 0; i < n; i++)
                    m->memo[i] = 2.0f * x[i] + 1.0f;
            }
            memcpy(y, m->memo, (size_t)n * sizeof *y);
        } else if (strcmp(name, "once") == 0) {
            if (!m->done)
                for (long long i = 0; i < n; i++)
                    y[i] = 2.0f * x[i] + 1.0f;
            m->done = 1;
        } else if (strcmp(name, "late_write") == 0) {
            pending_x = x;
            pending_y = y;
            pending_n = n;
        } else {
            for (long long i = 0; i < n; i++)
                y[i] = 2.0f * x[i] + 1.0f;
            pending_busy_ms = 5;
        }
    } else if (strcmp(name, "accumulate") == 0) {
        float *y = *(float **)params[0];
        long long n = *(long long *)params[1];
        for (long long i = 0; i < n; i++)
            y[i] += 1.0f;
    } else if (strcmp(name, "illegal") == 0) {
        sticky = ILLEGAL_ADDRESS; /* shows at the next synchronization */
    } else if (strcmp(name, "trap") == 0) {
        sticky = ILLEGAL_INSTRUCTION;
    }
    return SUCCESS;
}
