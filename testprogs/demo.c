/* The bundled demo target (`syscatch demo`): a "communication library" that keeps a pool growing with raw
 * mmaps through syscall(), which heap profilers never see, next to a well-behaved scratch buffer that is mapped
 * and unmapped again. Runs for about 3 seconds, then exits. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (1 << 20)

static void *raw_mmap(size_t len) {
    return (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

/* The leak: regions are queued "for reuse" and never released. */
__attribute__((noinline)) static void *pool_grow(void) {
    void *p = raw_mmap(CHUNK);
    memset(p, 1, CHUNK);
    return p;
}

__attribute__((noinline)) static void comm_progress(void) { (void)pool_grow(); }

/* Well behaved: mapped, used, unmapped. */
__attribute__((noinline)) static void scratch(void) {
    void *p = raw_mmap(4 * CHUNK);
    memset(p, 2, 4096);
    syscall(SYS_munmap, p, 4 * CHUNK);
}

int main(void) {
    printf("demo: pid %d, leaking 1 MiB every 100 ms through syscall(SYS_mmap)\n", getpid());
    fflush(stdout);
    struct timespec tick = {0, 100 * 1000 * 1000};
    for (int i = 0; i < 30; i++) {
        comm_progress();
        scratch();
        syscall(SYS_getpid);
        nanosleep(&tick, NULL);
    }
    return 0;
}
