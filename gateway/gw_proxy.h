/*
 * gateway/gw_proxy.h — `minitrain gateway`: an AI gateway in front of model servers.
 *
 * The gateway's public face: its configuration (one INI file, or flags), the policy table, the
 * policies themselves as small pure state machines (outlier ejection with half-open probes, retry
 * backoff and budget, what counts as an upstream failure, server-sent-event framing, the
 * streaming-aware content filter) and the process lifecycle. The pure parts take the clock as an
 * argument so the unit tests (tests/test_gw_proxy.c) drive them through every transition without
 * sleeping; the files that touch sockets share gateway/gw_impl.h.
 *
 * Files (one concern each):
 *   gw_config.c    the policy table, INI (inih) and flag parsing, validation;
 *   gw_policy.c    health state machine, retry backoff / Retry-After / budget, outcome rules,
 *                  SSE framing, response checks (empty 200s);
 *   gw_guard.c     body and max_tokens caps, PII masking (safety/pii.h), PCRE2 content rules and
 *                  the streaming filter that holds back at most the longest rule's window;
 *   gw_upstream.c  one upstream HTTP attempt on libcurl (a multi handle per attempt, driven from
 *                  the client's connection thread, so streaming has natural backpressure);
 *   gw_route.c     routing, the attempt loop (retries + fallbacks under one attempts cap), the
 *                  all-targets-ejected policy;
 *   gw_lb.c        the load balancers: the order of a request's targets;
 *   gw_stream.c    a committed stream passed through (rewritten only when guards need it);
 *   gw_metrics.c   Prometheus text for /metrics;
 *   gw_http.c      libmicrohttpd glue: endpoints, keys (gw_keys.h), limits (gw_limit.h);
 *   gw_gateway.c   the active health thread and the process lifecycle.
 * The subcommand (flags, signals) is cmd/gateway.c.
 */
#ifndef MT_GATEWAY_GW_PROXY_H
#define MT_GATEWAY_GW_PROXY_H

#include <stddef.h>
#include <stdint.h>

#include "core/keytab.h"
#include "serve/api.h" /* api_buf, api_error */

/* ---- the policy table (gw_config.c) -------------------------------------------------------------
 * Every threshold the policies use, in ONE table (like Envoy's outlier_detection / retry_policy
 * blocks): name, default, range and help text. The INI section [policy], the command-line flags
 * (--consecutive-failures 5) and docs/gateway.md all read this table. */
typedef struct {
    int consecutive_failures;     /* passive health: failures in a row that eject an upstream */
    double ejection_base_s;       /* ejected for base × times-ejected seconds ... */
    double ejection_max_s;        /* ... capped here */
    double health_interval_s;     /* active health: GET /health this often (0 = off) */
    double health_timeout_s;      /* ... each check gives up after this */
    int max_attempts;             /* per request, across retries AND fallbacks */
    int retries_per_target;       /* extra attempts on the same upstream before falling back */
    double backoff_base_s;        /* retry n waits uniform(0, min(max, base·2^n)) ("full jitter") */
    double backoff_max_s;
    double retry_after_max_s;     /* an upstream's Retry-After is honoured up to this; longer:
                                     no wait, fall back instead */
    double retry_budget_ratio;    /* retries in flight ≤ max(min, ratio × requests in flight) */
    int retry_budget_min;
    double connect_timeout_s;     /* TCP connect to an upstream */
    double timeout_s;             /* a whole non-streamed attempt */
    double first_token_timeout_s; /* a stream's first event */
    double stream_idle_timeout_s; /* between two events of a stream */
    double client_timeout_s;      /* idle client connections are closed after this */
    size_t max_body;              /* bytes of a request body; 413 above */
    size_t max_response;          /* bytes of an upstream body; larger is a failure */
    int max_tokens;               /* cap on a request's max_tokens (0 = none); 400 above */
    int default_max_tokens;       /* what a request without max_tokens reserves */
} gw_policy;

/* The policy's keys as core/keytab.h rows over gw_policy (name, type, offset, range, help,
 * default), terminated by an entry with name NULL: the INI [policy] section, the command-line
 * flags, the defaults and --help all read them. */
extern const keytab_key gw_policy_keys[];

void gw_policy_defaults(gw_policy *p);
/* Set one key from text ("1M" and "64K" are accepted for byte counts). Dashes in key read as
 * underscores. Returns 0; 1 if key is not a policy key; -1 with err for a bad value. */
