/*
 * train/model.h — the GPT-2 model: parameters, activations, forward, backward, KV-cache decode.
 *
 * Architecture (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners"):
 * token + learned position embeddings, n_layer pre-LayerNorm blocks (causal multi-head attention,
 * GELU MLP with 4·d hidden), a final LayerNorm, and an LM head tied to the token embedding.
 *
 * All parameters live in ONE contiguous fp32 buffer (so the optimizer, gradient reduction and
 * checkpointing see a flat array), described by a table of named tensors that uses Hugging Face
 * GPT-2 names ("h.3.attn.c_attn.weight"). Linear weights are stored (out, in); the HF export
 * transposes them to GPT-2's Conv1D (in, out) layout.
 */
#ifndef MT_MODEL_H
#define MT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"

typedef struct {
    int n_layer;
    int n_head;
    int d_model;
    int seq_len; /* maximum context T */
    int vocab_size;
    /* tensor parallelism: this rank holds n_head/tp heads and 4·d_model/tp MLP columns.
     * 0 or 1 = no tensor parallelism. */
    int tp, tp_rank;
} gpt_config;

/* One named parameter tensor inside the flat buffer. */
typedef struct {
    char name[64];
    int ndim;
    int64_t shape[2];
    size_t offset; /* in floats, from the start of the flat buffer */
    size_t numel;
    int decay; /* 1 for 2-D weights (AdamW weight decay applies) */
    /* Where this (possibly tensor-parallel) shard sits in the GLOBAL tensor, for checkpoints that
     * reshard across layouts. The local data is the row-major box g_local at g_offset of a
     * tensor of shape g_shape. qkv weights/biases use a 3-D logical view (3, C, C) / (3, C) so a
     * head-split shard is one box: (3, C/tp, C) at (0, tp_rank·C/tp, 0). */
    int g_ndim;
    int64_t g_shape[3], g_offset[3], g_local[3];
    int tp_split;      /* dimension of the global view split across TP ranks, -1 = none */
    int tp_replicated; /* 1 if every TP rank holds the same values (LayerNorm, wte, wpe, ...) */
} gpt_tensor;

/* Pointers to one block's parameters (or gradients) inside a flat buffer. */
typedef struct {
    float *ln1w, *ln1b;         // (C)
    float *qkvw, *qkvb;         // (3C, C), (3C)
    float *attprojw, *attprojb; // (C, C), (C)
    float *ln2w, *ln2b;         // (C)
    float *fcw, *fcb;           // (4C, C), (4C)
    float *fcprojw, *fcprojb;   // (C, 4C), (C)
} gpt_block;

/* Forward activations of one block, kept for backward. N = B*T rows. */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd; // (N, C), (N), (N)
    float *qkv;                       // (N, 3C)
    float *atty;                      // (N, C)
    float *att;                       // (B, NH, T, T)
    float *res2;                      // (N, C) residual after attention
    float *ln2, *ln2_mean, *ln2_rstd; // (N, C), (N), (N)
    float *fch, *fch_gelu;            // (N, 4C)
    float *res3;                      // (N, C) block output
} gpt_block_acts;

struct comm;

typedef struct {
    gpt_config cfg;
    struct comm *tp_comm; /* tensor-parallel group (NULL or size 1 = none) */
    /* Called during gpt_backward each time the gradients at flat offsets >= offset are final
     * (after the head, after each block, after the embeddings), so data-parallel reduction of
     * those buckets can start while the backward continues. NULL = not called. */
    void (*grads_ready)(void *user, size_t offset);
    void *grads_ready_user;
    /* parameters */
    gpt_tensor *tensors;
    int n_tensors;
    size_t num_params;
    size_t capacity; /* floats allocated in params/grads (>= num_params, see gpt_reserve) */
    float *params;  // (num_params)
    float *grads;   // (num_params), allocated by gpt_alloc_training
    float *wte, *wpe, *lnfw, *lnfb;     // views into params: (V,C), (maxT,C), (C), (C)
    float *dwte, *dwpe, *dlnfw, *dlnfb; // views into grads
    gpt_block *blocks, *dblocks;        // (n_layer) each
    /* activations for a fixed (B, T) */
    int B, T;
    float *act_mem;
    float *encoded;                    // (N, C)
    gpt_block_acts *acts;              // (n_layer)
    float *lnf, *lnf_mean, *lnf_rstd;  // (N, C), (N), (N)
    float *logits;                     // (N, V); dlogits in place after a training forward
    float *losses;                     // (N)
    int B_last, T_last;                /* shape of the last forward */
    float dloss_last;                  /* its dloss (0 = no backward may follow) */
    /* backward scratch (inside act_mem) */
    float *dres, *dln, *datty, *dqkv, *datt, *dfch, *dfch_gelu; // see model.c
    int *inputs_saved;                 // (N) token ids of the last forward
} gpt_model;

