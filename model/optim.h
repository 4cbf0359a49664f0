/*
 * model/optim.h — AdamW over the model's flat parameter buffer, the learning-rate schedule and
 * global-norm gradient clipping.
 *
 * AdamW: Loshchilov & Hutter 2019 (decoupled weight decay), applied to 2-D weights only (biases
 * and LayerNorm parameters are not decayed, as in GPT-2/nanoGPT). Schedule: linear warm-up then
 * cosine decay to a floor (Loshchilov & Hutter 2017, SGDR, without restarts). Clipping: scale all
 * gradients by min(1, clip / ||g||₂) with the norm over every parameter (Pascanu et al. 2013).
 */
#ifndef MT_OPTIM_H
#define MT_OPTIM_H

#include <stddef.h>

#include "model/model.h"

typedef struct {
    float beta1, beta2, eps, weight_decay;
    size_t n;      /* parameters covered: the flat range [offset, offset + n) */
    size_t offset; /* 0, or this rank's ZeRO-1 shard start */
    float *m, *v; // (n) first and second moments
    int t;        /* steps taken (1-based after the first step) */
} optim_adamw;

/* Allocate zeroed moments for n parameters. */
void optim_init(optim_adamw *o, size_t n, float beta1, float beta2, float eps, float weight_decay);

/* Learning rate at 0-based step `step` of `steps`: (step+1)/warmup · lr during warm-up, then
 * cosine from lr at step == warmup to min_lr at step == steps-1 (and after). Units: same as lr. */
float optim_lr(int step, int steps, int warmup, float lr, float min_lr);

/* Global L2 norm of grads (n), accumulated in double. */
double optim_grad_norm(const float *grads, size_t n);

/* Clip factor for a global norm: min(1, clip / norm); 1 when clip <= 0 or norm is 0. */
float optim_clip_scale(double norm, float clip);

/* One AdamW step over the flat range [o->offset, o->offset + o->n) of the model (the whole model,
 * or a ZeRO-1 shard; the part beyond num_params is padding and skipped), decaying only the
 * tensors with decay = 1. The gradient is multiplied by grad_scale (clipping) inside the update;
 * m->grads itself is not modified. */
void optim_step(optim_adamw *o, gpt_model *m, float lr, float grad_scale);

void optim_free(optim_adamw *o);

#endif /* MT_OPTIM_H */
