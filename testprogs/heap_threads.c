/* glibc's thread arenas growing, with their own ground truth. Prints "pid N"; on "go" it starts two threads, each
 * of which takes an arena of its own with its first malloc (glibc gives a new thread a new arena while there are
 * fewer than 8 per CPU): "leaker" mallocs 48-byte nodes into a list that only grows (LEAK bytes of them), "churner"
 * mallocs and frees blocks of the same sizes again and again, "fragmenter" mallocs FRAG blocks of 2,000 bytes
 * and frees all but every 16th (the freed runs lie between blocks in use) and prints "freed BYTES" (the chunk
 * bytes it freed: malloc_usable_size plus the chunk header). Each prints "arena NAME HEAP COMMITTED": the 64 MiB-
 * aligned heap holding its blocks and the bytes glibc made read-write in it (heap_info's mprotect_size: the
 * heap's reservation is PROT_NONE until grow_heap mprotects it), or "arena NAME main" if its blocks came from
 * the main arena. Then "mallinfo ARENA FREE" (mallinfo2()'s arena and fordblks: what malloc holds in its arenas
 * and the free bytes of them) and "done". On "trim" it frees every node but the newest (at the top of the leaker's heap, so the
 * rest stays inside it as free chunks), calls malloc_trim(0) (which gives the free pages back with
 * madvise(MADV_DONTNEED)), and prints "trimmed RESIDENT": the bytes of the leaker's committed heap still resident
 * (mincore), "mallinfo ARENA FREE" and "done". Any other line: exits 0. */
#include "common.h"
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <sys/mman.h>

#define HEAP_MAX ((uintptr_t)64 << 20)
#define NON_MAIN_ARENA 0x4
#define LEAK (24 << 20)
#define NODE 48
#define FRAG 16384
#define FRAG_SIZE 2000

struct node {
    struct node *next;
    char data[NODE - sizeof(struct node *)];
};

static struct node *kept;
/* Each thread's first malloc takes its arena; none goes on before all three have one (a thread that exits leaves
 * its arena to the next thread that asks). */
static pthread_barrier_t arenas_taken;

static void take_arena(void) {
    free(malloc(1));
    pthread_barrier_wait(&arenas_taken);
}
static uintptr_t leaker_heap;

static void say_mallinfo(void) {
    struct mallinfo2 m = mallinfo2();
    say("mallinfo %zu %zu\n", m.arena, m.fordblks);
}

static void report(const char *name, void *block) {
    if (!(*(size_t *)((uintptr_t)block - sizeof(size_t)) & NON_MAIN_ARENA)) {
        say("arena %s main\n", name);
        return;
    }
    uintptr_t heap = (uintptr_t)block & ~(HEAP_MAX - 1);
    if (!strcmp(name, "leaker")) leaker_heap = heap;
    /* struct heap_info { mstate ar_ptr; struct heap_info *prev; size_t size; size_t mprotect_size; ... } */
    say("arena %s %#lx %zu\n", name, (unsigned long)heap, ((size_t *)heap)[3]);
}

__attribute__((noinline)) static void *leaker(void *arg) {
    (void)arg;
    take_arena();
    for (size_t i = 0; i < LEAK / NODE; i++) {
        struct node *n = malloc(sizeof *n);
        memset(n->data, 1, sizeof n->data);
        n->next = kept;
        kept = n;
    }
    report("leaker", kept);
    return NULL;
}

__attribute__((noinline)) static void *churner(void *arg) {
    (void)arg;
    take_arena();
    void *last = NULL;
    for (int round = 0; round < 2000; round++) {
        void *blocks[64];
        for (int i = 0; i < 64; i++) {
            blocks[i] = malloc(NODE + (size_t)(i % 4) * 1024);
            memset(blocks[i], 2, NODE);
        }
        for (int i = 0; i < 63; i++) free(blocks[i]);
        free(last);
        last = blocks[63];
    }
    report("churner", last);
    free(last);
    return NULL;
}

static void **frag_kept;

__attribute__((noinline)) static void *fragmenter(void *arg) {
    (void)arg;
    take_arena();
    void **blocks = malloc(FRAG * sizeof *blocks);
    size_t freed = 0;
    for (int i = 0; i < FRAG; i++) {
        blocks[i] = malloc(FRAG_SIZE);
        memset(blocks[i], 3, FRAG_SIZE);
    }
    for (int i = 0; i < FRAG; i++) {
        if (i % 16 == 15) continue;
        freed += malloc_usable_size(blocks[i]) + sizeof(size_t);
        free(blocks[i]);
        blocks[i] = NULL;
    }
    frag_kept = blocks;
    report("fragmenter", blocks[15]);
    say("freed %zu\n", freed);
    return NULL;
}

int main(void) {
    char buf[64];
    say("pid %d\n", getpid());
    if (!wait_line(buf, sizeof buf)) return 1;
    pthread_t a, b, c;
    pthread_barrier_init(&arenas_taken, NULL, 3);
    pthread_create(&a, NULL, leaker, NULL);
    pthread_create(&b, NULL, churner, NULL);
    pthread_create(&c, NULL, fragmenter, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    pthread_join(c, NULL);
    say_mallinfo();
    say("done\n");
    while (wait_line(buf, sizeof buf) && !strncmp(buf, "trim", 4) && leaker_heap) {
        for (struct node *n = kept->next, *next; n; n = next) {
            next = n->next;
            free(n);
        }
        kept->next = NULL;
        malloc_trim(0);
        size_t committed = ((size_t *)leaker_heap)[3], pages = committed / 4096;
        unsigned char *vec = malloc(pages);
        size_t resident = 0;
        if (vec && mincore((void *)leaker_heap, committed, vec) == 0)
            for (size_t i = 0; i < pages; i++) resident += (vec[i] & 1) * 4096;
        free(vec);
        say("trimmed %zu\n", resident);
        say_mallinfo();
        say("done\n");
    }
    return 0;
}
