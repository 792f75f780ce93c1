/* The ptrace floor: the least a breakpoint tracer can do per hit. Seizes one single-threaded process and, for
 * each stop, does exactly waitpid + PTRACE_GETREGS + PTRACE_CONT (nothing to repair: the target's int3 is a
 * literal instruction, so rip is already past it). Other signals are passed through.
 * Usage: floor PID. Prints "floor: attached to PID" on stderr once seized, and "floor: H hits" when the target
 * exits. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: floor PID\n");
        return 2;
    }
    pid_t pid = atoi(argv[1]);
    if (ptrace(PTRACE_SEIZE, pid, 0, 0) != 0) {
        perror("floor: PTRACE_SEIZE");
        return 1;
    }
    fprintf(stderr, "floor: attached to %d\n", pid);
    long hits = 0;
    struct user_regs_struct regs;
    for (;;) {
        int status;
        pid_t t = waitpid(pid, &status, __WALL);
        if (t < 0) {
            if (errno == EINTR) continue;
            perror("floor: waitpid");
            return 1;
        }
        if (WIFEXITED(status) || WIFSIGNALED(status)) break;
        int sig = WSTOPSIG(status);
        if (sig == SIGTRAP && (status >> 16) == 0) {
            ptrace(PTRACE_GETREGS, t, 0, &regs);
            hits++;
            sig = 0;
        } else if ((status >> 16) != 0) {
            sig = 0; /* a ptrace event stop: resume without a signal */
        }
        ptrace(PTRACE_CONT, t, 0, (void *)(long)sig);
    }
    fprintf(stderr, "floor: %ld hits\n", hits);
    return 0;
}
