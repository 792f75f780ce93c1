/* Short threads one after another, each unmapping one page through syscall(SYS_munmap): glibc hands each the
 * cached stack, and so the fs base, of the one before, which is how `--fast`'s ring names a thread. Two busy
 * threads map and unmap meanwhile, so the ring is read late and in pieces.
 * Usage: ring_threads N
 * Prints "pid N", waits for "go", maps N pages (libc mmap), runs the busy threads and N short threads in turn
 * (each joined before the next), stops the busy ones, prints "unmap ADDR TID" for each page, then "done", waits
 * for a line and exits 0. */
#include "common.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>

struct page { uint64_t addr; pid_t tid; };
static atomic_int stop;

static void *short_one(void *arg) {
    struct page *p = arg;
    p->tid = (pid_t)syscall(SYS_gettid);
    syscall(SYS_munmap, p->addr, 4096);
    return NULL;
}

static void *busy(void *arg) {
    (void)arg;
    while (!stop) {
        long m = syscall(SYS_mmap, 0, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        syscall(SYS_munmap, m, 8192);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: ring_threads N\n"); return 2; }
    int n = atoi(argv[1]);
    say("pid %d\n", getpid());
    char line[64];
    if (!wait_line(line, sizeof line)) return 1;
    struct page *pages = calloc((size_t)n, sizeof *pages);
    for (int i = 0; i < n; i++)
        pages[i].addr = (uint64_t)mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    pthread_t b[2];
    for (int i = 0; i < 2; i++) pthread_create(&b[i], NULL, busy, NULL);
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, short_one, &pages[i])) { perror("pthread_create"); return 3; }
        pthread_join(t, NULL);
    }
    stop = 1;
    for (int i = 0; i < 2; i++) pthread_join(b[i], NULL);
    for (int i = 0; i < n; i++) printf("unmap 0x%llx %d\n", (unsigned long long)pages[i].addr, pages[i].tid);
    say("done\n");
    wait_line(line, sizeof line);
    return 0;
}
