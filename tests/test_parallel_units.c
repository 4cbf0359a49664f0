/*
 * tests/test_parallel_units.c — the pure pieces of parallel/ that the multi-rank scripts
 * (tests/run_parallel.sh, run_pipeline.sh, run_moe_ep.sh) only cover end to end: the mesh's rank
 * coordinates and groups, the layer split over pipeline stages, the 1F1B warm-up and in-flight
 * counts, and the expert-parallel plan (capacity, kept rows, offsets, send/receive counts).
 *
 * Independence: the expected values are worked by hand for small layouts (literal numbers in the
 * tests), or derived in the test from the DEFINITIONS the headers state, by a different method:
 *   - mesh: coordinates by enumerating ranks in nested loops (pp outermost, then dp, tp fastest),
 *     groups as "the ranks that share these coordinates" by brute force over the world, compared
 *     with the partition the comm_split colors/keys of mesh_split_key produce;
 *   - 1F1B: slots = most microbatches whose forward ran and backward did not, counted while
 *     replaying the schedule's definition (warm-up forwards, then one forward + one backward,
 *     then the cool-down backwards); and pp_run itself on one stage records its call order;
 *   - EP plan: every row listed one by one and ranked by (slot, source rank, position) per expert,
 *     the first `capacity` kept — a list simulation against the implementation's counting.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "parallel/comm.h"
#include "parallel/ep.h"
#include "parallel/mesh.h"
#include "parallel/pp.h"

/* ---- mesh ----------------------------------------------------------------------------------- */

typedef struct {
    int tp, cp, pp, dp, ep;
} layout;

/* The members of rank r's group g, in group order, by brute force from the coordinates
 * co[q] = (tp, cp, dp, pp) of every rank q. */
static int expected_members(const layout *L, const int (*co)[4], int r, mesh_group g, int *out) {
    int world = L->tp * L->cp * L->pp * L->dp, n = 0;
    int t = co[r][0], c = co[r][1], d = co[r][2], p = co[r][3];
    int r_end = p == 0 || p == L->pp - 1;
    /* candidates in group order: walk the ordering coordinate from 0 up */
    int span = g == MESH_TP ? L->tp : g == MESH_DP ? L->dp : g == MESH_EP ? L->ep
             : g == MESH_EDP ? L->dp / L->ep : g == MESH_CP ? L->cp
             : g == MESH_DPCP ? L->cp * L->dp : L->pp;
    for (int i = 0; i < span; i++)
        for (int q = 0; q < world; q++) {
            int qt = co[q][0], qc = co[q][1], qd = co[q][2], qp = co[q][3];
            int same = 0;
            switch (g) {
            case MESH_TP: same = qc == c && qd == d && qp == p && qt == i; break;
            case MESH_DP: same = qt == t && qc == c && qp == p && qd == i; break;
            case MESH_PP: same = qt == t && qc == c && qd == d && qp == i; break;
            case MESH_CP: same = qt == t && qd == d && qp == p && qc == i; break;
            case MESH_DPCP: same = qt == t && qp == p && qc + L->cp * qd == i; break;
            case MESH_EP: /* ep consecutive dp ranks: block d / ep, place d % ep */
                same = qt == t && qc == c && qp == p && qd / L->ep == d / L->ep &&
                       qd % L->ep == i;
                break;
            case MESH_EDP: /* the same place in every block */
                same = qt == t && qc == c && qp == p && qd % L->ep == d % L->ep &&
                       qd / L->ep == i;
                break;
            case MESH_EMBED: {
                int q_end = qp == 0 || qp == L->pp - 1;
                same = r_end ? (q_end && qt == t && qc == c && qd == d && qp == i)
                             : (q == r && i == p);
                break;
            }
            default: break;
            }
            if (same) out[n++] = q;
        }
    return n;
}

