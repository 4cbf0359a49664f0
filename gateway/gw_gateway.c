/*
 * gateway/gw_gateway.c — a gateway's lifecycle and its active health thread: gw_gateway_start
 * builds the shared state (upstreams, rules, keys, ledger, limiter, cache), checks the upstreams
 * once, opens the libmicrohttpd daemon on gw_http.c's callbacks and starts the health thread;
 * gw_gateway_stop ends them in the reverse order.
 *
 * Why a thread of its own: the active check (GET /health every health_interval_s) must find an
 * upstream that is down while no client request goes there; it waits on stop_cv, so a stop is
 * seen at once rather than after the interval.
 */
#include "gateway/gw_impl.h"
#include "serve/api.h"
#include "core/timer.h"

#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* ---- active health ------------------------------------------------------------------------------------- */

static void health_round(gw_gateway *g) {
    for (int u = 0; u < g->cfg.n_up && !atomic_load(&g->stopping); u++) {
        gw_upstream *up = &g->up[u];
        int code = gw_http_get_status(up->url_health, g->cfg.pol.health_timeout_s);
        int ok = code == 200;
        pthread_mutex_lock(&up->mu);
        int was_down = up->h.active_down;
        gw_health_active(&up->h, &g->cfg.pol, ok, timer_now());
        pthread_mutex_unlock(&up->mu);
        if (ok && was_down)
            gw_log(g, "upstream %s passes its health check again", up->cfg.name);
        else if (!ok && !was_down)
            gw_log(g, "upstream %s fails its health check (%s): out of service", up->cfg.name,
                   code ? (code == 503 ? "503, loading or overloaded" : "not 200")
                        : "no answer");
    }
}

static void *health_main(void *arg) {
    gw_gateway *g = arg;
    pthread_mutex_lock(&g->stop_mu);
    while (!atomic_load(&g->stopping)) {
        struct timespec ts = timer_deadline(g->cfg.pol.health_interval_s);
        pthread_cond_timedwait(&g->stop_cv, &g->stop_mu, &ts);
        if (atomic_load(&g->stopping)) break;
        pthread_mutex_unlock(&g->stop_mu);
        health_round(g);
        pthread_mutex_lock(&g->stop_mu);
    }
    pthread_mutex_unlock(&g->stop_mu);
    return NULL;
}

/* ---- lifecycle ------------------------------------------------------------------------------------------ */

static void free_parts(gw_gateway *g) {
    for (int u = 0; u < g->cfg.n_up; u++) pthread_mutex_destroy(&g->up[u].mu);
    while (g->pool) {
        gw_call *c = g->pool;
        g->pool = c->next;
        curl_easy_cleanup(c->easy);
        curl_multi_cleanup(c->multi);
        api_buf_free(&c->body);
        gw_sse_free(&c->sse);
        free(c);
    }
    gw_rules_free(g->rules);
    if (g->lim) gw_limiter_free(g->lim);
    if (g->keys) gw_keys_close(g->keys);
    gw_ledger_close(g->ledger);
    gw_cache_free(g->cache);
    gw_metrics_destroy(&g->mx);
    pthread_mutex_destroy(&g->budget_mu);
    pthread_mutex_destroy(&g->pool_mu);
    pthread_mutex_destroy(&g->rng_mu);
    pthread_mutex_destroy(&g->lb_mu);
    pthread_mutex_destroy(&g->stop_mu);
    pthread_cond_destroy(&g->stop_cv);
    free(g);
}

