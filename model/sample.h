/*
 * model/sample.h — choosing the next token from logits: temperature, top-k, top-p (nucleus,
 * Holtzman et al. 2020), greedy at temperature 0. Numerically stable (max-subtracted) softmax.
 * Used by `minitrain sample`, the trainer's periodic samples and the HTTP server; sample_generate
 * is the whole loop of `minitrain sample` (prompt in, tokens out).
 */
#ifndef MT_SAMPLE_H
#define MT_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"
#include "model/model.h"

typedef struct {
    float temperature; /* 0 = greedy (argmax); > 0 divides the logits */
    int top_k;         /* keep the k most likely tokens; 0 = all */
    float top_p;       /* keep the smallest set with cumulative probability >= p; 1 = all */
} sample_params;

/* Pick a token id from logits (V). work: scratch of at least 2·V floats (probabilities and an
 * index buffer), or NULL to allocate. Ties in greedy mode go to the lowest id. */
int sample_token(const float *logits, int V, const sample_params *p, rng_state *rng, float *work);

/* Continue prompt (n token ids, 1 <= n < m->cfg.seq_len) by max_tokens tokens drawn with p, on a
 * KV cache (model/model.h's decode state): each prompt token costs one cached step, and emit(token,
 * user) receives every generated token as soon as it is chosen. Only ids < vocab_limit are drawn
 * (a tokenizer may have fewer ids than the model's vocab). Past the context, the last seq_len/2
 * tokens are fed again as a fresh context: one recompute per seq_len/2 generated tokens. */
void sample_generate(const gpt_model *m, const uint32_t *prompt, size_t n, int max_tokens,
                     int vocab_limit, const sample_params *p, rng_state *rng,
                     void (*emit)(int token, void *user), void *user);

#endif /* MT_SAMPLE_H */
