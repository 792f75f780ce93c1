/* A program whose GOT entries for mmap and munmap are rewritten at load by libhooks_got.so (linked in).
 * Prints "pid N" and "hooks K" (slots the library rewrote), waits for "go", maps COUNT regions with mmap()
 * (which now runs hook_mmap, which calls syscall(SYS_mmap)) and prints "mmap ADDR LEN" for each, unmaps every
 * other one, prints "done", waits for a line and exits 0. */
#include "common.h"
#include <sys/mman.h>

extern int hooks_got_installed;

int main(int argc, char **argv) {
    int count = argc > 1 ? atoi(argv[1]) : 4;
    char buf[64];
    say("pid %d\n", getpid());
    say("hooks %d\n", hooks_got_installed);
    if (!wait_line(buf, sizeof buf)) return 2;
    for (int i = 0; i < count; i++) {
        size_t len = 4096 * (size_t)(3 + i);
        void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return 3;
        ((char *)p)[0] = 1;
        say("mmap %p %zu\n", p, len);
        if (i % 2) munmap(p, len);
    }
    say("done\n");
    wait_line(buf, sizeof buf);
    return 0;
}
