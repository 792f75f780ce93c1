/* The allocation sampler of `--malloc` (src/x86/alloc.rs): copied into the trampoline's code pages and called by
 * the stubs patched at the entries of malloc, calloc, realloc, free and the aligned allocators.
 *
 * Each thread counts down bytes from a draw of an exponential distribution (mean: `--malloc-every`); the call that
 * takes its count to zero or below is sampled and the count drawn again. A sampled block's address goes into a
 * table of the shared pages (buckets of four), so the free of a sampled block is found without a stop and written
 * into the ring. The stubs count down in the thread's home slot and look at the block's bucket themselves: this
 * code runs only when a count runs out, a thread is new, or a freed block's bucket holds a sampled one.
 *
 * Built by build.rs into position-independent bytes with no relocations: no globals, no calls, no constants
 * table, no SSE. Touches only the shared pages (offsets from `page`, the trampoline's first page, as alloc.rs
 * has them) and, for posix_memalign, the pointer the program passed. Lock-free: a signal handler that allocates
 * while its thread is in here at worst skews that thread's count. */

typedef unsigned long u64;
typedef long i64;

#define COUNTER 32768UL
#define TAIL (32768UL + 8)
#define RING (9 * 4096UL)
#define RING_SLOTS 512UL
#define SLOT 128UL
#define ALLOC 364544UL
#define DRAWS (ALLOC + 4096UL)
#define NDRAWS 4096UL
#define THREADS (DRAWS + NDRAWS * 8)
#define NTHREADS 1024UL
#define TABLE (THREADS + NTHREADS * 32)
#define NTABLE 65536UL
#define BUCKET 4UL
/* The multiplier of the hashes the stubs compute too (alloc.rs): the top bits of the product. */
#define K 0x9E3779B97F4A7C15UL

/* Words of the control page (at ALLOC). */
#define C_SEED 0
#define C_TABLE_FULL 1
#define C_THREADS_FULL 2
#define C_SAMPLED 3
#define C_SHARED_LEFT 4
#define C_SHARED_RNG 5

/* Kinds (alloc.rs `AllocFn`), and the phases of a call: op = phase | kind << 4. */
#define K_MALLOC 0
#define K_CALLOC 1
#define K_REALLOC 2
#define K_FREE 3
#define K_POSIX_MEMALIGN 4
#define K_ALIGNED_ALLOC 5
#define K_VALLOC 6
#define K_PVALLOC 7
#define K_REALLOCARRAY 8
#define P_ENTER 0
#define P_AFTER 1
#define P_FREE 2

struct thread {
    u64 fs;
    i64 left;
    u64 rng;
    u64 pad;
};

#define barrier() __asm__ __volatile__("" ::: "memory")

static inline __attribute__((always_inline)) u64 fsbase(void) {
    u64 v;
    __asm__ __volatile__("rdfsbase %0" : "=r"(v));
    return v;
}

static inline __attribute__((always_inline)) i64 draw(u64 page, u64 *rng) {
    u64 x = *rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *rng = x;
    return ((const volatile i64 *)(page + DRAWS))[(x * 0x2545F4914F6CDD1DUL) >> 52];
}

static inline __attribute__((always_inline)) u64 bucket_of(u64 p) {
    return (((p >> 4) * K) >> 50) * BUCKET;
}

/* Writes the free of sampled block `p` into the ring (the site `site` names it). 1: written; the number with bit
 * 63 set: the ring is full, the caller stops with that number. */
static inline __attribute__((always_inline)) i64 ring_free(u64 page, u64 p, u64 site) {
    u64 seq = __atomic_add_fetch((u64 *)(page + COUNTER), 1, __ATOMIC_SEQ_CST);
    u64 tail = *(const volatile u64 *)(page + TAIL);
    if (seq - tail >= RING_SLOTS) return (i64)(seq | (1UL << 63));
    volatile u64 *s = (volatile u64 *)(page + RING + (seq & (RING_SLOTS - 1)) * SLOT);
    s[1] = 0;
    s[2] = p;
    for (int i = 3; i < 8; i++) s[i] = 0;
    s[8] = 0;
    s[9] = fsbase();
    s[10] = site;
    s[11] = 0;
    s[12] = 0;
    s[13] = 0;
    s[14] = 0;
    barrier();
    __atomic_store_n((u64 *)&s[0], seq, __ATOMIC_RELEASE);
    return 1;
}

