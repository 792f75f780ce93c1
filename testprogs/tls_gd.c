/* Where a shared library's thread-local variable is, as seen by syscatch from outside (src/live/pystate.rs): links
 * testprogs/tls_gd_lib.c, sets the variable in its main thread and in a second thread, and prints "pid N", then
 * "main TP ADDR" and "thread TP ADDR" (each thread's thread pointer, pthread_self(), and its variable's address:
 * the ground truth; the two lines in either order); both threads wait until end of input, and it exits 0. */
#include "common.h"
#include <pthread.h>

void *tls_gd_get(void);
void **tls_gd_addr(void);

static int pipefd[2];

static void *second(void *arg) {
    (void)arg;
    *tls_gd_addr() = (void *)0x5eC0D;
    say("thread %#lx %p\n", (unsigned long)pthread_self(), (void *)tls_gd_addr());
    char c;
    (void)!read(pipefd[0], &c, 1);
    return NULL;
}

int main(void) {
    char buf[64];
    if (pipe(pipefd) != 0) return 2;
    say("pid %d\n", getpid());
    *tls_gd_addr() = (void *)0x1a1a;
    say("main %#lx %p\n", (unsigned long)pthread_self(), (void *)tls_gd_addr());
    pthread_t t;
    if (pthread_create(&t, NULL, second, NULL) != 0) return 3;
    while (wait_line(buf, sizeof buf)) {
    }
    close(pipefd[1]);
    pthread_join(t, NULL);
    return tls_gd_get() == (void *)0x1a1a ? 0 : 4;
}
