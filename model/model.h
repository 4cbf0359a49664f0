/*
 * model/model.h — the GPT-2 model: parameters, activations, forward, backward, KV-cache decode.
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
#include "model/moe.h"

typedef struct {
    int n_layer; /* layers of the WHOLE model */
    int n_head;
    int d_model;
    int seq_len; /* maximum context T */
    int vocab_size;
    /* tensor parallelism: this rank holds n_head/tp heads and 4·d_model/tp MLP columns.
     * 0 or 1 = no tensor parallelism. */
    int tp, tp_rank;
    /* pipeline parallelism: this rank is stage pp_rank of pp and holds layers
     * [layer_begin, layer_end); stage 0 also holds the embeddings, the last stage the final
     * LayerNorm and the LM head (with its own copy of the tied wte). pp 0 or 1 = all layers. */
    int pp, pp_rank, layer_begin, layer_end;
    /* interleaved pipeline (parallel/pp.h): this rank holds n_chunks model chunks; chunk j is
     * layers [layer_begin + j·chunk_stride, layer_end + j·chunk_stride). The embeddings belong
     * to chunk 0 of stage 0, the head to the last chunk of the last stage. 0 or 1 = one range. */
    int n_chunks, chunk_stride;
    /* mixture of experts (model/moe.h): block l's MLP is a MoE layer when moe_every > 0 and
     * (l + 1) % moe_every == 0; experts are sharded over ep ranks (this rank: ep_rank). */
    int moe_every, n_experts, top_k;
    float capacity_factor, aux_coef, z_coef;
    int ep, ep_rank;
    /* context parallelism (parallel/cp.h): this rank holds T/cp positions of every sequence,
     * CP rank cp_rank's head-tail chunks; attention is ring attention over cp_comm
     * (model/ring_attention.h). B and T given to the passes are then the LOCAL T = seq_len/cp.
     * 0 or 1 = no context parallelism. */
    int cp, cp_rank;
    /* sequence parallelism (parallel/sp.h, needs tp > 1): outside the column-/row-parallel
     * linears (LayerNorms, residual stream, embedding, head and loss) this rank holds only
     * positions [tp_rank·T/tp, (tp_rank+1)·T/tp) of every sequence; f and g become all-gather and
     * reduce-scatter. The passes still take the whole (B, T) ids and targets and pick their rows;
     * a pipeline stage's input and output are the local (B, T/tp, C). LayerNorm, embedding and
     * head gradients are then partial over the TP group: gpt_sp_reduce_grads sums them. */
    int sp;
} gpt_config;

/* One named parameter tensor inside the flat buffer. */
typedef struct {
    char name[64];
    int ndim;
    int64_t shape[3];
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
    int pp_tied_copy;  /* 1 for the last pipeline stage's copy of wte (the first stage owns it) */
    int expert;        /* 1 for MoE expert weights: split over the EP group along dim 0 (reduce
                        * their gradients over the expert-data-parallel group, not dp) */
} gpt_tensor;

/* Pointers to one block's parameters (or gradients) inside a flat buffer. */
typedef struct {
    float *ln1w, *ln1b;         // (C)
    float *qkvw, *qkvb;         // (3C, C), (3C)
    float *attprojw, *attprojb; // (C, C), (C)
    float *ln2w, *ln2b;         // (C)
    float *fcw, *fcb;           // (4C, C), (4C)          dense MLP
    float *fcprojw, *fcprojb;   // (C, 4C), (C)
    int moe;                    /* 1: the MLP is a mixture of experts instead */
    float *router_w;            // (E, C)
    float *efc_w, *efc_b;       // (E_local, 4C, C), (E_local, 4C)
    float *eproj_w, *eproj_b;   // (E_local, C, 4C), (E_local, C)
} gpt_block;

/* Forward activations of one block, kept for backward. N = B*T rows. */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd; // (N, C), (N), (N)
    float *qkv;                       // (N, 3C)
    float *atty;                      // (N, C)
    float *att;                       // (B, NH, T, T); context parallel: (B, NH, T, T·cp)
    float *res2;                      // (N, C) residual after attention
    float *ln2, *ln2_mean, *ln2_rstd; // (N, C), (N), (N)
    float *fch, *fch_gelu;            // (N, 4C)
    float *res3;                      // (N, C) block output
} gpt_block_acts;

