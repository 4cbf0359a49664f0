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

void gw_mx_init(gw_mx *m) {
    memset(m, 0, sizeof(*m));
    pthread_mutex_init(&m->mu, NULL);
}

void gw_mx_destroy(gw_mx *m) { pthread_mutex_destroy(&m->mu); }

void gw_mx_request(gw_mx *m, const char *key, int route, int upstream, int status) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    for (; i < m->n_req; i++) {
        gw_mx_series *s = &m->req[i];
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
        gw_mx_series *s = &m->req[m->n_req++];
        snprintf(s->key, sizeof(s->key), "%s", key);
        s->route = (short)route;
        s->upstream = (short)upstream;
        s->status = (short)status;
        s->n = 0;
    }
    m->req[i].n++;
    pthread_mutex_unlock(&m->mu);
}

void gw_mx_rate_limited(gw_mx *m, const char *key) {
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

void gw_mx_observe(gw_hist *h, double seconds) {
    int b = 0;
    while (b < GW_LAT_NBUCKETS && seconds > gw_latency_bounds[b]) b++;
    h->b[b]++;
    h->count++;
    h->sum += seconds;
}

static void histogram(gw_buf *b, const char *name, const char *model, const gw_hist *h) {
    char labels[160];
    snprintf(labels, sizeof(labels), "model=\"%s\"", model);
    gw_prom_histogram(b, name, labels, h->b, h->sum, h->count);
}

static void upstream_metrics(gw_gateway *g, gw_buf *b) {
    const gw_config *c = &g->cfg;
    double now = gw_now();
    typedef struct {
        int state, in_flight;
        uint64_t attempts, retries, ejections, failures[GW_OUT_COUNT];
    } snap;
    snap s[GW_MAX_UPSTREAMS];
    for (int u = 0; u < c->n_up; u++) {
        gw_upstream *up = &g->up[u];
        pthread_mutex_lock(&up->mu);
        s[u].state = gw_health_state(&up->h, now);
        s[u].in_flight = up->in_flight;
        s[u].attempts = up->attempts;
        s[u].retries = up->retries;
        s[u].ejections = up->h.ejections;
        memcpy(s[u].failures, up->failures, sizeof(s[u].failures));
        pthread_mutex_unlock(&up->mu);
    }
    gw_prom_family(b, "minitrain_gateway_upstream_state", "gauge",
           "Upstream state: 0 healthy, 1 ejected (or failing its active health check), 2 probing "
           "(half-open).");
    for (int u = 0; u < c->n_up; u++)
        gw_buf_printf(b, "minitrain_gateway_upstream_state{upstream=\"%s\"} %d\n", c->up[u].name,
                      s[u].state);
    gw_prom_family(b, "minitrain_gateway_upstream_in_flight", "gauge", "Requests in flight per upstream.");
    for (int u = 0; u < c->n_up; u++)
        gw_buf_printf(b, "minitrain_gateway_upstream_in_flight{upstream=\"%s\"} %d\n",
                      c->up[u].name, s[u].in_flight);
    gw_prom_family(b, "minitrain_gateway_upstream_attempts_total", "counter",
           "Attempts sent to each upstream (first tries, retries, fallbacks, probes).");
    for (int u = 0; u < c->n_up; u++)
        gw_buf_printf(b, "minitrain_gateway_upstream_attempts_total{upstream=\"%s\"} %llu\n",
                      c->up[u].name, (unsigned long long)s[u].attempts);
    gw_prom_family(b, "minitrain_gateway_upstream_failures_total", "counter",
           "Failed attempts per upstream, by reason.");
    for (int u = 0; u < c->n_up; u++)
        for (int o = 0; o < GW_OUT_COUNT; o++)
            if (gw_outcome_is_failure((gw_outcome)o))
                gw_buf_printf(b, "minitrain_gateway_upstream_failures_total{upstream=\"%s\","
                                 "reason=\"%s\"} %llu\n",
                              c->up[u].name, gw_outcome_name((gw_outcome)o),
                              (unsigned long long)s[u].failures[o]);
    gw_prom_family(b, "minitrain_gateway_ejections_total", "counter",
           "Outlier ejections per upstream (consecutive failures or a failed probe).");
    for (int u = 0; u < c->n_up; u++)
        gw_buf_printf(b, "minitrain_gateway_ejections_total{upstream=\"%s\"} %llu\n",
                      c->up[u].name, (unsigned long long)s[u].ejections);
    gw_prom_family(b, "minitrain_gateway_retries_total", "counter",
           "Retries on the same upstream (after backoff or Retry-After).");
    for (int u = 0; u < c->n_up; u++)
        gw_buf_printf(b, "minitrain_gateway_retries_total{upstream=\"%s\"} %llu\n", c->up[u].name,
                      (unsigned long long)s[u].retries);
}

void gw_mx_render(gw_gateway *g, gw_buf *b) {
    const gw_config *c = &g->cfg;
    gw_mx *m = &g->mx;
    upstream_metrics(g, b);
    pthread_mutex_lock(&g->budget_mu);
    gw_budget bud = g->budget;
    pthread_mutex_unlock(&g->budget_mu);
    gw_prom_family(b, "minitrain_gateway_requests_in_flight", "gauge", "Requests being proxied.");
    gw_buf_printf(b, "minitrain_gateway_requests_in_flight %d\n", bud.in_flight);
    gw_prom_family(b, "minitrain_gateway_retries_in_flight", "gauge",
           "Retries in flight (what the retry budget bounds).");
    gw_buf_printf(b, "minitrain_gateway_retries_in_flight %d\n", bud.retrying);
    pthread_mutex_lock(&m->mu);
    gw_prom_family(b, "minitrain_gateway_requests_total", "counter",
           "Requests answered, by key id, model, upstream that answered and status code.");
    for (int i = 0; i < m->n_req; i++) {
        const gw_mx_series *s = &m->req[i];
        gw_buf_printf(b, "minitrain_gateway_requests_total{key=\"%s\",model=\"%s\",upstream=\"%s\","
                         "code=\"%d\"} %llu\n",
                      s->key[0] ? s->key : "none", s->route >= 0 ? c->routes[s->route].name : "none",
                      s->upstream >= 0 ? c->up[s->upstream].name : "none", s->status,
                      (unsigned long long)s->n);
    }
    gw_prom_family(b, "minitrain_gateway_requests_overflow_total", "counter",
           "Requests not labelled because too many distinct series exist.");
    gw_buf_printf(b, "minitrain_gateway_requests_overflow_total %llu\n",
                  (unsigned long long)m->req_overflow);
    gw_prom_family(b, "minitrain_gateway_fallbacks_total", "counter",
           "Requests that moved on to another upstream after a failure.");
    for (int r = 0; r < c->n_routes; r++)
        gw_buf_printf(b, "minitrain_gateway_fallbacks_total{model=\"%s\"} %llu\n",
                      c->routes[r].name, (unsigned long long)m->fallbacks[r]);
    gw_prom_family(b, "minitrain_gateway_retry_budget_exhausted_total", "counter",
           "Retries not made because the retry budget was spent (the request fell back instead).");
    gw_buf_printf(b, "minitrain_gateway_retry_budget_exhausted_total %llu\n",
                  (unsigned long long)m->budget_exhausted);
    gw_prom_family(b, "minitrain_gateway_all_ejected_total", "counter",
           "Requests that found every target of their model out of service.");
    gw_buf_printf(b, "minitrain_gateway_all_ejected_total %llu\n",
                  (unsigned long long)m->all_ejected);
    gw_prom_family(b, "minitrain_gateway_rate_limited_total", "counter",
           "Requests refused with 429 by a key's rate limits.");
    for (int i = 0; i < m->n_limited; i++)
        gw_buf_printf(b, "minitrain_gateway_rate_limited_total{key=\"%s\"} %llu\n",
                      m->limited[i].key, (unsigned long long)m->limited[i].n);
    gw_prom_family(b, "minitrain_gateway_reservations_total", "counter",
           "Rate-limit reservations ended: settled with the real usage, or released (error, "
           "cancel, client disconnect).");
    gw_buf_printf(b, "minitrain_gateway_reservations_total{outcome=\"settled\"} %llu\n",
                  (unsigned long long)m->settled);
    gw_buf_printf(b, "minitrain_gateway_reservations_total{outcome=\"released\"} %llu\n",
                  (unsigned long long)m->released);
    gw_prom_family(b, "minitrain_gateway_streams_cancelled_total", "counter",
           "Streams whose client went away (the upstream call was cancelled).");
    gw_buf_printf(b, "minitrain_gateway_streams_cancelled_total %llu\n",
                  (unsigned long long)m->stream_cancelled);
    gw_prom_family(b, "minitrain_gateway_streams_broken_total", "counter",
           "Streams the upstream broke after their first event (never retried).");
    gw_buf_printf(b, "minitrain_gateway_streams_broken_total %llu\n",
                  (unsigned long long)m->stream_broken);
    gw_prom_family(b, "minitrain_gateway_blocked_total", "counter",
           "Prompts refused and completions stopped by the content rules.");
    gw_buf_printf(b, "minitrain_gateway_blocked_total{on=\"prompt\"} %llu\n",
                  (unsigned long long)m->blocked_prompts);
    gw_buf_printf(b, "minitrain_gateway_blocked_total{on=\"completion\"} %llu\n",
                  (unsigned long long)m->blocked_completions);
    gw_prom_family(b, "minitrain_gateway_prompt_tokens_total", "counter", "Prompt tokens (upstream usage).");
    for (int r = 0; r < c->n_routes; r++)
        gw_buf_printf(b, "minitrain_gateway_prompt_tokens_total{model=\"%s\"} %llu\n",
                      c->routes[r].name, (unsigned long long)m->tokens_in[r]);
    gw_prom_family(b, "minitrain_gateway_completion_tokens_total", "counter",
           "Completion tokens (upstream usage).");
    for (int r = 0; r < c->n_routes; r++)
        gw_buf_printf(b, "minitrain_gateway_completion_tokens_total{model=\"%s\"} %llu\n",
                      c->routes[r].name, (unsigned long long)m->tokens_out[r]);
    gw_prom_family(b, "minitrain_gateway_request_duration_seconds", "histogram",
           "End-to-end latency of successful requests through the gateway (retries included).");
    for (int r = 0; r < c->n_routes; r++)
        histogram(b, "minitrain_gateway_request_duration_seconds", c->routes[r].name,
                  &m->latency[r]);
    gw_prom_family(b, "minitrain_gateway_ttft_seconds", "histogram",
           "Time from a streamed request's arrival to its first event sent to the client.");
    for (int r = 0; r < c->n_routes; r++)
        histogram(b, "minitrain_gateway_ttft_seconds", c->routes[r].name, &m->ttft[r]);
    pthread_mutex_unlock(&m->mu);
}
