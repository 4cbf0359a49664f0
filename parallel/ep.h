/*
 * parallel/ep.h — expert parallelism: who keeps which rows under a capacity, and moving rows
 * to the ranks that own their buckets (all-to-all-v) and back.
 *
 * parallel/ knows buffers, not transformers: here an "expert" is a bucket that rows are routed
 * to, a "slot" a priority class (a token's first choice is slot 0, its second choice slot 1).
 * The E experts are split over the ep ranks of the group in consecutive blocks of
 * E_local = E / ep: rank r owns experts [r·E_local, (r+1)·E_local).
 *
 * One forward of a routed layer is:
 *   1. every rank counts its rows per (expert, slot) and calls ep_plan_build: ONE all-gather of
 *      those counts (plus the rank's row count and a few doubles the caller wants summed over
 *      the group) gives every rank the whole group's table, so all ranks agree, without further
 *      messages, on the capacity, on which rows are kept, and on where each kept row goes;
 *   2. the caller packs its kept rows in SEND ORDER — by expert, then slot, then local row
 *      order — at ep_plan_send_row(), and ep_dispatch moves them (all-to-all-v) into the
 *      owners' EXPERT ORDER buffers;
 *   3. the owner computes on the expert buffers; ep_combine moves the results back into the
 *      sources' send-order buffers (the inverse of ep_dispatch).
 *
 * Priority and capacity (the exact order, which every EP layout reproduces):
 *   the rows routed to expert e are ranked by (slot, source rank, position on the source rank);
 *   the first `capacity` of them are kept and the rest DROPPED. The group's rows are the
 *   concatenation of the ranks' rows in rank order, so with global row index g this is the order
 *   (slot, g): ep ranks each holding a slice of a batch keep exactly the rows that one rank
 *   holding the whole batch keeps. An expert's kept rows lie in its expert buffer in that same
 *   order, so the expert sees identical inputs in identical order for every ep.
 *   capacity = ceil(capacity_factor · n_group · k / E) with n_group the rows over the group
 *   (Σ of every rank's count: ranks need not hold equal numbers); capacity_factor 0 = dropless.
 *   Alternative (per_rank, GShard's local groups / Megatron-LM's default): each source rank gets
 *   ceil(capacity_factor · n_local · k / E) rows at each expert, ranked (slot, position) among
 *   its own rows — every rank keeps what it would keep running alone.
 *
 * With a NULL communicator or a group of one rank nothing is communicated: dispatch/combine are
 * copies (send order and expert order coincide when ep = 1).
 */
#ifndef MT_EP_H
#define MT_EP_H

#include <stddef.h>

#include "parallel/comm.h"

#define EP_MAX_EXTRA 64 /* doubles per rank that ep_plan_build can sum over the group */

typedef struct {
    comm *c;           /* NULL or the EP group */
    int ep, rank;      /* group size and this rank's place in it (1, 0 without a group) */
    int E, E_local, k; /* experts, experts per rank, slots (top-k) */
    /* filled by ep_plan_build */
    int n_group;  /* rows over the group (Σ n_local) */
    int capacity; /* kept rows per expert at most (per_rank: of THIS rank's rows); 0 = dropless */
    int per_rank; /* 0: capacity over the group; 1: over each source rank's rows */
    int *count;   /* (ep, E, k) rows routed by rank r to (expert, slot), before capacity */
    int *kept;    /* (ep, E, k) of which kept */
    int *offset;  /* (ep, E, k) row in expert e's buffer of the first kept row of (r, e, s):
                            kept rows lie in (slot, source rank, position) order */
    int *expert_rows;   /* (E) kept rows per expert */
    int *rank_capacity; /* (ep) per_rank: each source rank's capacity */
    int *rank_used;     /* (ep) scratch */
    int *rank_rows;     /* (ep) rows (tokens) of each rank: their sum is n_group */
    int *assigned;      /* (E) rows routed to each expert over the group, before capacity */
    int *send_offset;   /* (E, k) this rank: send-buffer row of its first kept row to (e, s) */
    size_t *send_rows;  /* (ep) rows this rank sends to each peer */
    size_t *recv_rows;  /* (ep) rows this rank receives from each peer */
    int send_total;     /* Σ send_rows: rows of this rank's send-order buffer */
    int recv_total;     /* Σ recv_rows = Σ of expert_rows over the local experts */
    int dropped_local;  /* rows of this rank dropped */
    int dropped_group;  /* rows of the group dropped */
    /* scratch for the exchanges */
    size_t *sc, *sd, *rc, *rd; // (ep) each: element counts/displacements
    float *gather;             // (ep, E·k + 1 + 2·EP_MAX_EXTRA)
} ep_plan;

