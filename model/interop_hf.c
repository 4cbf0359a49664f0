/*
 * model/interop_hf.c — Hugging Face GPT-2 weights (GPT2LMHeadModel / GPT2Model saved as
 * safetensors, with its config.json) into a minitrain model, and a minitrain model out in that
 * layout (`minitrain ckpt export`).
 *
 * config.json gives the shape (n_layer, n_head, n_embd, n_positions or n_ctx, vocab_size) and is
 * checked against what minitrain computes: tanh-GELU (activation_function gelu_new or
 * gelu_pytorch_tanh), MLP width 4·n_embd (n_inner null), LayerNorm eps 1e-5, attention scaled by
 * 1/sqrt(head size) only, a head tied to wte. Every tensor's shape is then checked against that
 * shape, so a config.json that disagrees with the tensors is caught by name.
 *
 * Conv1D weights (c_attn, attn.c_proj, c_fc, mlp.c_proj) are stored (in, out) and transposed to
 * minitrain's (out, in). c_attn's (C, 3C) columns are q | k | v (GPT2Attention splits them with
 * .split(n_embd, dim=2)); transposed, its rows are q; k; v — exactly minitrain's qkv rows.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "ckpt/safetensors.h"
#include "core/check.h"
#include "core/fs.h"
#include "model/interop.h"

static int is_conv1d(const char *name) {
    return strstr(name, ".attn.c_attn.weight") || strstr(name, ".attn.c_proj.weight") ||
           strstr(name, ".mlp.c_fc.weight") || strstr(name, ".mlp.c_proj.weight");
}

static float half_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023, u;
    if (e == 31) u = s | 0x7f800000u | m << 13;
    else if (e) u = s | (e + 112) << 23 | m << 13;
    else if (m == 0) u = s;
    else { /* subnormal half: normalise */
        int k = 0;
        while (!(m & 1024)) m <<= 1, k++;
        u = s | (uint32_t)(113 - k) << 23 | (m & 1023) << 13;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Convert n elements of dtype d at src to fp32. */
static void to_f32(float *dst, const void *src, size_t n, st_dtype d) {
    if (d == ST_F32) {
        memcpy(dst, src, n * 4);
        return;
    }
    const uint16_t *s = src;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)s[i] << 16;
        if (d == ST_BF16) memcpy(&dst[i], &u, 4);
        else dst[i] = half_to_f32(s[i]);
    }
}

static int json_int(const cJSON *o, const char *key, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 ||
        v->valuedouble > 1e8)
        return -1;
    *out = (int)v->valuedouble;
    return 0;
}

