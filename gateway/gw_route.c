/*
 * gateway/gw_route.c — one client request through the gateway: pick targets, attempt, retry,
 * fall back, and pass a stream through.
 *
 * Why it is shaped so:
 *   - The order of targets is decided once per request: priority levels in the configured order,
 *     and within a level a weighted random permutation (upstream weights). Attempts walk that
 *     order; an upstream that is ejected, half-open with its probe already out, or at its
 *     max_concurrent is skipped without costing an attempt.
 *   - Retries (same upstream, after a backoff or the upstream's Retry-After) and fallbacks (next
 *     upstream, at once) share one cap, max_attempts, so a request never costs more than that
 *     many upstream calls — not retries × fallbacks. Retries also draw on the retry budget; a
 *     refused retry becomes a fallback. A connect error skips the retries of that upstream:
 *     nothing is listening there now.
 *   - A stream is held until its first event that carries text or a finish reason: until then
 *     nothing has reached the client and a failure (status, first-token timeout, empty stream)
 *     can still fall back. From then on it is committed and is never retried.
 *   - When every target is out of service the request still goes to the one out longest (its
 *     ejection is the oldest, so it is the likeliest to have recovered; Envoy's "panic routing"
 *     in small) — all_ejected = refuse answers 503 with Retry-After instead. Either way at most
 *     one such attempt is made, and the client gets 503 + Retry-After if it fails.
 *   - Every attempt is logged with the request id, and the id is sent upstream as X-Request-Id.
 * The stream after its commit is gw_stream.c's.
 */
#include "gateway/gw_impl.h"
#include "core/timer.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void gw_log(gw_gateway *g, const char *fmt, ...) {
    (void)g;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    double t = timer_unix();
    long sec = (long)t, ms = (long)((t - (double)sec) * 1000);
    fprintf(stderr, "minitrain: gateway: [%ld.%03ld] %s\n", sec, ms < 1000 ? ms : 999, line);
}

