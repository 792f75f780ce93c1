/* Linked against libslow_start_lib.so, whose constructor blocks before this program's entry point. Prints
 * "main reached" once it gets that far (it would die of SIGTRAP at its entry point if a tracer left an int3
 * there). */
#include <stdio.h>

int main(void) {
    printf("main reached\n");
    return 0;
}
