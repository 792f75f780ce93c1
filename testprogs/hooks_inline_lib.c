/* libhooks_inline.so: patches function entries in memory, as inline-hooking libraries do. Its constructor
 * overwrites the first 14 bytes of libc's madvise with `jmp qword ptr [rip+0]` and the address of
 * hook_madvise (an absolute jump: libc may be more than 2 GiB away), and the first 5 bytes of its own
 * lib_work with `jmp rel32` to lib_work_hooked. */
#define _GNU_SOURCE
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

int hooks_inline_madvise_calls;

__attribute__((noinline)) int hook_madvise(void *addr, size_t len, int advice) {
    hooks_inline_madvise_calls++;
    return (int)syscall(SYS_madvise, addr, len, advice);
}

__attribute__((noinline)) int lib_work(int x) {
    volatile int acc = x;
    for (int i = 0; i < 3; i++) acc += i * x;
    return acc;
}

__attribute__((noinline)) int lib_work_hooked(int x) {
    return x + 1000;
}

static int write_code(void *at, const void *code, size_t len) {
    uintptr_t start = (uintptr_t)at & ~(uintptr_t)4095;
    uintptr_t end = ((uintptr_t)at + len + 4095) & ~(uintptr_t)4095;
    if (mprotect((void *)start, end - start, PROT_READ | PROT_WRITE | PROT_EXEC)) return -1;
    memcpy(at, code, len);
    return mprotect((void *)start, end - start, PROT_READ | PROT_EXEC);
}

int hooks_inline_installed;

__attribute__((constructor)) static void install(void) {
    unsigned char abs_jmp[14] = {0xff, 0x25, 0, 0, 0, 0};
    uint64_t target = (uint64_t)(uintptr_t)hook_madvise;
    memcpy(abs_jmp + 6, &target, 8);
    if (write_code((void *)madvise, abs_jmp, sizeof abs_jmp) == 0) hooks_inline_installed++;

    unsigned char rel_jmp[5] = {0xe9};
    int32_t rel = (int32_t)((intptr_t)lib_work_hooked - ((intptr_t)lib_work + 5));
    memcpy(rel_jmp + 1, &rel, 4);
    if (write_code((void *)lib_work, rel_jmp, sizeof rel_jmp) == 0) hooks_inline_installed++;
}
