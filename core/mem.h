/*
 * core/mem.h — make large, freshly allocated host buffers ready for compute before it starts.
 *
 * Why: the first training step after a start or a resume used to cost ~5× a steady one, and
 * bench/bench_step showed where: ~675k minor page faults on the 124M model (gradients touched
 * first by zero_grad, AdamW m and v by the first optimizer step, activations by the first
 * forward), each fault a trap plus the zeroing of one 4 KiB page. The heap's large blocks are
 * fresh anonymous mmaps that Linux (transparent_hugepage = madvise, Debian's default) backs with
 * 4 KiB pages. mem_prepare asks for 2 MiB pages on the block (512× fewer faults, and fewer TLB
 * misses in the streaming passes of every later step) and faults it in at once, at allocation.
 */
#ifndef MT_MEM_H
#define MT_MEM_H

#include <stddef.h>

/* Prepare [p, p + bytes) of a heap block: madvise(MADV_HUGEPAGE) on its page-aligned interior,
 * then populate every page writable (MADV_POPULATE_WRITE; Linux >= 5.14) without changing the
 * contents. Blocks under 1 MiB are left alone (the heap's small blocks are already mapped).
 * Best effort: where the kernel refuses (older kernel, no THP, memory that is PROT_NONE) nothing
 * happens and the pages fault in on first use as before. Safe on any readable or unreadable
 * heap memory; never an error. */
void mem_prepare(void *p, size_t bytes);

#endif /* MT_MEM_H */
