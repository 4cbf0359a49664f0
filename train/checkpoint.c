/*
 * train/checkpoint.c — the checkpointer of a training run: when a checkpoint is saved, the
 * snapshot of parameters and optimizer state, trainer_state.json, the run.db catalog, and
 * verified resume (see train/checkpoint.h for the format and the commit path).
 *
 * Why this shape: a trainer's checkpoint is three questions with three owners. What is in it —
 * shard files and their tensors — is model/model_ckpt.c, shared with everything that loads a
 * model. How it reaches the disk — background writer, commit handshake, tiers, retention — is
 * ckpt/writer.c and ckpt/tiers.c, which store named tensors and know nothing of models. This file
 * answers the rest: when (the hook), from which buffers (the snapshot), with which trainer state,
 * and how a resumed trainer gets all of it back. It wires ckpt/'s callbacks to the world
 * communicator (the writer's collectives) and to run.db (the catalog and events).
 */
#include "train/checkpoint.h"
#include "ops/ops.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "ckpt/peer.h"
#include "ckpt/reshard.h"
#include "core/events.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/timer.h"
#include "parallel/comm.h"
#include "train/checkpoint_hash.h"
#include "train/checkpoint_object.h"
#include "train/checkpoint_peer.h"
#include "model/model_ckpt.h"
#include "model/optim.h"

struct checkpointer {
    trainer *tr;
    ckpt_writer *w;
    ckpt_peer_tr *peer; /* per-rank / peer-replicated tier 0 (NULL: the writer's shared tier 0) */
    ckpt_object_tr *obj; /* tier 3, the object store (rank 0; NULL: off) */
    ckpt_sink sink;   /* run.db: the catalog rows and events of this rank */
    int every, async;
    int writes_shard; /* this rank writes model/optim files (DP rank < ep of its (tp, pp) shard) */
    /* views into the writer's snapshot buffer: params | m | v (async), or m | v (sync: params
     * are written live, snap_p stays NULL); NULL until allocated */
    float *snap_p, *snap_m, *snap_v;
    model_ckpt_file files[2]; /* model, optim: this rank's files of the save in flight */
    ckpt_file out[2];
    int n_files;
    int last_saved_step;
    int failures_seen; /* writer failures already handled by apply_failures */
    int adaptive; /* every = steps since the last save, set by a policy (ckpt_every = auto) */
    int since;    /* adaptive: step of the last save, or the step before the first hook call */
    void (*on_resume)(void *user, int step); /* checkpoint_set_resume_hook */
    void *on_resume_user;
    cJSON *params_hash; /* the save in progress: checkpoint_hash_record (NULL: off) */
};

static int world_rank(const checkpointer *ck) { return ck->tr->mesh->rank; }

/* ---- ckpt/'s callbacks: the world's collectives, run.db ---------------------------------------- */

static void group_max(void *user, double *v, int n) {
    checkpointer *ck = user;
    comm_all_reduce_f64(ck->tr->mesh->world, v, n, COMM_MAX);
}

static void group_bcast(void *user, void *buf, size_t n) {
    checkpointer *ck = user;
    comm_broadcast_bytes(ck->tr->mesh->world, buf, n, 0);
}

static void sink_catalog(void *user, const ckpt_record *r) {
    checkpointer *ck = user;
    if (ck->tr->db == NULL) return;
    rundb_checkpoint row = {r->step,     r->tier,  r->path,        r->bytes,
                            r->checksum, r->state, r->snapshot_ms, r->write_ms};
    rundb_log_checkpoint(ck->tr->db, ck->tr->run_id, &row);
    /* tier 3 archives committed tier-1 steps only: the commit rule, reused */
    if (r->tier == 1 && strcmp(r->state, "committed") == 0) ckpt_object_tr_committed(ck->obj, r->step);
}

static void sink_event(void *user, const char *kind, cJSON *detail) {
    checkpointer *ck = user;
    ev_log(ck->tr->db, ck->tr->run_id, kind, world_rank(ck), detail); /* frees detail */
}

/* Log a run.db event with a JSON detail {"step":..,"tier":..,<key>:<text>} (any rank). */
static void checkpoint_event(checkpointer *ck, const char *kind, int step, int tier,
                             const char *key, const char *text) {
    ckpt_sink_event(&ck->sink, kind, step, tier, key, text);
}

/* After every writer call: a save that failed since the last look applies ckpt_on_error. */
static void apply_failures(checkpointer *ck) {
    checkpoint_stats s;
    ckpt_writer_get_stats(ck->w, &s);
    if (s.failures == ck->failures_seen) return;
    ck->failures_seen = s.failures;
    if (ckpt_writer_failed(ck->w)) {
        ck->tr->stop_requested = 1;
        log_info("checkpoint of step %" PRId64 " failed; stopping the run cleanly (ckpt_on_error = "
                 "stop); the last committed checkpoint is untouched", s.last_failed_step);
    } else {
        log_info("checkpoint of step %" PRId64 " failed; training continues without it "
                 "(ckpt_on_error = continue)", s.last_failed_step);
    }
}

