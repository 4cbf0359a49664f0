/*
 * train/checkpoint.c — saving checkpoints during training: snapshot, background writer, the
 * multi-rank commit handshake, storage tiers, retention and the run.db catalog (see
 * train/checkpoint.h for the format and the protocol; resume lives in train/checkpoint_load.c).
 *
 * Why this shape: the stall a save imposes on training must be a memory copy, not disk I/O, so
 * the main thread only snapshots (params, gathered AdamW m/v, trainer_state.json text) and hands
 * the rest to one background job per save. MPI stays on the main thread: the job signals its end
 * through an atomic flag, and every rank folds that flag into one 3-double all-reduce per step
 * boundary while a save is in flight, so all ranks learn "every writer finished" (or "someone
 * failed") at the same step and take the same decision. World rank 0 then commits in the
 * background (ckpt_commit per tier, retention, the tier-2 copy), and the same all-reduce reports
 * the commit's outcome. One save in flight at a time keeps the memory cost to one snapshot.
 *
 * Tiers are written in order of speed: tier 0 (tmpfs) and tier 1 (run directory) get the files
 * straight from the snapshot; tier 2 is a verified copy of the committed tier-1 step. A tier-0 or
 * tier-2 failure is a warning; only a tier-1 failure counts as a failed checkpoint.
 */
#include "train/checkpoint_impl.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/safetensors.h"
#include "core/events.h"
#include "core/log.h"
#include "core/timer.h"
#include "parallel/comm.h"
#include "train/optim.h"

static const char *TIER_NAME[CHECKPOINT_TIERS] = {"memory", "run dir", "durable"};

static int world_rank(const checkpointer *ck) { return ck->tr->mesh->rank; }

/* ---- paths, events, catalog ------------------------------------------------------------------ */

int checkpoint_tier0_root(char *buf, size_t len, const char *run_dir, const char *name) {
    char real[PATH_MAX], safe[128];
    if (realpath(run_dir, real) == NULL) return -1;
    uint32_t h = ckpt_crc32c(0, real, strlen(real));
    const char *base = getenv("MINITRAIN_SHM_DIR");
    if (base == NULL || base[0] == 0) base = "/dev/shm/minitrain";
    snprintf(safe, sizeof(safe), "%s", name && name[0] ? name : "run");
    for (char *p = safe; *p; p++)
        if (*p == '/') *p = '_';
    int w = snprintf(buf, len, "%s/%s-%08x/ckpt", base, safe, h);
    return (w < 0 || (size_t)w >= len) ? -1 : 0;
}

const char *checkpoint_root(const checkpointer *ck, int tier) {
    return tier >= 0 && tier < CHECKPOINT_TIERS && ck->on[tier] ? ck->root[tier] : NULL;
}

void checkpoint_event(checkpointer *ck, const char *kind, int step, int tier, const char *key,
                      const char *text) {
    if (ck->tr->db == NULL) return;
    cJSON *d = ev_detail();
    ev_num(d, EVK_STEP, step);
    if (tier >= 0) ev_num(d, EVK_TIER, tier);
    if (key && text) ev_str(d, key, text);
    ev_log(ck->tr->db, ck->tr->run_id, kind, world_rank(ck), d);
}

void checkpoint_catalog(checkpointer *ck, int tier, int64_t step, const char *state,
                        int64_t bytes, const char *checksum, double snapshot_ms,
                        double write_ms) {
    if (world_rank(ck) != 0 || ck->tr->db == NULL || ck->root[tier][0] == 0) return;
    char path[CKPT_PATH_MAX];
    if (ckpt_step_path(path, sizeof(path), ck->root[tier], step, "") != 0) return;
    rundb_checkpoint row = {step, tier, path, bytes, checksum, state, snapshot_ms, write_ms};
    rundb_log_checkpoint(ck->tr->db, ck->tr->run_id, &row);
}

/* ---- create / free --------------------------------------------------------------------------- */

static void alloc_snapshot(checkpointer *ck) {
    size_t n = ck->tr->model.num_params;
    ck->buf_floats = (ck->async ? 3 : 2) * n;
    ck->buf = mallocCheck(ck->buf_floats * sizeof(float));
    memset(ck->buf, 0, ck->buf_floats * sizeof(float)); /* pre-fault: a save then costs a copy */
    ck->snap_m = ck->buf + (ck->async ? n : 0);
    ck->snap_v = ck->snap_m + n;
}

