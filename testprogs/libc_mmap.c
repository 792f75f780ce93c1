/* Maps through libc's own mmap() and munmap() (not syscall()), and once through syscall(SYS_mmap), from
 * `via_libc`, which then waits in read(0) in the same frame (so eu-stack sees its callers as the capture did).
 * Prints "pid N", waits for "go", prints "mmap ADDR LEN" for each mapping (libc, libc, raw), "munmap ADDR LEN"
 * for the libc munmap, then "done"; waits for a line, prints "bye" and exits 0. With the argument "exec", the
 * second libc mapping is executable (glibc 2.43 with GLIBC_TUNABLES=glibc.cpu.prefer_map_32bit_exec=1 then makes
 * it on mmap's second path, below 4 GiB). */
#include "common.h"
#include <errno.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define NOI __attribute__((noinline, noipa))

static volatile int after;
static int exec_prot;

NOI void via_libc(void) {
    size_t len = 5 * 4096;
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    say("mmap %p %zu\n", p, len);
    void *q = mmap(NULL, 2 * len, PROT_READ | exec_prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    say("mmap %p %zu\n", q, 2 * len);
    void *r = (void *)syscall(SYS_mmap, NULL, 3 * len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    say("mmap %p %zu\n", r, 3 * len);
    munmap(p, len);
    say("munmap %p %zu\n", p, len);
    say("done\n");
    char c;
    for (;;) {
        ssize_t n = read(0, &c, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0 || c == '\n') break;
    }
    after++;
}

int main(int argc, char **argv) {
    char buf[64];
    if (argc > 1 && strcmp(argv[1], "exec") == 0) exec_prot = PROT_EXEC;
    say("pid %d\n", getpid());
    if (!wait_line(buf, sizeof buf)) return 2;
    via_libc();
    say("bye\n");
    return 0;
}
