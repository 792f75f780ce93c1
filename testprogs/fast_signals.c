/* Matching calls from two call sites at different stack depths, and from a signal handler that interrupts them,
 * with SIGTRAPs sent to the same thread meanwhile: for `--fast`, whose events are read at the stack pointer of the
 * thread's last event. The length mapped names the caller: site_a maps 1 page, site_b 2 (from a deeper frame),
 * handler_inner 3 (in a SIGUSR1 handler).
 * Prints "pid N"; on "go N" the main thread makes at least N calls (site_b every fourth, in bursts of four) while
 * a second thread sends it SIGUSR1 and SIGTRAP, K of each, one at a time: the next goes only once the handler has
 * counted the last (so none is merged with one pending; a SIGTRAP waits at most a second). With the argument
 * "notrap", no SIGTRAP (nor a handler for it). Then prints "mmap ADDR LEN" for every call, "signals SENT_USR1
 * GOT_USR1 SENT_TRAP GOT_TRAP" and "done", and exits 0 on the next line. */
#include "common.h"
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>

#define NOI __attribute__((noinline, noipa))
#define MAX_CALLS 20000
#define MAX_HANDLER 4096
#define K 100

static void *addr[MAX_CALLS];
static long lens[MAX_CALLS];
static _Atomic long calls;
static void *in_handler[MAX_HANDLER];
static _Atomic long handled_usr1, handled_trap, sent_usr1, sent_trap;
static _Atomic int sender_done;
static pid_t main_tid;
static int traps = 1;

static inline __attribute__((always_inline)) void *map(long len) {
    return (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

NOI void *handler_inner(void) { return map(3 * 4096); }

static void on_usr1(int sig) {
    (void)sig;
    long i = atomic_load(&handled_usr1);
    void *p = handler_inner();
    if (i < MAX_HANDLER) in_handler[i] = p;
    atomic_store(&handled_usr1, i + 1);
}

static void on_trap(int sig) {
    (void)sig;
    atomic_fetch_add(&handled_trap, 1);
}

NOI void *site_a(void) { return map(4096); }

NOI void *site_b_inner(volatile char *pad) {
    pad[0] = 1;
    return map(2 * 4096);
}

NOI void *site_b(void) {
    volatile char pad[512];
    return site_b_inner(pad);
}

/* Waits (at most 1 s) until *handled reaches want; 0 if it did not (a signal lost, or merged by the kernel). */
static int await(_Atomic long *handled, long want) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (atomic_load(handled) < want) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > 1000000000L) return 0;
    }
    return 1;
}

static void *sender(void *arg) {
    (void)arg;
    struct timespec gap = {0, 30000};
    for (int i = 0; i < K; i++) {
        nanosleep(&gap, NULL);
        syscall(SYS_tgkill, getpid(), main_tid, SIGUSR1);
        long u = atomic_fetch_add(&sent_usr1, 1) + 1;
        if (!await(&handled_usr1, u)) break;
        if (!traps) continue;
        nanosleep(&gap, NULL);
        /* The next one waits for this one's handler, or for a second: one sent while the thread's own trap is
         * pending (an int3 of a tracer's) is merged with it by the kernel, as two of one standard signal are. */
        long before = atomic_load(&handled_trap);
        syscall(SYS_tgkill, getpid(), main_tid, SIGTRAP);
        atomic_fetch_add(&sent_trap, 1);
        await(&handled_trap, before + 1);
    }
    atomic_store(&sender_done, 1);
    return NULL;
}

int main(int argc, char **argv) {
    traps = !(argc > 1 && !strcmp(argv[1], "notrap"));
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_flags = SA_RESTART;
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = on_trap;
    if (traps) sigaction(SIGTRAP, &sa, NULL);
    main_tid = (pid_t)syscall(SYS_gettid);
    say("pid %d\n", getpid());
    char line[64];
    long n;
    if (!wait_line(line, sizeof line) || sscanf(line, "go %ld", &n) != 1) return 2;
    pthread_t th;
    pthread_create(&th, NULL, sender, NULL);
    long i = 0;
    while (i < MAX_CALLS && (i < n || !atomic_load(&sender_done))) {
        long len = i % 4 == 3 ? 2 * 4096 : 4096;
        void *p = len == 4096 ? site_a() : site_b();
        addr[i] = p;
        lens[i] = len;
        i++;
        /* Bursts of four, so a loaded machine's analysis keeps up (the tracer drops stack windows otherwise). */
        if (i % 4 == 0) {
            struct timespec nap = {0, 500000};
            nanosleep(&nap, NULL);
        }
    }
    pthread_join(th, NULL);
    for (long j = 0; j < i; j++) say("mmap %p %ld\n", addr[j], lens[j]);
    long h = atomic_load(&handled_usr1);
    for (long j = 0; j < h && j < MAX_HANDLER; j++) say("mmap %p %d\n", in_handler[j], 3 * 4096);
    say("signals %ld %ld %ld %ld\n", atomic_load(&sent_usr1), h, atomic_load(&sent_trap), atomic_load(&handled_trap));
    say("done\n");
    wait_line(line, sizeof line);
    return 0;
}
