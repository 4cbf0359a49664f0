/*
 * train/data_object.c — the trainer's loaders over an object-store dataset (train/data_object.h):
 * each split's shards from index.json become a data_source whose acquire/release are the shard
 * cache's (objstore/dataset.h), so text/data.c reads them exactly as it reads local files.
 */
#include "train/data_object.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/log.h"
#include "objstore/dataset.h"

typedef struct {
    objstore_dataset *ds;
    int *global; /* loader shard k -> index entry */
} split_source;

struct data_object {
    objstore_dataset *ds;
    split_source sp[2];
    data_source src[2];
};

static const uint8_t *acquire(void *user, int k, char *err, size_t errlen) {
    split_source *s = user;
    return objstore_dataset_acquire(s->ds, s->global[k], err, errlen);
}

static void release(void *user, int k) {
    split_source *s = user;
    objstore_dataset_release(s->ds, s->global[k]);
}

int data_object_is_url(const char *data) { return strncmp(data, "s3://", 5) == 0; }

/* Open split's loader over the index entries of that split. */
static int open_split(data_object *o, int which, const mt_config *cfg, const char *split,
                      data_loader *dl, char *err, size_t errlen) {
    int n;
    const objstore_shard *sh = objstore_dataset_shards(o->ds, &n);
    const char **names = callocCheck((size_t)n, sizeof(*names));
    uint64_t *tokens = callocCheck((size_t)n, sizeof(*tokens));
    int *version = callocCheck((size_t)n, sizeof(*version));
    split_source *s = &o->sp[which];
    s->ds = o->ds;
    s->global = callocCheck((size_t)n, sizeof(int));
    int m = 0;
    for (int i = 0; i < n; i++)
        if (strcmp(sh[i].split, split) == 0 && sh[i].tokens > 0) {
            names[m] = sh[i].name;
            tokens[m] = (uint64_t)sh[i].tokens;
            version[m] = sh[i].version;
            s->global[m++] = i;
        }
    o->src[which] = (data_source){s, acquire, release};
    int rc = data_loader_open_source(dl, &o->src[which], cfg->data, names, tokens, version, m,
                                     split, cfg->seq_len, (uint64_t)cfg->seed,
                                     strcmp(split, "train") == 0, err, errlen);
    free(names);
    free(tokens);
    free(version);
    return rc;
}

data_object *data_object_open(mt_config *cfg, int rank, data_loader *train, data_loader *val,
                              char *err, size_t errlen) {
    s3_config s3;
    s3_config_default(&s3);
    if (cfg->s3_endpoint[0]) snprintf(s3.endpoint, sizeof s3.endpoint, "%s", cfg->s3_endpoint);
    if (cfg->s3_region[0]) snprintf(s3.region, sizeof s3.region, "%s", cfg->s3_region);
    s3.part_mb = cfg->s3_part_mb;
    s3.max_get_mb_s = cfg->s3_get_mb_s;
    char dir[1200];
    int n = cfg->cache_dir[0] ? snprintf(dir, sizeof dir, "%s", cfg->cache_dir)
                              : snprintf(dir, sizeof dir, "%s/data_cache", cfg->run_dir);
    if (rank > 0) snprintf(dir + n, sizeof dir - (size_t)n, "/rank_%d", rank);
    data_object *o = callocCheck(1, sizeof(*o));
    o->ds = objstore_dataset_open(&s3, cfg->data, dir, (int64_t)(cfg->cache_limit * 1e6),
                                  cfg->prefetch, err, errlen);
    if (!o->ds) {
        free(o);
        return NULL;
    }
    if (open_split(o, 0, cfg, "train", train, err, errlen) ||
        open_split(o, 1, cfg, "val", val, err, errlen)) {
        data_loader_close(train);
        data_object_close(o, 1);
        return NULL;
    }
    const char *tok = objstore_dataset_tokenizer(o->ds);
    if (!cfg->tokenizer[0] && tok) snprintf(cfg->tokenizer, sizeof cfg->tokenizer, "%s", tok);
    if (rank == 0)
        log_info("data: %s through the cache %s (cache_limit %.0f MB, prefetch %d shards)",
                 cfg->data, dir, cfg->cache_limit, cfg->prefetch);
    return o;
}

void data_object_close(data_object *o, int rank) {
    if (!o) return;
    objstore_dataset_stats st;
    objstore_dataset_stats_get(o->ds, &st);
    if (rank == 0)
        log_info("data cache: %lld shard fetches (%.1f s), %lld reads waited for a shard, %lld "
                 "evicted, %lld refetched after a bad SHA-256, largest %.1f MB",
                 (long long)st.fetched, st.fetch_s, (long long)st.waited, (long long)st.evicted,
                 (long long)st.refetched, st.cached_max / 1e6);
    objstore_dataset_close(o->ds);
    free(o->sp[0].global);
    free(o->sp[1].global);
    free(o);
}
