/* Maps a large burst periodically, writes every page, holds it and frees it again (a batch job's scratch, numpy
 * under load): usage `bursts MIB PERIOD_MS HOLD_MS`. On "go", burst() maps MIB MiB through libc's mmap every
 * PERIOD_MS and unmaps it HOLD_MS later, printing "mapped ADDR" and "freed ADDR"; the third burst is held (it
 * prints "held ADDR") until the next line, then freed; prints "done", waits for a line and exits. */
#include "common.h"
#include <sys/mman.h>
#include <time.h>

static void nap(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

__attribute__((noinline)) static char *burst(size_t len) {
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) exit(1);
    for (size_t o = 0; o < len; o += 4096) p[o] = 1;
    return p;
}

int main(int argc, char **argv) {
    char line[64];
    if (argc < 4) return 2;
    size_t len = (size_t)atol(argv[1]) << 20;
    long period = atol(argv[2]), hold = atol(argv[3]);
    say("pid %d\n", getpid());
    if (!wait_line(line, sizeof line)) return 0;
    for (int i = 0; i < 3; i++) {
        char *p = burst(len);
        if (i == 2) {
            say("held %p\n", (void *)p);
            if (!wait_line(line, sizeof line)) return 0;
            munmap(p, len);
            break;
        }
        say("mapped %p\n", (void *)p);
        nap(hold);
        munmap(p, len);
        say("freed %p\n", (void *)p);
        nap(period - hold);
    }
    say("done\n");
    wait_line(line, sizeof line);
    return 0;
}
