/*
 * train/zero.c — ZeRO-2 and ZeRO-3 over units of the flat buffers (see train/zero.h): the unit
 * table and shard layout, the per-block reduce-scatter, the per-block all-gather behind the
 * model's layer hook, AdamW on the shard, and the page release that makes the memory real.
 */
#include "train/zero.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/check.h"
#include "ops/ops.h"
#include "ops/prof.h"

/* ---- pages ----------------------------------------------------------------------------------- */

static size_t page_floats(void) { return (size_t)sysconf(_SC_PAGESIZE) / sizeof(float); }

/* A private anonymous mapping of n floats: reads as zero, resident only where written. */
static float *flat_map(size_t n, size_t *bytes) {
    *bytes = (n ? n : 1) * sizeof(float);
    void *p = mmap(NULL, *bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) mt_fail("zero: cannot map %zu bytes for the flat buffers", *bytes);
    return p;
}

/* Hand the whole pages inside [buf + lo, buf + hi) back to the kernel (they read as zero after);
 * zero = 1 also zeroes the partial pages at both ends, so the whole range reads as zero. */
static void drop_range(float *buf, size_t lo, size_t hi, int zero) {
    size_t pf = page_floats();
    size_t a = (lo + pf - 1) / pf * pf, b = hi / pf * pf; /* inward to page boundaries */
    if (a >= b) {
        if (zero && hi > lo) memset(buf + lo, 0, (hi - lo) * sizeof(float));
        return;
    }
    if (zero) {
        memset(buf + lo, 0, (a - lo) * sizeof(float));
        memset(buf + b, 0, (hi - b) * sizeof(float));
    }
    mtCheck(madvise(buf + a, (b - a) * sizeof(float), MADV_DONTNEED) == 0, "zero: madvise failed");
}

/* ---- the unit table -------------------------------------------------------------------------- */

/* Append unit [lo, hi) of group g and block blk. */
static void add_unit(zero_state *z, size_t lo, size_t hi, int g, int blk) {
    int u = z->n_units++;
    z->lo[u] = lo, z->hi[u] = hi, z->grp[u] = g, z->ublock[u] = blk;
}

/* Block l's units: the maximal runs of its tensors that are all dense or all expert. */
static void add_block_units(zero_state *z, const gpt_model *m, int l, size_t bend) {
    int t0 = m->block_t0[l], t1 = l + 1 < m->n_local ? m->block_t0[l + 1] : m->n_tensors;
    z->block_u0[l] = z->n_units;
    size_t lo = m->tensors[t0].offset;
    int g = m->tensors[t0].expert ? ZERO_EXPERT : ZERO_DENSE;
    for (int i = t0 + 1; i < t1 && m->tensors[i].offset < bend; i++) {
        int gi = m->tensors[i].expert ? ZERO_EXPERT : ZERO_DENSE;
        if (gi == g) continue;
        add_unit(z, lo, m->tensors[i].offset, g, l);
        lo = m->tensors[i].offset, g = gi;
    }
    size_t hi = l + 1 < m->n_local ? m->tensors[t1].offset : bend;
    add_unit(z, lo, hi, g, l);
    mtCheck(z->n_units - z->block_u0[l] <= ZERO_MAX_BLOCK_UNITS, "zero: too many units in a block");
}

