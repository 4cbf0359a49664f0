/*
 * train/checkpoint_load.c — verified resume of a training run, and loading a checkpoint's model
 * without a trainer (serve, sample, export). See train/checkpoint.h.
 *
 * Why this shape: nothing is loaded unverified. World rank 0 chooses the step (newest first,
 * fastest tier first among equal steps; each candidate passes ckpt_verify — sizes, CRC-32C,
 * safetensors structure — or is skipped with a warning event) and broadcasts the choice, so
 * every rank loads the same step without re-checksumming it. Each rank then reads, for every
 * local tensor, the box [g_offset, g_offset + g_local) of the logical tensor from whatever shard
 * files hold pieces of it (ckpt/reshard.h): the saving layout does not matter. The model shape in
 * trainer_state.json is compared with this run's before any tensor is read, so an incompatible
 * config is refused with a message naming the differing key rather than a shape error.
 */
#include "train/checkpoint_impl.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/reshard.h"
#include "core/events.h"
#include "core/log.h"
#include "core/timer.h"
#include "parallel/comm.h"

/* ---- trainer_state.json ---------------------------------------------------------------------- */

static cJSON *read_state(const char *step_dir, char *err, size_t errlen) {
    char path[CKPT_PATH_MAX], *text = NULL;
    snprintf(path, sizeof(path), "%s/%s", step_dir, CHECKPOINT_STATE_FILE);
    if (ckpt_read_file(path, (size_t)16 << 20, &text, NULL, err, errlen) != 0) return NULL;
    cJSON *o = cJSON_Parse(text);
    free(text);
    const cJSON *fmt = o ? cJSON_GetObjectItemCaseSensitive(o, "format") : NULL;
    const cJSON *ver = o ? cJSON_GetObjectItemCaseSensitive(o, "version") : NULL;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, CHECKPOINT_STATE_FORMAT) != 0 ||
        !cJSON_IsNumber(ver) || ver->valuedouble != 1) {
        ckpt_errf(err, errlen, "%s: not a minitrain trainer state (format '%s', version 1 "
                  "expected)", path, CHECKPOINT_STATE_FORMAT);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* o[key] as an int; -1 (with err naming path and key) when absent or not a number. */
static int get_int(const cJSON *o, const char *obj, const char *key, int *out, const char *dir,
                   char *err, size_t errlen) {
    const cJSON *parent = obj ? cJSON_GetObjectItemCaseSensitive(o, obj) : o;
    const cJSON *v = parent ? cJSON_GetObjectItemCaseSensitive(parent, key) : NULL;
    if (!cJSON_IsNumber(v)) {
        ckpt_errf(err, errlen, "%s/%s: missing number %s%s%s", dir, CHECKPOINT_STATE_FILE,
                  obj ? obj : "", obj ? "." : "", key);
        return -1;
    }
    *out = (int)v->valuedouble;
    return 0;
}

static int state_model(const cJSON *st, const char *dir, gpt_config *cfg, char *err,
                       size_t errlen) {
    memset(cfg, 0, sizeof(*cfg));
    if (get_int(st, "model", "n_layer", &cfg->n_layer, dir, err, errlen) ||
        get_int(st, "model", "n_head", &cfg->n_head, dir, err, errlen) ||
        get_int(st, "model", "d_model", &cfg->d_model, dir, err, errlen) ||
        get_int(st, "model", "seq_len", &cfg->seq_len, dir, err, errlen) ||
        get_int(st, "model", "vocab_size", &cfg->vocab_size, dir, err, errlen))
        return -1;
    /* mixture-of-experts keys (absent in dense checkpoints) */
    const cJSON *mo = cJSON_GetObjectItemCaseSensitive(st, "model"), *v;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(mo, "moe_every"))) cfg->moe_every = v->valueint;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(mo, "n_experts"))) cfg->n_experts = v->valueint;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(mo, "top_k"))) cfg->top_k = v->valueint;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(mo, "capacity_factor")))
        cfg->capacity_factor = (float)v->valuedouble;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(mo, "aux_coef"))) cfg->aux_coef = (float)v->valuedouble;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(mo, "z_coef"))) cfg->z_coef = (float)v->valuedouble;
    return 0;
}

