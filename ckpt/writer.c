/*
 * ckpt/writer.c — the checkpoint writer: one save in flight, written in the background from a
 * snapshot, committed by rank 0 after a multi-rank handshake (see ckpt/writer.h for the path of
 * one save).
 *
 * Why this shape: the stall a save imposes on training must be a memory copy, not disk I/O, so
 * the caller only snapshots and the rest is one background job per save. Collectives stay on the
 * main thread: the job signals its end through an atomic flag, and every rank folds that flag
 * into one 3-double max-all-reduce per step boundary while a save is in flight, so all ranks
 * learn "every writer finished" (or "someone failed") at the same step and take the same
 * decision. Rank 0 then commits in the background (ckpt/tiers.h), and the same all-reduce
 * reports the commit's outcome. One save in flight at a time keeps the memory cost to one
 * snapshot.
 *
 * Speed (bench/bench_ckpt): the files of a save are written by a small pool (tier 0's memory copy
 * and tier 1's disk writes overlap, two streams keep the disk busy) through ckpt/bulkio.c, whose
 * CRCs go to the commit (ckpt_commit_known) so nothing is read back. The snapshot itself may be
 * deferred to the job (ckpt_writer_start_deferred): the caller's next forward/backward hides the
 * copy, and ckpt_writer_snapshot_wait() before its optimizer step is the only stall left.
 *
 * Threads: the main thread owns everything except the fields marked [bg], which the background
 * job (writer, then on rank 0 the committer) writes while `done` is 0; the main thread reads
 * them only after joining it. Reports (the sink) and collectives happen on the main thread only.
 */
#define _GNU_SOURCE /* syscall: gettid, ioprio_set */
#include "ckpt/writer.h"

#include "ckpt/bulkio.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/check.h"
#include "core/stats.h"
#include "core/events.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/timer.h"

enum { W_IDLE = 0, W_WRITING, W_COMMITTING };

static const char *TIER_NAME[CKPT_TIERS] = {"memory", "run dir", "durable"};

struct ckpt_writer {
    ckpt_writer_opts o;
    void *buf; /* the snapshot buffer */
    size_t buf_bytes;
    /* the save in flight */
    int phase;
    int64_t step;
    const ckpt_file *files;
    int n_files;
    char state_name[128];
    char *state_json;         /* rank 0: the state blob of the save in flight */
    int tier_ok[CKPT_TIERS];  /* tiers this save writes (begin succeeded) */
    double t_begin;           /* timer_now() when it began */
    double snapshot_ms;
    pthread_t thread;
    int thread_live;
    atomic_int done;
    /* a snapshot copied by the background job (ckpt_writer_start_deferred) */
    ckpt_snapshot_fn snap_fn;
    void *snap_user;
    int snap_pending;       /* main thread: the copy may still run; the caller must wait for it */
    int snap_done;          /* guarded by snap_lock */
    pthread_mutex_t snap_lock;
    pthread_cond_t snap_cond;
    int w_err[2];                          /* [bg] writer failed in tier t */
    char w_msg[2][CKPT_MSG];               /* [bg] */
    ckpt_known_file *known[2];             /* [bg] CRCs computed while writing, per tier */
    int n_known[2];                        /* [bg] */
    ckpt_io_stats io;                      /* [bg] phases of the files of the last save */
    ckpt_tier_result commit[CKPT_TIERS];   /* [bg] */
    double write_ms;                       /* [bg] start of writing to end of commit */
    double files_ms;                       /* [bg] writing the files only */
    /* the steps a save overlaps (ckpt_writer_note_step): their time beyond the median of the
     * last CKPT_BASE_STEPS steps with no save in flight is part of the save's cost */
    double base[8];
    int n_base, next_base;
    double overlap_ms;
    /* run state */
    int failed; /* a save failed with stop_on_error */
    ckpt_writer_stats stats;
};

static int is_rank0(const ckpt_writer *w) { return w->o.group.rank == 0; }