double gw_rand01(gw_gateway *g) {
    pthread_mutex_lock(&g->rng_mu);
    uint64_t v = rng_u64(&g->rng);
    pthread_mutex_unlock(&g->rng_mu);
    return (double)(v >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- upstream bookkeeping -------------------------------------------------------------------------- */

enum { WHY_OK, WHY_EJECTED, WHY_FULL };

static int up_acquire(gw_gateway *g, int u, int *probe, int *why) {
    gw_upstream *up = &g->up[u];
    int ok = 0;
    pthread_mutex_lock(&up->mu);
    if (up->cfg.max_concurrent > 0 && up->in_flight >= up->cfg.max_concurrent) {
        *why = WHY_FULL;
    } else if (!gw_health_acquire(&up->h, timer_now(), probe)) {
        *why = WHY_EJECTED;
    } else {
        ok = 1;
        *why = WHY_OK;
        up->in_flight++;
        up->attempts++;
    }
    pthread_mutex_unlock(&up->mu);
    return ok;
}

int gw_up_acquire_healthy(gw_gateway *g, int u) {
    gw_upstream *up = &g->up[u];
    pthread_mutex_lock(&up->mu);
    int ok = gw_health_state(&up->h, timer_now()) == GW_UP_HEALTHY &&
             !(up->cfg.max_concurrent > 0 && up->in_flight >= up->cfg.max_concurrent);
    if (ok) {
        up->in_flight++;
        up->attempts++;
    }
    pthread_mutex_unlock(&up->mu);
    return ok;
}

/* force = the all-targets-ejected attempt (taken without asking the health machine) */
static void up_force(gw_gateway *g, int u) {
    gw_upstream *up = &g->up[u];
    pthread_mutex_lock(&up->mu);
    up->in_flight++;
    up->attempts++;
    pthread_mutex_unlock(&up->mu);
}

void gw_up_report(gw_exchange *x, int u, gw_outcome o, int http, double retry_after, int probe) {
    gw_gateway *g = x->g;
    gw_upstream *up = &g->up[u];
    int failure = gw_outcome_is_failure(o);
    pthread_mutex_lock(&up->mu);
    /* the upstream said when to come back (429/503 + Retry-After): no request before that, not
     * even the "at least one target is always tried" one */
    if ((o == GW_OUT_429 || o == GW_OUT_5XX) && retry_after >= 0)
        gw_health_retry_after(&up->h, retry_after, http, timer_now());
    int was_ejected = up->h.ejected;
    if (failure) up->failures[o]++;
    int ejected = gw_health_result(&up->h, &g->cfg.pol, failure, probe && was_ejected, timer_now());
    int times = up->h.times_ejected;
    double rest = gw_health_wait(&up->h, timer_now());
    pthread_mutex_unlock(&up->mu);
    if (ejected)
        gw_log(g, "upstream %s ejected for %.1f s (%s; ejection #%d) req=%s", up->cfg.name, rest,
               probe && was_ejected ? "the half-open probe failed" : "consecutive failures", times,
               x->req_id);
    else if (was_ejected && probe && !failure)
        gw_log(g, "upstream %s back in service (half-open probe succeeded) req=%s", up->cfg.name,
               x->req_id);
}

void gw_up_done(gw_gateway *g, int u) {
    gw_upstream *up = &g->up[u];
    pthread_mutex_lock(&up->mu);
    up->in_flight--;
    pthread_mutex_unlock(&up->mu);
}

int gw_route_available(gw_gateway *g, int route) {
    const gw_route_cfg *r = &g->cfg.routes[route];
    int n = 0;
    double now = timer_now();
    for (int t = 0; t < r->n_targets; t++) {
        gw_upstream *up = &g->up[r->t[t].upstream];
        pthread_mutex_lock(&up->mu);
        int st = gw_health_state(&up->h, now);
        n += st == GW_UP_HEALTHY || (st == GW_UP_PROBING && !up->h.probe_in_flight);
        pthread_mutex_unlock(&up->mu);
    }
    return n;
}

/* ---- request bodies ----------------------------------------------------------------------------------- */

static char *target_body(gw_exchange *x, const gw_target *t) {
    const char *model = t->model[0] ? t->model : x->g->cfg.routes[x->route].name;
    cJSON_DeleteItemFromObjectCaseSensitive(x->req, "model");
    cJSON_AddStringToObject(x->req, "model", model);
    if (x->stream) { /* ask for usage, to settle the key's tokens; dropped if the client did not */
        cJSON *so = cJSON_GetObjectItemCaseSensitive(x->req, "stream_options");
        if (!cJSON_IsObject(so)) {
            cJSON_DeleteItemFromObjectCaseSensitive(x->req, "stream_options");
            so = cJSON_AddObjectToObject(x->req, "stream_options");
        }
        cJSON_DeleteItemFromObjectCaseSensitive(so, "include_usage");
        cJSON_AddTrueToObject(so, "include_usage");
    }
    char *s = cJSON_PrintUnformatted(x->req);
    mtCheck(s != NULL, "out of memory writing an upstream request");
    return s;
}

/* ---- completions of a non-streamed answer ----------------------------------------------------------- */

/* Apply completion guards and the public model name to a 200 body; returns a malloc'd body or
 * NULL when nothing needs to change. */
static char *rewrite_response(gw_exchange *x, const char *body, size_t n, int renamed) {
    gw_gateway *g = x->g;
    int guard = !x->embeddings && gw_rules_active(g->rules, GW_ON_COMPLETIONS);
    if (!guard && !renamed) return NULL;
    cJSON *root = cJSON_ParseWithLength(body, n);
    if (!root) return NULL;
    if (renamed) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, "model");
        cJSON_AddStringToObject(root, "model", g->cfg.routes[x->route].name);
    }
    cJSON *choices = cJSON_GetObjectItemCaseSensitive(root, "choices"), *c;
    cJSON_ArrayForEach(c, choices) {
        if (!guard) break;
        cJSON *holder = x->chat ? cJSON_GetObjectItemCaseSensitive(c, "message") : c;
        const char *field = x->chat ? "content" : "text";
        cJSON *t = cJSON_GetObjectItemCaseSensitive(holder, field);
        if (!cJSON_IsString(t)) continue;
        api_buf out = {0};
        const char *rule;
        size_t at;
        int blocked = gw_rules_apply(g->rules, GW_ON_COMPLETIONS, t->valuestring,
                                     strlen(t->valuestring), &out, &rule, &at);
        char *nt;
        if (blocked) {
            nt = strndup(t->valuestring, at);
            cJSON_DeleteItemFromObjectCaseSensitive(c, "finish_reason");
            cJSON_AddStringToObject(c, "finish_reason", "content_filter");
            pthread_mutex_lock(&g->mx.mu);
            g->mx.blocked_completions++;
            pthread_mutex_unlock(&g->mx.mu);
            gw_log(g, "req=%s completion stopped by content rule '%s'", x->req_id, rule);
        } else {
            nt = strdup(out.p ? out.p : "");
        }
        mtCheck(nt != NULL, "out of memory rewriting a completion");
        cJSON_ReplaceItemInObjectCaseSensitive(holder, field, cJSON_CreateString(nt));
        free(nt);
        api_buf_free(&out);
    }
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

/* ---- one attempt, as a leg that can be driven alone or beside a hedge ------------------------------- */

static void keep_answer(gw_exchange *x, gw_call *c) {
    x->status = c->status;
    api_buf_free(&x->body);
    api_buf_put(&x->body, c->body.p ? c->body.p : "", c->body.len);
    x->retry_after[0] = 0;
    if (c->retry_after[0])
        snprintf(x->retry_after, sizeof(x->retry_after), "%.31s", c->retry_after);
}

static void describe(gw_attempt_result *a, gw_call *c) {
    if (a->o == GW_OUT_CONNECT || a->o == GW_OUT_TRANSPORT || (a->o == GW_OUT_TIMEOUT && !a->http))
        snprintf(a->detail, sizeof(a->detail), "%.95s",
                 c->errbuf[0] ? c->errbuf : curl_easy_strerror(c->result));
    else if (a->http)
        snprintf(a->detail, sizeof(a->detail), "HTTP %d", a->http);
    else
        snprintf(a->detail, sizeof(a->detail), "%s", gw_outcome_name(a->o));
}

/* A non-streamed attempt whose transfer is done: judge it, keep the answer. */
static void plain_finish(gw_exchange *x, gw_leg *L) {
    gw_call *c = L->c;
    gw_attempt_result *a = &L->a;
    a->o = gw_call_outcome(c);
    a->http = c->result == CURLE_OK ? c->status : 0;
    if (a->o == GW_OUT_OK) {
        long pt = -1, ct = -1;
        a->o = x->embeddings ? gw_check_embeddings(c->body.p ? c->body.p : "", c->body.len, &pt)
                             : gw_check_response(c->body.p ? c->body.p : "", c->body.len,
                                                 x->chat, &pt, &ct);
        if (a->o == GW_OUT_OK) {
            x->prompt_tokens = pt;
            x->completion_tokens = ct;
            char *nb = rewrite_response(x, c->body.p, c->body.len, L->renamed);
            x->status = c->status;
            api_buf_free(&x->body);
            if (nb) {
                api_buf_puts(&x->body, nb);
                free(nb);
            } else {
                api_buf_put(&x->body, c->body.p, c->body.len);
            }
            x->retry_after[0] = 0;
            return;
        }
    }
    if (a->http) keep_answer(x, c);
    a->retry_after = gw_retry_after_s(c->retry_after, (double)time(NULL));
}

/* A streamed attempt: look at what arrived. Decided (1) at its first event with text or a finish
 * reason (a->o = OK: the stashed events and the rest are put back for gw_stream_read) or at a
 * failure; else 0 with *left = how long it may still wait. */
static int stream_poll(gw_exchange *x, gw_leg *L, double *left) {
    gw_gateway *g = x->g;
    gw_call *c = L->c;
    gw_attempt_result *a = &L->a;
    if (c->status == 200) {
        while (gw_sse_next(&c->sse, &L->raw, &L->data)) {
            if (L->data.len == 0) continue; /* comments, keep-alives */
            gw_event_info ev;
            char *text;
            size_t tl;
            if (gw_event_parse(L->data.p, L->data.len, x->chat, &ev, &text, &tl) != 0) {
                a->o = GW_OUT_BAD_BODY;
            } else if (ev.is_error) {
                a->o = GW_OUT_5XX;
            } else if (ev.done) {
                a->o = GW_OUT_EMPTY; /* [DONE] before any text or finish reason */
            } else if (ev.has_choice && (tl > 0 || ev.finish[0])) {
                free(text);
                /* commit: the stashed events and this one are replayed by gw_stream_read */
                gw_sse replay = {0};
                gw_sse_feed(&replay, L->stash.p ? L->stash.p : "", L->stash.len);
                gw_sse_feed(&replay, L->raw.p, L->raw.len);
                const char *rest = c->sse.in.p ? c->sse.in.p + c->sse.off : "";
                gw_sse_feed(&replay, rest, c->sse.in.len - c->sse.off);
                gw_sse_free(&c->sse);
                c->sse = replay;
                a->o = GW_OUT_OK;
                a->http = 200;
                return 1;
            }
            free(text);
            if (a->o != GW_OUT_OK) { /* a failure decided above */
                a->http = 200;
                return 1;
            }
            api_buf_put(&L->stash, L->raw.p, L->raw.len); /* a role-only delta, a usage chunk */
            L->raw.len = 0;
        }
        L->raw.len = 0;
    }
    if (c->done) {
        if (c->status == 200 || c->result != CURLE_OK) {
            a->o = c->result == CURLE_OK ? GW_OUT_EMPTY : gw_call_outcome(c);
            a->http = c->result == CURLE_OK ? c->status : 0;
            if (a->o == GW_OUT_OK) a->o = GW_OUT_EMPTY;
        } else { /* an error status with its body */
            a->o = gw_call_outcome(c);
            a->http = c->status;
            keep_answer(x, c);
            a->retry_after = gw_retry_after_s(c->retry_after, (double)time(NULL));
        }
        return 1;
    }
    *left = L->deadline - timer_now();
    if (c->status && c->status != 200) *left = g->cfg.pol.timeout_s; /* reading an error body */
    if (*left <= 0) {
        a->o = GW_OUT_FIRST_TOKEN;
        a->http = c->status;
        snprintf(a->detail, sizeof(a->detail), "no first event in %.1f s",
                 g->cfg.pol.first_token_timeout_s);
        return 1;
    }
    return 0;
}

void gw_leg_start(gw_exchange *x, int ti, int probe, gw_leg *L) {
    gw_gateway *g = x->g;
    const gw_target *t = &g->cfg.routes[x->route].t[ti];
    gw_upstream *up = &g->up[t->upstream];
    memset(L, 0, sizeof(*L));
    L->a.retry_after = -1;
    L->ti = ti;
    L->u = t->upstream;
    L->probe = probe;
    L->renamed = t->model[0] && strcmp(t->model, g->cfg.routes[x->route].name);
    char *body = target_body(x, t);
    L->c = gw_call_get(g);
    L->t0 = timer_now();
    L->deadline = L->t0 + g->cfg.pol.first_token_timeout_s;
    gw_call_start(L->c, &g->cfg.pol,
                  x->embeddings ? up->url_embeddings : x->chat ? up->url_chat : up->url_completions,
                  up->cfg.api_key, x->req_id, body, strlen(body), x->stream);
    free(body);
}

int gw_leg_poll(gw_exchange *x, gw_leg *L, double *left) {
    if (x->stream) return stream_poll(x, L, left);
    if (!L->c->done) {
        *left = 1.0; /* the transfer's own timeout (timeout_s) ends it */
        return 0;
    }
    plain_finish(x, L);
    return 1;
}

static void leg_free_bufs(gw_leg *L) {
    api_buf_free(&L->stash);
    api_buf_free(&L->raw);
    api_buf_free(&L->data);
}

void gw_leg_end(gw_exchange *x, gw_leg *L) {
    gw_gateway *g = x->g;
    gw_upstream *up = &g->up[L->u];
    gw_attempt_result *a = &L->a;
    leg_free_bufs(L);
    if (a->gone) {
        gw_call_put(g, L->c);
        L->c = NULL;
        return;
    }
    if (a->o == GW_OUT_OK) gw_lb_observe(g, L->u, timer_now() - L->t0);
    if (!a->detail[0]) describe(a, L->c);
    api_buf_printf(&x->log, "%s%s:%s", x->log.len ? "," : "", up->cfg.name, gw_outcome_name(a->o));
    if (gw_outcome_is_failure(a->o))
        gw_log(g, "req=%s attempt %d upstream=%s failed: %s (%s) after %.1f ms%s", x->req_id,
               x->attempts, up->cfg.name, gw_outcome_name(a->o), a->detail,
               1e3 * (timer_now() - L->t0), L->probe ? " [probe]" : "");
    if (x->stream && a->o == GW_OUT_OK) {
        x->committed = 1;
        x->call = L->c;
        x->call_up = L->u;
        x->call_probe = L->probe;
        x->renamed = L->renamed;
        x->upstream = L->u;
        x->status = 200;
        x->t_last = timer_now();
        L->c = NULL;
        return;
    }
    if (a->o == GW_OUT_OK || a->o == GW_OUT_CLIENT_ERROR) x->upstream = L->u;
    gw_call_put(g, L->c);
    L->c = NULL;
}

void gw_leg_cancel(gw_exchange *x, gw_leg *L, const char *why) {
    gw_gateway *g = x->g;
    leg_free_bufs(L);
    gw_call_put(g, L->c); /* its connection is closed: the upstream stops generating */
    L->c = NULL;
    gw_up_done(g, L->u);
    api_buf_printf(&x->log, "%s%s:%s", x->log.len ? "," : "", g->up[L->u].cfg.name, why);
}

/* One attempt at target ti, driven to its decision. On a committed stream the call stays in x
 * (x->committed). */
static void attempt(gw_exchange *x, int ti, int probe, gw_leg *L) {
    gw_leg_start(x, ti, probe, L);
    double left;
    while (!gw_leg_poll(x, L, &left))
        if (gw_call_pump(x->g, L->c, left, x->client_fd) < 0) {
            L->a.gone = 1;
            break;
        }
    gw_leg_end(x, L);
}

/* ---- the final answer when every attempt failed ------------------------------------------------------- */

static void answer_error(gw_exchange *x, int status, const char *code, const char *retry_after,
                         const char *fmt, ...) MT_PRINTF(5, 6);
static void answer_error(gw_exchange *x, int status, const char *code, const char *retry_after,
                         const char *fmt, ...) {
    api_error e;
    memset(&e, 0, sizeof(e));
    e.status = status;
    e.type = "server_error";
    e.code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof(e.message), fmt, ap);
    va_end(ap);
    api_buf_free(&x->body);
    api_error_json(&x->body, &e);
    x->status = status;
    snprintf(x->retry_after, sizeof(x->retry_after), "%s", retry_after ? retry_after : "");
}

