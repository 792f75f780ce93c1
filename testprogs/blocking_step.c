/* A function whose first instruction is a blocking system call, for a probe on it: no emulator can run a
 * `syscall` in the tracer's place, so the tracer single-steps it with every other thread held, and the step
 * does not end until the read returns. A second thread sleeps and wakes every millisecond meanwhile.
 *
 * Prints "pid PID"; on the line "read", calls raw_read(0, ...) (a probe at blocking_step:raw_read), which
 * returns at the next line; then prints "got XXXX" (the line's first four bytes) and "ok". On end of input, exits 0. */
#include "common.h"
#include <pthread.h>
#include <sys/syscall.h>

/* read(fd, buf, n) with `syscall` as the probed function's first instruction. */
__asm__(".text\n.globl do_read\n.type do_read,@function\ndo_read:\n xor %eax, %eax\n jmp raw_read\n"
        ".globl raw_read\n.type raw_read,@function\nraw_read:\n syscall\n ret\n.size raw_read, .-raw_read\n");
long do_read(int fd, void *buf, unsigned long n);

static void *tick(void *arg) {
    (void)arg;
    for (;;) usleep(1000);
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, tick, NULL);
    say("pid %d\n", getpid());
    char line[256];
    while (wait_line(line, sizeof line)) {
        if (strncmp(line, "read", 4) == 0) {
            char buf[65] = {0};
            long n = do_read(0, buf, 64);
            /* The harness may write the line and its newline apart: the rest of the line is read here. */
            if (n > 0 && buf[n - 1] != '\n') wait_line(line, sizeof line);
            say("got %.4s\n", n >= 4 ? buf : "?");
        }
        say("ok\n");
    }
    return 0;
}