/* What B, the input half of a split backward (ZB-H1, parallel/pp.h), keeps for W, the weight
 * half: the gradient w.r.t. the output of each op that has weights, for one layer of one slot. */
typedef struct {
    float *dln1;     // (N, C)   w.r.t. ln_1's output
    float *dqkv;     // (N, 3Cl) w.r.t. c_attn's output
    float *dattproj; // (N, C)   w.r.t. attn.c_proj's output
    float *dln2;     // (N, C)   w.r.t. ln_2's output
    float *dfch;     // (N, 4Cl) w.r.t. mlp.c_fc's output
    float *dfcproj;  // (N, C)   w.r.t. mlp.c_proj's output
} gpt_block_kept;

struct comm;

/* Activation recompute (gpt_model.recompute, set before gpt_alloc_slots): NONE keeps every
 * activation; SELECTIVE drops each block's attention probabilities att (B, NH, T, T) and
 * recomputes them from the kept qkv in the block's backward (Korthikanti et al. 2022, "Reducing
 * Activation Recomputation in Large Transformer Models", section 4.2); FULL keeps only each block's
 * output (the next block's input) and reruns the whole block forward in its backward (Chen et al.
 * 2016, "Training Deep Nets with Sublinear Memory Cost"). Gradients are bit-identical to NONE:
 * the same ops run on the same inputs. */
typedef enum { GPT_RECOMPUTE_NONE = 0, GPT_RECOMPUTE_SELECTIVE, GPT_RECOMPUTE_FULL } gpt_recompute;

/* Where a layer hook is called (gpt_model.layer_hook): around each local block's forward and
 * backward, with the block's local index. A ZeRO-3 trainer gathers the block's parameters before
 * and frees them after (train/zero.c). */
typedef enum {
    GPT_LAYER_BEFORE_FORWARD,
    GPT_LAYER_AFTER_FORWARD,
    GPT_LAYER_BEFORE_BACKWARD,
    GPT_LAYER_AFTER_BACKWARD
} gpt_layer_event;

/* The activations of one microbatch in flight (pipeline schedules keep several). */
typedef struct {
    int B, T;       /* shape of the last forward through this slot */
    float dloss;    /* its dloss (0 = no backward may follow) */
    float *mem;
    float *encoded; // (N, C) input of the first local block: embeddings, or the previous stage's
    gpt_block_acts *acts;             // (local layers)
    float *lnf, *lnf_mean, *lnf_rstd; // (N, C), (N), (N)   last stage only
    float *logits;                    // (N, V); dlogits in place after a training forward
    float *losses;                    // (N)
    int *inputs;                      // (N) token ids (first stage), device
    int *targets, *pred;              // (N) each: targets copied in, argmax out (probes), device
    moe_layer **moe;                  // (local layers) MoE layer state, NULL for dense blocks
    /* split backward only (gpt_alloc_split): what B keeps for W */
    float *kept_mem;
    gpt_block_kept *kept;             // (chunk layers)
    float *dlnf;                      // (N, C) w.r.t. ln_f's output (last stage)
    float *dembed;                    // (N, C) w.r.t. the embedding output (first stage)
} gpt_acts;

/* MoE statistics of one forward, summed over this stage's MoE blocks. */
typedef struct {
    double aux_loss, z_loss;  /* per layer values summed over layers */
    int dropped;              /* (token, slot) assignments dropped on this rank */
    int tokens_min, tokens_max; /* assignments per expert (group), min/max over layers */
    double tokens_cv;         /* largest coefficient of variation over layers */
    int layers;               /* MoE blocks that ran */
} gpt_moe_stats;


