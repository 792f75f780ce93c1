/* A thread that blocks every signal (as glibc does while a thread exits, and servers do in their workers) maps
 * memory through libc's mmap, where a tracer's trap may stop it. A trap taken with SIGTRAP blocked makes the kernel
 * reset SIGTRAP's action to the default and unblock it in the thread: the thread prints what it sees after the
 * call, from its own view:
 *   mask full|lost     whether SIGTRAP is still blocked in the thread (every other signal it blocked is)
 *   action default|handler   SIGTRAP's action in the process
 * Prints "pid N", waits for "go", works, prints its lines and "done", waits for a line and exits. */
#include "common.h"
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>

static void *worker(void *arg) {
    (void)arg;
    sigset_t all, now;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, NULL);
    for (int i = 0; i < 20; i++) {
        void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) abort();
        munmap(p, 4096);
    }
    pthread_sigmask(SIG_SETMASK, NULL, &now);
    struct sigaction sa;
    sigaction(SIGTRAP, NULL, &sa);
    say("mask %s\n", sigismember(&now, SIGTRAP) && sigismember(&now, SIGINT) ? "full" : "lost");
    say("action %s\n", sa.sa_handler == SIG_DFL ? "default" : "handler");
    return NULL;
}

int main(void) {
    char line[64];
    say("pid %d\n", getpid());
    if (!wait_line(line, sizeof line)) return 1;
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    say("done\n");
    wait_line(line, sizeof line);
    return 0;
}
