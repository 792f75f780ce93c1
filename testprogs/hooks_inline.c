/* A program linked with libhooks_inline.so, whose constructor patched libc's madvise and the library's
 * lib_work in memory. Prints "pid N", "hooks K" (entries patched), then proof that the patches are live:
 * "madvise_calls C" (calls that reached hook_madvise) and "lib_work R" (lib_work_hooked answers x+1000);
 * waits for a line and exits 0. */
#include "common.h"
#include <sys/mman.h>

extern int hooks_inline_installed, hooks_inline_madvise_calls;
int lib_work(int x);

int main(void) {
    char buf[64];
    say("pid %d\n", getpid());
    say("hooks %d\n", hooks_inline_installed);
    void *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    madvise(p, 8192, MADV_DONTNEED);
    say("madvise_calls %d\n", hooks_inline_madvise_calls);
    say("lib_work %d\n", lib_work(42));
    wait_line(buf, sizeof buf);
    return 0;
}
