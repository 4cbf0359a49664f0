/*
 * sched/sdc.h — silent-data-corruption checks: data-parallel replicas must hold bit-identical
 * parameters after every optimizer step (they start equal, see the same reduced gradients and
 * run the same deterministic AdamW). A replica whose weights drifted — a flipped bit in memory,
 * a faulty core — trains on without any crash or NaN; the invariant finds it (TrainCheck, OSDI
 * 2025: "data-parallel replicas hold identical weights"; Meta's Llama 3 report counts 1.4% of its
 * interruptions as silent data corruption).
 *
 * `--sdc-check-every N` (config key sdc_check_every): after optimizer step s with s % N == 0,
 * after the last step (before the model is saved) and once right after start-up or a resume,
 * every rank hashes its local parameters (model/param_hash.h: one hash of the dense tensors,
 * one of the MoE experts) and the world all-gathers them — 16 bytes per rank, one collective —
 * so every rank holds every hash and reaches the same verdict with no second round. Replica groups: ranks with the same
 * (tp_rank, pp_rank) compare their dense hash (the dp·cp ranks of one shard); with ep > 1 the
 * ranks with the same (tp_rank, pp_rank, ep_rank) compare their expert hash.
 *
 * A verdict: in a group, the value held by a strict majority is right and every other rank is
 * blamed; with no strict majority (dp 2: one against one) every rank of the group is named and
 * the verdict says it is a tie. A mismatch is logged as an EV_SDC event (core/events.h) by world
 * rank 0 and every rank exits at once with MT_EXIT_SDC (no final hooks: no checkpoint of the
 * corrupted state). The supervisor (`minitrain run`) reads the event, blames the rank's host and
 * relaunches with --resume auto, which sched_sdc_resume_plan turns into the newest checkpoint
 * that predates the mismatch (a step no later than the last check that agreed). The first check
 * of the relaunch verifies the loaded parameters against the EV_SDC_OK event of that step (same
 * layout), and train/checkpoint.c verifies them against the hashes its trainer_state.json
 * records.
 *
 * Cost: one pass over the parameters (hash_words64 at memory bandwidth) plus a world all-gather
 * of 16 bytes per rank; each check's milliseconds and their share of the step time are logged
 * (EV_SDC_OK ms, hash_ms, step_ms) and summed up at the end of the run.
 */
#ifndef MT_SCHED_SDC_H
#define MT_SCHED_SDC_H

#include <stddef.h>
#include <stdint.h>

#include "train/trainer.h"

#define SDC_MAX_RANKS 1024
#define SDC_MAX_BLAME 64

/* The verdict of one check. */
typedef struct {
    int mismatch;              /* 1 when some replica group disagrees */
    int nblame;                /* ranks named (ascending; at most SDC_MAX_BLAME) */
    int blame[SDC_MAX_BLAME];
    int tie;                   /* some disagreeing group had no strict majority */
    int groups;                /* replica groups that disagree */
    char text[512];            /* "rank 3 (tp 0 pp 0 dp 3) differs from its replicas ..." */
} sdc_verdict;

/* Judge every rank's hashes h: (world, 2) — h[2r] the dense hash of rank r, h[2r+1] its expert
 * hash — under the layout (tp, cp, pp, dp, ep; world = tp·cp·pp·dp, ranks as parallel/mesh.h).
 * Fills *v. Returns v->mismatch. Pure (unit-tested). */
int sdc_judge(const uint64_t *h, int world, int tp, int cp, int pp, int dp, int ep,
              sdc_verdict *v);

/* FNV-1a 64 of the (world, 2) hashes in rank order: the whole job's parameter fingerprint
 * (EV_SDC_OK hash, and what a resume is verified against). */
uint64_t sdc_world_hash(const uint64_t *h, int world);

/* Every rank's local parameter hashes (gpt_params_hash) into h: (world_size, 2), by an
 * all-gather over the world; *hash_ms (may be NULL): this rank's hashing time. Collective. */
void sdc_gather_hashes(trainer *tr, uint64_t *h, double *hash_ms);

/* Before checkpoint_resume (every rank, collective): when cfg.resume is "auto" and run.db holds
 * an EV_SDC event whose suspect checkpoints — steps after its last_good and up to its step,
 * committed before the event — would be the newest, set cfg.resume to the newest committed step
 * that is not suspect ("no" when none is left). Logs what it chose. */
void sched_sdc_resume_plan(trainer *tr);

/* After sched_attach_trainer (every rank): with cfg.sdc_check_every > 0, run the first check
 * now (a resumed step is verified against its EV_SDC_OK record) and register the "sdc" hook,
 * which must come after the "fault" hook (a bitflip at step K is caught by the check of step K).
 * Exits the process with MT_EXIT_SDC on a mismatch. No-op when the checks are off. */
void sched_sdc_attach(trainer *tr);

/* For the supervisor (sched/supervisor.c): the newest EV_SDC event of db into the blamed ranks
 * (up to max; *n set), its step and its text. Returns 0, or -1 when there is none. */
int sdc_last_verdict(struct sqlite3 *db, int *ranks, int max, int *n, int *step, char *text,
                     size_t len);

#endif /* MT_SCHED_SDC_H */