/* The group of rank r as comm_split would form it from mesh_split_key: equal colors, by key. */
static int split_members(const layout *L, int r, mesh_group g, int *out) {
    int world = L->tp * L->cp * L->pp * L->dp, n = 0, color, key;
    mesh_split_key(r, L->tp, L->cp, L->pp, L->dp, L->ep, g, &color, &key);
    int keys[64];
    for (int q = 0; q < world; q++) {
        int c2, k2;
        mesh_split_key(q, L->tp, L->cp, L->pp, L->dp, L->ep, g, &c2, &k2);
        if (c2 != color) continue;
        int at = n++; /* insertion sort by key (MPI_Comm_split orders by key, then old rank) */
        while (at > 0 && (keys[at - 1] > k2)) {
            keys[at] = keys[at - 1];
            out[at] = out[at - 1];
            at--;
        }
        keys[at] = k2;
        out[at] = q;
    }
    return n;
}

static void check_layout(layout L) {
    int world = L.tp * L.cp * L.pp * L.dp;
    int dp = 0;
    char err[256];
    assert_int_equal(mesh_check(world, L.tp, L.cp, L.pp, &dp, L.ep, err, sizeof(err)), 0);
    assert_int_equal(dp, L.dp);
    int co[64][4], r = 0;
    for (int p = 0; p < L.pp; p++) /* Megatron order: tp fastest, then cp, then dp, then pp */
        for (int d = 0; d < L.dp; d++)
            for (int c = 0; c < L.cp; c++)
                for (int t = 0; t < L.tp; t++, r++) {
                    co[r][0] = t, co[r][1] = c, co[r][2] = d, co[r][3] = p;
                    int gt, gc, gd, gp, ge;
                    mesh_coords(r, L.tp, L.cp, L.pp, L.dp, L.ep, &gt, &gc, &gd, &gp, &ge);
                    assert_int_equal(gt, t);
                    assert_int_equal(gc, c);
                    assert_int_equal(gd, d);
                    assert_int_equal(gp, p);
                    assert_int_equal(ge, d % L.ep);
                    assert_int_equal(mesh_rank_of(L.tp, L.cp, L.dp, t, c, d, p), r);
                }
    for (int q = 0; q < world; q++)
        for (int g = 0; g < MESH_NGROUPS; g++) {
            int want[64], got[64];
            int nw = expected_members(&L, co, q, (mesh_group)g, want);
            int ng = split_members(&L, q, (mesh_group)g, got);
            if (nw != ng || memcmp(want, got, sizeof(int) * (size_t)nw) != 0)
                fail_msg("layout tp %d cp %d pp %d dp %d ep %d, rank %d, group %d: %d members "
                         "expected, %d formed", L.tp, L.cp, L.pp, L.dp, L.ep, q, g, nw, ng);
        }
}

static void test_mesh_groups_many_layouts(void **state) {
    (void)state;
    const layout Ls[] = {{1, 1, 1, 1, 1}, {2, 1, 1, 1, 1}, {1, 1, 1, 4, 1}, {1, 1, 1, 4, 2},
                         {1, 1, 1, 8, 4}, {2, 1, 2, 1, 1}, {1, 1, 4, 1, 1}, {2, 1, 1, 2, 2},
                         {2, 1, 2, 2, 2}, {2, 1, 2, 2, 1}, {1, 1, 2, 4, 2}, {4, 1, 1, 2, 2},
                         {2, 1, 3, 2, 1}, {1, 1, 3, 4, 4},
                         /* context parallel: alone and with tp, pp, dp (and ep inside dp) */
                         {1, 2, 1, 1, 1}, {1, 4, 1, 1, 1}, {2, 2, 1, 1, 1}, {1, 2, 2, 1, 1},
                         {1, 2, 1, 2, 1}, {2, 2, 2, 2, 2}, {1, 4, 2, 2, 1}, {2, 3, 1, 2, 2}};
    for (size_t i = 0; i < sizeof(Ls) / sizeof(Ls[0]); i++) check_layout(Ls[i]);
}

static void expect_group(const layout *L, int r, mesh_group g, int n, const int *want) {
    int got[64];
    assert_int_equal(split_members(L, r, g, got), n);
    for (int i = 0; i < n; i++) assert_int_equal(got[i], want[i]);
}