checkpointer *checkpoint_create(trainer *tr) {
    checkpointer *ck = callocCheck(1, sizeof(*ck));
    const mt_config *c = &tr->cfg;
    ck->tr = tr;
    ck->every = c->ckpt_every;
    ck->async = c->ckpt_async;
    ck->keep = c->ckpt_keep;
    ck->major = c->ckpt_major_every;
    ck->stop_on_error = strcmp(c->ckpt_on_error, "continue") != 0;
    ck->last_saved_step = -1;
    /* dp rank 0 writes its (tp, pp) shard; with expert parallelism the other ranks of the first
     * EP group (dp ranks 1..ep-1) add their experts */
    ck->writes_shard = tr->mesh->dp_rank < tr->mesh->ep;
    snprintf(ck->root[1], sizeof(ck->root[1]), "%s/ckpt", c->run_dir);
    ck->on[1] = 1;
    /* tier 0's root is resolved even when it is off, so a completed run can drop a stale one */
    if (checkpoint_tier0_root(ck->root[0], sizeof(ck->root[0]), c->run_dir, c->name) != 0) {
        ck->root[0][0] = 0;
        if (c->ckpt_tier0 && tr->mesh->rank == 0)
            mt_warn("tier 0 (memory) checkpoints disabled: cannot resolve run directory '%s'",
                    c->run_dir);
    }
    ck->on[0] = c->ckpt_tier0 && ck->root[0][0];
    if (c->ckpt_durable[0]) {
        snprintf(ck->root[2], sizeof(ck->root[2]), "%s", c->ckpt_durable);
        ck->on[2] = 1;
    }
    const char *d = getenv("MINITRAIN_CKPT_WRITE_DELAY_MS");
    if (d) ck->delay_ms = atoi(d);
    atomic_init(&ck->done, 1);
    if (ck->every > 0) alloc_snapshot(ck);
    return ck;
}

void checkpoint_free(checkpointer *ck) {
    if (ck == NULL) return;
    if (ck->thread_live) pthread_join(ck->thread, NULL);
    free(ck->buf);
    free(ck->state_json);
    free(ck);
}

void checkpoint_get_stats(const checkpointer *ck, checkpoint_stats *out) { *out = ck->stats; }

/* ---- trainer_state.json ---------------------------------------------------------------------- */

