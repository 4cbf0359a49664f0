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

static const char *const EP_NAMES[SRV_EP_COUNT] = {"completions", "chat_completions", "models",
                                                  "health", "metrics", "other"};

const char *srv_endpoint_name(int endpoint) {
    return endpoint >= 0 && endpoint < SRV_EP_COUNT ? EP_NAMES[endpoint] : "other";
}

void srv_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof(*m));
    pthread_mutex_init(&m->mu, NULL);
}

void srv_metrics_destroy(srv_metrics *m) { pthread_mutex_destroy(&m->mu); }

void srv_metrics_request(srv_metrics *m, int endpoint, int status) {
    if (status < 100 || status > 599) return;
    if (endpoint < 0 || endpoint >= SRV_EP_COUNT) endpoint = SRV_EP_OTHER;
    pthread_mutex_lock(&m->mu);
    m->requests[endpoint][status]++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_latency(srv_metrics *m, double seconds) {
    int b = 0;
    while (b < API_LAT_NBUCKETS && seconds > api_latency_bounds[b]) b++;
    pthread_mutex_lock(&m->mu);
    m->lat_bucket[b]++;
    m->lat_count++;
    m->lat_sum += seconds;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_tokens(srv_metrics *m, int prompt_tokens, int completion_tokens) {
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)prompt_tokens;
    m->completion_tokens += (uint64_t)completion_tokens;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_cancelled(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->cancelled++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_queue_full(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->queue_full++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_fault(srv_metrics *m) {
    pthread_mutex_lock(&m->mu);
    m->faults++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_render(srv_metrics *m, const srv_gauges *g, api_buf *b) {
    pthread_mutex_lock(&m->mu);
    api_prom_family(b, "minitrain_http_requests_total", "counter",
           "HTTP requests answered, by endpoint and status code.");
    for (int e = 0; e < SRV_EP_COUNT; e++)
        for (int s = 100; s < 600; s++)
            if (m->requests[e][s])
                api_buf_printf(b, "minitrain_http_requests_total{endpoint=\"%s\",code=\"%d\"} %llu\n",
                              EP_NAMES[e], s, (unsigned long long)m->requests[e][s]);
    api_prom_counter(b, "minitrain_prompt_tokens_total", "Prompt tokens processed.",
                    m->prompt_tokens);
    api_prom_counter(b, "minitrain_completion_tokens_total", "Completion tokens generated.",
                    m->completion_tokens);
    api_prom_counter(b, "minitrain_generations_cancelled_total",
                    "Generations stopped early because the client disconnected or the server "
                    "stopped.", m->cancelled);
    api_prom_counter(b, "minitrain_queue_full_total",
                    "Completion requests refused with 503 because the queue was full.",
                    m->queue_full);
    api_prom_counter(b, "minitrain_faults_injected_total",
                    "Answers changed by the test-only --fault-* flags (errors, empty answers).",
                    m->faults);
    api_prom_family(b, "minitrain_request_duration_seconds", "histogram",
           "End-to-end latency of successful completion requests (queueing included).");
    api_prom_histogram(b, "minitrain_request_duration_seconds", "", m->lat_bucket, m->lat_sum,
                      m->lat_count);
    pthread_mutex_unlock(&m->mu);
    api_prom_gauge(b, "minitrain_ready", "1 once the model is loaded and requests are served.",
                  g->ready);
    api_prom_gauge(b, "minitrain_slots", "Generation slots (parallel generations).", g->slots_total);
    api_prom_gauge(b, "minitrain_slots_busy", "Slots generating right now.", g->slots_busy);
    api_prom_gauge(b, "minitrain_queue_capacity", "Requests that may wait for a slot.",
                  g->queue_capacity);
    api_prom_gauge(b, "minitrain_queue_depth", "Requests waiting for a slot right now.",
                  g->queue_depth);
}