int gw_policy_set(gw_policy *p, const char *key, const char *value, char *err, size_t errlen);

/* ---- configuration (gw_config.c) --------------------------------------------------------------- */

#define GW_MAX_UPSTREAMS 32
#define GW_MAX_ROUTES 64
#define GW_MAX_TARGETS 8
#define GW_MAX_RULES 32
#define GW_NAME_MAX 64

typedef struct {
    char name[GW_NAME_MAX];
    char url[512];      /* base URL, e.g. http://127.0.0.1:8081 (no trailing slash) */
    char api_key[256];  /* sent upstream as "Authorization: Bearer ..." ("" = none) */
    int weight;         /* share among targets of the same priority level (1..1000) */
    int max_concurrent; /* requests in flight to it; 0 = unlimited; full = skipped, not failed */
} gw_upstream_cfg;

typedef struct {
    int upstream;              /* index into gw_config.up (resolved by gw_config_validate) */
    char upstream_name[GW_NAME_MAX];
    char model[128];           /* model name sent upstream; "" = the public name */
    int level;                 /* 0 = primary; targets of one level share load by weight */
} gw_target;

/* Load balancing within one priority level of a route (gw_route.c, docs/gateway.md):
 *   ordered      weighted random order (upstream weights), the default;
 *   round_robin  each request starts one further along the level;
 *   least_busy   fewest requests in flight first;
 *   ewma_latency lowest EWMA of time to first token × (in flight + 1) first;
 *   p2c          power of two choices: two at random, the lower of that score first. */
enum { GW_LB_DEFAULT = -1, GW_LB_ORDERED = 0, GW_LB_ROUND_ROBIN, GW_LB_LEAST_BUSY,
       GW_LB_EWMA_LATENCY, GW_LB_P2C };

typedef struct {
    char name[128];            /* public model name */
    int n_targets;
    gw_target t[GW_MAX_TARGETS];
    int lb;                    /* GW_LB_*; GW_LB_DEFAULT = the [gateway] lb */
    double price_input, price_output; /* cost per million prompt / completion tokens (budgets) */
    double hedge_after_ms;     /* hedging: > 0 a fixed delay, 0 off, -1 = the [gateway] one */
    double hedge_quantile;     /* > 0: hedge after this quantile (0.95 for p95) of the route's
                                  time to first token instead of a fixed delay */
} gw_route_cfg;

enum { GW_ON_PROMPTS = 1, GW_ON_COMPLETIONS = 2, GW_ON_BOTH = 3 };
enum { GW_ACT_BLOCK = 0, GW_ACT_REDACT = 1 };
enum { GW_PII_OFF = 0, GW_PII_MASK = 1 };
enum { GW_EJECTED_LONGEST = 0, GW_EJECTED_REFUSE = 1 };

typedef struct {
    char name[GW_NAME_MAX];
    char pattern[1024];  /* PCRE2, UTF mode */
    int action;          /* GW_ACT_* */
    int on;              /* GW_ON_* */
    int window;          /* bytes: the longest text a match may span (streaming hold-back) */
    int caseless;
    char replacement[64];
} gw_rule_cfg;

typedef struct {
    char source[512];    /* config file, for messages ("" = flags only) */
    char host[128];
    int port;
    char keys_db[512];   /* "" = open gateway (no keys, no limits) */
    char redis[256];     /* "HOST:PORT" = shared rate limits; "" = in-process */
    int redis_fail_open; /* 1 (default): while Redis is down, this process's own buckets;
                            0: refuse limited requests with 503 */
    int all_ejected;     /* GW_EJECTED_* */
    int quiet;           /* no access log */
    int pii;             /* GW_PII_* */
    int pii_on;          /* GW_ON_* */
    int lb;              /* GW_LB_*: routes without their own lb */
    size_t cache_bytes;  /* response cache capacity; 0 = no cache */
    int cache_shared;    /* 1: one key's cached answer may answer another key */
    int cache_ttl_s;     /* > 0: the cache lives in Redis (the redis address), entries this old
                            expire; 0: in process, LRU under cache_bytes */
    double hedge_after_ms, hedge_quantile; /* routes without their own hedge_after */
    gw_policy pol;
    int n_up;
    gw_upstream_cfg up[GW_MAX_UPSTREAMS];
    int n_routes;
    gw_route_cfg routes[GW_MAX_ROUTES];
    int n_rules;
    gw_rule_cfg rules[GW_MAX_RULES];
} gw_config;

