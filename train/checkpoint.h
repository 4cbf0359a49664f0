/*
 * train/checkpoint.h — checkpoints of a training run: sharded saves (optionally asynchronous),
 * storage tiers, retention, the run.db catalog, and verified resume.
 *
 * The ckpt/ library stores named tensors and commits directories; this module decides WHAT a
 * training checkpoint is and WHEN it is written:
 *
 *   ROOT/step_00000500/                     ROOT = tier 0 /dev/shm/minitrain/<name>-<hash>/ckpt,
 *     model-tp00-pp00.safetensors                  tier 1 RUN_DIR/ckpt, tier 2 ckpt_durable
 *     optim-tp00-pp00.safetensors   AdamW m, v as "optim.m.<tensor>", "optim.v.<tensor>"
 *     trainer_state.json            step, tokens, data position per DP rank, RNG, LR schedule,
 *                                   optimizer t, model shape, mesh, resolved config
 *     manifest.json                 written last by ckpt_commit (sizes + CRC-32C)
 *
 * Every tensor is stored with its LOCAL (this TP/PP shard's) shape and, when it is a piece of a
 * larger tensor, "shard:<name>" metadata giving the global shape and offset; model-tpXX-ppYY is
 * written by DP rank 0 of that (tp, pp) shard, and TP-replicated tensors only by TP rank 0.
 * Optimizer state goes through trainer_gather_optimizer_state, so files do not depend on dp or
 * ZeRO. Resume reads each local tensor's box from whichever files hold pieces of it
 * (ckpt/reshard.h), so a checkpoint saved under one (tp, pp, dp) layout loads under another.
 *
 * Asynchronous saves (ckpt_async = 1): at a step boundary the main thread copies parameters and
 * the gathered optimizer state into a host snapshot buffer — the only stall (snapshot_ms) — and a
 * background thread writes the files. At most one save is in flight; a save that falls due
 * while the previous one is still running waits for it (event "ckpt_wait"). No MPI call ever
 * happens off the main thread: at each later step boundary every rank contributes "my writer is
 * done / failed" to one small all-reduce; when all are done, world rank 0 commits (manifest,
 * rename, retention, tier-2 copy) in its background thread, and the next all-reduces carry that
 * result to every rank. A failed save logs "ckpt_error" and, per ckpt_on_error, stops the run
 * cleanly (trainer stop_requested, exit status MT_EXIT_ERROR) or continues without it; an
 * already committed checkpoint is never touched by a failed save.
 *
 * Test hook: MINITRAIN_CKPT_WRITE_DELAY_MS=N makes the writer sleep N ms before each file (to kill
 * a run in the middle of a save). MINITRAIN_SHM_DIR replaces /dev/shm/minitrain for tier 0.
 */
#ifndef MT_CHECKPOINT_H
#define MT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "train/model.h"
#include "train/trainer.h"

#define CHECKPOINT_TIERS 3
#define CHECKPOINT_STATE_FILE "trainer_state.json"
#define CHECKPOINT_STATE_FORMAT "minitrain-trainer-state"

typedef struct checkpointer checkpointer;

/* Counters of one checkpointer (for logs and benchmarks). Times in milliseconds. */
typedef struct {
    int saves;              /* saves started */
    int committed;          /* tier-1 commits that succeeded */
    int failures;           /* saves that failed (tier 1) */
    double last_snapshot_ms; /* training stall of the last save (async: the copy; sync: all) */
    double last_write_ms;   /* background write + commit of the last committed save */
    double last_files_ms;   /* of which: writing the files (serialise + write + fsync) */
    double total_stall_ms;  /* sum of stalls, including waits for a previous save */
    double total_wait_ms;   /* of which: waiting for a previous save to finish */
    int64_t last_bytes;     /* bytes of the last committed tier-1 step (all files) */
} checkpoint_stats;

