/*
 * model/interop_load.c — weights from anywhere, recognised by content (interop_load_weights, for
 * `train --init-from`): a minitrain run directory or model file, an llm.c model file, a Hugging
 * Face directory or safetensors file; and interop_cut_context, which shortens a model's context.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/interop.h"
#include "ckpt/ckpt.h"
#include "ckpt/safetensors.h"
#include "core/check.h"
#include "model/model_io.h"
#include "ops/ops.h"

void interop_cut_context(gpt_model *dst, const gpt_model *full, int seq_len) {
    gpt_config cfg = full->cfg;
    cfg.seq_len = seq_len;
    char err[256];
    mtCheck(gpt_build(dst, &cfg, err, sizeof(err)) == 0, "a shorter context is a valid config");
    for (int i = 0; i < dst->n_tensors; i++) {
        const gpt_tensor *t = &dst->tensors[i];
        /* wpe: the first seq_len rows; every other tensor is the same size */
        ops_copy_d2d(dst->params + t->offset, full->params + full->tensors[i].offset,
                     t->numel * sizeof(float));
    }
}

static int exists(const char *dir, const char *name) {
    char p[CKPT_PATH_MAX];
    struct stat st;
    snprintf(p, sizeof(p), "%.4000s/%s", dir, name);
    return stat(p, &st) == 0;
}

/* 1 if the safetensors file at path carries minitrain's model metadata */
static int is_minitrain_file(const char *path) {
    st_file f;
    char e[512];
    if (st_open(&f, path, e, sizeof(e)) != 0) return 0;
    int yes = st_metadata(&f, "minitrain.model") != NULL;
    st_close(&f);
    return yes;
}

int interop_load_weights(gpt_model *m, const char *path, char *what, size_t whatlen, char *err,
                         size_t errlen) {
    char dummy[8];
    if (!what) what = dummy, whatlen = sizeof(dummy);
    struct stat st;
    if (stat(path, &st) != 0) {
        snprintf(err, errlen, "no weights at '%s'", path);
        return -1;
    }
    int step = 0;
    if (S_ISDIR(st.st_mode)) {
        if (exists(path, "run.db") || exists(path, "ckpt") || exists(path, "model.safetensors")) {
            char p[CKPT_PATH_MAX];
            snprintf(p, sizeof(p), "%.4000s/model.safetensors", path);
            if (exists(path, "run.db") || exists(path, "ckpt") || is_minitrain_file(p)) {
                if (model_io_load(m, path, &step, err, errlen) != 0) return -1;
                snprintf(what, whatlen, "minitrain run, step %d", step);
                return 0;
            }
        }
        if (exists(path, "config.json")) {
            snprintf(what, whatlen, "Hugging Face GPT-2 weights");
            return interop_hf_read(m, path, err, errlen);
        }
        snprintf(err, errlen, "'%s' is neither a minitrain run directory nor a Hugging Face model "
                 "directory (config.json + model.safetensors)", path);
        return -1;
    }
    FILE *f = fopen(path, "rb");
    uint8_t h[16] = {0};
    size_t n = f ? fread(h, 1, sizeof(h), f) : 0;
    if (f) fclose(f);
    int32_t magic;
    memcpy(&magic, h, 4);
    if (n >= 4 && (magic == INTEROP_LLMC_MAGIC || magic == 20240327 || magic == 20240328 ||
                   magic == 20240520)) {
        int version = 0;
        if (interop_llmc_read(m, path, &version, err, errlen) != 0) return -1;
        snprintf(what, whatlen, "llm.c model file, version %d (%s)", version,
                 version == INTEROP_LLMC_BF16 ? "bf16" : "fp32");
        return 0;
    }
    if (n >= 9 && h[8] == '{') { /* safetensors */
        if (is_minitrain_file(path)) {
            if (model_io_load(m, path, &step, err, errlen) != 0) return -1;
            snprintf(what, whatlen, "minitrain model file, step %d", step);
            return 0;
        }
        snprintf(what, whatlen, "Hugging Face GPT-2 weights");
        return interop_hf_read(m, path, err, errlen);
    }
    snprintf(err, errlen, "'%s' is not a model minitrain reads (a run directory, model.safetensors, "
             "an llm.c model file or Hugging Face GPT-2 safetensors)", path);
    return -1;
}
