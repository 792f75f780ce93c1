/* A worker whose communication library (libucx_like.so) hooks munmap and grows an invalidation pool on every
 * unmap (see ucx_like_lib.c). Prints "pid N" and "hook MODE"; on "go N" it sets UCX_RCACHE_MAX_UNRELEASED=inf
 * with setenv (as a server configures its library after start: only the live environment shows it), maps,
 * touches and unmaps a 1 MiB buffer N times through libc's mmap/munmap, prints "pool BYTES" (what the pool
 * mapped) and "done"; waits for a line and exits 0. */
#include "common.h"
#include <sys/mman.h>

extern size_t ucs_pool_bytes;
extern const char *ucm_hook_mode_name;

__attribute__((noinline)) static void train_step(void) {
    size_t len = 1 << 20;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    for (size_t o = 0; o < len; o += 4096) p[o] = 1;
    munmap(p, len);
}

int main(void) {
    char buf[64];
    say("pid %d\n", getpid());
    say("hook %s\n", ucm_hook_mode_name);
    if (!wait_line(buf, sizeof buf)) return 1;
    int n = atoi(buf + 3);
    setenv("UCX_RCACHE_MAX_UNRELEASED", "inf", 1);
    for (int i = 0; i < n; i++) train_step();
    say("pool %zu\n", ucs_pool_bytes);
    say("done\n");
    wait_line(buf, sizeof buf);
    return 0;
}