/* Create the checkpointer of tr (after trainer_init): resolves the tier roots (tier 0 when
 * cfg.ckpt_tier0 = 1, tier 1 RUN_DIR/ckpt, tier 2 when cfg.ckpt_durable is set) and, when
 * cfg.ckpt_every > 0, allocates and pre-faults the snapshot buffer (3 x num_params floats when
 * async, 2 x when synchronous). Never fails (out of memory exits via mallocCheck). */
checkpointer *checkpoint_create(trainer *tr);

/* Apply cfg.resume before trainer_run (collective over the world; call on every rank):
 *   "no"   start from scratch (a warning event if RUN_DIR/ckpt already holds checkpoints);
 *   "auto" the newest committed step that verifies, in the fastest tier holding it; torn or
 *          corrupt steps are skipped with a "ckpt_skip" warning event (catalog state corrupt);
 *   "N"    exactly step N (fastest tier where it verifies), else an error.
 * Loading restores parameters, AdamW m/v/t, the step (data position and LR schedule follow from
 * it) and the sampling RNG; the model shape in trainer_state.json must equal this run's.
 * Returns 1 (resumed, tr->step set), 0 (fresh start), -1 with a user-facing message in err
 * (incompatible model, requested step missing or corrupt, unreadable files) — exit 2. */
int checkpoint_resume(checkpointer *ck, trainer *tr, char *err, size_t errlen);

/* Trainer hook; register with every = 1 and user = the checkpointer (it advances an in-flight
 * save at every step boundary, saves when step % ckpt_every == 0 and at the end of the run, and
 * waits for the last save to commit when final = 1). */
void checkpoint_hook(trainer *tr, int step, int final, void *user);

/* Save tr->step now (background when ckpt_async, else inline), waiting first for a save in
 * flight. Collective. For tests and benchmarks; the hook calls the same code. */
void checkpoint_save(checkpointer *ck, trainer *tr);

/* Block until no save is in flight (committed or failed). Collective. */
void checkpoint_wait(checkpointer *ck, trainer *tr);

/* End of run (after trainer_run, on every rank): waits for a save in flight; after a completed
 * run (step == cfg.steps) removes tier 0 (memory is for restarts only). Returns MT_EXIT_OK, or
 * MT_EXIT_ERROR when a failed save stopped the run (ckpt_on_error = stop). */
int checkpoint_finish(checkpointer *ck, trainer *tr);

void checkpoint_get_stats(const checkpointer *ck, checkpoint_stats *out);

/* Root directory of a tier (0, 1, 2), or NULL when that tier is off. */
const char *checkpoint_root(const checkpointer *ck, int tier);

/* Free the checkpointer (after checkpoint_finish). NULL is a no-op. */
void checkpoint_free(checkpointer *ck);

/* Tier-0 root of a run: $MINITRAIN_SHM_DIR (default /dev/shm/minitrain) + "/<name>-<8 hex>/ckpt",
 * the hex being CRC-32C of the run directory's real path (two runs with the same name never
 * share a tier 0). Returns 0, or -1 when run_dir does not exist or the path does not fit. */
int checkpoint_tier0_root(char *buf, size_t len, const char *run_dir, const char *name);

/* ---- loading without a trainer (serve, sample, export): train/checkpoint_load.c ------------- */

/* Build m (unsharded, tp = 1) from the committed checkpoint directory step_dir (ROOT/step_N):
 * the model shape comes from its trainer_state.json, every tensor is assembled from the
 * model-*.safetensors pieces whatever layout wrote them. The caller verifies first
 * (ckpt_verify); this only reads. step_out (may be NULL) gets the step. Returns 0 or -1 with
 * err. */
int checkpoint_load_model(gpt_model *m, const char *step_dir, int *step_out, char *err,
                          size_t errlen);

/* Read the model shape of step_dir's trainer_state.json into cfg (tp fields zero) and, when
 * config_json is not NULL, the resolved training config as a malloc'd JSON text (caller frees).
 * Returns 0 or -1 with err. */
int checkpoint_read_model_config(const char *step_dir, gpt_config *cfg, char **config_json,
                                 char *err, size_t errlen);

#endif /* MT_CHECKPOINT_H */