/* Unit 0 = root head, then each local block's units in order, n_units - 1 = root tail. */
static void build_units(zero_state *z, const gpt_model *m) {
    int L = m->n_local;
    size_t cap = (size_t)m->n_tensors + 2;
    z->lo = callocCheck(cap, sizeof(size_t));
    z->hi = callocCheck(cap, sizeof(size_t));
    z->piece = callocCheck(cap, sizeof(size_t));
    z->soff = callocCheck(cap, sizeof(size_t));
    z->grp = callocCheck(cap, sizeof(int));
    z->ublock = callocCheck(cap, sizeof(int));
    z->block_u0 = callocCheck((size_t)L + 1, sizeof(int));
    size_t b0 = L ? m->tensors[m->block_t0[0]].offset : m->num_params;
    size_t bend = m->i_lnf >= 0 ? m->tensors[m->i_lnf].offset : m->num_params;
    if (!L) bend = b0;
    add_unit(z, 0, b0, ZERO_DENSE, -1);
    for (int l = 0; l < L; l++) add_block_units(z, m, l, bend);
    z->block_u0[L] = z->n_units;
    add_unit(z, bend, m->num_params, ZERO_DENSE, L);
    for (int i = 0; i < m->n_tensors; i++) /* the root units hold no experts */
        mtCheck(!m->tensors[i].expert || (m->tensors[i].offset >= b0 &&
                                          m->tensors[i].offset < bend), "zero: an expert outside a block");
    size_t off = 0;
    for (int u = 0; u < z->n_units; u++) {
        size_t P = (size_t)z->Pg[z->grp[u]];
        z->piece[u] = (z->hi[u] - z->lo[u] + P - 1) / P;
        z->soff[u] = off;
        off += z->piece[u];
        if (z->piece[u] > z->max_piece) z->max_piece = z->piece[u];
        if (P * z->piece[u] > z->staging_floats) z->staging_floats = P * z->piece[u];
        if (z->ublock[u] >= 0 && z->ublock[u] < L) { /* the prefetch slot of its place in the block */
            int k = u - z->block_u0[z->ublock[u]];
            if (P * z->piece[u] > z->prefetch_floats[k]) z->prefetch_floats[k] = P * z->piece[u];
        }
    }
    z->shard = off;
}

/* This rank's piece of unit u as a flat range [a, b) (b <= hi: the padding is not in the model). */
static void my_piece(const zero_state *z, int u, size_t *a, size_t *b) {
    size_t lo = z->lo[u] + (size_t)z->rg[z->grp[u]] * z->piece[u], hi = lo + z->piece[u];
    if (lo > z->hi[u]) lo = z->hi[u];
    if (hi > z->hi[u]) hi = z->hi[u];
    *a = lo, *b = hi;
}

/* The shard as tensor runs, for AdamW (decay per tensor) and the gradient norm. */
static void build_segs(zero_state *z, const gpt_model *m) {
    z->segs = callocCheck((size_t)(m->n_tensors + z->n_units) + 1, sizeof(zero_seg));
    for (int u = 0; u < z->n_units; u++) {
        size_t a, b;
        my_piece(z, u, &a, &b);
        for (int i = 0; i < m->n_tensors && a < b; i++) {
            const gpt_tensor *t = &m->tensors[i];
            size_t x = t->offset > a ? t->offset : a;
            size_t y = t->offset + t->numel < b ? t->offset + t->numel : b;
            if (x >= y) continue;
            z->segs[z->n_segs++] = (zero_seg){x, y - x, z->soff[u] + (x - a), i};
        }
    }
}

/* ---- gather and reduce one unit -------------------------------------------------------------- */

/* All-gather unit u over its group from every rank's piece src (piece floats, padded) into
 * flat[lo, hi). */
static void gather_unit(zero_state *z, int u, const float *src, float *flat) {
    size_t n = z->hi[u] - z->lo[u], pc = z->piece[u];
    if (!n) return;
    memcpy(z->piece_buf, src, pc * sizeof(float));
    comm_all_gather(z->group[z->grp[u]], z->piece_buf, z->staging, pc);
    memcpy(flat + z->lo[u], z->staging, n * sizeof(float));
}

/* Finish the block prefetch in flight (if any); its units' parameters land in m->params when
 * take. */
static void finish_prefetch(zero_state *z, gpt_model *m, int take) {
    if (z->prefetch_block < 0) return;
    int u0 = z->block_u0[z->prefetch_block];
    for (int k = 0; k < ZERO_MAX_BLOCK_UNITS; k++) {
        if (!z->prefetch[k]) continue;
        int u = u0 + k;
        comm_wait(z->prefetch[k]);
        z->prefetch[k] = NULL;
        if (take && !z->gathered[u]) {
            memcpy(m->params + z->lo[u], z->prefetch_buf[k], (z->hi[u] - z->lo[u]) * sizeof(float));
            z->gathered[u] = 1;
        }
    }
    z->prefetch_block = -1;
}

