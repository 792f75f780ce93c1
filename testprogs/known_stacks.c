/* Known stacks (`--fast`): `leaf` maps through libc's mmap or through syscall(SYS_mmap); `via_a` and `via_b`
 * (the same code) each call it, alternately, from one loop, so a call of one has the thread, the stack pointer
 * and the first frame of a call of the other: their stacks differ only two frames up. Prints "pid N", waits for
 * "go N", then for each of N rounds prints "mmap ADDR LEN a" and "mmap ADDR LEN b" (each unmapped again right
 * after, through libc's munmap), then "done"; exits 0 on its next line. With the argument `threads`, each round
 * runs sixteen rounds in a new thread, joined before the next: glibc gives each the fs base and the cached stack of the one
 * before, so its calls meet the stacks known of a thread gone; each line then ends with the thread's tid. Built as
 * a shared library too, for a CPython process (testprogs/py_known.py's `native`): `known_rounds_in_thread`. */
#include "common.h"
#include <sys/mman.h>
#include <pthread.h>
#include <sys/syscall.h>

#define NOI __attribute__((noinline, noipa))

NOI void *leaf(size_t len, int raw) {
    if (raw) return (void *)syscall(SYS_mmap, NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
}

static int threaded;

static void said(void *p, size_t len, char tag) {
    if (threaded)
        say("mmap %p %zu %c %ld\n", p, len, tag, (long)syscall(SYS_gettid));
    else
        say("mmap %p %zu %c\n", p, len, tag);
}

NOI void via_a(size_t len, int raw) {
    void *p = leaf(len, raw);
    said(p, len, 'a');
    munmap(p, len);
}

NOI void via_b(size_t len, int raw) {
    void *p = leaf(len, raw);
    said(p, len, 'b');
    munmap(p, len);
}

static void round_of(int i) {
    size_t len = 4096 * (size_t)(1 + i % 3);
    via_a(len, i & 1);
    via_b(len, i & 1);
}

/* Sixteen rounds a thread: its later calls may meet its stacks known. */
static void *in_thread(void *arg) {
    for (int k = 0; k < 16; k++) round_of((int)(long)arg * 16 + k);
    return NULL;
}

static void *rounds_in_thread(void *arg) {
    for (int i = 0; i < (int)(long)arg; i++) round_of(i);
    return NULL;
}

/* N rounds in one new thread of the library's own (a native thread of the process), joined; tid on each line. */
int known_rounds_in_thread(int rounds) {
    pthread_t t;
    threaded = 1;
    if (pthread_create(&t, NULL, rounds_in_thread, (void *)(long)rounds) != 0) return 3;
    return pthread_join(t, NULL) != 0 ? 3 : 0;
}

int main(int argc, char **argv) {
    char buf[64];
    threaded = argc > 1 && strcmp(argv[1], "threads") == 0;
    say("pid %d\n", getpid());
    if (!wait_line(buf, sizeof buf)) return 2;
    int rounds = atoi(buf + 3);
    for (int i = 0; i < rounds; i++) {
        if (!threaded) {
            round_of(i);
            continue;
        }
        pthread_t t;
        if (pthread_create(&t, NULL, in_thread, (void *)(long)i) != 0 || pthread_join(t, NULL) != 0) return 3;
    }
    say("done\n");
    wait_line(buf, sizeof buf);
    return 0;
}
