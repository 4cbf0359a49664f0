/*
 * gateway/gw_spend.c — spend budgets on a request: reserve its worst case in the ledger before
 * it is sent, settle it to what was really used after (the contract: gw_spend_reserve and
 * gw_spend_settle in gateway/gw_impl.h; the ledger itself: gateway/gw_ledger.h).
 *
 * Why it is shaped so:
 *   - The worst case is the prompt estimate (bytes of prompt text, as the rate limiter reserves)
 *     plus max_tokens: an answer can never cost more, so N concurrent requests can never
 *     overspend the budget they were admitted under.
 *   - Settling follows how the request ended, not what was asked: a complete answer is charged
 *     the upstream's usage, a stream cut short the text events it passed on (serve sends one per
 *     token), a cache hit or a failure nothing — so a client that hangs up pays for what it got.
 */
#include "gateway/gw_impl.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

double gw_route_cost(const gw_gateway *g, int r, long prompt, long completion) {
    const gw_route_cfg *rt = &g->cfg.routes[r];
    return (rt->price_input * (double)(prompt > 0 ? prompt : 0) +
            rt->price_output * (double)(completion > 0 ? completion : 0)) * 1e-6;
}

int gw_spend_reserve(gw_exchange *x, const gw_key_info *key, const char *model, long prompt_est,
                     long max_tokens, api_error *e, char *retry_after, size_t ra_cap) {
    gw_gateway *g = x->g;
    gw_spend_decision d;
    int rc = gw_ledger_reserve(g->ledger, key->id, gw_role_name(key->role), x->req_id, model,
                               prompt_est + max_tokens,
                               gw_route_cost(g, x->route, prompt_est, max_tokens), &d);
    retry_after[0] = 0;
    if (rc == GW_SPEND_OK) {
        x->spend_active = 1;
        x->spend_res = d.reservation;
        x->prompt_est = prompt_est;
        x->max_tokens_reserved = max_tokens;
        return 0;
    }
    if (rc == GW_SPEND_UNAVAILABLE) {
        snprintf(retry_after, ra_cap, "1");
        api_fail(e, 503, "server_error", NULL, "ledger_unavailable",
                 "the spend ledger cannot be written right now; retry shortly");
        return 503;
    }
    pthread_mutex_lock(&g->mx.mu);
    g->mx.budget_refused++;
    pthread_mutex_unlock(&g->mx.mu);
    const char *whose = !strncmp(d.subject, "role:", 5) ? "role's" : "key's";
    if (rc == GW_SPEND_TOO_LARGE) {
        api_fail(e, 400, "invalid_request_error", "max_tokens", "request_too_large",
                 "this request reserves %g %s (prompt + max_tokens), more than the %s whole %s "
                 "budget of %g", d.asked, d.what, whose, d.period, d.limit);
        return 400;
    }
    long long wait = d.reset_at - (long long)time(NULL);
    snprintf(retry_after, ra_cap, "%lld", wait > 1 ? wait : 1);
    api_fail(e, 429, "insufficient_quota", NULL, "budget_exceeded",
             "the %s %s budget of %g %s is spent (%g used, this request reserves %g); it resets "
             "at the next UTC %s boundary, in %s s", whose, d.period, d.limit, d.what, d.used,
             d.asked, d.period, retry_after);
    return 429;
}

void gw_spend_settle(gw_exchange *x, int complete) {
    gw_gateway *g = x->g;
    const char *upstream = x->upstream >= 0 ? g->cfg.up[x->upstream].name : "";
    gw_settle_kind kind = GW_SETTLE_RELEASE;
    long pt = 0, ct = 0;
    if (x->cached) {
        kind = GW_SETTLE_CACHED;
    } else if (complete && (!x->committed || x->finished)) {
        kind = GW_SETTLE_DONE;
        pt = x->prompt_tokens >= 0 ? x->prompt_tokens : x->prompt_est;
        ct = x->completion_tokens >= 0 ? x->completion_tokens : x->max_tokens_reserved;
    } else if (x->committed && x->produced > 0) {
        kind = GW_SETTLE_CUT;
        pt = x->prompt_tokens >= 0 ? x->prompt_tokens : x->prompt_est;
        ct = x->completion_tokens >= 0 ? x->completion_tokens : x->produced;
    }
    double cost = x->route >= 0 ? gw_route_cost(g, x->route, pt, ct) : 0;
    if (gw_ledger_settle(g->ledger, x->spend_res, kind, upstream, pt, ct, cost) != 0)
        gw_log(g, "req=%s could not settle ledger row %lld (the worst case stays charged)",
               x->req_id, x->spend_res);
    x->spend_active = 0;
}
