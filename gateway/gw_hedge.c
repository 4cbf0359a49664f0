/*
 * gateway/gw_hedge.c — request hedging: when the first attempt has not produced its first token
 * after hedge_after, a second attempt goes to another healthy upstream, the first one to produce
 * a token wins and the other is cancelled ("The Tail at Scale", Dean & Barroso, CACM 2013:
 * hedged requests cut the tail at a few percent extra load when the delay is a high quantile).
 *
 * Why it is shaped so:
 *   - Nothing reaches the client before a leg is decided (a stream commits at its first token,
 *     a plain answer when it is whole), so the race cannot put two answers' tokens into one
 *     response: the loser is cancelled before anything of it is sent.
 *   - A hedge multiplies load like a retry, so it draws on the retry budget and counts against
 *     max_attempts; only HEALTHY upstreams take one (never the half-open probe), a first attempt
 *     that is itself a probe is never raced, and a client that sends X-Idempotent: false is
 *     never hedged.
 *   - hedge_after = pNN reads the route's own time-to-first-token histogram (streams; whole
 *     answers otherwise), so the delay follows the upstreams; until 20 answers are in, the
 *     route is not hedged.
 *   - The two legs have a curl multi handle each (gw_upstream.c); they are pumped in turn for
 *     at most 2 ms each while both run, a resolution far below the delays being cut.
 */
#include "gateway/gw_impl.h"

#include <math.h>
#include <string.h>

#define HEDGE_SLICE_S 0.002
#define QUANTILE_MIN_SAMPLES 20

int gw_hedge_delay(gw_exchange *x, double *delay_s) {
    gw_gateway *g = x->g;
    const gw_route_cfg *r = &g->cfg.routes[x->route];
    double ms = r->hedge_after_ms, q = r->hedge_quantile;
    if (ms < 0) { /* not set on the route: the [gateway] default */
        ms = g->cfg.hedge_after_ms;
        q = g->cfg.hedge_quantile;
    }
    if (x->no_hedge || (ms <= 0 && q <= 0) || g->cfg.pol.max_attempts < 2 || r->n_targets < 2)
        return 0;
    if (q > 0) {
        pthread_mutex_lock(&g->mx.mu);
        const gw_hist *h = x->stream ? &g->mx.ttft[x->route] : &g->mx.latency[x->route];
        double v = gw_hist_quantile(h, q, QUANTILE_MIN_SAMPLES);
        pthread_mutex_unlock(&g->mx.mu);
        if (v < 0) return 0;
        *delay_s = v;
        return 1;
    }
    *delay_s = ms / 1000.0;
    return 1;
}

/* The next target after order[k] on another upstream that may take a hedge; -1 if none. */
static int hedge_target(gw_exchange *x, const int *order, int k, int n, int first_up) {
    gw_gateway *g = x->g;
    const gw_route_cfg *r = &g->cfg.routes[x->route];
    for (int j = k + 1; j < n; j++) {
        int u = r->t[order[j]].upstream;
        if (u != first_up && gw_up_acquire_healthy(g, u)) return order[j];
    }
    return -1;
}

/* Drive one leg alone to its decision. */
static void drive(gw_exchange *x, gw_leg *L) {
    double left;
    while (!gw_leg_poll(x, L, &left))
        if (gw_call_pump(x->g, L->c, left, x->client_fd) < 0) {
            L->a.gone = 1;
            return;
        }
}

static void count(gw_gateway *g, uint64_t *v) {
    pthread_mutex_lock(&g->mx.mu);
    (*v)++;
    pthread_mutex_unlock(&g->mx.mu);
}

int gw_attempt_hedged(gw_exchange *x, const int *order, int k, int n, double delay_s, gw_leg *a,
                      gw_leg *b, gw_leg **res) {
    gw_gateway *g = x->g;
    const gw_policy *p = &g->cfg.pol;
    *res = a;
    gw_leg_start(x, order[k], 0, a);
    double hedge_at = a->t0 + delay_s, left;
    for (;;) { /* the first leg alone until the hedge delay */
        if (gw_leg_poll(x, a, &left)) goto alone_done;
        double until = hedge_at - api_now();
        if (until <= 0) break;
        if (gw_call_pump(g, a->c, fmin(left, until), x->client_fd) < 0) {
            a->a.gone = 1;
            goto alone_done;
        }
    }
    int bt = x->attempts < p->max_attempts ? hedge_target(x, order, k, n, a->u) : -1;
    if (bt >= 0) {
        pthread_mutex_lock(&g->budget_mu);
        int allowed = gw_budget_try_retry(&g->budget, p);
        pthread_mutex_unlock(&g->budget_mu);
        if (!allowed) {
            gw_up_done(g, g->cfg.routes[x->route].t[bt].upstream);
            count(g, &g->mx.budget_exhausted);
            bt = -1;
        }
    }
    if (bt < 0) {
        drive(x, a);
        goto alone_done;
    }
    x->attempts++;
    count(g, &g->mx.hedges[x->route]);
    gw_leg_start(x, bt, 0, b);
    gw_log(g, "req=%s no first token from %s after %.0f ms: hedged to %s", x->req_id,
           g->up[a->u].cfg.name, 1e3 * delay_s, g->up[b->u].cfg.name);
    gw_leg *leg[2] = {a, b};
    int live[2] = {1, 1};
    for (;;) {
        for (int i = 0; i < 2; i++) {
            if (!live[i] || !gw_leg_poll(x, leg[i], &left)) continue;
            gw_leg *other = leg[1 - i];
            if (leg[i]->a.o == GW_OUT_OK || !live[1 - i]) { /* a winner, or the last one out */
                if (live[1 - i]) gw_leg_cancel(x, other, "hedge-lost");
                if (leg[i] == b && b->a.o == GW_OUT_OK) count(g, &g->mx.hedge_wins[x->route]);
                *res = leg[i];
                goto race_done;
            }
            /* this leg failed: it is reported now, the race goes on with the other */
            gw_leg_end(x, leg[i]);
            gw_up_report(x, leg[i]->u, leg[i]->a.o, leg[i]->a.http, leg[i]->a.retry_after, 0);
            gw_up_done(g, leg[i]->u);
            live[i] = 0;
        }
        for (int i = 0; i < 2; i++) {
            if (!live[i]) continue;
            if (gw_call_pump(g, leg[i]->c, HEDGE_SLICE_S, x->client_fd) < 0) {
                gw_leg *other = leg[1 - i];
                if (live[1 - i]) gw_leg_cancel(x, other, "client-gone");
                leg[i]->a.gone = 1;
                *res = leg[i];
                goto race_done;
            }
        }
    }
race_done:
    gw_leg_end(x, *res);
    pthread_mutex_lock(&g->budget_mu);
    gw_budget_end_retry(&g->budget);
    pthread_mutex_unlock(&g->budget_mu);
    return 1;
alone_done:
    gw_leg_end(x, a);
    return 0;
}
