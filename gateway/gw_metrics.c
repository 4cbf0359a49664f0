/*
 * gateway/gw_metrics.c — the gateway's /metrics: Prometheus text exposition format 0.0.4.
 *
 * Shape: counters live where they are counted (upstream health and attempts in each upstream,
 * under its lock; everything per request, per model or per key here, under one mutex) and are
 * read when /metrics is rendered, so gauges such as the upstream state can never drift from the
 * state machine. Label values come from closed sets — configured model and upstream names, key
 * ids from the keys database (public hash prefixes), numeric status codes — so a client cannot
 * mint new series with odd requests; past GW_MX_SLOTS distinct series the rest are counted in
 * minitrain_gateway_requests_overflow_total.
 */
#include "gateway/gw_impl.h"

#include <string.h>

void gw_metrics_init(gw_metrics *m) {
    memset(m, 0, sizeof(*m));
    pthread_mutex_init(&m->mu, NULL);
}

void gw_metrics_destroy(gw_metrics *m) { pthread_mutex_destroy(&m->mu); }

void gw_metrics_request(gw_metrics *m, const char *key, int route, int upstream, int status) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    for (; i < m->n_req; i++) {
        gw_metrics_series *s = &m->req[i];
        if (s->route == route && s->upstream == upstream && s->status == status &&
            !strcmp(s->key, key))
            break;
    }
    if (i == m->n_req) {
        if (m->n_req == GW_MX_SLOTS) {
            m->req_overflow++;
            pthread_mutex_unlock(&m->mu);
            return;
        }
        gw_metrics_series *s = &m->req[m->n_req++];
        snprintf(s->key, sizeof(s->key), "%s", key);
        s->route = (short)route;
        s->upstream = (short)upstream;
        s->status = (short)status;
        s->n = 0;
    }
    m->req[i].n++;
    pthread_mutex_unlock(&m->mu);
}

void gw_metrics_rate_limited(gw_metrics *m, const char *key) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    for (; i < m->n_limited; i++)
        if (!strcmp(m->limited[i].key, key)) break;
    if (i == m->n_limited && m->n_limited < GW_MX_KEYS) {
        snprintf(m->limited[i].key, sizeof(m->limited[i].key), "%s", key);
        m->limited[i].n = 0;
        m->n_limited++;
    }
    if (i < m->n_limited) m->limited[i].n++;
    pthread_mutex_unlock(&m->mu);
}

void gw_metrics_observe(gw_hist *h, double seconds) {
    int b = 0;
    while (b < API_LAT_NBUCKETS && seconds > api_latency_bounds[b]) b++;
    h->b[b]++;
    h->count++;
    h->sum += seconds;
}

static void histogram(api_buf *b, const char *name, const char *model, const gw_hist *h) {
    char labels[160];
    snprintf(labels, sizeof(labels), "model=\"%s\"", model);
    api_prom_histogram(b, name, labels, h->b, h->sum, h->count);
}

/* One family with one sample per name: family{label="names[i]"} v[i], i < n. */
static void per_name(api_buf *b, const char *family, const char *type, const char *help,
                     const char *label, const char *const *names, int n, const uint64_t *v) {
    api_prom_family(b, family, type, help);
    for (int i = 0; i < n; i++)
        api_buf_printf(b, "%s{%s=\"%s\"} %llu\n", family, label, names[i], (unsigned long long)v[i]);
}

static void upstream_metrics(gw_gateway *g, api_buf *b) {
    const gw_config *c = &g->cfg;
    double now = api_now();
    /* a snapshot per upstream, each under its own lock, then rendered without locks */
    const char *name[GW_MAX_UPSTREAMS];
    uint64_t state[GW_MAX_UPSTREAMS], in_flight[GW_MAX_UPSTREAMS], attempts[GW_MAX_UPSTREAMS],
        retries[GW_MAX_UPSTREAMS], ejections[GW_MAX_UPSTREAMS];
    uint64_t failures[GW_MAX_UPSTREAMS][GW_OUT_COUNT];
    for (int u = 0; u < c->n_up; u++) {
        gw_upstream *up = &g->up[u];
        name[u] = c->up[u].name;
        pthread_mutex_lock(&up->mu);
        state[u] = (uint64_t)gw_health_state(&up->h, now);
        in_flight[u] = (uint64_t)up->in_flight;
        attempts[u] = up->attempts;
        retries[u] = up->retries;
        ejections[u] = up->h.ejections;
        memcpy(failures[u], up->failures, sizeof(failures[u]));
        pthread_mutex_unlock(&up->mu);
    }
    per_name(b, "minitrain_gateway_upstream_state", "gauge",
             "Upstream state: 0 healthy, 1 ejected (or failing its active health check), 2 "
             "probing (half-open).", "upstream", name, c->n_up, state);
    per_name(b, "minitrain_gateway_upstream_in_flight", "gauge", "Requests in flight per upstream.",
             "upstream", name, c->n_up, in_flight);
    per_name(b, "minitrain_gateway_upstream_attempts_total", "counter",
             "Attempts sent to each upstream (first tries, retries, fallbacks, probes).",
             "upstream", name, c->n_up, attempts);
    api_prom_family(b, "minitrain_gateway_upstream_failures_total", "counter",
           "Failed attempts per upstream, by reason.");
    for (int u = 0; u < c->n_up; u++)
        for (int o = 0; o < GW_OUT_COUNT; o++)
            if (gw_outcome_is_failure((gw_outcome)o))
                api_buf_printf(b, "minitrain_gateway_upstream_failures_total{upstream=\"%s\","
                                 "reason=\"%s\"} %llu\n",
                              name[u], gw_outcome_name((gw_outcome)o),
                              (unsigned long long)failures[u][o]);
    per_name(b, "minitrain_gateway_ejections_total", "counter",
             "Outlier ejections per upstream (consecutive failures or a failed probe).", "upstream",
             name, c->n_up, ejections);
    per_name(b, "minitrain_gateway_retries_total", "counter",
             "Retries on the same upstream (after backoff or Retry-After).", "upstream", name,
             c->n_up, retries);
}

