/* Bench target for attach + arm + detach: a process of THREADS threads in all.
 * Usage: threads THREADS idle|busy
 *   idle  every extra thread blocks in pthread_cond_wait
 *   busy  every extra thread spins (never enters the kernel on its own)
 * The main thread starts them all, prints "pid N" once every thread runs, then blocks in read(stdin) until
 * "quit" or end of input, and exits 0 (ending the spinners). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
static pthread_cond_t started_cv = PTHREAD_COND_INITIALIZER;
static int started;
static int busy;
static volatile int stop;

static void *worker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&mu);
    started++;
    pthread_cond_signal(&started_cv);
    if (!busy) {
        for (;;) pthread_cond_wait(&never, &mu);
    }
    pthread_mutex_unlock(&mu);
    while (!stop) {
    }
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    busy = argc > 2 && !strcmp(argv[2], "busy");
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    for (int i = 1; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, &attr, worker, NULL) != 0) {
            perror("pthread_create");
            return 3;
        }
    }
    pthread_mutex_lock(&mu);
    while (started < n - 1) pthread_cond_wait(&started_cv, &mu);
    pthread_mutex_unlock(&mu);
    printf("pid %d\n", getpid());
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (!strncmp(line, "quit", 4)) break;
    }
    stop = 1;
    _exit(0);
}
