/* The known-stack matcher of `--fast` (src/x86/known.rs): copied into the trampoline page and called by a match
 * path after its `syscall`, with the thread's record stored below its stack pointer. If the stack of this call is
 * one the tracer has already unwound (the same thread, stack pointer and patch, and every word the unwinder and
 * the Python frame walk read equal to what they read then), the call is written into the ring with that stack's
 * number and the thread goes on without a stop.
 *
 * Built by build.rs into position-independent bytes with no relocations: no globals, no calls, no constants
 * table, no SSE. Reads only: the record (the 128 bytes below rsp), the thread's stack within the depth of the
 * stack it matches, the tracer's tables (written before they are marked valid, never changed after), the
 * thread's own descriptor and static TLS at fixed offsets from its thread pointer, the interpreter's runtime
 * state at a constant address, and memory that a pointer just read and found equal to a pointer of that stack
 * leads to (live frames and their code objects, see known.rs). The layout constants are checked against known.rs by its tests. */

typedef unsigned long u64;
typedef unsigned int u32;
typedef unsigned char u8;

#define COUNTER 32768UL
#define TAIL (32768UL + 8)
#define RING (9 * 4096UL)
#define RING_SLOTS 512UL
#define SLOT 128UL
#define KNOWN (RING + RING_SLOTS * SLOT)
#define ENTRIES 512UL
#define ENTRY 64UL
#define PROBES 16UL
#define OPS_AT (KNOWN + ENTRIES * ENTRY)
#define OPS 14336UL
#define BASES 8
#define TP 7 /* the base that holds the thread pointer (the fs base): the last */
#define RECORD 128UL

struct entry {
    u64 state; /* 0: never used (a probe stops here), 1: valid, 2: no longer valid */
    u64 thread;
    u64 rsp;
    u64 int3;
    u32 first, count; /* its checks */
    u32 depth, id;    /* how far above rsp its checks may read; its number in the ring */
    u64 pad[2];
};

struct op {
    u8 base, dest, width, untag; /* base 0: rsp, 1: the record, 2..6: a pointer a check read, 7: the thread pointer */
    int off;
    u64 expect;
};

#define barrier() __asm__ __volatile__("" ::: "memory")

static inline __attribute__((always_inline)) int checks(const volatile struct op *ops, u32 first, u32 count,
                                                        u32 depth, u64 rsp, u64 thread) {
    u64 base[BASES];
    for (int i = 0; i < BASES; i++) base[i] = 0;
    base[0] = rsp;
    base[1] = rsp - RECORD;
    base[TP] = thread;
    if (first >= OPS || count > OPS - first) return 0;
    for (u32 i = 0; i < count; i++) {
        const volatile struct op *o = &ops[first + i];
        u32 b = o->base, d = o->dest, w = o->width;
        long off = o->off;
        u64 expect = o->expect, v;
        if (d >= TP || d == 1) return 0;
        /* A constant: an address the tracer vouches for (the interpreter's own data, mapped while it lives). */
        if (w == 0) {
            if (d < 2 || expect == 0) return 0;
            base[d] = expect;
            continue;
        }
        if (b >= BASES || base[b] == 0) return 0;
        if (b == 0 && (off < 0 || (u64)off + 8 > depth)) return 0;
        if (b == 1 && (off < 0 || (u64)off + 8 > RECORD)) return 0;
        u64 at = base[b] + (u64)off;
        if (w == 8)
            v = *(const volatile u64 *)at;
        else if (w == 4)
            v = *(const volatile u32 *)at;
        else if (w == 1)
            v = *(const volatile u8 *)at;
        else
            return 0;
        if (v != expect) return 0;
        if (d >= 2) base[d] = v & ~(u64)o->untag;
    }
    return 1;
}

/* rsp: the stack pointer at the patched function's entry (the record is the 128 bytes below it); nr and site:
 * what the ring's slot says of the call; page: the trampoline's page. Returns 0 (not known: no number taken),
 * 1 (written into the ring), or the number taken with bit 63 set (known, but the ring is full: the caller stops
 * with that number). */
long known_match(u64 rsp, u64 nr, u64 site, u64 page) {
    const volatile u64 *rec = (const volatile u64 *)(rsp - RECORD);
    u64 thread = rec[0], int3 = rec[2];
    if (thread == 0) return 0;
    const volatile struct entry *entries = (const volatile struct entry *)(page + KNOWN);
    const volatile struct op *ops = (const volatile struct op *)(page + OPS_AT);
    u64 h = (rsp >> 3) ^ (rsp >> 15) ^ (thread >> 12) ^ (int3 << 5);
    for (u64 p = 0; p < PROBES; p++) {
        const volatile struct entry *e = &entries[(h + p) & (ENTRIES - 1)];
        u64 state = e->state;
        if (state == 0) return 0;
        barrier();
        if (state != 1 || e->thread != thread || e->rsp != rsp || e->int3 != int3) continue;
        if (!checks(ops, e->first, e->count, e->depth, rsp, thread)) continue;
        u64 seq = __atomic_add_fetch((u64 *)(page + COUNTER), 1, __ATOMIC_SEQ_CST);
        u64 tail = *(const volatile u64 *)(page + TAIL);
        if (seq - tail >= RING_SLOTS) return (long)(seq | (1UL << 63));
        volatile u64 *s = (volatile u64 *)(page + RING + (seq & (RING_SLOTS - 1)) * SLOT);
        s[1] = nr;
        for (int i = 0; i < 6; i++) s[2 + i] = rec[4 + i]; /* rdi rsi rdx r10 r8 r9 */
        s[8] = rec[3];                                     /* rax: the result */
        s[9] = thread;
        s[10] = site;
        s[11] = *(const volatile u64 *)rsp;
        s[12] = rsp;
        s[13] = e->id;
        s[14] = seq;
        barrier();
        __atomic_store_n((u64 *)&s[0], seq, __ATOMIC_RELEASE);
        return 1;
    }
    return 0;
}
