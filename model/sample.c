/*
 * model/sample.c — temperature / top-k / top-p sampling (see model/sample.h).
 *
 * Top-k and top-p need the probabilities in descending order; a full sort of V entries per token
 * is cheap next to the forward pass (V·C multiply-adds), so we keep it simple: select candidates,
 * sort them, cut by k and p, renormalise, draw.
 */
#include "model/sample.h"

#include <math.h>
#include <stdlib.h>

#include "core/check.h"

typedef struct {
    float p;
    int id;
} cand;

static int cand_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return x->id - y->id;
}

int sample_token(const float *logits, int V, const sample_params *p, rng_state *rng, float *work) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (p->temperature <= 0.0f) return best;
    cand *c = work ? (cand *)work : mallocCheck((size_t)V * sizeof(cand));
    float maxv = logits[best];
    double sum = 0;
    for (int i = 0; i < V; i++) {
        float e = expf((logits[i] - maxv) / p->temperature);
        c[i].p = e;
        c[i].id = i;
        sum += e;
    }
    int n = V;
    int want_sort = (p->top_k > 0 && p->top_k < V) || (p->top_p > 0 && p->top_p < 1);
    if (want_sort) {
        qsort(c, (size_t)V, sizeof(cand), cand_desc);
        if (p->top_k > 0 && p->top_k < n) n = p->top_k;
        if (p->top_p > 0 && p->top_p < 1) {
            double target = p->top_p * sum, cum = 0;
            for (int i = 0; i < n; i++) {
                cum += c[i].p;
                if (cum >= target) {
                    n = i + 1;
                    break;
                }
            }
        }
        sum = 0;
        for (int i = 0; i < n; i++) sum += c[i].p;
    }
    double r = rng_uniform(rng) * sum, cum = 0;
    int pick = c[n - 1].id;
    for (int i = 0; i < n; i++) {
        cum += c[i].p;
        if (r < cum) {
            pick = c[i].id;
            break;
        }
    }
    if (!work) free(c);
    return pick;
}

void sample_generate(const gpt_model *m, const uint32_t *prompt, size_t n, int max_tokens,
                     int vocab_limit, const sample_params *p, rng_state *rng,
                     void (*emit)(int token, void *user), void *user) {
    int V = m->cfg.vocab_size, ctx = m->cfg.seq_len;
    mtCheck(n >= 1 && (int)n < ctx, "sample_generate: the prompt must hold 1..seq_len-1 tokens");
    if (vocab_limit <= 0 || vocab_limit > V) vocab_limit = V;
    gpt_decode_state st;
    gpt_decode_init(&st, m);
    float *work = mallocCheck((size_t)2 * V * sizeof(float));
    /* history of every token, so generation can go past the context: when the cache is full,
     * the last ctx/2 tokens are fed again as a fresh context (a recompute, once per ctx/2). */
    int *hist = mallocCheck((n + (size_t)(max_tokens > 0 ? max_tokens : 0) + 1) * sizeof(int));
    size_t nh = 0;
    const float *logits = NULL;
    for (size_t i = 0; i < n; i++) logits = gpt_decode_step(m, &st, hist[nh++] = (int)prompt[i]);
    for (int i = 0; i < max_tokens; i++) {
        int t = sample_token(logits, vocab_limit, p, rng, work);
        hist[nh++] = t;
        emit(t, user);
        if (i + 1 == max_tokens) break;
        if (st.pos == ctx) {
            gpt_decode_reset(&st);
            size_t keep = (size_t)ctx / 2;
            for (size_t j = nh - keep; j < nh - 1; j++) gpt_decode_step(m, &st, hist[j]);
        }
        logits = gpt_decode_step(m, &st, t);
    }
    free(hist);
    free(work);
    gpt_decode_free(&st);
}
