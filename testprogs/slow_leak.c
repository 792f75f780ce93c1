/* A server-like tree for `watch`: the parent forks three children and each does one thing on its own clock.
 *   leaker   maps BYTES (argv[1], default 1 MiB) every PERIOD ms (argv[2], default 2000) through a raw-mmap pool
 *            (pool_grow: syscall(SYS_mmap), every page touched, never unmapped), amid churn;
 *   churner  only churns: CHURN MB a second (argv[3], default 50) of 1 MiB temporaries, mapped, touched, unmapped;
 *   idle     nothing.
 * Each child names itself (comm) by its role. Prints "pid P", "leaker PID BYTES PERIOD", "churner PID", "idle PID", then "ready". Its ground truth is its
 * clock: the leaker's deadlines are absolute, so it grows by exactly BYTES per PERIOD. Everyone ends when stdin
 * closes (the children share it). */
#include "common.h"
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#define TEMP (1 << 20)
#define TICK_MS 20

static long long now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *raw_mmap(size_t len) {
    void *p = (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) _exit(1);
    return p;
}

__attribute__((noinline)) static void pool_grow(size_t bytes) {
    char *p = raw_mmap(bytes);
    memset(p, 0x5a, bytes);
}

__attribute__((noinline)) static void churn_once(void) {
    char *p = raw_mmap(TEMP);
    memset(p, 0x33, TEMP);
    syscall(SYS_munmap, p, TEMP);
}

/* Waits until `deadline` (ms), or exits once stdin is closed. */
static void wait_until(long long deadline) {
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0) return;
        struct pollfd pfd = {.fd = 0, .events = POLLIN};
        if (poll(&pfd, 1, (int)left) > 0) {
            char buf[64];
            if (read(0, buf, sizeof buf) <= 0) _exit(0);
        }
    }
}

/* leak: bytes every period ms (0: none); churn: MB a second (0: none). */
static void live(size_t leak, long long period, long long churn) {
    long long start = now_ms(), next_leak = start + period;
    double temps = 0;
    for (long long tick = start + TICK_MS;; tick += TICK_MS) {
        wait_until(tick);
        if (leak && now_ms() >= next_leak) {
            pool_grow(leak);
            next_leak += period;
        }
        /* CHURN MB a second, spread over the ticks. */
        for (temps += (double)churn * TICK_MS / 1000.0; temps >= 1; temps--) churn_once();
    }
}

int main(int argc, char **argv) {
    size_t leak = argc > 1 ? strtoull(argv[1], NULL, 0) : 1 << 20;
    long long period = argc > 2 ? atoll(argv[2]) : 2000;
    long long churn = argc > 3 ? atoll(argv[3]) : 50;
    say("pid %d\n", getpid());
    const char *roles[] = {"leaker", "churner", "idle"};
    pid_t kids[3];
    for (int i = 0; i < 3; i++) {
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) {
            prctl(PR_SET_NAME, roles[i]);
            if (i == 0) live(leak, period, churn);
            if (i == 1) live(0, 0, churn);
            wait_until(1LL << 62);
        }
        kids[i] = pid;
        if (i == 0)
            say("leaker %d %zu %lld\n", pid, leak, period);
        else
            say("%s %d\n", roles[i], pid);
    }
    say("ready\n");
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    for (int i = 0; i < 3; i++) kill(kids[i], SIGKILL);
    while (wait(NULL) > 0) {
    }
    return 0;
}
