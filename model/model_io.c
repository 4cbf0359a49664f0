/*
 * model/model_io.c — save/load a gpt_model as one safetensors file (see model/model_io.h).
 */
#include "model/model_io.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt.h"
#include "ckpt/safetensors.h"
#include "core/check.h"
#include "model/model_ckpt.h"

int model_io_save(const gpt_model *m, const char *path, const char *config_json, int step,
                  char *err, size_t errlen) {
    st_tensor *t = callocCheck((size_t)m->n_tensors, sizeof(st_tensor));
    const float *hp = gpt_params_host((gpt_model *)m); /* device → host mirror, then written */
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor *g = &m->tensors[i];
        t[i].name = g->name;
        t[i].dtype = ST_F32;
        t[i].ndim = g->ndim;
        for (int d = 0; d < g->ndim; d++) t[i].shape[d] = g->shape[d];
        t[i].data = hp + g->offset;
    }
    st_meta meta;
    st_meta_init(&meta);
    char stepbuf[32];
    snprintf(stepbuf, sizeof(stepbuf), "%d", step);
    cJSON *shape = gpt_config_to_json(&m->cfg);
    char *archbuf = shape ? cJSON_PrintUnformatted(shape) : NULL;
    cJSON_Delete(shape);
    mtCheck(archbuf != NULL, "out of memory");
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
    cJSON_free(archbuf);
    free(t);
    return rc;
}

/* Step recorded in a model file's metadata; -1 when the file is missing or unreadable. */
static int file_step(const char *path) {
    st_file f;
    char e[512];
    if (st_open(&f, path, e, sizeof(e)) != 0) return -1;
    const char *s = st_metadata(&f, "minitrain.step");
    int step = s ? atoi(s) : 0;
    st_close(&f);
    return step;
}

/* A run directory whose RUN_DIR/ckpt holds a verified checkpoint newer than model.safetensors
 * (e.g. a run still training, or one that was killed): load that. Returns 1 (loaded), 0 (none
 * newer: use model.safetensors), -1 (error in err). */
static int load_newer_checkpoint(gpt_model *m, const char *run_dir, int *step_out, char *err,
                                 size_t errlen) {
    char root[CKPT_PATH_MAX], file[CKPT_PATH_MAX], dir[CKPT_PATH_MAX], msg[1024];
    snprintf(root, sizeof(root), "%.4000s/ckpt", run_dir);
    snprintf(file, sizeof(file), "%.4000s/model.safetensors", run_dir);
    int fstep = file_step(file);
    int64_t *steps = NULL;
    int n = 0, rc = 0;
    if (ckpt_list(root, &steps, &n, msg, sizeof(msg)) != 0) n = 0;
    for (int i = n - 1; i >= 0 && steps[i] > fstep && rc == 0; i--) {
        if (ckpt_verify(root, steps[i], msg, sizeof(msg)) != 0) {
            mt_warn("skipping checkpoint step %lld: %s", (long long)steps[i], msg);
            continue;
        }
        ckpt_step_path(dir, sizeof(dir), root, steps[i], "");
        rc = model_ckpt_load(m, dir, step_out, err, errlen) == 0 ? 1 : -1;
    }
    free(steps);
    return rc;
}

int model_io_load_step(gpt_model *m, const char *run_dir, int step, int *step_out, char *err,
                       size_t errlen) {
    char root[CKPT_PATH_MAX], dir[CKPT_PATH_MAX], file[CKPT_PATH_MAX], msg[1024];
    struct stat sb;
    if (stat(run_dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        snprintf(err, errlen, "'%s' is not a run directory", run_dir);
        return -1;
    }
    snprintf(root, sizeof(root), "%.4000s/ckpt", run_dir);
    snprintf(file, sizeof(file), "%.4000s/model.safetensors", run_dir);
    if (step >= 0 && ckpt_step_path(dir, sizeof(dir), root, step, "") == 0 &&
        stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (ckpt_verify(root, step, msg, sizeof(msg)) != 0) {
            snprintf(err, errlen, "checkpoint step %d of '%s' does not verify: %s", step,
                     run_dir, msg);
            return -1;
        }
        return model_ckpt_load(m, dir, step_out, err, errlen);
    }
    int fstep = file_step(file);
    if (fstep == step) return model_io_load(m, file, step_out, err, errlen);
    int64_t *steps = NULL;
    int n = 0;
    char list[256] = "";
    if (ckpt_list(root, &steps, &n, msg, sizeof(msg)) == 0)
        for (int i = 0, at = 0; i < n && at < (int)sizeof(list) - 24; i++)
            at += snprintf(list + at, sizeof(list) - at, "%s%lld", i ? ", " : "",
                           (long long)steps[i]);
    free(steps);
    snprintf(err, errlen, "run '%s' has no checkpoint of step %d (committed steps: %s; "
             "model.safetensors: %s%d)", run_dir, step, n ? list : "none",
             fstep < 0 ? "absent, " : "step ", fstep < 0 ? 0 : fstep);
    return -1;
}

int model_io_load(gpt_model *m, const char *path_or_run_dir, int *step_out, char *err,
                  size_t errlen) {
    char path[1100];
    struct stat sb;
    if (stat(path_or_run_dir, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        int r = load_newer_checkpoint(m, path_or_run_dir, step_out, err, errlen);
        if (r != 0) return r > 0 ? 0 : -1;
    }
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
    if (!o) {
        snprintf(err, errlen, "%s: missing or malformed 'minitrain.model' metadata (not a "
                 "minitrain model file?)", path);
        st_close(&f);
        return -1;
    }
    char what[sizeof(path) + 32];
    snprintf(what, sizeof(what), "%s: 'minitrain.model'", path);
    if (gpt_config_from_json(o, &cfg, what, err, errlen) != 0) {
        cJSON_Delete(o);
        st_close(&f);
        return -1;
    }
    cJSON_Delete(o);
    if (gpt_build(m, &cfg, err, errlen) != 0) {
        st_close(&f);
        return -1;
    }
    float *hp = gpt_params_host(m); /* read on the host, uploaded after the loop */
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor *g = &m->tensors[i];
        const st_info *info = st_find(&f, g->name);
        int ok = info && info->dtype == ST_F32 && info->ndim == g->ndim;
        for (int d = 0; ok && d < g->ndim; d++) ok = info->shape[d] == g->shape[d];
        if (!ok) {
            snprintf(err, errlen, "%s: tensor '%s' is missing or has the wrong dtype/shape", path,
                     g->name);
            gpt_free(m);
            st_close(&f);
            return -1;
        }
        if (st_read_tensor(&f, g->name, hp + g->offset, g->numel * sizeof(float), err,
                           errlen) != 0) {
            gpt_free(m);
            st_close(&f);
            return -1;
        }
    }
    gpt_params_upload(m);
    int bad = gpt_first_nonfinite(m);
    if (bad >= 0) {
        snprintf(err, errlen, "%s: tensor '%s' holds non-finite values (NaN/Inf); refusing to "
                 "load it", path, m->tensors[bad].name);
        gpt_free(m);
        st_close(&f);
        return -1;
    }
    if (step_out) {
        const char *s = st_metadata(&f, "minitrain.step");
        *step_out = s ? atoi(s) : 0;
    }
    st_close(&f);
    return 0;
}
