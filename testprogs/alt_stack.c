/* Nested handlers on an alternate signal stack, as gdb's own test (gdb.base/sigaltstack) has them: main calls
 * `outer`, which calls `thrower`, which raise()s SIGUSR1; its handler `on_usr1` runs on a malloc'd alternate
 * stack and raise()s SIGUSR2, whose handler `on_usr2` (nested, on the same alternate stack) calls `handler_maps`
 * through its weak alias `handler_maps_alias`. `handler_maps` maps memory through syscall(SYS_mmap) and, with
 * argument "libc", through libc's mmap() too, then blocks in read(0) in that frame, so gdb and eu-stack see the
 * stack the capture saw. The unwind must cross from the alternate stack back to the normal one at the outer
 * signal frame. Prints "pid N", waits for "go", prints "mmap ADDR LEN" per mapping, "altstack LO HI" and "done",
 * then waits for a line inside the handler, prints "bye N" (N: reads cut short by EINTR) and exits 0. */
#include "common.h"
#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#define NOI __attribute__((noinline, noipa))

static int use_libc;
static int interrupted;
static volatile int after; /* touched after each call, so no call is a tail call (each caller keeps its frame) */
static char *alt;
static size_t alt_size;

NOI void handler_maps(void) {
    size_t len = 3 * 4096;
    void *p = (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    say("mmap %p %zu\n", p, len);
    if (use_libc) {
        void *q = mmap(NULL, 2 * len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        say("mmap %p %zu\n", q, 2 * len);
    }
    say("altstack %p %p\n", (void *)alt, (void *)(alt + alt_size));
    say("done\n");
    char buf[64];
    /* The frame gdb and eu-stack are shown: read() straight from here, not through stdio. A read cut short by a
     * tool attaching (EINTR) is counted and tried again, in the same frame. Byte by byte up to the newline: the
     * harness may write a line in two pieces, and exiting before the second would fail its write. */
    for (;;) {
        ssize_t n = read(0, buf, 1);
        if (n < 0 && errno == EINTR) {
            interrupted++;
            continue;
        }
        if (n <= 0 || buf[0] == '\n') break;
    }
}

extern void handler_maps_alias(void) __attribute__((weak, alias("handler_maps")));

NOI void on_usr2(int sig) {
    (void)sig;
    handler_maps_alias();
    after++;
}

NOI void on_usr1(int sig) {
    (void)sig;
    raise(SIGUSR2);
    after++;
}

NOI void thrower(void) {
    raise(SIGUSR1);
    after++;
}

NOI void outer(void) {
    thrower();
    say("bye %d\n", interrupted);
}

int main(int argc, char **argv) {
    char buf[64];
    use_libc = argc > 1 && strcmp(argv[1], "libc") == 0;
    alt_size = 64 * 1024;
    alt = malloc(alt_size);
    stack_t ss = {.ss_sp = alt, .ss_size = alt_size, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0) return 3;
    struct sigaction sa = {0};
    sa.sa_flags = SA_ONSTACK | SA_NODEFER;
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    sa.sa_handler = on_usr2;
    sigaction(SIGUSR2, &sa, NULL);
    say("pid %d\n", getpid());
    if (!wait_line(buf, sizeof buf)) return 2;
    outer();
    return 0;
}