/* ---- reports (main thread) --------------------------------------------------------------------- */

static void ckpt_event(ckpt_writer *w, const char *kind, int64_t step, int tier, const char *key,
                       const char *text) {
    ckpt_sink_event(&w->o.sink, kind, step, tier, key, text);
}

/* Catalog rows come from rank 0 only (it created and committed the directories). */
static void ckpt_catalog(ckpt_writer *w, int tier, int64_t step, const char *state, int64_t bytes,
                         const char *checksum, double snapshot_ms, double write_ms) {
    if (is_rank0(w))
        ckpt_tiers_report(&w->o.tiers, &w->o.sink, tier, step, state, bytes, checksum,
                          snapshot_ms, write_ms);
}

/* The "checkpoint" event of a committed tier: where it is, how big, what it cost. */
static void committed_event(ckpt_writer *w, int tier, const ckpt_tier_result *r, double stall) {
    char dir[CKPT_PATH_MAX];
    ckpt_step_path(dir, sizeof(dir), w->o.tiers.root[tier], w->step, "");
    cJSON *d = ev_detail();
    ev_num(d, EVK_STEP, (double)w->step);
    ev_num(d, EVK_TIER, tier);
    ev_str(d, EVK_PATH, dir);
    ev_num(d, EVK_BYTES, (double)r->bytes);
    ev_num(d, EVK_SNAPSHOT_MS, stall);
    ev_num(d, EVK_OVERLAP_MS, w->overlap_ms);
    ev_num(d, EVK_WRITE_MS, w->write_ms);
    ckpt_sink_log(&w->o.sink, EV_CHECKPOINT, d);
}

/* ---- create / free ----------------------------------------------------------------------------- */

ckpt_writer *ckpt_writer_create(const ckpt_writer_opts *o) {
    ckpt_writer *w = callocCheck(1, sizeof(*w));
    w->o = *o;
    w->stats.last_failed_step = -1;
    atomic_init(&w->done, 1);
    pthread_mutex_init(&w->snap_lock, NULL);
    pthread_cond_init(&w->snap_cond, NULL);
    return w;
}

void *ckpt_writer_buffer(ckpt_writer *w, size_t bytes) {
    if (w->buf == NULL || w->buf_bytes < bytes) {
        free(w->buf);
        w->buf = mallocCheck(bytes);
        memset(w->buf, 0, bytes); /* pre-fault: a save then costs a copy */
        w->buf_bytes = bytes;
    }
    return w->buf;
}

void ckpt_writer_free(ckpt_writer *w) {
    if (w == NULL) return;
    if (w->thread_live) pthread_join(w->thread, NULL);
    free(w->buf);
    free(w->state_json);
    free(w->known[0]);
    free(w->known[1]);
    pthread_mutex_destroy(&w->snap_lock);
    pthread_cond_destroy(&w->snap_cond);
    free(w);
}

void ckpt_writer_get_stats(const ckpt_writer *w, ckpt_writer_stats *out) { *out = w->stats; }
const ckpt_tiers *ckpt_writer_tiers(const ckpt_writer *w) { return &w->o.tiers; }
int ckpt_writer_busy(const ckpt_writer *w) { return w->phase != W_IDLE; }

void ckpt_writer_note_step(ckpt_writer *w, double step_s) {
    if (!(step_s > 0) || !isfinite(step_s)) return;
    if (w->phase == W_IDLE) {
        w->base[w->next_base] = step_s;
        w->next_base = (w->next_base + 1) % 8;
        if (w->n_base < 8) w->n_base++;
        return;
    }
    if (w->n_base == 0) return; /* no baseline yet (a save from the first steps): not counted */
    double extra = step_s - stats_median_copy(w->base, (size_t)w->n_base);
    if (extra > 0) {
        w->overlap_ms += extra * 1e3;
        w->stats.total_overlap_ms += extra * 1e3;
    }
}
int ckpt_writer_failed(const ckpt_writer *w) { return w->failed; }

