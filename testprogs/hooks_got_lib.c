/* libhooks_got.so: reproduces a memory-hook library that rewrites the main program's GOT at load time.
 * Its constructor finds the program's JUMP_SLOT/GLOB_DAT relocations for mmap and munmap (dl_iterate_phdr, the
 * program's dynamic section), makes the slot's page writable (RELRO), and stores its own functions there. The
 * hooks forward through syscall(SYS_mmap, ...), as a bypassing allocator does. */
#define _GNU_SOURCE
#include <elf.h>
#include <link.h>
#include <string.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

int hooks_got_installed;

__attribute__((noinline)) void *hook_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

__attribute__((noinline)) int hook_munmap(void *addr, size_t len) {
    return (int)syscall(SYS_munmap, addr, len);
}

static uintptr_t abs_ptr(uintptr_t base, uintptr_t p) {
    /* glibc rewrites d_ptr entries to run-time addresses; other loaders may not. */
    return p < base ? p + base : p;
}

static void patch_slot(uintptr_t slot, void *fn) {
    uintptr_t page = slot & ~(uintptr_t)4095;
    mprotect((void *)page, 4096, PROT_READ | PROT_WRITE);
    *(void **)slot = fn;
    hooks_got_installed++;
}

static void patch_relocs(uintptr_t base, const ElfW(Rela) *rel, size_t size, const ElfW(Sym) *symtab,
                         const char *strtab) {
    for (size_t i = 0; rel && i < size / sizeof *rel; i++) {
        unsigned long type = ELF64_R_TYPE(rel[i].r_info);
        if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
        const char *name = strtab + symtab[ELF64_R_SYM(rel[i].r_info)].st_name;
        if (!strcmp(name, "mmap")) patch_slot(base + rel[i].r_offset, (void *)hook_mmap);
        if (!strcmp(name, "munmap")) patch_slot(base + rel[i].r_offset, (void *)hook_munmap);
    }
}

static int on_object(struct dl_phdr_info *info, size_t size, void *data) {
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
    return 1; /* the first object is the main program: stop there */
}

__attribute__((constructor)) static void install(void) {
    dl_iterate_phdr(on_object, NULL);
}
