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
#include "gateway/gw_ledger.h"
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
    double ewma_ttft;     /* seconds: EWMA of time to first token (a whole answer when not
                             streamed) of successful attempts, weight GW_EWMA_ALPHA */
    uint64_t ewma_n;      /* samples in it (0: unmeasured, which the latency balancers try) */
    char url_completions[600], url_chat[600], url_health[600], url_embeddings[600];
} gw_upstream;

/* Weight of the newest sample in an upstream's latency EWMA: about the last 1/α ≈ 3 answers
 * dominate, so a slowdown is seen within a handful of requests (Finagle's peak-EWMA balancer
 * and Envoy's least-request use the same short memory). */
#define GW_EWMA_ALPHA 0.3

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

/* Token counts per request: the OpenTelemetry GenAI semantic conventions' advisory buckets of
 * gen_ai.client.token.usage (1, 4, 16, ... 4^13). */
#define GW_TOK_NBUCKETS 14
typedef struct {
    uint64_t b[GW_TOK_NBUCKETS + 1];
    uint64_t count;
    double sum;
} gw_tok_hist;
enum { GW_MX_ROLES = 4 }; /* viewer, user, admin, and "none" (an open gateway) */

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
    uint64_t budget_refused;    /* 429 insufficient_quota: a spend budget said no */
    uint64_t hedges[GW_MAX_ROUTES], hedge_wins[GW_MAX_ROUTES]; /* sent; won by the hedge */
    gw_tok_hist tokens[GW_MAX_ROUTES][GW_MX_ROLES][2]; /* [route][role][0 input, 1 output] */
    uint64_t blocked_prompts, blocked_completions;
} gw_metrics;

void gw_metrics_init(gw_metrics *m);
void gw_metrics_destroy(gw_metrics *m);
/* one answered request; key "" = no key (open gateway or failed auth) */
void gw_metrics_request(gw_metrics *m, const char *key, int route, int upstream, int status);
void gw_metrics_rate_limited(gw_metrics *m, const char *key);
void gw_metrics_observe(gw_hist *h, double seconds);
/* the prompt (input) and completion (output) tokens of one answered request; role GW_ROLE_* or
 * -1 for none; the caller holds m->mu */
void gw_metrics_tokens(gw_metrics *m, int route, int role, long input, long output);
/* Prometheus text of everything into b. */
void gw_metrics_render(gw_gateway *g, api_buf *b);

/* ---- the response cache (gw_cache.c) --------------------------------------------------------------
 * Exact match, in process, LRU under a byte cap (cache_bytes). Thread-safe. */
typedef struct gw_cache gw_cache;
typedef struct {
    uint64_t entries, bytes, hits, misses, stores, evictions;
} gw_cache_counts;

gw_cache *gw_cache_new(size_t cap_bytes);
/* The same in Redis at addr ("HOST:PORT"): entries expire after ttl_s seconds and are shared by
 * every gateway on that Redis; cap_bytes only bounds one entry (a quarter of it). An unreachable
 * Redis is a miss, retried at most once a second. */
gw_cache *gw_cache_new_redis(size_t cap_bytes, const char *addr, int ttl_s);
void gw_cache_free(gw_cache *c);
/* 1 if req may be answered from the cache: an embeddings request, or a completion with
 * temperature 0 or a seed (a deterministic answer). */
int gw_cache_eligible(const cJSON *req, int embeddings);
/* SHA-256 of the route, scope (a key id, or "" when shared), the endpoint (chat: 0 completions,
 * 1 chat, 2 embeddings) and req in canonical form (members sorted at every depth). */
void gw_cache_key(const char *route, const char *scope, int chat, const cJSON *req,
                  unsigned char out[32]);
/* A hit appends the stored bytes to *out and returns 1 (the entry becomes the newest); else 0. */
int gw_cache_get(gw_cache *c, const unsigned char key[32], api_buf *out);
/* Store (a copy of) data under key, evicting the least recently used entries to stay under the
 * cap; data over a quarter of the cap is not stored. */
void gw_cache_put(gw_cache *c, const unsigned char key[32], const char *data, size_t n);
void gw_cache_stats(gw_cache *c, gw_cache_counts *out);

/* ---- the gateway --------------------------------------------------------------------------------- */

struct gw_gateway {
    gw_config cfg;
    gw_upstream up[GW_MAX_UPSTREAMS];
    gw_rules *rules;
    gw_keys *keys;       /* NULL = open */
    gw_limiter *lim;     /* NULL = open */
    gw_ledger *ledger;   /* spend budgets and the ledger (keys database); NULL = open */
    gw_cache *cache;     /* NULL = cache_bytes 0 */
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
    pthread_mutex_t lb_mu;     /* load-reading balancers choose and acquire under it */
    atomic_uint rr[GW_MAX_ROUTES]; /* round_robin: requests started per route */
    pthread_mutex_t rng_mu;    /* guards rng */
    rng_state rng;
    long started;              /* unix seconds */
};

