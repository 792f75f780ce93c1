/* glibc malloc arenas with their own ground truth.
 * Usage: arenas [THREADS [report]]   (report: 1 = print arenas (default), 0 = don't: for other allocators)
 * Prints "pid N"; starts THREADS threads (default 12) that malloc and free blocks of varied sizes at the same
 * time (a barrier releases them together); thread 0 also keeps 80 MiB in 32 KiB blocks, so its arena grows
 * past one 64 MiB heap. Each thread then prints, from glibc's own chunk header, where its blocks live:
 *   "arena T ADDR"   the owning arena of the thread's first block (the first word of its 64 MiB-aligned heap)
 *   "arena T main"   the block is in the main arena (NON_MAIN_ARENA bit clear)
 *   "heap T ADDR"    each distinct heap holding one of the thread's kept non-main blocks
 * then "ready", with every worker thread asleep (blocked) and its blocks kept. Commands on stdin:
 *   "grow"  maps and touches 32 MiB of anonymous memory, prints "grown ADDR"
 *   "spill" every worker frees the blocks it kept, then mallocs and writes 4 MiB in 64 KiB blocks, mallocs one
 *           small block above them and frees the 4 MiB: its arena is mostly free and still resident (what seed
 *           case 001's arenas held); prints "spilled" once all are asleep again
 *   anything else or end of input: the threads are released and the program exits 0. */
#include "common.h"
#include <pthread.h>
#include <stdint.h>
#include <sched.h>
#include <sys/mman.h>

#define HEAP_MAX ((uintptr_t)64 << 20)
#define NON_MAIN_ARENA 0x4
#define KEEP 4096

static int report = 1;
static pthread_barrier_t start, reported;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t release_cv = PTHREAD_COND_INITIALIZER;
static int released, spill, spilled;
static pid_t tids[256];

/* Is thread TID asleep (state S: blocked in a system call)? */
static int asleep(pid_t tid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *e = strrchr(buf, ')');
    return e && e[1] == ' ' && e[2] == 'S';
}

/* The chunk header (size and flags) is the word just before the block. */
static int in_main_arena(void *p) { return !(*(size_t *)((uintptr_t)p - sizeof(size_t)) & NON_MAIN_ARENA); }

static void *worker(void *arg) {
    long id = (long)arg;
    void *kept[KEEP];
    int nkept = 0;
    unsigned seed = (unsigned)id * 2654435761u + 1;
    tids[id] = gettid();
    pthread_barrier_wait(&start);
    void *first = malloc(100);
    kept[nkept++] = first;
    for (int i = 0; i < 3000; i++) {
        seed = seed * 1103515245u + 12345u;
        size_t size = 16 + (seed >> 8) % (i % 3 == 0 ? 60000 : 2000);
        char *p = malloc(size);
        if (!p) { perror("malloc"); exit(3); }
        p[0] = (char)i;
        if (i % 4 == 0 && nkept < KEEP) kept[nkept++] = p;
        else free(p);
    }
    if (id == 0)
        for (int i = 0; i < 2560 && nkept < KEEP; i++) kept[nkept++] = malloc(32 << 10);
    if (report) {
        pthread_mutex_lock(&lock);
        if (in_main_arena(first)) say("arena %ld main\n", id);
        else say("arena %ld %p\n", id, *(void **)((uintptr_t)first & ~(HEAP_MAX - 1)));
        uintptr_t seen[64];
        int nseen = 0;
        for (int i = 0; i < nkept; i++) {
            if (!kept[i] || in_main_arena(kept[i])) continue;
            uintptr_t h = (uintptr_t)kept[i] & ~(HEAP_MAX - 1);
            int dup = 0;
            for (int j = 0; j < nseen; j++) dup |= seen[j] == h;
            if (!dup && nseen < 64) {
                seen[nseen++] = h;
                say("heap %ld %#lx\n", id, (unsigned long)h);
            }
        }
        pthread_mutex_unlock(&lock);
    }
    pthread_barrier_wait(&reported);
    pthread_mutex_lock(&lock);
    int spilt = 0;
    while (!released) {
        if (spill && !spilt) {
            pthread_mutex_unlock(&lock);
            for (int i = 0; i < nkept; i++) free(kept[i]);
            nkept = 0;
            char *blocks[64];
            for (int i = 0; i < 64; i++) {
                blocks[i] = malloc(64 << 10);
                memset(blocks[i], 1, 64 << 10);
            }
            kept[nkept++] = malloc(64); /* above them: the freed 4 MiB cannot be trimmed */
            for (int i = 0; i < 64; i++) free(blocks[i]);
            spilt = 1;
            pthread_mutex_lock(&lock);
            spilled++;
            pthread_cond_broadcast(&release_cv);
            continue;
        }
        pthread_cond_wait(&release_cv, &lock);
    }
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < nkept; i++) free(kept[i]);
    return NULL;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 12;
    if (argc > 2) report = atoi(argv[2]);
    if (threads < 1 || threads > 256) return 2;
    say("pid %d\n", getpid());
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    pthread_barrier_init(&reported, NULL, (unsigned)threads + 1);
    pthread_t t[256];
    for (long i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    pthread_barrier_wait(&reported);
    /* Every worker asleep in pthread_cond_wait before "ready", so each one's stack pointer can be read. */
    for (long i = 0; i < threads; i++)
        while (!asleep(tids[i])) sched_yield();
    say("ready\n");
    char buf[64];
    while (wait_line(buf, sizeof buf) && (strncmp(buf, "grow", 4) == 0 || strncmp(buf, "spill", 5) == 0)) {
        if (buf[0] == 's') {
            pthread_mutex_lock(&lock);
            spill = 1;
            pthread_cond_broadcast(&release_cv);
            while (spilled < threads) pthread_cond_wait(&release_cv, &lock);
            pthread_mutex_unlock(&lock);
            for (long i = 0; i < threads; i++)
                while (!asleep(tids[i])) sched_yield();
            say("spilled\n");
            continue;
        }
        size_t len = (size_t)32 << 20;
        char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) { perror("mmap"); return 3; }
        memset(p, 1, len);
        say("grown %p\n", (void *)p);
    }
    pthread_mutex_lock(&lock);
    released = 1;
    pthread_cond_broadcast(&release_cv);
    pthread_mutex_unlock(&lock);
    for (long i = 0; i < threads; i++) pthread_join(t[i], NULL);
    return 0;
}
