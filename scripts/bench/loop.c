/* Bench target: times its own loop, so process startup and attaching never pollute a figure.
 * Usage: loop MODE   (MODE: getpid | int3 | mmap | munmap | spin)
 *   getpid  syscall(SYS_getpid) per iteration: a non-matching hit for `syscatch --syscall mmap`
 *   int3    a literal int3, then syscall(SYS_getpid): one trap per iteration for the floor tracer (dies untraced)
 *   mmap    syscall(SYS_mmap) of one page, then glibc munmap (not through syscall()): one matching hit
 *   munmap  syscall(SYS_munmap) of one page: before each loop one mapping of as many pages as it has calls is made
 *           with a bare `syscall` instruction (seen by no tracer), and each call unmaps the next page of it
 *   spin    no pid line, no input: computes until killed (the bench's CPU-bound neighbour)
 * Prints "pid N", then for each line "go N" runs N iterations and prints "ns T" (T: the loop's CLOCK_MONOTONIC
 * time in nanoseconds); "each N" runs N iterations and prints "first F nth T again A": the first and the last
 * call's own times, and that of one more call made alone 100 ms later (ns); "sparse N US" runs N iterations
 * with US microseconds of computing before each (a busy loop calibrated at start on this clock, a fixed amount
 * of work: a preemption inside it makes it longer, as it would a real program's) and prints "ns T compute C":
 * T the sum of the iterations' own times (each timed alone, around the call), C the time spent computing;
 * "rate MS" computes for MS milliseconds from the moment it reads the line and prints "work C1 C2 ...": the 10 us
 * chunks of calibrated work done in each 100 ms of its own clock (the target's work rate, whatever stopped it);
 * "quit" or end of input exits 0. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/syscall.h>

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Fixed work: `n` rounds of a multiply-add the compiler must keep. */
static void work(long n) {
    unsigned long x = 1;
    for (long i = 0; i < n; i++) {
        x = x * 6364136223846793005UL + 1442695040888963407UL;
        __asm__ volatile("" : "+r"(x));
    }
}

/* Rounds of work() per microsecond: the best of a few 2 ms trials (the least disturbed). */
static double calibrate(void) {
    double best = 0;
    for (int t = 0; t < 5; t++) {
        long n = 200000;
        long long t0 = now_ns();
        work(n);
        double rate = n * 1000.0 / (double)(now_ns() - t0);
        if (rate > best) best = rate;
    }
    return best;
}

/* A system call made by a bare `syscall` instruction: no tracer of libc's functions takes it. */
static long raw_syscall6(long nr, long a, long b, long c, long d, long e, long f) {
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "0"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}

/* The pages the munmap mode unmaps, one per call: mapped before each loop, and what a loop left unmapped
 * afterwards, by raw_syscall6 (libc's mmap, munmap and syscall() are all watched by --leaks). */
static char *pool;
static long pool_next, pool_pages;
static int pool_map(long pages) {
    long ret = raw_syscall6(SYS_mmap, 0, pages * 4096, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (ret < 0 && ret > -4096) {
        fprintf(stderr, "mmap of %ld pages: %s\n", pages, strerror((int)-ret));
        return 3;
    }
    pool = (char *)ret, pool_next = 0, pool_pages = pages;
    return 0;
}
static void pool_end(void) {
    if (pool_next < pool_pages)
        raw_syscall6(SYS_munmap, (long)(pool + 4096 * pool_next), 4096 * (pool_pages - pool_next), 0, 0, 0, 0);
    pool = NULL, pool_next = pool_pages = 0;
}

/* One iteration of the loop's mode; non-zero if mmap or munmap failed. */
static int one(int m) {
    if (m == 0) {
        syscall(SYS_getpid);
    } else if (m == 1) {
        __asm__ volatile("int3" ::: "memory");
        syscall(SYS_getpid);
    } else if (m == 2) {
        void *p = (void *)syscall(SYS_mmap, NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                                  -1, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            return 3;
        }
        munmap(p, 4096);
    } else if (m == 3) {
        if (syscall(SYS_munmap, pool + 4096 * pool_next++, 4096)) {
            perror("munmap");
            return 3;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "getpid";
    int m = !strcmp(mode, "getpid") ? 0
            : !strcmp(mode, "int3") ? 1
            : !strcmp(mode, "mmap") ? 2
            : !strcmp(mode, "munmap") ? 3
                                      : -1;
    if (!strcmp(mode, "spin"))
        for (;;) work(1L << 30);
    if (m < 0) {
        fprintf(stderr, "usage: loop getpid|int3|mmap|munmap|spin\n");
        return 2;
    }
    double per_us = calibrate();
    printf("pid %d\n", getpid());
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        long n, us, ms;
        if (sscanf(line, "rate %ld", &ms) == 1) {
            /* Chunks of 10 us of work, counted per 100 ms window of this clock. */
            long chunk = (long)(10 * per_us);
            long long end = now_ns() + ms * 1000000LL, w_end = 0, count = 0;
            printf("work");
            for (long long t = now_ns(); t < end; t = now_ns()) {
                if (t >= w_end) {
                    if (w_end) printf(" %lld", count);
                    count = 0, w_end = (w_end ? w_end : t) + 100000000LL;
                }
                work(chunk);
                count++;
            }
            printf(" %lld\n", count);
            fflush(stdout);
            continue;
        }
        int sparse = sscanf(line, "sparse %ld %ld", &n, &us) == 2;
        if (m == 3 && (sparse || sscanf(line, "%*s %ld", &n) == 1) && pool_map(n + 1)) return 3;
        if (sparse) {
            long long calls = 0, computing = 0, c0, c1;
            long rounds = (long)(us * per_us);
            for (long i = 0; i < n; i++) {
                c0 = now_ns();
                work(rounds);
                c1 = now_ns();
                if (one(m)) return 3;
                calls += now_ns() - c1;
                computing += c1 - c0;
            }
            if (m == 3) pool_end();
            printf("ns %lld compute %lld\n", calls, computing);
            fflush(stdout);
            continue;
        }
        /* "each N": the first and the Nth call timed alone ("first F nth T", ns), the rest as usual. */
        int each = sscanf(line, "each %ld", &n) == 1;
        if (!each && sscanf(line, "go %ld", &n) != 1) break;
        long long t0 = now_ns(), first = 0, nth = 0, c0 = 0;
        for (long i = 0; i < n; i++) {
            if (each) c0 = now_ns();
            if (one(m)) return 3;
            if (each && i == 0) first = now_ns() - c0;
            if (each && i == n - 1) nth = now_ns() - c0;
        }
        long long t1 = now_ns(), again = 0;
        if (each) {
            /* A call made alone after an idle pause: what the first costs from idle alone, loading nothing. */
            struct timespec pause = {0, 100 * 1000 * 1000};
            nanosleep(&pause, NULL);
            c0 = now_ns();
            if (one(m)) return 3;
            again = now_ns() - c0;
        }
        if (m == 3) pool_end();
        if (each)
            printf("first %lld nth %lld again %lld\n", first, nth, again);
        else
            printf("ns %lld\n", t1 - t0);
        fflush(stdout);
    }
    return 0;
}