/* ---- the background jobs ----------------------------------------------------------------------- */

static void test_delay(const ckpt_writer *w) {
    if (w->o.delay_ms > 0) usleep((useconds_t)w->o.delay_ms * 1000);
}

/* ---- the write pool ----------------------------------------------------------------------------
 * One job per (tier, file) plus rank 0's state blob per tier, taken in order by a small pool of
 * threads: the files of a save are independent, so tier 0 (a memory copy) and tier 1 (the disk)
 * proceed at once, and two streams keep the disk queue full while one thread computes a CRC. */

typedef struct {
    int tier, file; /* file -1: the state blob */
    int ok;
    uint32_t crc;
    uint64_t bytes;
    char msg[CKPT_MSG];
} write_job;

typedef struct {
    ckpt_writer *w;
    write_job *jobs;
    int n_jobs;
    atomic_int next;
    atomic_int tier_failed[2];
    pthread_mutex_t lock; /* guards io */
    ckpt_io_stats io;
    ckpt_io_opts io_opts;
} write_pool;

static void run_job(write_pool *p, write_job *j) {
    ckpt_writer *w = p->w;
    char dir[CKPT_PATH_MAX], path[CKPT_PATH_MAX];
    if (atomic_load(&p->tier_failed[j->tier])) return; /* that tier's save failed already */
    ckpt_step_path(dir, sizeof(dir), w->o.tiers.root[j->tier], w->step, ".tmp");
    test_delay(w);
    if (j->file < 0) {
        j->ok = ckpt_write_json(dir, w->state_name, w->state_json, j->msg, sizeof(j->msg)) == 0;
    } else {
        const ckpt_file *f = &w->files[j->file];
        ckpt_io_stats st = {0};
        j->ok = fs_join(path, sizeof(path), dir, f->name, j->msg, sizeof(j->msg)) == 0 &&
                ckpt_io_write_st(path, f->tensors, f->n_tensors, f->metadata_json, &p->io_opts,
                                 &j->crc, &j->bytes, &st, j->msg, sizeof(j->msg)) == 0;
        pthread_mutex_lock(&p->lock);
        ckpt_io_stats_add(&p->io, &st);
        pthread_mutex_unlock(&p->lock);
    }
    if (!j->ok) atomic_store(&p->tier_failed[j->tier], 1);
}

static void *pool_main(void *arg) {
    write_pool *p = arg;
    for (int i; (i = atomic_fetch_add(&p->next, 1)) < p->n_jobs;) run_job(p, &p->jobs[i]);
    return NULL;
}

/* Write every job with min(jobs, threads) threads (this one included); threads = 1 when the test
 * delay is set, so the tests' timing of a save stays what they were tuned for. */
static void run_pool(write_pool *p, int threads) {
    if (p->w->o.delay_ms > 0 || threads < 1) threads = 1;
    if (threads > p->n_jobs) threads = p->n_jobs;
    pthread_t th[CKPT_WRITER_MAX_THREADS];
    int started = 0;
    for (int i = 1; i < threads && i < CKPT_WRITER_MAX_THREADS; i++)
        if (pthread_create(&th[started], NULL, pool_main, p) == 0) started++;
    pool_main(p);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
}

/* The deferred snapshot copy, first thing of the background job; then the training thread may
 * modify what was copied (ckpt_writer_snapshot_wait returns). */
static void run_snapshot(ckpt_writer *w) {
    if (w->snap_fn) w->snap_fn(w->snap_user);
    pthread_mutex_lock(&w->snap_lock);
    w->snap_done = 1;
    pthread_cond_broadcast(&w->snap_cond);
    pthread_mutex_unlock(&w->snap_lock);
}

