/* Growth that makes no call: pages first touched in memory mapped before the trace (as an arena committed earlier
 * is). Maps one region of 64 MiB at the start and touches nothing; prints "pid N" and "region START END". On "go",
 * a new thread touches the region's last 16 MiB in touch_b while the main thread touches its first 48 MiB in
 * touch_a, a page at a time (no system call); prints "touched A_BYTES B_BYTES", then "done". Then "churn" starts a
 * thread that touches the whole region and gives it back (madvise MADV_DONTNEED) round after round, and prints
 * "churning"; "stop" stops it and prints "rounds N". Any other line (or the end of input) exits 0. */
#include "common.h"
#include <pthread.h>
#include <sys/mman.h>

#define MIB (1024L * 1024)
static char *region;

__attribute__((noinline)) static void touch_a(char *p, long len) {
    for (long o = 0; o < len; o += 4096) ((volatile char *)p)[o] = 1;
}

__attribute__((noinline)) static void touch_b(char *p, long len) {
    for (long o = 0; o < len; o += 4096) ((volatile char *)p)[o] = 2;
}

static volatile int churning;
static long rounds;

static void *churner(void *arg) {
    (void)arg;
    while (churning) {
        touch_a(region, 64 * MIB);
        madvise(region, 64 * MIB, MADV_DONTNEED);
        rounds++;
    }
    return NULL;
}

static void *toucher(void *arg) {
    (void)arg;
    touch_b(region + 48 * MIB, 16 * MIB);
    return NULL;
}

int main(void) {
    char line[64];
    region = mmap(NULL, 64 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED) return 1;
    madvise(region, 64 * MIB, MADV_NOHUGEPAGE); /* a fault per page, whatever the machine's THP setting */
    say("pid %d\nregion %p %p\n", getpid(), (void *)region, (void *)(region + 64 * MIB));
    if (!wait_line(line, sizeof line)) return 0;
    pthread_t t;
    if (pthread_create(&t, NULL, toucher, NULL)) return 1;
    touch_a(region, 48 * MIB);
    pthread_join(t, NULL);
    say("touched %ld %ld\ndone\n", 48 * MIB, 16 * MIB);
    while (wait_line(line, sizeof line)) {
        if (!strncmp(line, "churn", 5)) {
            churning = 1;
            if (pthread_create(&t, NULL, churner, NULL)) return 1;
            say("churning\n");
        } else if (!strncmp(line, "stop", 4)) {
            churning = 0;
            pthread_join(t, NULL);
            say("rounds %ld\n", rounds);
        } else {
            break;
        }
    }
    return 0;
}
