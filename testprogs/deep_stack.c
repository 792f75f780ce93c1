/* A chain of nested functions that maps memory through syscall(SYS_mmap) at its innermost level, to check
 * stacks unwound without frame pointers. Built -O2 -fomit-frame-pointer (the harness's flags); `noipa` keeps gcc
 * from inlining, cloning or turning the calls into tail calls' jumps across the chain.
 * Usage: deep_stack [CALLS]. Prints "pid N", waits for "go", makes CALLS mmaps from level7, prints
 * "mmap ADDR LEN" for each and "done", waits for a line and exits 0.
 * deep_stack spin: prints "pid N" and "spinning", then spins forever in level7 (no system call, all frames in
 * this executable up to main): the state recorded for the unwinder's snapshot fixture. */
#include "common.h"
#include <sys/mman.h>
#include <sys/syscall.h>

#define NOI __attribute__((noinline, noipa))

static volatile int sink;
static int spin_mode;

NOI void *level7(size_t len) {
    if (spin_mode) {
        say("spinning\n");
        for (;;) sink++;
    }
    void *p = (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    sink++;
    return p;
}
NOI void *level6(size_t len) { void *p = level7(len + 4096); sink++; return p; }
NOI void *level5(size_t len) { void *p = level6(len + 4096); sink++; return p; }
NOI void *level4(size_t len) { void *p = level5(len + 4096); sink++; return p; }
NOI void *level3(size_t len) { void *p = level4(len + 4096); sink++; return p; }
NOI void *level2(size_t len) { void *p = level3(len + 4096); sink++; return p; }
NOI void *level1(size_t len) { void *p = level2(len + 4096); sink++; return p; }

int main(int argc, char **argv) {
    spin_mode = argc > 1 && strcmp(argv[1], "spin") == 0;
    int calls = argc > 1 && !spin_mode ? atoi(argv[1]) : 3;
    char buf[64];
    say("pid %d\n", getpid());
    if (spin_mode) level1(0);
    if (!wait_line(buf, sizeof buf)) return 2;
    for (int i = 0; i < calls; i++) {
        size_t len = 4096 * (size_t)(1 + i);
        void *p = level1(len);
        if (p == MAP_FAILED) { perror("mmap"); return 3; }
        say("mmap %p %zu\n", p, len + 6 * 4096);
    }
    say("done\n");
    wait_line(buf, sizeof buf);
    return 0;
}
