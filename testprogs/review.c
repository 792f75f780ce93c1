/* Targets for the adversarial review (tests/it/review.rs). Prints "pid N", then runs commands from stdin:
 *   blockread       a thread blocks in syscall(SYS_read) on an empty pipe; prints "reader TID"
 *   feed            writes one byte into that pipe; the reader prints "read RET" when its call returns
 *   handler         installs an SA_RESTART SIGUSR1 handler that writes "handled" when it runs
 *   forkraw         syscall(SYS_fork); the child _exit(7)s; prints "child exited 7" or "child killed SIG"
 *   mmaps N         N syscall(SYS_mmap)+munmap pairs; prints "mapped N"
 *   mix N           thread A calls syscall(SYS_getppid) N times while thread B calls slowfn() N times
 *                   (its first instruction, `test %rdi,%rdi`, is not emulated); prints "mixed"
 *   forkret N       thread B calls callit() (-> retfn) in a loop while the main thread forks N children that
 *                   each call callit() once; prints "forks N killed K"
 *   selftrap        installs a SIGTRAP handler (writes "trapped") and sends itself SIGTRAP through
 *                   syscall(SYS_tgkill)
 * Every command ends with "ok". */
#include "common.h"
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>

static int pipefd[2];

static void *reader(void *arg) {
    (void)arg;
    char b;
    say("reader %ld\n", (long)syscall(SYS_gettid));
    long r = syscall(SYS_read, pipefd[0], &b, 1);
    say("read %ld\n", r);
    return NULL;
}

static void on_usr1(int sig) {
    (void)sig;
    static const char m[] = "handled\n";
    write(1, m, sizeof m - 1);
}

static void on_trap(int sig) {
    (void)sig;
    static const char m[] = "trapped\n";
    write(1, m, sizeof m - 1);
}

/* Its first instruction is `test %rdi,%rdi`: a breakpoint here is stepped with every other thread stopped. */
__asm__(".text\n.globl slowfn\n.type slowfn,@function\nslowfn:\n"
        "  test %rdi,%rdi\n  mov %rdi,%rax\n  ret\n.size slowfn, .-slowfn\n");
long slowfn(long);

static atomic_int stop_b;
static long mix_n;

static void *mix_a(void *arg) {
    (void)arg;
    for (long i = 0; i < mix_n; i++) syscall(SYS_getppid);
    return NULL;
}

static void *mix_b(void *arg) {
    (void)arg;
    for (long i = 0; i < mix_n; i++) slowfn(i);
    return NULL;
}

__attribute__((noinline)) long retfn(long x) {
    __asm__ volatile("" ::: "memory");
    return x + 1;
}
__attribute__((noinline)) long callit(long x) { return retfn(x) * 2; }

static void *ret_b(void *arg) {
    (void)arg;
    long i = 0;
    while (!stop_b) callit(i++);
    return NULL;
}

int main(void) {
    say("pid %d\n", getpid());
    if (pipe(pipefd)) return 1;
    char line[128];
    pthread_t rt = 0;
    while (wait_line(line, sizeof line)) {
        char cmd[32] = "";
        long a = 0;
        sscanf(line, "%31s %ld", cmd, &a);
        if (!strcmp(cmd, "blockread")) {
            pthread_create(&rt, NULL, reader, NULL);
        } else if (!strcmp(cmd, "feed")) {
            if (write(pipefd[1], "x", 1) != 1) return 1;
            pthread_join(rt, NULL);
        } else if (!strcmp(cmd, "handler")) {
            struct sigaction sa;
            memset(&sa, 0, sizeof sa);
            sa.sa_handler = on_usr1;
            sa.sa_flags = SA_RESTART;
            sigaction(SIGUSR1, &sa, NULL);
        } else if (!strcmp(cmd, "selftrap")) {
            signal(SIGTRAP, on_trap);
            syscall(SYS_tgkill, getpid(), (pid_t)syscall(SYS_gettid), SIGTRAP);
        } else if (!strcmp(cmd, "forkraw")) {
            long pid = syscall(SYS_fork);
            if (pid == 0) _exit(7);
            int st = 0;
            waitpid((pid_t)pid, &st, 0);
            if (WIFEXITED(st)) say("child exited %d\n", WEXITSTATUS(st));
            else say("child killed %d\n", WIFSIGNALED(st) ? WTERMSIG(st) : -1);
        } else if (!strcmp(cmd, "mmaps")) {
            for (long i = 0; i < a; i++) {
                void *p = (void *)syscall(SYS_mmap, NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                syscall(SYS_munmap, p, 4096);
            }
            say("mapped %ld\n", a);
        } else if (!strcmp(cmd, "mix")) {
            pthread_t ta, tb;
            mix_n = a;
            pthread_create(&ta, NULL, mix_a, NULL);
            pthread_create(&tb, NULL, mix_b, NULL);
            pthread_join(ta, NULL);
            pthread_join(tb, NULL);
            say("mixed\n");
        } else if (!strcmp(cmd, "forkret")) {
            pthread_t tb;
            stop_b = 0;
            pthread_create(&tb, NULL, ret_b, NULL);
            long killed = 0;
            for (long i = 0; i < a; i++) {
                pid_t c = fork();
                if (c == 0) _exit(callit(i) == 2 * (i + 1) ? 0 : 3);
                int st = 0;
                waitpid(c, &st, 0);
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) killed++;
            }
            stop_b = 1;
            pthread_join(tb, NULL);
            say("forks %ld killed %ld\n", a, killed);
        }
        say("ok\n");
    }
    return 0;
}
