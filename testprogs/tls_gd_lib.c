/* A thread-local variable of a shared library, reached general-dynamic (built -fPIC: through __tls_get_addr), the
 * way a shared libpython reaches CPython 3.15's `_Py_tss_gilstate`. Used by testprogs/tls_gd.c. */
__thread void *tls_gd_var;

/* As `PyGILState_GetThisThreadState` reads its variable. */
void *tls_gd_get(void) { return tls_gd_var; }

void **tls_gd_addr(void) { return &tls_gd_var; }