static void final_failure(gw_exchange *x, const gw_attempt_result *last) {
    const char *model = x->g->cfg.routes[x->route].name;
    x->upstream = -1;
    if ((last->o == GW_OUT_5XX || last->o == GW_OUT_429) && x->status == last->http &&
        x->body.len) {
        /* the upstream's own error answer (with its Retry-After) says the most */
        cJSON *j = cJSON_ParseWithLength(x->body.p, x->body.len);
        int is_json = j != NULL;
        cJSON_Delete(j);
        if (is_json) return;
    }
    switch (last->o) {
    case GW_OUT_TIMEOUT:
    case GW_OUT_FIRST_TOKEN:
        answer_error(x, 504, "upstream_timeout", NULL,
                     "no upstream of model %s answered in time (last: %s)", model, last->detail);
        break;
    case GW_OUT_BAD_BODY:
    case GW_OUT_EMPTY:
        answer_error(x, 502, "upstream_bad_response", NULL,
                     "the upstreams of model %s gave no usable answer (last: %s)", model,
                     gw_outcome_name(last->o));
        break;
    case GW_OUT_429:
        answer_error(x, 429, "upstream_rate_limited", x->retry_after[0] ? x->retry_after : "1",
                     "every upstream of model %s is rate limiting (last: %s)", model,
                     last->detail);
        break;
    default:
        answer_error(x, 502, "upstream_unavailable", NULL,
                     "no upstream of model %s could answer (last: %s)", model, last->detail);
    }
}