static char *build_state_json(checkpointer *ck, int step) {
    trainer *tr = ck->tr;
    const mt_config *c = &tr->cfg;
    const mesh *ms = tr->mesh;
    cJSON *o = cJSON_CreateObject();
    mtCheck(o != NULL, "out of memory");
    cJSON_AddStringToObject(o, "format", CHECKPOINT_STATE_FORMAT);
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
    cJSON *mo = cJSON_AddObjectToObject(o, "model");
    cJSON_AddNumberToObject(mo, "n_layer", c->n_layer);
    cJSON_AddNumberToObject(mo, "n_head", c->n_head);
    cJSON_AddNumberToObject(mo, "d_model", c->d_model);
    cJSON_AddNumberToObject(mo, "seq_len", c->seq_len);
    cJSON_AddNumberToObject(mo, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(mo, "moe_every", c->moe_every);
    cJSON_AddNumberToObject(mo, "n_experts", c->n_experts);
    cJSON_AddNumberToObject(mo, "top_k", c->top_k);
    cJSON_AddNumberToObject(mo, "capacity_factor", c->capacity_factor);
    cJSON_AddNumberToObject(mo, "aux_coef", c->aux_loss_coef);
    cJSON_AddNumberToObject(mo, "z_coef", c->z_loss_coef);
    cJSON *me = cJSON_AddObjectToObject(o, "mesh");
    cJSON_AddNumberToObject(me, "world_size", ms->world_size);
    cJSON_AddNumberToObject(me, "tp", ms->tp);
    cJSON_AddNumberToObject(me, "pp", ms->pp);
    cJSON_AddNumberToObject(me, "dp", ms->dp);
    cJSON_AddNumberToObject(me, "ep", ms->ep);
    cJSON_AddNumberToObject(me, "zero", c->zero);
    cJSON *files = cJSON_AddObjectToObject(o, "files");
    const char *kinds[2] = {"model", "optim"};
    for (int k = 0; k < 2; k++) {
        cJSON *a = cJSON_AddArrayToObject(files, kinds[k]);
        for (int p = 0; p < ms->pp; p++)
            for (int t = 0; t < ms->tp; t++) {
                char name[64];
                snprintf(name, sizeof(name), "%s-tp%02d-pp%02d.safetensors", kinds[k], t, p);
                cJSON_AddItemToArray(a, cJSON_CreateString(name));
            }
    }
    cJSON *run = cJSON_AddObjectToObject(o, "run");
    cJSON_AddStringToObject(run, "name", c->name);
    cJSON_AddStringToObject(run, "run_dir", c->run_dir);
    cJSON *cfg = cJSON_Parse(tr->config_json);
    if (cfg) cJSON_AddItemToObject(o, "config", cfg);
    char *s = cJSON_Print(o);
    mtCheck(s != NULL, "out of memory");
    cJSON_Delete(o);
    return s;
}

/* ---- writer (every rank, background) ---------------------------------------------------------- */

/* One safetensors file of this rank's shard: for each source buffer and each local tensor (TP-
 * replicated ones only on TP rank 0), "<prefix><name>" with the local shape and, for a piece of a
 * larger tensor, "shard:" metadata. */
static int write_tensor_file(checkpointer *ck, const char *dir, const char *kind,
                             const float *const *src, const char *const *prefix, int nsrc,
                             char *err, size_t errlen) {
    const gpt_model *m = &ck->tr->model;
    const mesh *ms = ck->tr->mesh;
    size_t cap = (size_t)m->n_tensors * (size_t)nsrc;
    st_tensor *t = callocCheck(cap, sizeof(*t));
    char(*names)[96] = callocCheck(cap, sizeof(*names));
    st_meta meta;
    st_meta_init(&meta);
    char fmt[64], stepbuf[32], arch[200], shardbuf[64];
    snprintf(fmt, sizeof(fmt), "minitrain-checkpoint-%s", kind);
    snprintf(stepbuf, sizeof(stepbuf), "%d", ck->step);
    snprintf(arch, sizeof(arch),
             "{\"n_layer\":%d,\"n_head\":%d,\"d_model\":%d,\"seq_len\":%d,\"vocab_size\":%d}",
             ck->tr->cfg.n_layer, ck->tr->cfg.n_head, ck->tr->cfg.d_model, ck->tr->cfg.seq_len,
             ck->tr->cfg.vocab_size);
    snprintf(shardbuf, sizeof(shardbuf), "tp=%d/%d;pp=%d/%d", ms->tp_rank, ms->tp, ms->pp_rank,
             ms->pp);
    int rc = st_meta_set(&meta, "format", fmt, err, errlen);
    if (rc == 0) rc = st_meta_set(&meta, "minitrain.step", stepbuf, err, errlen);
    if (rc == 0) rc = st_meta_set(&meta, "minitrain.model", arch, err, errlen);
    if (rc == 0) rc = st_meta_set(&meta, "minitrain.shard", shardbuf, err, errlen);
    int n = 0;
    for (int s = 0; s < nsrc && rc == 0; s++) {
        for (int i = 0; i < m->n_tensors && rc == 0; i++) {
            const gpt_tensor *g = &m->tensors[i];
            if (g->tp_replicated && ms->tp_rank != 0) continue;
            if (ms->dp_rank > 0 && !g->expert) continue; /* an EP rank adds its experts only */
            if (g->pp_tied_copy) continue; /* the first stage's wte is the one saved */
            snprintf(names[n], sizeof(names[n]), "%s%s", prefix[s], g->name);
            t[n].name = names[n];
            t[n].dtype = ST_F32;
            t[n].ndim = g->g_ndim;
            int partial = 0;
            for (int d = 0; d < g->g_ndim; d++) {
                t[n].shape[d] = g->g_local[d];
                partial |= g->g_local[d] != g->g_shape[d];
            }
            t[n].data = src[s] + g->offset;
            if (partial) {
                st_shard sh = {.ndim = g->g_ndim};
                for (int d = 0; d < g->g_ndim; d++) {
                    sh.global[d] = g->g_shape[d];
                    sh.offset[d] = g->g_offset[d];
                }
                rc = st_meta_set_shard(&meta, names[n], &sh, err, errlen);
            }
            n++;
        }
    }
    if (rc == 0) {
        char path[CKPT_PATH_MAX];
        if (ms->ep > 1)
            snprintf(path, sizeof(path), "%s/%s-tp%02d-pp%02d-ep%02d.safetensors", dir, kind,
                     ms->tp_rank, ms->pp_rank, ms->dp_rank);
        else
            snprintf(path, sizeof(path), "%s/%s-tp%02d-pp%02d.safetensors", dir, kind,
                     ms->tp_rank, ms->pp_rank);
        char *json = st_meta_json(&meta);
        rc = st_write(path, t, n, json, err, errlen);
        free(json);
    }
    st_meta_free(&meta);
    free(names);
    free(t);
    return rc;
}

static void test_delay(const checkpointer *ck) {
    if (ck->delay_ms > 0) usleep((useconds_t)ck->delay_ms * 1000);
}

static int write_files(checkpointer *ck, const char *dir, char *err, size_t errlen) {
    if (ck->writes_shard) {
        const float *ps[1] = {ck->snap_params};
        const char *pp[1] = {""};
        test_delay(ck);
        if (write_tensor_file(ck, dir, "model", ps, pp, 1, err, errlen) != 0) return -1;
        const float *os[2] = {ck->snap_m, ck->snap_v};
        const char *op[2] = {"optim.m.", "optim.v."};
        test_delay(ck);
        if (write_tensor_file(ck, dir, "optim", os, op, 2, err, errlen) != 0) return -1;
    }
    if (world_rank(ck) == 0) {
        test_delay(ck);
        if (ckpt_write_json(dir, CHECKPOINT_STATE_FILE, ck->state_json, err, errlen) != 0)
            return -1;
    }
    return 0;
}

static void *writer_main(void *arg) {
    checkpointer *ck = arg;
    double t0 = timer_now();
    for (int t = 0; t < 2; t++) {
        if (!ck->tier_ok[t]) continue;
        char dir[CKPT_PATH_MAX];
        ckpt_step_path(dir, sizeof(dir), ck->root[t], ck->step, ".tmp");
        if (write_files(ck, dir, ck->w_msg[t], sizeof(ck->w_msg[t])) != 0) ck->w_err[t] = 1;
    }
    ck->write_ms = ck->files_ms = (timer_now() - t0) * 1e3;
    atomic_store(&ck->done, 1);
    return NULL;
}

/* ---- committer (world rank 0, background) ----------------------------------------------------- */

/* dir/name into buf; -1 with err when it does not fit. */
static int join(char *buf, size_t len, const char *dir, const char *name, char *err,
                size_t errlen) {
    if (snprintf(buf, len, "%s/%s", dir, name) >= (int)len) {
        ckpt_errf(err, errlen, "path too long: '%s/%s'", dir, name);
        return -1;
    }
    return 0;
}

/* Total bytes of the files of a committed step and "crc32c:<hex>" of its manifest. */
static void step_stats(const char *dir, int64_t *bytes, char *checksum, size_t len) {
    *bytes = 0;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char path[CKPT_PATH_MAX];
        struct stat st;
        while ((e = readdir(d)) != NULL) {
            if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path))
                continue;
            if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) *bytes += st.st_size;
        }
        closedir(d);
    }
    char path[CKPT_PATH_MAX], msg[256];
    uint32_t crc = 0;
    snprintf(path, sizeof(path), "%s/%s", dir, CKPT_MANIFEST_NAME);
    if (ckpt_crc32c_file(path, &crc, NULL, msg, sizeof(msg)) == 0)
        snprintf(checksum, len, "crc32c:%08x", crc);
    else
        checksum[0] = 0;
}