int checkpoint_read_model_config(const char *step_dir, gpt_config *cfg, char **config_json,
                                 char *err, size_t errlen) {
    cJSON *st = read_state(step_dir, err, errlen);
    if (!st) return -1;
    int rc = state_model(st, step_dir, cfg, err, errlen);
    if (rc == 0 && config_json) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(st, "config");
        *config_json = c ? cJSON_PrintUnformatted(c) : NULL;
    }
    cJSON_Delete(st);
    return rc;
}

/* ---- tensors ----------------------------------------------------------------------------------- */

/* Read every local tensor of m from the files of dir with the given prefix ("model-", "optim-")
 * under the name prefix (""/"optim.m."/"optim.v.") into dst + tensor offset. */
static int read_tensors(const ckpt_fileset *fs, const gpt_model *m, const char *name_prefix,
                        float *dst, char *err, size_t errlen) {
    char name[128];
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor *g = &m->tensors[i];
        snprintf(name, sizeof(name), "%s%s", name_prefix, g->name);
        if (ckpt_read_region(fs, name, ST_F32, g->g_ndim, g->g_shape, g->g_offset, g->g_local,
                             dst + g->offset, err, errlen) != 0)
            return -1;
    }
    return 0;
}

int checkpoint_load_model(gpt_model *m, const char *step_dir, int *step_out, char *err,
                          size_t errlen) {
    cJSON *st = read_state(step_dir, err, errlen);
    if (!st) return -1;
    gpt_config cfg;
    int step = 0;
    if (state_model(st, step_dir, &cfg, err, errlen) != 0 ||
        get_int(st, NULL, "step", &step, step_dir, err, errlen) != 0) {
        cJSON_Delete(st);
        return -1;
    }
    cJSON_Delete(st);
    if (gpt_build(m, &cfg, err, errlen) != 0) return -1;
    ckpt_fileset fs;
    if (ckpt_fileset_open(&fs, step_dir, "model-", err, errlen) != 0) {
        gpt_free(m);
        return -1;
    }
    int rc = read_tensors(&fs, m, "", m->params, err, errlen);
    ckpt_fileset_close(&fs);
    int bad = rc == 0 ? gpt_first_nonfinite(m) : -1;
    if (bad >= 0) {
        ckpt_errf(err, errlen, "%s: tensor '%s' holds non-finite values (NaN/Inf); refusing to "
                  "load it", step_dir, m->tensors[bad].name);
        rc = -1;
    }
    if (rc != 0) {
        gpt_free(m);
        return -1;
    }
    if (step_out) *step_out = step;
    return 0;
}

/* ---- choosing the step --------------------------------------------------------------------------- */

typedef struct {
    int64_t step;
    int tier;
} candidate;

static int cmp_candidate(const void *a, const void *b) {
    const candidate *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? 1 : -1; /* newest first */
    return x->tier - y->tier;                                     /* then fastest tier */
}

/* World rank 0: the step to resume (want < 0: newest). Returns 1 (found), 0 (none), -1 (err). */
static int choose(checkpointer *ck, int64_t want, int *tier, int64_t *step, char *err,
                  size_t errlen) {
    candidate *c = NULL;
    int n = 0;
    char msg[CK_MSG], last[CK_MSG] = "";
    for (int t = 0; t < CHECKPOINT_TIERS; t++) {
        if (!ck->on[t]) continue;
        int64_t *steps = NULL;
        int k = 0;
        if (ckpt_list(ck->root[t], &steps, &k, msg, sizeof(msg)) != 0) {
            checkpoint_event(ck, EV_CKPT_SKIP, -1, t, EVK_WARNING, msg);
            mt_warn("%s", msg);
            continue;
        }
        c = realloc(c, sizeof(*c) * (size_t)(n + k + 1));
        mtCheck(c != NULL, "out of memory");
        for (int i = 0; i < k; i++) c[n++] = (candidate){steps[i], t};
        free(steps);
    }
    if (n > 0) qsort(c, (size_t)n, sizeof(*c), cmp_candidate);
    int found = 0, seen = 0;
    for (int i = 0; i < n && !found; i++) {
        if (want >= 0 && c[i].step != want) continue;
        seen++;
        if (ckpt_verify(ck->root[c[i].tier], c[i].step, msg, sizeof(msg)) == 0) {
            *tier = c[i].tier;
            *step = c[i].step;
            found = 1;
            break;
        }
        snprintf(last, sizeof(last), "%s", msg);
        mt_warn("skipping checkpoint step %" PRId64 " in tier %d: %s", c[i].step, c[i].tier, msg);
        checkpoint_event(ck, EV_CKPT_SKIP, (int)c[i].step, c[i].tier, EVK_WARNING, msg);
        checkpoint_catalog(ck, c[i].tier, c[i].step, "corrupt", -1, NULL, NAN, NAN);
    }
    free(c);
    if (!found && want >= 0) {
        if (seen == 0)
            ckpt_errf(err, errlen, "--resume %" PRId64 ": no committed checkpoint of step %" PRId64
                      " under %s%s%s", want, want, ck->root[1], ck->on[0] ? " or tier 0 " : "",
                      ck->on[0] ? ck->root[0] : "");
        else
            ckpt_errf(err, errlen, "--resume %" PRId64 ": checkpoint does not verify: %s", want,
                      last);
        return -1;
    }
    return found;
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
            ckpt_errf(err, errlen, "cannot resume from %s: it holds a model with %s %d, this run "
                      "has %s %d (the model shape must match; use --resume no or another "
                      "run_dir)", dir, keys[i], was[i], keys[i], have[i]);
            return -1;
        }
    }
    return 0;
}

