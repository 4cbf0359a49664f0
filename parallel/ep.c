/*
 * parallel/ep.c — expert-parallel planning (capacity, kept rows, layouts) and the all-to-all-v
 * dispatch/combine of rows. See parallel/ep.h for the order every layout reproduces.
 *
 * Why one all-gather of counts instead of the usual "all-to-all of counts, then data": with the
 * whole group's (rank, expert, slot) count table on every rank, the capacity decision is a pure
 * function that each rank evaluates identically, so (a) a source already knows which of its rows
 * are dropped and never sends them, (b) an owner knows exactly where each received row belongs in
 * its expert buffers, and (c) the group's statistics (tokens per expert, drops) are known
 * everywhere without another message. The table is E·k + 1 numbers per rank: tiny next to rows.
 */
#include "parallel/ep.h"

#include <math.h>
#include <string.h>

#include "core/check.h"

#define IDX(p, r, e, s) ((((size_t)(r) * (p)->E) + (e)) * (p)->k + (s))

void ep_plan_init(ep_plan *p, comm *c, int E, int k, int per_rank) {
    ep_plan_init_as(p, c ? comm_size(c) : 1, c ? comm_rank(c) : 0, E, k, per_rank);
    p->c = c;
}

void ep_plan_init_as(ep_plan *p, int ep, int rank, int E, int k, int per_rank) {
    memset(p, 0, sizeof(*p));
    p->per_rank = per_rank;
    p->ep = ep;
    p->rank = rank;
    mtCheck(ep >= 1 && rank >= 0 && rank < ep, "EP rank outside its group");
    mtCheck(E >= 1 && k >= 1 && E % p->ep == 0, "experts must be a multiple of the EP size");
    p->E = E;
    p->k = k;
    p->E_local = E / p->ep;
    size_t tab = (size_t)p->ep * E * k;
    p->count = callocCheck(tab, sizeof(int));
    p->kept = callocCheck(tab, sizeof(int));
    p->offset = callocCheck(tab, sizeof(int));
    p->expert_rows = callocCheck((size_t)E, sizeof(int));
    p->assigned = callocCheck((size_t)E, sizeof(int));
    p->send_offset = callocCheck((size_t)E * k, sizeof(int));
    p->send_rows = callocCheck((size_t)p->ep, sizeof(size_t));
    p->recv_rows = callocCheck((size_t)p->ep, sizeof(size_t));
    p->rank_capacity = callocCheck((size_t)p->ep, sizeof(int));
    p->rank_used = callocCheck((size_t)p->ep, sizeof(int));
    p->rank_rows = callocCheck((size_t)p->ep, sizeof(int));
    p->sc = callocCheck(4 * (size_t)p->ep, sizeof(size_t));
    p->sd = p->sc + p->ep;
    p->rc = p->sd + p->ep;
    p->rd = p->rc + p->ep;
    p->gather = callocCheck((size_t)p->ep * ((size_t)E * k + 1 + 2 * EP_MAX_EXTRA), sizeof(float));
}

void ep_plan_free(ep_plan *p) {
    free(p->count);
    free(p->kept);
    free(p->offset);
    free(p->expert_rows);
    free(p->assigned);
    free(p->send_offset);
    free(p->send_rows);
    free(p->recv_rows);
    free(p->rank_capacity);
    free(p->rank_used);
    free(p->rank_rows);
    free(p->sc);
    free(p->gather);
    memset(p, 0, sizeof(*p));
}

int ep_capacity(float capacity_factor, int n_group, int k, int E) {
    if (capacity_factor <= 0.0f) return 0;
    double x = (double)capacity_factor * n_group * k / E;
    int cap = (int)ceil(x - 1e-6 * x);
    return cap < 1 ? 1 : cap;
}

static void solve(ep_plan *p, float capacity_factor);

