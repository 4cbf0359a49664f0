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

/* Unit u: 0 = root head, 1 + l = local block l, n_units - 1 = root tail. */
static void build_units(zero_state *z, const gpt_model *m) {
    int L = m->n_local;
    z->n_units = L + 2;
    z->lo = callocCheck((size_t)z->n_units, sizeof(size_t));
    z->hi = callocCheck((size_t)z->n_units, sizeof(size_t));
    z->piece = callocCheck((size_t)z->n_units, sizeof(size_t));
    z->soff = callocCheck((size_t)z->n_units, sizeof(size_t));
    size_t b0 = L ? m->tensors[m->block_t0[0]].offset : m->num_params;
    size_t bend = m->i_lnf >= 0 ? m->tensors[m->i_lnf].offset : m->num_params;
    if (!L) bend = b0;
    z->lo[0] = 0, z->hi[0] = b0;
    for (int l = 0; l < L; l++) {
        z->lo[1 + l] = m->tensors[m->block_t0[l]].offset;
        z->hi[1 + l] = l + 1 < L ? m->tensors[m->block_t0[l + 1]].offset : bend;
    }
    z->lo[L + 1] = bend, z->hi[L + 1] = m->num_params;
    size_t off = 0;
    for (int u = 0; u < z->n_units; u++) {
        z->piece[u] = (z->hi[u] - z->lo[u] + (size_t)z->P - 1) / (size_t)z->P;
        z->soff[u] = off;
        off += z->piece[u];
        if (z->piece[u] > z->max_piece) z->max_piece = z->piece[u];
    }
    z->shard = off;
}

