# A python3 target mapping memory through libc's syscall() via ctypes (libffi), from two nested Python functions.
# Prints "pid N", waits for "go", prints "mmap ADDR LEN" and "done", waits for a line and exits 0.
import ctypes
import os
import sys

libc = ctypes.CDLL(None)
libc.syscall.restype = ctypes.c_long
L = ctypes.c_long


def py_inner(length):
    return libc.syscall(L(9), L(0), L(length), L(3), L(0x22), L(-1), L(0))


def py_outer(length):
    return py_inner(length)


print("pid", os.getpid(), flush=True)
sys.stdin.readline()
addr = py_outer(7 * 4096)
print("mmap %#x %d" % (addr, 7 * 4096), flush=True)
print("done", flush=True)
sys.stdin.readline()