static void retain_warn(void *user, const char *msg) {
    ck_commit_result *r = user;
    snprintf(r->msg, sizeof(r->msg), "%s", msg);
}

/* Retention of one tier; records the steps it removed. Failures are warnings (in r->msg). */
static void retain_tier(checkpointer *ck, int tier, ck_commit_result *r) {
    int64_t *before = NULL, *after = NULL;
    int nb = 0, na = 0;
    char err[CK_MSG];
    if (ckpt_list(ck->root[tier], &before, &nb, err, sizeof(err)) != 0) return;
    int64_t major = tier == 0 ? 0 : ck->major; /* memory keeps no "major" steps */
    if (ckpt_retain(ck->root[tier], ck->keep, major, NULL, retain_warn, r, err, sizeof(err)) != 0)
        ckpt_errf(r->msg, sizeof(r->msg), "retention: %s", err);
    if (ckpt_list(ck->root[tier], &after, &na, err, sizeof(err)) == 0) {
        for (int i = 0, j = 0; i < nb; i++) {
            while (j < na && after[j] < before[i]) j++;
            if ((j >= na || after[j] != before[i]) && r->n_deleted < CK_MAX_DELETED)
                r->deleted[r->n_deleted++] = before[i];
        }
    }
    free(before);
    free(after);
}

static void commit_tier(checkpointer *ck, int tier) {
    ck_commit_result *r = &ck->commit[tier];
    r->attempted = 1;
    if (ckpt_commit(ck->root[tier], ck->step, r->msg, sizeof(r->msg)) != 0) return;
    r->ok = 1;
    char dir[CKPT_PATH_MAX];
    ckpt_step_path(dir, sizeof(dir), ck->root[tier], ck->step, "");
    step_stats(dir, &r->bytes, r->checksum, sizeof(r->checksum));
    retain_tier(ck, tier, r);
}

