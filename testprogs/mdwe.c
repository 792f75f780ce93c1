/* A target under PR_SET_MDWE (memory-deny-write-execute, as systemd's MemoryDenyWriteExecute= sets it): no mapping
 * may become executable once mapped without exec, nor writable and executable at once.
 * Prints "pid N" (or "no mdwe: ERROR" and exits 3 where the kernel lacks it, before 6.3), waits for "go", maps
 * three regions through syscall(SYS_mmap), prints "mmap ADDR LEN" for each and "done", waits for a line and exits
 * 0. */
#include "common.h"
#include <errno.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#ifndef PR_SET_MDWE
#define PR_SET_MDWE 65
#define PR_MDWE_REFUSE_EXEC_GAIN 1
#endif

int main(void) {
    if (prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0) {
        say("no mdwe: %s\n", strerror(errno));
        return 3;
    }
    say("pid %d\n", getpid());
    char line[64];
    if (!wait_line(line, sizeof line)) return 2;
    for (int i = 1; i <= 3; i++) {
        long len = i * 4096;
        void *p = (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        say("mmap %p %ld\n", p, len);
    }
    say("done\n");
    wait_line(line, sizeof line);
    return 0;
}
