/*
 * What carrying a large output from a worker to the parent costs (issue 33, "windows that
 * cost nothing"): the ways a 288 MiB buffer can reach another process, timed on this machine.
 *
 *   cc -O2 -o region_cost benchmarks/windows/region_cost.c && ./region_cost [MIB] [ROUNDS]
 *
 * The source is MIB MiB (default 288, a vector_add tensor at 72 Mi floats) in transparent huge
 * pages, as a worker's tensors are. Each round prints, in ms:
 *   region   a new memfd, ftruncate, mmap, memcpy: what ipc-channel's
 *            IpcSharedMemory::from_bytes does (every 4 KiB page faulted in, zeroed, charged);
 *   free     closing and unmapping that region (its pages freed);
 *   pwrite   a new memfd filled with pwrite (pages allocated without faults or zeroing);
 *   populate a new memfd mapped and MADV_POPULATE_WRITE (Linux 5.14), then the copy into it;
 *   reuse    the copy into the first region again (pages that exist);
 *   readv    process_vm_readv of a child's copy of the source (its own buffer in huge
 *            pages: the parent reading a worker's output) into a new huge-page buffer, then
 *            (readv_again) into one that exists.
 * docs/performance.md ("Issue 33, seventh session") has this machine's figures.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define HUGE_PAGE (2ul << 20)

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* `len` bytes on a huge-page boundary, advised into transparent huge pages; not touched. */
static unsigned char *huge(size_t len) {
    unsigned char *raw = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    unsigned char *p = (unsigned char *)(((size_t)raw + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1));
    madvise(p, len, MADV_HUGEPAGE);
    return p;
}

static int new_memfd(size_t len) {
    int fd = memfd_create("region-cost", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        perror("memfd");
        exit(1);
    }
    return fd;
}

static unsigned char *map_shared(int fd, size_t len) {
    unsigned char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    return p;
}

int main(int argc, char **argv) {
    size_t len = (size_t)(argc > 1 ? atol(argv[1]) : 288) << 20;
    int rounds = argc > 2 ? atoi(argv[2]) : 3;
    unsigned char *src = huge(len);
    for (size_t i = 0; i < len; i++) src[i] = (unsigned char)i;
    /* A child holding the source, for process_vm_readv; it waits for the pipe to close. */
    int pipefd[2], ready[2];
    if (pipe(pipefd) != 0 || pipe(ready) != 0) return 1;
    pid_t child = fork();
    if (child == 0) {
        close(pipefd[1]);
        /* A buffer of its own in huge pages, as a worker's output is; its address goes to the
         * parent, then the child waits for the pipe to close. */
        unsigned char *own = huge(len);
        memcpy(own, src, len);
        (void)write(ready[1], &own, sizeof own);
        char c;
        (void)read(pipefd[0], &c, 1);
        _exit(0);
    }
    close(pipefd[0]);
    unsigned char *in_child;
    if (read(ready[0], &in_child, sizeof in_child) != sizeof in_child) return 1;
    unsigned char *again = huge(len);
    printf("round region free pwrite populate reuse readv readv_again (ms, %zu MiB)\n", len >> 20);
    for (int r = 0; r < rounds; r++) {
        double t0 = now_ms();
        int fd = new_memfd(len);
        unsigned char *region = map_shared(fd, len);
        memcpy(region, src, len);
        double region_ms = now_ms() - t0;

        t0 = now_ms();
        memcpy(region, src, len);
        double reuse_ms = now_ms() - t0;

        t0 = now_ms();
        munmap(region, len);
        close(fd);
        double free_ms = now_ms() - t0;

        t0 = now_ms();
        fd = new_memfd(len);
        for (size_t off = 0; off < len;) {
            ssize_t n = pwrite(fd, src + off, len - off, (off_t)off);
            if (n <= 0) {
                perror("pwrite");
                return 1;
            }
            off += (size_t)n;
        }
        double pwrite_ms = now_ms() - t0;
        close(fd);

        t0 = now_ms();
        fd = new_memfd(len);
        region = map_shared(fd, len);
        madvise(region, len, MADV_POPULATE_WRITE);
        memcpy(region, src, len);
        double populate_ms = now_ms() - t0;
        munmap(region, len);
        close(fd);

        t0 = now_ms();
        unsigned char *dst = huge(len);
        struct iovec local = {dst, len}, remote = {in_child, len};
        ssize_t got = process_vm_readv(child, &local, 1, &remote, 1, 0);
        double readv_ms = now_ms() - t0;
        t0 = now_ms();
        struct iovec local_again = {again, len};
        ssize_t got_again = process_vm_readv(child, &local_again, 1, &remote, 1, 0);
        double readv_again_ms = now_ms() - t0;
        munmap(dst, len);
        if (got != (ssize_t)len || got_again != (ssize_t)len) perror("process_vm_readv");

        printf("%d %.1f %.1f %.1f %.1f %.1f %.1f %.1f\n", r, region_ms, free_ms, pwrite_ms,
               populate_ms, reuse_ms, readv_ms, readv_again_ms);
    }
    close(pipefd[1]);
    waitpid(child, NULL, 0);
    return 0;
}