/* Defaults: 127.0.0.1:8090, open, in-process limits, redis_fail = open, all_ejected = longest,
 * policy defaults. */
void gw_config_init(gw_config *c);
/* Read an INI file on top of c. Sections: [gateway] (the gw_config keys above, and any policy
 * key), [policy], [upstream NAME], [model NAME] (targets = a, b/name, c|d; lb; price_input,
 * price_output; hedge_after), [rule NAME].
 * Returns 0, or -1 with "FILE:LINE: ..." in err (unknown section or key, bad value, duplicate). */
int gw_config_load(gw_config *c, const char *path, char *err, size_t errlen);
/* One [gateway] or [policy] key from text, e.g. from a flag. 0, 1 = unknown key, -1 = bad value. */
/* 1 if key (dashes read as underscores) is a [gateway] or [policy] key, else 0. */
int gw_config_has_key(const char *key);
int gw_config_set(gw_config *c, const char *key, const char *value, char *err, size_t errlen);
/* --upstream NAME=URL: adds (or replaces the URL of) upstream NAME. 0 or -1 with err. */
int gw_config_add_upstream(gw_config *c, const char *spec, char *err, size_t errlen);
/* --route MODEL=T1,T2,...: each T is UPSTREAM or UPSTREAM/MODEL; ',' separates priority levels,
 * '|' weighted alternatives within a level. 0 or -1 with err. */
int gw_config_add_route(gw_config *c, const char *spec, char *err, size_t errlen);
/* Resolve target names and check the whole: at least one route, every target names a known
 * upstream, URLs are http(s), ejection_base ≤ ejection_max, ... 0 or -1 with err. */
int gw_config_validate(gw_config *c, char *err, size_t errlen);
/* "ordered", "round_robin", ... for GW_LB_* (NULL for another value). */
const char *gw_lb_name(int lb);

/* ---- health: passive outlier ejection + half-open probe (gw_policy.c) ------------------------------
 * States (the values /metrics reports as minitrain_gateway_upstream_state):
 *   HEALTHY (0) — takes traffic; `consecutive_failures` failures in a row eject it;
 *   EJECTED (1) — for base × times_ejected seconds (capped at ejection_max_s); also while the
 *                 active check (GET /health) fails;
 *   PROBING (2) — half-open: the ejection time is over; exactly one real request is let through,
 *                 its success closes the circuit, its failure ejects again (times_ejected + 1).
 * times_ejected decays by one for every ejection_base_s the upstream stays healthy (Envoy's
 * ejection multiplier). Not thread-safe: the caller holds the upstream's lock. Times in seconds on
 * any monotonic clock. */
enum { GW_UP_HEALTHY = 0, GW_UP_EJECTED = 1, GW_UP_PROBING = 2 };

typedef struct {
    int ejected;           /* 1 from ejection until a probe succeeds */
    int consecutive;       /* failures in a row */
    int times_ejected;     /* the ejection multiplier */
    int probe_in_flight;   /* 1 while the half-open probe runs */
    int active_down;       /* 1 while GET /health fails */
    double ejected_at, eject_until, healthy_since;
    double down_since;     /* when active_down last became 1 */
    double not_before;     /* the upstream's own Retry-After: no request before this (0 = none) */
    int not_before_status; /* the status (429, 503) that carried it */
    uint64_t ejections;    /* total, for metrics */
} gw_health;

void gw_health_init(gw_health *h, double now);
/* The state at time now (GW_UP_*). */
int gw_health_state(const gw_health *h, double now);
/* May a request go to this upstream now? 1 = yes (*probe = 1 when it is the half-open probe:
 * report its result with was_probe = 1), 0 = no. */
int gw_health_acquire(gw_health *h, double now, int *probe);
/* The result of one request: failure = 1 for any outcome gw_outcome_is_failure() calls a failure.
 * Returns 1 if this result ejected the upstream. */
int gw_health_result(gw_health *h, const gw_policy *p, int failure, int was_probe, double now);
/* The result of one active check (ok = GET /health answered 200). */
void gw_health_active(gw_health *h, const gw_policy *p, int ok, double now);
/* The upstream answered status with Retry-After: seconds: it takes no request (not even the
 * all-targets-ejected attempt) before now + seconds. A later, shorter value does not shorten it. */