/* Read config.json into cfg. 0, or -1 with err naming the file. */
static int read_config(const char *path, gpt_config *cfg, char *err, size_t errlen) {
    char *text = NULL;
    char msg[512];
    if (fs_read_file(path, 1 << 20, &text, NULL, msg, sizeof(msg)) != 0) {
        snprintf(err, errlen, "Hugging Face config '%s' cannot be read: %s", path, msg);
        return -1;
    }
    cJSON *o = cJSON_Parse(text);
    free(text);
    const char *why = NULL;
    char buf[200];
    memset(cfg, 0, sizeof(*cfg));
    const cJSON *v;
    if (!cJSON_IsObject(o)) why = "not a JSON object";
    else if (json_int(o, "n_embd", &cfg->d_model) || json_int(o, "n_layer", &cfg->n_layer) ||
             json_int(o, "n_head", &cfg->n_head) || json_int(o, "vocab_size", &cfg->vocab_size) ||
             (json_int(o, "n_positions", &cfg->seq_len) && json_int(o, "n_ctx", &cfg->seq_len)))
        why = "needs integer n_embd, n_layer, n_head, vocab_size and n_positions (GPT2Config keys)";
    else if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(o, "model_type")) &&
             strcmp(v->valuestring, "gpt2") != 0)
        snprintf(buf, sizeof(buf), "model_type is '%.40s', not gpt2", v->valuestring), why = buf;
    else if (cJSON_IsString(v = cJSON_GetObjectItemCaseSensitive(o, "activation_function")) &&
             strcmp(v->valuestring, "gelu_new") && strcmp(v->valuestring, "gelu_pytorch_tanh"))
        snprintf(buf, sizeof(buf), "activation_function '%.40s' is not GPT-2's tanh GELU "
                 "(gelu_new)", v->valuestring), why = buf;
    else if ((v = cJSON_GetObjectItemCaseSensitive(o, "n_inner")) && !cJSON_IsNull(v) &&
             !(cJSON_IsNumber(v) && v->valuedouble == 4.0 * cfg->d_model))
        why = "n_inner is not 4 x n_embd (minitrain's MLP is 4 x d_model wide)";
    else if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(o, "layer_norm_epsilon")) &&
             fabs(v->valuedouble - 1e-5) > 1e-12)
        why = "layer_norm_epsilon is not 1e-5 (minitrain's LayerNorm)";
    else if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(o, "tie_word_embeddings")))
        why = "tie_word_embeddings is false (minitrain's LM head is tied to wte)";
    else if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "scale_attn_by_inverse_layer_idx")) ||
             cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(o, "scale_attn_weights")))
        why = "attention scaling differs from 1/sqrt(head size)";
    else if (cfg->d_model % cfg->n_head != 0)
        why = "n_embd is not divisible by n_head";
    cJSON_Delete(o);
    if (why) {
        snprintf(err, errlen, "Hugging Face config '%s': %s", path, why);
        return -1;
    }
    return 0;
}

static void shape_str(char *buf, size_t len, int ndim, const int64_t *shape) {
    size_t w = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < ndim && w < len; d++)
        w += (size_t)snprintf(buf + w, len - w, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (w < len) snprintf(buf + w, len - w, "]");
}

/* Check the file's tensors that minitrain has no place for. 0 or -1 with err. */
static int check_extra(const st_file *f, const char *prefix, const gpt_model *m, const char *wpath,
                       const char *cpath, char *err, size_t errlen) {
    size_t pl = strlen(prefix);
    for (int i = 0; i < st_count(f); i++) {
        const char *full = st_info_at(f, i)->name, *n = full;
        if (pl && strncmp(n, prefix, pl) == 0) n += pl;
        size_t len = strlen(n);
        if ((len > 10 && strcmp(n + len - 10, ".attn.bias") == 0) || strstr(n, ".attn.masked_bias"))
            continue; /* causal-mask buffers, not parameters */
        if (strcmp(full, "lm_head.weight") == 0) continue; /* compared with wte by the caller */
        int known = 0;
        for (int k = 0; k < m->n_tensors && !known; k++) known = strcmp(m->tensors[k].name, n) == 0;
        if (known) continue;
        int layer;
        if (sscanf(n, "h.%d.", &layer) == 1 && layer >= m->cfg.n_layer)
            snprintf(err, errlen, "'%s' holds layer tensor '%s' but '%s' says n_layer %d", wpath,
                     full, cpath, m->cfg.n_layer);
        else
            snprintf(err, errlen, "'%s': unexpected tensor '%s' (not a GPT-2 parameter)", wpath,
                     full);
        return -1;
    }
    return 0;
}

