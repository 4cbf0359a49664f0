/*
 * gateway/gw_impl.h — what the gateway's own files (gateway/gw_*.c) share and no other module
 * may use: the running gateway, its upstreams, one upstream HTTP attempt (libcurl), one client
 * exchange, and the metrics store. The module's face is gateway/gw_proxy.h.
 *
 * Threading: libmicrohttpd runs one thread per client connection; that thread runs the whole
 * exchange — every attempt's libcurl transfer is driven from it (curl multi + poll), so a slow
 * client slows only its own upstream transfer (backpressure) and a client that goes away is seen
 * between two polls. Shared state is small and locked: each upstream's health (its own mutex),
 * the retry budget, the metrics, the pool of curl handles.
 */
#ifndef MT_GATEWAY_GW_IMPL_H
#define MT_GATEWAY_GW_IMPL_H

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>

#include "core/rng.h"
#include "gateway/gw_keys.h"
#include "gateway/gw_limit.h"
#include "gateway/gw_proxy.h"

/* ---- one upstream attempt (gw_upstream.c) ------------------------------------------------------- */

typedef struct gw_call {
    CURLM *multi;
    CURL *easy;
    struct curl_slist *hdrs;
    char errbuf[CURL_ERROR_SIZE];
    int stream;           /* 1: 200 bodies go to sse, others to body */
    int status;           /* HTTP status of the final response line, 0 until it arrives */
    int headers_done;
    char retry_after[64]; /* the response's Retry-After, "" if none */
    api_buf body;          /* the whole body (non-streamed, or a streamed request's error) */
    gw_sse sse;           /* a 200 stream's bytes, not yet framed */
    size_t max_body;
    int too_big;
    uint64_t received;    /* body bytes so far */
    int running;          /* the easy handle is in the multi handle */
    int connected;        /* the TCP connection was made */
    int done;
    CURLcode result;
    struct gw_call *next; /* pool link */
} gw_call;

/* A call from the pool (or a new one). */
gw_call *gw_call_get(gw_gateway *g);
/* Start POST url with body (JSON) — headers: Authorization (api_key if non-empty),
 * X-Request-Id, Content-Type. Timeouts from p (connect always; the whole transfer only when not
 * streaming). 0, or -1 if libcurl refused to start (c->done is set then). */
int gw_call_start(gw_call *c, const gw_policy *p, const char *url, const char *api_key,
                  const char *req_id, const char *body, size_t n, int stream);
/* Move the transfer forward for at most timeout_s: returns as soon as new bytes or the end
 * arrived (1), or when the time is up (0), or when the client on client_fd is gone or the gateway
 * is stopping (-1; the caller aborts). client_fd < 0: not checked. */
int gw_call_pump(gw_gateway *g, gw_call *c, double timeout_s, int client_fd);
/* Abort the transfer if it still runs (its connection is closed, so the upstream sees the
 * cancel) and give the call back to the pool. */
void gw_call_put(gw_gateway *g, gw_call *c);
/* How the attempt ended, once done: GW_OUT_CONNECT / TIMEOUT / TRANSPORT for transport failures,
 * GW_OUT_BAD_BODY if the body was over max_response, else the outcome of the HTTP status. */
gw_outcome gw_call_outcome(const gw_call *c);
/* GET url (active health check): the HTTP status, or 0 if it could not be fetched. */
int gw_http_get_status(const char *url, double timeout_s);
/* 1 if the peer on fd closed its end (pending request bytes do not count). */
int gw_client_gone(int fd);

/* ---- the running gateway ------------------------------------------------------------------------ */

typedef struct {
    gw_upstream_cfg cfg;
    pthread_mutex_t mu;   /* guards h, in_flight and the counters */
    gw_health h;
    int in_flight;
    uint64_t attempts, retries, failures[GW_OUT_COUNT];
    char url_completions[600], url_chat[600], url_health[600];
} gw_upstream;

/* ---- metrics (gw_metrics.c) --------------------------------------------------------------------- */

#define GW_MX_SLOTS 4096 /* distinct (key, model, upstream, status) series; more fold into "other" */
#define GW_MX_KEYS 512

typedef struct {
    char key[24];
    short route, upstream; /* -1 = none */
    short status;
    uint64_t n;
} gw_metrics_series;

typedef struct {
    uint64_t b[API_LAT_NBUCKETS + 1];
    uint64_t count;
    double sum;
} gw_hist;

typedef struct {
    pthread_mutex_t mu;
    gw_metrics_series req[GW_MX_SLOTS];
    int n_req;
    uint64_t req_overflow;
    struct { char key[24]; uint64_t n; } limited[GW_MX_KEYS];
    int n_limited;
    gw_hist latency[GW_MAX_ROUTES], ttft[GW_MAX_ROUTES];
    uint64_t tokens_in[GW_MAX_ROUTES], tokens_out[GW_MAX_ROUTES];
    uint64_t fallbacks[GW_MAX_ROUTES];
    uint64_t budget_exhausted, all_ejected, stream_cancelled, stream_broken;
    uint64_t settled, released;
    uint64_t blocked_prompts, blocked_completions;
} gw_metrics;

