/* A stackful coroutine that moves between two threads (as in an M:N fiber scheduler): it calls syscall() at one
 * depth of its own stack on thread A, then at the same depth on thread B; then A calls syscall() from its own
 * stack. `--fast` reads a thread's next stop at the stack pointer of its last event, where the other thread has
 * just left a record of its own. Each call is getppid tagged in rdi (ignored by the kernel).
 * Prints "pid N", waits for a line, makes the calls, prints "call TID TAG" for each and "done", waits for a line
 * and exits 0. */
#include "common.h"
#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <ucontext.h>

#define N 200
static ucontext_t coro, back_a, back_b;
static _Atomic int turn; /* 0: A runs the coroutine, 1: B runs it, 2: A calls from its own stack */
static _Atomic long tag_for_coro;
static pid_t tid_a, tid_b;
static struct {
    pid_t tid;
    long tag;
} calls[3 * N];
static _Atomic int ncalls;
static ucontext_t *back;
static pid_t *cur_tid;

static void note(pid_t t, long tag) {
    int i = ncalls++;
    calls[i].tid = t;
    calls[i].tag = tag;
}

__attribute__((noinline)) static void coro_call(void) {
    long tag = tag_for_coro;
    syscall(SYS_getppid, tag);
    note(*cur_tid, tag);
}

static void coro_main(void) {
    for (;;) {
        coro_call();
        swapcontext(&coro, back);
    }
}

static void *thread_b(void *arg) {
    (void)arg;
    tid_b = (pid_t)syscall(SYS_gettid);
    for (int i = 0; i < N; i++) {
        while (turn != 1) {
        }
        back = &back_b;
        cur_tid = &tid_b;
        tag_for_coro = 2000 + i;
        swapcontext(&back_b, &coro);
        turn = 2;
    }
    return NULL;
}

int main(void) {
    say("pid %d\n", getpid());
    char line[16];
    if (!wait_line(line, sizeof line)) return 2;
    tid_a = (pid_t)syscall(SYS_gettid);
    static char stack[1 << 16];
    getcontext(&coro);
    coro.uc_stack.ss_sp = stack;
    coro.uc_stack.ss_size = sizeof stack;
    coro.uc_link = NULL;
    makecontext(&coro, coro_main, 0);
    pthread_t th;
    pthread_create(&th, NULL, thread_b, NULL);
    for (int i = 0; i < N; i++) {
        back = &back_a;
        cur_tid = &tid_a;
        tag_for_coro = 1000 + i;
        swapcontext(&back_a, &coro); /* A: the coroutine's call, at depth S of its stack */
        turn = 1;                    /* B: the same coroutine's call, at the same depth */
        while (turn != 2) {
        }
        syscall(SYS_getppid, 3000L + i); /* A: its own call, from its own stack */
        note(tid_a, 3000 + i);
        turn = 0;
    }
    pthread_join(th, NULL);
    for (int i = 0; i < ncalls; i++) say("call %d %ld\n", calls[i].tid, calls[i].tag);
    say("done\n");
    wait_line(line, sizeof line);
    return 0;
}
