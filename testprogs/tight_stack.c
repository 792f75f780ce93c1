/* A thread on a nearly used-up stack: the main thread blocks in read() on stdin with its stack pointer 240 bytes
 * above a PROT_NONE page (as on a small sigaltstack or a coroutine's stack): below the 128-byte red zone there are
 * 112 bytes, fewer than syscatch's call gate needs (280). Prints "pid N", then reads one byte there (and the rest of
 * the line on its own stack); prints "read R". */
#include "common.h"
#include <sys/mman.h>

int main(void) {
    char *m = mmap(0, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED || mprotect(m, 4096, PROT_NONE)) return 2;
    char *sp = m + 4096 + 240;
    say("pid %d\n", getpid());
    long ret;
    char buf[1];
    __asm__ volatile("mov %%rsp, %%r12\n\t"
                     "mov %[sp], %%rsp\n\t"
                     "syscall\n\t"
                     "mov %%r12, %%rsp\n\t"
                     : "=a"(ret)
                     : "a"(0L), "D"(0L), "S"(buf), "d"(1L), [sp] "r"(sp)
                     : "rcx", "r11", "r12", "memory");
    char rest[64];
    if (!fgets(rest, sizeof rest, stdin)) return 3; /* the rest of the line, so the harness's write never fails */
    say("read %ld\n", ret);
    return 0;
}