/* Load every parameter (converted, Conv1D transposed) and compare lm_head. 0 or -1. */
static int read_tensors(gpt_model *m, const st_file *f, const char *prefix, const char *wpath,
                        const char *cpath, char *err, size_t errlen) {
    const gpt_config *c = &m->cfg;
    float *hp = gpt_params_host(m); /* read on the host, uploaded after the loop */
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor *g = &m->tensors[i];
        char hname[128], got[96], want[96];
        snprintf(hname, sizeof(hname), "%s%s", prefix, g->name);
        const st_info *info = st_find(f, hname);
        if (!info) {
            snprintf(err, errlen, "'%s': tensor '%s' is missing (GPT-2 with n_layer %d from '%s')",
                     wpath, hname, c->n_layer, cpath);
            return -1;
        }
        int conv = g->ndim == 2 && is_conv1d(g->name);
        int64_t ws[2] = {conv ? g->shape[1] : g->shape[0], conv ? g->shape[0] : g->shape[1]};
        int ok = info->ndim == g->ndim;
        for (int d = 0; ok && d < g->ndim; d++) ok = info->shape[d] == ws[d];
        if (!ok) {
            shape_str(got, sizeof(got), info->ndim, info->shape);
            shape_str(want, sizeof(want), g->ndim, ws);
            snprintf(err, errlen, "'%s': tensor '%s' has shape %s, but '%s' (n_embd %d, "
                     "vocab_size %d, n_positions %d) implies %s", wpath, hname, got, cpath,
                     c->d_model, c->vocab_size, c->seq_len, want);
            return -1;
        }
        if (info->dtype != ST_F32 && info->dtype != ST_F16 && info->dtype != ST_BF16) {
            snprintf(err, errlen, "'%s': tensor '%s' is %s (F32, F16 or BF16 expected)", wpath,
                     hname, st_dtype_name(info->dtype));
            return -1;
        }
        size_t nb = g->numel * st_dtype_size(info->dtype);
        void *raw = mallocCheck(nb);
        float *tmp = mallocCheck(g->numel * sizeof(float));
        if (st_read_tensor(f, hname, raw, nb, err, errlen) != 0) {
            free(raw), free(tmp);
            return -1;
        }
        to_f32(tmp, raw, g->numel, info->dtype);
        float *dst = hp + g->offset;
        if (conv) { // (in, out) -> (out, in)
            int64_t in = ws[0], out = ws[1];
            for (int64_t r = 0; r < in; r++)
                for (int64_t k = 0; k < out; k++) dst[k * in + r] = tmp[r * out + k];
        } else {
            memcpy(dst, tmp, g->numel * sizeof(float));
        }
        free(raw), free(tmp);
    }
    gpt_params_upload(m);
    const st_info *head = st_find(f, "lm_head.weight");
    if (head) {
        size_t n = (size_t)c->vocab_size * c->d_model;
        int same = head->ndim == 2 && head->shape[0] == c->vocab_size && head->shape[1] == c->d_model &&
                   (head->dtype == ST_F32 || head->dtype == ST_F16 || head->dtype == ST_BF16);
        if (same) {
            size_t nb = n * st_dtype_size(head->dtype);
            void *raw = mallocCheck(nb);
            float *tmp = mallocCheck(n * sizeof(float));
            same = st_read_tensor(f, "lm_head.weight", raw, nb, err, errlen) == 0;
            if (same) {
                to_f32(tmp, raw, n, head->dtype);
                same = memcmp(tmp, hp + (m->wte - m->params),
                              n * sizeof(float)) == 0;
            }
            free(raw), free(tmp);
        }
        if (!same) {
            snprintf(err, errlen, "'%s': lm_head.weight differs from wte.weight; minitrain ties "
                     "the LM head to the token embedding", wpath);
            return -1;
        }
    }
    return 0;
}