gw_gateway *gw_gateway_start(const gw_config *cfg, char *err, size_t errlen) {
    static int curl_ready = 0;
    if (!curl_ready) { /* not thread-safe: the first start happens before any other thread */
        mtCheck(curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK, "libcurl failed to start");
        curl_ready = 1;
    }
    gw_gateway *g = callocCheck(1, sizeof(gw_gateway));
    g->cfg = *cfg;
    atomic_init(&g->stopping, 0);
    pthread_mutex_init(&g->budget_mu, NULL);
    pthread_mutex_init(&g->pool_mu, NULL);
    pthread_mutex_init(&g->rng_mu, NULL);
    pthread_mutex_init(&g->lb_mu, NULL);
    pthread_mutex_init(&g->stop_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->stop_cv, &ca);
    pthread_condattr_destroy(&ca);
    gw_metrics_init(&g->mx);
    rng_seed(&g->rng, (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(size_t)g);
    g->started = (long)time(NULL);
    double now = timer_now();
    for (int u = 0; u < cfg->n_up; u++) {
        gw_upstream *up = &g->up[u];
        up->cfg = cfg->up[u];
        pthread_mutex_init(&up->mu, NULL);
        gw_health_init(&up->h, now);
        const char *base = cfg->up[u].url; /* (the caller's copy: no overlap with *up) */
        snprintf(up->url_completions, sizeof(up->url_completions), "%s/v1/completions", base);
        snprintf(up->url_chat, sizeof(up->url_chat), "%s/v1/chat/completions", base);
        snprintf(up->url_health, sizeof(up->url_health), "%s/health", base);
        snprintf(up->url_embeddings, sizeof(up->url_embeddings), "%s/v1/embeddings", base);
    }
    g->rules = gw_rules_new(cfg, err, errlen);
    if (!g->rules) {
        free_parts(g);
        return NULL;
    }
    if (cfg->keys_db[0]) {
        char e2[512];
        g->keys = gw_keys_open(cfg->keys_db, e2, sizeof(e2));
        if (!g->keys) {
            snprintf(err, errlen, "keys_db '%s': %s", cfg->keys_db, e2);
            free_parts(g);
            return NULL;
        }
        g->ledger = gw_ledger_open(cfg->keys_db, e2, sizeof(e2));
        if (!g->ledger) {
            snprintf(err, errlen, "keys_db '%s': %s", cfg->keys_db, e2);
            free_parts(g);
            return NULL;
        }
        g->lim = gw_limiter_new(cfg->redis[0] ? cfg->redis : NULL, cfg->redis_fail_open, e2,
                                sizeof(e2));
        if (!g->lim) {
            snprintf(err, errlen, "rate limiter%s%s: %s", cfg->redis[0] ? " at redis " : "",
                     cfg->redis, e2);
            free_parts(g);
            return NULL;
        }
    }
    if (cfg->cache_bytes > 0)
        g->cache = cfg->cache_ttl_s > 0
                       ? gw_cache_new_redis(cfg->cache_bytes, cfg->redis, cfg->cache_ttl_s)
                       : gw_cache_new(cfg->cache_bytes);
    if (cfg->pol.health_interval_s > 0) health_round(g); /* know the upstreams before serving */
    api_listen_opts lo = {.host = cfg->host, .port = cfg->port, .who = "gateway",
                         .timeout_s = (unsigned)cfg->pol.client_timeout_s, .conn_limit = 1024u,
                         .backlog = 1024u, .on_request = gw_http_on_request,
                         .on_completed = gw_http_on_completed, .cls = g};
    g->d = api_listen(&lo, &g->port, err, errlen);
    if (!g->d) {
        free_parts(g);
        return NULL;
    }
    if (cfg->pol.health_interval_s > 0) {
        mtCheck(pthread_create(&g->health_thread, NULL, health_main, g) == 0,
                "cannot start the health-check thread");
        g->health_started = 1;
    }
    return g;
}

int gw_gateway_port(const gw_gateway *g) { return g->port; }

void gw_gateway_stop(gw_gateway *g) {
    if (!g) return;
    pthread_mutex_lock(&g->stop_mu);
    atomic_store(&g->stopping, 1);
    pthread_cond_broadcast(&g->stop_cv);
    pthread_mutex_unlock(&g->stop_mu);
    MHD_stop_daemon(g->d); /* connection threads see `stopping` within one poll and end */
    if (g->health_started) pthread_join(g->health_thread, NULL);
    free_parts(g);
}