/* tp 2 x pp 2 x dp 2 with ep 2 (examples/shakespeare_4d.ini), worked by hand:
 *   rank: 0 1 | 2 3 || 4 5 | 6 7      (tp pairs | dp; || separates the pp stages)
 * rank 5 = tp 1, dp 0, pp 1. */
static void test_mesh_4d_by_hand(void **state) {
    (void)state;
    layout L = {2, 1, 2, 2, 2};
    int t, c, d, p, e;
    mesh_coords(5, 2, 1, 2, 2, 2, &t, &c, &d, &p, &e);
    assert_int_equal(c, 0);
    assert_int_equal(t, 1);
    assert_int_equal(d, 0);
    assert_int_equal(p, 1);
    assert_int_equal(e, 0);
    expect_group(&L, 5, MESH_TP, 2, (int[]){4, 5});
    expect_group(&L, 5, MESH_DP, 2, (int[]){5, 7});
    expect_group(&L, 5, MESH_PP, 2, (int[]){1, 5});
    expect_group(&L, 5, MESH_EP, 2, (int[]){5, 7}); /* ep = dp: the whole dp group */
    expect_group(&L, 5, MESH_EDP, 1, (int[]){5});   /* one replica of each expert shard */
    expect_group(&L, 5, MESH_EMBED, 2, (int[]){1, 5});
    /* dp 4 with ep 2: rank 3 (dp 3, ep rank 1) shares experts with dp 2, replicas with dp 1 */
    layout M = {1, 1, 1, 4, 2};
    expect_group(&M, 3, MESH_EP, 2, (int[]){2, 3});
    expect_group(&M, 3, MESH_EDP, 2, (int[]){1, 3});
    /* pp 3: the middle stage holds no embedding copy, so it is alone */
    layout P = {1, 1, 3, 1, 1};
    expect_group(&P, 1, MESH_EMBED, 1, (int[]){1});
    expect_group(&P, 2, MESH_EMBED, 2, (int[]){0, 2});
}

/* tp 2 x cp 2 x dp 2, worked by hand: rank = t + 2·(c + 2·d), so rank 5 = tp 1, cp 0, dp 1;
 * its ring is the other cp rank of (tp 1, dp 1); gradients sum over dp and cp (same tp). */
static void test_mesh_cp_by_hand(void **state) {
    (void)state;
    layout L = {2, 2, 1, 2, 1};
    int t, c, d, p, e;
    mesh_coords(5, 2, 2, 1, 2, 1, &t, &c, &d, &p, &e);
    assert_int_equal(t, 1);
    assert_int_equal(c, 0);
    assert_int_equal(d, 1);
    assert_int_equal(p, 0);
    expect_group(&L, 5, MESH_TP, 2, (int[]){4, 5});
    expect_group(&L, 5, MESH_CP, 2, (int[]){5, 7});
    expect_group(&L, 5, MESH_DP, 2, (int[]){1, 5});
    expect_group(&L, 5, MESH_DPCP, 4, (int[]){1, 3, 5, 7});
}

static void test_mesh_check_errors(void **state) {
    (void)state;
    char err[256];
    int dp = 0;
    assert_int_equal(mesh_check(8, 2, 1, 2, &dp, 1, err, sizeof(err)), 0);
    assert_int_equal(dp, 2);
    dp = 0;
    assert_int_equal(mesh_check(6, 4, 1, 1, &dp, 1, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "not divisible"));
    dp = 3;
    assert_int_equal(mesh_check(6, 2, 1, 1, &dp, 2, err, sizeof(err)), -1); /* ep 2 ∤ dp 3 */
    assert_non_null(strstr(err, "must divide"));
    dp = 2;
    assert_int_equal(mesh_check(8, 2, 1, 1, &dp, 1, err, sizeof(err)), -1); /* 4 != 8 */
    assert_non_null(strstr(err, "mpirun -np 4"));
    dp = 0; /* cp takes its share of the world: 8 = tp 2 x cp 2 x dp 2 */
    assert_int_equal(mesh_check(8, 2, 2, 1, &dp, 1, err, sizeof(err)), 0);
    assert_int_equal(dp, 2);
    dp = 0;
    assert_int_equal(mesh_check(6, 1, 4, 1, &dp, 1, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "tp 1 x cp 4 x pp 1"));
}

