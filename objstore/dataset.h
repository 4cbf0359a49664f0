/*
 * objstore/dataset.h — token shards in an object store (issue 27): a prepared dataset uploaded as
 * s3://bucket/prefix/{shards, tokenizer.bin, index.json}, and read back through a local cache
 * directory of bounded size with shards prefetched ahead. Prefix objstore_dataset_. Knows files
 * and their digests, not the shard format (text/data.h reads the bytes; train/data_object.h joins
 * the two).
 *
 *   index.json  {"format":"minitrain-dataset","tokenizer":"tokenizer.bin" | null,
 *                "shards":[{"name","split","tokens","version","bytes","sha256"}...]}
 *
 * The commit rule of tier 3 again: every shard and the tokenizer go up first, index.json last; a
 * reader trusts only what index.json lists, and only bytes whose SHA-256 matches it.
 *
 * The cache (CACHE_DIR/NAME): a shard is downloaded into NAME.part, its size and SHA-256 checked,
 * then renamed to NAME and mapped. Reading shard i makes the next `prefetch` shards of the same
 * split the prefetch window: a background thread fetches them in order. When the completed files
 * exceed cache_limit bytes, the least recently used shard that is neither pinned (being read) nor
 * in the window is unmapped and deleted. A shard whose bytes do not verify is fetched once more,
 * then refused (the read fails with its name). The cache starts empty each open.
 */
#ifndef OBJSTORE_DATASET_H
#define OBJSTORE_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "objstore/s3.h"

/* One shard of index.json. */
typedef struct {
    char name[256];   /* file name (no '/') */
    char split[16];   /* "train", "val" */
    int64_t tokens;
    int version;      /* shard format version (text/data.h) */
    int64_t bytes;
    char sha256[65];
} objstore_shard;

/* What the cache did (objstore_dataset_stats). */
typedef struct {
    int64_t fetched;     /* shard downloads that completed and verified */
    int64_t waited;      /* reads that found their shard not yet cached (a stall) */
    int64_t evicted;     /* shards deleted from the cache by the limit */
    int64_t refetched;   /* downloads that failed the SHA-256 and were fetched again */
    int64_t cached_max;  /* largest cache size seen, bytes */
    double fetch_s;      /* seconds spent downloading (both threads) */
} objstore_dataset_stats;

typedef struct objstore_dataset objstore_dataset;

/* Upload local_dir's shards (sh[0..n): name, split, tokens, version; bytes and sha256 are filled
 * here) and, when tokenizer is non-NULL, local_dir/tokenizer, then index.json, to url
 * (s3://bucket/prefix). Returns 0, or -1 with err; without index.json nothing is readable. */
int objstore_dataset_upload(const s3_config *cfg, const char *url, const char *local_dir,
                            objstore_shard *sh, int n, const char *tokenizer, char *err,
                            size_t errlen);

/* Read url's index.json, fetch its tokenizer into cache_dir (not counted against the limit) and
 * start the prefetch thread. cache_limit in bytes must hold prefetch + 2 of the largest shards
 * (the window, the shard being read and one more), else an error says how much is needed.
 * Returns NULL with err (no index, bad index, unreachable store, cache dir not writable). */
objstore_dataset *objstore_dataset_open(const s3_config *cfg, const char *url,
                                        const char *cache_dir, int64_t cache_limit, int prefetch,
                                        char *err, size_t errlen);

/* The index's shards, in index order (the stream order within a split), and how many. */
const objstore_shard *objstore_dataset_shards(const objstore_dataset *ds, int *n);

/* Local path of the fetched tokenizer, or NULL when the index names none. */
const char *objstore_dataset_tokenizer(const objstore_dataset *ds);

/* Shard i (index order) mapped, pinned until objstore_dataset_release: from the cache, or
 * fetched now (waiting for the prefetcher when it is on it). Moves the prefetch window to the
 * shards after i. Returns NULL with err when it cannot be fetched or does not verify twice.
 * Thread-safe. */
const uint8_t *objstore_dataset_acquire(objstore_dataset *ds, int i, char *err, size_t errlen);
void objstore_dataset_release(objstore_dataset *ds, int i);

void objstore_dataset_stats_get(objstore_dataset *ds, objstore_dataset_stats *out);

/* Stop the prefetcher, unmap, delete the cached shards. NULL is a no-op. */
void objstore_dataset_close(objstore_dataset *ds);

#endif /* OBJSTORE_DATASET_H */
