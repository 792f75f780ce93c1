/* A target for allocator naming: a program that compiles in jemalloc's options (`malloc_conf`, read by jemalloc
 * when one is preloaded; ignored otherwise), allocates a little, prints its pid and waits on stdin. */
#include "common.h"
#include <stdlib.h>

const char *malloc_conf = "dirty_decay_ms:5000,narenas:3";

int main(void) {
    char buf[16];
    void *volatile keep[64];
    for (int i = 0; i < 64; i++) keep[i] = malloc((size_t)(i + 1) * 1024);
    say("pid %d\n", getpid());
    wait_line(buf, sizeof buf);
    for (int i = 0; i < 64; i++) free(keep[i]);
    return 0;
}
