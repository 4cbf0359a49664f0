/*
 * serve/metrics.c — the server's counters, gauges and latency histogram as Prometheus text.
 *
 * Shape: one mutex-guarded struct of plain counters (requests by endpoint and status, tokens in
 * and out, cancelled generations, queue-full refusals) plus a fixed-bucket histogram of
 * successful completion latency. Gauges that describe the slots (busy, queue depth) are not
 * stored here but read from the pool when /metrics is rendered, so they can never drift.
 * Labels come from fixed sets (endpoint names, numeric status codes): a client cannot create
 * new time series by requesting odd paths. Format: Prometheus text exposition format 0.0.4
 * (https://prometheus.io/docs/instrumenting/exposition_formats/); histogram buckets are
 * cumulative with an le="+Inf" bucket equal to _count.
 */
#include "serve/server.h"

#include <string.h>

const double gw_latency_bounds[GW_LAT_NBUCKETS] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                   0.5,   1.0,  2.5,   5.0,  10.0, 30.0};

static const char *const EP_NAMES[GW_EP_COUNT] = {"completions", "chat_completions", "models",
                                                  "health", "metrics", "other"};

const char *gw_endpoint_name(int endpoint) {
    return endpoint >= 0 && endpoint < GW_EP_COUNT ? EP_NAMES[endpoint] : "other";
}

void gw_metrics_init(gw_metrics *m) {
    memset(m, 0, sizeof(*m));
    pthread_mutex_init(&m->mu, NULL);
}

void gw_metrics_destroy(gw_metrics *m) { pthread_mutex_destroy(&m->mu); }

void gw_metrics_request(gw_metrics *m, int endpoint, int status) {
    if (status < 100 || status > 599) return;
    if (endpoint < 0 || endpoint >= GW_EP_COUNT) endpoint = GW_EP_OTHER;
    pthread_mutex_lock(&m->mu);
    m->requests[endpoint][status]++;
    pthread_mutex_unlock(&m->mu);
}

void gw_metrics_latency(gw_metrics *m, double seconds) {
    int b = 0;
    while (b < GW_LAT_NBUCKETS && seconds > gw_latency_bounds[b]) b++;
    pthread_mutex_lock(&m->mu);
    m->lat_bucket[b]++;
    m->lat_count++;
    m->lat_sum += seconds;
    pthread_mutex_unlock(&m->mu);
}

void gw_metrics_tokens(gw_metrics *m, int prompt_tokens, int completion_tokens) {
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)prompt_tokens;
    m->completion_tokens += (uint64_t)completion_tokens;
    pthread_mutex_unlock(&m->mu);
}

void gw_metrics_cancelled(gw_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->cancelled++;
    pthread_mutex_unlock(&m->mu);
}

void gw_metrics_queue_full(gw_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->queue_full++;
    pthread_mutex_unlock(&m->mu);
}

void gw_metrics_fault(gw_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->faults++;
    pthread_mutex_unlock(&m->mu);
}

void gw_prom_family(gw_buf *b, const char *name, const char *type, const char *help) {
    gw_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void gw_prom_counter(gw_buf *b, const char *name, const char *help, uint64_t v) {
    gw_prom_family(b, name, "counter", help);
    gw_buf_printf(b, "%s %llu\n", name, (unsigned long long)v);
}

void gw_prom_gauge(gw_buf *b, const char *name, const char *help, long long v) {
    gw_prom_family(b, name, "gauge", help);
    gw_buf_printf(b, "%s %lld\n", name, v);
}

void gw_prom_histogram(gw_buf *b, const char *name, const char *labels, const uint64_t *bucket,
                       double sum, uint64_t count) {
    const char *sep = labels[0] ? "," : "";
    uint64_t cum = 0;
    for (int i = 0; i < GW_LAT_NBUCKETS; i++) {
        cum += bucket[i];
        gw_buf_printf(b, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep,
                      gw_latency_bounds[i], (unsigned long long)cum);
    }
    cum += bucket[GW_LAT_NBUCKETS];
    gw_buf_printf(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep,
                  (unsigned long long)cum);
    if (labels[0]) {
        gw_buf_printf(b, "%s_sum{%s} %.9g\n", name, labels, sum);
        gw_buf_printf(b, "%s_count{%s} %llu\n", name, labels, (unsigned long long)count);
    } else {
        gw_buf_printf(b, "%s_sum %.9g\n", name, sum);
        gw_buf_printf(b, "%s_count %llu\n", name, (unsigned long long)count);
    }
}

void gw_metrics_render(gw_metrics *m, const gw_gauges *g, gw_buf *b) {
    pthread_mutex_lock(&m->mu);
    gw_prom_family(b, "minitrain_http_requests_total", "counter",
           "HTTP requests answered, by endpoint and status code.");
    for (int e = 0; e < GW_EP_COUNT; e++)
        for (int s = 100; s < 600; s++)
            if (m->requests[e][s])
                gw_buf_printf(b, "minitrain_http_requests_total{endpoint=\"%s\",code=\"%d\"} %llu\n",
                              EP_NAMES[e], s, (unsigned long long)m->requests[e][s]);
    gw_prom_counter(b, "minitrain_prompt_tokens_total", "Prompt tokens processed.",
                    m->prompt_tokens);
    gw_prom_counter(b, "minitrain_completion_tokens_total", "Completion tokens generated.",
                    m->completion_tokens);
    gw_prom_counter(b, "minitrain_generations_cancelled_total",
                    "Generations stopped early because the client disconnected or the server "
                    "stopped.", m->cancelled);
    gw_prom_counter(b, "minitrain_queue_full_total",
                    "Completion requests refused with 503 because the queue was full.",
                    m->queue_full);
    gw_prom_counter(b, "minitrain_faults_injected_total",
                    "Answers changed by the test-only --fault-* flags (errors, empty answers).",
                    m->faults);
    gw_prom_family(b, "minitrain_request_duration_seconds", "histogram",
           "End-to-end latency of successful completion requests (queueing included).");
    gw_prom_histogram(b, "minitrain_request_duration_seconds", "", m->lat_bucket, m->lat_sum,
                      m->lat_count);
    pthread_mutex_unlock(&m->mu);
    gw_prom_gauge(b, "minitrain_ready", "1 once the model is loaded and requests are served.",
                  g->ready);
    gw_prom_gauge(b, "minitrain_slots", "Generation slots (parallel generations).", g->slots_total);
    gw_prom_gauge(b, "minitrain_slots_busy", "Slots generating right now.", g->slots_busy);
    gw_prom_gauge(b, "minitrain_queue_capacity", "Requests that may wait for a slot.",
                  g->queue_capacity);
    gw_prom_gauge(b, "minitrain_queue_depth", "Requests waiting for a slot right now.",
                  g->queue_depth);
}
