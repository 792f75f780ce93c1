/* Bench target for stacks: matching calls at the bottom of deep stacks, built -O2 -fomit-frame-pointer -g so an
 * unwinder needs the CFI.
 * Usage: deep chain | deep sites
 *   chain  per iteration: chain01() -> chain02() -> ... -> chain30() (30 distinct noinline functions), and chain30
 *          calls syscall(SYS_mmap) of one page, then glibc munmap (not through syscall()): one matching hit with a
 *          30-frame stack below main
 *   sites  iteration i: recurse() 64 levels deep, then site_K() with K = i % 50 (50 distinct noinline functions,
 *          so 50 distinct call sites of syscall()) maps and unmaps one page the same way: 64+ frames per stack
 * Prints "pid N", then for each line "go N" runs N iterations and prints "ns T" (T: the loop's CLOCK_MONOTONIC
 * time in nanoseconds); "quit" or end of input exits 0. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define NOINLINE __attribute__((noinline, noclone))

/* Every function adds its result into this after its call, so no call is a tail call and no frame disappears. */
static volatile long sink;

static long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* Inlined into each caller, so each caller has its own call of syscall(). */
static inline __attribute__((always_inline)) long map_one(void) {
    void *p = (void *)syscall(SYS_mmap, NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        exit(3);
    }
    munmap(p, 4096);
    return (long)p & 1;
}

/* ---- chain: 30 nested functions */
#define LINK(n, next)                       \
    static NOINLINE long chain##n(long x) { \
        long r = next(x + 1);               \
        sink = sink + r;                    \
        return r + x;                       \
    }
static NOINLINE long chain30(long x) {
    long r = map_one();
    sink = sink + r;
    return r + x;
}
LINK(29, chain30) LINK(28, chain29) LINK(27, chain28) LINK(26, chain27) LINK(25, chain26) LINK(24, chain25)
LINK(23, chain24) LINK(22, chain23) LINK(21, chain22) LINK(20, chain21) LINK(19, chain20) LINK(18, chain19)
LINK(17, chain18) LINK(16, chain17) LINK(15, chain16) LINK(14, chain15) LINK(13, chain14) LINK(12, chain13)
LINK(11, chain12) LINK(10, chain11) LINK(09, chain10) LINK(08, chain09) LINK(07, chain08) LINK(06, chain07)
LINK(05, chain06) LINK(04, chain05) LINK(03, chain04) LINK(02, chain03) LINK(01, chain02)

/* ---- sites: 50 call sites of syscall() below a 64-deep recursion */
#define SITE(k)                            \
    static NOINLINE long site##k(long x) { \
        long r = map_one() + x;            \
        sink = sink + r;                   \
        return r;                          \
    }
#define SITES10(d) SITE(d##0) SITE(d##1) SITE(d##2) SITE(d##3) SITE(d##4) SITE(d##5) SITE(d##6) SITE(d##7) \
    SITE(d##8) SITE(d##9)
SITES10(0) SITES10(1) SITES10(2) SITES10(3) SITES10(4)
#define S(k) site##k
#define S10(d) S(d##0), S(d##1), S(d##2), S(d##3), S(d##4), S(d##5), S(d##6), S(d##7), S(d##8), S(d##9)
static long (*const sites[50])(long) = {S10(0), S10(1), S10(2), S10(3), S10(4)};

static NOINLINE long recurse(int depth, int k) {
    if (depth == 0) return sites[k](k);
    long r = recurse(depth - 1, k);
    sink = sink + r;
    return r + depth;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "chain";
    int m = !strcmp(mode, "chain") ? 0 : !strcmp(mode, "sites") ? 1 : -1;
    if (m < 0) {
        fprintf(stderr, "usage: deep chain|sites\n");
        return 2;
    }
    printf("pid %d\n", getpid());
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        long n;
        if (sscanf(line, "go %ld", &n) != 1) break;
        long t0 = now_ns();
        for (long i = 0; i < n; i++) {
            if (m == 0)
                chain01(i);
            else
                recurse(64, (int)(i % 50));
        }
        long t1 = now_ns();
        printf("ns %ld\n", t1 - t0);
        fflush(stdout);
    }
    return 0;
}
