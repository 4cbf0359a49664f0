/*
 * model/param_hash.c — the parameters' 64-bit fingerprint (model/param_hash.h).
 */
#include "model/param_hash.h"

#include <string.h>

#include "core/hash.h"

void gpt_params_hash(gpt_model *m, uint64_t out[2]) {
    const float *p = gpt_params_host(m); // (num_params)
    uint64_t h[2] = {HASH_FNV64_BASIS, HASH_FNV64_BASIS};
    int any_expert = 0;
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor *t = &m->tensors[i];
        int e = t->expert != 0;
        uint64_t th = hash_words64(p + t->offset, t->numel * sizeof(float));
        const uint8_t *b = (const uint8_t *)&th;
        for (int k = 0; k < 8; k++) h[e] = (h[e] ^ b[k]) * HASH_FNV64_PRIME;
        any_expert |= e;
    }
    out[0] = h[0];
    out[1] = any_expert ? h[1] : 0;
}

int gpt_tensor_index(const gpt_model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return i;
    return -1;
}
