/*
 * train/checkpoint.h — the checkpointer of a training run: WHEN a checkpoint is saved (a trainer
 * hook), WHAT it holds (model/model_ckpt.h: shard files, trainer_state.json), the snapshot, and
 * verified resume. HOW it is written — background writer, commit handshake, tiers, retention —
 * is ckpt/writer.h and ckpt/tiers.h; the run.db catalog hears about it through their callbacks.
 *
 *   ROOT/step_00000500/                     ROOT = tier 0 /dev/shm/minitrain/<name>-<hash>/ckpt,
 *     model-tp00-pp00.safetensors                  tier 1 RUN_DIR/ckpt, tier 2 ckpt_durable
 *     optim-tp00-pp00.safetensors   AdamW m, v as "optim.m.<tensor>", "optim.v.<tensor>"
 *     trainer_state.json            step, tokens, data position per DP rank, RNG, LR schedule,
 *                                   optimizer t, model shape, mesh, file list, resolved config
 *     manifest.json                 written last by ckpt_commit (sizes + CRC-32C)
 *
 * Every tensor is stored with its LOCAL (this TP/PP shard's) shape and, when it is a piece of a
 * larger tensor, "shard:<name>" metadata giving the global shape and offset; model-tpXX-ppYY is
 * written by DP rank 0 of that (tp, pp) shard (with expert parallelism, DP ranks 1..ep-1 add
 * their experts as model-tpXX-ppYY-epZZ), TP-replicated tensors only by TP rank 0. Optimizer
 * state goes through trainer_gather_optimizer_state, so files do not depend on dp or ZeRO. Resume
 * reads each local tensor's box from whichever files hold pieces of it (ckpt/reshard.h), so a
 * checkpoint saved under one (tp, pp, dp) layout loads under another.
 *
 * The commit path of one save, in order: checkpoint_hook (step % ckpt_every == 0) ->
 * checkpoint_save: ckpt_writer_begin (step_N.tmp) -> snapshot (params and gathered AdamW m/v
 * into the writer's buffer: the only stall when ckpt_async = 1, "snapshot_ms"; copied by the
 * writer's job itself when it needs no collective) -> ckpt_writer_start_deferred (background
 * thread: the snapshot copy if deferred, then the files) -> later hooks: ckpt_writer_progress (one
 * small all-reduce per step boundary; rank 0 writes manifest.json and renames step_N.tmp ->
 * step_N in the background) -> catalog rows and the "checkpoint" event in run.db. At most one save
 * is in flight; one that falls due while the previous is still running waits ("ckpt_wait"). A
 * failed save logs "ckpt_error" and, per ckpt_on_error, stops the run cleanly (trainer
 * stop_requested, exit status MT_EXIT_ERROR) or continues without it; an already committed
 * checkpoint is never touched by a failed save.
 *
 * Test hook: MINITRAIN_CKPT_WRITE_DELAY_MS=N makes the writer sleep N ms before each file (to kill
 * a run in the middle of a save). MINITRAIN_SHM_DIR replaces /dev/shm/minitrain for tier 0.
 *
 * Several nodes: with ckpt_replicas = 1 or a per-node ckpt_tier0_root (%n, $SLURMD_NODENAME),
 * tier 0 is per rank and each rank's step is also held by a buddy rank on another node; a restart
 * rebuilds a lost node's tier 0 from those copies (train/checkpoint_peer.h, docs/formats.md).
 */
#ifndef MT_CHECKPOINT_H
#define MT_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/writer.h"
#include "train/trainer.h"

typedef struct checkpointer checkpointer;

/* Counters of one checkpointer (for logs and benchmarks): the writer's (ckpt/writer.h). */
typedef ckpt_writer_stats checkpoint_stats;

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
 * save at every step boundary, saves when step % ckpt_every == 0 — with ckpt_every = auto,
 * CHECKPOINT_AUTO_FIRST steps after the start and then as checkpoint_set_every says — and at the
 * end of the run, and
 * waits for the last save to commit when final = 1). Asynchronous saves from the hook copy their
 * snapshot on the writer's thread while the next step's forward and backward run (unsharded
 * AdamW state; ZeRO gathers it inline): whoever modifies parameters or m, v after the hook must
 * call trainer_before_update(tr) first, as trainer_run does before its optimizer step. Set
 * MINITRAIN_CKPT_SNAPSHOT_INLINE to copy inline instead. */
void checkpoint_hook(trainer *tr, int step, int final, void *user);

/* Call fn(user, step) in the middle of every resume: after the step to load is chosen and
 * verified, before its tensors are read (on every rank). For fault injection (sched/hooks.h). */
void checkpoint_set_resume_hook(checkpointer *ck, void (*fn)(void *user, int step), void *user);

/* ckpt_every = auto starts with a save after this many steps (to measure the stall). */
#define CHECKPOINT_AUTO_FIRST 10

/* Switch to "a save every `every` steps since the last one" (every >= 1), for an interval policy
 * that re-evaluates as it measures (sched/hooks.h, ckpt_every = auto). Must be called with the
 * same value on every rank at the same step. Allocates the snapshot buffer if needed. */