/* Unit u's parameters resident in m->params (zero 3; no-op when they are): from the prefetch
 * when it is u's block's, else gathered now (a prefetch of another block is finished and dropped
 * first, so every rank runs the same collectives in the same order). */
static void gather_params(zero_state *z, gpt_model *m, int u) {
    if (z->stage != 3) return;
    if (z->prefetch_block >= 0) finish_prefetch(z, m, z->prefetch_block == z->ublock[u]);
    if (z->gathered[u]) return;
    gather_unit(z, u, z->pshard + z->soff[u], m->params);
    z->gathered[u] = 1;
}

/* Start the all-gathers of local block l's units when l is a block and they are not resident. */
static void start_prefetch(zero_state *z, int l) {
    if (z->stage != 3 || z->prefetch_block >= 0 || l < 0 || l >= z->model->n_local) return;
    z->prefetch_block = l;
    for (int u = z->block_u0[l]; u < z->block_u0[l + 1]; u++) {
        if (z->gathered[u] || z->hi[u] == z->lo[u]) continue;
        int k = u - z->block_u0[l];
        /* the shard's piece is the send buffer: it does not change until the optimizer step */
        z->prefetch[k] = comm_iall_gather(z->group[z->grp[u]], z->pshard + z->soff[u],
                                          z->prefetch_buf[k], z->piece[u]);
    }
}

static void release_params(zero_state *z, gpt_model *m, int u) {
    if (z->stage != 3 || !z->gathered[u]) return;
    drop_range(m->params, z->lo[u], z->hi[u], 0);
    z->gathered[u] = 0;
}

/* Reduce-scatter unit u's flat gradients over its group: this rank's piece of the sum is added
 * to the gradient shard; the flat range is cleared (pages dropped) for the next backward. */
static void reduce_unit(zero_state *z, gpt_model *m, int u) {
    size_t n = z->hi[u] - z->lo[u], pc = z->piece[u], P = (size_t)z->Pg[z->grp[u]];
    if (!n) return;
    memcpy(z->staging, m->grads + z->lo[u], n * sizeof(float));
    memset(z->staging + n, 0, (P * pc - n) * sizeof(float));
    comm_reduce_scatter(z->group[z->grp[u]], z->staging, z->piece_buf, pc, COMM_SUM);
    float *g = z->gshard + z->soff[u];
    for (size_t i = 0; i < pc; i++) g[i] += z->piece_buf[i];
    drop_range(m->grads, z->lo[u], z->hi[u], 1);
}

/* ---- the model's hooks ----------------------------------------------------------------------- */

static void layer_hook(void *user, int l, gpt_layer_event ev) {
    zero_state *z = user;
    gpt_model *m = z->model;
    if (ev == GPT_LAYER_BEFORE_FORWARD || ev == GPT_LAYER_BEFORE_BACKWARD) {
        for (int u = z->block_u0[l]; u < z->block_u0[l + 1]; u++) gather_params(z, m, u);
        /* the block that runs next: forward goes up, backward down (none past the ends) */
        start_prefetch(z, ev == GPT_LAYER_BEFORE_FORWARD ? l + 1 : l - 1);
    } else {
        for (int u = z->block_u0[l]; u < z->block_u0[l + 1]; u++) release_params(z, m, u);
    }
}

void zero_grads_ready(zero_state *z, gpt_model *m, size_t offset) {
    for (int l = 0; l < m->n_local; l++) {
        int u0 = z->block_u0[l], u1 = z->block_u0[l + 1];
        if (z->lo[u0] == offset && z->hi[u1 - 1] > offset) {
            for (int u = u0; u < u1; u++) reduce_unit(z, m, u);
            return;
        }
    }
}

/* ---- set-up ---------------------------------------------------------------------------------- */