/* The background writer yields to training once the snapshot is copied (the copy itself is on
 * the step's critical path, so it runs at normal priority): CPU nice 19 and the idle I/O class
 * for this thread (Linux: setpriority on a thread id and ioprio_set act on that thread alone;
 * the pool threads it starts inherit both). A step's threads then preempt the CRC and the
 * write() copies, and the disk serves training's reads first. Best effort: failure changes
 * nothing but the interference. Only when the job runs in its own thread (async), and not with
 * MINITRAIN_CKPT_WRITER_PRIORITY=normal (the A/B of bench/bench_ckpt). */
static void lower_priority(const ckpt_writer *w) {
    const char *env = getenv("MINITRAIN_CKPT_WRITER_PRIORITY");
    if (!w->thread_live || (env != NULL && strcmp(env, "normal") == 0)) return;
#ifdef __linux__
    pid_t tid = (pid_t)syscall(SYS_gettid);
    (void)setpriority(PRIO_PROCESS, (id_t)tid, 19);
#ifdef SYS_ioprio_set
    enum { IOPRIO_WHO_PROCESS = 1, IOPRIO_CLASS_IDLE = 3, IOPRIO_CLASS_SHIFT = 13 };
    (void)syscall(SYS_ioprio_set, IOPRIO_WHO_PROCESS, (int)tid, IOPRIO_CLASS_IDLE << IOPRIO_CLASS_SHIFT);
#endif
#endif
}

static void *writer_main(void *arg) {
    ckpt_writer *w = arg;
    run_snapshot(w);
    lower_priority(w);
    double t0 = timer_now();
    write_pool p;
    memset(&p, 0, sizeof(p));
    p.w = w;
    p.jobs = callocCheck((size_t)2 * (w->n_files + 1) + 1, sizeof(write_job));
    pthread_mutex_init(&p.lock, NULL);
    p.io_opts.direct = w->o.io_direct;
    for (int t = 0; t < 2; t++) {
        if (!w->tier_ok[t]) continue;
        for (int i = 0; i < w->n_files; i++) p.jobs[p.n_jobs++] = (write_job){.tier = t, .file = i};
        if (w->state_json) p.jobs[p.n_jobs++] = (write_job){.tier = t, .file = -1};
    }
    run_pool(&p, w->o.io_threads > 0 ? w->o.io_threads : CKPT_WRITER_THREADS);
    for (int t = 0; t < 2; t++) {
        free(w->known[t]);
        w->known[t] = callocCheck((size_t)w->n_files + 1, sizeof(ckpt_known_file));
        w->n_known[t] = 0;
    }
    for (int i = 0; i < p.n_jobs; i++) { /* first failure of each tier, in job order */
        write_job *j = &p.jobs[i];
        if (!j->ok && !w->w_err[j->tier] && j->msg[0]) {
            w->w_err[j->tier] = 1;
            snprintf(w->w_msg[j->tier], sizeof(w->w_msg[j->tier]), "%s", j->msg);
        }
        if (j->ok && j->file >= 0) {
            ckpt_known_file *k = &w->known[j->tier][w->n_known[j->tier]++];
            snprintf(k->name, sizeof(k->name), "%s", w->files[j->file].name);
            k->bytes = j->bytes;
            k->crc = j->crc;
        }
    }
    for (int t = 0; t < 2; t++)
        if (atomic_load(&p.tier_failed[t]) && !w->w_err[t]) {
            w->w_err[t] = 1;
            snprintf(w->w_msg[t], sizeof(w->w_msg[t]), "a checkpoint file was not written");
        }
    w->io = p.io;
    pthread_mutex_destroy(&p.lock);
    free(p.jobs);
    w->write_ms = w->files_ms = (timer_now() - t0) * 1e3;
    atomic_store(&w->done, 1);
    return NULL;
}

