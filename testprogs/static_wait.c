/* A target linked statically (no libc.so mapped): prints its pid and waits on stdin. */
#include "common.h"

int main(void) {
    char buf[16];
    say("pid %d\n", getpid());
    wait_line(buf, sizeof buf);
    return 0;
}
