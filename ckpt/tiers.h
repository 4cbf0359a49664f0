/*
 * ckpt/tiers.h — where checkpoints go: the storage tiers, the commit of one step in one tier
 * (with retention), the durable copy, the choice of the step to resume from, and how all of that
 * is reported to the caller's catalog. Prefix ckpt_tiers_ (and ckpt_sink_ for the reports).
 *
 *   tier 0  memory    $MINITRAIN_SHM_DIR (default /dev/shm/minitrain)/<name>-<8 hex>/ckpt: a
 *                     restart on the same node reloads from RAM; removed after a completed run
 *   tier 1  run dir   RUN_DIR/ckpt: the checkpoint of record (only a tier-1 failure fails a save)
 *   tier 2  durable   any directory (network file system, bucket mount): a verified copy of the
 *                     committed tier-1 step, never written from memory directly
 *
 * Every tier root holds the ckpt/ckpt.h layout (step_N/, step_N.tmp/, manifest.json, latest).
 * This module knows directories and steps, not what is inside a step.
 *
 * Reports: ckpt/ never opens the run database. Whatever it has to say goes through a ckpt_sink
 * the caller fills: a catalog row per (tier, step) state change ("writing", "committed",
 * "failed", "deleted", "corrupt") and run events (core/events.h: EV_CKPT_ERROR,
 * EV_CKPT_WARNING, EV_CKPT_SKIP, EV_CKPT_WAIT, EV_CHECKPOINT) whose detail is built here with
 * ev_detail (valid JSON for any path or message).
 */
#ifndef CKPT_TIERS_H
#define CKPT_TIERS_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "ckpt/ckpt.h"

#define CKPT_TIERS 3
#define CKPT_MSG 1024
#define CKPT_MAX_DELETED 64

/* ---- reports ----------------------------------------------------------------------------------- */

/* One catalog row: step `step` of tier `tier` (directory `path`) is now in `state`. bytes < 0,
 * checksum NULL and NAN timings mean "unknown". */
typedef struct {
    int tier;
    int64_t step;
    const char *path;
    const char *state;     /* "writing", "committed", "failed", "deleted", "corrupt" */
    int64_t bytes;         /* all files of the committed step */
    const char *checksum;  /* "crc32c:xxxxxxxx" of its manifest.json */
    double snapshot_ms;    /* training stall of the save */
    double write_ms;       /* background write + commit */
} ckpt_record;

/* Where reports go. Either callback may be NULL (ignored). Called on the main thread only. */
typedef struct {
    void *user;
    void (*catalog)(void *user, const ckpt_record *r);
    /* a run event of this process: kind (EV_*) and its detail (ev_detail), which the callee
     * owns (ev_log logs and frees it) */
    void (*event)(void *user, const char *kind, cJSON *detail);
} ckpt_sink;

/* Hand detail d (ev_detail) to the sink as event `kind`; freed when nobody takes it. */
void ckpt_sink_log(const ckpt_sink *s, const char *kind, cJSON *d);

/* Report event `kind` with the detail {EVK_STEP: step, EVK_TIER: tier, key: text}; tier < 0
 * and key or text NULL leave those keys out. */
void ckpt_sink_event(const ckpt_sink *s, const char *kind, int64_t step, int tier,
                     const char *key, const char *text);

/* ---- the tiers --------------------------------------------------------------------------------- */

typedef struct {
    int on[CKPT_TIERS];
    /* root[0] is resolved even when tier 0 is off (so a completed run can drop a stale one); ""
     * when it cannot be resolved */
    char root[CKPT_TIERS][CKPT_PATH_MAX];
    int keep_last;      /* retention: the keep_last newest steps of each tier */
    int64_t keep_every; /* retention: and every step divisible by it, in tiers 1 and 2 (0: none) */
} ckpt_tiers;

/* Tier-0 root of a run: $MINITRAIN_SHM_DIR (default /dev/shm/minitrain) + "/<name>-<8 hex>/ckpt",
 * the hex being CRC-32C of the run directory's real path (two runs with the same name never
 * share a tier 0; '/' in the name becomes '_'). Returns 0, or -1 when run_dir does not exist or
 * the path does not fit. */