/* Rank 0: the commit of every tier written (manifest, rename, retention), then the durable copy. */
static void *commit_main(void *arg) {
    ckpt_writer *w = arg;
    double t0 = timer_now();
    if (w->tier_ok[0])
        ckpt_tiers_commit_known(&w->o.tiers, 0, w->step, w->known[0], w->n_known[0],
                                &w->commit[0]);
    ckpt_tiers_commit_known(&w->o.tiers, 1, w->step, w->known[1], w->n_known[1], &w->commit[1]);
    if (w->o.tiers.on[2] && w->commit[1].ok)
        ckpt_tiers_copy_durable(&w->o.tiers, w->step, &w->commit[2]);
    w->write_ms += (timer_now() - t0) * 1e3;
    atomic_store(&w->done, 1);
    return NULL;
}

static void start_job(ckpt_writer *w, void *(*fn)(void *)) {
    atomic_store(&w->done, 0);
    if (w->o.async) {
        w->thread_live = 1; /* before the thread starts: lower_priority reads it */
        int e = pthread_create(&w->thread, NULL, fn, w);
        if (e == 0) return;
        w->thread_live = 0;
        mt_warn("cannot start the checkpoint thread (%s); saving inline", strerror(e));
    }
    fn(w);
}

static void join_job(ckpt_writer *w) {
    if (w->thread_live) {
        pthread_join(w->thread, NULL);
        w->thread_live = 0;
    }
    if (w->phase == W_WRITING) w->snap_pending = 0; /* the job copied the snapshot first */
}

/* ---- the main-thread state machine ------------------------------------------------------------- */

static void remove_tmp(ckpt_writer *w, int tier) {
    char dir[CKPT_PATH_MAX], ignored[256];
    if (!is_rank0(w) || !w->o.tiers.on[tier]) return;
    if (ckpt_step_path(dir, sizeof(dir), w->o.tiers.root[tier], w->step, ".tmp") == 0)
        fs_remove_tree(dir, ignored, sizeof(ignored)); /* best effort; begin removes stale ones */
}

/* A tier-1 failure of the save of w->step, known on every rank. msg: this rank's message or
 * NULL (it failed elsewhere). */
static void save_failed(ckpt_writer *w, const char *msg) {
    w->stats.failures++;
    w->stats.last_failed_step = w->step;
    ckpt_catalog(w, 1, w->step, "failed", -1, NULL, NAN, NAN);
    if (w->tier_ok[0]) ckpt_catalog(w, 0, w->step, "failed", -1, NULL, NAN, NAN);
    remove_tmp(w, 0);
    remove_tmp(w, 1);
    if (msg) mt_warn("checkpoint of step %" PRId64 " failed: %s", w->step, msg);
    if (w->o.stop_on_error) w->failed = 1;
}

/* Every rank's writer finished (err1/err0: some rank failed in tier 1/0): rank 0 commits. */
static void after_write(ckpt_writer *w, int err1, int err0) {
    for (int t = 0; t < 2; t++)
        if (w->w_err[t]) ckpt_event(w, EV_CKPT_ERROR, w->step, t, EVK_ERROR, w->w_msg[t]);
    if (err0 && w->tier_ok[0]) {
        if (w->w_err[0]) mt_warn("tier-0 checkpoint of step %" PRId64 " not saved: %s", w->step,
                                 w->w_msg[0]);
        ckpt_catalog(w, 0, w->step, "failed", -1, NULL, NAN, NAN);
        remove_tmp(w, 0);
        w->tier_ok[0] = 0;
    }
    if (err1) {
        w->phase = W_IDLE;
        save_failed(w, w->w_err[1] ? w->w_msg[1] : NULL);
        return;
    }
    w->phase = W_COMMITTING;
    if (is_rank0(w)) start_job(w, commit_main);
}

