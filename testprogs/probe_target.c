/* A target for probe scripts. Prints "pid N", then runs commands from stdin, answering with ground truth and "ok":
 *   scaled T N   T threads each call scaled(i) N times (its first instruction loads a global rip-relative);
 *                prints "scaled CALLS" (the calls made) and "factor F"
 *   depth N      calls depth(N), which recurses N levels through a volatile pointer; prints "depth N RET"
 *   libcmap N    N glibc mmap() calls of distinct lengths, each printed "libcmap ADDR LEN", then munmap of each
 *   malloc SIZE  malloc(SIZE), printed "malloc PTR SIZE" (then freed)
 *   rawmap N     N mmaps through syscall(SYS_mmap), each printed "mmap ADDR LEN" */
#include "common.h"
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/syscall.h>

volatile long factor = 3;
static atomic_long calls;
static long per_thread;

__attribute__((noinline)) long scaled(long x) { return factor * x; }

__attribute__((noinline)) long depth(long n);
static long (*volatile self)(long) = depth;
__attribute__((noinline)) long depth(long n) {
    if (n == 0) return 0;
    return self(n - 1) + n;
}

static void *worker(void *arg) {
    long base = (long)arg * 1000000;
    for (long i = 0; i < per_thread; i++) {
        if (scaled(base + i) != factor * (base + i)) _exit(5);
        calls++;
    }
    return NULL;
}

int main(void) {
    say("pid %d\n", getpid());
    char line[128];
    while (wait_line(line, sizeof line)) {
        char cmd[32] = "";
        long a = 0, b = 0;
        sscanf(line, "%31s %ld %ld", cmd, &a, &b);
        if (!strcmp(cmd, "scaled")) {
            pthread_t t[16];
            per_thread = b;
            calls = 0;
            for (long i = 0; i < a && i < 16; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 1));
            for (long i = 0; i < a && i < 16; i++) pthread_join(t[i], NULL);
            say("scaled %ld\nfactor %ld\n", (long)calls, factor);
        } else if (!strcmp(cmd, "depth")) {
            say("depth %ld %ld\n", a, depth(a));
        } else if (!strcmp(cmd, "libcmap")) {
            void *p[64];
            for (long i = 0; i < a && i < 64; i++) {
                size_t len = 4096 * (size_t)(i + 1);
                p[i] = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                say("libcmap %p %zu\n", p[i], len);
            }
            for (long i = 0; i < a && i < 64; i++) munmap(p[i], 4096 * (size_t)(i + 1));
        } else if (!strcmp(cmd, "malloc")) {
            void *p = malloc((size_t)a);
            say("malloc %p %ld\n", p, a);
            free(p);
        } else if (!strcmp(cmd, "rawmap")) {
            for (long i = 0; i < a; i++) {
                size_t len = 4096 * (size_t)(i + 1);
                void *p = (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                say("mmap %p %zu\n", p, len);
            }
        }
        say("ok\n");
    }
    return 0;
}