void gw_health_retry_after(gw_health *h, double seconds, int status, double now);
/* Seconds until the upstream may be tried again: while it rests on its own Retry-After, the time
 * left of that (what clients are told, consistent with the upstream's value); else until the
 * ejection ends (0 if not ejected or already over). */
double gw_health_wait(const gw_health *h, double now);
/* 1 while the upstream rests on its own Retry-After. */
int gw_health_resting(const gw_health *h, double now);
/* Since when the upstream has been out of service (ejected or failing its active check), for the
 * all-targets-ejected policy ("the one ejected longest ago"); now if it is in service. */
double gw_health_out_since(const gw_health *h, double now);

/* ---- what counts as a failure (gw_policy.c) ---------------------------------------------------- */
typedef enum {
    GW_OUT_OK = 0,
    GW_OUT_CLIENT_ERROR,  /* the upstream refused the request itself (400, 401, 404, 413, ...):
                             passed to the client, never ejects, never retried */
    GW_OUT_CONNECT,       /* could not connect */
    GW_OUT_TRANSPORT,     /* connection reset, nothing received, malformed HTTP */
    GW_OUT_TIMEOUT,       /* the attempt ran past timeout_s / stream_idle_timeout_s */
    GW_OUT_FIRST_TOKEN,   /* a stream sent no event within first_token_timeout_s */
    GW_OUT_5XX,
    GW_OUT_429,
    GW_OUT_BAD_BODY,      /* a 200 whose body is not the expected JSON */
    GW_OUT_EMPTY,         /* a 200 with no choices, or empty text and no finish_reason */
    GW_OUT_COUNT
} gw_outcome;

const char *gw_outcome_name(gw_outcome o);
/* 1 for outcomes that count toward ejection and may be retried or fallen back from. */
int gw_outcome_is_failure(gw_outcome o);
/* Outcome of an HTTP status alone (200..299 = OK; the body is judged by gw_check_response). */
gw_outcome gw_outcome_of_status(int status);

/* ---- retries (gw_policy.c) --------------------------------------------------------------------- */
/* Backoff before retry number n (0 = the first retry): uniform in [0, min(max, base·2^n)),
 * u01 a uniform draw in [0, 1) ("full jitter", AWS Architecture Blog, "Exponential Backoff And
 * Jitter", 2015). Seconds. */
double gw_backoff_s(const gw_policy *p, int n, double u01);
/* Retry-After header value (RFC 9110 §10.2.3: delay-seconds or an HTTP-date) → seconds from
 * now_unix (≥ 0), or -1 if absent or unparsable. */
double gw_retry_after_s(const char *value, double now_unix);

/* The retry budget (Envoy's retry_budget): a retry may start while retries in flight <
 * max(retry_budget_min, retry_budget_ratio × requests in flight). Fallbacks to a different upstream
 * do not draw on it (they move load, not multiply it); the attempts cap bounds them. */
typedef struct {
    int in_flight; /* requests being proxied */
    int retrying;  /* of which in a retry (backoff or attempt) */
} gw_budget;
/* 1 = the retry may go (retrying is incremented: call gw_budget_end_retry after), 0 = exhausted.
 * Not thread-safe (the caller locks). */
int gw_budget_try_retry(gw_budget *b, const gw_policy *p);
void gw_budget_end_retry(gw_budget *b);

/* ---- responses and server-sent events (gw_policy.c) ---------------------------------------------- */
/* Judge a 200 body of /v1/completions (chat = 0) or /v1/chat/completions (chat = 1):
 * GW_OUT_OK, GW_OUT_BAD_BODY (not JSON, no "choices" array) or GW_OUT_EMPTY (no choices, or the
 * first choice has empty text/content and no finish_reason). Fills *prompt_tokens and
 * *completion_tokens from "usage" when present (else leaves them). */
gw_outcome gw_check_response(const char *body, size_t n, int chat, long *prompt_tokens,
                             long *completion_tokens);

/* Judge a 200 body of /v1/embeddings: GW_OUT_OK, GW_OUT_BAD_BODY (not JSON, no "data" array) or
 * GW_OUT_EMPTY (no embeddings); *prompt_tokens from "usage" when present. */
gw_outcome gw_check_embeddings(const char *body, size_t n, long *prompt_tokens);