/* ---- create / free ----------------------------------------------------------------------------- */

static void wait_snapshot(void *user) {
    checkpointer *ck = user;
    ckpt_writer_snapshot_wait(ck->w);
}

static void alloc_snapshot(checkpointer *ck) {
    size_t n = ck->tr->model.num_params;
    float *buf = ckpt_writer_buffer(ck->w, (ck->async ? 3 : 2) * n * sizeof(float));
    ck->snap_p = ck->async ? buf : NULL;
    ck->snap_m = buf + (ck->async ? n : 0);
    ck->snap_v = ck->snap_m + n;
}

checkpointer *checkpoint_create(trainer *tr) {
    checkpointer *ck = callocCheck(1, sizeof(*ck));
    const mt_config *c = &tr->cfg;
    ck->tr = tr;
    ck->every = c->ckpt_every;
    if (ck->every == CONFIG_CKPT_AUTO) { /* an interval policy sets it (checkpoint_set_every) */
        ck->adaptive = 1;
        ck->every = CHECKPOINT_AUTO_FIRST;
    }
    ck->since = -1;
    ck->async = c->ckpt_async;
    ck->last_saved_step = -1;
    /* dp rank 0 writes its (tp, pp) shard; with expert parallelism the other ranks of the first
     * EP group (dp ranks 1..ep-1) add their experts */
    ck->writes_shard = tr->mesh->dp_rank < tr->mesh->ep && tr->mesh->cp_rank == 0; /* CP: copies */
    ck->sink = (ckpt_sink){ck, sink_catalog, sink_event};
    ckpt_writer_opts o = {0};
    if (c->ckpt_tier0_root[0]) { /* every tier-0 user of this process (hooks too) reads the env */
        char node[CKPT_PEER_NODE_MAX], base[CKPT_PATH_MAX], err[512];
        ckpt_peer_node_name(node, sizeof(node));
        if (ckpt_peer_expand(base, sizeof(base), c->ckpt_tier0_root, node, err, sizeof(err)) < 0)
            mt_fail("%s", err);
        /* a root the user named must be usable: refused once here, not warned about at every
         * save while the peer copy reports 0 MB "copied" (tier 0 then silently does nothing) */
        if (c->ckpt_tier0 && fs_mkdir_p(base, err, sizeof(err)) != 0)
            mt_fail("ckpt_tier0_root '%s': %s", c->ckpt_tier0_root, err);
        setenv("MINITRAIN_SHM_DIR", base, 1);
    }
    ck->peer = ckpt_peer_tr_create(tr); /* collective; NULL unless per-node or replicated */
    /* tier 0's root is resolved even when it is off, so a completed run can drop a stale one */
    if (ckpt_tiers_init(&o.tiers, c->run_dir, c->name, c->ckpt_tier0 && !ck->peer, c->ckpt_durable,
                        c->ckpt_keep, c->ckpt_major_every) != 0 && tr->mesh->rank == 0)
        mt_warn("tier 0 (memory) checkpoints disabled: cannot resolve run directory '%s'",
                c->run_dir);
    o.async = c->ckpt_async;
    o.stop_on_error = strcmp(c->ckpt_on_error, "continue") != 0;
    const char *d = getenv("MINITRAIN_CKPT_WRITE_DELAY_MS");
    if (d) o.delay_ms = atoi(d);
    o.group = (ckpt_group){ck, tr->mesh->rank, group_max, group_bcast};
    o.sink = ck->sink;
    if ((d = getenv("MINITRAIN_CKPT_IO_THREADS")) != NULL) o.io_threads = atoi(d);
    /* O_DIRECT by default: it keeps the checkpoint out of the page cache; bench/bench_ckpt put
     * it 1.3-2x ahead of buffered writes under heavy load, 12-33% behind on a lighter one */
    o.io_direct = 1;
    if ((d = getenv("MINITRAIN_CKPT_DIRECT")) != NULL) o.io_direct = atoi(d);
    ck->w = ckpt_writer_create(&o);
    if (world_rank(ck) == 0) ck->obj = ckpt_object_tr_create(c, ckpt_tiers_root(&o.tiers, 1));
    if (ck->every > 0) alloc_snapshot(ck);
    tr->before_update = wait_snapshot;
    tr->before_update_user = ck;
    return ck;
}

void checkpoint_set_resume_hook(checkpointer *ck, void (*fn)(void *user, int step), void *user) {
    ck->on_resume = fn;
    ck->on_resume_user = user;
}

void checkpoint_set_every(checkpointer *ck, int every) {
    ck->adaptive = 1;
    ck->every = every > 0 ? every : 1;
    if (ck->snap_m == NULL && !ckpt_writer_busy(ck->w)) alloc_snapshot(ck);
}

