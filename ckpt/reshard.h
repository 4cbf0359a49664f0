/*
 * ckpt/reshard.h — read any box of a logical tensor from the shard files that hold its pieces.
 *
 * A checkpoint written under one parallel layout stores each logical tensor as pieces spread over
 * several safetensors files (one per (tp, pp) shard), each piece tagged with the logical tensor's
 * global shape and its own offset ("shard:<name>" metadata, ckpt/safetensors.h). A process under
 * ANOTHER layout needs, for each of its local tensors, the box [offset, offset + extent) of the
 * logical tensor. This module answers exactly that and nothing more: it knows files, names,
 * shapes and boxes, never models. That is what makes a tp=2 checkpoint load at tp=1 (one box
 * assembled from two pieces) and a tp=1 checkpoint load at tp=2 (a box cut out of one piece).
 *
 * Reads use pread on the file descriptor (not the mmap), so a file truncated after it was opened
 * is an error message, not a SIGBUS. Runs of elements that are contiguous in both the piece and
 * the box are coalesced into one pread.
 */
#ifndef CKPT_RESHARD_H
#define CKPT_RESHARD_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/safetensors.h"

/* Safetensors files searched together for pieces of logical tensors. Zero-initialise. */
typedef struct {
    st_file *files;
    int n;
} ckpt_fileset;

/* Open (st_open: full header validation) every regular file of dir whose name starts with
 * prefix and ends in ".safetensors", in name order. Zero matching files is an error (the
 * message names dir and prefix). On error fs is left empty. Returns 0 or -1. */
int ckpt_fileset_open(ckpt_fileset *fs, const char *dir, const char *prefix, char *err,
                      size_t errlen);

/* Close every file; safe on a zeroed or closed set. */
void ckpt_fileset_close(ckpt_fileset *fs);

/* Global (logical) shape and dtype of tensor `name`, from the first file holding a piece of it.
 * Returns 1 when found, 0 when no file holds it, -1 on malformed shard metadata. */
int ckpt_fileset_global(const ckpt_fileset *fs, const char *name, st_shard *global,
                        st_dtype *dtype, char *err, size_t errlen);

/* Read the box [offset[d], offset[d] + extent[d]) (d < ndim) of logical tensor `name`, whose
 * global shape must be global[0..ndim), into dst: a row-major array of shape extent, element
 * size st_dtype_size(dtype). Every file piece of `name` contributes its intersection with the box;
 * pieces may overlap (a replicated tensor stored in several files). Errors (-1, one line naming
 * the tensor and, where it applies, the file): no file holds `name`; a piece has another dtype,
 * rank or global shape (the checkpoint belongs to a different model); the box lies outside the
 * global shape; the pieces leave part of the box uncovered (a shard file is missing); a short
 * read. ndim may be 0 (a scalar: one element). */
int ckpt_read_region(const ckpt_fileset *fs, const char *name, st_dtype dtype, int ndim,
                     const int64_t *global, const int64_t *offset, const int64_t *extent,
                     void *dst, char *err, size_t errlen);

#endif /* CKPT_RESHARD_H */