/* SSE framing (https://html.spec.whatwg.org/multipage/server-sent-events.html): bytes in, whole
 * events out. An event ends at a blank line (\n\n, \r\n\r\n or \r\r). */
typedef struct {
    api_buf in;  /* bytes not yet framed */
    size_t off; /* consumed prefix of in */
} gw_sse;
void gw_sse_feed(gw_sse *s, const void *data, size_t n);
/* Next complete event: its raw bytes (blank line included) into *raw (appended) and the
 * concatenated "data:" field values into *data (reset first). 1 if an event was taken, else 0. */
int gw_sse_next(gw_sse *s, api_buf *raw, api_buf *data);
void gw_sse_free(gw_sse *s);

/* What one streamed event carries (from its data payload). */
typedef struct {
    int done;          /* data: [DONE] */
    int is_json;
    int has_choice;    /* choices[0] present */
    int usage_only;    /* choices: [] with a usage object (stream_options.include_usage) */
    int is_error;      /* {"error": ...} */
    char finish[24];   /* choices[0].finish_reason, "" if null */
    long prompt_tokens, completion_tokens; /* from usage, -1 if absent */
} gw_event_info;
/* Parse one event's data. text (malloc'd, *text_len bytes, NUL-terminated, may be NULL when the
 * choice has no text) is choices[0].text or choices[0].delta.content. Returns 0, -1 if the data is
 * neither [DONE] nor JSON. */
int gw_event_parse(const char *data, size_t n, int chat, gw_event_info *ev, char **text,
                   size_t *text_len);

/* ---- guards: content rules and PII (gw_guard.c) -------------------------------------------------- */
typedef struct gw_rules gw_rules;

/* Compile the config's rules (PCRE2, UTF) and PII mode. NULL with err naming the rule and the
 * offset of a bad pattern. A config without rules or PII gives a valid, empty set. PII masking
 * without safety/pii.h in the build is an error that says so. */
gw_rules *gw_rules_new(const gw_config *c, char *err, size_t errlen);
void gw_rules_free(gw_rules *r);
/* 1 if anything applies to `on` (GW_ON_PROMPTS or GW_ON_COMPLETIONS). */
int gw_rules_active(const gw_rules *r, int on);
/* Longest window (bytes) of the rules for `on`, PII included: what a stream holds back. */
size_t gw_rules_window(const gw_rules *r, int on);
/* Apply to a whole text: block rules first (return 1, *rule = the rule's name, *out untouched
 * beyond the text before the match: *block_at), then redactions and PII masks into *out
 * (appended). Returns 0 when not blocked. */
int gw_rules_apply(const gw_rules *r, int on, const char *text, size_t n, api_buf *out,
                   const char **rule, size_t *block_at);

/* The streaming filter for completions. Text arrives in pieces; what it releases has passed every
 * rule. It holds back the last (window - 1) bytes, so a match of up to `window` bytes split across
 * pieces is still seen whole; matches are judged with up to `window` bytes of already-released
 * text before them as context (\b and lookbehind work across the boundary). */
typedef struct {
    const gw_rules *r;
    size_t window;
    api_buf pend;    /* not yet released */
    api_buf ctx;     /* the last released bytes (≤ window), context for the next scan */
    int blocked;
    const char *rule; /* the blocking rule */
} gw_filter;
void gw_filter_init(gw_filter *f, const gw_rules *r);
/* Push text (final = 1 at the end of the stream: everything left is released). Released text is
 * appended to *out. Returns 1 once a block rule matched (nothing from the match on is released,
 * later pushes release nothing). */
int gw_filter_push(gw_filter *f, const char *text, size_t n, int final, api_buf *out);
void gw_filter_free(gw_filter *f);

/* ---- the gateway process (gw_gateway.c) ---------------------------------------------------------- */
typedef struct gw_gateway gw_gateway;

/* Open the keys db and limiter, compile the rules, start the active health thread and listen.
 * c is copied. NULL with one line in err (cannot bind, bad keys db, Redis unreachable, ...). */
gw_gateway *gw_gateway_start(const gw_config *c, char *err, size_t errlen);
int gw_gateway_port(const gw_gateway *g);
/* Stop listening, finish or cancel every request, join every thread, free. */
void gw_gateway_stop(gw_gateway *g);

#endif /* MT_GATEWAY_GW_PROXY_H */