void checkpoint_free(checkpointer *ck) {
    if (ck == NULL) return;
    if (ck->tr->before_update_user == ck) ck->tr->before_update = NULL;
    ckpt_writer_free(ck->w); /* joins a job still running before the files below go */
    ckpt_object_tr_finish(ck->obj, &ck->sink);
    ckpt_peer_tr_free(ck->peer);
    for (int i = 0; i < 2; i++) model_ckpt_file_free(&ck->files[i]);
    free(ck);
}

void checkpoint_get_stats(const checkpointer *ck, checkpoint_stats *out) {
    ckpt_writer_get_stats(ck->w, out);
}

const char *checkpoint_root(const checkpointer *ck, int tier) {
    return ckpt_tiers_root(ckpt_writer_tiers(ck->w), tier);
}

int checkpoint_copies(const checkpointer *ck, int rank, int64_t step, checkpoint_copy *out) {
    int n = 0;
    char own[CKPT_PATH_MAX] = "", held[CKPT_PATH_MAX] = "";
    if (ck->peer) {
        ckpt_peer_tr_copies(ck->peer, rank, step, own, held, sizeof(own));
    } else if (rank == world_rank(ck) && checkpoint_root(ck, 0)) {
        ckpt_step_path(own, sizeof(own), checkpoint_root(ck, 0), step, "");
    }
    const char *dirs[4] = {own, held, NULL, NULL};
    if (rank == world_rank(ck))
        for (int t = 1; t < CKPT_TIERS; t++) dirs[t + 1] = checkpoint_root(ck, t);
    for (int i = 0; i < 4; i++) {
        if (dirs[i] == NULL || dirs[i][0] == 0) continue;
        checkpoint_copy *c = &out[n++];
        c->tier = i < 2 ? 0 : i - 1;
        c->replica = i == 1;
        if (i < 2) snprintf(c->dir, sizeof(c->dir), "%s", dirs[i]);
        else ckpt_step_path(c->dir, sizeof(c->dir), dirs[i], step, "");
    }
    return n;
}

/* ---- trainer_state.json ------------------------------------------------------------------------ */

static char *build_state_json(checkpointer *ck, int step) {
    trainer *tr = ck->tr;
    const mt_config *c = &tr->cfg;
    const mesh *ms = tr->mesh;
    cJSON *o = cJSON_CreateObject();
    mtCheck(o != NULL, "out of memory");
    cJSON_AddStringToObject(o, "format", MODEL_CKPT_STATE_FORMAT);
    cJSON_AddNumberToObject(o, "version", 1);
    cJSON_AddNumberToObject(o, "step", step);
    cJSON_AddNumberToObject(o, "tokens_seen", (double)step * c->global_batch * c->seq_len);
    /* data position: a pure function of the step (train/trainer.h), recorded for readers */
    cJSON *data = cJSON_AddObjectToObject(o, "data");
    cJSON_AddNumberToObject(data, "global_batch", c->global_batch);
    cJSON_AddNumberToObject(data, "batch_size", c->batch_size);
    cJSON_AddNumberToObject(data, "seq_len", c->seq_len);
    cJSON_AddNumberToObject(data, "seed", c->seed);
    cJSON_AddNumberToObject(data, "sequences_consumed", (double)step * c->global_batch);
    cJSON *ranks = cJSON_AddArrayToObject(data, "dp_ranks");
    for (int r = 0; r < ms->dp; r++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "dp_rank", r);
        /* microbatch k of DP rank r reads sequences step·GB + (k·dp + r)·B .. + B - 1 */
        cJSON_AddNumberToObject(e, "next_sequence",
                                (double)step * c->global_batch + (double)r * c->batch_size);
        cJSON_AddNumberToObject(e, "microbatch_stride", (double)ms->dp * c->batch_size);
        cJSON_AddNumberToObject(e, "microbatches", tr->grad_accum);
        cJSON_AddItemToArray(ranks, e);
    }
    cJSON *rng = cJSON_AddObjectToObject(o, "rng");
    cJSON *sample = cJSON_AddArrayToObject(rng, "sample"); /* xoshiro256** state, exact as hex */
    for (int i = 0; i < 4; i++) {
        char hex[24];
        snprintf(hex, sizeof(hex), "%016" PRIx64, tr->sample_rng.s[i]);
        cJSON_AddItemToArray(sample, cJSON_CreateString(hex));
    }
    cJSON *lr = cJSON_AddObjectToObject(o, "lr_schedule");
    cJSON_AddStringToObject(lr, "kind", "linear_warmup_cosine");
    cJSON_AddNumberToObject(lr, "step", step);
    cJSON_AddNumberToObject(lr, "steps", c->steps);
    cJSON_AddNumberToObject(lr, "warmup_steps", c->warmup_steps);
    cJSON_AddNumberToObject(lr, "lr", c->lr);
    cJSON_AddNumberToObject(lr, "min_lr", c->min_lr);
    cJSON_AddNumberToObject(lr, "next_lr", optim_lr(step, c->steps, c->warmup_steps, c->lr,
                                                    c->min_lr));
    cJSON *op = cJSON_AddObjectToObject(o, "optimizer");
    cJSON_AddStringToObject(op, "kind", "adamw");
    cJSON_AddNumberToObject(op, "t", tr->opt.t);
    cJSON_AddNumberToObject(op, "beta1", c->beta1);
    cJSON_AddNumberToObject(op, "beta2", c->beta2);
    cJSON_AddNumberToObject(op, "eps", c->eps);
    cJSON_AddNumberToObject(op, "weight_decay", c->weight_decay);
    cJSON_AddItemToObject(o, "model", gpt_config_to_json(&tr->model.cfg));
    cJSON *me = cJSON_AddObjectToObject(o, "mesh");
    cJSON_AddNumberToObject(me, "world_size", ms->world_size);
    cJSON_AddNumberToObject(me, "tp", ms->tp);
    cJSON_AddNumberToObject(me, "pp", ms->pp);
    cJSON_AddNumberToObject(me, "dp", ms->dp);
    cJSON_AddNumberToObject(me, "ep", ms->ep);
    cJSON_AddNumberToObject(me, "zero", c->zero);
    /* the shard files of this layout, named by the same function as the files themselves */
    cJSON *files = cJSON_AddObjectToObject(o, "files");
    model_ckpt_list_files(cJSON_AddArrayToObject(files, "model"), "model", ms->tp, ms->pp, ms->ep);
    model_ckpt_list_files(cJSON_AddArrayToObject(files, "optim"), "optim", ms->tp, ms->pp, ms->ep);
    cJSON *run = cJSON_AddObjectToObject(o, "run");
    cJSON_AddStringToObject(run, "name", c->name);
    cJSON_AddStringToObject(run, "run_dir", c->run_dir);
    cJSON *cfg = cJSON_Parse(tr->config_json);
    if (cfg) cJSON_AddItemToObject(o, "config", cfg);
    if (ck->params_hash) /* train/checkpoint_hash.h */
        cJSON_AddItemToObject(o, "params_hash", cJSON_Duplicate(ck->params_hash, 1));
    char *s = cJSON_Print(o);
    mtCheck(s != NULL, "out of memory");
    cJSON_Delete(o);
    return s;
}

