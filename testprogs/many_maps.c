/* A process with many mappings, as libunwind's tests make one: PAGES one-page mappings (default 30,000) with
 * alternating protections, so that no two merge, each touched once. Then it makes real mappings through
 * syscall(SYS_mmap) from two call sites: leak_site() keeps its mappings, tidy_site() unmaps them again.
 * Usage: many_maps [PAGES]
 * Prints "pid N" and "maps PAGES START" (the first page of the block), then takes lines until one it does not know
 * (or the end of input), and exits 0:
 *   "go"    makes the calls, printing "mmap ADDR LEN" for each mapping leak_site() keeps, then "leaked BYTES"
 *           and "done";
 *   "time"  maps and unmaps one page with a bare `syscall` instruction (no libc function, so no probe stops it)
 *           every 200 us until the next line arrives (which it takes as the end and nothing else), timing each
 *           pair on its own clock: the wait for the mmap lock that a reader of /proc/PID/smaps holds. Prints
 *           "wait PAIRS TOTAL_US MAX_US OVER_1MS": the sum and the longest of the pairs' times, and how many
 *           took over 1 ms. */
#include "common.h"
#include <poll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>

#define PAGE 4096

static void *raw_mmap(size_t len) {
    return (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

__attribute__((noinline)) static size_t leak_site(int i) {
    size_t len = (size_t)(i + 1) * 16 * PAGE;
    char *p = raw_mmap(len);
    if (p == MAP_FAILED) { perror("mmap"); exit(3); }
    for (size_t o = 0; o < len; o += PAGE) p[o] = 1;
    say("mmap %p %zu\n", (void *)p, len);
    return len;
}

__attribute__((noinline)) static void tidy_site(int i) {
    size_t len = (size_t)(i + 1) * 8 * PAGE;
    char *p = raw_mmap(len);
    if (p == MAP_FAILED) { perror("mmap"); exit(3); }
    p[0] = 1;
    syscall(SYS_munmap, p, len);
}

/* A system call made by the instruction itself: libc's syscall() and mmap() are probed by syscatch. */
static long bare_syscall6(long nr, long a, long b, long c, long d, long e, long f) {
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void time_own_mmaps(void) {
    struct pollfd in = { .fd = 0, .events = POLLIN };
    struct timespec gap = { 0, 200 * 1000 };
    long pairs = 0, over = 0;
    double total = 0, max = 0;
    for (;;) {
        double t0 = now_us();
        long p = bare_syscall6(SYS_mmap, 0, PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p < 0 && p > -4096) { fprintf(stderr, "mmap: %ld\n", -p); exit(3); }
        bare_syscall6(SYS_munmap, p, PAGE, 0, 0, 0, 0);
        double took = now_us() - t0;
        pairs++;
        total += took;
        if (took > max) max = took;
        if (took > 1000) over++;
        if (poll(&in, 1, 0) > 0) break;
        nanosleep(&gap, NULL);
    }
    say("wait %ld %.0f %.0f %ld\n", pairs, total, max, over);
}

int main(int argc, char **argv) {
    long pages = argc > 1 ? atol(argv[1]) : 30000;
    char buf[64];
    say("pid %d\n", getpid());
    char *block = mmap(NULL, (size_t)pages * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (block == MAP_FAILED) { perror("mmap"); return 3; }
    for (long i = 0; i < pages; i++) block[i * PAGE] = 1;
    /* Every other page read-only: each page is its own mapping. */
    for (long i = 1; i < pages; i += 2)
        if (mprotect(block + i * PAGE, PAGE, PROT_READ) != 0) { perror("mprotect"); return 3; }
    say("maps %ld %p\n", pages, (void *)block);
    while (wait_line(buf, sizeof buf)) {
        if (strncmp(buf, "time", 4) == 0) {
            time_own_mmaps();
            if (!wait_line(buf, sizeof buf)) return 2;
        } else if (strncmp(buf, "go", 2) == 0) {
            size_t leaked = 0;
            for (int i = 0; i < 6; i++) {
                leaked += leak_site(i);
                tidy_site(i);
            }
            say("leaked %zu\n", leaked);
            say("done\n");
        } else {
            break;
        }
    }
    return 0;
}
