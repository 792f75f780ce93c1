/* A small process tree: prints "pid P", "thread TID" (a second thread of the parent), then forks N children (argv[1],
 * default 3); child i maps (i+1) MiB anonymous, touches every page and prints "child PID BYTES". With argv[2] =
 * "zombie", one more child exits at once and is never reaped ("zombie PID"). Then "ready", and everyone waits for
 * stdin to close: the children read the same stdin, so they end with the parent. */
#include "common.h"
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>

static int ready_pipe[2];

static void *idle(void *arg) {
    (void)arg;
    say("thread %ld\n", (long)syscall(SYS_gettid));
    if (write(ready_pipe[1], "t", 1) != 1) _exit(1);
    for (;;) pause();
    return NULL;
}

static void child(int i) {
    size_t len = (size_t)(i + 1) << 20;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) _exit(1);
    memset(p, 0x5a, len);
    say("child %d %zu\n", getpid(), len);
    if (write(ready_pipe[1], "c", 1) != 1) _exit(1);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    _exit(0);
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 3;
    int zombie = argc > 2 && strcmp(argv[2], "zombie") == 0;
    say("pid %d\n", getpid());
    if (pipe(ready_pipe) != 0) return 1;
    pid_t kids[64];
    for (int i = 0; i < n && i < 64; i++) {
        kids[i] = fork();
        if (kids[i] == 0) child(i);
    }
    for (int i = 0; i < n; i++) {
        char c;
        if (read(ready_pipe[0], &c, 1) != 1) return 1;
    }
    if (zombie) {
        pid_t z = fork();
        if (z == 0) _exit(0);
        /* Exited (state Z in /proc) once waitid with WNOWAIT sees it; it stays unreaped. */
        siginfo_t si;
        waitid(P_PID, (id_t)z, &si, WEXITED | WNOWAIT);
        say("zombie %d\n", z);
    }
    pthread_t t;
    pthread_create(&t, NULL, idle, NULL);
    char buf[64];
    /* The thread says its tid before "ready". */
    if (read(ready_pipe[0], buf, 1) != 1) return 1;
    say("ready\n");
    while (wait_line(buf, sizeof buf)) {
    }
    for (int i = 0; i < n; i++) kill(kids[i], SIGTERM);
    while (wait(NULL) > 0) {
    }
    return 0;
}
