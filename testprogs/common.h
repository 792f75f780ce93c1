/* Handshake helpers shared by the test targets: print the pid, then wait on stdin for each step. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static inline void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static inline void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

/* Blocks until the harness sends a line; returns 0 at end of input. */
static inline int wait_line(char *buf, size_t n) {
    if (!fgets(buf, (int)n, stdin)) return 0;
    return 1;
}