typedef struct {
    gpt_config cfg;
    struct comm *tp_comm; /* tensor-parallel group (NULL or size 1 = none) */
    struct comm *ep_comm; /* expert-parallel group (NULL or size 1 = none), set before alloc */
    struct comm *cp_comm; /* context-parallel ring (cfg.cp > 1), set before the first forward */
    float aux_grad;       /* d(objective)/d(aux + z) of each MoE layer per microbatch */
    gpt_moe_stats moe_stats; /* accumulated over forwards since the caller last cleared it */
    /* (n_local, E + 1) per local block: assignments per expert (over the EP group, before
     * capacity) and, last, this rank's dropped assignments, added by every MoE forward since the
     * caller last cleared it. The caller owns it (the trainer, for the expert-load picture);
     * NULL = not recorded. */
    double *moe_load;
    /* Called during gpt_backward each time the gradients at flat offsets >= offset are final
     * (after the head, after each block, after the embeddings), so data-parallel reduction of
     * those buckets can start while the backward continues. NULL = not called. */
    void (*grads_ready)(void *user, size_t offset);
    void *grads_ready_user;
    /* Called around every local block's forward and backward (gpt_layer_event; in a backward
     * BEFORE_BACKWARD precedes the recomputation, AFTER_BACKWARD precedes grads_ready of the
     * block). NULL = not called. */
    void (*layer_hook)(void *user, int layer, gpt_layer_event ev);
    void *layer_hook_user;
    gpt_recompute recompute; /* set before gpt_alloc_slots */
    /* parameters */
    gpt_tensor *tensors;
    int n_tensors;
    size_t num_params;
    size_t capacity; /* floats allocated in params/grads (>= num_params, see gpt_reserve) */
    float *params;   // (num_params)
    float *grads;    // (num_params), allocated by gpt_alloc_training
    /* params and grads are DEVICE memory (ops/ops.h ops_alloc); host code reads or writes
     * parameters only through the host mirror (gpt_params_host / gpt_params_upload) */
    float *params_host; // (capacity) host mirror, allocated on first use; == params on cpu
    int first, last; /* this stage holds the embeddings / the head */
    int n_local;     /* layers on this stage (gpt_global_layer maps them to the model's) */
    int chunk_layers; /* layers per model chunk (n_local / cfg.n_chunks); a slot holds one chunk */
    int i_wte, i_wpe, i_lnf; /* tensor indices, -1 when not on this stage */
    float *wte, *wpe, *lnfw, *lnfb;     // views into params (NULL when not on this stage)
    float *dwte, *dwpe, *dlnfw, *dlnfb; // views into grads
    gpt_block *blocks, *dblocks;        // (n_local) each
    int *block_t0;                      // (n_local) index of each block's first tensor
    /* activations: n_slots microbatches of up to (B, T) */
    int B, T, n_slots;
    gpt_acts *slots;
    float *logits; /* slot 0's logits (tests, tools) */
    /* backward scratch, shared by all slots */
    float *scratch;
    float *dres, *dln, *datty, *dqkv, *datt, *dfch, *dfch_gelu;
    /* recompute: the one copy (in scratch) of what the backward recomputes — att (selective), or
     * every block activation res3 included (full); NULL pointers without recompute */
    gpt_block_acts work;
    float *sp_full, *sp_work; /* sequence parallel: (N, C) each, gathered rows and a permute */
} gpt_model;

/* ---- the model shape as JSON (model/model_json.c) ---------------------------------------------
 * One object, written and read the same way by every file that records a shape: model files'
 * "minitrain.model" metadata, checkpoint shard files' and the checkpoint state's "model":
 *   {"n_layer", "n_head", "d_model", "seq_len", "vocab_size",     whole numbers
 *    "moe_every", "n_experts", "top_k",                            whole numbers (model/moe.h)
 *    "capacity_factor", "aux_coef", "z_coef"}                      numbers (floats, %.9g)
 * Only the shape: the parallel layout (tp, pp, ep and their ranks) is the reader's. */
struct cJSON;

/* A new cJSON object holding c's shape (free with cJSON_Delete); NULL only when out of memory. */
struct cJSON *gpt_config_to_json(const gpt_config *c);

/* Read a shape written by gpt_config_to_json from object o into *c (zeroed first; the layout
 * fields stay 0). Every field must be there with its type: a missing, non-number or non-whole
 * (or out of int range) field is refused by name — "WHAT: model shape field 'n_head' is
 * missing", "... must be a number", "... must be a whole number in int range, got 1.5". The mixture-of-experts fields are the
 * one exception, as a group: when none of the six is there the model is dense (files written
 * before they existed); when some are, all must be. what prefixes the message (the file).
 * Returns 0, or -1 with err. */
int gpt_config_from_json(const struct cJSON *o, gpt_config *c, const char *what, char *err,
                         size_t errlen);

/* Build the parameter table and allocate params (zeroed). With cfg->tp > 1 the tensors are
 * this rank's shards (column-parallel qkv/fc, row-parallel out-projections; LayerNorms,
 * embeddings and the tied head replicated) and tp_comm must be set before the first forward.
 * Returns 0, or -1 with err for a bad config (d_model % n_head != 0, n_head % tp != 0,
 * non-positive sizes). */
int gpt_build(gpt_model *m, const gpt_config *cfg, char *err, size_t errlen);