static int copy_file(const char *src, const char *dst, char *err, size_t errlen) {
    int fd = open(src, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        ckpt_errf(err, errlen, "cannot open '%s': %s", src, strerror(errno));
        return -1;
    }
    ckpt_afile a;
    if (ckpt_afile_open(&a, dst, err, errlen) != 0) {
        close(fd);
        return -1;
    }
    size_t cap = (size_t)4 << 20;
    char *buf = mallocCheck(cap);
    int rc = 0;
    for (;;) {
        ssize_t n = read(fd, buf, cap);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            ckpt_errf(err, errlen, "cannot read '%s': %s", src, strerror(errno));
            ckpt_afile_abort(&a);
            rc = -1;
            break;
        }
        if (n == 0) break;
        if (ckpt_afile_write(&a, buf, (size_t)n, err, errlen) != 0) {
            rc = -1;
            break;
        }
    }
    if (rc == 0) rc = ckpt_afile_commit(&a, err, errlen);
    free(buf);
    close(fd);
    return rc;
}

/* The "files" arrays of two manifests are equal (names, sizes, CRCs). */
static int same_manifest_files(const char *dir_a, const char *dir_b, char *err, size_t errlen) {
    char path[CKPT_PATH_MAX];
    char *ta = NULL, *tb = NULL;
    if (join(path, sizeof(path), dir_a, CKPT_MANIFEST_NAME, err, errlen) != 0) return -1;
    if (ckpt_read_file(path, (size_t)64 << 20, &ta, NULL, err, errlen) != 0) return -1;
    if (join(path, sizeof(path), dir_b, CKPT_MANIFEST_NAME, err, errlen) != 0 ||
        ckpt_read_file(path, (size_t)64 << 20, &tb, NULL, err, errlen) != 0) {
        free(ta);
        return -1;
    }
    cJSON *a = cJSON_Parse(ta), *b = cJSON_Parse(tb);
    int same = a && b &&
               cJSON_Compare(cJSON_GetObjectItemCaseSensitive(a, "files"),
                             cJSON_GetObjectItemCaseSensitive(b, "files"), 1);
    if (!same) ckpt_errf(err, errlen, "%s: copy differs from %s (sizes or CRC-32C)", dir_b, dir_a);
    cJSON_Delete(a);
    cJSON_Delete(b);
    free(ta);
    free(tb);
    return same ? 0 : -1;
}

/* Tier 2: copy the committed tier-1 step file by file, commit, and check that the new manifest
 * lists exactly the sizes and CRCs of the source (a copy corrupted in flight is removed). */
static void copy_to_durable(checkpointer *ck) {
    ck_commit_result *r = &ck->commit[2];
    r->attempted = 1;
    char src[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX], fin[CKPT_PATH_MAX];
    ckpt_step_path(src, sizeof(src), ck->root[1], ck->step, "");
    if (ckpt_begin(ck->root[2], ck->step, tmp, sizeof(tmp), r->msg, sizeof(r->msg)) != 0) return;
    DIR *d = opendir(src);
    if (d == NULL) {
        ckpt_errf(r->msg, sizeof(r->msg), "cannot open '%s': %s", src, strerror(errno));
        return;
    }
    struct dirent *e;
    int rc = 0;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strcmp(e->d_name, CKPT_MANIFEST_NAME) == 0) continue;
        char a[CKPT_PATH_MAX], b[CKPT_PATH_MAX];
        rc = join(a, sizeof(a), src, e->d_name, r->msg, sizeof(r->msg));
        if (rc == 0) rc = join(b, sizeof(b), tmp, e->d_name, r->msg, sizeof(r->msg));
        if (rc == 0) rc = copy_file(a, b, r->msg, sizeof(r->msg));
    }
    closedir(d);
    if (rc != 0 || ckpt_commit(ck->root[2], ck->step, r->msg, sizeof(r->msg)) != 0) return;
    ckpt_step_path(fin, sizeof(fin), ck->root[2], ck->step, "");
    if (same_manifest_files(src, fin, r->msg, sizeof(r->msg)) != 0) {
        char ignored[256];
        ckpt_remove_tree(fin, ignored, sizeof(ignored));
        return;
    }
    r->ok = 1;
    step_stats(fin, &r->bytes, r->checksum, sizeof(r->checksum));
    retain_tier(ck, 2, r);
}

