/*
 * train/sample.h — choosing the next token from logits: temperature, top-k, top-p (nucleus,
 * Holtzman et al. 2020), greedy at temperature 0. Numerically stable (max-subtracted) softmax.
 * Used by `minitrain sample`, the trainer's periodic samples and the HTTP server.
 */
#ifndef MT_SAMPLE_H
#define MT_SAMPLE_H

#include "core/rng.h"

typedef struct {
    float temperature; /* 0 = greedy (argmax); > 0 divides the logits */
    int top_k;         /* keep the k most likely tokens; 0 = all */
    float top_p;       /* keep the smallest set with cumulative probability >= p; 1 = all */
} sample_params;

/* Pick a token id from logits (V). work: scratch of at least 2·V floats (probabilities and an
 * index buffer), or NULL to allocate. Ties in greedy mode go to the lowest id. */
int sample_token(const float *logits, int V, const sample_params *p, rng_state *rng, float *work);

#endif /* MT_SAMPLE_H */
