/*
 * train/checkpoint_peer.h — the trainer's peer-replicated tier 0 (ckpt_replicas, per-node
 * ckpt_tier0_root): each rank's own restart state in its node's memory, a copy in its buddy's,
 * and the restart that rebuilds a replaced node's tier 0 from the buddies. Prefix ckpt_peer_tr_.
 * Used by train/checkpoint.c only (docs/formats.md, "Peer-replicated tier 0").
 *
 * One rank's tier-0 step (T0/rank_RRRRR/step_N, ckpt/peer.h) holds what THAT rank needs to
 * restart in the same layout, nothing more and nothing less:
 *   local.safetensors    "params", "optim.m", "optim.v": this rank's flat buffers (num_params
 *                        floats each, the full local AdamW state after the ZeRO gather), with
 *                        metadata minitrain.mesh = "world=W rank=R tp=.. pp=.. dp=.. ep=.. zero=.."
 *   trainer_state.json   the same state blob as tier 1 (train/checkpoint.c)
 *   manifest.json        ckpt_commit's, written last
 * A restart under another layout or world size does not use tier 0 (tier 1 reshards).
 */
#ifndef MT_CHECKPOINT_PEER_H
#define MT_CHECKPOINT_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "train/trainer.h"

#define CKPT_PEER_LOCAL_FILE "local.safetensors"

typedef struct ckpt_peer_tr ckpt_peer_tr;

/* Counters (milliseconds) of the last save: own write + commit, the copy to/from the buddy. */
typedef struct {
    double own_ms, copy_ms;
    int64_t bytes; /* bytes of this rank's own step */
} ckpt_peer_stats;

/* The peer tier 0 of tr, or NULL when it is off: on when cfg.ckpt_tier0 = 1 and either
 * cfg.ckpt_replicas = 1 or cfg.ckpt_tier0_root names the node (%n, $SLURMD_NODENAME). Collective
 * (all-gathers node names, picks buddies with ckpt_peer_buddies). Exits with a usage error when
 * cfg.ckpt_tier0_root cannot be expanded. Prints the buddy map on rank 0. */
ckpt_peer_tr *ckpt_peer_tr_create(trainer *tr);
void ckpt_peer_tr_free(ckpt_peer_tr *p);

/* Save step `step` (collective): this rank's params, m, v (num_params floats each) and the state
 * blob into its own tier 0, committed; then, with a buddy, the committed step goes to the buddy
 * (which commits and checks it against our manifest) while we receive the copies we hold.
 * Retention: cfg.ckpt_keep newest, in every directory. Failures are warnings (tier 0 never fails
 * a save). Runs on the main thread: this is training stall. */
void ckpt_peer_tr_save(ckpt_peer_tr *p, int64_t step, const float *params, const float *m,
                       const float *v, const char *state_json);

/* Choose the step to restart from in tier 0 (collective): the newest step (want < 0) or exactly
 * `want` for which every rank has a copy that verifies — its own, or the one its buddy holds —
 * provided no step newer than it exists in tiers 1/2 (newer_elsewhere, or -1). Ranks whose own
 * copy is missing or corrupt receive the buddy's copy, re-commit it in their own tier 0 and
 * verify it by CRC-32C ("tier 0 (peer)" in the log). Returns 1 (dir = this rank's step dir,
 * *fetched = ranks that used a peer copy, *step_out set) or 0 (fall back to tiers 1/2; the
 * reason was printed). */
int ckpt_peer_tr_choose(ckpt_peer_tr *p, int64_t want, int64_t newer_elsewhere, char *dir,
                        size_t len, int *fetched, int64_t *step_out);

/* The tier-0 directories of world rank `rank`'s step `step` that THIS rank holds, committed or
 * not: own = T0/rank_R/step_N when this is rank `rank`, held = T0/peer/rank_R/step_N when this
 * rank is `rank`'s buddy (ckpt_replicas = 1); "" where it holds none. For the corrupt-ckpt and
 * torn-ckpt faults (sched/hooks.c): on a real cluster only the process on a node reaches that
 * node's memory, so every copy has exactly one rank that can damage it. */
void ckpt_peer_tr_copies(const ckpt_peer_tr *p, int rank, int64_t step, char *own, char *held,
                         size_t len);

/* Remove this rank's own tier 0 and the copies it holds (end of a completed run). */
void ckpt_peer_tr_drop(ckpt_peer_tr *p);


/* 1 when step dir holds a local.safetensors (a peer tier-0 step), else 0. */
int ckpt_peer_tr_is_local(const char *dir);

/* Read local.safetensors of dir into params, m, v (n floats each). Returns 0 or -1 with err. */
int ckpt_peer_tr_read_local(const char *dir, size_t n, float *params, float *m, float *v,
                            char *err, size_t errlen);

#endif /* MT_CHECKPOINT_PEER_H */