void ep_plan_build(ep_plan *p, const int *local_count, int n_local, float capacity_factor,
                   const double *extra, double *extra_sum, int n_extra) {
    const int E = p->E, k = p->k, ep = p->ep, me = p->rank;
    mtCheck(n_extra >= 0 && n_extra <= EP_MAX_EXTRA, "too many extra values for ep_plan_build");
    mtCheck(n_local >= 0 && n_local < (1 << 24), "rows per rank must be < 2^24 (exact floats)");

    /* 1. everyone's counts: [count (E·k), n_local, extra (hi, lo) × n_extra] per rank */
    const size_t W = (size_t)E * k + 1 + 2 * (size_t)n_extra;
    float *mine = p->gather + (size_t)me * W;
    for (int i = 0; i < E * k; i++) mine[i] = (float)local_count[i];
    mine[E * k] = (float)n_local;
    for (int j = 0; j < n_extra; j++) {
        float hi = (float)extra[j];
        mine[E * k + 1 + 2 * j] = hi;
        mine[E * k + 2 + 2 * j] = (float)(extra[j] - (double)hi);
    }
    if (ep > 1) comm_all_gather(p->c, mine, p->gather, W);

    for (int r = 0; r < ep; r++) {
        const float *g = p->gather + (size_t)r * W;
        for (int i = 0; i < E * k; i++) p->count[(size_t)r * E * k + i] = (int)g[i];
        p->rank_rows[r] = (int)g[E * k];
    }
    for (int j = 0; j < n_extra; j++) {
        double sum = 0.0;
        for (int r = 0; r < ep; r++) {
            const float *g = p->gather + (size_t)r * W + E * k + 1 + 2 * j;
            sum += (double)g[0] + (double)g[1];
        }
        extra_sum[j] = sum;
    }
    solve(p, capacity_factor);
}

void ep_plan_solve(ep_plan *p, const int *counts, const int *rank_rows, float capacity_factor) {
    memcpy(p->count, counts, (size_t)p->ep * p->E * p->k * sizeof(int));
    memcpy(p->rank_rows, rank_rows, (size_t)p->ep * sizeof(int));
    solve(p, capacity_factor);
}

/* Steps 2 and 3 of ep_plan_build, from p->count and p->rank_rows of the whole group. */
static void solve(ep_plan *p, float capacity_factor) {
    const int E = p->E, k = p->k, ep = p->ep, me = p->rank;
    p->n_group = 0;
    for (int r = 0; r < ep; r++) p->n_group += p->rank_rows[r];

    /* 2. capacity, applied per expert in the order (slot, source rank, local position) over
     * the group — or, with per_rank, to each source rank's rows on their own (slot, position) */
    p->capacity = ep_capacity(capacity_factor, p->n_group, k, E);
    if (p->per_rank) {
        for (int r = 0; r < ep; r++)
            p->rank_capacity[r] = ep_capacity(capacity_factor, p->rank_rows[r], k, E);
        p->capacity = p->rank_capacity[me];
    }
    p->dropped_local = p->dropped_group = 0;
    for (int e = 0; e < E; e++) {
        int off = 0, all = 0;
        for (int r = 0; r < ep; r++) p->rank_used[r] = 0;
        for (int s = 0; s < k; s++) {
            for (int r = 0; r < ep; r++) {
                size_t i = IDX(p, r, e, s);
                int c = p->count[i], kept = c;
                int cap = p->per_rank ? p->rank_capacity[r] : p->capacity;
                int used = p->per_rank ? p->rank_used[r] : all;
                if (cap > 0) {
                    int room = cap - used;
                    kept = room <= 0 ? 0 : (room < c ? room : c);
                }
                p->kept[i] = kept;
                p->offset[i] = off; /* kept rows of (r, e, s) follow all kept rows before it */
                off += kept;
                all += c;
                p->rank_used[r] += c;
                p->dropped_group += c - kept;
                if (r == me) p->dropped_local += c - kept;
            }
        }
        p->assigned[e] = all;
        p->expert_rows[e] = off;
    }

    /* 3. this rank's layouts: send order is (expert, slot, position), experts ascending, so the
     * block for peer d (experts [d·E_local, (d+1)·E_local)) is contiguous and peers ascend. */
    int pos = 0;
    for (int d = 0; d < ep; d++) p->send_rows[d] = p->recv_rows[d] = 0;
    for (int e = 0; e < E; e++) {
        for (int s = 0; s < k; s++) {
            p->send_offset[e * k + s] = pos;
            int kept = p->kept[IDX(p, me, e, s)];
            pos += kept;
            p->send_rows[e / p->E_local] += (size_t)kept;
        }
    }
    p->send_total = pos;
    p->recv_total = 0;
    for (int r = 0; r < ep; r++) {
        for (int le = 0; le < p->E_local; le++)
            for (int s = 0; s < k; s++)
                p->recv_rows[r] += (size_t)p->kept[IDX(p, r, me * p->E_local + le, s)];
        p->recv_total += (int)p->recv_rows[r];
    }
}