/* The free of `p`: if it was sampled, out of the table and into the ring. 0: not sampled. */
static inline __attribute__((always_inline)) i64 forget(u64 page, u64 p, u64 site) {
    u64 *b = (u64 *)(page + TABLE) + bucket_of(p);
    for (u64 i = 0; i < BUCKET; i++) {
        u64 v = p;
        if (__atomic_compare_exchange_n(&b[i], &v, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
            return ring_free(page, p, site);
    }
    return 0;
}

static inline __attribute__((always_inline)) void remember(u64 page, u64 p) {
    u64 *b = (u64 *)(page + TABLE) + bucket_of(p);
    for (u64 i = 0; i < BUCKET; i++)
        if (__atomic_load_n(&b[i], __ATOMIC_RELAXED) == p) return;
    for (u64 i = 0; i < BUCKET; i++) {
        u64 v = 0;
        if (__atomic_compare_exchange_n(&b[i], &v, p, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) return;
    }
    __atomic_add_fetch((u64 *)(page + ALLOC + C_TABLE_FULL * 8), 1, __ATOMIC_RELAXED);
}

static inline __attribute__((always_inline)) u64 mul(u64 a, u64 b) {
    u64 r;
    if (__builtin_mul_overflow(a, b, &r)) return ~0UL;
    return r;
}

/* This thread's count, claimed on its first call; 0 when the table is full. */
static inline __attribute__((always_inline)) struct thread *thread_of(u64 page) {
    u64 fs = fsbase();
    struct thread *t = (struct thread *)(page + THREADS);
    u64 h = ((fs >> 12) * K) >> 54;
    for (u64 i = 0; i < 8; i++) {
        struct thread *s = &t[(h + i) & (NTHREADS - 1)];
        u64 o = __atomic_load_n(&s->fs, __ATOMIC_RELAXED);
        if (o == fs) return s;
        if (o == 0) {
            if (__atomic_compare_exchange_n(&s->fs, &o, fs, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
                u64 r = fs ^ *(const volatile u64 *)(page + ALLOC + C_SEED * 8) ^ ((h + i) * 0xD6E8FEB86659FD93UL);
                s->rng = r ? r : 1;
                s->left = draw(page, &s->rng);
                return s;
            }
            if (o == fs) return s;
        }
    }
    return 0;
}

/* The entry of an allocation: whether it is sampled (1) or not (0); for realloc, the free of a sampled old block
 * first (its number with bit 63 set: the ring is full, the stub stops with it and the call goes on unsampled). */
static inline __attribute__((always_inline)) i64 enter(u64 kind, const u64 *a, u64 page, u64 site) {
    u64 size;
    switch (kind) {
    case K_CALLOC: size = mul(a[0], a[1]); break;
    case K_REALLOC: size = a[1]; break;
    case K_POSIX_MEMALIGN: size = a[2]; break;
    case K_ALIGNED_ALLOC: size = a[1]; break;
    case K_PVALLOC: size = (a[0] + 4095) & ~4095UL; break;
    case K_REALLOCARRAY: size = mul(a[1], a[2]); break;
    default: size = a[0]; break;
    }
    if ((kind == K_REALLOC || kind == K_REALLOCARRAY) && a[0]) {
        i64 r = forget(page, a[0], site);
        if (r < 0) return r;
    }
    if (size > (1UL << 62)) size = 1UL << 62;
    struct thread *t = thread_of(page);
    if (t) {
        i64 left = t->left - (i64)size;
        if (left > 0) {
            t->left = left;
            return 0;
        }
        t->left = draw(page, &t->rng);
    } else {
        i64 *shared = (i64 *)(page + ALLOC + C_SHARED_LEFT * 8);
        __atomic_add_fetch((u64 *)(page + ALLOC + C_THREADS_FULL * 8), 1, __ATOMIC_RELAXED);
        i64 left = __atomic_sub_fetch(shared, (i64)size, __ATOMIC_RELAXED);
        if (left > 0) return 0;
        u64 rng = *(volatile u64 *)(page + ALLOC + C_SHARED_RNG * 8) | 1;
        __atomic_store_n(shared, draw(page, &rng), __ATOMIC_RELAXED);
        *(volatile u64 *)(page + ALLOC + C_SHARED_RNG * 8) = rng;
    }
    __atomic_add_fetch((u64 *)(page + ALLOC + C_SAMPLED * 8), 1, __ATOMIC_RELAXED);
    return 1;
}

/* op: phase | kind << 4; a: the call's rdi, rsi, rdx as the stub saved them; result: rax after a sampled call;
 * site: the free's site (the ring's records of frees name it); page: the trampoline's first page.
 * P_ENTER: see `enter`. P_AFTER: the block's address (posix_memalign's from its pointer), remembered, or 0.
 * P_FREE: 0, or 1 (written into the ring), or the number with bit 63 set (the ring is full). */
i64 alloc_hook(u64 op, const u64 *a, u64 result, u64 site, u64 page) {
    u64 kind = op >> 4, phase = op & 15;
    if (phase == P_FREE) return forget(page, a[0], site);
    if (phase == P_ENTER) return enter(kind, a, page, site);
    u64 p = result;
    if (kind == K_POSIX_MEMALIGN) p = result == 0 ? *(const volatile u64 *)a[0] : 0;
    if (p) remember(page, p);
    return (i64)p;
}
