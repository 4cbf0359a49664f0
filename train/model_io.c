/*
 * train/model_io.c — save/load a gpt_model as one safetensors file (see train/model_io.h).
 */
#include "train/model_io.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/safetensors.h"
#include "core/check.h"

int model_io_save(const gpt_model *m, const char *path, const char *config_json, int step,
                  char *err, size_t errlen) {
    st_tensor *t = callocCheck((size_t)m->n_tensors, sizeof(st_tensor));
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor *g = &m->tensors[i];
        t[i].name = g->name;
        t[i].dtype = ST_F32;
        t[i].ndim = g->ndim;
        t[i].shape[0] = g->shape[0];
        t[i].shape[1] = g->shape[1];
        t[i].data = m->params + g->offset;
    }
    st_meta meta;
    st_meta_init(&meta);
    char stepbuf[32], archbuf[160];
    snprintf(stepbuf, sizeof(stepbuf), "%d", step);
    snprintf(archbuf, sizeof(archbuf),
             "{\"n_layer\":%d,\"n_head\":%d,\"d_model\":%d,\"seq_len\":%d,\"vocab_size\":%d}",
             m->cfg.n_layer, m->cfg.n_head, m->cfg.d_model, m->cfg.seq_len, m->cfg.vocab_size);
    int rc = st_meta_set(&meta, "format", "minitrain-gpt2", err, errlen);
    if (rc == 0) rc = st_meta_set(&meta, "minitrain.model", archbuf, err, errlen);
    if (rc == 0) rc = st_meta_set(&meta, "minitrain.step", stepbuf, err, errlen);
    if (rc == 0 && config_json)
        rc = st_meta_set(&meta, "minitrain.config", config_json, err, errlen);
    if (rc == 0) {
        char *json = st_meta_json(&meta);
        rc = st_write(path, t, m->n_tensors, json, err, errlen);
        free(json);
    }
    st_meta_free(&meta);
    free(t);
    return rc;
}

static int json_int(const cJSON *o, const char *key, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) return -1;
    *out = (int)v->valuedouble;
    return 0;
}

int model_io_load(gpt_model *m, const char *path_or_run_dir, int *step_out, char *err,
                  size_t errlen) {
    char path[1100];
    struct stat sb;
    if (stat(path_or_run_dir, &sb) == 0 && S_ISDIR(sb.st_mode))
        snprintf(path, sizeof(path), "%s/model.safetensors", path_or_run_dir);
    else
        snprintf(path, sizeof(path), "%s", path_or_run_dir);
    if (stat(path, &sb) != 0) {
        snprintf(err, errlen, "no model at '%s' (train a run first, or give a model file)", path);
        return -1;
    }
    st_file f;
    if (st_open(&f, path, err, errlen) != 0) return -1;
    const char *arch = st_metadata(&f, "minitrain.model");
    cJSON *o = arch ? cJSON_Parse(arch) : NULL;
    gpt_config cfg = {0};
    if (!o || json_int(o, "n_layer", &cfg.n_layer) || json_int(o, "n_head", &cfg.n_head) ||
        json_int(o, "d_model", &cfg.d_model) || json_int(o, "seq_len", &cfg.seq_len) ||
        json_int(o, "vocab_size", &cfg.vocab_size)) {
        snprintf(err, errlen, "%s: missing or malformed 'minitrain.model' metadata (not a "
                 "minitrain model file?)", path);
        cJSON_Delete(o);
        st_close(&f);
        return -1;
    }
    cJSON_Delete(o);
    if (gpt_build(m, &cfg, err, errlen) != 0) {
        st_close(&f);
        return -1;
    }
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor *g = &m->tensors[i];
        const st_info *info = st_find(&f, g->name);
        int ok = info && info->dtype == ST_F32 && info->ndim == g->ndim &&
                 info->shape[0] == g->shape[0] && (g->ndim < 2 || info->shape[1] == g->shape[1]);
        if (!ok) {
            snprintf(err, errlen, "%s: tensor '%s' is missing or has the wrong dtype/shape", path,
                     g->name);
            gpt_free(m);
            st_close(&f);
            return -1;
        }
        if (st_read_tensor(&f, g->name, m->params + g->offset, g->numel * sizeof(float), err,
                           errlen) != 0) {
            gpt_free(m);
            st_close(&f);
            return -1;
        }
    }
    if (step_out) {
        const char *s = st_metadata(&f, "minitrain.step");
        *step_out = s ? atoi(s) : 0;
    }
    st_close(&f);
    return 0;
}