/* ---- saving: snapshot, files, the hook --------------------------------------------------------- */

static void par_copy(float *dst, const float *src, size_t n) {
    const size_t chunk = (size_t)1 << 20;
    long nchunks = (long)((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < nchunks; i++) {
        size_t a = (size_t)i * chunk, len = a + chunk < n ? chunk : n - a;
        memcpy(dst + a, src + a, len * sizeof(float));
    }
}

/* par_copy from device memory when src is on the device (device → host snapshot). */
static void snap_copy(float *dst, const float *src, size_t n) {
    if (ops_is_device(src)) ops_copy_d2h(dst, src, n * sizeof(float));
    else par_copy(dst, src, n);
}

/* Deferred snapshot (async, unsharded AdamW state): copied by the writer's background job while
 * the next step's forward and backward only read these buffers; the optimizer step waits for it
 * (trainer_before_update). One thread: the training thread keeps its cores. */
static void bg_copy(void *user) {
    checkpointer *ck = user;
    const trainer *tr = ck->tr;
    size_t n = tr->model.num_params;
    memcpy(ck->snap_p, tr->model.params, n * sizeof(float));
    memcpy(ck->snap_m, tr->opt.m, n * sizeof(float));
    memcpy(ck->snap_v, tr->opt.v, n * sizeof(float));
}

/* Only host memory (device = cpu) is copied in the background: the guard device opens and closes
 * its pages per op on the training thread, and a device copy belongs on the device's stream. */
static int can_defer(const checkpointer *ck, const trainer *tr) {
    return ck->async && !ops_is_device(tr->model.params) && !tr->cfg.zero &&
           tr->opt.n == tr->model.num_params && tr->opt.offset == 0 &&
           getenv("MINITRAIN_CKPT_SNAPSHOT_INLINE") == NULL;
}

/* Copy what the save writes into the snapshot buffer: parameters (async only; a synchronous save
 * writes them live) and the full-layout AdamW m, v of this rank's shard. */
static void snapshot(checkpointer *ck, trainer *tr) {
    size_t n = tr->model.num_params;
    trainer_params_gather(tr); /* ZeRO-3: whole for the copy (always async, trainer_setup.c) */
    if (ck->async) snap_copy(ck->snap_p, tr->model.params, n);
    trainer_params_release(tr);
    if (!tr->cfg.zero && tr->opt.n == n && tr->opt.offset == 0) {
        /* unsharded AdamW state: what trainer_gather_optimizer_state copies, but on all cores,
         * since this copy is the stall */
        snap_copy(ck->snap_m, tr->opt.m, n);
        snap_copy(ck->snap_v, tr->opt.v, n);
    } else {
        trainer_gather_optimizer_state(tr, ck->snap_m, ck->snap_v); /* collective over DP */
    }
}

/* This rank's files of step `step` (model/model_ckpt.h), pointing into the snapshot. */
static void describe_files(checkpointer *ck, int step) {
    for (int i = 0; i < 2; i++) model_ckpt_file_free(&ck->files[i]);
    ck->n_files = 0;
    if (!ck->writes_shard) return;
    /* synchronous: the live parameters, through the host mirror when they are device memory */
    const float *params = ck->async ? ck->snap_p : gpt_params_host(&ck->tr->model);
    const float *ps[1] = {params}, *os[2] = {ck->snap_m, ck->snap_v};
    const char *pp[1] = {""}, *op[2] = {"optim.m.", "optim.v."};
    char err[CKPT_MSG];
    if (model_ckpt_file_build(&ck->files[0], &ck->tr->model, "model", step, ps, pp, 1, err,
                              sizeof(err)) != 0 ||
        model_ckpt_file_build(&ck->files[1], &ck->tr->model, "optim", step, os, op, 2, err,
                              sizeof(err)) != 0) {
        mt_warn("%s", err);
        mtCheck(0, "cannot describe the checkpoint files (see the warning above)");
    }
    for (int i = 0; i < 2; i++) {
        const model_ckpt_file *f = &ck->files[i];
        ckpt_file *o = &ck->out[i];
        _Static_assert(sizeof(o->name) == sizeof(f->name), "file name sizes differ");
        memcpy(o->name, f->name, sizeof(o->name));
        o->tensors = f->tensors;
        o->n_tensors = f->n_tensors;
        o->metadata_json = f->metadata_json;
    }
    ck->n_files = 2;
}

/* allow_defer: the caller is the trainer loop, which calls trainer_before_update before it next
 * modifies the state, so the snapshot may be copied in the background meanwhile. */
static void save(checkpointer *ck, trainer *tr, int allow_defer) {
    if (ck->snap_m == NULL) alloc_snapshot(ck);
    /* 1. wait for a save in flight; rank 0 creates step_N.tmp in tiers 0 and 1 (collective) */
    if (ckpt_writer_begin(ck->w, tr->step) == 0) {
        /* 2. the snapshot: the only part of an async save that stalls training — deferred to
         * the writer's job when it needs no collective (the optimizer step waits for it) */
        /* (not with peer tier 0: it copies from the snapshot right below, on this thread) */
        int defer = allow_defer && !ck->peer && can_defer(ck, tr);
        if (!defer) snapshot(ck, tr);
        ck->last_saved_step = tr->step;
        ck->since = tr->step;
        /* 4. this rank's files and rank 0's trainer_state.json go to the writer's background
         * thread; later hooks see them committed (ckpt_writer_progress) */
        /* 3. peer tier 0: every rank's own restart state, and its buddy's copy (main thread) */
        ck->params_hash = checkpoint_hash_record(tr); /* collective; NULL when off */
        char *state = world_rank(ck) == 0 || ck->peer ? build_state_json(ck, tr->step) : NULL;
        cJSON_Delete(ck->params_hash);
        ck->params_hash = NULL;
        if (ck->peer)
            ckpt_peer_tr_save(ck->peer, tr->step,
                              ck->async ? ck->snap_p : gpt_params_host(&tr->model), ck->snap_m,
                              ck->snap_v, state);
        if (world_rank(ck) != 0) {
            free(state);
            state = NULL;
        }
        describe_files(ck, tr->step);
        ckpt_writer_start_deferred(ck->w, ck->out, ck->n_files, MODEL_CKPT_STATE_FILE, state,
                                   defer ? bg_copy : NULL, ck);
        free(state);
    }
    apply_failures(ck);
}

void checkpoint_save(checkpointer *ck, trainer *tr) { save(ck, tr, 0); }

void checkpoint_wait(checkpointer *ck, trainer *tr) {
    (void)tr;
    ckpt_writer_progress(ck->w, 1);
    apply_failures(ck);
}

void checkpoint_hook(trainer *tr, int step, int final, void *user) {
    checkpointer *ck = user;
    /* the step that just ended: baseline, or the overlap cost of the save in flight */
    if (!final) ckpt_writer_note_step(ck->w, tr->last_step_s);
    if (ckpt_writer_busy(ck->w)) ckpt_writer_progress(ck->w, 0);
    apply_failures(ck);
    /* fixed: multiples of every; adaptive: every steps since the last save (or the start) */
    if (ck->adaptive && ck->since < 0) ck->since = step - 1;
    int due = ck->every > 0 &&
              (final || (ck->adaptive ? step - ck->since >= ck->every : step % ck->every == 0));
    if (due && !ckpt_writer_failed(ck->w) && step > 0 && step != ck->last_saved_step)
        save(ck, tr, 1); /* from the trainer loop: the snapshot may be deferred */
    if (final) checkpoint_wait(ck, tr);
    ckpt_object_tr_poll(ck->obj, &ck->sink);
}

int checkpoint_finish(checkpointer *ck, trainer *tr) {
    /* a completed run no longer needs its restart copies in memory */
    int done = tr->step >= tr->cfg.steps;
    int failed = ckpt_writer_finish(ck->w, done && !ck->peer);
    ckpt_object_tr_finish(ck->obj, &ck->sink); /* the last archive goes up before the exit */
    ck->obj = NULL;
    if (done && !failed && ck->peer) ckpt_peer_tr_drop(ck->peer);
    apply_failures(ck);
    return failed ? MT_EXIT_ERROR : MT_EXIT_OK;
}

/* ---- resume ------------------------------------------------------------------------------------ */

static int check_compatible(const trainer *tr, const gpt_config *saved, const char *dir,
                            char *err, size_t errlen) {
    const mt_config *c = &tr->cfg;
    const char *keys[8] = {"n_layer", "n_head", "d_model", "seq_len", "vocab_size",
                           "moe_every", "n_experts", "top_k"};
    int have[8] = {c->n_layer, c->n_head, c->d_model, c->seq_len, c->vocab_size,
                   c->moe_every, c->moe_every ? c->n_experts : 0, c->moe_every ? c->top_k : 0};
    int was[8] = {saved->n_layer, saved->n_head, saved->d_model, saved->seq_len,
                  saved->vocab_size, saved->moe_every, saved->moe_every ? saved->n_experts : 0,
                  saved->moe_every ? saved->top_k : 0};
    for (int i = 0; i < 8; i++) {
        if (have[i] != was[i]) {
            mt_errf(err, errlen, "cannot resume from %s: it holds a model with %s %d, this run "
                    "has %s %d (the model shape must match; use --resume no or another "
                    "run_dir)", dir, keys[i], was[i], keys[i], have[i]);
            return -1;
        }
    }
    return 0;
}

static int load_into_trainer(checkpointer *ck, trainer *tr, const char *dir, char *err,
                             size_t errlen) {
    cJSON *st = model_ckpt_read_state(dir, err, errlen);
    if (!st) return -1;
    gpt_config saved;
    int step = 0, t = 0, rc = -1;
    float *mbuf = NULL, *vbuf = NULL;
    ckpt_fileset fs = {0};
    if (model_ckpt_state_config(st, dir, &saved, err, errlen) != 0 ||
        check_compatible(tr, &saved, dir, err, errlen) != 0 ||
        model_ckpt_state_int(st, NULL, "step", &step, dir, err, errlen) != 0 ||
        model_ckpt_state_int(st, "optimizer", "t", &t, dir, err, errlen) != 0)
        goto out;
    if (step < 0 || step > tr->cfg.steps) {
        mt_errf(err, errlen, "cannot resume from %s: its step %d is beyond this run's steps %d "
                "(raise --steps to train further)", dir, step, tr->cfg.steps);
        goto out;
    }
    const cJSON *rng = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(st, "rng"),
                                                        "sample");
    rng_state sample;
    if (!cJSON_IsArray(rng) || cJSON_GetArraySize(rng) != 4) {
        mt_errf(err, errlen, "%s/%s: rng.sample must be 4 hex strings", dir,
                MODEL_CKPT_STATE_FILE);
        goto out;
    }
    for (int i = 0; i < 4; i++) {
        const cJSON *h = cJSON_GetArrayItem(rng, i);
        char *end = NULL;
        if (!cJSON_IsString(h) || (sample.s[i] = strtoull(h->valuestring, &end, 16), *end != 0)) {
            mt_errf(err, errlen, "%s/%s: rng.sample[%d] is not a hex string", dir,
                    MODEL_CKPT_STATE_FILE, i);
            goto out;
        }
    }
    /* parameters, then optimizer state (full local layout, scattered to ZeRO shards) */
    gpt_model *m = &tr->model;
    float *hp = gpt_params_host(m); /* read on the host, uploaded below */
    int local = ckpt_peer_tr_is_local(dir); /* a peer tier-0 step: this rank's flat buffers */
    if (!local && (ckpt_fileset_open(&fs, dir, "model-", err, errlen) != 0 ||
                   model_ckpt_read_tensors(&fs, m, "", hp, err, errlen) != 0))
        goto out;
    ckpt_fileset_close(&fs);
    /* unsharded AdamW state is read in place; ZeRO shards go through a full-size buffer */
    int direct = !tr->cfg.zero && tr->opt.n == m->num_params && tr->opt.offset == 0 &&
                 !ops_is_device(tr->opt.m);
    if (direct) {
        mbuf = tr->opt.m;
        vbuf = tr->opt.v;
    } else if (ck->snap_m) {
        mbuf = ck->snap_m;
        vbuf = ck->snap_v;
    } else {
        mbuf = mallocCheck(2 * m->num_params * sizeof(float));
        vbuf = mbuf + m->num_params;
    }
    if (local ? ckpt_peer_tr_read_local(dir, m->num_params, hp, mbuf, vbuf, err, errlen) != 0
              : (ckpt_fileset_open(&fs, dir, "optim-", err, errlen) != 0 ||
                 model_ckpt_read_tensors(&fs, m, "optim.m.", mbuf, err, errlen) != 0 ||
                 model_ckpt_read_tensors(&fs, m, "optim.v.", vbuf, err, errlen) != 0))
        goto out;
    gpt_params_upload(m);
    if (checkpoint_hash_verify(tr, st, dir, err, errlen) != 0) goto out;
    trainer_params_loaded(tr); /* ZeRO-3: the loaded weights into the shard */
    if (!direct) trainer_scatter_optimizer_state(tr, mbuf, vbuf);
    tr->opt.t = t;
    tr->sample_rng = sample;
    tr->step = step;
    ck->last_saved_step = step;
    /* keys that change the run's course without breaking the load: say so */
    int gb = 0, steps = 0;
    if (model_ckpt_state_int(st, "data", "global_batch", &gb, dir, err, errlen) == 0 &&
        gb != tr->cfg.global_batch && tr->mesh->rank == 0) {
        char w[200];
        snprintf(w, sizeof(w), "global_batch was %d, now %d: the data order after step %d "
                 "differs from the original run", gb, tr->cfg.global_batch, step);
        checkpoint_event(ck, EV_CKPT_WARNING, step, -1, EVK_WARNING, w);
        mt_warn("%s", w);
    }
    if (model_ckpt_state_int(st, "lr_schedule", "steps", &steps, dir, err, errlen) == 0 &&
        steps != tr->cfg.steps && tr->mesh->rank == 0) {
        char w[200];
        snprintf(w, sizeof(w), "steps was %d, now %d: the LR schedule is stretched from step %d",
                 steps, tr->cfg.steps, step);
        checkpoint_event(ck, EV_CKPT_WARNING, step, -1, EVK_WARNING, w);
        mt_warn("%s", w);
    }
    err[0] = 0;
    rc = 0;
out:
    ckpt_fileset_close(&fs);
    if (mbuf && mbuf != tr->opt.m && mbuf != ck->snap_m) free(mbuf);
    cJSON_Delete(st);
    return rc;
}