/* ---- pipeline: layer split, warm-up, slots -------------------------------------------------- */

static void test_split_layers(void **state) {
    (void)state;
    int b[9];
    char err[256];
    assert_int_equal(pp_split_layers(10, 4, NULL, b, err, sizeof(err)), 0);
    int even[] = {0, 3, 6, 8, 10}; /* 10 = 3 + 3 + 2 + 2: earlier stages take the remainder */
    for (int i = 0; i <= 4; i++) assert_int_equal(b[i], even[i]);
    assert_int_equal(pp_split_layers(12, 3, "", b, err, sizeof(err)), 0);
    int four[] = {0, 4, 8, 12};
    for (int i = 0; i <= 3; i++) assert_int_equal(b[i], four[i]);
    assert_int_equal(pp_split_layers(7, 2, "3,4", b, err, sizeof(err)), 0);
    assert_int_equal(b[1], 3);
    assert_int_equal(b[2], 7);
    assert_int_equal(pp_split_layers(4, 2, "1,2", b, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "sums to 3, but the model has 4 layers"));
    assert_int_equal(pp_split_layers(4, 2, "1,1,2", b, err, sizeof(err)), -1);
    assert_int_equal(pp_split_layers(4, 3, "2,2", b, err, sizeof(err)), -1);
    assert_int_equal(pp_split_layers(4, 2, "2,x", b, err, sizeof(err)), -1);
    assert_int_equal(pp_split_layers(4, 2, "0,4", b, err, sizeof(err)), -1);
    assert_int_equal(pp_split_layers(3, 4, NULL, b, err, sizeof(err)), -1); /* a stage with none */
}

/* Replay stage s's 1F1B order from its definition and count the peak in flight. */
static int replay_in_flight(int P, int s, int M) {
    int warm = pp_warmup_forwards(PP_1F1B, P, s, M, 1), f = 0, b = 0, peak = 0;
    for (int i = 0; i < warm; i++) f++, peak = f - b > peak ? f - b : peak;
    for (int i = 0; i < M - warm; i++) {
        f++; /* one forward ... */
        peak = f - b > peak ? f - b : peak;
        b++; /* ... one backward */
    }
    b += warm; /* cool-down */
    assert_int_equal(f, M);
    assert_int_equal(b, M);
    return peak;
}

static void test_1f1b_counts(void **state) {
    (void)state;
    /* P = 4 stages, M = 8 microbatches: warm-up 3, 2, 1, 0; in flight 4, 3, 2, 1 */
    int warm8[] = {3, 2, 1, 0}, slots8[] = {4, 3, 2, 1};
    /* M = 2 < P: stages 0 and 1 run both forwards first; in flight 2, 2, 2, 1 */
    int warm2[] = {2, 2, 1, 0}, slots2[] = {2, 2, 2, 1};
    for (int s = 0; s < 4; s++) {
        assert_int_equal(pp_warmup_forwards(PP_1F1B, 4, s, 8, 1), warm8[s]);
        assert_int_equal(pp_slots_needed(PP_1F1B, 4, s, 8, 1), slots8[s]);
        assert_int_equal(pp_warmup_forwards(PP_1F1B, 4, s, 2, 1), warm2[s]);
        assert_int_equal(pp_slots_needed(PP_1F1B, 4, s, 2, 1), slots2[s]);
        assert_int_equal(pp_warmup_forwards(PP_GPIPE, 4, s, 8, 1), 8); /* GPipe: all forwards */
        assert_int_equal(pp_slots_needed(PP_GPIPE, 4, s, 8, 1), 8);
    }
    /* the slot count is exactly the schedule's peak in flight, for many shapes */
    for (int P = 1; P <= 6; P++)
        for (int M = 1; M <= 9; M++)
            for (int s = 0; s < P; s++)
                assert_int_equal(pp_slots_needed(PP_1F1B, P, s, M, 1), replay_in_flight(P, s, M));
    /* bubble (P-1)/(M+P-1): P 4, M 2 → 3/5 */
    assert_true(pp_bubble_fraction(4, 2) == 0.6);
    assert_true(pp_bubble_fraction(1, 5) == 0.0);
}

