/*
 * train/checkpoint_impl.h — the checkpointer's private state, shared by train/checkpoint.c (saves,
 * tiers, catalog) and train/checkpoint_load.c (resume, model loading). Not a public header: other
 * modules use train/checkpoint.h.
 *
 * Threads: the main thread owns everything except the fields marked [bg], which the background
 * job (writer, then on world rank 0 the committer) writes while `done` is 0; the main thread reads
 * them only after joining it. run.db and MPI are touched by the main thread only.
 */
#ifndef MT_CHECKPOINT_IMPL_H
#define MT_CHECKPOINT_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "ckpt/ckpt.h"
#include "train/checkpoint.h"

enum { CK_IDLE = 0, CK_WRITING, CK_COMMITTING };

#define CK_MSG 1024
#define CK_MAX_DELETED 64

/* Outcome of one tier's commit on world rank 0 [bg]. */
typedef struct {
    int attempted, ok;
    char msg[CK_MSG];
    int64_t bytes;
    char checksum[24]; /* "crc32c:xxxxxxxx" of manifest.json */
    int64_t deleted[CK_MAX_DELETED]; /* steps removed by retention */
    int n_deleted;
} ck_commit_result;

struct checkpointer {
    trainer *tr;
    int on[CHECKPOINT_TIERS];
    char root[CHECKPOINT_TIERS][CKPT_PATH_MAX];
    int every, async, keep, major, stop_on_error;
    int adaptive; /* every = steps since the last save, set by a policy (ckpt_every = auto) */
    void (*on_resume)(void *user, int step); /* checkpoint_set_resume_hook */
    void *on_resume_user;
    int since;    /* adaptive: step of the last save, or the step before the first hook call */
    int writes_shard; /* this rank writes model/optim files (DP rank 0 of its (tp, pp) shard) */
    int delay_ms;     /* MINITRAIN_CKPT_WRITE_DELAY_MS (tests) */
    /* snapshot buffer: params | m | v (async), or m | v (sync: params written live) */
    float *buf;
    size_t buf_floats;
    const float *snap_params;
    float *snap_m, *snap_v;
    char *state_json; /* world rank 0: trainer_state.json text of the save in flight */
    /* the save in flight */
    int phase;
    int step;
    int tier_ok[CHECKPOINT_TIERS]; /* tiers this save writes (begin succeeded) */
    double t_begin;                /* timer_now() when it started */
    double snapshot_ms;
    pthread_t thread;
    int thread_live;
    atomic_int done;
    int w_err[CHECKPOINT_TIERS];        /* [bg] writer failed in tier t */
    char w_msg[CHECKPOINT_TIERS][CK_MSG];
    ck_commit_result commit[CHECKPOINT_TIERS]; /* [bg] */
    double write_ms;                   /* [bg] start of writing to end of commit */
    double files_ms;                   /* [bg] writing the files only */
    /* run state */
    int last_saved_step;
    int failed; /* a save failed with ckpt_on_error = stop */
    checkpoint_stats stats;
};

/* Log a run.db event with a JSON detail {"step":..,"tier":..,<key>:<text>} (any rank). */
void checkpoint_event(checkpointer *ck, const char *kind, int step, int tier, const char *key,
                      const char *text);

/* Upsert the catalog row of ROOT(tier)/step_N (world rank 0 only; no-op elsewhere). bytes < 0,
 * checksum NULL, NAN timings = unknown. */
void checkpoint_catalog(checkpointer *ck, int tier, int64_t step, const char *state,
                        int64_t bytes, const char *checksum, double snapshot_ms,
                        double write_ms);

#endif /* MT_CHECKPOINT_IMPL_H */