/* The resume event and log line of a loaded step. */
static void resumed(checkpointer *ck, trainer *tr, int tier, const char *what, const char *dir,
                    double t0, double t_verified) {
    double ms = (timer_now() - t0) * 1e3, verify_ms = (t_verified - t0) * 1e3;
    if (tr->mesh->rank == 0 && tr->db) {
        cJSON *d = ev_detail();
        ev_num(d, EVK_STEP, tr->step);
        ev_num(d, EVK_TIER, tier);
        ev_str(d, EVK_PATH, dir);
        ev_num(d, EVK_VERIFY_MS, verify_ms);
        ev_num(d, EVK_LOAD_MS, ms - verify_ms);
        ev_log(tr->db, tr->run_id, EV_RESUME, 0, d);
    }
    (void)ck;
    log_info("resumed from step %d (%s, %s) in %.0f ms (verify %.0f, load %.0f)", tr->step, what,
             dir, ms, verify_ms, ms - verify_ms);
}

/* Newest committed step of tiers 1 and 2 (rank 0 lists, no verification), on every rank. */
static int64_t newest_on_disk(checkpointer *ck, trainer *tr) {
    const ckpt_tiers *t = ckpt_writer_tiers(ck->w);
    int64_t best = -1;
    if (tr->mesh->rank == 0)
        for (int k = 1; k < CKPT_TIERS; k++) {
            int64_t *steps = NULL;
            int n = 0;
            char msg[CKPT_MSG];
            if (t->on[k] && ckpt_list(t->root[k], &steps, &n, msg, sizeof(msg)) == 0 && n > 0 &&
                steps[n - 1] > best)
                best = steps[n - 1];
            free(steps);
        }
    comm_broadcast_bytes(tr->mesh->world, &best, sizeof(best), 0);
    return best;
}