int interop_hf_read(gpt_model *m, const char *path, char *err, size_t errlen) {
    memset(m, 0, sizeof(*m));
    char wpath[CKPT_PATH_MAX], cpath[CKPT_PATH_MAX], tmp[CKPT_PATH_MAX];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(wpath, sizeof(wpath), "%.4000s/model.safetensors", path);
        snprintf(cpath, sizeof(cpath), "%.4000s/config.json", path);
        if (stat(wpath, &st) != 0) {
            snprintf(tmp, sizeof(tmp), "%.4000s/model.safetensors.index.json", path);
            int sharded = stat(tmp, &st) == 0;
            snprintf(tmp, sizeof(tmp), "%.4000s/pytorch_model.bin", path);
            snprintf(err, errlen, "Hugging Face directory '%s' has no model.safetensors%s", path,
                     sharded ? " (sharded checkpoints with model.safetensors.index.json are not "
                               "read: save the model as one file)"
                     : stat(tmp, &st) == 0 ? " (pytorch_model.bin is a pickle, which minitrain does "
                                             "not read: save with safe_serialization=True)"
                                           : "");
            return -1;
        }
    } else if (stat(path, &st) != 0) { /* the source itself, before anything beside it */
        snprintf(err, errlen, "Hugging Face weights '%s': %s (give a directory with config.json "
                 "and model.safetensors, or the .safetensors file)", path, strerror(errno));
        return -1;
    } else {
        snprintf(wpath, sizeof(wpath), "%s", path);
        snprintf(tmp, sizeof(tmp), "%s", path);
        snprintf(cpath, sizeof(cpath), "%.4000s/config.json", dirname(tmp));
    }
    int missing = stat(cpath, &st) != 0;
    if (missing || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "Hugging Face weights '%s' need config.json beside them ('%s' %s)",
                 wpath, cpath, missing ? "is missing" : S_ISDIR(st.st_mode)
                 ? "is a directory, not a file" : "is not a regular file");
        return -1;
    }
    gpt_config cfg;
    if (read_config(cpath, &cfg, err, errlen) != 0) return -1;
    st_file f;
    if (st_open(&f, wpath, err, errlen) != 0) return -1;
    const char *prefix = st_find(&f, "transformer.wte.weight") ? "transformer." : "";
    if (gpt_build(m, &cfg, err, errlen) != 0) {
        st_close(&f);
        return -1;
    }
    int rc = check_extra(&f, prefix, m, wpath, cpath, err, errlen);
    if (rc == 0) rc = read_tensors(m, &f, prefix, wpath, cpath, err, errlen);
    st_close(&f);
    if (rc == 0 && gpt_first_nonfinite(m) >= 0) {
        snprintf(err, errlen, "'%s': tensor '%s' holds non-finite values (NaN/Inf); refusing to "
                 "import it", wpath, m->tensors[gpt_first_nonfinite(m)].name);
        rc = -1;
    }
    if (rc != 0) gpt_free(m);
    return rc;
}

/* config.json for m: Hugging Face GPT2Config keys (malloc'd text) */
static char *hf_config_text(const gpt_model *m, int step) {
    cJSON *c = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(c, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(c, "model_type", "gpt2");
    cJSON_AddNumberToObject(c, "vocab_size", m->cfg.vocab_size);
    cJSON_AddNumberToObject(c, "n_positions", m->cfg.seq_len);
    cJSON_AddNumberToObject(c, "n_ctx", m->cfg.seq_len);
    cJSON_AddNumberToObject(c, "n_embd", m->cfg.d_model);
    cJSON_AddNumberToObject(c, "n_layer", m->cfg.n_layer);
    cJSON_AddNumberToObject(c, "n_head", m->cfg.n_head);
    cJSON_AddNullToObject(c, "n_inner"); /* = 4 * n_embd */
    cJSON_AddStringToObject(c, "activation_function", "gelu_new"); /* tanh approximation */
    cJSON_AddNumberToObject(c, "layer_norm_epsilon", 1e-5);
    cJSON_AddNumberToObject(c, "resid_pdrop", 0.0);
    cJSON_AddNumberToObject(c, "embd_pdrop", 0.0);
    cJSON_AddNumberToObject(c, "attn_pdrop", 0.0);
    cJSON_AddNumberToObject(c, "initializer_range", 0.02);
    cJSON_AddBoolToObject(c, "scale_attn_weights", 1);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", 1);
    cJSON_AddStringToObject(c, "torch_dtype", "float32");
    cJSON_AddNumberToObject(c, "minitrain_step", step);
    char *text = cJSON_Print(c);
    cJSON_Delete(c);
    return text;
}

/* The safetensors file: HF names, Conv1D weights transposed (out, in) -> (in, out). */
static int hf_write_tensors(gpt_model *m, const char *path, int step, char *msg, size_t len) {
    float *hf = mallocCheck(m->num_params * sizeof(float));
    st_tensor *t = callocCheck((size_t)m->n_tensors, sizeof(*t));
    const float *hp = gpt_params_host(m); /* the host mirror of the parameters */
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor *g = &m->tensors[i];
        const float *src = hp + g->offset;
        float *dst = hf + g->offset;
        t[i].name = g->name;
        t[i].dtype = ST_F32;
        t[i].ndim = g->ndim;
        t[i].data = dst;
        if (g->ndim == 2 && is_conv1d(g->name)) {
            int64_t rows = g->shape[0], cols = g->shape[1]; // (out, in) -> (in, out)
            for (int64_t r = 0; r < rows; r++)
                for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
            t[i].shape[0] = cols;
            t[i].shape[1] = rows;
        } else {
            memcpy(dst, src, g->numel * sizeof(float));
            for (int d = 0; d < g->ndim; d++) t[i].shape[d] = g->shape[d];
        }
    }
    char meta[512], stepbuf[32];
    snprintf(stepbuf, sizeof(stepbuf), "%d", step);
    cJSON *mo = cJSON_CreateObject();
    cJSON_AddStringToObject(mo, "format", "pt");
    cJSON_AddStringToObject(mo, "minitrain.step", stepbuf);
    int ok = cJSON_PrintPreallocated(mo, meta, sizeof(meta), 0);
    cJSON_Delete(mo);
    int rc = 0;
    if (!ok) {
        snprintf(msg, len, "metadata too long");
        rc = -1;
    } else rc = st_write(path, t, m->n_tensors, meta, msg, len);
    free(t);
    free(hf);
    return rc;
}

