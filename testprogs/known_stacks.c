/* Known stacks (`--fast`): `leaf` maps through libc's mmap or through syscall(SYS_mmap); `via_a` and `via_b`
 * (the same code) each call it, alternately, from one loop, so a call of one has the thread, the stack pointer
 * and the first frame of a call of the other: their stacks differ only two frames up. Prints "pid N", waits for
 * "go N", then for each of N rounds prints "mmap ADDR LEN a" and "mmap ADDR LEN b" (each unmapped again right
 * after, through libc's munmap), then "done"; exits 0 on its next line. */
#include "common.h"
#include <sys/mman.h>
#include <sys/syscall.h>

#define NOI __attribute__((noinline, noipa))

NOI void *leaf(size_t len, int raw) {
    if (raw) return (void *)syscall(SYS_mmap, NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

NOI void via_a(size_t len, int raw) {
    void *p = leaf(len, raw);
    say("mmap %p %zu a\n", p, len);
    munmap(p, len);
}

NOI void via_b(size_t len, int raw) {
    void *p = leaf(len, raw);
    say("mmap %p %zu b\n", p, len);
    munmap(p, len);
}

int main(void) {
    char buf[64];
    say("pid %d\n", getpid());
    if (!wait_line(buf, sizeof buf)) return 2;
    int rounds = atoi(buf + 3);
    for (int i = 0; i < rounds; i++) {
        size_t len = 4096 * (size_t)(1 + i % 3);
        via_a(len, i & 1);
        via_b(len, i & 1);
    }
    say("done\n");
    wait_line(buf, sizeof buf);
    return 0;
}
