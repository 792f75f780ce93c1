/* A scriptable target: prints "pid N", then runs commands read line by line from stdin, answering each with its
 * ground truth and a final "ok". Commands:
 *   mmap N          N mmaps through syscall(SYS_mmap), each printed as "mmap ADDR LEN", plus non-matching calls
 *   fork N          N fork children, each calling syscall(SYS_mmap) and syscall(SYS_getpid), exiting 40+i;
 *                   prints "child I status S" (S: the exit status, or 1000+signal if killed)
 *   vfork           vfork; the child calls syscall(SYS_getpid) and execs /bin/true; prints "vfork status S"
 *   spawn N         N posix_spawn of /bin/true (vfork + exec inside glibc); prints "spawn I status S"
 *   spin T          start T threads hammering syscall(getpid) and syscall(mmap)+munmap until "stop"
 *   stop            stop the spinning threads; prints "spun CALLS MMAPS" (their own counts, checked)
 *   signals         prints "signals RT USR1" (handled counts)
 *   exec            execs itself with "exec-child"; the new image prints "pid N" and "execed", then runs commands
 *   exit N          exits with status N
 * Arm the "signals" counters with SIGRTMIN and SIGUSR1 from outside at any time. */
#include "common.h"
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>

extern char **environ;
static atomic_long rt_count, usr1_count;
static atomic_int spinning;
static atomic_long spun_calls, spun_mmaps;
static pthread_t spinners[64];
static int nspin;

static void on_rt(int sig) { (void)sig; rt_count++; }
static void on_usr1(int sig) { (void)sig; usr1_count++; }

static int status_of(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st); }

static void *spin(void *arg) {
    (void)arg;
    while (spinning) {
        syscall(SYS_getpid);
        spun_calls++;
        char *p = (char *)syscall(SYS_mmap, NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) { perror("spin mmap"); _exit(3); }
        p[0] = 42;
        if (p[0] != 42) _exit(4);
        syscall(SYS_munmap, p, 4096);
        spun_mmaps++;
    }
    return NULL;
}

int main(int argc, char **argv) {
    struct sigaction sa = {0};
    sa.sa_handler = on_rt;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGRTMIN, &sa, NULL);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    say("pid %d\n", getpid());
    if (argc > 1 && strcmp(argv[1], "exec-child") == 0) say("execed\n");
    char line[256];
    while (wait_line(line, sizeof line)) {
        long n = 0;
        char cmd[32] = "";
        sscanf(line, "%31s %ld", cmd, &n);
        if (!strcmp(cmd, "mmap")) {
            for (long i = 0; i < n; i++) {
                size_t len = 4096 * (size_t)(i + 1);
                void *p = (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                syscall(SYS_getpid);
                say("mmap %p %zu\n", p, len);
            }
        } else if (!strcmp(cmd, "fork")) {
            pid_t kids[256];
            for (long i = 0; i < n && i < 256; i++) {
                kids[i] = fork();
                if (kids[i] == 0) {
                    void *p = (void *)syscall(SYS_mmap, NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                    syscall(SYS_getpid);
                    _exit(p == MAP_FAILED ? 1 : 40 + (int)i);
                }
            }
            for (long i = 0; i < n && i < 256; i++) {
                int st;
                waitpid(kids[i], &st, 0);
                say("child %ld status %d\n", i, status_of(st));
            }
        } else if (!strcmp(cmd, "vfork")) {
            pid_t k = vfork();
            if (k == 0) {
                syscall(SYS_getpid);
                execl("/bin/true", "true", (char *)NULL);
                _exit(9);
            }
            int st;
            waitpid(k, &st, 0);
            say("vfork status %d\n", status_of(st));
        } else if (!strcmp(cmd, "spawn")) {
            for (long i = 0; i < n; i++) {
                pid_t k;
                char *args[] = {"true", NULL};
                int st = -1;
                if (posix_spawn(&k, "/bin/true", NULL, NULL, args, environ) == 0) waitpid(k, &st, 0);
                say("spawn %ld status %d\n", i, status_of(st));
            }
        } else if (!strcmp(cmd, "spin")) {
            spinning = 1;
            for (nspin = 0; nspin < n && nspin < 64; nspin++) pthread_create(&spinners[nspin], NULL, spin, NULL);
        } else if (!strcmp(cmd, "stop")) {
            spinning = 0;
            for (int i = 0; i < nspin; i++) pthread_join(spinners[i], NULL);
            nspin = 0;
            say("spun %ld %ld\n", (long)spun_calls, (long)spun_mmaps);
        } else if (!strcmp(cmd, "signals")) {
            say("signals %ld %ld\n", (long)rt_count, (long)usr1_count);
        } else if (!strcmp(cmd, "exec")) {
            execl("/proc/self/exe", argv[0], "exec-child", (char *)NULL);
            say("exec failed\n");
        } else if (!strcmp(cmd, "exit")) {
            exit((int)n);
        } else {
            say("unknown %s\n", cmd);
        }
        say("ok\n");
    }
    return 0;
}
