/* A plain target for hook forensics: calls malloc and free at start; calloc only after "go" (so, built with
 * -z lazy, its GOT slot stays unresolved until then). With an argument, dlopens that library first.
 * Prints "pid N", then "ready"; on "go" calls calloc and prints "called"; waits for a line and exits 0.
 * Built with -DNO_DLOPEN for the static variant (glibc warns about dlopen in static programs). */
#include "common.h"
#include <dlfcn.h>

int main(int argc, char **argv) {
    char buf[64];
    say("pid %d\n", getpid());
#ifndef NO_DLOPEN
    if (argc > 1 && !dlopen(argv[1], RTLD_NOW)) {
        say("dlopen failed: %s\n", dlerror());
        return 3;
    }
#else
    (void)argv;
#endif
    char *volatile p = malloc(100);
    p[0] = 1;
    free(p);
    say("ready\n");
    if (!wait_line(buf, sizeof buf)) return 2;
    char *volatile q = calloc(10, 10);
    q[0] = 1;
    free(q);
    say("called\n");
    wait_line(buf, sizeof buf);
    return 0;
}