/* Resume from the peer tier 0 (collective). Returns 1 (loaded), 0 (use tiers 1/2), -1 (err). */
static int resume_peer(checkpointer *ck, trainer *tr, int64_t want, double t0, char *err,
                       size_t errlen) {
    char dir[CKPT_PATH_MAX];
    int fetched = 0;
    int64_t step = -1;
    if (!ckpt_peer_tr_choose(ck->peer, want, newest_on_disk(ck, tr), dir, sizeof(dir), &fetched,
                             &step))
        return 0;
    double t_verified = timer_now();
    if (ck->on_resume) ck->on_resume(ck->on_resume_user, (int)step);
    if (load_into_trainer(ck, tr, dir, err, errlen) != 0) return -1;
    char what[160];
    if (fetched > 0)
        snprintf(what, sizeof(what), "tier 0 (peer): %d of %d ranks restored from their buddy's "
                 "copy", fetched, tr->mesh->world_size);
    else
        snprintf(what, sizeof(what), "tier 0 (own memory of every rank)");
    resumed(ck, tr, 0, what, dir, t0, t_verified);
    return 1;
}

int checkpoint_resume(checkpointer *ck, trainer *tr, char *err, size_t errlen) {
    const ckpt_tiers *tiers = ckpt_writer_tiers(ck->w);
    const char *mode = tr->cfg.resume;
    int rank = tr->mesh->rank;
    if (strcmp(mode, "no") == 0) {
        int64_t *steps = NULL;
        int n = 0;
        char msg[CKPT_MSG];
        if (rank == 0 && ckpt_list(tiers->root[1], &steps, &n, msg, sizeof(msg)) == 0 && n > 0) {
            char w[CKPT_MSG + 200];
            mt_errf(w, sizeof(w), "--resume no: starting from scratch although %s holds "
                    "checkpoints up to step %" PRId64 " (a later --resume auto may pick them)",
                    tiers->root[1], steps[n - 1]);
            mt_warn("%s", w);
            checkpoint_event(ck, EV_CKPT_WARNING, 0, 1, EVK_WARNING, w);
        }
        free(steps);
        return 0;
    }
    int64_t want = strcmp(mode, "auto") == 0 ? -1 : strtoll(mode, NULL, 10);
    double t0 = timer_now();
    if (ck->peer) {
        int rc = resume_peer(ck, tr, want, t0, err, errlen);
        if (rc != 0) return rc;
    }
    /* rank 0 verifies and chooses; everyone loads the same step */
    int64_t pick[4] = {0, -1, -1, 0}; /* rc, tier, step, 1 = fetched from tier 3 into tier 1 */
    if (rank == 0) {
        int tier = -1;
        int64_t step = -1;
        char msg[2 * CKPT_MSG];
        /* verifies: reads every file of the candidates it tries */
        pick[0] = ckpt_tiers_choose(tiers, want, &tier, &step, &ck->sink, msg, sizeof(msg));
        if (pick[0] == 0 && ck->obj) { /* tiers 0-2 hold nothing that verifies: tier 3 */
            int64_t got = -1;
            int rc = ckpt_object_tr_fetch(ck->obj, want, &got, msg, sizeof(msg));
            if (rc > 0) {
                pick[0] = ckpt_tiers_choose(tiers, got, &tier, &step, &ck->sink, msg, sizeof(msg));
                pick[3] = 1;
            }
            else if (rc < 0)
                pick[0] = -1;
        }
        if (pick[0] < 0) mt_errf(err, errlen, "--resume %s: %s", mode, msg);
        pick[1] = tier;
        pick[2] = step;
    }
    comm_broadcast_bytes(tr->mesh->world, pick, sizeof(pick), 0);
    double t_verified = timer_now();
    if (pick[0] < 0) {
        if (rank != 0) mt_errf(err, errlen, "resume failed on rank 0 (see its message)");
        return -1;
    }
    if (pick[0] == 0) {
        /* Checkpoints exist but none verifies: starting over would overwrite the run's saved
         * model and let retention delete what is left, so refuse unless asked explicitly. */
        int64_t found[2] = {0, -1}; /* committed steps in tier 1, newest */
        if (rank == 0) {
            int64_t *steps = NULL;
            int n = 0;
            char msg[CKPT_MSG];
            if (ckpt_list(tiers->root[1], &steps, &n, msg, sizeof(msg)) == 0 && n > 0)
                found[0] = (int64_t)n, found[1] = steps[n - 1];
            free(steps);
        }
        comm_broadcast_bytes(tr->mesh->world, found, sizeof(found), 0);
        if (found[0] > 0) {
            mt_errf(err, errlen, "--resume auto: %s holds %" PRId64 " checkpoint(s) up to step "
                    "%" PRId64 " but none verifies (see the warnings above); refusing to start "
                    "over and overwrite this run. Repair or remove them, or pass --resume no "
                    "to start from step 0", tiers->root[1], found[0], found[1]);
            return -1;
        }
        if (rank == 0) log_info("resume: no checkpoint to resume from yet; starting from step 0");
        return 0;
    }
    int tier = (int)pick[1], shown_tier = pick[3] ? CKPT_TIER_OBJECT : tier;
    char dir[CKPT_PATH_MAX];
    ckpt_step_path(dir, sizeof(dir), tiers->root[tier], pick[2], "");
    if (ck->on_resume) ck->on_resume(ck->on_resume_user, (int)pick[2]);
    if (load_into_trainer(ck, tr, dir, err, errlen) != 0) return -1;
    double ms = (timer_now() - t0) * 1e3, verify_ms = (t_verified - t0) * 1e3;
    if (rank == 0 && tr->db) {
        cJSON *d = ev_detail();
        ev_num(d, EVK_STEP, tr->step);
        ev_num(d, EVK_TIER, shown_tier);
        ev_str(d, EVK_PATH, dir);
        ev_num(d, EVK_VERIFY_MS, verify_ms);
        ev_num(d, EVK_LOAD_MS, ms - verify_ms);
        ev_log(tr->db, tr->run_id, EV_RESUME, 0, d);
    }
    log_info("resumed from step %d (tier %d%s, %s) in %.0f ms (verify %.0f, load %.0f)", tr->step,
             shown_tier, pick[3] ? ", fetched into tier 1" : "", dir, ms, verify_ms,
             ms - verify_ms);
    return 1;
}