/* The commit finished (err1: tier 1 failed): report every tier to the catalog. */
static void after_commit(ckpt_writer *w, int err1) {
    double stall = w->snapshot_ms;
    if (!w->o.async) stall = (timer_now() - w->t_begin) * 1e3;
    w->phase = W_IDLE;
    if (is_rank0(w)) {
        for (int t = 0; t < CKPT_TIERS; t++) {
            ckpt_tier_result *r = &w->commit[t];
            if (!r->attempted) continue;
            if (r->ok) {
                ckpt_catalog(w, t, w->step, "committed", r->bytes, r->checksum, stall,
                             w->write_ms);
                for (int i = 0; i < r->n_deleted; i++)
                    ckpt_catalog(w, t, r->deleted[i], "deleted", -1, NULL, NAN, NAN);
                if (r->msg[0]) ckpt_event(w, EV_CKPT_WARNING, w->step, t, EVK_WARNING, r->msg);
                committed_event(w, t, r, stall);
            } else {
                ckpt_event(w, EV_CKPT_ERROR, w->step, t, EVK_ERROR, r->msg);
                ckpt_catalog(w, t, w->step, "failed", -1, NULL, NAN, NAN);
                if (t != 1) mt_warn("tier-%d (%s) checkpoint of step %" PRId64 " not committed: %s",
                                    t, TIER_NAME[t], w->step, r->msg);
            }
        }
    }
    if (err1) {
        save_failed(w, is_rank0(w) ? w->commit[1].msg : NULL);
        return;
    }
    w->stats.committed++;
    w->stats.last_write_ms = w->write_ms;
    w->stats.last_files_ms = w->files_ms;
    w->stats.last_io = w->io;
    if (is_rank0(w)) w->stats.last_bytes = w->commit[1].bytes;
    log_info("checkpoint step %" PRId64 " committed (%.1f MB%s%s): training stall %.1f ms, "
             "background write+commit %.0f ms", w->step, w->commit[1].bytes / 1e6,
             w->commit[0].ok ? ", tier 0 + 1" : ", tier 1", w->commit[2].ok ? " + 2" : "", stall,
             w->write_ms);
}

static void group_max(ckpt_writer *w, double *v, int n) {
    if (w->o.group.max_f64) w->o.group.max_f64(w->o.group.user, v, n);
}

void ckpt_writer_progress(ckpt_writer *w, int wait) {
    while (w->phase != W_IDLE) {
        if (wait) join_job(w);
        int busy = w->thread_live && !atomic_load(&w->done);
        double v[3] = {busy, 0, 0}; /* busy, tier-1 failure, tier-0 failure */
        if (!busy && w->phase == W_WRITING) {
            v[1] = w->w_err[1];
            v[2] = w->w_err[0];
        } else if (!busy && w->phase == W_COMMITTING && is_rank0(w)) {
            v[1] = w->commit[1].attempted && !w->commit[1].ok;
        }
        group_max(w, v, 3);
        if (v[0] != 0) {
            if (!wait) return;
            continue;
        }
        join_job(w);
        if (w->phase == W_WRITING) after_write(w, v[1] != 0, v[2] != 0);
        else after_commit(w, v[1] != 0);
        if (!wait) return;
    }
}