void checkpoint_set_every(checkpointer *ck, int every);

/* Save tr->step now (background when ckpt_async, else inline), waiting first for a save in
 * flight. Collective. For tests and benchmarks; the hook calls the same code, except that here
 * the snapshot is always copied before returning (the caller may modify the state at once). */
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

/* One copy of a checkpoint step: its tier (0, 1, 2), whether it is a buddy's replica (peer tier
 * 0, ckpt_replicas = 1), and its step directory (committed or not yet). */
typedef struct {
    int tier, replica;
    char dir[CKPT_PATH_MAX];
} checkpoint_copy;

#define CHECKPOINT_MAX_COPIES 4

/* The copies of world rank `rank`'s step `step` that THIS process is the one to reach, for the
 * corrupt-ckpt / torn-ckpt faults (sched/hooks.c), in the order tier 0 own, tier 0 replica,
 * tier 1, tier 2:
 *   as rank `rank`: its own tier-0 copy (the shared tier 0's step_N, or the per-rank
 *     T0/rank_R/step_N of a per-node or replicated tier 0) and tiers 1 and 2 (shared by all
 *     ranks: one damaged shard spoils the step);
 *   as `rank`'s buddy: the replica of it this rank holds (T0/peer/rank_R/step_N).
 * Tiers that are off are left out. Returns the number of copies written to out (at most
 * CHECKPOINT_MAX_COPIES). */
int checkpoint_copies(const checkpointer *ck, int rank, int64_t step, checkpoint_copy *out);

/* Free the checkpointer (after checkpoint_finish). NULL is a no-op. */
void checkpoint_free(checkpointer *ck);

/* ---- a run's checkpoints read from outside the job (`minitrain ckpt`; checkpoint_catalog.c) -- */

#define CHECKPOINT_MAX_ROOTS 8

typedef struct {
    int tier;                /* 0 memory, 1 RUN_DIR/ckpt, 2 durable (tier 3: checkpoint_archived) */
    char root[CKPT_PATH_MAX];
} checkpoint_tier_root;

/* The tier roots of a run directory, fastest tier first, and its run.db opened read-only. */
typedef struct {
    checkpoint_tier_root roots[CHECKPOINT_MAX_ROOTS];
    int n_roots;             /* >= 1: roots[0] is tier 1 until a faster one sorts before it */
    struct sqlite3 *db;      /* run.db, or NULL when the run has none */
} checkpoint_catalog;

/* Fill c with tier 1 (RUN_DIR/ckpt, always) and the other tiers' roots the run.db catalog names
 * (a tier-0 root only when it belongs to this run directory, ckpt_tier0_owned; at most
 * CHECKPOINT_MAX_ROOTS), sorted by tier. A missing or unreadable run.db (or one without a
 * catalog) leaves tier 1 alone. Never fails; close with checkpoint_catalog_close. */
void checkpoint_catalog_open(checkpoint_catalog *c, const char *run_dir);

/* The catalog's state ("committed", "corrupt", ...) of the checkpoint directory path, copied into
 * buf; NULL when there is no run.db or no row for path. */
const char *checkpoint_catalog_state(const checkpoint_catalog *c, const char *path, char *buf,
                                     size_t len);

/* The newest step (or exactly step want >= 0) that passes ckpt_verify, looking in the fastest tier
 * first; its directory goes to dir. A step that fails is skipped with a warning naming the step,
 * the tier and the problem (mt_warn), and last_err keeps the last such problem ("" when none
 * failed). Returns the step, or -1 when none verifies. */
int64_t checkpoint_catalog_newest_verified(const checkpoint_catalog *c, int64_t want, char *dir,
                                           size_t dirlen, char *last_err, size_t errlen);

/* fs_check_output (core/fs.h) for an output a user names next to the run run_dir (`ckpt export
 * --out`, `report --svg/--html`): besides the general rule, path must not be the run's own run.db
 * (and its -wal/-shm), model.safetensors or tokenizer.bin, nor lie inside any tier root of c
 * (RUN_DIR/ckpt, tier 0, the durable tier: a committed checkpoint is verified by its checksums).
 * Returns FS_OUT_ATOMIC, FS_OUT_IN_PLACE (only with FS_OUT_ALLOW_IN_PLACE) or -1 with err. */
int checkpoint_catalog_check_output(const checkpoint_catalog *c, const char *run_dir,
                                    const char *path, int flags, char *err, size_t errlen);

/* One tier-3 step of the catalog: archived to the object store (train/checkpoint_object.h). */
typedef struct {
    int64_t step;
    int64_t bytes;           /* all its objects; -1 unknown */
    char path[CKPT_PATH_MAX]; /* s3://bucket/prefix/step_N */
} checkpoint_archived;

/* The run.db catalog's tier-3 rows in state "archived" (a step retention removed is "deleted"),
 * ascending by step, into malloc'd *out (free it). The catalog's record, not a listing of the
 * bucket: nothing is contacted. Returns how many (0 without run.db). */
int checkpoint_catalog_archived(const checkpoint_catalog *c, checkpoint_archived **out);

void checkpoint_catalog_close(checkpoint_catalog *c);

#endif /* MT_CHECKPOINT_H */