void gw_metrics_render(gw_gateway *g, api_buf *b) {
    const gw_config *c = &g->cfg;
    gw_metrics *m = &g->mx;
    upstream_metrics(g, b);
    pthread_mutex_lock(&g->budget_mu);
    gw_budget bud = g->budget;
    pthread_mutex_unlock(&g->budget_mu);
    api_prom_gauge(b, "minitrain_gateway_requests_in_flight", "Requests being proxied.",
                  bud.in_flight);
    api_prom_gauge(b, "minitrain_gateway_retries_in_flight",
                  "Retries in flight (what the retry budget bounds).", bud.retrying);
    const char *model[GW_MAX_ROUTES];
    for (int r = 0; r < c->n_routes; r++) model[r] = c->routes[r].name;
    pthread_mutex_lock(&m->mu);
    api_prom_family(b, "minitrain_gateway_requests_total", "counter",
           "Requests answered, by key id, model, upstream that answered and status code.");
    for (int i = 0; i < m->n_req; i++) {
        const gw_metrics_series *s = &m->req[i];
        api_buf_printf(b, "minitrain_gateway_requests_total{key=\"%s\",model=\"%s\",upstream=\"%s\","
                         "code=\"%d\"} %llu\n",
                      s->key[0] ? s->key : "none", s->route >= 0 ? c->routes[s->route].name : "none",
                      s->upstream >= 0 ? c->up[s->upstream].name : "none", s->status,
                      (unsigned long long)s->n);
    }
    api_prom_counter(b, "minitrain_gateway_requests_overflow_total",
                    "Requests not labelled because too many distinct series exist.",
                    m->req_overflow);
    per_name(b, "minitrain_gateway_fallbacks_total", "counter",
             "Requests that moved on to another upstream after a failure.", "model", model,
             c->n_routes, m->fallbacks);
    api_prom_counter(b, "minitrain_gateway_retry_budget_exhausted_total",
                    "Retries not made because the retry budget was spent (the request fell back "
                    "instead).", m->budget_exhausted);
    api_prom_counter(b, "minitrain_gateway_all_ejected_total",
                    "Requests that found every target of their model out of service.",
                    m->all_ejected);
    api_prom_family(b, "minitrain_gateway_rate_limited_total", "counter",
           "Requests refused with 429 by a key's rate limits.");
    for (int i = 0; i < m->n_limited; i++)
        api_buf_printf(b, "minitrain_gateway_rate_limited_total{key=\"%s\"} %llu\n",
                      m->limited[i].key, (unsigned long long)m->limited[i].n);
    api_prom_family(b, "minitrain_gateway_reservations_total", "counter",
           "Rate-limit reservations ended: settled with the real usage, or released (error, "
           "cancel, client disconnect).");
    api_buf_printf(b, "minitrain_gateway_reservations_total{outcome=\"settled\"} %llu\n",
                  (unsigned long long)m->settled);
    api_buf_printf(b, "minitrain_gateway_reservations_total{outcome=\"released\"} %llu\n",
                  (unsigned long long)m->released);
    api_prom_counter(b, "minitrain_gateway_streams_cancelled_total",
                    "Streams whose client went away (the upstream call was cancelled).",
                    m->stream_cancelled);
    api_prom_counter(b, "minitrain_gateway_streams_broken_total",
                    "Streams the upstream broke after their first event (never retried).",
                    m->stream_broken);
    api_prom_family(b, "minitrain_gateway_blocked_total", "counter",
           "Prompts refused and completions stopped by the content rules.");
    api_buf_printf(b, "minitrain_gateway_blocked_total{on=\"prompt\"} %llu\n",
                  (unsigned long long)m->blocked_prompts);
    api_buf_printf(b, "minitrain_gateway_blocked_total{on=\"completion\"} %llu\n",
                  (unsigned long long)m->blocked_completions);
    per_name(b, "minitrain_gateway_prompt_tokens_total", "counter",
             "Prompt tokens (upstream usage).", "model", model, c->n_routes, m->tokens_in);
    per_name(b, "minitrain_gateway_completion_tokens_total", "counter",
             "Completion tokens (upstream usage).", "model", model, c->n_routes, m->tokens_out);
    api_prom_family(b, "minitrain_gateway_request_duration_seconds", "histogram",
           "End-to-end latency of successful requests through the gateway (retries included).");
    for (int r = 0; r < c->n_routes; r++)
        histogram(b, "minitrain_gateway_request_duration_seconds", c->routes[r].name,
                  &m->latency[r]);
    api_prom_family(b, "minitrain_gateway_ttft_seconds", "histogram",
           "Time from a streamed request's arrival to its first event sent to the client.");
    for (int r = 0; r < c->n_routes; r++)
        histogram(b, "minitrain_gateway_ttft_seconds", c->routes[r].name, &m->ttft[r]);
    pthread_mutex_unlock(&m->mu);
}