/* Set up a plan for E experts and k slots over group c (NULL or size 1 = no EP). E must be
 * divisible by the group size and k ≥ 1 (checked with mtCheck: the caller validates configs).
 * per_rank = 1 applies the capacity to each source rank's rows separately (capacity from that
 * rank's row count, priority (slot, position) among its rows): then what a rank keeps depends on
 * its own rows only, as if it ran alone. */
void ep_plan_init(ep_plan *p, comm *c, int E, int k, int per_rank);
/* The same plan as rank `rank` of a group of `ep` ranks holds, without a communicator (for
 * tests and what-if tools: fill it with ep_plan_solve; ep_dispatch/combine need ep_plan_init). */
void ep_plan_init_as(ep_plan *p, int ep, int rank, int E, int k, int per_rank);
void ep_plan_free(ep_plan *p);

/* Collective over the group. local_count (E, k): this rank's rows per (expert, slot); n_local:
 * this rank's rows (tokens), used for n_group and the capacity; capacity_factor ≥ 0 (0 =
 * dropless). extra (n_extra ≤ EP_MAX_EXTRA doubles, may be NULL when n_extra = 0) is summed over
 * the group into extra_sum (same length; may alias extra) — carried in the same all-gather as
 * (hi, lo) float pairs, so the sum keeps about 1e-14 relative precision. Counts must be < 2^24
 * (exact as floats). Afterwards every field documented "filled by ep_plan_build" is valid, and
 * identical on every rank except send_offset/send_rows/recv_rows/dropped_local. */
void ep_plan_build(ep_plan *p, const int *local_count, int n_local, float capacity_factor,
                   const double *extra, double *extra_sum, int n_extra);

/* What ep_plan_build computes once every rank's counts are known, without communication:
 * counts (ep, E, k) rows routed by each rank to (expert, slot), rank_rows (ep) each rank's rows
 * (n_local). Fills the same fields as ep_plan_build, as seen by rank p->rank. */
void ep_plan_solve(ep_plan *p, const int *counts, const int *rank_rows, float capacity_factor);

/* Capacity for n_group rows: ceil(capacity_factor · n_group · k / E), at least 1; 0 when
 * capacity_factor is 0 (dropless). capacity_factor is an fp32 config value (1.1f is
 * 1.10000002), so a relative excess of 1e-6 over an integer is forgiven before the ceil. */
int ep_capacity(float capacity_factor, int n_group, int k, int E);

/* Row of this rank's send-order buffer for its idx-th row (0-based, in local row order) routed
 * to (expert e, slot s), or -1 when that row is dropped. */
static inline int ep_plan_send_row(const ep_plan *p, int e, int s, int idx) {
    int i = (p->rank * p->E + e) * p->k + s;
    return idx < p->kept[i] ? p->send_offset[e * p->k + s] + idx : -1;
}

/* First row of local expert le (0 ≤ le < E_local) in this rank's expert-order buffer; its
 * rows are [ep_plan_expert_base(p, le), + expert_rows[rank·E_local + le]). */
int ep_plan_expert_base(const ep_plan *p, int le);

/* send (send_total, width) in send order → expert_buf (recv_total, width) in expert order on
 * the owners. recv_scratch: (recv_total, width) floats (unused, may be NULL, when ep = 1).
 * Collective. */
void ep_dispatch(const ep_plan *p, const float *send, float *recv_scratch, float *expert_buf,
                 int width);

/* The way back: expert_buf (recv_total, width) in expert order on the owners → out
 * (send_total, width) in send order on the sources. send_scratch: (recv_total, width) floats
 * (unused, may be NULL, when ep = 1). Collective. */
void ep_combine(const ep_plan *p, const float *expert_buf, float *send_scratch, float *out,
                int width);

#endif /* MT_EP_H */
