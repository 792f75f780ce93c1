/* Prints its own pid, then "zombie PID" for a child that has exited and is never reaped, then waits on stdin. */
#include "common.h"
#include <signal.h>

int main(void) {
    char buf[16];
    say("pid %d\n", getpid());
    pid_t k = fork();
    if (k == 0) _exit(0);
    /* The child is a zombie once it has exited; /proc shows state Z. */
    say("zombie %d\n", k);
    wait_line(buf, sizeof buf);
    return 0;
}
