/* A multi-threaded target that maps memory through syscall(SYS_mmap) and prints what it got back.
 * Usage: mmap_threads THREADS CALLS_PER_THREAD
 * Prints "pid N", waits for "go", starts THREADS threads (so every thread is created after attach), each making
 * CALLS mmaps of distinct lengths through syscall() plus non-matching calls (getpid and futex through syscall(),
 * a plain glibc mmap); prints "mmap ADDR LEN" for each, then "done", waits for a line and exits 7. */
#include "common.h"
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <linux/futex.h>

static int calls;

static void *worker(void *arg) {
    long id = (long)arg;
    int word = 0;
    for (int i = 0; i < calls; i++) {
        size_t len = 4096 * (size_t)(1 + id * 1000 + i);
        void *p = (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) { perror("mmap"); exit(3); }
        ((char *)p)[0] = 1;
        say("mmap %p %zu\n", p, len);
        syscall(SYS_getpid);
        syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
        void *q = mmap(NULL, 8192, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        munmap(q, 8192);
    }
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    calls = argc > 2 ? atoi(argv[2]) : 3;
    char buf[64];
    say("pid %d\n", getpid());
    if (!wait_line(buf, sizeof buf)) return 2;
    pthread_t t[256];
    for (long i = 0; i < threads && i < 256; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    for (long i = 0; i < threads && i < 256; i++) pthread_join(t[i], NULL);
    say("done\n");
    wait_line(buf, sizeof buf);
    return 7;
}
