/*
 * ckpt/bulkio.h — writing one large checkpoint file at disk speed: the safetensors bytes of
 * st_write, with their CRC-32C computed on the way out, in large writes whose writeback is started
 * and waited for window by window, optionally with O_DIRECT. Prefix ckpt_io_.
 *
 * The result is byte for byte the file st_write writes, with the same durability: a partial file
 * beside the target (core/fs.h fs_afile), fsynced, renamed, parent directory fsynced; on any error
 * the partial file is removed and an existing file at the path is untouched. What differs is the
 * cost: the CRC that ckpt_commit_known() puts in the manifest comes from this pass (no second
 * read of the file), and dirty pages never pile up (the final fsync has little left to do).
 */
#ifndef CKPT_BULKIO_H
#define CKPT_BULKIO_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/safetensors.h"

typedef struct {
    int direct;          /* 1: O_DIRECT through an aligned bounce buffer (where the file system
                            refuses O_DIRECT — tmpfs — the buffered path is used) */
    size_t chunk;        /* bytes per write(); 0: CKPT_IO_CHUNK */
    size_t window;       /* buffered path: start writeback (sync_file_range) every `window` bytes
                            and wait for the window before it; 0: CKPT_IO_WINDOW */
} ckpt_io_opts;

#define CKPT_IO_CHUNK ((size_t)8 << 20)
#define CKPT_IO_WINDOW ((size_t)64 << 20)

/* Where the time of writes went (milliseconds of the writing thread; summed over calls). */
typedef struct {
    double header_ms; /* serialise: building the safetensors header */
    double write_ms;  /* write()/pwrite() calls (copy into the page cache or the bounce buffer) */
    double crc_ms;    /* CRC-32C of the bytes as they go out */
    double sync_ms;   /* waiting for writeback windows, the final fsync, rename, directory fsync */
    uint64_t bytes;   /* bytes written */
    int files;        /* files written */
} ckpt_io_stats;

/* Add b into a (for a pool of writers). */
void ckpt_io_stats_add(ckpt_io_stats *a, const ckpt_io_stats *b);

/* Write tensors[0..n) with metadata_json as the safetensors file `path` (exactly st_write's
 * bytes and checks). o may be NULL (buffered, defaults). On success *crc (may be NULL) is the
 * CRC-32C (ckpt_crc32c) and *bytes (may be NULL) the size of the whole file, and the times are
 * added to *stats (may be NULL). Returns 0, or -1 with err naming the path, the byte offset and
 * strerror (ENOSPC, EIO, ...), the partial file removed. Safe to call from several threads on
 * different paths. */
int ckpt_io_write_st(const char *path, const st_tensor *tensors, int n, const char *metadata_json,
                     const ckpt_io_opts *o, uint32_t *crc, uint64_t *bytes, ckpt_io_stats *stats,
                     char *err, size_t errlen);

#endif /* CKPT_BULKIO_H */
