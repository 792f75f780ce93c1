/* The calls just before the end: a target that exits (or execs /bin/true, with "exec") right after its last calls,
 * so `--fast`'s ring still holds calls nobody has read when its address space goes.
 * Usage: ring_exit [exec]
 * Prints "pid N", waits for "go", makes 2000 rounds of syscall(SYS_mmap) and syscall(SYS_munmap) of one page, then
 * 50 libc mmap() and 50 syscall(SYS_munmap) of them, prints "calls 2050", and exits 0 (or execs /bin/true). */
#include "common.h"
#include <sys/mman.h>
#include <sys/syscall.h>

int main(int argc, char **argv) {
    say("pid %d\n", getpid());
    char line[64];
    if (!wait_line(line, sizeof line)) return 1;
    int n = 0;
    for (int i = 0; i < 2000; i++) {
        long p = syscall(SYS_mmap, 0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (syscall(SYS_munmap, p, 4096) == 0) n++;
    }
    void *q[50];
    for (int i = 0; i < 50; i++) q[i] = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    for (int i = 0; i < 50; i++)
        if (syscall(SYS_munmap, q[i], 4096) == 0) n++;
    say("calls %d\n", n);
    if (argc > 1 && strcmp(argv[1], "exec") == 0) execl("/bin/true", "true", (char *)0);
    return 0;
}