/* Grow the params (and grads, if allocated) buffers to `total` floats (>= num_params; the tail
 * is zero padding, e.g. for ZeRO-1 shards of equal size) and re-point every view. */
void gpt_reserve(gpt_model *m, size_t total);

/* Copy the parameters of one shard (src: a model built for some tp_rank/pp_rank, whose
 * parameter values are src_params) into their places in `full`, an unsharded model of the same
 * config (tp = pp = 1). Calling it for every (tp, pp) shard assembles the whole model. */
void gpt_place_into_full(const gpt_model *src, const float *src_params, gpt_model *full);

/* The inverse of gpt_place_into_full: fill dst's parameters (a model built for some tp_rank /
 * pp_rank / ep_rank of full's config) with their boxes of `full` (tp = pp = ep = 1), the last
 * stage's copy of the tied wte included. Used to run a saved model in a parallel layout. */
void gpt_take_from_full(gpt_model *dst, const gpt_model *full);

/* GPT-2 initialisation: weights ~ N(0, 0.02), residual projections (attn.c_proj, mlp.c_proj)
 * ~ N(0, 0.02/sqrt(2·n_layer)), biases 0, LayerNorm weights 1. Deterministic for a seed. */
void gpt_init_weights(gpt_model *m, uint64_t seed);

/* Allocate gradients (zeroed) and one activation slot for microbatches of B sequences of length
 * T (T <= seq_len). gpt_alloc_slots: n_slots microbatches in flight (pipeline schedules). */
void gpt_alloc_training(gpt_model *m, int B, int T);
void gpt_alloc_slots(gpt_model *m, int B, int T, int n_slots);

/* Floats of activation memory of one slot and of the shared backward scratch, for (B, T) on
 * this model's stage: for memory reports. */
size_t gpt_activation_floats(const gpt_model *m, int B, int T);
/* The same, split: floats of ONE slot (kept for the backward, at m->recompute; one chunk's
 * layers, this rank's cp shard of length T and, with sp, its N/tp sequence-local rows) and of the
 * shared backward scratch (recompute's work copy included). */
void gpt_activation_sizes(const gpt_model *m, int B, int T, size_t *slot, size_t *scratch);
/* The same for this stage with the whole sequence on this rank — without context or sequence
 * parallelism, B sequences of length T (what a cp or sp rank's share is measured against). */
size_t gpt_activation_floats_whole_sequence(const gpt_model *m, int B, int T);

/* Forward pass. inputs, targets (B,T) int token ids; targets may be NULL (no loss).
 * dloss: gradient scale of the mean loss for the backward that follows, normally
 * 1/(B*T*grad_accum); 0 = no backward will follow (eval). Returns the mean loss over the
 * B*T tokens (NAN if targets is NULL). B, T must not exceed the sizes given to
 * gpt_alloc_training. */
float gpt_forward(gpt_model *m, const int *inputs, const int *targets, int B, int T, float dloss);

/* Backward pass of the last forward (which must have had dloss != 0). Accumulates (+=) into
 * m->grads, so calling forward/backward for each microbatch implements gradient accumulation. */
void gpt_backward(gpt_model *m);

/* --- pipeline stages -------------------------------------------------------------------------
 * The same passes, one stage and one slot at a time, for the pipeline schedule (parallel/pp.c).
 * N = B·T rows; activations cross stages as (N, C) buffers. */
/* Where the previous stage's output for this slot must be received (non-first stages). */
float *gpt_stage_input(gpt_model *m, int slot);
/* Forward of this stage for one microbatch into `slot`. First stage: embeds inputs (B, T);
 * last stage: head + loss against targets (B, T) with gradient scale dloss (0 = eval).
 * Returns the SUM of token losses on the last stage (count in *n_counted), 0 elsewhere. */
double gpt_stage_forward(gpt_model *m, int slot, const int *inputs, const int *targets, int B,
                         int T, float dloss, int *n_counted);
/* Optional extras of one forward (any field may be NULL; all HOST memory, copied in or out), for
 * attacks on the input embeddings (safety/robust.h):
 *   delta  (B, T, C) in: added to the token-embedding rows on the first stage, so the blocks see
 *          wte[tok] + delta + wpe[t] (position embeddings are not perturbed); ignored elsewhere;
 *   pred   (B, T) out: argmax over the vocabulary of each position's logits, taken before the
 *          loss overwrites them (last stage only; first maximum on a tie);
 *   losses (B, T) out: each position's cross-entropy −log p[target] (last stage, needs targets). */