/* This rank's piece of unit u as a flat range [a, b) (b <= hi: the padding is not in the model). */
static void my_piece(const zero_state *z, int u, size_t *a, size_t *b) {
    size_t lo = z->lo[u] + (size_t)z->r * z->piece[u], hi = lo + z->piece[u];
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

/* All-gather unit u from every rank's piece src (piece floats, padded) into flat[lo, hi). */
static void gather_unit(zero_state *z, int u, const float *src, float *flat) {
    size_t n = z->hi[u] - z->lo[u], pc = z->piece[u];
    if (!n) return;
    memcpy(z->piece_buf, src, pc * sizeof(float));
    comm_all_gather(z->dp, z->piece_buf, z->staging, pc);
    memcpy(flat + z->lo[u], z->staging, n * sizeof(float));
}

/* Finish the prefetch in flight (if any); its unit's parameters land in m->params when take. */
static void finish_prefetch(zero_state *z, gpt_model *m, int take) {
    if (!z->prefetch) return;
    int u = z->prefetch_unit;
    comm_wait(z->prefetch);
    z->prefetch = NULL;
    z->prefetch_unit = -1;
    if (take && !z->gathered[u]) {
        memcpy(m->params + z->lo[u], z->prefetch_buf, (z->hi[u] - z->lo[u]) * sizeof(float));
        z->gathered[u] = 1;
    }
}

/* Unit u's parameters resident in m->params (zero 3; no-op when they are): from the prefetch
 * when it is u's, else gathered now (a prefetch of another unit is finished and dropped first,
 * so every rank runs the same collectives in the same order). */
static void gather_params(zero_state *z, gpt_model *m, int u) {
    if (z->stage != 3) return;
    if (z->prefetch) finish_prefetch(z, m, z->prefetch_unit == u);
    if (z->gathered[u]) return;
    gather_unit(z, u, z->pshard + z->soff[u], m->params);
    z->gathered[u] = 1;
}

/* Start the all-gather of block unit u (1 .. n_units - 2) when it is one and not resident. */
static void start_prefetch(zero_state *z, int u) {
    if (z->stage != 3 || z->prefetch || u < 1 || u > z->n_units - 2 || z->gathered[u]) return;
    if (z->hi[u] == z->lo[u]) return;
    /* the shard's piece is the send buffer: it does not change until the optimizer step */
    z->prefetch = comm_iall_gather(z->dp, z->pshard + z->soff[u], z->prefetch_buf, z->piece[u]);
    z->prefetch_unit = u;
}

static void release_params(zero_state *z, gpt_model *m, int u) {
    if (z->stage != 3 || !z->gathered[u]) return;
    drop_range(m->params, z->lo[u], z->hi[u], 0);
    z->gathered[u] = 0;
}

/* Reduce-scatter unit u's flat gradients: this rank's piece of the sum over the group is added to
 * the gradient shard; the flat range is cleared (pages dropped) for the next backward. */
static void reduce_unit(zero_state *z, gpt_model *m, int u) {
    size_t n = z->hi[u] - z->lo[u], pc = z->piece[u];
    if (!n) return;
    memcpy(z->staging, m->grads + z->lo[u], n * sizeof(float));
    memset(z->staging + n, 0, ((size_t)z->P * pc - n) * sizeof(float));
    comm_reduce_scatter(z->dp, z->staging, z->piece_buf, pc, COMM_SUM);
    float *g = z->gshard + z->soff[u];
    for (size_t i = 0; i < pc; i++) g[i] += z->piece_buf[i];
    drop_range(m->grads, z->lo[u], z->hi[u], 1);
}

/* ---- the model's hooks ----------------------------------------------------------------------- */

static void layer_hook(void *user, int l, gpt_layer_event ev) {
    zero_state *z = user;
    gpt_model *m = z->model;
    if (ev == GPT_LAYER_BEFORE_FORWARD || ev == GPT_LAYER_BEFORE_BACKWARD) {
        gather_params(z, m, 1 + l);
        /* the block that runs next: forward goes up, backward down (none past the ends) */
        start_prefetch(z, ev == GPT_LAYER_BEFORE_FORWARD ? 2 + l : l);
    } else {
        release_params(z, m, 1 + l);
    }
}

void zero_grads_ready(zero_state *z, gpt_model *m, size_t offset) {
    for (int l = 0; l < m->n_local; l++)
        if (z->lo[1 + l] == offset && z->hi[1 + l] > offset) {
            reduce_unit(z, m, 1 + l);
            return;
        }
}

/* ---- set-up ---------------------------------------------------------------------------------- */

int zero_init(zero_state *z, gpt_model *m, comm *dp, int stage, char *err, size_t errlen) {
    memset(z, 0, sizeof(*z));
    if (ops_is_device(m->params) || strcmp(ops_device(), "cpu") != 0) {
        snprintf(err, errlen, "zero = %d runs on device cpu only (it hands gradient and parameter "
                 "pages back to the kernel); use zero = 1 on device %s", stage, ops_device());
        return -1;
    }
    z->stage = stage;
    z->dp = dp;
    z->P = comm_size(dp);
    z->r = comm_rank(dp);
    z->model = m;
    build_units(z, m);
    build_segs(z, m);
    z->gshard = callocCheck(z->shard + 1, sizeof(float));
    z->staging = callocCheck((size_t)z->P * z->max_piece + 1, sizeof(float));
    z->piece_buf = callocCheck(z->max_piece + 1, sizeof(float));
    z->gathered = callocCheck((size_t)z->n_units, sizeof(int));
    z->prefetch_unit = -1;
    if (stage == 3) z->prefetch_buf = callocCheck((size_t)z->P * z->max_piece + 1, sizeof(float));
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
    free(z->prefetch_buf);
    if (m->grads == z->flat_g) m->grads = NULL;
    if (z->flat_p && m->params == z->flat_p) m->params = NULL;
    munmap(z->flat_g, z->flat_bytes);
    if (z->flat_p) munmap(z->flat_p, z->flat_bytes);
    free(z->lo), free(z->hi), free(z->piece), free(z->soff), free(z->segs);
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
            comm_all_gather(z->dp, z->piece_buf, z->staging, z->piece[u]);
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
    size_t block = 0;
    for (int u = 1; u < z->n_units - 1; u++)
        if (z->hi[u] - z->lo[u] > block) block = z->hi[u] - z->lo[u];
    return root + block + 4 * page_floats(); /* partial pages at the units' edges */
}