int interop_hf_write(gpt_model *m, const char *path, int step, char *err, size_t errlen) {
    if (m->cfg.moe_every > 0) { /* GPT2Config has no experts: neither HF nor interop_hf_read
                                   could load what would be written */
        snprintf(err, errlen, "Hugging Face's GPT-2 (GPT2Config) has no mixture-of-experts "
                 "layers; this model has experts every %d blocks (%d experts, top-%d)",
                 m->cfg.moe_every, m->cfg.n_experts, m->cfg.top_k);
        return -1;
    }
    /* the directory beside path: config.json goes there */
    char tmp[CKPT_PATH_MAX], outdir[CKPT_PATH_MAX], cfgpath[CKPT_PATH_MAX], msg[2048];
    snprintf(tmp, sizeof(tmp), "%s", path);
    snprintf(outdir, sizeof(outdir), "%s", dirname(tmp)); /* dirname may modify its argument */
    struct stat sd;
    int made_dir = stat(outdir, &sd) != 0;
    if (fs_mkdir_p(outdir, msg, sizeof(msg)) != 0 ||
        fs_join(cfgpath, sizeof(cfgpath), outdir, "config.json", msg, sizeof(msg)) != 0) {
        snprintf(err, errlen, "%s", msg);
        return -1;
    }
    /* The pair is written both or neither: config.json goes to its partial file first (fsynced,
     * not yet renamed), then the tensors are written and renamed, then config.json is renamed.
     * A full disk at any point leaves the previous pair (or nothing) in place. */
    char *text = hf_config_text(m, step);
    fs_afile cfg;
    int rc = fs_afile_open(&cfg, cfgpath, msg, sizeof(msg));
    if (rc == 0) rc = fs_afile_write(&cfg, text, strlen(text), msg, sizeof(msg));
    if (rc == 0) rc = fs_afile_write(&cfg, "\n", 1, msg, sizeof(msg));
    free(text);
    if (rc != 0) snprintf(err, errlen, "writing config.json: %s", msg);
    else if (hf_write_tensors(m, path, step, msg, sizeof(msg)) != 0) {
        fs_afile_abort(&cfg);
        snprintf(err, errlen, "writing %s: %s", path, msg);
        rc = -1;
    } else if (fs_afile_commit(&cfg, msg, sizeof(msg)) != 0) {
        snprintf(err, errlen, "writing config.json: %s", msg);
        rc = -1;
    }
    if (rc != 0 && made_dir) rmdir(outdir); /* no empty hf/ left behind (fails if not empty) */
    return rc;
}
