/* A busy, self-checking target for the torture suite. Prints "pid N", then runs commands read line by line from
 * stdin, answering each with its output and a final "ok".
 *
 * Worker threads hammer libc's syscall() with matching calls (mmap, then write and verify the whole mapping, then
 * munmap) and non-matching ones (getpid, gettid, futex wake), check every result themselves and count each kind;
 * after "heap", a round of the heap's functions too (malloc, realloc, calloc, posix_memalign, free, each block
 * checked).
 * A failed check prints "FAIL ..." on stderr and exits with status 3 at once, so a wrong return value, a lost
 * register or a stray SIGTRAP shows up as a wrong exit status.
 *
 *   heap        from now on each iteration also allocates, checks and frees blocks (malloc, realloc, calloc,
 *               posix_memalign)
 *   start T     start T worker threads (adds to those running)
 *   churn T     a churn thread keeps T short-lived threads alive at a time, each doing a few iterations and exiting
 *   stop        stop and join workers and churn; prints "counts ITER MMAP MUNMAP GETPID GETTID FUTEX CREATED JOINED"
 *               (cumulative since start; a healthy run has ITER == MMAP == ... == FUTEX and CREATED == JOINED)
 *   mmap N      N mmaps through syscall(SYS_mmap), each printed "mmap ADDR LEN" (exact ground truth)
 *   fork N      N fork children; each does one iteration and exits 40 + i % 50; prints "child I status S"
 *               (S: exit status, or 1000 + signal if killed)
 *   spawn N     N posix_spawn of /bin/true (vfork + exec inside glibc); prints "spawn I status S"
 *   vfork N     N vfork children calling syscall(SYS_getpid) then exec of /bin/true; prints "vfork I status S"
 *   storm       a storm thread alternates posix_spawn of /bin/true and fork (the child does one iteration and
 *               exits 40 + i % 50), each child's status checked, until stop
 *   spawned     prints "spawned S forked F": children of the storm thread so far
 *   signals     prints "signals N": real-time signals (SIGRTMIN) handled so far
 *   exec        execs itself with "exec-child" while the workers run; the new image prints "pid N", "execed"
 *   finish      as stop, then exits with status 23
 *   leader-exit the main thread hands the command loop to a new thread and calls pthread_exit: the leader
 *               stays a zombie until the process exits
 *   quit        exits with status 23 at once, workers still running
 */
#include "common.h"
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#define MAX_WORKERS 64

extern char **environ;

struct counts {
    long iter, mmap, munmap, getpid, gettid, futex;
};

static atomic_long total[6];
static atomic_long rt_handled;
static atomic_int running, churning;
static atomic_long churn_created, churn_joined;
static pthread_t workers[MAX_WORKERS], churner;
static int nworkers, has_churner, churn_width;
static int futex_word;
static pthread_t stormer;
static atomic_int storming;
static atomic_long storm_spawned, storm_forked;

static void on_rt(int sig) {
    (void)sig;
    rt_handled++;
}

static void fail(const char *what, long got, long want) {
    fprintf(stderr, "FAIL %s: got %ld, want %ld (thread %d)\n", what, got, want, gettid());
    _exit(3);
}

/* Set by "heap": each iteration also makes a round of the heap's functions. */
static atomic_int heap;

/* malloc, realloc, calloc and posix_memalign, each block checked (under `--malloc` some of them are sampled: their
 * stubs must give every call its block and its bytes back). One block in 64 is large (mmapped by glibc). */
static void heap_round(unsigned seed, unsigned char pat) {
    size_t n = seed % 64 == 0 ? (size_t)256 << 10 : 16 + seed % 3000;
    unsigned char *h = malloc(n);
    if (!h) fail("malloc", 0, (long)n);
    memset(h, pat, n);
    unsigned char *g = realloc(h, 2 * n);
    if (!g) fail("realloc", 0, (long)n);
    for (size_t i = 0; i < n; i += 16)
        if (g[i] != pat) fail("realloc'd bytes", g[i], pat);
    unsigned char *z = calloc(1, n);
    if (!z) fail("calloc", 0, (long)n);
    for (size_t i = 0; i < n; i += 16)
        if (z[i] != 0) fail("calloc'd bytes", z[i], 0);
    void *a = NULL;
    int e = posix_memalign(&a, 64, n);
    if (e != 0 || !a || ((unsigned long)a & 63)) fail("posix_memalign", e, 0);
    free(a);
    free(z);
    free(g);
}

