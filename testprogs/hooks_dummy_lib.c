/* libhooks_dummy.so: a library with nothing in it, for a target to dlopen (and a test to corrupt on disk). */
int hooks_dummy(int x) { return x + 1; }
