/* A malloc-heavy loop for the bench's heap rows (scripts/bench/heap.sh): THREADS threads (default 2) each keep a
 * window of 64 blocks of 16 to 527 bytes, freeing one and allocating its replacement at each step (glibc's tcache
 * path: a few ns a call). Prints "pid N"; on each line "rate SECONDS" it counts the steps all threads finish in that
 * time on its own monotonic clock and prints "rate STEPS_PER_S syscalls 0"; "quit" or end of input exits. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long steps[64 * 8];
static int threads;

static void *work(void *arg) {
    long id = (long)arg;
    void *window[64] = {0};
    unsigned x = 12345u + (unsigned)id;
    for (;;) {
        x = x * 1103515245u + 12345u;
        unsigned k = (x >> 8) & 63;
        free(window[k]);
        window[k] = malloc(16 + ((x >> 16) & 511));
        ((volatile char *)window[k])[0] = 1;
        steps[id * 8]++;
    }
    return NULL;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static unsigned long total(void) {
    unsigned long s = 0;
    for (int i = 0; i < threads; i++) s += steps[i * 8];
    return s;
}

int main(int argc, char **argv) {
    threads = argc > 1 ? atoi(argv[1]) : 2;
    if (threads < 1 || threads > 64) return 2;
    printf("pid %d\n", getpid());
    fflush(stdout);
    for (long i = 0; i < threads; i++) {
        pthread_t t;
        pthread_create(&t, NULL, work, (void *)i);
    }
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        double secs;
        if (sscanf(line, "rate %lf", &secs) != 1) break;
        unsigned long a = total();
        double t0 = now();
        usleep((useconds_t)(secs * 1e6));
        unsigned long b = total();
        printf("rate %.0f syscalls 0\n", (double)(b - a) / (now() - t0));
        fflush(stdout);
    }
    return 0;
}
