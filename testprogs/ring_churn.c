/* Mapping churn for --fast's ring: threads that map and unmap through syscall(), reusing addresses, so the order
 * of the calls decides what is mapped at the end; and one burst of unmaps larger than the ring.
 * Usage: ring_churn THREADS CALLS BURST [libc]
 * Prints "pid N", waits for "go", starts THREADS threads (created after attach), each making CALLS rounds of
 * syscall(SYS_mmap) of a few pages then syscall(SYS_munmap) of it, except every third, which stays mapped (with a
 * non-matching syscall(SYS_getpid) between); the first thread then maps BURST single pages and unmaps them all
 * in a tight loop. With "libc", the calls are libc's mmap() and munmap() instead. Once all are joined, prints each thread's calls in its own order as
 * "call TID mmap|munmap ADDR LEN RET" (RET in hex), then "done", waits for a line and exits 0. */
#include "common.h"
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>

struct call { int munmap; uint64_t addr, len, ret; };
struct worker { pthread_t th; long id; pid_t tid; int n; struct call *calls; };

static int rounds, burst, use_libc;

static void record(struct worker *w, int munmap, uint64_t addr, uint64_t len, uint64_t ret) {
    w->calls[w->n++] = (struct call){ munmap, addr, len, ret };
}

static uint64_t map(struct worker *w, uint64_t len) {
    long p = use_libc ? (long)mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                      : syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == -1) { perror("mmap"); exit(3); }
    record(w, 0, (uint64_t)p, len, (uint64_t)p);
    return (uint64_t)p;
}

static void unmap(struct worker *w, uint64_t addr, uint64_t len) {
    long r = use_libc ? munmap((void *)addr, len) : syscall(SYS_munmap, addr, len);
    record(w, 1, addr, len, (uint64_t)r);
}

static void *run(void *arg) {
    struct worker *w = arg;
    w->tid = (pid_t)syscall(SYS_gettid);
    for (int i = 0; i < rounds; i++) {
        uint64_t len = 4096 * (uint64_t)(1 + (i + w->id) % 4);
        uint64_t p = map(w, len);
        syscall(SYS_getpid);
        if (i % 3 != 2) unmap(w, p, len);
    }
    if (w->id == 0 && burst > 0) {
        uint64_t *pages = calloc((size_t)burst, sizeof *pages);
        for (int i = 0; i < burst; i++) pages[i] = map(w, 4096);
        for (int i = 0; i < burst; i++) unmap(w, pages[i], 4096);
        free(pages);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) { fprintf(stderr, "usage: ring_churn THREADS CALLS BURST [libc]\n"); return 2; }
    use_libc = argc == 5 && strcmp(argv[4], "libc") == 0;
    int threads = atoi(argv[1]);
    rounds = atoi(argv[2]);
    burst = atoi(argv[3]);
    say("pid %d\n", getpid());
    char line[64];
    if (!wait_line(line, sizeof line)) return 1;
    struct worker *ws = calloc((size_t)threads, sizeof *ws);
    for (int i = 0; i < threads; i++) {
        ws[i].id = i;
        ws[i].calls = calloc((size_t)(2 * rounds + 2 * burst + 2), sizeof(struct call));
        if (pthread_create(&ws[i].th, NULL, run, &ws[i])) { perror("pthread_create"); return 3; }
    }
    for (int i = 0; i < threads; i++) pthread_join(ws[i].th, NULL);
    for (int i = 0; i < threads; i++)
        for (int j = 0; j < ws[i].n; j++) {
            struct call *c = &ws[i].calls[j];
            printf("call %d %s 0x%llx %llu 0x%llx\n", ws[i].tid, c->munmap ? "munmap" : "mmap",
                   (unsigned long long)c->addr, (unsigned long long)c->len, (unsigned long long)c->ret);
        }
    say("done\n");
    wait_line(line, sizeof line);
    return 0;
}