typedef struct {
    const float *delta;
    int *pred;
    float *losses;
} gpt_probe;
/* gpt_stage_forward with a probe (NULL = gpt_stage_forward exactly). */
double gpt_stage_forward_ex(gpt_model *m, int slot, const int *inputs, const int *targets, int B,
                            int T, float dloss, const gpt_probe *probe, int *n_counted);
/* This stage's output (N, C) for the slot (non-last stages), to send to the next stage. */
const float *gpt_stage_output(const gpt_model *m, int slot);
/* --- model chunks and the split backward (interleaved and ZB-H1 pipelines, parallel/pp.h) ------
 * Chunk c of this rank's n_chunks (0 with one chunk). A slot holds one chunk's activations. */
/* The model's index of local layer l. */
int gpt_global_layer(const gpt_model *m, int l);
/* gpt_stage_forward for chunk c: embeds on chunk 0 of the first stage, runs the head and loss on
 * the last chunk of the last stage (returning the loss sum there, 0 elsewhere). */
double gpt_chunk_forward(gpt_model *m, int slot, int chunk, const int *inputs, const int *targets,
                         int B, int T, float dloss, int *n_counted);
/* The output (N, C) of chunk c's forward in the slot, to send on. */
const float *gpt_chunk_output(const gpt_model *m, int slot);
/* gpt_stage_backward for chunk c (NULL returned for the model's first chunk). */
const float *gpt_chunk_backward(gpt_model *m, int slot, int chunk, const float *dout);
/* B: the input half of chunk c's backward — the same ops as gpt_chunk_backward for the input
 * gradient, no parameter gradient, and it keeps in the slot what W needs (gpt_alloc_split must
 * have run). Returns the gradient w.r.t. the chunk input (NULL for the model's first chunk). */
const float *gpt_chunk_backward_b(gpt_model *m, int slot, int chunk, const float *dout);
/* W: the weight half (model/model_wgrad.c) — accumulates into m->grads exactly what
 * gpt_chunk_backward would have, from what B kept and the slot's activations (bit-identical:
 * the same ops on the same operands). The slot must not be reused between B and W. */
void gpt_chunk_backward_w(gpt_model *m, int slot, int chunk);
/* Allocate, per slot, what B keeps for W: (4C + 7C/tp)·N floats per chunk layer, plus (N, C)
 * for ln_f and for the embedding output where the stage has them. After gpt_alloc_slots;
 * gpt_free_activations frees it. Refuses MoE blocks (their backward is not split). */
void gpt_alloc_split(gpt_model *m);

/* Backward of this stage for the slot. dout (N, C): gradient w.r.t. this stage's output
 * (ignored on the last stage, which starts from its dlogits). Accumulates parameter gradients;
 * returns the gradient w.r.t. the stage input (N, C) to send back (non-first stages; valid
 * until the next backward), NULL on the first stage (which runs the embedding backward). */
const float *gpt_stage_backward(gpt_model *m, int slot, const float *dout);

/* The backward of gpt_stage_backward for the INPUT only: the gradient of the slot's loss (scaled
 * by its forward's dloss, which must be != 0) w.r.t. this stage's input (N, C) — on the first
 * stage w.r.t. the embedding output, i.e. w.r.t. a gpt_probe delta. No parameter gradient is
 * computed: m->grads is neither read nor written, grads_ready is never called, no optimizer state
 * exists here to touch, and the MoE auxiliary losses do not contribute (the attack objective is
 * the cross-entropy alone). dout as for gpt_stage_backward (ignored on the last stage). Costs
 * about half a training backward (no weight-gradient matmuls). Returns m's scratch, valid until
 * the next backward; with tensor parallelism identical on every rank of the TP group. */
const float *gpt_stage_backward_input(gpt_model *m, int slot, const float *dout);

/* After gpt_backward / gpt_stage_backward on the first stage: the gradient of the objective
 * w.r.t. the embedding output (N, C) of that backward's slot (what FreeLB's ascent steps use),
 * valid until the next backward. */
const float *gpt_embed_grad(const gpt_model *m);

/* Sequence parallelism (cfg.sp): sum over the TP group the gradients each rank holds only for
 * its own positions — every LayerNorm's, the token and position embeddings' (the tied head
 * included). Row-parallel biases are complete already (their gradient is a sum over all rows,
 * which every rank sees after the g backward's all-gather). Call once per optimizer step, after
 * the accumulated backward; a no-op without sp. Collective over the TP group. */
