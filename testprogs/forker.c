/* A single-threaded target that does nothing but fork: whenever a tracer stops it, it is most likely inside
 * fork(), at the kernel's fork event (the system call not finished). Every result is checked: fork() must return a
 * child pid (children exit at once and are reaped by the kernel, SIGCHLD being ignored).
 *
 * Prints "pid PID", then forks until a line arrives on stdin; then prints "forks N failed F" and exits 0 (3 if a
 * fork failed, after printing which errno). */
#include "common.h"
#include <errno.h>
#include <poll.h>
#include <signal.h>

int main(void) {
    signal(SIGCHLD, SIG_IGN);
    say("pid %d\n", getpid());
    long forks = 0, failed = 0;
    struct pollfd in = {.fd = 0, .events = POLLIN};
    for (;;) {
        pid_t p = fork();
        if (p == 0) _exit(0);
        if (p < 0) {
            failed++;
            fprintf(stderr, "FAIL fork: errno %d (%s)\n", errno, strerror(errno));
        } else {
            forks++;
        }
        if (poll(&in, 1, 0) > 0) break;
    }
    say("forks %ld failed %ld\n", forks, failed);
    return failed ? 3 : 0;
}