static void *commit_main(void *arg) {
    checkpointer *ck = arg;
    double t0 = timer_now();
    if (ck->tier_ok[0]) commit_tier(ck, 0);
    commit_tier(ck, 1);
    if (ck->on[2] && ck->commit[1].ok) copy_to_durable(ck);
    ck->write_ms += (timer_now() - t0) * 1e3;
    atomic_store(&ck->done, 1);
    return NULL;
}

/* ---- main-thread state machine ---------------------------------------------------------------- */

static void start_job(checkpointer *ck, void *(*fn)(void *)) {
    atomic_store(&ck->done, 0);
    if (ck->async) {
        int e = pthread_create(&ck->thread, NULL, fn, ck);
        if (e == 0) {
            ck->thread_live = 1;
            return;
        }
        mt_warn("cannot start the checkpoint thread (%s); saving inline", strerror(e));
    }
    fn(ck);
}

static void join_job(checkpointer *ck) {
    if (ck->thread_live) {
        pthread_join(ck->thread, NULL);
        ck->thread_live = 0;
    }
}

static void remove_tmp(checkpointer *ck, int tier) {
    char dir[CKPT_PATH_MAX], ignored[256];
    if (world_rank(ck) != 0 || !ck->on[tier]) return;
    if (ckpt_step_path(dir, sizeof(dir), ck->root[tier], ck->step, ".tmp") == 0)
        ckpt_remove_tree(dir, ignored, sizeof(ignored)); /* best effort; begin removes stale ones */
}

/* A tier-1 failure of the save of ck->step, known on every rank. msg: this rank's message or
 * NULL (it failed elsewhere). Applies ckpt_on_error. */
static void save_failed(checkpointer *ck, const char *msg) {
    ck->stats.failures++;
    checkpoint_catalog(ck, 1, ck->step, "failed", -1, NULL, NAN, NAN);
    if (ck->tier_ok[0]) checkpoint_catalog(ck, 0, ck->step, "failed", -1, NULL, NAN, NAN);
    remove_tmp(ck, 0);
    remove_tmp(ck, 1);
    if (msg) mt_warn("checkpoint of step %d failed: %s", ck->step, msg);
    if (ck->stop_on_error) {
        ck->failed = 1;
        ck->tr->stop_requested = 1;
        log_info("checkpoint of step %d failed; stopping the run cleanly (ckpt_on_error = stop); "
                 "the last committed checkpoint is untouched", ck->step);
    } else {
        log_info("checkpoint of step %d failed; training continues without it "
                 "(ckpt_on_error = continue)", ck->step);
    }
}

static void after_write(checkpointer *ck, int err1, int err0) {
    for (int t = 0; t < 2; t++)
        if (ck->w_err[t]) checkpoint_event(ck, EV_CKPT_ERROR, ck->step, t, EVK_ERROR, ck->w_msg[t]);
    if (err0 && ck->tier_ok[0]) {
        if (ck->w_err[0]) mt_warn("tier-0 checkpoint of step %d not saved: %s", ck->step,
                                  ck->w_msg[0]);
        checkpoint_catalog(ck, 0, ck->step, "failed", -1, NULL, NAN, NAN);
        remove_tmp(ck, 0);
        ck->tier_ok[0] = 0;
    }
    if (err1) {
        ck->phase = CK_IDLE;
        save_failed(ck, ck->w_err[1] ? ck->w_msg[1] : NULL);
        return;
    }
    ck->phase = CK_COMMITTING;
    if (world_rank(ck) == 0) start_job(ck, commit_main);
}