int ckpt_writer_begin(ckpt_writer *w, int64_t step) {
    if (w->phase != W_IDLE) { /* at most one save in flight: wait for the previous one */
        double t = timer_now();
        ckpt_writer_progress(w, 1);
        double waited = (timer_now() - t) * 1e3;
        w->stats.total_wait_ms += waited;
        w->stats.total_stall_ms += waited;
        if (is_rank0(w)) {
            cJSON *d = ev_detail();
            ev_num(d, EVK_STEP, (double)step);
            ev_num(d, EVK_WAITED_MS, waited);
            ckpt_sink_log(&w->o.sink, EV_CKPT_WAIT, d);
            log_info("checkpoint of step %" PRId64 " waited %.0f ms for the previous save to "
                     "finish", step, waited);
        }
    }
    if (w->failed) return -1;
    w->t_begin = timer_now();
    w->step = step;
    memset(w->w_err, 0, sizeof(w->w_err));
    memset(w->commit, 0, sizeof(w->commit));
    w->write_ms = 0;
    w->overlap_ms = 0;
    w->stats.saves++;
    /* rank 0 creates step_N.tmp in tiers 0 and 1; broadcasting the outcome is the barrier
     * after which every rank may write into them */
    int ok[2] = {0, 0};
    char msg[2][CKPT_MSG] = {"", ""};
    if (is_rank0(w))
        for (int t = 0; t < 2; t++)
            if (w->o.tiers.on[t])
                ok[t] = ckpt_begin(w->o.tiers.root[t], step, NULL, 0, msg[t], sizeof(msg[t])) == 0;
    if (w->o.group.bcast) w->o.group.bcast(w->o.group.user, ok, sizeof(ok));
    w->tier_ok[0] = ok[0];
    w->tier_ok[1] = ok[1];
    w->tier_ok[2] = w->o.tiers.on[2];
    if (is_rank0(w) && w->o.tiers.on[0] && !ok[0]) {
        ckpt_event(w, EV_CKPT_ERROR, step, 0, EVK_ERROR, msg[0]);
        mt_warn("tier-0 checkpoint of step %" PRId64 " not saved: %s", step, msg[0]);
    }
    if (!ok[1]) {
        if (is_rank0(w)) ckpt_event(w, EV_CKPT_ERROR, step, 1, EVK_ERROR, msg[1]);
        save_failed(w, is_rank0(w) ? msg[1] : NULL);
        return -1;
    }
    return 0;
}

void ckpt_writer_snapshot_wait(ckpt_writer *w) {
    if (!w->snap_pending) return;
    double t = timer_now();
    pthread_mutex_lock(&w->snap_lock);
    while (!w->snap_done) pthread_cond_wait(&w->snap_cond, &w->snap_lock);
    pthread_mutex_unlock(&w->snap_lock);
    double waited = (timer_now() - t) * 1e3;
    w->snap_pending = 0;
    w->snapshot_ms += waited; /* the training thread was blocked by this save */
    w->stats.last_snapshot_ms += waited;
    w->stats.last_snapshot_wait_ms = waited;
    w->stats.total_stall_ms += waited;
}

void ckpt_writer_start(ckpt_writer *w, const ckpt_file *files, int n_files,
                       const char *state_name, const char *state_json) {
    ckpt_writer_start_deferred(w, files, n_files, state_name, state_json, NULL, NULL);
}

void ckpt_writer_start_deferred(ckpt_writer *w, const ckpt_file *files, int n_files,
                                const char *state_name, const char *state_json,
                                ckpt_snapshot_fn copy, void *copy_user) {
    w->files = files;
    w->n_files = n_files;
    free(w->state_json);
    w->state_json = NULL;
    if (state_json) {
        w->state_json = strdup(state_json);
        mtCheck(w->state_json != NULL, "out of memory");
        snprintf(w->state_name, sizeof(w->state_name), "%s", state_name);
    }
    for (int t = 0; t < 2; t++)
        if (w->tier_ok[t]) ckpt_catalog(w, t, w->step, "writing", -1, NULL, NAN, NAN);
    w->snapshot_ms = (timer_now() - w->t_begin) * 1e3;
    w->phase = W_WRITING;
    w->snap_fn = copy;
    w->snap_user = copy_user;
    w->snap_done = 0;
    w->snap_pending = 1;
    w->stats.last_snapshot_wait_ms = 0;
    start_job(w, writer_main);
    if (!w->o.async) {
        ckpt_writer_progress(w, 1);
        w->snapshot_ms = (timer_now() - w->t_begin) * 1e3;
    }
    w->stats.last_snapshot_ms = w->snapshot_ms;
    w->stats.total_stall_ms += w->snapshot_ms;
    if (!w->o.async || !w->thread_live) w->snap_pending = 0; /* copied inline already */
}

int ckpt_writer_finish(ckpt_writer *w, int drop_memory) {
    ckpt_writer_progress(w, 1);
    if (drop_memory && !w->failed && is_rank0(w))
        ckpt_tiers_drop_memory(&w->o.tiers, &w->o.sink);
    return w->failed;
}