/* Build the parameter table and allocate params (zeroed). With cfg->tp > 1 the tensors are
 * this rank's shards (column-parallel qkv/fc, row-parallel out-projections; LayerNorms,
 * embeddings and the tied head replicated) and tp_comm must be set before the first forward.
 * Returns 0, or -1 with err for a bad config (d_model % n_head != 0, n_head % tp != 0,
 * non-positive sizes). */
int gpt_build(gpt_model *m, const gpt_config *cfg, char *err, size_t errlen);

/* Grow the params (and grads, if allocated) buffers to `total` floats (>= num_params; the tail
 * is zero padding, e.g. for ZeRO-1 shards of equal size) and re-point every view. */
void gpt_reserve(gpt_model *m, size_t total);

/* Assemble the full (tp = 1) parameter buffer from the local buffers of every TP rank:
 * all_local holds tp consecutive blocks of num_params floats, block r from tp rank r (an
 * all-gather of params); full receives the parameters in the layout of an unsharded model of
 * the same config (full_cfg's num_params floats). */
void gpt_assemble_full(const gpt_model *m, const float *all_local, const gpt_model *full);

/* GPT-2 initialisation: weights ~ N(0, 0.02), residual projections (attn.c_proj, mlp.c_proj)
 * ~ N(0, 0.02/sqrt(2·n_layer)), biases 0, LayerNorm weights 1. Deterministic for a seed. */
void gpt_init_weights(gpt_model *m, uint64_t seed);

/* Allocate gradients (zeroed) and activations for microbatches of B sequences of length T
 * (T <= seq_len). Memory: see gpt_activation_floats. */
void gpt_alloc_training(gpt_model *m, int B, int T);

/* Floats of activation + backward scratch memory for (B, T): for memory reports. */
size_t gpt_activation_floats(const gpt_config *cfg, int B, int T);

/* Forward pass. inputs, targets (B,T) int token ids; targets may be NULL (no loss).
 * dloss: gradient scale of the mean loss for the backward that follows, normally
 * 1/(B*T*grad_accum); 0 = no backward will follow (eval). Returns the mean loss over the
 * B*T tokens (NAN if targets is NULL). B, T must not exceed the sizes given to
 * gpt_alloc_training. */
float gpt_forward(gpt_model *m, const int *inputs, const int *targets, int B, int T, float dloss);

/* Backward pass of the last forward (which must have had dloss != 0). Accumulates (+=) into
 * m->grads, so calling forward/backward for each microbatch implements gradient accumulation. */
void gpt_backward(gpt_model *m);

/* Zero m->grads. */
void gpt_zero_grad(gpt_model *m);

void gpt_free(gpt_model *m);

/* --- inference with a KV cache ---------------------------------------------------------------
 * One decode state per concurrent generation (a serving slot). The model is read only here, so
 * several states may decode with one model from different threads. */
typedef struct {
    int max_T;
    int pos;               /* tokens already in the cache */
    float *k, *v;          // (L, maxT, C) each
    float *x, *buf, *qkv, *h, *hg, *scratch; // one-token scratch
    float *logits;         // (V) logits after the last gpt_decode_step
} gpt_decode_state;

void gpt_decode_init(gpt_decode_state *s, const gpt_model *m);
void gpt_decode_reset(gpt_decode_state *s);
/* Feed one token at position s->pos (must be < seq_len), append its K,V to the cache, and
 * leave the next-token logits (V) in s->logits. Cost O(params + pos·C) — the prefix is never
 * recomputed. Returns s->logits. */
const float *gpt_decode_step(const gpt_model *m, gpt_decode_state *s, int token);
void gpt_decode_free(gpt_decode_state *s);

#endif /* MT_MODEL_H */