static void after_commit(checkpointer *ck, int err1) {
    double stall = ck->snapshot_ms;
    if (!ck->async) stall = (timer_now() - ck->t_begin) * 1e3;
    ck->phase = CK_IDLE;
    if (world_rank(ck) == 0) {
        for (int t = 0; t < CHECKPOINT_TIERS; t++) {
            ck_commit_result *r = &ck->commit[t];
            if (!r->attempted) continue;
            if (r->ok) {
                checkpoint_catalog(ck, t, ck->step, "committed", r->bytes, r->checksum, stall,
                                   ck->write_ms);
                for (int i = 0; i < r->n_deleted; i++)
                    checkpoint_catalog(ck, t, r->deleted[i], "deleted", -1, NULL, NAN, NAN);
                if (r->msg[0]) checkpoint_event(ck, EV_CKPT_WARNING, ck->step, t, EVK_WARNING, r->msg);
                char dir[CKPT_PATH_MAX];
                ckpt_step_path(dir, sizeof(dir), ck->root[t], ck->step, "");
                cJSON *d = ev_detail();
                ev_num(d, EVK_STEP, ck->step);
                ev_num(d, EVK_TIER, t);
                ev_str(d, EVK_PATH, dir);
                ev_num(d, EVK_BYTES, (double)r->bytes);
                ev_num(d, EVK_SNAPSHOT_MS, stall);
                ev_num(d, EVK_WRITE_MS, ck->write_ms);
                ev_log(ck->tr->db, ck->tr->run_id, EV_CHECKPOINT, 0, d);
            } else {
                checkpoint_event(ck, EV_CKPT_ERROR, ck->step, t, EVK_ERROR, r->msg);
                checkpoint_catalog(ck, t, ck->step, "failed", -1, NULL, NAN, NAN);
                if (t != 1) mt_warn("tier-%d (%s) checkpoint of step %d not committed: %s", t,
                                    TIER_NAME[t], ck->step, r->msg);
            }
        }
    }
    if (err1) {
        save_failed(ck, world_rank(ck) == 0 ? ck->commit[1].msg : NULL);
        return;
    }
    ck->stats.committed++;
    ck->stats.last_write_ms = ck->write_ms;
    ck->stats.last_files_ms = ck->files_ms;
    if (world_rank(ck) == 0) ck->stats.last_bytes = ck->commit[1].bytes;
    log_info("checkpoint step %d committed (%.1f MB%s%s): training stall %.1f ms, background "
             "write+commit %.0f ms", ck->step, ck->commit[1].bytes / 1e6,
             ck->commit[0].ok ? ", tier 0 + 1" : ", tier 1", ck->commit[2].ok ? " + 2" : "",
             stall, ck->write_ms);
}

/* Advance the save in flight. Collective over the world while one is in flight: every rank
 * calls this at the same step boundaries (its phase is the same on every rank). wait = 1 blocks
 * until the save is finished. */
static void progress(checkpointer *ck, int wait) {
    while (ck->phase != CK_IDLE) {
        if (wait) join_job(ck);
        int busy = ck->thread_live && !atomic_load(&ck->done);
        double v[3] = {busy, 0, 0}; /* busy, tier-1 failure, tier-0 failure */
        if (!busy && ck->phase == CK_WRITING) {
            v[1] = ck->w_err[1];
            v[2] = ck->w_err[0];
        } else if (!busy && ck->phase == CK_COMMITTING && world_rank(ck) == 0) {
            v[1] = ck->commit[1].attempted && !ck->commit[1].ok;
        }
        comm_all_reduce_f64(ck->tr->mesh->world, v, 3, COMM_MAX);
        if (v[0] != 0) {
            if (!wait) return;
            continue;
        }
        join_job(ck);
        if (ck->phase == CK_WRITING) after_write(ck, v[1] != 0, v[2] != 0);
        else after_commit(ck, v[1] != 0);
        if (!wait) return;
    }
}

void checkpoint_wait(checkpointer *ck, trainer *tr) {
    (void)tr;
    progress(ck, 1);
}

