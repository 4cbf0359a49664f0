/*
 * ckpt/safetensors.h — read and write the safetensors format (Hugging Face), prefix st_.
 *
 * Layout (https://github.com/huggingface/safetensors, byte by byte in docs/formats.md):
 *   bytes [0, 8)        N, unsigned 64-bit little-endian: length of the header
 *   bytes [8, 8+N)      UTF-8 JSON object, padded with spaces (0x20) so that 8+N is a multiple of 8:
 *                       {"__metadata__": {"k": "v", ...},
 *                        "name": {"dtype": "F32", "shape": [3, 4], "data_offsets": [begin, end]}, ...}
 *   bytes [8+N, EOF)    the byte buffer; offsets are relative to its start, end exclusive, tensors
 *                       contiguous (no gaps, no overlap) and together exactly filling it.
 * Tensor data is row-major, little-endian (this library supports little-endian hosts only).
 *
 * minitrain convention on top of the format (it is plain __metadata__, so other readers keep
 * working): a tensor that is one shard of a larger logical tensor carries the key
 *   "shard:<name>" = "global=[3072,768];offset=[1536,0]"
 * i.e. the global shape and the coordinates of this shard's first element in it; the shard's own
 * extent is the tensor's shape. This is what lets a checkpoint be resharded across (tp, pp) layouts.
 *
 * Errors: functions return 0 (or a count) on success and -1 on failure with one line in err[errlen]
 * naming the file and, where relevant, the tensor. Nothing here exits the process.
 */
#ifndef CKPT_SAFETENSORS_H
#define CKPT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/st_shard.h"

#define ST_MAX_HEADER_BYTES 100000000ull /* same cap as the reference Rust implementation */

typedef enum {
    ST_BOOL = 0,
    ST_U8,
    ST_I8,
    ST_I16,
    ST_U16,
    ST_F16,
    ST_BF16,
    ST_I32,
    ST_U32,
    ST_F32,
    ST_F64,
    ST_I64,
    ST_U64,
    ST_DTYPE_COUNT
} st_dtype;

/* Bytes per element (1, 2, 4 or 8), or 0 for an invalid dtype. */
size_t st_dtype_size(st_dtype d);
/* Format name as written in the header ("F32", "BF16", ...), or "?" for an invalid dtype. */
const char *st_dtype_name(st_dtype d);
/* Parse a header dtype name; returns 0 and sets *d, or -1 when unknown. */
int st_dtype_from_name(const char *name, st_dtype *d);

/* One tensor to write. shape[0..ndim) with ndim in [0, 8] (0 = scalar, one element); data points
 * at prod(shape) * st_dtype_size(dtype) bytes, row-major (may be NULL when that product is 0). */
typedef struct {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;
} st_tensor;

/* Write a safetensors file, streaming (header, then each tensor's bytes straight from its
 * pointer; no whole-file buffer). Tensors are laid out contiguously in the given order. metadata is
 * NULL or a JSON object text whose values are all strings (e.g. from st_meta_json). Names must be
 * non-empty, unique and not "__metadata__"; any "shard:<name>" metadata must name a tensor of this
 * file and fit its shape (offset + shape <= global in every dimension).
 * Durability: written to a partial file, fsynced, renamed onto path, directory fsynced — a failure
 * (ENOSPC, EROFS, EFBIG, EIO...) returns -1 with the path and strerror, and leaves any previous
 * file at path intact. Returns 0 or -1. */
int st_write(const char *path, const st_tensor *tensors, int n, const char *metadata_json,
             char *err, size_t errlen);

/* The first bytes of the file st_write writes for these tensors: the 8-byte little-endian header
 * length N, then N bytes of JSON header padded with spaces so that 8 + N is a multiple of 8 — the
 * tensors' data follows in order. Same checks and messages as st_write (path only names the file
 * in messages). Returns a malloc'd block (caller frees) with its length in *len, or NULL + err.
 * For writers that move the bytes themselves (ckpt/bulkio.h). */
char *st_header_block(const char *path, const st_tensor *tensors, int n,
                      const char *metadata_json, size_t *len, char *err, size_t errlen);

/* Data bytes of one tensor (numel x dtype size) in *bytes. Returns 0, or -1 on an invalid shape
 * or a size that does not fit in memory. */
int st_tensor_bytes(const st_tensor *t, uint64_t *bytes);

/* A tensor of an opened file. */
typedef struct {
    const char *name;             /* owned by the st_file */
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    int64_t numel;                /* product of shape (1 for a scalar) */
    uint64_t nbytes;              /* numel * st_dtype_size(dtype) */
    uint64_t offset;              /* absolute byte offset of the data in the file (8 + N + begin) */
    const void *data;             /* read-only mmap of the data, or NULL if mmap was unavailable */
} st_info;

/* An opened, validated safetensors file. Treat as opaque; zero-initialise or st_open it. */
typedef struct {
    char *path;
    int fd;
    uint64_t file_bytes;
    uint64_t header_bytes;        /* N */
    void *map;                    /* mmap of the whole file (NULL if unavailable) */
    int n_tensors;
    st_info *tensors;             /* in header order */
    int *by_name;                 /* indices into tensors sorted by name, for st_find */
    int n_meta;
    char **meta_keys;
    char **meta_values;
} st_file;

/* Open and validate a file: at least 8 bytes; N <= ST_MAX_HEADER_BYTES and within the file;
 * header UTF-8, a JSON object (only spaces after it); each tensor entry has a known dtype, a shape of
 * <= 8 non-negative integers and data_offsets [begin, end] with end - begin == numel * dtype size;
 * no duplicate names; offsets inside the buffer; tensors neither overlap nor leave gaps; the buffer
 * (file size - 8 - N) equals the bytes the tensors cover; __metadata__ values are strings. Each
 * violation is an error naming the file (and tensor). On error f is left closed. Returns 0 or -1. */
int st_open(st_file *f, const char *path, char *err, size_t errlen);

/* Tensor by name (binary search), or NULL. */
const st_info *st_find(const st_file *f, const char *name);
/* Number of tensors and the i-th in header order (NULL when out of range). */
int st_count(const st_file *f);
const st_info *st_info_at(const st_file *f, int i);

/* Copy tensor `name` into dst, which must hold exactly its nbytes (pread, so a file truncated after
 * st_open is an error, not a crash). Errors: no such tensor; dst_bytes != nbytes (message gives
 * both and the tensor's dtype/shape); short read. Returns 0 or -1. */
int st_read_tensor(const st_file *f, const char *name, void *dst, size_t dst_bytes, char *err,
                   size_t errlen);

/* __metadata__ value for key, or NULL. Also enumeration in header order. */
const char *st_metadata(const st_file *f, const char *key);
int st_metadata_count(const st_file *f);
const char *st_metadata_at(const st_file *f, int i, const char **key);

/* Release everything; safe on a zeroed or already closed st_file. */
void st_close(st_file *f);

/* ---- shard descriptions of an opened file (the builder and the value format: ckpt/st_shard.h) */

/* Shard description of tensor `name` in f: returns 1 when a "shard:<name>" key exists (parsed and
 * checked against the tensor's shape), 0 when the tensor is whole (s = its shape, zero offset),
 * -1 on error (no such tensor, malformed value, or shard not fitting the global shape). */
int st_shard_get(const st_file *f, const char *name, st_shard *s, char *err, size_t errlen);

#endif /* CKPT_SAFETENSORS_H */
