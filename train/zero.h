/*
 * train/zero.h — ZeRO stages 2 and 3 (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward
 * Training Trillion Parameter Models", sections 5.2–5.3) over the model's flat buffers.
 *
 * The flat parameter/gradient buffer of this rank's model shard is cut into UNITS: the tensors
 * before the first local block (the embeddings: the "root" head), the local blocks, and the
 * tensors after the last block (ln_f, the last stage's copy of the tied wte: the root tail).
 * A dense block is one unit; a mixture-of-experts block is two, its dense part (attention, the
 * LayerNorms, the router) and its experts. A dense unit is split evenly over the data-parallel
 * group (padded to a multiple of dp), an expert unit over the expert-data-parallel group (the
 * dp/ep ranks that hold the same experts, over which their gradients are summed; with ep = 1
 * that is the dp group): rank r owns piece r of each unit (r its rank in the unit's group), and
 * its SHARD is its pieces of all units, concatenated. AdamW's m and v, the reduced gradients
 * (and under zero 3 the master parameters) exist only as shards.
 *
 *   zero 2: each block's gradients are reduce-scattered (comm_reduce_scatter) right after that
 *           block's backward — every microbatch, summed into the gradient shard — and the block's
 *           flat gradient pages are handed back to the kernel (madvise MADV_DONTNEED, so they
 *           read as zero for the next backward). The parameters stay whole on every rank: the
 *           optimizer steps the shard and the units are all-gathered back.
 *   zero 3: in addition the blocks' flat parameter pages are resident only while a block runs:
 *           all-gathered from the shards before its forward, dropped after, gathered again before
 *           its backward (where recompute also reads them), dropped after (gpt_model.layer_hook).
 *           While a block runs, the next one's all-gather is in flight (forward: the block
 *           after, backward: the block before) into a second staging buffer.
 *           The root units stay gathered (the embeddings are used at both ends of the step).
 *
 * The root units' gradients are reduced once per step, after the last backward (zero_finish).
 * The flat buffers are private anonymous mappings (never populated up front), so the resident
 * memory is the shard plus the root plus the unit in use: what tests/run_memory.sh and
 * bench/bench_memory.sh measure. cpu device only (madvise on device memory means nothing).
 * Sums, not averages, as parallel/dp.h.
 */
#ifndef MT_ZERO_H
#define MT_ZERO_H

#include <stddef.h>

#include "model/model.h"
#include "model/optim.h"
#include "parallel/comm.h"

/* One run of one tensor inside this rank's shard: flat offset, length, offset in the shard. */
typedef struct {
    size_t flat, n, soff;
    int tensor;
} zero_seg;

/* The most units one block holds (a MoE block: its dense part and its experts). */
#define ZERO_MAX_BLOCK_UNITS 4

/* The two groups a unit is sharded over: ZERO_DENSE the data-parallel group, ZERO_EXPERT the
 * expert-data-parallel group (the dp ranks holding the same experts; the dp group when ep = 1). */
enum { ZERO_DENSE, ZERO_EXPERT };

typedef struct {
    int stage; /* 2 or 3 */
    comm *group[2];      /* ZERO_DENSE: dp, ZERO_EXPERT: edp */
    gpt_model *model;    /* the model whose buffers these are (the layer hook's) */
    int Pg[2], rg[2];    /* each group's size, this rank in it */
    int P, r;            /* the dense group's (Pg[ZERO_DENSE], rg[ZERO_DENSE]) */
    int n_units;         /* root head, the blocks' units, root tail */
    size_t *lo, *hi;     /* (n_units) flat range of each unit */
    size_t *piece, *soff; /* (n_units) floats per rank; offset of this rank's piece in the shard */
    int *grp;            /* (n_units) ZERO_DENSE or ZERO_EXPERT */
    int *ublock;         /* (n_units) the local block of the unit; -1 head, n_local tail */
    int *block_u0;       /* (n_local + 1) the first unit of block l; [n_local] = the tail */
    size_t shard;        /* floats in this rank's shard (sum of pieces) */
    size_t max_piece;
    size_t staging_floats; /* the largest unit's group size x piece (the staging buffer) */
    zero_seg *segs;      /* this rank's shard as tensor runs, in shard order */
    int n_segs;
    float *gshard;       /* (shard) reduced gradients of this step */
    float *pshard;       /* (shard) zero 3: the master parameters; NULL under zero 2 */
    float *staging;      /* (staging_floats) the all-gather / reduce-scatter buffer */
    float *piece_buf;    /* (max_piece) one piece: send or receive */
    float *flat_p, *flat_g; /* the mmap'd flat buffers (flat_p only under zero 3) */
    size_t flat_bytes;
    int *gathered;       /* (n_units) zero 3: the unit's parameters are resident */
    /* zero 3's one-block prefetch: the next block's all-gathers in flight, unit k of the block
     * into slot k's own staging (sized for the largest k-th unit of any block) */
    float *prefetch_buf[ZERO_MAX_BLOCK_UNITS];
    size_t prefetch_floats[ZERO_MAX_BLOCK_UNITS];
    comm_request *prefetch[ZERO_MAX_BLOCK_UNITS];
    int prefetch_block;  /* the block in flight, -1 none */
} zero_state;