/* pp_run on a single stage (the self backend): record the callback order. */
typedef struct {
    char order[64];
    int n;
    float buf[4];
} rec;

static float *rec_input(void *u, int i, int c) {
    (void)i, (void)c;
    return ((rec *)u)->buf;
}
static const float *rec_forward(void *u, int i, int c) {
    rec *r = u;
    (void)c;
    r->order[r->n++] = (char)('A' + i); /* forward of microbatch i: upper case */
    return r->buf;
}
static const float *rec_backward(void *u, int i, int c, const float *dout) {
    rec *r = u;
    (void)c;
    assert_null(dout); /* the last stage gets no gradient from a next stage */
    r->order[r->n++] = (char)('a' + i);
    return r->buf;
}

static void test_pp_run_one_stage_order(void **state) {
    (void)state;
    int argc = 1;
    char *args[] = {"test", NULL}, **argv = args;
    comm *world = comm_init_world(&argc, &argv);
    rec r = {{0}, 0, {0}};
    pp_stage_fns f = {&r, 4, 1, rec_input, rec_forward, rec_backward, NULL, NULL, NULL};
    pp_run(world, PP_1F1B, 3, &f, NULL);
    assert_string_equal(r.order, "AaBbCc"); /* one stage: no warm-up, 1F1B alternates */
    memset(&r, 0, sizeof(r));
    pp_run(world, PP_GPIPE, 3, &f, NULL);
    assert_string_equal(r.order, "ABCabc");
    /* with a trace, each span is stamped in the order the callbacks ran: GPipe's three
     * forwards, then its three backwards, each span ending no earlier than it starts */
    pp_span tr[3];
    memset(tr, 0, sizeof(tr));
    memset(&r, 0, sizeof(r));
    f.trace = tr;
    pp_run(world, PP_GPIPE, 3, &f, NULL);
    assert_string_equal(r.order, "ABCabc");
    double seq[12];
    for (int i = 0; i < 3; i++) {
        seq[2 * i] = tr[i].f0, seq[2 * i + 1] = tr[i].f1;
        seq[6 + 2 * i] = tr[i].b0, seq[6 + 2 * i + 1] = tr[i].b1;
    }
    assert_true(seq[0] > 1e9); /* unix seconds, not a zero left unstamped */
    for (int i = 1; i < 12; i++) assert_true(seq[i] >= seq[i - 1]);
    comm_free(world);
    comm_finalize();
}

/* ---- expert-parallel plan ------------------------------------------------------------------- */

#define EPN 3 /* ranks */
#define EE 6  /* experts: 2 per rank */
#define EK 2  /* slots */

/* The group's rows, one by one: rank r's j-th row goes to expert ROUTE[r][j][s] in slot s. */
static const int NROWS[EPN] = {4, 3, 5};
static const int ROUTE[EPN][5][EK] = {
    {{0, 1}, {0, 2}, {3, 0}, {0, 5}, {0, 0}},
    {{1, 0}, {0, 4}, {0, 1}, {0, 0}, {0, 0}},
    {{5, 0}, {0, 3}, {2, 0}, {0, 1}, {4, 0}},
};

/* The independent model: per expert, all rows routed to it in (slot, rank, position) order, the
 * first cap kept (cap 0 = all). kept_l[r][e][s], off_l[r][e][s] (row in expert e's buffer of the
 * first kept row of (r, e, s)). */
static void list_model(int cap, int kept_l[EPN][EE][EK], int off_l[EPN][EE][EK], int *dropped) {
    *dropped = 0;
    memset(kept_l, 0, sizeof(int) * EPN * EE * EK);
    for (int e = 0; e < EE; e++) {
        int taken = 0;
        for (int s = 0; s < EK; s++)
            for (int r = 0; r < EPN; r++) {
                off_l[r][e][s] = taken;
                for (int j = 0; j < NROWS[r]; j++) {
                    if (ROUTE[r][j][s] != e) continue;
                    if (cap == 0 || taken < cap) kept_l[r][e][s]++, taken++;
                    else (*dropped)++;
                }
            }
    }
}

