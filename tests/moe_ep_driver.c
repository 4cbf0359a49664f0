/*
 * tests/moe_ep_driver.c — expert parallelism against one process, under mpirun
 * (built and run by tests/run_moe_ep.sh; not a cmocka program because it needs MPI ranks).
 *
 * Usage: mpirun -np P moe_ep_driver EP     (EP divides P; P/EP independent EP groups)
 *
 * Every rank builds, from fixed seeds, the same parameters for all E experts and, for its EP
 * group g, the group's global batch of G tokens (seed depends on g). Each rank then
 *   - runs the layer WITHOUT expert parallelism on the whole global batch (the reference:
 *     what a single process holding the whole batch computes), and
 *   - runs the layer WITH expert parallelism over its group: its own slice of the tokens, its
 *     E/EP experts, tokens exchanged with all-to-all-v,
 * and compares: its slice of y and of dx; its experts' gradients; the router gradient summed
 * over the group (the data-parallel reduction a trainer would do); aux and z losses, capacity,
 * group drop count and tokens per expert; the sum over the group of per-rank drop counts.
 * Both scopes (model/moe.h): group scope against one process running the group's whole batch;
 * per_rank scope against one process running each rank's slice in turn.
 * Cases: top-1 and top-2; dropless, capacity factor 1.0 and 0.5 (drops asserted to happen);
 * even slices, uneven slices (rank r holds ∝ r+1 tokens) and a rank holding no tokens.
 * Tolerance: |Δ| ≤ 1e-5 · max|ref| + 1e-7 per tensor (fp32; the experts see the same rows in the
 * same order in both runs, so only the router matmul's blocking and the cross-rank sum of the
 * router gradient may differ in the last bits). Exit status 0 when every case passes on every
 * rank; rank 0 prints one line per case.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "parallel/comm.h"
#include "model/moe.h"

enum { C = 16, H = 32, E = 8, G = 48 };
enum { SPLIT_EVEN, SPLIT_RAMP, SPLIT_ZERO };
static const char *SPLIT_NAMES[] = {"even", "ramp", "zero"};

static void fill(float *a, size_t n, float scale, rng_state *r) {
    for (size_t i = 0; i < n; i++) a[i] = scale * rng_normal(r);
}

/* tokens [start, start + n) of the group's batch for ep rank `rank` */
static void slice(int split, int ep, int rank, int *start, int *n) {
    int sizes[64], at = 0;
    if (ep == 1) split = SPLIT_EVEN;
    for (int r = 0; r < ep; r++) {
        if (split == SPLIT_EVEN) sizes[r] = G / ep;
        else if (split == SPLIT_RAMP) sizes[r] = G * (r + 1) / (ep * (ep + 1) / 2);
        else sizes[r] = r == 0 ? 0 : G / (ep - 1);
        at += sizes[r];
    }
    sizes[ep - 1] += G - at; /* remainder to the last rank */
    *start = 0;
    for (int r = 0; r < rank; r++) *start += sizes[r];
    *n = sizes[rank];
}

/* |a − b| ≤ 1e-5 · max|b| + 1e-7; returns the worst |Δ| / (max|b| + tiny), or -1 on failure */
static double compare(const char *what, const float *a, const float *b, size_t n, int *fail) {
    double maxref = 0, worst = 0;
    for (size_t i = 0; i < n; i++) {
        maxref = fmax(maxref, fabs(b[i]));
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= worst)) worst = d;
    }
    if (!(worst <= 1e-5 * maxref + 1e-7)) {
        fprintf(stderr, "rank %d: %s: max |diff| %.3g exceeds %.3g\n", comm_world_rank(), what,
                worst, 1e-5 * maxref + 1e-7);
        *fail = 1;
    }
    return worst / (maxref + 1e-30);
}

