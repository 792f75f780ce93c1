/* A capture taken inside a signal handler: the main thread spins in `spinner` (called from `interrupted_caller`)
 * until a second thread sends it SIGUSR1; the handler maps memory through syscall(SYS_mmap) from
 * `handler_inner`, so the stack must go through __restore_rt back to `spinner` (interrupted at an arbitrary
 * instruction: looked up at its pc, not pc-1). Prints "pid N", waits for "go", prints "mmap ADDR LEN" and
 * "done", waits for a line and exits 0. */
#include "common.h"
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define NOI __attribute__((noinline, noipa))

static volatile sig_atomic_t handled, spinning;
static volatile long spins;
static void *mapped;

NOI void *handler_inner(size_t len) {
    void *p = (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    spins++;
    return p;
}

NOI void on_usr1(int sig) {
    (void)sig;
    mapped = handler_inner(5 * 4096);
    handled = 1;
}

NOI void spinner(void) {
    spinning = 1;
    while (!handled) spins++;
}

NOI void interrupted_caller(void) {
    spinner();
    spins++;
}

static pthread_t main_thread;

static void *kicker(void *arg) {
    (void)arg;
    while (!spinning) {}  /* the signal must find the main thread in spinner's loop */
    pthread_kill(main_thread, SIGUSR1);
    return NULL;
}

int main(void) {
    char buf[64];
    struct sigaction sa = {0};
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    main_thread = pthread_self();
    say("pid %d\n", getpid());
    if (!wait_line(buf, sizeof buf)) return 2;
    pthread_t k;
    pthread_create(&k, NULL, kicker, NULL);
    interrupted_caller();
    pthread_join(k, NULL);
    say("mmap %p %d\n", mapped, 5 * 4096);
    say("done\n");
    wait_line(buf, sizeof buf);
    return 0;
}