int ep_plan_expert_base(const ep_plan *p, int le) {
    int base = 0;
    for (int j = 0; j < le; j++) base += p->expert_rows[p->rank * p->E_local + j];
    return base;
}

/* Element counts and displacements for rows of `width` floats, blocks contiguous by peer. */
static void block_layout(int ep, const size_t *rows, size_t *counts, size_t *displs, int width) {
    size_t at = 0;
    for (int r = 0; r < ep; r++) {
        counts[r] = rows[r] * (size_t)width;
        displs[r] = at;
        at += counts[r];
    }
}

/* Move rows between the receive layout (blocks by source rank, each in (local expert, slot,
 * position) order) and the expert layout (by local expert, rows at ebase + offset(r, e, s)).
 * to_expert = 1: recv → expert; 0: expert → recv. */
static void permute(const ep_plan *p, float *recv, float *expert_buf, int width, int to_expert) {
    const size_t w = (size_t)width;
    size_t pos = 0;
    for (int r = 0; r < p->ep; r++) {
        int ebase = 0;
        for (int le = 0; le < p->E_local; le++) {
            int e = p->rank * p->E_local + le;
            for (int s = 0; s < p->k; s++) {
                size_t i = IDX(p, r, e, s);
                size_t n = (size_t)p->kept[i];
                if (n > 0) {
                    float *ex = expert_buf + ((size_t)ebase + p->offset[i]) * w;
                    float *rv = recv + pos * w;
                    if (to_expert)
                        comm_copy(ex, rv, n * w * sizeof(float));
                    else
                        comm_copy(rv, ex, n * w * sizeof(float));
                }
                pos += n;
            }
            ebase += p->expert_rows[e];
        }
    }
}

void ep_dispatch(const ep_plan *p, const float *send, float *recv_scratch, float *expert_buf,
                 int width) {
    if (p->ep == 1) {
        /* one rank: send order (e, s, position) is expert order (e, s, rank 0, position) */
        if (p->send_total > 0)
            comm_copy(expert_buf, send, (size_t)p->send_total * width * sizeof(float));
        return;
    }
    block_layout(p->ep, p->send_rows, p->sc, p->sd, width);
    block_layout(p->ep, p->recv_rows, p->rc, p->rd, width);
    comm_all_to_all_v(p->c, send, p->sc, p->sd, recv_scratch, p->rc, p->rd);
    permute(p, recv_scratch, expert_buf, width, 1);
}

void ep_combine(const ep_plan *p, const float *expert_buf, float *send_scratch, float *out,
                int width) {
    if (p->ep == 1) {
        if (p->send_total > 0)
            comm_copy(out, expert_buf, (size_t)p->send_total * width * sizeof(float));
        return;
    }
    permute(p, send_scratch, (float *)expert_buf, width, 0);
    block_layout(p->ep, p->recv_rows, p->sc, p->sd, width);
    block_layout(p->ep, p->send_rows, p->rc, p->rd, width);
    comm_all_to_all_v(p->c, send_scratch, p->sc, p->sd, out, p->rc, p->rd);
}
