/* libucx_like.so: the call shape of UCX's memory hooks (libucm + libucs), with UCX's function names so that the
 * rules' frame globs match. Every munmap of the program reaches ucm_munmap, which invalidates the registration
 * cache: ucs_rcache_invalidate takes an entry from a memory pool that is never given back (the unbounded
 * invalidation queue), and ucs_mpool_grow maps a new 64 KiB chunk through ucm_orig_mmap whenever the pool is
 * empty. How the hook is installed follows UCXLIKE_HOOK at load time:
 *   inline (default): libc's munmap entry is overwritten with a jump to ucm_munmap (UCX's bistro mode); the
 *                     original calls go through syscall(SYS_mmap / SYS_munmap);
 *   got:              the main program's GOT slots for mmap and munmap point at ucm_mmap / ucm_munmap (UCX's
 *                     reloc mode); the original calls go to libc's functions found with dlsym(RTLD_NEXT);
 *   none:             no hook (UCX_MEM_MMAP_HOOK_MODE=none): nothing is queued. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CHUNK (64 * 1024)
#define ELEM 4096

static int got_mode;
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static int (*real_munmap)(void *, size_t);
const char *ucm_hook_mode_name = "none";

struct elem { struct elem *next; };
static struct elem *free_list;
static struct elem *queue;
size_t ucs_pool_bytes;

__attribute__((noinline)) void *ucm_orig_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    if (got_mode) return real_mmap(addr, len, prot, flags, fd, off);
    return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

__attribute__((noinline)) int ucm_orig_munmap(void *addr, size_t len) {
    if (got_mode) return real_munmap(addr, len);
    return (int)syscall(SYS_munmap, addr, len);
}

__attribute__((noinline)) void ucs_mpool_grow(void) {
    char *chunk = ucm_orig_mmap(NULL, CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (chunk == MAP_FAILED) return;
    ucs_pool_bytes += CHUNK;
    for (size_t o = 0; o < CHUNK; o += ELEM) {
        struct elem *e = (struct elem *)(chunk + o);
        e->next = free_list;
        free_list = e;
    }
}

__attribute__((noinline)) void *ucs_mpool_get(void) {
    if (!free_list) ucs_mpool_grow();
    struct elem *e = free_list;
    if (e) free_list = e->next;
    return e;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* The invalidation queue keeps every entry until the cache is next used, which never happens here. (Locked: a
 * threaded program unmaps from several threads.) */
__attribute__((noinline)) void ucs_rcache_invalidate(void *addr, size_t len) {
    (void)addr;
    (void)len;
    pthread_mutex_lock(&lock);
    struct elem *e = ucs_mpool_get();
    if (e) {
        e->next = queue;
        queue = e;
    }
    pthread_mutex_unlock(&lock);
}

__attribute__((noinline)) void ucm_dispatch_vm_munmap(void *addr, size_t len) {
    ucs_rcache_invalidate(addr, len);
}

__attribute__((noinline)) int ucm_munmap(void *addr, size_t len) {
    ucm_dispatch_vm_munmap(addr, len);
    return ucm_orig_munmap(addr, len);
}

__attribute__((noinline)) void *ucm_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return ucm_orig_mmap(addr, len, prot, flags, fd, off);
}

static void patch_slot(uintptr_t slot, void *fn) {
    uintptr_t page = slot & ~(uintptr_t)4095;
    mprotect((void *)page, 4096, PROT_READ | PROT_WRITE);
    *(void **)slot = fn;
}

static uintptr_t abs_ptr(uintptr_t base, uintptr_t p) {
    return p < base ? p + base : p;
}

static void patch_relocs(uintptr_t base, const ElfW(Rela) *rel, size_t size, const ElfW(Sym) *symtab,
                         const char *strtab) {
    for (size_t i = 0; rel && i < size / sizeof *rel; i++) {
        unsigned long type = ELF64_R_TYPE(rel[i].r_info);
        if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
        const char *name = strtab + symtab[ELF64_R_SYM(rel[i].r_info)].st_name;
        if (!strcmp(name, "mmap")) patch_slot(base + rel[i].r_offset, (void *)ucm_mmap);
        if (!strcmp(name, "munmap")) patch_slot(base + rel[i].r_offset, (void *)ucm_munmap);
    }
}

/* The main program is the first object dl_iterate_phdr reports. */
static int on_main(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    uintptr_t base = info->dlpi_addr;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) dyn = (const ElfW(Dyn) *)(base + info->dlpi_phdr[i].p_vaddr);
    if (!dyn) return 1;
    const ElfW(Rela) *jmprel = NULL, *rela = NULL;
    size_t jmprelsz = 0, relasz = 0;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        switch (dyn->d_tag) {
        case DT_JMPREL: jmprel = (const ElfW(Rela) *)abs_ptr(base, dyn->d_un.d_ptr); break;
        case DT_PLTRELSZ: jmprelsz = dyn->d_un.d_val; break;
        case DT_RELA: rela = (const ElfW(Rela) *)abs_ptr(base, dyn->d_un.d_ptr); break;
        case DT_RELASZ: relasz = dyn->d_un.d_val; break;
        case DT_SYMTAB: symtab = (const ElfW(Sym) *)abs_ptr(base, dyn->d_un.d_ptr); break;
        case DT_STRTAB: strtab = (const char *)abs_ptr(base, dyn->d_un.d_ptr); break;
        }
    }
    if (symtab && strtab) {
        patch_relocs(base, jmprel, jmprelsz, symtab, strtab);
        patch_relocs(base, rela, relasz, symtab, strtab);
    }
    return 1;
}

static void patch_entry(void *at, void *to) {
    unsigned char jmp[14] = {0xff, 0x25, 0, 0, 0, 0};
    uint64_t target = (uint64_t)(uintptr_t)to;
    memcpy(jmp + 6, &target, 8);
    uintptr_t start = (uintptr_t)at & ~(uintptr_t)4095;
    uintptr_t end = ((uintptr_t)at + sizeof jmp + 4095) & ~(uintptr_t)4095;
    mprotect((void *)start, end - start, PROT_READ | PROT_WRITE | PROT_EXEC);
    memcpy(at, jmp, sizeof jmp);
    mprotect((void *)start, end - start, PROT_READ | PROT_EXEC);
}

__attribute__((constructor)) static void ucm_init(void) {
    const char *mode = getenv("UCXLIKE_HOOK");
    if (mode && !strcmp(mode, "none")) return;
    if (mode && !strcmp(mode, "got")) {
        got_mode = 1;
        real_mmap = dlsym(RTLD_NEXT, "mmap");
        real_munmap = dlsym(RTLD_NEXT, "munmap");
        dl_iterate_phdr(on_main, NULL);
        ucm_hook_mode_name = "got";
        return;
    }
    patch_entry(dlsym(RTLD_NEXT, "munmap"), (void *)ucm_munmap);
    ucm_hook_mode_name = "inline";
}
