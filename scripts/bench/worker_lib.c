/* libworker.so, the native library of scripts/bench/worker.py: the call shape of UCX's memory hooks, as
 * testprogs/ucx_like_lib.c (libc's munmap entry overwritten with a jump to ucm_munmap; the original calls go
 * through syscall(SYS_munmap) and syscall(SYS_mmap)), but with a bounded pool, so that a worker running for
 * minutes keeps a steady rate of calls and a flat RSS: every unmap of the process takes a 4 KiB entry from a
 * pool of 64 KiB chunks (a new chunk through syscall(SYS_mmap) every 16 unmaps) and, once more than 8 chunks
 * are held, gives the oldest back through syscall(SYS_munmap). worker_syscalls() counts its syscall() calls. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CHUNK (64 * 1024)
#define ELEM 4096
#define KEEP 8

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *chunks[KEEP + 1]; /* oldest first; the last one is being filled */
static int held;
static size_t used = CHUNK;
static unsigned long calls;

unsigned long worker_syscalls(void) {
    return __atomic_load_n(&calls, __ATOMIC_RELAXED);
}

static long counted_syscall(long nr, long a, long b, long c, long d, long e, long f) {
    __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
    return syscall(nr, a, b, c, d, e, f);
}

__attribute__((noinline)) void *ucm_orig_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return (void *)counted_syscall(SYS_mmap, (long)addr, (long)len, prot, flags, fd, off);
}

__attribute__((noinline)) int ucm_orig_munmap(void *addr, size_t len) {
    return (int)counted_syscall(SYS_munmap, (long)addr, (long)len, 0, 0, 0, 0);
}

/* Called with the lock held. */
__attribute__((noinline)) static void ucs_mpool_grow(void) {
    char *chunk = ucm_orig_mmap(NULL, CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (chunk == MAP_FAILED) return;
    if (held == KEEP + 1) {
        ucm_orig_munmap(chunks[0], CHUNK);
        memmove(chunks, chunks + 1, KEEP * sizeof *chunks);
        held--;
    }
    chunks[held++] = chunk;
    used = 0;
}

__attribute__((noinline)) void ucs_rcache_invalidate(void *addr, size_t len) {
    pthread_mutex_lock(&lock);
    if (used == CHUNK) ucs_mpool_grow();
    if (used < CHUNK) {
        uintptr_t *e = (uintptr_t *)(chunks[held - 1] + used);
        e[0] = (uintptr_t)addr;
        e[1] = len;
        used += ELEM;
    }
    pthread_mutex_unlock(&lock);
}

__attribute__((noinline)) int ucm_munmap(void *addr, size_t len) {
    ucs_rcache_invalidate(addr, len);
    return ucm_orig_munmap(addr, len);
}

static void patch_entry(void *at, void *to) {
    unsigned char jmp[14] = {0xff, 0x25, 0, 0, 0, 0};
    uint64_t target = (uint64_t)(uintptr_t)to;
    memcpy(jmp + 6, &target, 8);
    uintptr_t start = (uintptr_t)at & ~(uintptr_t)4095;
    uintptr_t end = ((uintptr_t)at + sizeof jmp + 4095) & ~(uintptr_t)4095;
    mprotect((void *)start, end - start, PROT_READ | PROT_WRITE | PROT_EXEC);
    memcpy(at, jmp, sizeof jmp);
    mprotect((void *)start, end - start, PROT_READ | PROT_EXEC);
}

__attribute__((constructor)) static void ucm_init(void) {
    patch_entry(dlsym(RTLD_NEXT, "munmap"), (void *)ucm_munmap);
}
