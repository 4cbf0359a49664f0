/*
 * train/checkpoint_object.h — checkpoint tier 3 in the trainer: the archiver of committed tier-1
 * steps (objstore/archive.h) fed from the catalog's "committed" rows, its outcomes reported as
 * tier-3 catalog rows ("archived") and events, and the fetch of an archived step into tier 1 when
 * --resume auto finds nothing that verifies in tiers 0-2. Prefix ckpt_object_tr_. Rank 0 only
 * (the rank that commits and reports).
 */
#ifndef TRAIN_CHECKPOINT_OBJECT_H
#define TRAIN_CHECKPOINT_OBJECT_H

#include <stdint.h>

#include "ckpt/tiers.h"
#include "core/config.h"

#define CKPT_TIER_OBJECT 3

typedef struct ckpt_object_tr ckpt_object_tr;

/* NULL when cfg->ckpt_object is "". A bad URL, no endpoint or no credentials is mt_fail: one
 * clear line before training starts. tier1_root: RUN_DIR/ckpt. */
ckpt_object_tr *ckpt_object_tr_create(const mt_config *cfg, const char *tier1_root);

/* Tier-1 step `step` just committed: queue it for archiving (no-op on NULL). */
void ckpt_object_tr_committed(ckpt_object_tr *o, int64_t step);

/* Report what the archiver finished since the last call: a catalog row (tier 3, "archived",
 * bytes, upload ms) and an EV_CHECKPOINT event per archived step, "deleted" rows for retention,
 * an EV_CKPT_WARNING (and a warning line) per step not archived. No-op on NULL. */
void ckpt_object_tr_poll(ckpt_object_tr *o, const ckpt_sink *sink);

/* End of run: wait for the upload in flight, report it, stop the thread, free. */
void ckpt_object_tr_finish(ckpt_object_tr *o, const ckpt_sink *sink);

/* Fetch the newest archived step (want < 0) or step `want` into tier1_root, verified
 * (objstore_fetch_step). Returns 1 (*step fetched), 0 (tier 3 holds nothing), -1 with err. */
int ckpt_object_tr_fetch(ckpt_object_tr *o, int64_t want, int64_t *step, char *err, size_t errlen);

#endif /* TRAIN_CHECKPOINT_OBJECT_H */
