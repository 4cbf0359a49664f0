/*
 * model/optim.c — AdamW, LR schedule and clipping (see model/optim.h).
 */
#include "model/optim.h"

#include <math.h>
#include <string.h>

#include "core/check.h"
#include "ops/ops.h"
#include "ops/prof.h"

void optim_init(optim_adamw *o, size_t n, float beta1, float beta2, float eps,
                float weight_decay) {
    memset(o, 0, sizeof(*o));
    o->n = n;
    o->beta1 = beta1;
    o->beta2 = beta2;
    o->eps = eps;
    o->weight_decay = weight_decay;
    o->m = ops_alloc((n ? n : 1) * sizeof(float), "adamw m"); /* device memory, like params */
    o->v = ops_alloc((n ? n : 1) * sizeof(float), "adamw v");
}

float optim_lr(int step, int steps, int warmup, float lr, float min_lr) {
    if (step < warmup) return lr * (float)(step + 1) / (float)warmup;
    int span = steps - 1 - warmup;
    if (span <= 0) return lr; /* no room left to decay */
    double ratio = (double)(step - warmup) / span;
    if (ratio > 1) ratio = 1;
    double coeff = 0.5 * (1.0 + cos(M_PI * ratio));
    return (float)(min_lr + coeff * (lr - min_lr));
}

double optim_grad_norm(const float *grads, size_t n) {
    double ss;
    PROF(PROF_GRAD_NORM, ss = ops_sumsq(grads, n));
    return sqrt(ss);
}

float optim_clip_scale(double norm, float clip) {
    if (clip <= 0 || norm <= 0 || !isfinite(norm)) return 1.0f;
    return norm > clip ? (float)(clip / norm) : 1.0f;
}

void optim_step(optim_adamw *o, gpt_model *m, float lr, float grad_scale) {
    size_t lo = o->offset, hi = o->offset + o->n;
    mtCheck(hi <= (m->capacity > m->num_params ? m->capacity : m->num_params),
            "optimizer range exceeds the parameter buffer");
    if (hi > m->num_params) hi = m->num_params; /* padding */
    o->t++;
    for (int i = 0; i < m->n_tensors; i++) {
        const gpt_tensor *t = &m->tensors[i];
        size_t a = t->offset > lo ? t->offset : lo;
        size_t b = t->offset + t->numel < hi ? t->offset + t->numel : hi;
        if (a >= b) continue;
        PROF(PROF_ADAMW, ops_adamw(m->params + a, m->grads + a, o->m + (a - lo), o->v + (a - lo),
                                   b - a, lr, o->beta1, o->beta2, o->eps,
                                   t->decay ? o->weight_decay : 0.0f, o->t, grad_scale));
    }
}

void optim_free(optim_adamw *o) {
    ops_free(o->m);
    ops_free(o->v);
    memset(o, 0, sizeof(*o));
}
