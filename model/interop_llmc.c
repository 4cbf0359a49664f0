/*
 * model/interop_llmc.c — llm.c's GPT-2 model file (train_gpt2.py write_model, train_gpt2.c
 * gpt2_build_from_checkpoint), read and written as a stream in llm.c's own order.
 *
 * Layout: 256 x int32 header [0] 20240326, [1] version (3: fp32, 5: bf16), [2] maxT, [3] V,
 * [4] L, [5] NH, [6] C, [7] Vp (V padded, 50304 for GPT-2), then the parameters, each a
 * row-major array, in this order:
 *   wte (Vp, C)  wpe (maxT, C)
 *   ln1w (L, C)  ln1b (L, C)  qkvw (L, 3C, C)  qkvb (L, 3C)  attprojw (L, C, C)  attprojb (L, C)
 *   ln2w (L, C)  ln2b (L, C)  fcw (L, 4C, C)   fcb (L, 4C)   fcprojw (L, C, 4C)  fcprojb (L, C)
 *   lnfw (C)     lnfb (C)
 * Linear weights are (out, in) like minitrain's, so each stacked (L, ...) array is L of our
 * per-layer tensors back to back and the import is a relabelling. The header's shape fixes the
 * file size exactly, which catches truncated files and trailing garbage before anything is read.
 *
 * bf16 (version 5) is the top half of an fp32: widening is exact; narrowing rounds to nearest,
 * ties to even (NaN becomes 0x7fc0), as PyTorch's .to(torch.bfloat16) does.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/fs.h"
#include "model/interop.h"

#define LLMC_HEADER_INTS 256
#define CHUNK_FLOATS (1 << 16)

/* per-layer tensors in llm.c's order, with their size in units of C (rows x cols / C) */
static const char *const LAYER_TENSORS[12] = {
    "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
    "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
    "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};

/* The host mirror's copy of a tensor (hp = gpt_params_host(m)), NULL if the model lacks it. */
static float *tensor(const gpt_model *m, float *hp, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return hp + m->tensors[i].offset;
    return NULL;
}
/* A view of m (wte, lnfw, ...) as a pointer into the host mirror hp. */
#define HOST_VIEW(m, hp, view) ((hp) + ((view) - (m)->params))

static size_t tensor_numel(const gpt_model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return m->tensors[i].numel;
    return 0;
}

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0; /* NaN, as PyTorch writes it */
    u += 0x7fffu + ((u >> 16) & 1); /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

/* Read n elements of the file's dtype into dst (NULL: skip them). */
static int read_elems(FILE *f, float *dst, size_t n, int bf16) {
    if (!bf16) {
        if (dst) return fread(dst, 4, n, f) == n ? 0 : -1;
        return fseeko(f, (off_t)(4 * n), SEEK_CUR);
    }
    uint16_t buf[CHUNK_FLOATS];
    for (size_t done = 0; done < n;) {
        size_t k = n - done < CHUNK_FLOATS ? n - done : CHUNK_FLOATS;
        if (fread(buf, 2, k, f) != k) return -1;
        if (dst)
            for (size_t i = 0; i < k; i++) dst[done + i] = bf16_to_f32(buf[i]);
        done += k;
    }
    return 0;
}

int interop_llmc_read(gpt_model *m, const char *path, int *version_out, char *err, size_t errlen) {
    memset(m, 0, sizeof(*m));
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (f == NULL || fstat(fileno(f), &st) != 0) {
        snprintf(err, errlen, "cannot open llm.c model file '%s': %s", path, strerror(errno));
        if (f) fclose(f);
        return -1;
    }
    int32_t h[LLMC_HEADER_INTS];
    if (!S_ISREG(st.st_mode)) { /* a directory "reads" as its st_size (4096) of nothing */
        snprintf(err, errlen, "llm.c model file '%s' is %s, not a file (give the .bin file, e.g. "
                 "gpt2_124M.bin)", path, S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
        fclose(f);
        return -1;
    }
    if (st.st_size < (off_t)sizeof(h) || fread(h, sizeof(h), 1, f) != 1) {
        snprintf(err, errlen, "llm.c model file '%s': truncated (%lld bytes; the header alone is "
                 "%zu)", path, (long long)st.st_size, sizeof(h));
        fclose(f);
        return -1;
    }
    if (h[0] != INTEROP_LLMC_MAGIC) {
        const char *is = h[0] == 20240328 ? " (it is an llm.c tokenizer file)"
                         : h[0] == 20240327 ? " (it is an llm.c debug state file)"
                         : h[0] == 20240520 ? " (it is a token shard)"
                         /* safetensors: an 8-byte little-endian header length, then '{' */
                         : ((const char *)h)[8] == '{' && h[1] == 0
                             ? " (it is a safetensors file: import it with --from hf)" : "";
        snprintf(err, errlen, "llm.c model file '%s': wrong magic %d, expected %d%s", path, h[0],
                 INTEROP_LLMC_MAGIC, is);
        fclose(f);
        return -1;
    }
    int version = h[1], maxT = h[2], V = h[3], L = h[4], NH = h[5], C = h[6], Vp = h[7];
    if (version != INTEROP_LLMC_FP32 && version != INTEROP_LLMC_BF16) {
        snprintf(err, errlen, "llm.c model file '%s': version %d (this build reads 3 = fp32 and "
                 "5 = bf16)", path, version);
        fclose(f);
        return -1;
    }
    if (maxT <= 0 || V <= 0 || L <= 0 || NH <= 0 || C <= 0 || Vp < V || C % NH != 0 ||
        C > 65536 || L > 1024 || Vp > (1 << 24) || maxT > (1 << 20)) {
        snprintf(err, errlen, "llm.c model file '%s': inconsistent header (maxT %d, V %d, Vp %d, "
                 "L %d, NH %d, C %d)", path, maxT, V, Vp, L, NH, C);
        fclose(f);
        return -1;
    }
    uint64_t c = (uint64_t)C;
    uint64_t elems = (uint64_t)Vp * c + (uint64_t)maxT * c + (uint64_t)L * 12 * c * c +
                     (uint64_t)L * 13 * c + 2 * c;
    uint64_t want = sizeof(h) + elems * (version == INTEROP_LLMC_BF16 ? 2 : 4);
    if ((uint64_t)st.st_size != want) {
        snprintf(err, errlen, "llm.c model file '%s': %s: the header's shape (L %d, C %d, V %d "
                 "padded to %d, maxT %d) needs %llu bytes, the file has %lld", path,
                 (uint64_t)st.st_size < want ? "truncated" : "trailing bytes", L, C, V, Vp, maxT,
                 (unsigned long long)want, (long long)st.st_size);
        fclose(f);
        return -1;
    }
    gpt_config cfg = {.n_layer = L, .n_head = NH, .d_model = C, .seq_len = maxT, .vocab_size = V};
    if (gpt_build(m, &cfg, err, errlen) != 0) {
        fclose(f);
        return -1;
    }
    int bf = version == INTEROP_LLMC_BF16, rc = 0;
    float *hp = gpt_params_host(m); /* read on the host, uploaded below */
    rc |= read_elems(f, HOST_VIEW(m, hp, m->wte), (size_t)V * C, bf);
    rc |= read_elems(f, NULL, (size_t)(Vp - V) * C, bf); /* padding rows */
    rc |= read_elems(f, HOST_VIEW(m, hp, m->wpe), (size_t)maxT * C, bf);
    char name[64];
    for (int k = 0; k < 12 && rc == 0; k++)
        for (int l = 0; l < L && rc == 0; l++) {
            snprintf(name, sizeof(name), "h.%d.%s", l, LAYER_TENSORS[k]);
            rc |= read_elems(f, tensor(m, hp, name), tensor_numel(m, name), bf);
        }
    rc |= read_elems(f, HOST_VIEW(m, hp, m->lnfw), (size_t)C, bf);
    rc |= read_elems(f, HOST_VIEW(m, hp, m->lnfb), (size_t)C, bf);
    fclose(f);
    gpt_params_upload(m);
    if (rc != 0) {
        snprintf(err, errlen, "llm.c model file '%s': short read", path);
        gpt_free(m);
        return -1;
    }
    int bad = gpt_first_nonfinite(m);
    if (bad >= 0) {
        snprintf(err, errlen, "llm.c model file '%s': tensor '%s' holds non-finite values "
                 "(NaN/Inf); refusing to import it", path, m->tensors[bad].name);
        gpt_free(m);
        return -1;
    }
    if (version_out) *version_out = version;
    return 0;
}

/* Append n floats (NULL: zeros) in the file's dtype. */
static int write_elems(fs_afile *a, const float *src, size_t n, int bf16, char *err,
                       size_t errlen) {
    static const float zeros[CHUNK_FLOATS];
    uint16_t h[CHUNK_FLOATS];
    for (size_t done = 0; done < n;) {
        size_t k = n - done < CHUNK_FLOATS ? n - done : CHUNK_FLOATS;
        const float *s = src ? src + done : zeros;
        int rc;
        if (bf16) {
            for (size_t i = 0; i < k; i++) h[i] = f32_to_bf16(s[i]);
            rc = fs_afile_write(a, h, 2 * k, err, errlen);
        } else {
            rc = fs_afile_write(a, s, 4 * k, err, errlen);
        }
        if (rc != 0) return -1;
        done += k;
    }
    return 0;
}

int interop_llmc_write(const gpt_model *m, const char *path, int version, char *err,
                       size_t errlen) {
    const gpt_config *c = &m->cfg;
    if (c->moe_every > 0) {
        snprintf(err, errlen, "llm.c's model file has no mixture-of-experts layers; this model "
                 "has experts every %d blocks", c->moe_every);
        return -1;
    }
    if ((c->tp > 1 || c->pp > 1) || m->wte == NULL || m->lnfw == NULL) {
        snprintf(err, errlen, "interop_llmc_write needs an unsharded model");
        return -1;
    }
    int C = c->d_model, V = c->vocab_size, Vp = (V + 127) / 128 * 128, L = c->n_layer;
    int32_t h[LLMC_HEADER_INTS] = {0};
    h[0] = INTEROP_LLMC_MAGIC;
    h[1] = version;
    h[2] = c->seq_len;
    h[3] = V;
    h[4] = L;
    h[5] = c->n_head;
    h[6] = C;
    h[7] = Vp;
    int bf = version == INTEROP_LLMC_BF16;
    fs_afile a;
    if (fs_afile_open(&a, path, err, errlen) != 0) return -1;
    int rc = fs_afile_write(&a, h, sizeof(h), err, errlen);
    float *hp = gpt_params_host((gpt_model *)m); /* device → host mirror, then written */
    if (rc == 0) rc = write_elems(&a, HOST_VIEW(m, hp, m->wte), (size_t)V * C, bf, err, errlen);
    if (rc == 0) rc = write_elems(&a, NULL, (size_t)(Vp - V) * C, bf, err, errlen);
    if (rc == 0)
        rc = write_elems(&a, HOST_VIEW(m, hp, m->wpe), (size_t)c->seq_len * C, bf, err, errlen);
    char name[64];
    for (int k = 0; k < 12 && rc == 0; k++)
        for (int l = 0; l < L && rc == 0; l++) {
            snprintf(name, sizeof(name), "h.%d.%s", l, LAYER_TENSORS[k]);
            rc = write_elems(&a, tensor(m, hp, name), tensor_numel(m, name), bf, err, errlen);
        }
    if (rc == 0) rc = write_elems(&a, HOST_VIEW(m, hp, m->lnfw), (size_t)C, bf, err, errlen);
    if (rc == 0) rc = write_elems(&a, HOST_VIEW(m, hp, m->lnfb), (size_t)C, bf, err, errlen);
    if (rc == 0) return fs_afile_commit(&a, err, errlen);
    fs_afile_abort(&a);
    return -1;
}