/* ---- the attempt loop ------------------------------------------------------------------------------------ */

/* Sleep s seconds unless the client goes or the gateway stops (-1). */
static int nap(gw_exchange *x, double s) {
    double end = timer_now() + s;
    for (;;) {
        if (atomic_load(&x->g->stopping) || gw_client_gone(x->client_fd)) return -1;
        double left = end - timer_now();
        if (left <= 0) return 0;
        usleep((useconds_t)(1e6 * (left < 0.05 ? left : 0.05)));
    }
}

static void count_retry(gw_gateway *g, int u) {
    pthread_mutex_lock(&g->up[u].mu);
    g->up[u].retries++;
    pthread_mutex_unlock(&g->up[u].mu);
}

/* All targets out of service: the policy. Returns like gw_proxy_run. */
static int all_out(gw_exchange *x, int any_full) {
    gw_gateway *g = x->g;
    const gw_route_cfg *r = &g->cfg.routes[x->route];
    double now = timer_now(), wait = 1e30, oldest = 1e300;
    int pick = -1, resting = 0, rest_429 = 0;
    for (int t = 0; t < r->n_targets; t++) {
        gw_upstream *up = &g->up[r->t[t].upstream];
        pthread_mutex_lock(&up->mu);
        double w = gw_health_wait(&up->h, now), since = gw_health_out_since(&up->h, now);
        int full = up->cfg.max_concurrent > 0 && up->in_flight >= up->cfg.max_concurrent;
        int rests = gw_health_resting(&up->h, now); /* on its own Retry-After: never forced */
        rest_429 |= rests && up->h.not_before_status == 429;
        pthread_mutex_unlock(&up->mu);
        resting += rests;
        if (w < wait) wait = w;
        if (!full && !rests && since < oldest) oldest = since, pick = t;
    }
    char ra[32];
    snprintf(ra, sizeof(ra), "%d", (int)ceil(wait < 1 ? 1 : wait));
    if (resting == r->n_targets) { /* every target said when: tell the client the same */
        if (rest_429)
            answer_error(x, 429, "upstream_rate_limited", ra, "every upstream of model %s is "
                         "rate-limited (its Retry-After); retry after %s s", r->name, ra);
        else
            answer_error(x, 503, "no_healthy_upstream", ra, "every upstream of model %s is "
                         "unavailable until its Retry-After; retry after %s s", r->name, ra);
        return 0;
    }
    if (any_full && pick < 0) {
        answer_error(x, 503, "upstreams_busy", "1",
                     "every upstream of model %s is at its max_concurrent; retry shortly",
                     r->name);
        return 0;
    }
    pthread_mutex_lock(&g->mx.mu);
    g->mx.all_ejected++;
    pthread_mutex_unlock(&g->mx.mu);
    if (g->cfg.all_ejected == GW_EJECTED_REFUSE || pick < 0) {
        answer_error(x, 503, "no_healthy_upstream", ra,
                     "every upstream of model %s is ejected; retry after %s s", r->name, ra);
        return 0;
    }
    int u = r->t[pick].upstream;
    gw_log(g, "req=%s every upstream of model %s is out of service: trying %s (out longest)",
           x->req_id, r->name, g->up[u].cfg.name);
    up_force(g, u);
    x->attempts++;
    gw_leg leg;
    attempt(x, pick, 1, &leg);
    gw_attempt_result a = leg.a;
    if (a.gone) {
        gw_up_done(g, u);
        return -1;
    }
    gw_up_report(x, u, a.o, a.http, a.retry_after, 1);
    if (!x->committed) gw_up_done(g, u);
    if (a.o == GW_OUT_OK || a.o == GW_OUT_CLIENT_ERROR) return x->committed ? 1 : 0;
    if (a.retry_after >= 0) /* the upstream's own Retry-After is the one to pass on */
        snprintf(ra, sizeof(ra), "%d", (int)ceil(a.retry_after < 1 ? 1 : a.retry_after));
    if (a.o == GW_OUT_429) {
        answer_error(x, 429, "upstream_rate_limited", ra, "every upstream of model %s is ejected "
                     "and %s, tried anyway, is rate-limited; retry after %s s", r->name,
                     g->up[u].cfg.name, ra);
        return 0;
    }
    answer_error(x, 503, "no_healthy_upstream", ra,
                 "every upstream of model %s is ejected and %s, tried anyway, failed (%s); "
                 "retry after %s s", r->name, g->up[u].cfg.name, a.detail, ra);
    return 0;
}