/* ---- one client exchange (gw_route.c; after a stream's commit, gw_stream.c) --------------------------------------------------------------- */

enum { GW_PH_EVENTS, GW_PH_FINISH, GW_PH_DONE, GW_PH_END };

typedef struct {
    gw_gateway *g;
    int chat, stream, client_usage;
    int embeddings;          /* POST /v1/embeddings (chat = stream = 0) */
    int route;               /* index into cfg.routes */
    cJSON *req;              /* the parsed (and guarded) request body, owned */
    char req_id[48];
    char key_id[24];         /* "" = open gateway */
    int client_fd;
    double t0;               /* arrival, timer_now() */
    /* the answer (non-streamed, or a stream that failed before its first event) */
    int status;
    api_buf body;
    char retry_after[32];    /* Retry-After to send, "" = none */
    int upstream;            /* index of the upstream that answered, -1 = none */
    int attempts;
    long prompt_tokens, completion_tokens;
    double ttft;             /* seconds from arrival to the first streamed event, -1 = none */
    int cached;              /* answered from the response cache */
    int capture;             /* keep the stream's bytes for the cache */
    int no_hedge;            /* the client sent X-Idempotent: false */
    int spend_active;        /* a ledger reservation to settle (gw_spend.c) */
    long long spend_res;
    long prompt_est, max_tokens_reserved; /* the worst case it reserved */
    api_buf captured;        /* ... here (dropped when over the cache's entry cap) */
    long produced;           /* streamed events with text passed on: the completion tokens a
                                cut stream really produced (serve sends one token per event) */
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
    double t_last;           /* last upstream event, timer_now() */
    api_buf ev_raw, ev_data;
} gw_exchange;

/* ---- one attempt as a leg (gw_route.c), driven alone or beside a hedge (gw_hedge.c) ---------- */

typedef struct {
    gw_outcome o;
    int gone;            /* the client went away */
    int http;            /* the upstream's status, 0 = none */
    double retry_after;  /* seconds, -1 = none */
    char detail[96];     /* for logs and messages: never prompt or completion text */
} gw_attempt_result;

typedef struct {
    gw_call *c;
    int ti, u, probe, renamed; /* target index, its upstream (in_flight held), half-open probe */
    double t0, deadline;       /* start; a stream's first-event deadline (timer_now()) */
    api_buf stash, raw, data;  /* a stream's events before its first token */
    gw_attempt_result a;
} gw_leg;

/* Start the attempt at target ti of x's route (its upstream already acquired). */
void gw_leg_start(gw_exchange *x, int ti, int probe, gw_leg *L);
/* Look at what arrived, without waiting: 1 = decided (L->a.o: OK = a stream's first token or a
 * whole good answer, else the failure), 0 = not yet (*left: seconds it may still wait). */
int gw_leg_poll(gw_exchange *x, gw_leg *L, double *left);
/* After the decision (or a->gone): log it, feed the latency EWMA, commit a good stream to x or
 * give the call back. The caller reports the outcome (gw_up_report) and releases the upstream. */
void gw_leg_end(gw_exchange *x, gw_leg *L);
/* Abandon an undecided leg (a hedge race lost): its upstream connection is closed, so the
 * upstream stops generating; its in_flight is released; not reported to the health machine
 * (losing a race is no failure); logged in x->log as UPSTREAM:why. */
void gw_leg_cancel(gw_exchange *x, gw_leg *L, const char *why);

/* Hedging (gw_hedge.c). 1 with *delay_s when x may be hedged: the route has hedge_after (a fixed
 * delay, or a quantile of its time-to-first-token histogram with at least 20 samples), the client
 * did not send X-Idempotent: false, and max_attempts leaves room for a second attempt. */
int gw_hedge_delay(gw_exchange *x, double *delay_s);
/* The first attempt of x at order[k], hedged: when it has not decided within delay_s, a second
 * leg goes to the next target in order[k+1..n) on another HEALTHY upstream with room, if the
 * attempts cap and the retry budget allow (a hedge is a retry for the budget). The first leg to
 * produce its first token (a stream) or a good answer wins and the other is cancelled; a failed
 * leg leaves the race to the other. *res = the leg whose outcome is the attempt's (ended with
 * gw_leg_end; the caller reports it and releases its upstream); the other is settled here.
 * Returns 1 if a hedge was sent. */
int gw_attempt_hedged(gw_exchange *x, const int *order, int k, int n, double delay_s, gw_leg *a,
                      gw_leg *b, gw_leg **res);
/* Acquire upstream u for a hedge: only when HEALTHY (never as a half-open probe) and under its
 * max_concurrent. 1 = acquired (in_flight and attempts counted). */
