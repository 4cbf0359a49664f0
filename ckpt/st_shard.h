/*
 * ckpt/st_shard.h — minitrain's shard description of a tensor and the safetensors __metadata__
 * builder (ckpt/st_shard.c), prefix st_.
 *
 * A tensor that is one shard of a larger logical tensor carries the metadata key
 *   "shard:<name>" = "global=[3072,768];offset=[1536,0]"
 * (docs/formats.md). This header is the string side of that convention: building the metadata
 * object and formatting / parsing the value. It knows nothing of files, so ckpt/safetensors.c
 * (which validates shard keys on write and answers st_shard_get on read) depends on it and not the
 * other way round.
 */
#ifndef CKPT_ST_SHARD_H
#define CKPT_ST_SHARD_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8

/* Where a stored tensor sits in its logical (global) tensor. For a tensor without a "shard:" key,
 * st_shard_get reports global = shape and offset = 0 (the tensor is whole). */
typedef struct {
    int ndim;
    int64_t global[ST_MAX_DIMS];  /* global (unsharded) shape */
    int64_t offset[ST_MAX_DIMS];  /* index of this shard's first element in the global tensor */
} st_shard;

/* Builds the __metadata__ object for st_write. Zero-initialise or st_meta_init() it. */
typedef struct {
    void *obj; /* cJSON object, private */
} st_meta;

void st_meta_init(st_meta *m);
/* Set key -> value (both strings; an existing key is replaced). Returns 0 or -1. */
int st_meta_set(st_meta *m, const char *key, const char *value, char *err, size_t errlen);
/* Set "shard:<tensor>" from a shard description (ndim in [0, 8], global >= 0, offset >= 0).
 * Returns 0 or -1. */
int st_meta_set_shard(st_meta *m, const char *tensor, const st_shard *s, char *err,
                      size_t errlen);
/* Compact JSON text of the object (malloc'd, caller frees), or NULL when nothing was set. */
char *st_meta_json(const st_meta *m);
void st_meta_free(st_meta *m);

/* Format / parse the shard value "global=[a,b];offset=[c,d]". Format returns 0 or -1 (buffer too
 * small); parse returns 0 or -1 with err describing what is malformed. */
int st_shard_format(char *buf, size_t len, const st_shard *s);
int st_shard_parse(const char *value, st_shard *s, char *err, size_t errlen);

#endif /* CKPT_ST_SHARD_H */
