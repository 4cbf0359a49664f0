/*
 * model/model_ckpt.c — the contents of a model checkpoint: shard file names, the tensors of a
 * shard file, reading trainer_state.json, loading a model from a step directory (see
 * model/model_ckpt.h).
 *
 * Why this shape: what a checkpoint of a model contains is needed by the trainer's checkpointer
 * (train/checkpoint.c) and by everything that loads a trained model without training it
 * (model/model_io.c for serve and sample, `ckpt export`). Keeping it free of the trainer lets
 * model_io use it without a cycle (trainer -> model_io -> checkpoint -> trainer), and having one
 * function name the shard files keeps the file list in trainer_state.json equal to the files.
 */
#include "model/model_ckpt.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "core/check.h"

/* ---- names and file lists ---------------------------------------------------------------------- */

model_ckpt_shard model_ckpt_shard_of(const gpt_model *m) {
    const gpt_config *c = &m->cfg;
    return (model_ckpt_shard){c->tp_rank, c->tp, c->pp_rank, c->pp, c->ep_rank, c->ep};
}

void model_ckpt_file_name(char *buf, size_t len, const char *kind, const model_ckpt_shard *s) {
    if (s->ep > 1)
        snprintf(buf, len, "%s-tp%02d-pp%02d-ep%02d.safetensors", kind, s->tp_rank, s->pp_rank,
                 s->ep_rank);
    else
        snprintf(buf, len, "%s-tp%02d-pp%02d.safetensors", kind, s->tp_rank, s->pp_rank);
}

void model_ckpt_list_files(cJSON *array, const char *kind, int tp, int pp, int ep) {
    tp = tp > 1 ? tp : 1, pp = pp > 1 ? pp : 1, ep = ep > 1 ? ep : 1;
    for (int p = 0; p < pp; p++)
        for (int t = 0; t < tp; t++)
            for (int e = 0; e < ep; e++) {
                model_ckpt_shard s = {t, tp, p, pp, e, ep};
                char name[MODEL_CKPT_NAME_MAX];
                model_ckpt_file_name(name, sizeof(name), kind, &s);
                cJSON_AddItemToArray(array, cJSON_CreateString(name));
            }
}

/* ---- the tensors of one shard file ------------------------------------------------------------- */

/* The file-level metadata: what the file is, which step, which model shape, which shard. */
static int file_metadata(st_meta *meta, const gpt_model *m, const char *kind, int step,
                         char *err, size_t errlen) {
    const gpt_config *c = &m->cfg;
    model_ckpt_shard s = model_ckpt_shard_of(m);
    char fmt[64], stepbuf[32], shardbuf[64];
    snprintf(fmt, sizeof(fmt), "minitrain-checkpoint-%s", kind);
    snprintf(stepbuf, sizeof(stepbuf), "%d", step);
    cJSON *shape = gpt_config_to_json(c);
    char *arch = shape ? cJSON_PrintUnformatted(shape) : NULL;
    cJSON_Delete(shape);
    mtCheck(arch != NULL, "out of memory");
    snprintf(shardbuf, sizeof(shardbuf), "tp=%d/%d;pp=%d/%d", s.tp_rank, s.tp > 1 ? s.tp : 1,
             s.pp_rank, s.pp > 1 ? s.pp : 1);
    int rc = st_meta_set(meta, "format", fmt, err, errlen);
    if (rc == 0) rc = st_meta_set(meta, "minitrain.step", stepbuf, err, errlen);
    if (rc == 0) rc = st_meta_set(meta, "minitrain.model", arch, err, errlen);
    if (rc == 0) rc = st_meta_set(meta, "minitrain.shard", shardbuf, err, errlen);
    cJSON_free(arch);
    return rc;
}

int model_ckpt_file_build(model_ckpt_file *f, const gpt_model *m, const char *kind, int step,
                          const float *const *src, const char *const *prefix, int nsrc,
                          char *err, size_t errlen) {
    memset(f, 0, sizeof(*f));
    model_ckpt_shard s = model_ckpt_shard_of(m);
    model_ckpt_file_name(f->name, sizeof(f->name), kind, &s);
    size_t cap = (size_t)m->n_tensors * (size_t)nsrc;
    f->tensors = callocCheck(cap, sizeof(*f->tensors));
    f->names = callocCheck(cap, sizeof(*f->names));
    st_meta meta;
    st_meta_init(&meta);
    int rc = file_metadata(&meta, m, kind, step, err, errlen);
    int n = 0;
    for (int k = 0; k < nsrc && rc == 0; k++) {
        for (int i = 0; i < m->n_tensors && rc == 0; i++) {
            const gpt_tensor *g = &m->tensors[i];
            if (g->tp_replicated && s.tp_rank != 0) continue;
            if (s.ep_rank > 0 && !g->expert) continue; /* an EP rank adds its experts only */
            if (g->pp_tied_copy) continue;              /* the first stage's wte is the one saved */
            snprintf(f->names[n], sizeof(f->names[n]), "%s%s", prefix[k], g->name);
            st_tensor *t = &f->tensors[n];
            t->name = f->names[n];
            t->dtype = ST_F32;
            t->ndim = g->g_ndim;
            int partial = 0;
            for (int d = 0; d < g->g_ndim; d++) {
                t->shape[d] = g->g_local[d];
                partial |= g->g_local[d] != g->g_shape[d];
            }
            t->data = src[k] + g->offset;
            if (partial) {
                st_shard sh = {.ndim = g->g_ndim};
                for (int d = 0; d < g->g_ndim; d++) {
                    sh.global[d] = g->g_shape[d];
                    sh.offset[d] = g->g_offset[d];
                }
                rc = st_meta_set_shard(&meta, f->names[n], &sh, err, errlen);
            }
            n++;
        }
    }
    f->n_tensors = n;
    if (rc == 0) f->metadata_json = st_meta_json(&meta);
    st_meta_free(&meta);
    if (rc != 0) model_ckpt_file_free(f);
    return rc;
}