int gw_proxy_run(gw_exchange *x) {
    gw_gateway *g = x->g;
    const gw_policy *p = &g->cfg.pol;
    const gw_route_cfg *r = &g->cfg.routes[x->route];
    pthread_mutex_lock(&g->budget_mu);
    g->budget.in_flight++;
    pthread_mutex_unlock(&g->budget_mu);
    x->in_budget = 1;
    x->upstream = -1;
    x->ttft = -1;
    x->prompt_tokens = x->completion_tokens = -1;
    gw_filter_init(&x->filt, g->rules);
    int order[GW_MAX_TARGETS];
    /* balancers that read the load choose and take their upstream in one step, so requests
     * arriving together do not all see the same least-loaded upstream */
    int lb = gw_lb_of_route(g, x->route), serial = lb != GW_LB_ORDERED && lb != GW_LB_ROUND_ROBIN;
    if (serial) pthread_mutex_lock(&g->lb_mu);
    int n = gw_lb_order(x, order), any_full = 0, prev_up = -1;
    gw_attempt_result last;
    memset(&last, 0, sizeof(last));
    double hedge_delay = -1;
    int may_hedge = gw_hedge_delay(x, &hedge_delay);
    for (int k = 0; k < n && x->attempts < p->max_attempts; k++) {
        int ti = order[k], u = r->t[ti].upstream, probe, why;
        if (!up_acquire(g, u, &probe, &why)) {
            any_full |= why == WHY_FULL;
            continue;
        }
        if (serial) {
            pthread_mutex_unlock(&g->lb_mu);
            serial = 0;
        }
        if (prev_up >= 0) {
            pthread_mutex_lock(&g->mx.mu);
            g->mx.fallbacks[x->route]++;
            pthread_mutex_unlock(&g->mx.mu);
        }
        for (int try = 0;; try++) {
            x->attempts++;
            gw_leg legs[2], *res = &legs[0];
            int hedged = 0;
            if (try == 0 && may_hedge && !probe) { /* a half-open probe is never raced */
                may_hedge = 0; /* one hedge per request */
                hedged = gw_attempt_hedged(x, order, k, n, hedge_delay, &legs[0], &legs[1], &res);
                u = res->u;
                probe = res->probe;
            } else {
                attempt(x, ti, probe, &legs[0]);
            }
            last = res->a;
            if (try > 0) {
                pthread_mutex_lock(&g->budget_mu);
                gw_budget_end_retry(&g->budget);
                pthread_mutex_unlock(&g->budget_mu);
            }
            if (last.gone) {
                gw_up_done(g, u);
                return -1;
            }
            gw_up_report(x, u, last.o, last.http, last.retry_after, probe);
            if (!x->committed) gw_up_done(g, u);
            if (last.o == GW_OUT_OK) return x->committed ? 1 : 0;
            if (last.o == GW_OUT_CLIENT_ERROR) return 0; /* the client's own mistake */
            prev_up = u;
            if (x->attempts >= p->max_attempts || try >= p->retries_per_target ||
                last.o == GW_OUT_CONNECT || probe || hedged)
                break;
            double wait = gw_backoff_s(p, try, gw_rand01(g));
            if (last.retry_after >= 0) {
                if (last.retry_after > p->retry_after_max_s) break; /* too long: fall back */
                if (last.retry_after > wait) wait = last.retry_after;
            }
            pthread_mutex_lock(&g->budget_mu);
            int allowed = gw_budget_try_retry(&g->budget, p);
            pthread_mutex_unlock(&g->budget_mu);
            if (!allowed) {
                pthread_mutex_lock(&g->mx.mu);
                g->mx.budget_exhausted++;
                pthread_mutex_unlock(&g->mx.mu);
                gw_log(g, "req=%s retry budget exhausted: falling back instead", x->req_id);
                break;
            }
            if (nap(x, wait) < 0) {
                pthread_mutex_lock(&g->budget_mu);
                gw_budget_end_retry(&g->budget);
                pthread_mutex_unlock(&g->budget_mu);
                return -1;
            }
            if (!up_acquire(g, u, &probe, &why)) { /* ejected (or full) meanwhile */
                pthread_mutex_lock(&g->budget_mu);
                gw_budget_end_retry(&g->budget);
                pthread_mutex_unlock(&g->budget_mu);
                break;
            }
            count_retry(g, u);
        }
    }
    if (serial) pthread_mutex_unlock(&g->lb_mu);
    if (x->attempts == 0) return all_out(x, any_full);
    final_failure(x, &last);
    return 0;
}

void gw_exchange_free(gw_exchange *x) {
    gw_gateway *g = x->g;
    if (x->call) {
        gw_call_put(g, x->call); /* a stream cut short: this closes the upstream connection */
        x->call = NULL;
    }
    if (x->committed) {
        gw_up_done(g, x->call_up);
        x->committed = 0;
    }
    if (x->in_budget) {
        pthread_mutex_lock(&g->budget_mu);
        g->budget.in_flight--;
        pthread_mutex_unlock(&g->budget_mu);
        x->in_budget = 0;
    }
    cJSON_Delete(x->req);
    x->req = NULL;
    api_buf_free(&x->body);
    api_buf_free(&x->log);
    api_buf_free(&x->out);
    api_buf_free(&x->ev_raw);
    api_buf_free(&x->ev_data);
    api_buf_free(&x->captured);
    gw_filter_free(&x->filt);
}