void gpt_sp_reduce_grads(gpt_model *m);

/* Zero m->grads. */
void gpt_zero_grad(gpt_model *m);

/* The MoE layer configuration of this model (model/moe.h), for its MoE blocks. */
moe_config gpt_moe_config(const gpt_model *m);

/* Index of the first tensor holding a NaN or Inf, or -1 when every parameter is finite (a model
 * that loads must not be served or trained silently from non-finite weights). */
int gpt_first_nonfinite(const gpt_model *m);

/* The host mirror of the parameters: copies params (device) into a host buffer of capacity
 * floats and returns it (on the cpu device, params itself: no copy). Valid until the next call,
 * gpt_reserve or gpt_free. After writing into it, gpt_params_upload makes the device copy agree. */
float *gpt_params_host(gpt_model *m);
void gpt_params_upload(gpt_model *m);

/* Re-point the wte/wpe/ln_f/block views into params and grads (after a reallocation). */
void gpt_rebind(gpt_model *m);

/* Free the activation slots and scratch (parameters stay). */
void gpt_free_activations(gpt_model *m);

void gpt_free(gpt_model *m);

/* --- inference with a KV cache ---------------------------------------------------------------
 * One decode state per concurrent generation (a serving slot). The model is read only here, so
 * several states may decode with one model from different threads. */
typedef struct {
    int max_T;
    int pos;               /* tokens already in the cache */
    float *k, *v;          // (L, maxT, C) each, device
    float *x, *buf, *qkv, *h, *hg, *scratch; // one-token scratch, device
    float *dlogits;        // (V) device logits of the last step
    int *ids;              // (2) device: the token and its position
    float *logits;         // (V) HOST copy of the logits after the last gpt_decode_step
    int n_layer;
    moe_layer **moe;       // (n_layer) per-block MoE state (NULL for dense blocks)
} gpt_decode_state;

void gpt_decode_init(gpt_decode_state *s, const gpt_model *m);
void gpt_decode_reset(gpt_decode_state *s);
/* Feed one token at position s->pos (must be < seq_len), append its K,V to the cache, and
 * leave the next-token logits (V) in s->logits. Cost O(params + pos·C) — the prefix is never
 * recomputed. Returns s->logits. */
const float *gpt_decode_step(const gpt_model *m, gpt_decode_state *s, int token);
void gpt_decode_free(gpt_decode_state *s);
/* After gpt_decode_step: the last hidden state of the token it fed — the final LayerNorm's
 * output (C floats, what the LM head multiplies; Hugging Face's last_hidden_state) — copied to
 * out (host). */
void gpt_decode_hidden(const gpt_model *m, const gpt_decode_state *s, float *out);

/* --- continuous batching (model/decode_batch.c) ------------------------------------------------
 * One forward over the next tokens of several generations: each linear layer is one GEMM over
 * every row of every generation, attention runs per row against its own state's cache. */
typedef struct gpt_batch gpt_batch;

/* Work buffers for up to max_rows rows (tokens) from up to max_seqs generations per step
 * (1 <= max_seqs <= max_rows). Memory: about max_rows·(12·d_model + seq_len) + max_seqs·vocab
 * floats. */
gpt_batch *gpt_batch_create(const gpt_model *m, int max_rows, int max_seqs);
void gpt_batch_free(gpt_batch *b);

/* Feed generation s (0 <= s < n_seq) the n_tok[s] >= 1 tokens tokens[s][0..n_tok[s]) at
 * positions st[s]->pos.., append their K,V to st[s]'s cache, leave the logits (V) after its last
 * token in st[s]->logits and advance st[s]->pos by n_tok[s]. The states must be distinct and
 * st[s]->pos + n_tok[s] <= seq_len; sum of n_tok <= max_rows. A prompt may be fed in chunks
 * over several calls (chunked prefill). Per generation the result equals gpt_decode_step fed
 * the same tokens one by one, up to float rounding of the GEMM (OpenBLAS picks kernels by row
 * count). Unsharded models only (tp = pp = 1). */
void gpt_decode_batch(const gpt_model *m, gpt_batch *b, gpt_decode_state *const *st,
                      const int *const *tokens, const int *n_tok, int n_seq);

#endif /* MT_MODEL_H */
