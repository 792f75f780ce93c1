#!/usr/bin/env python3
"""Whether a function's entry in a running process is still the bytes of its file (scripts/bench/target_pays.sh).

Usage: entry_intact.py PID LIBRARY FUNCTION

Exits 0 if the first 16 bytes of FUNCTION (a dynamic symbol of LIBRARY, an ELF64 file as /proc/PID/maps names it)
in PID's memory are the file's, 1 if they differ (a hook overwrote them, as scripts/bench/worker_lib.c does
libc's munmap), 2 if it cannot tell. A uprobe there would be unsafe: the kernel runs the file's first instruction
out of line and resumes after it, in the middle of the hook's jump (measured: the worker dies of SIGSEGV).
syscatch leaves such an entry out for the same reason (src/live/mappaths.rs).
"""
import struct
import sys

ENTRY = 16


def file_offset(elf, name):
    """The file offset of dynamic symbol `name`, or None."""
    phoff, shoff = struct.unpack_from("<QQ", elf, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", elf, 0x36)
    shdrs = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    dynsym = next((s for s in shdrs if s[1] == 11), None)  # SHT_DYNSYM
    if dynsym is None:
        return None
    strtab = shdrs[dynsym[6]][4]
    value = None
    for at in range(dynsym[4], dynsym[4] + dynsym[5], 24):
        st_name, _, _, _, st_value, _ = struct.unpack_from("<IBBHQQ", elf, at)
        end = elf.index(b"\0", strtab + st_name)
        if st_value and elf[strtab + st_name : end] == name.encode():
            value = st_value
            break
    if value is None:
        return None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", elf, phoff + i * phentsize)
        if p_type == 1 and p_vaddr <= value < p_vaddr + p_filesz:  # PT_LOAD
            return value - p_vaddr + p_offset
    return None


def main():
    pid, path, name = sys.argv[1:4]
    with open(path, "rb") as f:
        elf = f.read()
    off = file_offset(elf, name)
    if off is None:
        return 2
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            f = line.split()
            if len(f) < 6 or f[5] != path:
                continue
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            map_off = int(f[2], 16)
            if map_off <= off < map_off + (hi - lo):
                with open(f"/proc/{pid}/mem", "rb") as mem:
                    mem.seek(lo + off - map_off)
                    return 0 if mem.read(ENTRY) == elf[off : off + ENTRY] else 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