/* Set up stage (2 or 3) for model m (built, weights initialised, activations NOT yet allocated)
 * over group dp (dense tensors) and edp (expert tensors; NULL: dp): the unit table, the shards,
 * and fresh unpopulated flat gradient (and, zero 3, parameter) buffers that replace m's
 * (m->grads, m->params; the weights move into the shard and the root units). Installs
 * m->layer_hook. Returns 0, or -1 with err (a device other than cpu). */
int zero_init(zero_state *z, gpt_model *m, comm *dp, comm *edp, int stage, char *err,
              size_t errlen);

/* The model's grads_ready callback under zero 2/3 (model/model.h): offset = the first flat offset
 * of a block whose backward just finished: reduce-scatter that block's gradients into the shard
 * and drop its flat gradient pages. Offsets of the root units are ignored (zero_finish). */
void zero_grads_ready(zero_state *z, gpt_model *m, size_t offset);

/* Before a step's first forward: zero the gradient shard and the root units' flat gradients. */
void zero_begin_step(zero_state *z, gpt_model *m);

/* After the step's last backward (and the tied-embedding sum): reduce-scatter the root units'
 * gradients into the shard. */
void zero_finish(zero_state *z, gpt_model *m);

/* Sum of squares of this rank's gradient shard by kind (0 replicated over TP, 1 TP-sharded,
 * 2 expert), the tied wte copy skipped; the caller sums over the DP, TP, PP groups. */
void zero_grad_sumsq(const zero_state *z, const gpt_model *m, double part[3]);

/* AdamW on the shard (o->t advanced once), then zero 2: the updated units all-gathered into the
 * flat parameters; zero 3: the root units gathered (blocks are gathered when they run). */
void zero_optim_step(zero_state *z, gpt_model *m, optim_adamw *o, float lr, float grad_scale);

/* zero 3: gather every unit so m->params holds all parameters (checkpoint, sample, save), and
 * drop the blocks again. No-ops under zero 2. Collective over the DP group. */
void zero_gather_all(zero_state *z, gpt_model *m);
void zero_release_all(zero_state *z, gpt_model *m);

/* zero 3: m->params was just written whole (a resumed checkpoint): take this rank's pieces into
 * the master shard and drop the blocks. No-op under zero 2. */
void zero_take_params(zero_state *z, gpt_model *m);

/* A shard-layout array (shard floats) <-> the flat layout (num_params floats): gather_flat is
 * collective (every rank gets the whole flat array), scatter_flat takes this rank's pieces of a
 * flat array every rank holds. For AdamW m and v in checkpoints. */
void zero_gather_flat(zero_state *z, const float *shard, float *flat, size_t num_params);
void zero_scatter_flat(const zero_state *z, const float *flat, float *shard, size_t num_params);

/* Bytes of the zero 3 gathered parameters at most resident beyond the shard: the root units plus
 * the largest block (and the page-boundary slack). For the memory budget (train/memory.h). */
size_t zero_resident_floats(const zero_state *z);
/* Floats of the root units alone (always resident). */
size_t zero_root_floats(const zero_state *z);

void zero_free(zero_state *z, gpt_model *m);

#endif /* MT_ZERO_H */