static void counts_of_routes(int *counts /* (EPN, EE, EK) */) {
    memset(counts, 0, sizeof(int) * EPN * EE * EK);
    for (int r = 0; r < EPN; r++)
        for (int j = 0; j < NROWS[r]; j++)
            for (int s = 0; s < EK; s++) counts[(r * EE + ROUTE[r][j][s]) * EK + s]++;
}

static void check_plan(float cf, int cap_by_hand) {
    int counts[EPN * EE * EK], kept_l[EPN][EE][EK], off_l[EPN][EE][EK], dropped;
    counts_of_routes(counts);
    list_model(cap_by_hand, kept_l, off_l, &dropped);
    for (int me = 0; me < EPN; me++) {
        ep_plan p;
        ep_plan_init_as(&p, EPN, me, EE, EK, 0);
        ep_plan_solve(&p, counts, NROWS, cf);
        assert_int_equal(p.n_group, 12);
        assert_int_equal(p.capacity, cap_by_hand);
        assert_int_equal(p.dropped_group, dropped);
        int my_drop = 0, send = 0;
        size_t to[EPN] = {0}, from[EPN] = {0};
        for (int e = 0; e < EE; e++)
            for (int s = 0; s < EK; s++) {
                for (int r = 0; r < EPN; r++) {
                    size_t i = ((size_t)r * EE + e) * EK + s;
                    assert_int_equal(p.kept[i], kept_l[r][e][s]);
                    if (kept_l[r][e][s] > 0) assert_int_equal(p.offset[i], off_l[r][e][s]);
                    if (e / (EE / EPN) == me) from[r] += (size_t)kept_l[r][e][s];
                }
                my_drop += counts[(me * EE + e) * EK + s] - kept_l[me][e][s];
                /* send order: by expert, then slot */
                assert_int_equal(p.send_offset[e * EK + s], send);
                send += kept_l[me][e][s];
                to[e / (EE / EPN)] += (size_t)kept_l[me][e][s];
            }
        assert_int_equal(p.dropped_local, my_drop);
        assert_int_equal(p.send_total, send);
        for (int r = 0; r < EPN; r++) {
            assert_int_equal(p.send_rows[r], to[r]);
            assert_int_equal(p.recv_rows[r], from[r]);
        }
        ep_plan_free(&p);
    }
}

/* 12 rows x 2 slots over 6 experts: capacity ceil(cf · 12 · 2 / 6) = ceil(4 cf). */
static void test_ep_plan_against_row_list(void **state) {
    (void)state;
    check_plan(0.0f, 0);  /* dropless */
    check_plan(1.0f, 4);  /* expert 0 gets 12 assignments: 8 dropped there */
    check_plan(0.5f, 2);
    check_plan(0.25f, 1);
    check_plan(2.0f, 8);
}

/* One case in literal numbers: rank 1's view, capacity 4. Expert 0 receives, in (slot, rank,
 * position) order: slot 0: rank 0 rows 0, 1, 3 (3 rows), rank 1 rows 1, 2 (2 rows) ... so rank 0
 * keeps 3 at offset 0, rank 1 keeps 1 at offset 3, the rest of expert 0 is dropped. */
