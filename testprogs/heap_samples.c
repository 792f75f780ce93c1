/* Two threads allocate through malloc, calloc, realloc and posix_memalign from known functions, keeping some
 * blocks and freeing others; two functions allocate with C++'s `operator new` and free with its sized `operator
 * delete` where a preloaded allocator exports them (jemalloc, tcmalloc and mimalloc do; found with dlsym, so this
 * stays a C program), else with malloc and free. Prints its pid, waits for "go", works, then prints its ground truth, one line per
 * function:
 *   live NAME BYTES ALLOCATED BLOCKS   bytes still allocated by NAME at the end (in BLOCKS blocks of one size),
 *                                      and all it allocated
 * then "done"; waits for a line, frees everything and exits. */
#include "common.h"
#include <dlfcn.h>
#include <pthread.h>

#define KEEP_SMALL 200000
#define KEEP_BIG 16
#define ALIGNED 200
#define CHURN 10000
#define FREED_BIG 10
#define KEEP_NEW 100
#define FROM_NULL 100
#define CHURN_NEW 5000

static void *kept_small[KEEP_SMALL];
static void *kept_big[KEEP_BIG];
static void *kept_aligned[ALIGNED];
static void *grown;
static void *kept_new[KEEP_NEW];
static void *kept_from_null[FROM_NULL];
static void *(*op_new)(size_t);
static void (*op_delete)(void *, size_t);
static size_t grown_len;
static volatile unsigned long sink;

/* 64-byte blocks, all kept: 12.2 MiB live from 200,000 small allocations. */
__attribute__((noinline)) static void keep_small(void) {
    for (int i = 0; i < KEEP_SMALL; i++) {
        kept_small[i] = malloc(64);
        ((char *)kept_small[i])[0] = 1;
    }
}

/* 4 KiB blocks freed at once: nothing live, 39 MiB allocated. */
__attribute__((noinline)) static void churn(void) {
    for (int i = 0; i < CHURN; i++) {
        char *p = malloc(4096);
        p[0] = (char)i;
        sink += (unsigned long)p[0];
        free(p);
    }
}

/* 1 MiB zeroed blocks, kept. */
__attribute__((noinline)) static void keep_big(void) {
    for (int i = 0; i < KEEP_BIG; i++) kept_big[i] = calloc(1, 1 << 20);
}

/* A buffer grown by realloc to 12 MiB, kept. */
__attribute__((noinline)) static void grow_buffer(void) {
    for (size_t len = 4096; len <= (12 << 20); len += 64 << 10) {
        grown = realloc(grown, len);
        grown_len = len;
        ((char *)grown)[len - 1] = 1;
    }
}

/* 64 KiB blocks aligned to 4 KiB, kept: 12.5 MiB. */
__attribute__((noinline)) static void keep_aligned(void) {
    for (int i = 0; i < ALIGNED; i++) {
        if (posix_memalign(&kept_aligned[i], 4096, 64 << 10) != 0) abort();
    }
}

/* 2 MiB blocks freed again: nothing live. */
__attribute__((noinline)) static void freed_big(void) {
    for (int i = 0; i < FREED_BIG; i++) {
        char *p = malloc(2 << 20);
        p[0] = (char)i;
        sink += (unsigned long)p[0];
        free(p);
    }
}

static void *new_block(size_t n) { return op_new ? op_new(n) : malloc(n); }
static void delete_block(void *p, size_t n) {
    if (op_delete) op_delete(p, n);
    else free(p);
}

/* 128 KiB blocks from `operator new`, kept: 12.5 MiB. */
__attribute__((noinline)) static void keep_new(void) {
    for (int i = 0; i < KEEP_NEW; i++) {
        kept_new[i] = new_block(128 << 10);
        ((char *)kept_new[i])[0] = 1;
    }
}

/* 8 KiB blocks from `operator new`, deleted at once: nothing live. */
__attribute__((noinline)) static void churn_new(void) {
    for (int i = 0; i < CHURN_NEW; i++) {
        char *p = new_block(8192);
        p[0] = (char)i;
        sink += (unsigned long)p[0];
        delete_block(p, 8192);
    }
}

/* 128 KiB blocks from realloc of a null pointer (glibc's realloc then jumps to malloc), kept: 12.5 MiB. */
__attribute__((noinline)) static void keep_from_null(void) {
    for (int i = 0; i < FROM_NULL; i++) {
        kept_from_null[i] = realloc(NULL, 128 << 10);
        ((char *)kept_from_null[i])[0] = 1;
    }
}

static void *second(void *arg) {
    (void)arg;
    keep_big();
    grow_buffer();
    keep_aligned();
    freed_big();
    keep_new();
    keep_from_null();
    return NULL;
}

int main(void) {
    char line[64];
    say("pid %d\n", getpid());
    if (!wait_line(line, sizeof line)) return 1;
    op_new = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "_Znwm");
    op_delete = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "_ZdlPvm");
    if (!op_new || !op_delete) op_new = NULL, op_delete = NULL;
    pthread_t t;
    pthread_create(&t, NULL, second, NULL);
    keep_small();
    churn();
    churn_new();
    pthread_join(t, NULL);
    size_t grown_total = 0;
    for (size_t len = 4096; len <= (12 << 20); len += 64 << 10) grown_total += len;
    say("live keep_small %zu %zu %d\n", (size_t)KEEP_SMALL * 64, (size_t)KEEP_SMALL * 64, KEEP_SMALL);
    say("live churn 0 %zu 0\n", (size_t)CHURN * 4096);
    say("live keep_big %zu %zu %d\n", (size_t)KEEP_BIG << 20, (size_t)KEEP_BIG << 20, KEEP_BIG);
    say("live grow_buffer %zu %zu 1\n", grown_len, grown_total);
    say("live keep_aligned %zu %zu %d\n", (size_t)ALIGNED << 16, (size_t)ALIGNED << 16, ALIGNED);
    say("live freed_big 0 %zu 0\n", (size_t)FREED_BIG << 21);
    say("live keep_new %zu %zu %d\n", (size_t)KEEP_NEW << 17, (size_t)KEEP_NEW << 17, KEEP_NEW);
    say("live churn_new 0 %zu 0\n", (size_t)CHURN_NEW * 8192);
    say("live keep_from_null %zu %zu %d\n", (size_t)FROM_NULL << 17, (size_t)FROM_NULL << 17, FROM_NULL);
    say("operator new %s\n", op_new ? "yes" : "no");
    say("done\n");
    wait_line(line, sizeof line);
    for (int i = 0; i < KEEP_SMALL; i++) free(kept_small[i]);
    for (int i = 0; i < KEEP_BIG; i++) free(kept_big[i]);
    for (int i = 0; i < ALIGNED; i++) free(kept_aligned[i]);
    for (int i = 0; i < KEEP_NEW; i++) delete_block(kept_new[i], 128 << 10);
    for (int i = 0; i < FROM_NULL; i++) free(kept_from_null[i]);
    free(grown);
    return 0;
}