void gw_metrics_init(gw_metrics *m);
void gw_metrics_destroy(gw_metrics *m);
/* one answered request; key "" = no key (open gateway or failed auth) */
void gw_metrics_request(gw_metrics *m, const char *key, int route, int upstream, int status);
void gw_metrics_rate_limited(gw_metrics *m, const char *key);
void gw_metrics_observe(gw_hist *h, double seconds);
/* Prometheus text of everything into b. */
void gw_metrics_render(gw_gateway *g, api_buf *b);

/* ---- the gateway --------------------------------------------------------------------------------- */

struct gw_gateway {
    gw_config cfg;
    gw_upstream up[GW_MAX_UPSTREAMS];
    gw_rules *rules;
    gw_keys *keys;       /* NULL = open */
    gw_limiter *lim;     /* NULL = open */
    struct MHD_Daemon *d;
    int port;
    atomic_int stopping;
    pthread_t health_thread;
    int health_started;
    pthread_mutex_t stop_mu;
    pthread_cond_t stop_cv;
    pthread_mutex_t budget_mu; /* guards budget */
    gw_budget budget;
    gw_metrics mx;
    pthread_mutex_t pool_mu;   /* guards pool */
    gw_call *pool;
    pthread_mutex_t rng_mu;    /* guards rng */
    rng_state rng;
    long started;              /* unix seconds */
};

/* ---- one client exchange (gw_route.c; after a stream's commit, gw_stream.c) --------------------------------------------------------------- */

enum { GW_PH_EVENTS, GW_PH_FINISH, GW_PH_DONE, GW_PH_END };

typedef struct {
    gw_gateway *g;
    int chat, stream, client_usage;
    int route;               /* index into cfg.routes */
    cJSON *req;              /* the parsed (and guarded) request body, owned */
    char req_id[48];
    char key_id[24];         /* "" = open gateway */
    int client_fd;
    double t0;               /* arrival, api_now() */
    /* the answer (non-streamed, or a stream that failed before its first event) */
    int status;
    api_buf body;
    char retry_after[32];    /* Retry-After to send, "" = none */
    int upstream;            /* index of the upstream that answered, -1 = none */
    int attempts;
    long prompt_tokens, completion_tokens;
    double ttft;             /* seconds from arrival to the first streamed event, -1 = none */
    api_buf log;              /* "a:5xx b:ok" — the attempts, for the access log */
    int in_budget;           /* counted in budget.in_flight */
    /* a committed stream */
    int committed;
    gw_call *call;
    int call_up, call_probe; /* its upstream (in_flight held) and whether it is the probe */
    int renamed;             /* the upstream's model name differs from the public one */
    gw_filter filt;
    api_buf out;              /* bytes ready for the client */
    size_t out_off;
    int phase;               /* GW_PH_* */
    int finished;            /* a finish_reason went out */
    char finish[24];
    double t_last;           /* last upstream event, api_now() */
    api_buf ev_raw, ev_data;
} gw_exchange;

/* Proxy x (x->req, route, flags filled by the caller): attempts, retries, fallbacks, the
 * all-targets-ejected policy. Returns 0 with x->status/x->body set (any status: the caller sends
 * it), 1 when a stream was committed (x->committed: read it with gw_stream_read), or -1 when the
 * client went away (send nothing). */
int gw_proxy_run(gw_exchange *x);
/* Next bytes of a committed stream into buf[0..max): >0 bytes, 0 = the end, -1 = abort. */
long gw_stream_read(gw_exchange *x, char *buf, size_t max);
/* Give back everything x holds (the call, buffers, budget); x itself is the caller's. */
void gw_exchange_free(gw_exchange *x);

/* Guard the prompts of a parsed request body in place (gw_guard.c): 0 = pass (*changed if a
 * redaction or mask rewrote a string), 1 = blocked by *rule. */
int gw_guard_prompt(const gw_rules *rs, cJSON *req, int chat, int *changed, const char **rule);

/* Report an attempt's outcome to upstream u's health machine (probe: it was the half-open probe
 * or a forced all-ejected attempt, whose success closes the circuit); logs ejections. */
void gw_up_report(gw_exchange *x, int u, gw_outcome o, int probe);
/* The attempt on u is over: one request fewer in flight there. */
void gw_up_done(gw_gateway *g, int u);

/* Upstream health bookkeeping shared by the proxy and the health thread (gw_route.c). */
int gw_route_available(gw_gateway *g, int route); /* targets that may take a request now */
void gw_log(gw_gateway *g, const char *fmt, ...) MT_PRINTF(2, 3);
double gw_rand01(gw_gateway *g);

#endif /* MT_GATEWAY_GW_IMPL_H */
