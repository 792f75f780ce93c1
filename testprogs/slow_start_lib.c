/* A library whose constructor runs before the program's entry point and blocks there: it prints "pid N" and
 * waits for a line on stdin. Lets a test interrupt `syscatch -- CMD` while the command is still starting. */
#include <stdio.h>
#include <unistd.h>

__attribute__((constructor)) static void slow_start(void) {
    char line[64];
    printf("pid %d\n", getpid());
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin)) _exit(3);
}
