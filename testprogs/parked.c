/* A target parked in known functions for the gdb oracle: the main thread blocks in read(0) under m_outer ->
 * m_middle -> m_inner, a second thread blocks in read() of a pipe nobody writes under t_outer -> t_middle ->
 * t_inner. Prints "pid N", "thread TID" of the second thread, "parked", then waits for a line on stdin (the
 * read the main thread is parked in) and exits 0. The harness checks /proc/PID/task/TID/syscall to know both
 * threads sit in their read. */
#include "common.h"
#include <pthread.h>
#include <sys/syscall.h>

#define NOI __attribute__((noinline, noipa))

static int pipefd[2];
static volatile int sink;

NOI long t_inner(void) { char c; long n = read(pipefd[0], &c, 1); sink++; return n; }
NOI long t_middle(void) { long n = t_inner(); sink++; return n; }
NOI long t_outer(void) { long n = t_middle(); sink++; return n; }

static void *thread_main(void *arg) {
    (void)arg;
    say("thread %ld\n", (long)syscall(SYS_gettid));
    t_outer();
    return NULL;
}

/* One byte at a time up to the newline: the harness's line may arrive in pieces. */
NOI long m_inner(void) {
    char c = 0;
    long n;
    while ((n = read(0, &c, 1)) == 1 && c != '\n') sink++;
    return n;
}
NOI long m_middle(void) { long n = m_inner(); sink++; return n; }
NOI long m_outer(void) { long n = m_middle(); sink++; return n; }

int main(void) {
    say("pid %d\n", getpid());
    if (pipe(pipefd)) return 3;
    pthread_t t;
    pthread_create(&t, NULL, thread_main, NULL);
    say("parked %d\n", pipefd[0]);
    m_outer();
    return 0;
}
