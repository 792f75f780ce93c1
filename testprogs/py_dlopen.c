/* A host that loads CPython with dlopen after it started, as plugin hosts and embedding servers do. Prints
 * "pid N"; on "load PATH" it dlopens PATH (a shared libpython), initialises it and runs Python code whose grow()
 * maps a page through libc's syscall() every 20 ms, printing "mmap ADDR" each time and "done" after 150 rounds or
 * once a line arrives on stdin, which is also its last: it then exits 0. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *code =
    "import ctypes, select, sys, time\n"
    "libc = ctypes.CDLL(None)\n"
    "libc.syscall.restype = ctypes.c_long\n"
    "L = ctypes.c_long\n"
    "def grow():\n"
    "    return libc.syscall(L(9), L(0), L(4096), L(3), L(0x22), L(-1), L(0))\n"
    "def serve():\n"
    "    for i in range(150):\n"
    "        print('mmap %#x' % grow(), flush=True)\n"
    "        if select.select([sys.stdin], [], [], 0.02)[0]:\n"
    "            break\n"
    "serve()\n"
    "print('done', flush=True)\n";

int main(void) {
    char line[4096];
    printf("pid %d\n", getpid());
    fflush(stdout);
    if (!fgets(line, sizeof line, stdin) || strncmp(line, "load ", 5) != 0)
        return 2;
    line[strcspn(line, "\n")] = 0;
    void *py = dlopen(line + 5, RTLD_NOW | RTLD_GLOBAL);
    if (!py) {
        printf("dlopen: %s\n", dlerror());
        return 3;
    }
    void (*init)(void) = (void (*)(void))dlsym(py, "Py_Initialize");
    int (*run)(const char *) = (int (*)(const char *))dlsym(py, "PyRun_SimpleString");
    if (!init || !run)
        return 4;
    init();
    return run(code) == 0 ? 0 : 5;
}
