/* A target whose address space is crowded around libc, as in a process with hundreds of modules: every free gap
 * within 2 GiB (and a little more) of libc's syscall() is filled with PROT_NONE reservations, except one 64 KiB
 * hole about 1.5 GiB below it (and the gap below [stack], where the main stack grows, which nothing may use).
 * Usage: crowded CALLS
 * Prints "pid N" and "hole ADDR LEN", waits for "go", makes CALLS mmaps through syscall(SYS_mmap) (each larger
 * than the hole, so the kernel never puts them there) with a non-matching syscall(SYS_getpid) after each, prints
 * "mmap ADDR LEN" for each, then "done", waits for a line and exits 7. */
#include "common.h"
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define GIB (1ULL << 30)
#define HOLE 0x10000ULL
#define MAX_MAPS 4096

static uint64_t starts[MAX_MAPS], ends[MAX_MAPS];
static int is_stack[MAX_MAPS];

static int read_maps(void) {
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) { perror("maps"); exit(3); }
    char line[512];
    int n = 0;
    while (n < MAX_MAPS && fgets(line, sizeof line, f)) {
        unsigned long long s, e;
        if (sscanf(line, "%llx-%llx", &s, &e) != 2) continue;
        starts[n] = s;
        ends[n] = e;
        is_stack[n] = strstr(line, "[stack]") != NULL;
        n++;
    }
    fclose(f);
    return n;
}

static int free_range(int n, uint64_t lo, uint64_t hi) {
    for (int i = 0; i < n; i++)
        if (starts[i] < hi && ends[i] > lo) return 0;
    return 1;
}

static void reserve(uint64_t lo, uint64_t hi) {
    if (hi <= lo) return;
    void *p = mmap((void *)lo, hi - lo, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
                   -1, 0);
    if (p != (void *)lo) {
        fprintf(stderr, "reserve %llx-%llx failed\n", (unsigned long long)lo, (unsigned long long)hi);
        exit(4);
    }
}

int main(int argc, char **argv) {
    int calls = argc > 1 ? atoi(argv[1]) : 4;
    uint64_t site = (uint64_t)(uintptr_t)&syscall;
    uint64_t lo = (site > 2 * GIB + 0x10000000 ? site - 2 * GIB - 0x4000000 : 0x100000) & ~0xfffULL;
    uint64_t hi = (site + 2 * GIB + 0x4000000) & ~0xfffULL;
    int n = read_maps();
    /* The hole: the first free 64 KiB from 1.5 GiB below downwards. */
    uint64_t hole = 0;
    for (uint64_t d = 3 * GIB / 2; d > GIB && !hole; d -= 0x100000)
        if (site > d && free_range(n, ((site - d) & ~0xffffULL) - 0x1000, ((site - d) & ~0xffffULL) + HOLE + 0x1000))
            hole = (site - d) & ~0xffffULL;
    if (!hole) { fprintf(stderr, "no room for the hole\n"); return 5; }
    /* Fill every gap in [lo, hi) but the hole and the stack's own gap. */
    uint64_t prev = 0;
    for (int i = 0; i <= n; i++) {
        uint64_t next = i < n ? starts[i] : 0x7ffffffff000ULL;
        uint64_t a = prev > lo ? prev : lo, b = next < hi ? next : hi;
        int below_stack = i < n && is_stack[i];
        if (a < b && !below_stack) {
            if (hole >= a && hole + HOLE <= b) {
                reserve(a, hole);
                reserve(hole + HOLE, b);
            } else {
                reserve(a, b);
            }
        }
        if (i < n && ends[i] > prev) prev = ends[i];
    }
    char buf[64];
    say("pid %d\n", getpid());
    say("hole %#llx %llu\n", (unsigned long long)hole, (unsigned long long)HOLE);
    if (!wait_line(buf, sizeof buf)) return 2;
    for (int i = 0; i < calls; i++) {
        size_t len = HOLE * 2 + 4096 * (size_t)i;
        void *p = (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) { perror("mmap"); exit(3); }
        ((char *)p)[0] = 1;
        say("mmap %p %zu\n", p, len);
        syscall(SYS_getpid);
    }
    say("done\n");
    wait_line(buf, sizeof buf);
    return 7;
}