int ckpt_tier0_root(char *buf, size_t len, const char *run_dir, const char *name);

/* 1 when root (".../<name>-<8 hex>/ckpt") is a tier-0 root of run_dir, i.e. its hex is the CRC-32C
 * of run_dir's real path as ckpt_tier0_root writes it (a copied run directory's catalog names the
 * original's tier 0); 0 otherwise, or when run_dir does not exist. */
int ckpt_tier0_owned(const char *run_dir, const char *root);

/* Tier 1 = run_dir/ckpt; tier 0 when memory = 1; tier 2 = durable when not NULL or "". Returns 0,
 * or -1 when tier 0 was asked for but its root cannot be resolved (tier 0 is then off). */
int ckpt_tiers_init(ckpt_tiers *t, const char *run_dir, const char *name, int memory,
                    const char *durable, int keep_last, int64_t keep_every);

/* Root directory of a tier (0, 1, 2), or NULL when that tier is off. */
const char *ckpt_tiers_root(const ckpt_tiers *t, int tier);

/* Outcome of committing one step in one tier. */
typedef struct {
    int attempted, ok;
    char msg[CKPT_MSG];                /* the error (ok = 0) or a warning (ok = 1), or "" */
    int64_t bytes;                     /* all files of the committed step */
    char checksum[24];                 /* "crc32c:xxxxxxxx" of its manifest.json */
    int64_t deleted[CKPT_MAX_DELETED]; /* steps removed by retention */
    int n_deleted;
} ckpt_tier_result;

/* Commit step_N.tmp of a tier (ckpt_commit: manifest, fsync, the rename), measure it, then apply
 * retention (keep_last; keep_every except in tier 0), recording the steps it removed. A
 * retention failure is a warning in r->msg. Writes only r; safe on a background thread. */
void ckpt_tiers_commit(const ckpt_tiers *t, int tier, int64_t step, ckpt_tier_result *r);

/* ckpt_tiers_commit with the CRCs the writer computed while writing (ckpt_commit_known); the
 * retention that follows then verifies this fresh step without re-reading it (ckpt_retain_fresh).
 * known NULL / n_known 0: exactly ckpt_tiers_commit. */
void ckpt_tiers_commit_known(const ckpt_tiers *t, int tier, int64_t step,
                             const ckpt_known_file *known, int n_known, ckpt_tier_result *r);

/* Tier 2: copy committed tier-1 step_N file by file (core/fs: each copy durable), commit it,
 * check that the new manifest lists exactly the sizes and CRCs of the source (a copy corrupted in
 * flight is removed again), then apply retention. Writes only r; safe on a background thread. */
void ckpt_tiers_copy_durable(const ckpt_tiers *t, int64_t step, ckpt_tier_result *r);

/* The step to resume from: the newest committed step (want < 0) or exactly step `want`, in the
 * fastest tier where it passes ckpt_verify. Steps that fail are skipped with a "ckpt_skip" event
 * and a "corrupt" catalog row. Returns 1 (*tier, *step set), 0 (nothing found, want < 0), or -1
 * with err (step `want` missing, or none of its copies verifies). Reads every file it verifies. */
int ckpt_tiers_choose(const ckpt_tiers *t, int64_t want, int *tier, int64_t *step,
                      const ckpt_sink *sink, char *err, size_t errlen);

/* Remove tier 0 of this run (the directory above its root), reporting its steps "deleted". For
 * the end of a completed run: memory copies are for restarts only. */
void ckpt_tiers_drop_memory(const ckpt_tiers *t, const ckpt_sink *sink);

/* Report the catalog row of ROOT(tier)/step_N (no-op when the tier has no root). */
void ckpt_tiers_report(const ckpt_tiers *t, const ckpt_sink *sink, int tier, int64_t step,
                       const char *state, int64_t bytes, const char *checksum,
                       double snapshot_ms, double write_ms);

#endif /* CKPT_TIERS_H */