/* One round of calls through syscall(), each result checked, and a round of the heap's functions. */
static void iterate(struct counts *c, unsigned seed) {
    size_t len = 4096 * (size_t)(1 + seed % 4);
    unsigned char *p =
        (unsigned char *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED || ((unsigned long)p & 4095)) fail("mmap", (long)p, 0);
    c->mmap++;
    unsigned char pat = (unsigned char)(seed * 31 + 7);
    memset(p, pat, len);
    for (size_t i = 0; i < len; i += 64)
        if (p[i] != pat) fail("mapped memory", p[i], pat);
    long r = syscall(SYS_munmap, p, len);
    if (r != 0) fail("munmap", r, 0);
    c->munmap++;
    r = syscall(SYS_getpid);
    if (r != getpid()) fail("getpid", r, getpid());
    c->getpid++;
    r = syscall(SYS_gettid);
    if (r != gettid()) fail("gettid", r, gettid());
    c->gettid++;
    r = syscall(SYS_futex, &futex_word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    if (r != 0) fail("futex wake", r, 0);
    c->futex++;
    if (heap) heap_round(seed, pat);
    c->iter++;
}

static void add_counts(const struct counts *c) {
    total[0] += c->iter;
    total[1] += c->mmap;
    total[2] += c->munmap;
    total[3] += c->getpid;
    total[4] += c->gettid;
    total[5] += c->futex;
}

static void *work(void *arg) {
    unsigned seed = (unsigned)(long)arg;
    struct counts c = {0};
    /* At least one iteration, so a worker stopped at once still proves it ran. */
    do iterate(&c, seed++);
    while (running);
    add_counts(&c);
    return NULL;
}

static void *short_lived(void *arg) {
    unsigned seed = (unsigned)(long)arg;
    struct counts c = {0};
    for (int i = 0; i < 3; i++) iterate(&c, seed + (unsigned)i);
    add_counts(&c);
    return NULL;
}

/* Keeps churn_width short-lived threads in flight: threads are born and die all the time. */
static void *churn(void *arg) {
    (void)arg;
    pthread_t ring[64];
    int n = churn_width < 64 ? churn_width : 64;
    long k = 0;
    for (int i = 0; i < n; i++, k++) {
        if (pthread_create(&ring[i], NULL, short_lived, (void *)k)) fail("pthread_create", 0, 0);
        churn_created++;
    }
    for (int i = 0; churning; i = (i + 1) % n, k++) {
        pthread_join(ring[i], NULL);
        churn_joined++;
        if (pthread_create(&ring[i], NULL, short_lived, (void *)k)) fail("pthread_create", 0, 0);
        churn_created++;
    }
    for (int i = 0; i < n; i++) {
        pthread_join(ring[i], NULL);
        churn_joined++;
    }
    return NULL;
}

static int status_of(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 1000 + WTERMSIG(st); }

/* In a function of its own: the vfork child shares this stack frame until it execs. */
static int __attribute__((noinline)) vfork_once(void) {
    pid_t k = vfork();
    if (k == 0) {
        if (syscall(SYS_getpid) != getpid()) _exit(8);
        execl("/bin/true", "true", (char *)NULL);
        _exit(9);
    }
    int st = -1;
    if (k > 0) waitpid(k, &st, 0);
    return status_of(st);
}

/* Children all the time: while a posix_spawn child (CLONE_VFORK) lives, its parent sleeps in the kernel. */
static void *storm(void *arg) {
    (void)arg;
    for (long i = 0; storming; i++) {
        int st = -1;
        if (i % 2 == 0) {
            pid_t k;
            char *args[] = {"true", NULL};
            if (posix_spawn(&k, "/bin/true", NULL, NULL, args, environ)) fail("posix_spawn", 0, 0);
            if (waitpid(k, &st, 0) != k || status_of(st) != 0) fail("spawn status", status_of(st), 0);
            storm_spawned++;
        } else {
            pid_t k = fork();
            if (k == 0) {
                struct counts c = {0};
                iterate(&c, (unsigned)i);
                _exit(40 + (int)(i % 50));
            }
            if (k < 0) fail("fork", k, 0);
            if (waitpid(k, &st, 0) != k || status_of(st) != 40 + (int)(i % 50))
                fail("fork child status", status_of(st), 40 + (int)(i % 50));
            storm_forked++;
        }
    }
    return NULL;
}

static void stop_all(void) {
    if (storming) {
        storming = 0;
        pthread_join(stormer, NULL);
    }
    running = 0;
    for (int i = 0; i < nworkers; i++) pthread_join(workers[i], NULL);
    nworkers = 0;
    if (has_churner) {
        churning = 0;
        pthread_join(churner, NULL);
        has_churner = 0;
    }
    say("counts %ld %ld %ld %ld %ld %ld %ld %ld\n", (long)total[0], (long)total[1], (long)total[2], (long)total[3],
        (long)total[4], (long)total[5], (long)churn_created, (long)churn_joined);
}

static char *self_name;

/* The command loop: in the main thread, or after leader-exit in a thread of its own. */
static void *serve(void *arg) {
    int leader = arg == NULL;
    char line[256];
    while (wait_line(line, sizeof line)) {
        long n = 0;
        char cmd[32] = "";
        sscanf(line, "%31s %ld", cmd, &n);
        if (!strcmp(cmd, "start")) {
            running = 1;
            for (long i = 0; i < n && nworkers < MAX_WORKERS; i++, nworkers++)
                if (pthread_create(&workers[nworkers], NULL, work, (void *)(long)(1000 * (nworkers + 1))))
                    fail("pthread_create", 0, 0);
        } else if (!strcmp(cmd, "churn")) {
            if (!has_churner) {
                churning = 1;
                churn_width = (int)n;
                if (pthread_create(&churner, NULL, churn, NULL)) fail("pthread_create", 0, 0);
                has_churner = 1;
            }
        } else if (!strcmp(cmd, "heap")) {
            heap = 1;
        } else if (!strcmp(cmd, "stop")) {
            stop_all();
        } else if (!strcmp(cmd, "mmap")) {
            for (long i = 0; i < n; i++) {
                size_t len = 4096 * (size_t)(i + 1);
                void *p = (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                                          -1, 0);
                if (p == MAP_FAILED) fail("mmap", -1, 0);
                say("mmap %p %zu\n", p, len);
            }
        } else if (!strcmp(cmd, "fork")) {
            pid_t kids[256];
            for (long i = 0; i < n && i < 256; i++) {
                kids[i] = fork();
                if (kids[i] == 0) {
                    struct counts c = {0};
                    iterate(&c, (unsigned)i);
                    _exit(40 + (int)(i % 50));
                }
            }
            for (long i = 0; i < n && i < 256; i++) {
                int st = -1;
                if (kids[i] > 0) waitpid(kids[i], &st, 0);
                say("child %ld status %d\n", i, kids[i] > 0 ? status_of(st) : -1);
            }
        } else if (!strcmp(cmd, "spawn")) {
            for (long i = 0; i < n; i++) {
                pid_t k;
                char *args[] = {"true", NULL};
                int st = -1;
                if (posix_spawn(&k, "/bin/true", NULL, NULL, args, environ) == 0) waitpid(k, &st, 0);
                say("spawn %ld status %d\n", i, status_of(st));
            }
        } else if (!strcmp(cmd, "vfork")) {
            for (long i = 0; i < n; i++) say("vfork %ld status %d\n", i, vfork_once());
        } else if (!strcmp(cmd, "storm")) {
            if (!storming) {
                storming = 1;
                if (pthread_create(&stormer, NULL, storm, NULL)) fail("pthread_create", 0, 0);
            }
        } else if (!strcmp(cmd, "spawned")) {
            say("spawned %ld forked %ld\n", (long)storm_spawned, (long)storm_forked);
        } else if (!strcmp(cmd, "signals")) {
            say("signals %ld\n", (long)rt_handled);
        } else if (!strcmp(cmd, "exec")) {
            execl("/proc/self/exe", self_name, "exec-child", (char *)NULL);
            say("exec failed\n");
        } else if (!strcmp(cmd, "finish")) {
            stop_all();
            exit(23);
        } else if (!strcmp(cmd, "leader-exit")) {
            if (leader) {
                pthread_t th;
                if (pthread_create(&th, NULL, serve, (void *)1)) fail("pthread_create", 0, 0);
                say("ok\n");
                pthread_exit(NULL);
            }
        } else if (!strcmp(cmd, "quit")) {
            exit(23);
        } else {
            say("unknown %s\n", cmd);
        }
        say("ok\n");
    }
    exit(0);
}

int main(int argc, char **argv) {
    struct sigaction sa = {0};
    sa.sa_handler = on_rt;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGRTMIN, &sa, NULL);
    self_name = argv[0];
    say("pid %d\n", getpid());
    if (argc > 1 && strcmp(argv[1], "exec-child") == 0) say("execed\n");
    serve(NULL);
    return 0;
}