int zero_init(zero_state *z, gpt_model *m, comm *dp, comm *edp, int stage, char *err,
              size_t errlen) {
    memset(z, 0, sizeof(*z));
    if (ops_is_device(m->params) || strcmp(ops_device(), "cpu") != 0) {
        snprintf(err, errlen, "zero = %d runs on device cpu only (it hands gradient and parameter "
                 "pages back to the kernel); use zero = 1 on device %s", stage, ops_device());
        return -1;
    }
    z->stage = stage;
    z->group[ZERO_DENSE] = dp;
    z->group[ZERO_EXPERT] = edp ? edp : dp;
    for (int g = 0; g < 2; g++) z->Pg[g] = comm_size(z->group[g]), z->rg[g] = comm_rank(z->group[g]);
    z->P = z->Pg[ZERO_DENSE];
    z->r = z->rg[ZERO_DENSE];
    z->model = m;
    build_units(z, m);
    build_segs(z, m);
    z->gshard = callocCheck(z->shard + 1, sizeof(float));
    z->staging = callocCheck(z->staging_floats + 1, sizeof(float));
    z->piece_buf = callocCheck(z->max_piece + 1, sizeof(float));
    z->gathered = callocCheck((size_t)z->n_units, sizeof(int));
    z->prefetch_block = -1;
    for (int k = 0; k < ZERO_MAX_BLOCK_UNITS && stage == 3; k++)
        if (z->prefetch_floats[k]) z->prefetch_buf[k] = callocCheck(z->prefetch_floats[k], sizeof(float));
    mtCheck(m->grads == NULL, "zero_init before the gradients are allocated");
    z->flat_g = flat_map(m->num_params, &z->flat_bytes);
    m->grads = z->flat_g;
    if (stage == 3) {
        /* the weights move into the master shard; the flat buffer starts with the root only */
        z->pshard = callocCheck(z->shard + 1, sizeof(float));
        zero_scatter_flat(z, m->params, z->pshard, m->num_params);
        z->flat_p = flat_map(m->num_params, &z->flat_bytes);
        memcpy(z->flat_p, m->params, z->hi[0] * sizeof(float));
        size_t t = z->lo[z->n_units - 1];
        memcpy(z->flat_p + t, m->params + t, (m->num_params - t) * sizeof(float));
        ops_free(m->params);
        m->params = z->flat_p;
        z->gathered[0] = z->gathered[z->n_units - 1] = 1;
    }
    m->capacity = m->num_params;
    gpt_rebind(m);
    m->layer_hook = stage == 3 ? layer_hook : NULL;
    m->layer_hook_user = z;
    return 0;
}

void zero_free(zero_state *z, gpt_model *m) {
    if (!z->lo) return;
    finish_prefetch(z, m, 0);
    for (int k = 0; k < ZERO_MAX_BLOCK_UNITS; k++) free(z->prefetch_buf[k]);
    if (m->grads == z->flat_g) m->grads = NULL;
    if (z->flat_p && m->params == z->flat_p) m->params = NULL;
    munmap(z->flat_g, z->flat_bytes);
    if (z->flat_p) munmap(z->flat_p, z->flat_bytes);
    free(z->lo), free(z->hi), free(z->piece), free(z->soff), free(z->segs);
    free(z->grp), free(z->ublock), free(z->block_u0);
    free(z->gshard), free(z->pshard), free(z->staging), free(z->piece_buf), free(z->gathered);
    m->layer_hook = NULL;
    memset(z, 0, sizeof(*z));
}

/* ---- the step -------------------------------------------------------------------------------- */

void zero_begin_step(zero_state *z, gpt_model *m) {
    memset(z->gshard, 0, z->shard * sizeof(float));
    int t = z->n_units - 1;
    memset(m->grads + z->lo[0], 0, (z->hi[0] - z->lo[0]) * sizeof(float));
    memset(m->grads + z->lo[t], 0, (z->hi[t] - z->lo[t]) * sizeof(float));
}

void zero_finish(zero_state *z, gpt_model *m) {
    reduce_unit(z, m, 0);
    reduce_unit(z, m, z->n_units - 1);
}

