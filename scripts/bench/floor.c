/* The ptrace floor: the least a breakpoint tracer can do per hit. Seizes one single-threaded process and, for
 * each stop, does exactly waitpid + PTRACE_GETREGS + PTRACE_CONT (nothing to repair: the target's int3 is a
 * literal instruction, so rip is already past it). Other signals are passed through.
 * Usage: floor [-r | -p] [-s USEC] [-t MS] [-f K] [-c BYTES] PID
 * Prints "floor: attached to PID" on stderr once seized, and "floor: H hits" when the target exits.
 * The options add one of syscatch's costs at a time, to measure each lever in isolation (bench.sh uses none):
 *   -r       also PTRACE_SETREGS per hit (syscatch writes rip back after emulating the displaced instruction)
 *   -p       instead, PTRACE_POKEUSER of rax and rip (the two registers an emulated `mov %rdi,%rax` changes)
 *   -s USEC  after each CONT, poll waitpid(WNOHANG) for up to USEC microseconds before blocking
 *   -f K     every K hits, read the tracee's last CPU from /proc/PID/stat and move the tracer there
 *            (sched_setaffinity on itself only; the target's affinity is never touched)
 *   -t MS    a SIGALRM interval timer of MS milliseconds, no SA_RESTART (syscatch's tick; waitpid gets EINTR)
 *   -c BYTES what `syscatch --fast` does at a repeating call site instead of GETREGS: one process_vm_readv of the
 *            128 bytes below the stack pointer and up to BYTES of stack above it, asking no more than the second
 *            hit got (GETREGS only at the first hit, for the stack pointer: the target's int3 is always reached at
 *            the same one) */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void on_alarm(int sig) { (void)sig; }

/* Field 39 of /proc/TID/stat: the CPU the thread last ran on. */
static int last_cpu(pid_t tid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", tid);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (!p) return -1;
    int field = 2;
    for (p++; *p && field < 39; p++)
        if (*p == ' ') field++;
    return field == 39 ? atoi(p) : -1;
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
    int setregs = 0, poke = 0, opt;
    long copy = -1; /* -c: bytes of stack per hit instead of GETREGS */
    static char buf[128 + (1 << 17)];
    long spin_us = 0, tick_ms = 0, follow = 0, moves = 0;
    while ((opt = getopt(argc, argv, "rps:t:f:c:")) != -1) {
        switch (opt) {
        case 'r': setregs = 1; break;
        case 'c': copy = 128 + (atol(optarg) < (1 << 17) ? atol(optarg) : (1 << 17)); break;
        case 'p': poke = 1; break;
        case 'f': follow = atol(optarg); break;
        case 's': spin_us = atol(optarg); break;
        case 't': tick_ms = atol(optarg); break;
        default: fprintf(stderr, "usage: floor [-r | -p] [-s USEC] [-t MS] [-f K] [-c BYTES] PID\n"); return 2;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "usage: floor [-r | -p] [-s USEC] [-t MS] [-f K] [-c BYTES] PID\n");
        return 2;
    }
    pid_t pid = atoi(argv[optind]);
    if (tick_ms > 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm;
        sigaction(SIGALRM, &sa, NULL);
        struct itimerval it = {{tick_ms / 1000, (tick_ms % 1000) * 1000}, {tick_ms / 1000, (tick_ms % 1000) * 1000}};
        setitimer(ITIMER_REAL, &it, NULL);
    }
    if (ptrace(PTRACE_SEIZE, pid, 0, 0) != 0) {
        perror("floor: PTRACE_SEIZE");
        return 1;
    }
    fprintf(stderr, "floor: attached to %d\n", pid);
    long hits = 0, spun = 0, eintr = 0;
    struct user_regs_struct regs;
    for (;;) {
        int status;
        pid_t t = 0;
        if (spin_us > 0) {
            long long until = now_ns() + spin_us * 1000;
            while ((t = waitpid(pid, &status, __WALL | WNOHANG)) == 0 && now_ns() < until) {
            }
            if (t > 0) spun++;
        }
        if (t <= 0) t = waitpid(pid, &status, __WALL);
        if (t < 0) {
            if (errno == EINTR) {
                eintr++;
                continue;
            }
            perror("floor: waitpid");
            return 1;
        }
        if (WIFEXITED(status) || WIFSIGNALED(status)) break;
        int sig = WSTOPSIG(status);
        if (sig == SIGTRAP && (status >> 16) == 0) {
            if (copy >= 0 && hits > 0) {
                /* As syscatch: no more than the first copy got (asking past the end of the stack costs more). */
                struct iovec local = {buf, (size_t)copy}, remote = {(void *)(regs.rsp - 128), (size_t)copy};
                ssize_t got = process_vm_readv(t, &local, 1, &remote, 1, 0);
                if (hits == 1 && got > 0) copy = got;
            } else {
                ptrace(PTRACE_GETREGS, t, 0, &regs);
            }
            if (setregs) ptrace(PTRACE_SETREGS, t, 0, &regs);
            if (poke) {
                ptrace(PTRACE_POKEUSER, t, (void *)offsetof(struct user_regs_struct, rax), (void *)regs.rax);
                ptrace(PTRACE_POKEUSER, t, (void *)offsetof(struct user_regs_struct, rip), (void *)regs.rip);
            }
            hits++;
            if (follow > 0 && hits % follow == 1) {
                int cpu = last_cpu(t);
                if (cpu >= 0 && cpu != sched_getcpu()) {
                    cpu_set_t set;
                    CPU_ZERO(&set);
                    CPU_SET(cpu, &set);
                    if (sched_setaffinity(0, sizeof set, &set) == 0) moves++;
                }
            }
            sig = 0;
        } else if ((status >> 16) != 0) {
            sig = 0; /* a ptrace event stop: resume without a signal */
        }
        ptrace(PTRACE_CONT, t, 0, (void *)(long)sig);
    }
    fprintf(stderr, "floor: %ld hits\n", hits);
    if (spin_us > 0 || tick_ms > 0 || follow > 0)
        fprintf(stderr, "floor: %ld stops caught while polling, %ld EINTR, %ld moves\n", spun, eintr, moves);
    return 0;
}
