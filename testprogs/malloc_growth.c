/* malloc patterns that leave memory with the process, for the allocator rules. Prints "pid N"; then one command:
 *   "keep N"      mallocs N blocks of 64 KiB (below the mmap threshold: from the heap), writes them, frees all
 *                 but the last: the freed memory stays resident below the block still in use;
 *   "tidy N"      the same, then frees the last too: the heap top is trimmed, nothing stays;
 *   "threshold N" mallocs and frees one 4 MiB block first (mmapped, then munmapped by free, which raises glibc's
 *                 dynamic mmap threshold), then as "keep" with N blocks of 4 MiB, which now come from the heap;
 *   "big N"       mallocs N blocks of 1 MiB and keeps them (an allocator's own mappings);
 *   "regrow N"    as "keep" with N blocks of 64 KiB, then malloc_trim(0) (which gives the free pages back with
 *                 madvise), then mallocs and writes N - 1 blocks of 64 KiB again: they reuse the trimmed memory with
 *                 no call; prints "regrown BYTES" (what they wrote).
 * prints "heap START END" (the break before and after the command: what the heap grew by), then "done", waits for
 * a line and exits 0. Built with -DWITH_MALLOC_CONF it sets jemalloc's malloc_conf. */
#include "common.h"
#include <stdlib.h>
#include <unistd.h>
#include <malloc.h>

#ifdef WITH_MALLOC_CONF
/* jemalloc reads its compiled-in options from the program's own `malloc_conf`. */
const char *malloc_conf = "dirty_decay_ms:5000";
#endif

static void fill(char *p, size_t len) {
    for (size_t o = 0; o < len; o += 4096) p[o] = 1;
}

__attribute__((noinline)) static void keep(int n, size_t len, int free_last) {
    char **blocks = calloc((size_t)n, sizeof *blocks);
    for (int i = 0; i < n; i++) {
        blocks[i] = malloc(len);
        fill(blocks[i], len);
    }
    for (int i = 0; i < n - 1; i++) free(blocks[i]);
    if (free_last) free(blocks[n - 1]);
    free(blocks);
}

__attribute__((noinline)) static void regrow(int n, size_t len) {
    char **blocks = calloc((size_t)n, sizeof *blocks);
    for (int i = 0; i < n; i++) {
        blocks[i] = malloc(len);
        fill(blocks[i], len);
    }
    for (int i = 0; i < n - 1; i++) free(blocks[i]);
    malloc_trim(0);
    for (int i = 0; i < n - 1; i++) {
        blocks[i] = malloc(len);
        fill(blocks[i], len);
    }
    say("regrown %zu\n", (size_t)(n - 1) * len);
}

int main(void) {
    char buf[64];
    say("pid %d\n", getpid());
    if (!wait_line(buf, sizeof buf)) return 1;
    char cmd[16] = "";
    int n = 0;
    if (sscanf(buf, "%15s %d", cmd, &n) != 2 || n <= 0) return 2;
    void *start = sbrk(0);
    if (!strcmp(cmd, "keep")) keep(n, 64 << 10, 0);
    else if (!strcmp(cmd, "tidy")) keep(n, 64 << 10, 1);
    else if (!strcmp(cmd, "regrow")) regrow(n, 64 << 10);
    else if (!strcmp(cmd, "threshold")) {
        char *p = malloc(4 << 20);
        fill(p, 4 << 20);
        free(p);
        keep(n, 4 << 20, 0);
    } else if (!strcmp(cmd, "big")) {
        for (int i = 0; i < n; i++) fill(malloc(1 << 20), 1 << 20);
    } else return 2;
    say("heap %p %p\n", start, sbrk(0));
    say("done\n");
    wait_line(buf, sizeof buf);
    return 0;
}
