/*
 * gateway/gw_lb.c — the load balancers: the order in which one request tries a route's targets.
 *
 * Priority levels come in the configured order; within a level the route's lb decides:
 *   ordered      a weighted random draw without replacement (upstream weights);
 *   round_robin  a rotation by a per-route counter;
 *   least_busy   requests in flight per unit of weight, lowest first;
 *   ewma_latency the latency EWMA x (in flight + 1), lowest first (Finagle's "peak EWMA" cost);
 *   p2c          two random choices, the better first, then the rest best first (Mitzenmacher's
 *                power of two choices).
 * The load-reading balancers shuffle first, so ties are broken at random. gw_route.c walks the
 * order; this file only builds it and keeps each upstream's time-to-first-token EWMA. Its face is
 * the "load balancing" section of gateway/gw_impl.h (a header of its own would close an include
 * cycle with gw_impl.h, whose functions gw_route.c implements; run_layers rule 3).
 */
#include "gateway/gw_impl.h"

#include <pthread.h>
#include <stdatomic.h>

int gw_lb_of_route(const gw_gateway *g, int route) {
    int lb = g->cfg.routes[route].lb;
    return lb == GW_LB_DEFAULT ? g->cfg.lb : lb;
}

/* The balancers' view of upstream u: least_busy ranks by requests in flight per unit of weight;
 * ewma_latency and p2c by the latency EWMA × (in flight + 1), the expected wait of one more
 * request there (Finagle's "peak EWMA" cost). Unmeasured upstreams score 0, so they get tried. */
static double lb_score(gw_gateway *g, int u, int lb) {
    gw_upstream *up = &g->up[u];
    pthread_mutex_lock(&up->mu);
    double in_flight = up->in_flight, ewma = up->ewma_n ? up->ewma_ttft : 0;
    pthread_mutex_unlock(&up->mu);
    if (lb == GW_LB_LEAST_BUSY) return in_flight / up->cfg.weight;
    return ewma * (in_flight + 1);
}

static void swap_cand(int *cand, double *score, int i, int j) {
    double ts = score[i];
    score[i] = score[j];
    score[j] = ts;
    int tc = cand[i];
    cand[i] = cand[j];
    cand[j] = tc;
}

/* order cand[0..nc) by score, ascending; ties keep the (random) order they came in */
static void sort_by_score(int *cand, double *score, int nc) {
    for (int i = 1; i < nc; i++)
        for (int j = i; j > 0 && score[j] < score[j - 1]; j--) swap_cand(cand, score, j, j - 1);
}

/* One level's targets cand[0..nc) in the order the route's lb wants them, into out. */
static int order_level(gw_exchange *x, int lb, unsigned rr, int *cand, int nc, int *out) {
    gw_gateway *g = x->g;
    const gw_route_cfg *r = &g->cfg.routes[x->route];
    int n = 0;
    if (lb == GW_LB_ROUND_ROBIN) {
        for (int i = 0; i < nc; i++) out[n++] = cand[(rr + (unsigned)i) % (unsigned)nc];
        return n;
    }
    if (lb != GW_LB_ORDERED) { /* a uniform shuffle first: ties are broken at random */
        for (int i = nc - 1; i > 0; i--) {
            int j = (int)(gw_rand01(g) * (i + 1));
            int t = cand[i];
            cand[i] = cand[j];
            cand[j] = t;
        }
        double score[GW_MAX_TARGETS];
        for (int i = 0; i < nc; i++) score[i] = lb_score(g, r->t[cand[i]].upstream, lb);
        if (lb == GW_LB_P2C && nc > 2) { /* the two random choices are the shuffle's first two */
            if (score[1] < score[0]) swap_cand(cand, score, 0, 1);
            out[n++] = cand[0];
            sort_by_score(cand + 1, score + 1, nc - 1); /* fallbacks: the rest, best first */
            for (int i = 1; i < nc; i++) out[n++] = cand[i];
            return n;
        }
        sort_by_score(cand, score, nc);
        for (int i = 0; i < nc; i++) out[n++] = cand[i];
        return n;
    }
    while (nc > 0) { /* ordered: a weighted draw without replacement */
        double total = 0;
        for (int i = 0; i < nc; i++) total += g->up[r->t[cand[i]].upstream].cfg.weight;
        double pick = gw_rand01(g) * total;
        int i = 0;
        for (; i < nc - 1; i++) {
            pick -= g->up[r->t[cand[i]].upstream].cfg.weight;
            if (pick < 0) break;
        }
        out[n++] = cand[i];
        cand[i] = cand[--nc];
    }
    return n;
}

int gw_lb_order(gw_exchange *x, int *order) {
    gw_gateway *g = x->g;
    const gw_route_cfg *r = &g->cfg.routes[x->route];
    int lb = gw_lb_of_route(g, x->route);
    unsigned rr = lb == GW_LB_ROUND_ROBIN ? atomic_fetch_add(&g->rr[x->route], 1u) : 0;
    int n = 0, max_level = 0;
    for (int t = 0; t < r->n_targets; t++)
        if (r->t[t].level > max_level) max_level = r->t[t].level;
    for (int lv = 0; lv <= max_level; lv++) {
        int cand[GW_MAX_TARGETS], nc = 0;
        for (int t = 0; t < r->n_targets; t++)
            if (r->t[t].level == lv) cand[nc++] = t;
        n += order_level(x, lb, rr, cand, nc, order + n);
    }
    return n;
}

/* A successful attempt on u took `seconds` to its first token: into u's EWMA. */
void gw_lb_observe(gw_gateway *g, int u, double seconds) {
    gw_upstream *up = &g->up[u];
    pthread_mutex_lock(&up->mu);
    up->ewma_ttft = up->ewma_n ? GW_EWMA_ALPHA * seconds + (1 - GW_EWMA_ALPHA) * up->ewma_ttft
                               : seconds;
    up->ewma_n++;
    pthread_mutex_unlock(&up->mu);
}
