/*
 * train/data_object.h — `train --data s3://bucket/prefix`: the trainer's two loaders (text/data.h)
 * reading a dataset that `prepare --out s3://...` put in an object store, through the shard cache
 * of objstore/dataset.h (cache_dir, cache_limit, prefetch). The loaders' windows, order and tokens
 * are those of the same shards opened locally; only where the bytes come from differs. Prefix
 * data_object_.
 */
#ifndef TRAIN_DATA_OBJECT_H
#define TRAIN_DATA_OBJECT_H

#include <stddef.h>

#include "core/config.h"
#include "text/data.h"

typedef struct data_object data_object;

/* 1 when data is an s3:// URL (the loaders below are for it), else 0. */
int data_object_is_url(const char *data);

/* Open cfg->data's index and cache (cache_dir, else run_dir/data_cache; rank_R below it when
 * rank > 0 shares the run directory) and the train (shuffled with cfg->seed) and val loaders on
 * it. When cfg->tokenizer is "" and the index names a tokenizer, cfg->tokenizer becomes the
 * fetched copy. Returns the cache (close it after the loaders), or NULL with err. */
data_object *data_object_open(mt_config *cfg, int rank, data_loader *train, data_loader *val,
                              char *err, size_t errlen);

/* Log what the cache did (fetched, waited, evicted, largest size; rank 0), stop it, delete the
 * cached shards. NULL is a no-op. */
void data_object_close(data_object *o, int rank);

#endif /* TRAIN_DATA_OBJECT_H */