static int load_into_trainer(checkpointer *ck, trainer *tr, const char *dir, char *err,
                             size_t errlen) {
    cJSON *st = read_state(dir, err, errlen);
    if (!st) return -1;
    gpt_config saved;
    int step = 0, t = 0, rc = -1;
    float *mbuf = NULL, *vbuf = NULL;
    ckpt_fileset fs = {0};
    if (state_model(st, dir, &saved, err, errlen) != 0 ||
        check_compatible(tr, &saved, dir, err, errlen) != 0 ||
        get_int(st, NULL, "step", &step, dir, err, errlen) != 0 ||
        get_int(st, "optimizer", "t", &t, dir, err, errlen) != 0)
        goto out;
    if (step < 0 || step > tr->cfg.steps) {
        ckpt_errf(err, errlen, "cannot resume from %s: its step %d is beyond this run's steps %d "
                  "(raise --steps to train further)", dir, step, tr->cfg.steps);
        goto out;
    }
    const cJSON *rng = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(st, "rng"),
                                                        "sample");
    rng_state sample;
    if (!cJSON_IsArray(rng) || cJSON_GetArraySize(rng) != 4) {
        ckpt_errf(err, errlen, "%s/%s: rng.sample must be 4 hex strings", dir,
                  CHECKPOINT_STATE_FILE);
        goto out;
    }
    for (int i = 0; i < 4; i++) {
        const cJSON *h = cJSON_GetArrayItem(rng, i);
        char *end = NULL;
        if (!cJSON_IsString(h) || (sample.s[i] = strtoull(h->valuestring, &end, 16), *end != 0)) {
            ckpt_errf(err, errlen, "%s/%s: rng.sample[%d] is not a hex string", dir,
                      CHECKPOINT_STATE_FILE, i);
            goto out;
        }
    }
    /* parameters, then optimizer state (full local layout, scattered to ZeRO shards) */
    gpt_model *m = &tr->model;
    if (ckpt_fileset_open(&fs, dir, "model-", err, errlen) != 0 ||
        read_tensors(&fs, m, "", m->params, err, errlen) != 0)
        goto out;
    ckpt_fileset_close(&fs);
    /* unsharded AdamW state is read in place; ZeRO shards go through a full-size buffer */
    int direct = !tr->cfg.zero && tr->opt.n == m->num_params && tr->opt.offset == 0;
    if (direct) {
        mbuf = tr->opt.m;
        vbuf = tr->opt.v;
    } else if (ck->buf) {
        mbuf = ck->snap_m;
        vbuf = ck->snap_v;
    } else {
        mbuf = mallocCheck(2 * m->num_params * sizeof(float));
        vbuf = mbuf + m->num_params;
    }
    if (ckpt_fileset_open(&fs, dir, "optim-", err, errlen) != 0 ||
        read_tensors(&fs, m, "optim.m.", mbuf, err, errlen) != 0 ||
        read_tensors(&fs, m, "optim.v.", vbuf, err, errlen) != 0)
        goto out;
    if (!direct) trainer_scatter_optimizer_state(tr, mbuf, vbuf);
    tr->opt.t = t;
    tr->sample_rng = sample;
    tr->step = step;
    ck->last_saved_step = step;
    /* keys that change the run's course without breaking the load: say so */
    int gb = 0, steps = 0;
    if (get_int(st, "data", "global_batch", &gb, dir, err, errlen) == 0 &&
        gb != tr->cfg.global_batch && tr->mesh->rank == 0) {
        char w[200];
        snprintf(w, sizeof(w), "global_batch was %d, now %d: the data order after step %d "
                 "differs from the original run", gb, tr->cfg.global_batch, step);
        checkpoint_event(ck, EV_CKPT_WARNING, step, -1, EVK_WARNING, w);
        mt_warn("%s", w);
    }
    if (get_int(st, "lr_schedule", "steps", &steps, dir, err, errlen) == 0 &&
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

int checkpoint_resume(checkpointer *ck, trainer *tr, char *err, size_t errlen) {
    const char *mode = tr->cfg.resume;
    int rank = tr->mesh->rank;
    if (strcmp(mode, "no") == 0) {
        int64_t *steps = NULL;
        int n = 0;
        char msg[CK_MSG];
        if (rank == 0 && ckpt_list(ck->root[1], &steps, &n, msg, sizeof(msg)) == 0 && n > 0) {
            char w[CK_MSG + 200];
            ckpt_errf(w, sizeof(w), "--resume no: starting from scratch although %s holds "
                     "checkpoints up to step %" PRId64 " (a later --resume auto may pick them)",
                     ck->root[1], steps[n - 1]);
            mt_warn("%s", w);
            checkpoint_event(ck, EV_CKPT_WARNING, 0, 1, EVK_WARNING, w);
        }
        free(steps);
        return 0;
    }
    int64_t want = strcmp(mode, "auto") == 0 ? -1 : strtoll(mode, NULL, 10);
    double t0 = timer_now();
    /* rank 0 verifies and chooses; everyone loads the same step */
    int64_t pick[3] = {0, -1, -1}; /* rc, tier, step */
    if (rank == 0) {
        int tier = -1;
        int64_t step = -1;
        pick[0] = choose(ck, want, &tier, &step, err, errlen); /* verifies: reads every file */
        pick[1] = tier;
        pick[2] = step;
    }
    comm_broadcast_bytes(tr->mesh->world, pick, sizeof(pick), 0);
    double t_verified = timer_now();
    if (pick[0] < 0) {
        if (rank != 0) ckpt_errf(err, errlen, "resume failed on rank 0 (see its message)");
        return -1;
    }
    if (pick[0] == 0) {
        /* Checkpoints exist but none verifies: starting over would overwrite the run's saved
         * model and let retention delete what is left, so refuse unless asked explicitly. */
        int64_t found[2] = {0, -1}; /* committed steps in tier 1, newest */
        if (rank == 0) {
            int64_t *steps = NULL;
            int n = 0;
            char msg[CK_MSG];
            if (ckpt_list(ck->root[1], &steps, &n, msg, sizeof(msg)) == 0 && n > 0)
                found[0] = (int64_t)n, found[1] = steps[n - 1];
            free(steps);
        }
        comm_broadcast_bytes(tr->mesh->world, found, sizeof(found), 0);
        if (found[0] > 0) {
            ckpt_errf(err, errlen, "--resume auto: %s holds %" PRId64 " checkpoint(s) up to step "
                      "%" PRId64 " but none verifies (see the warnings above); refusing to start "
                      "over and overwrite this run. Repair or remove them, or pass --resume no "
                      "to start from step 0", ck->root[1], found[0], found[1]);
            return -1;
        }
        if (rank == 0) log_info("resume: no checkpoint to resume from yet; starting from step 0");
        return 0;
    }
    int tier = (int)pick[1];
    char dir[CKPT_PATH_MAX];
    ckpt_step_path(dir, sizeof(dir), ck->root[tier], pick[2], "");
    if (load_into_trainer(ck, tr, dir, err, errlen) != 0) return -1;
    double ms = (timer_now() - t0) * 1e3, verify_ms = (t_verified - t0) * 1e3;
    if (rank == 0 && tr->db) {
        cJSON *d = ev_detail();
        ev_num(d, EVK_STEP, tr->step);
        ev_num(d, EVK_TIER, tier);
        ev_str(d, EVK_PATH, dir);
        ev_num(d, EVK_VERIFY_MS, verify_ms);
        ev_num(d, EVK_LOAD_MS, ms - verify_ms);
        ev_log(tr->db, tr->run_id, EV_RESUME, 0, d);
    }
    log_info("resumed from step %d (tier %d, %s) in %.0f ms (verify %.0f, load %.0f)", tr->step,
             tier, dir, ms, verify_ms, ms - verify_ms);
    return 1;
}