void model_ckpt_file_free(model_ckpt_file *f) {
    free(f->tensors);
    free(f->names);
    free(f->metadata_json);
    memset(f, 0, sizeof(*f));
}

/* ---- trainer_state.json ------------------------------------------------------------------------ */

cJSON *model_ckpt_read_state(const char *step_dir, char *err, size_t errlen) {
    char path[CKPT_PATH_MAX], *text = NULL;
    snprintf(path, sizeof(path), "%s/%s", step_dir, MODEL_CKPT_STATE_FILE);
    if (fs_read_file(path, (size_t)16 << 20, &text, NULL, err, errlen) != 0) return NULL;
    cJSON *o = cJSON_Parse(text);
    free(text);
    const cJSON *fmt = o ? cJSON_GetObjectItemCaseSensitive(o, "format") : NULL;
    const cJSON *ver = o ? cJSON_GetObjectItemCaseSensitive(o, "version") : NULL;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, MODEL_CKPT_STATE_FORMAT) != 0 ||
        !cJSON_IsNumber(ver) || ver->valuedouble != 1) {
        mt_errf(err, errlen, "%s: not a minitrain trainer state (format '%s', version 1 "
                "expected)", path, MODEL_CKPT_STATE_FORMAT);
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int model_ckpt_state_int(const cJSON *state, const char *obj, const char *key, int *out,
                         const char *step_dir, char *err, size_t errlen) {
    const cJSON *parent = obj ? cJSON_GetObjectItemCaseSensitive(state, obj) : state;
    const cJSON *v = parent ? cJSON_GetObjectItemCaseSensitive(parent, key) : NULL;
    if (!cJSON_IsNumber(v)) {
        mt_errf(err, errlen, "%s/%s: missing number %s%s%s", step_dir, MODEL_CKPT_STATE_FILE,
                obj ? obj : "", obj ? "." : "", key);
        return -1;
    }
    double d = v->valuedouble; /* (int) of a double outside int's range is undefined behaviour */
    if (!(d >= INT_MIN && d <= INT_MAX) || d != floor(d)) {
        mt_errf(err, errlen, "%s/%s: %s%s%s = %g is not an integer in [%d, %d]", step_dir,
                MODEL_CKPT_STATE_FILE, obj ? obj : "", obj ? "." : "", key, d, INT_MIN, INT_MAX);
        return -1;
    }
    *out = (int)d;
    return 0;
}

int model_ckpt_state_config(const cJSON *st, const char *dir, gpt_config *cfg, char *err,
                            size_t errlen) {
    char what[600];
    snprintf(what, sizeof(what), "%s/%s: model", dir, MODEL_CKPT_STATE_FILE);
    return gpt_config_from_json(cJSON_GetObjectItemCaseSensitive(st, "model"), cfg, what, err,
                                errlen);
}

/* ---- tensors ----------------------------------------------------------------------------------- */

int model_ckpt_read_tensors(const ckpt_fileset *fs, const gpt_model *m, const char *name_prefix,
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

int model_ckpt_load(gpt_model *m, const char *step_dir, int *step_out, char *err, size_t errlen) {
    cJSON *st = model_ckpt_read_state(step_dir, err, errlen);
    if (!st) return -1;
    gpt_config cfg;
    int step = 0;
    if (model_ckpt_state_config(st, step_dir, &cfg, err, errlen) != 0 ||
        model_ckpt_state_int(st, NULL, "step", &step, step_dir, err, errlen) != 0) {
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
    int rc = model_ckpt_read_tensors(&fs, m, "", gpt_params_host(m), err, errlen);
    ckpt_fileset_close(&fs);
    if (rc == 0) gpt_params_upload(m);
    int bad = rc == 0 ? gpt_first_nonfinite(m) : -1;
    if (bad >= 0) {
        mt_errf(err, errlen, "%s: tensor '%s' holds non-finite values (NaN/Inf); refusing to "
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