static void par_copy(float *dst, const float *src, size_t n) {
    const size_t chunk = (size_t)1 << 20;
    long nchunks = (long)((n + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < nchunks; i++) {
        size_t a = (size_t)i * chunk, len = a + chunk < n ? chunk : n - a;
        memcpy(dst + a, src + a, len * sizeof(float));
    }
}

void checkpoint_save(checkpointer *ck, trainer *tr) {
    if (ck->buf == NULL) alloc_snapshot(ck);
    if (ck->phase != CK_IDLE) { /* at most one save in flight: wait for the previous one */
        double t = timer_now();
        progress(ck, 1);
        double w = (timer_now() - t) * 1e3;
        ck->stats.total_wait_ms += w;
        ck->stats.total_stall_ms += w;
        if (world_rank(ck) == 0) {
            cJSON *d = ev_detail();
            ev_num(d, EVK_STEP, tr->step);
            ev_num(d, EVK_WAITED_MS, w);
            ev_log(tr->db, tr->run_id, EV_CKPT_WAIT, 0, d);
            log_info("checkpoint of step %d waited %.0f ms for the previous save to finish",
                     tr->step, w);
        }
    }
    if (ck->failed) return;
    double t0 = timer_now();
    ck->step = tr->step;
    ck->t_begin = t0;
    memset(ck->w_err, 0, sizeof(ck->w_err));
    memset(ck->commit, 0, sizeof(ck->commit));
    ck->write_ms = 0;
    ck->stats.saves++;
    /* rank 0 creates step_N.tmp in tiers 0 and 1; broadcasting the outcome is the barrier
     * after which every rank may write into them */
    int ok[2] = {0, 0};
    char msg[2][CK_MSG] = {"", ""};
    if (world_rank(ck) == 0)
        for (int t = 0; t < 2; t++)
            if (ck->on[t])
                ok[t] = ckpt_begin(ck->root[t], ck->step, NULL, 0, msg[t], sizeof(msg[t])) == 0;
    comm_broadcast_bytes(tr->mesh->world, ok, sizeof(ok), 0);
    ck->tier_ok[0] = ok[0];
    ck->tier_ok[1] = ok[1];
    ck->tier_ok[2] = ck->on[2];
    if (world_rank(ck) == 0 && ck->on[0] && !ok[0]) {
        checkpoint_event(ck, EV_CKPT_ERROR, ck->step, 0, EVK_ERROR, msg[0]);
        mt_warn("tier-0 checkpoint of step %d not saved: %s", ck->step, msg[0]);
    }
    if (!ok[1]) {
        if (world_rank(ck) == 0) checkpoint_event(ck, EV_CKPT_ERROR, ck->step, 1, EVK_ERROR, msg[1]);
        save_failed(ck, world_rank(ck) == 0 ? msg[1] : NULL);
        return;
    }
    /* the snapshot: the only part of an async save that stalls training */
    size_t n = tr->model.num_params;
    if (ck->async) {
        par_copy(ck->buf, tr->model.params, n);
        ck->snap_params = ck->buf;
    } else {
        ck->snap_params = tr->model.params;
    }
    if (!tr->cfg.zero && tr->opt.n == n && tr->opt.offset == 0) {
        /* unsharded AdamW state: what trainer_gather_optimizer_state copies, but on all cores,
         * since this copy is the stall */
        par_copy(ck->snap_m, tr->opt.m, n);
        par_copy(ck->snap_v, tr->opt.v, n);
    } else {
        trainer_gather_optimizer_state(tr, ck->snap_m, ck->snap_v); /* collective over DP */
    }
    if (world_rank(ck) == 0) {
        free(ck->state_json);
        ck->state_json = build_state_json(ck, ck->step);
    }
    ck->last_saved_step = ck->step;
    for (int t = 0; t < 2; t++)
        if (ck->tier_ok[t]) checkpoint_catalog(ck, t, ck->step, "writing", -1, NULL, NAN, NAN);
    ck->snapshot_ms = (timer_now() - t0) * 1e3;
    ck->phase = CK_WRITING;
    start_job(ck, writer_main);
    if (!ck->async) {
        progress(ck, 1);
        ck->snapshot_ms = (timer_now() - t0) * 1e3;
    }
    ck->stats.last_snapshot_ms = ck->snapshot_ms;
    ck->stats.total_stall_ms += ck->snapshot_ms;
}

void checkpoint_hook(trainer *tr, int step, int final, void *user) {
    checkpointer *ck = user;
    if (ck->phase != CK_IDLE) progress(ck, 0);
    int due = ck->every > 0 && (final || step % ck->every == 0);
    if (due && !ck->failed && step > 0 && step != ck->last_saved_step) checkpoint_save(ck, tr);
    if (final) progress(ck, 1);
}

int checkpoint_finish(checkpointer *ck, trainer *tr) {
    progress(ck, 1);
    struct stat sb;
    if (!ck->failed && tr->step >= tr->cfg.steps && ck->root[0][0] && world_rank(ck) == 0 &&
        stat(ck->root[0], &sb) == 0) {
        /* a completed run no longer needs its restart copies in memory */
        int64_t *steps = NULL;
        int n = 0;
        char err[CK_MSG];
        if (ckpt_list(ck->root[0], &steps, &n, err, sizeof(err)) == 0) {
            for (int i = 0; i < n; i++)
                checkpoint_catalog(ck, 0, steps[i], "deleted", -1, NULL, NAN, NAN);
        }
        free(steps);
        char parent[CKPT_PATH_MAX];
        snprintf(parent, sizeof(parent), "%s", ck->root[0]);
        char *slash = strrchr(parent, '/');
        if (slash) *slash = 0; /* .../<name>-<hash>/ckpt -> .../<name>-<hash> */
        if (ckpt_remove_tree(parent, err, sizeof(err)) != 0) mt_warn("%s", err);
    }
    return ck->failed ? MT_EXIT_ERROR : MT_EXIT_OK;
}