static int run_case(comm *epc, int group, int per_rank, int k, float cf, int split) {
    const int ep = comm_size(epc), rank = comm_rank(epc), El = E / ep;
    const size_t nW1 = (size_t)H * C, nW2 = (size_t)C * H;
    int fail = 0;
    char err[256];

    /* the same parameters everywhere; the group's batch from the group's seed */
    rng_state r;
    rng_seed(&r, 1000 + 10 * k + (int)(cf * 4));
    float *wr = malloc(sizeof(float) * E * C), *w1 = malloc(sizeof(float) * E * nW1);
    float *b1 = malloc(sizeof(float) * E * H), *w2 = malloc(sizeof(float) * E * nW2);
    float *b2 = malloc(sizeof(float) * E * C);
    fill(wr, (size_t)E * C, 0.3f, &r), fill(w1, E * nW1, 0.2f, &r);
    fill(b1, (size_t)E * H, 0.1f, &r);
    fill(w2, E * nW2, 0.2f, &r), fill(b2, (size_t)E * C, 0.1f, &r);
    rng_seed(&r, 77 + group);
    float *x = malloc(sizeof(float) * G * C), *dy = malloc(sizeof(float) * G * C);
    fill(x, (size_t)G * C, 1.0f, &r), fill(dy, (size_t)G * C, 1.0f, &r);
    const float aux_grad = 0.9f;

    /* reference: no EP. Group scope: one process runs the whole batch. per_rank: one process
     * runs each rank's slice in turn (gradients accumulate); the stats to match are this rank's
     * slice's, with drops and tokens per expert summed over the slices. */
    moe_config cfg = {.C = C, .H = H, .E = E, .top_k = k, .capacity_factor = cf, .aux_coef = 0.02f,
                      .z_coef = 0.005f, .per_rank = per_rank, .ep = NULL};
    moe_layer *ref = moe_create(&cfg, G, err, sizeof(err));
    mtCheck(ref != NULL, err);
    moe_params P = {wr, w1, b1, w2, b2};
    float *gref = calloc((size_t)E * C + E * (nW1 + H + nW2 + C), sizeof(float));
    moe_params GR = {gref, gref + E * C, gref + E * C + E * nW1, gref + E * C + E * (nW1 + H),
                     gref + E * C + E * (nW1 + H + nW2)};
    float *yref = malloc(sizeof(float) * G * C), *dxref = calloc((size_t)G * C, sizeof(float));
    moe_stats sref = {0}, s1;
    int assigned_ref[E] = {0}, dropped_ref = 0, t0, n;
    slice(split, ep, rank, &t0, &n);
    for (int j = 0; j < (per_rank ? ep : 1); j++) {
        int u0 = 0, m = G;
        if (per_rank) slice(split, ep, j, &u0, &m);
        moe_forward(ref, &P, x + (size_t)u0 * C, yref + (size_t)u0 * C, m, &s1);
        for (int e = 0; e < E; e++) assigned_ref[e] += s1.tokens_per_expert[e];
        dropped_ref += s1.dropped;
        moe_backward(ref, &P, &GR, dy + (size_t)u0 * C, dxref + (size_t)u0 * C, aux_grad);
        if (!per_rank || j == rank) sref = s1;
    }

    /* expert parallel: this rank's tokens and experts */
    cfg.ep = epc;
    moe_layer *l = moe_create(&cfg, n, err, sizeof(err));
    mtCheck(l != NULL, err);
    moe_params PL = {wr, w1 + rank * El * nW1, b1 + rank * El * H, w2 + rank * El * nW2,
                     b2 + rank * El * C};
    float *g = calloc((size_t)E * C + El * (nW1 + H + nW2 + C), sizeof(float));
    moe_params GL = {g, g + E * C, g + E * C + El * nW1, g + E * C + El * (nW1 + H),
                     g + E * C + El * (nW1 + H + nW2)};
    size_t nrows = n > 0 ? (size_t)n : 1;
    float *y = malloc(sizeof(float) * nrows * C), *dx = calloc(nrows * C, sizeof(float));
    moe_stats st;
    moe_forward(l, &PL, x + (size_t)t0 * C, y, n, &st);
    moe_backward(l, &PL, &GL, dy + (size_t)t0 * C, dx, aux_grad);

    double worst = 0;
    worst = fmax(worst, compare("y", y, yref + (size_t)t0 * C, (size_t)n * C, &fail));
    worst = fmax(worst, compare("dx", dx, dxref + (size_t)t0 * C, (size_t)n * C, &fail));
    comm_all_reduce(epc, GL.router_w, (size_t)E * C, COMM_SUM);
    worst = fmax(worst, compare("d router_w", GL.router_w, GR.router_w, (size_t)E * C, &fail));
    worst = fmax(worst, compare("d fc_w", GL.fc_w, GR.fc_w + rank * El * nW1, El * nW1, &fail));
    worst = fmax(worst, compare("d fc_b", GL.fc_b, GR.fc_b + rank * El * H, (size_t)El * H, &fail));
    worst = fmax(worst, compare("d proj_w", GL.proj_w, GR.proj_w + rank * El * nW2, El * nW2,
                                &fail));
    worst = fmax(worst, compare("d proj_b", GL.proj_b, GR.proj_b + rank * El * C, (size_t)El * C,
                                &fail));
    if (fabs(st.aux_loss - sref.aux_loss) > 1e-6 * sref.aux_loss ||
        fabs(st.z_loss - sref.z_loss) > 1e-6 * sref.z_loss || st.capacity != sref.capacity ||
        st.n_group != G || st.dropped_group != dropped_ref ||
        (per_rank && st.dropped != sref.dropped)) {
        fprintf(stderr,
                "rank %d: stats: aux %.9g/%.9g z %.9g/%.9g cap %d/%d n_group %d drops %d/%d\n",
                comm_world_rank(), st.aux_loss, sref.aux_loss, st.z_loss, sref.z_loss, st.capacity,
                sref.capacity, st.n_group, st.dropped_group, dropped_ref);
        fail = 1;
    }
    for (int e = 0; e < E; e++)
        if (st.tokens_per_expert[e] != assigned_ref[e]) fail = 1;
    float dropped_sum = (float)st.dropped;
    comm_all_reduce(epc, &dropped_sum, 1, COMM_SUM);
    if ((int)dropped_sum != dropped_ref) {
        fprintf(stderr, "rank %d: per-rank drops sum to %d, reference %d\n", comm_world_rank(),
                (int)dropped_sum, dropped_ref);
        fail = 1;
    }
    if (cf == 0.5f && dropped_ref == 0) fail = 1; /* the capacity case must drop something */

    float flags[2] = {(float)fail, (float)worst};
    comm_all_reduce(epc, flags, 2, COMM_MAX);
    if (comm_world_rank() == 0)
        printf("  %s ep=%d %-8s k=%d cf=%.1f split=%-4s  dropped %2d/%d  worst rel diff %.2g\n",
               flags[0] > 0 ? "FAIL" : "ok  ", ep, per_rank ? "per-rank" : "group", k, (double)cf,
               SPLIT_NAMES[split], dropped_ref, G * k, (double)flags[1]);
    moe_free(ref), moe_free(l);
    free(wr), free(w1), free(b1), free(w2), free(b2), free(x), free(dy), free(gref), free(yref);
    free(dxref), free(g), free(y), free(dx);
    return flags[0] > 0;
}

int main(int argc, char **argv) {
    comm *world = comm_init_world(&argc, &argv);
    int P = comm_size(world), rank = comm_rank(world);
    int ep = argc > 1 ? atoi(argv[1]) : P;
    if (ep < 1 || P % ep != 0 || E % ep != 0) {
        if (rank == 0)
            fprintf(stderr, "moe_ep_driver: EP (%d) must divide the ranks (%d) and %d experts\n",
                    ep, P, E);
        comm_finalize();
        return 2;
    }
    comm *epc = comm_split(world, rank / ep, rank, "ep");
    int failed = 0;
    const float cfs[3] = {0.0f, 1.0f, 0.5f};
    for (int per_rank = 0; per_rank <= 1; per_rank++)
        for (int k = 1; k <= 2; k++)
            for (int c = 0; c < 3; c++)
                for (int split = 0; split < 3; split++) {
                    if (ep == 1 && split > 0) continue;
                    failed |= run_case(epc, rank / ep, per_rank, k, cfs[c], split);
                }
    float f = (float)failed;
    comm_all_reduce(world, &f, 1, COMM_MAX);
    comm_free(epc);
    comm_finalize();
    return f > 0 ? 1 : 0;
}