int gw_up_acquire_healthy(gw_gateway *g, int u);
/* The q-quantile (0..1) of h by linear interpolation inside its bucket; -1 under min_count. */
double gw_hist_quantile(const gw_hist *h, double q, uint64_t min_count);

/* Proxy x (x->req, route, flags filled by the caller): attempts, retries, fallbacks, the
 * all-targets-ejected policy. Returns 0 with x->status/x->body set (any status: the caller sends
 * it), 1 when a stream was committed (x->committed: read it with gw_stream_read), or -1 when the
 * client went away (send nothing). */
int gw_proxy_run(gw_exchange *x);
/* Next bytes of a committed stream into buf[0..max): >0 bytes, 0 = the end, -1 = abort. */
long gw_stream_read(gw_exchange *x, char *buf, size_t max);
/* Give back everything x holds (the call, buffers, budget); x itself is the caller's. */
void gw_exchange_free(gw_exchange *x);

/* ---- spend budgets (gw_spend.c, on the ledger of gw_ledger.h) ---------------------------------- */
/* The cost of tokens on route r at its prices (price_input / price_output per million tokens). */
double gw_route_cost(const gw_gateway *g, int r, long prompt, long completion);
/* Reserve x's worst case (prompt_est + max_tokens, and its cost) against key's and its role's
 * budgets. 0 = reserved (x->spend_active); else the HTTP status to answer with *e filled and
 * retry_after ("" or seconds): 429 insufficient_quota over a budget (Retry-After: the window's
 * end), 400 when the worst case alone is over a whole budget, 503 when the ledger cannot be
 * written. Counts refusals in /metrics. */
int gw_spend_reserve(gw_exchange *x, const gw_key_info *key, const char *model, long prompt_est,
                     long max_tokens, api_error *e, char *retry_after, size_t ra_cap);
/* Settle x's reservation from how it ended (complete = the answer went out whole): the
 * upstream's usage, a cut stream's produced events, or nothing (failed, cached). */
void gw_spend_settle(gw_exchange *x, int complete);

/* Guard the prompts of a parsed request body in place (gw_guard.c): 0 = pass (*changed if a
 * redaction or mask rewrote a string), 1 = blocked by *rule. chat: 0 completions ("prompt"),
 * 1 chat ("messages"), 2 embeddings ("input"). */
int gw_guard_prompt(const gw_rules *rs, cJSON *req, int chat, int *changed, const char **rule);

/* Report an attempt's outcome to upstream u's health machine (probe: it was the half-open probe
 * or a forced all-ejected attempt, whose success closes the circuit); logs ejections. */
void gw_up_report(gw_exchange *x, int u, gw_outcome o, int http, double retry_after, int probe);
/* The attempt on u is over: one request fewer in flight there. */
void gw_up_done(gw_gateway *g, int u);

/* Upstream health bookkeeping shared by the proxy and the health thread (gw_route.c). */
int gw_route_available(gw_gateway *g, int route); /* targets that may take a request now */
void gw_log(gw_gateway *g, const char *fmt, ...) MT_PRINTF(2, 3);
double gw_rand01(gw_gateway *g);

/* ---- load balancing (gw_lb.c) -------------------------------------------------------------------- */

/* The balancer (GW_LB_*) route `route` uses: its own lb, or the gateway's when it says default. */
int gw_lb_of_route(const gw_gateway *g, int route);
/* Fills order[0..n) (n <= GW_MAX_TARGETS) with target indices of x's route, level by level in
 * ascending level, each level ordered by the route's balancer; returns n. Draws from the
 * gateway's RNG; round_robin advances the route's counter. Locks each upstream's mutex briefly. */
int gw_lb_order(gw_exchange *x, int *order);
/* A successful attempt on upstream u took `seconds` (s) to its first token: folded into u's EWMA
 * with weight GW_EWMA_ALPHA (the first sample is taken as is). */
void gw_lb_observe(gw_gateway *g, int u, double seconds);

/* ---- the client side's libmicrohttpd callbacks (gw_http.c), opened by gw_gateway.c ----------------- */

/* MHD's access handler for one client request (cls: the gw_gateway); see serve/api.h's
 * api_listen_opts. Answers with the OpenAI error object on every refusal. */
enum MHD_Result gw_http_on_request(void *cls, struct MHD_Connection *c, const char *url,
                                   const char *method, const char *version, const char *upload,
                                   size_t *upload_size, void **con_cls);
/* MHD's request-completed callback: settles or releases the request's reservation, records its
 * metrics and access-log line, frees its state. Called exactly once per request. */
void gw_http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                          enum MHD_RequestTerminationCode toe);

#endif /* MT_GATEWAY_GW_IMPL_H */
