/* Two call sites map memory through syscall(SYS_mmap): leak_site() never unmaps, tidy_site() unmaps again.
 * Then one mapping is partly unmapped, one grown with mremap (moved), one shrunk. Prints its ground truth:
 *   leaked BYTES      what leak_site() still has mapped
 *   part ADDR LEN     a 6-page mapping of which the middle 2 pages were unmapped
 *   grown OLD NEW LEN a 2-page mapping grown to 8 pages with MREMAP_MAYMOVE
 * then "done"; waits for a line and exits. */
#include "common.h"
#include <sys/mman.h>
#include <sys/syscall.h>

#define PAGE 4096

static void *raw_mmap(size_t len) {
    return (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

__attribute__((noinline)) static size_t leak_site(int i) {
    size_t len = (size_t)(i + 1) * 16 * PAGE;
    char *p = raw_mmap(len);
    for (size_t o = 0; o < len; o += PAGE) p[o] = 1;
    return len;
}

__attribute__((noinline)) static void tidy_site(int i) {
    size_t len = (size_t)(i + 1) * 8 * PAGE;
    char *p = raw_mmap(len);
    p[0] = 1;
    syscall(SYS_munmap, p, len);
}

__attribute__((noinline)) static void partial_site(void) {
    char *p = raw_mmap(6 * PAGE);
    syscall(SYS_munmap, p + 2 * PAGE, 2 * PAGE);
    say("part %p %d\n", (void *)p, 6 * PAGE);
}

__attribute__((noinline)) static void grow_site(void) {
    char *p = raw_mmap(2 * PAGE);
    /* A neighbour right after it forces the growth to move. */
    syscall(SYS_mmap, p + 2 * PAGE, PAGE, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    char *q = (char *)syscall(SYS_mremap, p, 2 * PAGE, 8 * PAGE, MREMAP_MAYMOVE);
    say("grown %p %p %d\n", (void *)p, (void *)q, 8 * PAGE);
}

int main(void) {
    char buf[16];
    say("pid %d\n", getpid());
    if (!wait_line(buf, sizeof buf)) return 2;
    size_t leaked = 0;
    for (int i = 0; i < 5; i++) {
        leaked += leak_site(i);
        tidy_site(i);
    }
    partial_site();
    grow_site();
    say("leaked %zu\n", leaked);
    say("done\n");
    wait_line(buf, sizeof buf);
    return 0;
}