void zero_grad_sumsq(const zero_state *z, const gpt_model *m, double part[3]) {
    for (int i = 0; i < z->n_segs; i++) {
        const zero_seg *s = &z->segs[i];
        const gpt_tensor *t = &m->tensors[s->tensor];
        if (t->pp_tied_copy) continue; /* the tied wte counts once, on the first stage */
        double ss = ops_sumsq(z->gshard + s->soff, s->n);
        part[t->expert ? 2 : t->tp_replicated ? 0 : 1] += ss;
    }
}

void zero_optim_step(zero_state *z, gpt_model *m, optim_adamw *o, float lr, float grad_scale) {
    finish_prefetch(z, m, 0); /* its send buffer is the shard about to change */
    o->t++;
    for (int i = 0; i < z->n_segs; i++) {
        const zero_seg *s = &z->segs[i];
        float *p = z->stage == 3 ? z->pshard + s->soff : m->params + s->flat;
        PROF(PROF_ADAMW, ops_adamw(p, z->gshard + s->soff, o->m + s->soff, o->v + s->soff, s->n,
                                   lr, o->beta1, o->beta2, o->eps,
                                   m->tensors[s->tensor].decay ? o->weight_decay : 0.0f, o->t,
                                   grad_scale));
    }
    if (z->stage == 2) { /* every unit whole again on every rank */
        for (int u = 0; u < z->n_units; u++) {
            size_t a, b;
            my_piece(z, u, &a, &b);
            memset(z->piece_buf, 0, z->piece[u] * sizeof(float));
            memcpy(z->piece_buf, m->params + a, (b - a) * sizeof(float));
            size_t n = z->hi[u] - z->lo[u];
            if (!n) continue;
            comm_all_gather(z->group[z->grp[u]], z->piece_buf, z->staging, z->piece[u]);
            memcpy(m->params + z->lo[u], z->staging, n * sizeof(float));
        }
        return;
    }
    z->gathered[0] = z->gathered[z->n_units - 1] = 0; /* stale: the shard moved */
    gather_params(z, m, 0);
    gather_params(z, m, z->n_units - 1);
}

void zero_gather_all(zero_state *z, gpt_model *m) {
    finish_prefetch(z, m, 1);
    for (int u = 0; u < z->n_units; u++) gather_params(z, m, u);
}

void zero_release_all(zero_state *z, gpt_model *m) {
    for (int u = 1; u < z->n_units - 1; u++) release_params(z, m, u);
}

void zero_take_params(zero_state *z, gpt_model *m) {
    if (z->stage != 3) return;
    finish_prefetch(z, m, 0); /* the shard is about to be replaced */
    zero_scatter_flat(z, m->params, z->pshard, m->num_params);
    for (int u = 0; u < z->n_units; u++) z->gathered[u] = 1; /* all of it was just written */
    zero_release_all(z, m);
}

/* ---- layouts --------------------------------------------------------------------------------- */

void zero_scatter_flat(const zero_state *z, const float *flat, float *shard, size_t num_params) {
    memset(shard, 0, z->shard * sizeof(float));
    for (int u = 0; u < z->n_units; u++) {
        size_t a, b;
        my_piece(z, u, &a, &b);
        if (b > num_params) b = num_params;
        if (a < b) memcpy(shard + z->soff[u], flat + a, (b - a) * sizeof(float));
    }
}

void zero_gather_flat(zero_state *z, const float *shard, float *flat, size_t num_params) {
    mtCheck(num_params == z->hi[z->n_units - 1], "zero_gather_flat: not this model's layout");
    for (int u = 0; u < z->n_units; u++) gather_unit(z, u, shard + z->soff[u], flat);
}

size_t zero_root_floats(const zero_state *z) {
    return (z->hi[0] - z->lo[0]) + (z->hi[z->n_units - 1] - z->lo[z->n_units - 1]);
}

size_t zero_resident_floats(const zero_state *z) {
    size_t root = zero_root_floats(z);
    size_t block = 0; /* the largest block: all its units */
    for (int l = 0; l < z->model->n_local; l++) {
        size_t n = z->hi[z->block_u0[l + 1] - 1] - z->lo[z->block_u0[l]];
        if (n > block) block = n;
    }
    return root + block + 4 * page_floats(); /* partial pages at the units' edges */
}