static void test_ep_plan_by_hand(void **state) {
    (void)state;
    int counts[EPN * EE * EK];
    counts_of_routes(counts);
    ep_plan p;
    ep_plan_init_as(&p, EPN, 1, EE, EK, 0);
    ep_plan_solve(&p, counts, NROWS, 1.0f);
#define AT(r, e, s) (((r) * EE + (e)) * EK + (s))
    assert_int_equal(p.count[AT(0, 0, 0)], 3);
    assert_int_equal(p.kept[AT(0, 0, 0)], 3);
    assert_int_equal(p.offset[AT(0, 0, 0)], 0);
    assert_int_equal(p.count[AT(1, 0, 0)], 2);
    assert_int_equal(p.kept[AT(1, 0, 0)], 1);
    assert_int_equal(p.offset[AT(1, 0, 0)], 3);
    assert_int_equal(p.kept[AT(2, 0, 0)], 0);
    assert_int_equal(p.kept[AT(0, 0, 1)], 0); /* second choices come after every first choice */
    assert_int_equal(p.assigned[0], 12);
    assert_int_equal(p.expert_rows[0], 4);
    /* rank 1 owns experts 2 and 3: expert 2 gets rank 0 row 1 (slot 1) and rank 2 row 2 (slot 0);
     * expert 3 gets rank 0 row 2 (slot 0) and rank 2 row 1 (slot 1) */
    assert_int_equal(p.expert_rows[2], 2);
    assert_int_equal(p.expert_rows[3], 2);
    assert_int_equal(p.offset[AT(2, 2, 0)], 0); /* slot 0 first */
    assert_int_equal(p.offset[AT(0, 2, 1)], 1);
    assert_int_equal(p.recv_total, 4);
    assert_int_equal((int)p.recv_rows[0], 2);
    assert_int_equal((int)p.recv_rows[1], 0);
    assert_int_equal((int)p.recv_rows[2], 2);
    assert_int_equal(ep_plan_expert_base(&p, 1), 2); /* expert 3 after expert 2's two rows */
#undef AT
    ep_plan_free(&p);
    /* capacity: ceil(cf · n · k / E), at least 1, 0 = dropless; 1.1f is not above 1.1 */
    assert_int_equal(ep_capacity(1.0f, 12, 2, 6), 4);
    assert_int_equal(ep_capacity(1.1f, 10, 1, 11), 1);
    assert_int_equal(ep_capacity(1.25f, 8, 2, 4), 5);
    assert_int_equal(ep_capacity(0.01f, 8, 1, 4), 1);
    assert_int_equal(ep_capacity(0.0f, 8, 1, 4), 0);
}

/* per_rank capacity: each source rank's own rows, ranked (slot, position) among them. */
static void test_ep_plan_per_rank(void **state) {
    (void)state;
    int counts[EPN * EE * EK];
    counts_of_routes(counts);
    ep_plan p;
    ep_plan_init_as(&p, EPN, 0, EE, EK, 1);
    ep_plan_solve(&p, counts, NROWS, 1.0f);
    /* per-rank capacities ceil(n_r · 2 / 6): 4 rows → 2, 3 → 1, 5 → 2 */
    assert_int_equal(p.rank_capacity[0], 2);
    assert_int_equal(p.rank_capacity[1], 1);
    assert_int_equal(p.rank_capacity[2], 2);
    assert_int_equal(p.capacity, 2);
    /* expert 0 from rank 0: slot 0 has 3 rows → 2 kept; slot 1 (row 2) → none left */
    assert_int_equal(p.kept[(0 * EE + 0) * EK + 0], 2);
    assert_int_equal(p.kept[(0 * EE + 0) * EK + 1], 0);
    /* from rank 1 (capacity 1): slot 0 has 2 rows → 1 kept, placed after rank 0's 2 */
    assert_int_equal(p.kept[(1 * EE + 0) * EK + 0], 1);
    assert_int_equal(p.offset[(1 * EE + 0) * EK + 0], 2);
    ep_plan_free(&p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mesh_groups_many_layouts),
        cmocka_unit_test(test_mesh_4d_by_hand),
        cmocka_unit_test(test_mesh_cp_by_hand),
        cmocka_unit_test(test_mesh_check_errors),
        cmocka_unit_test(test_split_layers),
        cmocka_unit_test(test_1f1b_counts),
        cmocka_unit_test(test_pp_run_one_stage_order),
        cmocka_unit_test(test_ep_plan_against_row_list),
        cmocka_unit_test(test_ep_plan_by_hand),
        cmocka_unit_test(test_ep_plan_per_rank),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
