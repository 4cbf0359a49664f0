/*
 * core/mem.c — huge pages and pre-faulting for large host buffers (see core/mem.h).
 */
#include "core/mem.h"

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 uapi; older kernels answer EINVAL */
#endif

void mem_prepare(void *p, size_t bytes) {
    if (p == NULL || bytes < ((size_t)1 << 20)) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1);        /* first whole page */
    uintptr_t b = ((uintptr_t)p + bytes) & ~(page - 1);            /* end of the last one */
    if (b <= a) return;
#ifdef MADV_HUGEPAGE
    (void)madvise((void *)a, b - a, MADV_HUGEPAGE);
#endif
    (void)madvise((void *)a, b - a, MADV_POPULATE_WRITE);
}
