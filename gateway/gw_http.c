/*
 * gateway/gw_http.c — the gateway's HTTP side (libmicrohttpd): one client request from MHD's first
 * call to its completion. The daemon, the health thread and start/stop are gw_gateway.c's.
 *
 * Why it is shaped so:
 *   - Like `serve` (serve/server.c), MHD runs one thread per connection, and that thread runs
 *     the whole exchange, upstream transfers included (gw_route.c): blocking code, bounded by
 *     MHD's connection limit, with no hand-off between threads on the hot path.
 *   - Everything decidable from the headers is decided on MHD's first call, before the body is
 *     read: the path (404), authentication (401, gw_keys_check), role (403), method (405) and a
 *     Content-Length over max_body (413). The body is then parsed once (cJSON); the model, the
 *     key's model list, the max_tokens cap and the prompt guards are checked before the rate
 *     limiter reserves anything, so a refused request costs the key nothing.
 *   - The reservation is settled with the upstream's reported usage when the answer went out
 *     complete, and released in every other case (error, upstream failure, client gone) — in the
 *     request-completed callback, which MHD calls exactly once per request whatever happened.
 *   - /health needs no key (load balancers probe it); /metrics and /v1/models need a key of any
 *     role, inference needs user or admin, /admin/keys is gw_keys.c's (it enforces admin).
 *   - Privacy: the access log holds ids, counts, statuses and timings — never a prompt, a
 *     completion or a key (only the key's public id).
 */
#define _GNU_SOURCE /* strcasestr */
#include "gateway/gw_impl.h"
#include "serve/api.h"
#include "core/timer.h"
#include "core/utf8.h"

#include <ctype.h>
#include <math.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

enum { EP_HEALTH, EP_METRICS, EP_MODELS, EP_COMPLETIONS, EP_CHAT, EP_EMBEDDINGS, EP_ADMIN,
       EP_OTHER };

/* Per-request state (MHD's con_cls). */
typedef struct {
    int ep;
    char method[8];
    char path[160];
    char model_id[128]; /* GET /v1/models/ID */
    api_buf body;
    int too_large;
    size_t discarded;
    double t0;
    int status;         /* the status queued, 0 = none yet */
    gw_key_info key;
    int have_key;
    gw_exchange x;
    int have_x;
    gw_admission adm;
    int have_res;       /* a reservation to settle or release */
    long reserved;      /* its tokens */
    int cacheable;      /* its answer may go into the response cache under ckey */
    unsigned char ckey[32];
    atomic_int refs;    /* the request + (when streaming) the response */
    char req_id[48];
} conn;

static void conn_unref(conn *cc) {
    if (atomic_fetch_sub(&cc->refs, 1) != 1) return;
    if (cc->have_x) gw_exchange_free(&cc->x);
    api_buf_free(&cc->body);
    free(cc);
}

/* ---- replies ----------------------------------------------------------------------------------- */

static void ratelimit_headers(conn *cc, struct MHD_Response *r) {
    if (!cc->have_key) return;
    char v[32];
    if (cc->adm.limit_requests > 0) {
        snprintf(v, sizeof(v), "%ld", cc->adm.limit_requests);
        MHD_add_response_header(r, "x-ratelimit-limit-requests", v);
        snprintf(v, sizeof(v), "%ld", cc->adm.remaining_requests);
        MHD_add_response_header(r, "x-ratelimit-remaining-requests", v);
    }
    if (cc->adm.limit_tokens > 0) {
        snprintf(v, sizeof(v), "%ld", cc->adm.limit_tokens);
        MHD_add_response_header(r, "x-ratelimit-limit-tokens", v);
        snprintf(v, sizeof(v), "%ld", cc->adm.remaining_tokens);
        MHD_add_response_header(r, "x-ratelimit-remaining-tokens", v);
    }
}

/* the endpoints that call a model: POST with a JSON body, proxied upstream */
static int is_model_call(int ep) {
    return ep == EP_COMPLETIONS || ep == EP_CHAT || ep == EP_EMBEDDINGS;
}

/* Queue body (ownership taken). retry_after: "" or NULL = none. */
static enum MHD_Result reply(conn *cc, struct MHD_Connection *c, int status, const char *ctype,
                             api_buf *body, const char *retry_after) {
    struct MHD_Response *r = api_response(body, ctype);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "x-request-id", cc->req_id);
    if (retry_after && *retry_after) MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER,
                                                             retry_after);
    if (status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == 405)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW,
                                is_model_call(cc->ep) ? "POST"
                                : cc->ep == EP_ADMIN ? "GET, POST, PATCH, DELETE"
                                                     : "GET, HEAD");
    ratelimit_headers(cc, r);
    return api_queue(c, status, r, &cc->status);
}

static enum MHD_Result reply_json(conn *cc, struct MHD_Connection *c, int status, api_buf *b,
                                  const char *retry_after) {
    return reply(cc, c, status, "application/json", b, retry_after);
}

static enum MHD_Result fail(conn *cc, struct MHD_Connection *c, int status, const char *type,
                            const char *param, const char *code, const char *retry_after,
                            const char *fmt, ...) MT_PRINTF(8, 9);
static enum MHD_Result fail(conn *cc, struct MHD_Connection *c, int status, const char *type,
                            const char *param, const char *code, const char *retry_after,
                            const char *fmt, ...) {
    api_error e;
    va_list ap;
    va_start(ap, fmt);
    api_vfail(&e, status, type, param, code, fmt, ap);
    va_end(ap);
    api_buf b = {0};
    api_error_json(&b, &e);
    return reply_json(cc, c, status, &b, retry_after);
}

/* ---- helpers ------------------------------------------------------------------------------------ */

static int route_of(const char *url, char *model_id, size_t cap) {
    model_id[0] = 0;
    if (!strcmp(url, "/health")) return EP_HEALTH;
    if (!strcmp(url, "/metrics")) return EP_METRICS;
    if (!strcmp(url, "/v1/models")) return EP_MODELS;
    if (!strncmp(url, "/v1/models/", 11) && url[11]) {
        snprintf(model_id, cap, "%s", url + 11);
        return EP_MODELS;
    }
    if (!strcmp(url, "/v1/completions")) return EP_COMPLETIONS;
    if (!strcmp(url, "/v1/chat/completions")) return EP_CHAT;
    if (!strcmp(url, "/v1/embeddings")) return EP_EMBEDDINGS;
    if (!strncmp(url, "/admin/", 7)) return EP_ADMIN; /* gw_admin_handle knows its paths */
    return EP_OTHER;
}

static int find_route(gw_gateway *g, const char *name) {
    for (int r = 0; r < g->cfg.n_routes; r++)
        if (!strcmp(g->cfg.routes[r].name, name)) return r;
    return -1;
}

/* the client's X-Request-Id when it is tame, else a fresh one */
static void request_id(gw_gateway *g, struct MHD_Connection *c, char *out, size_t cap) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Request-Id");
    size_t n = h ? strlen(h) : 0;
    int ok = n > 0 && n < 41;
    for (size_t i = 0; ok && i < n; i++)
        ok = isalnum((unsigned char)h[i]) || h[i] == '-' || h[i] == '_' || h[i] == '.';
    if (ok) {
        snprintf(out, cap, "%s", h);
        return;
    }
    pthread_mutex_lock(&g->rng_mu);
    uint64_t v = rng_u64(&g->rng);
    pthread_mutex_unlock(&g->rng_mu);
    snprintf(out, cap, "gw-%016llx", (unsigned long long)v);
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* ---- GET endpoints ------------------------------------------------------------------------------- */

static int healthy_routes(gw_gateway *g) {
    int n = 0;
    for (int r = 0; r < g->cfg.n_routes; r++) n += gw_route_available(g, r) > 0;
    return n;
}

static enum MHD_Result handle_get(gw_gateway *g, conn *cc, struct MHD_Connection *c) {
    api_buf b = {0};
    if (cc->ep == EP_HEALTH) {
        int n = healthy_routes(g);
        cJSON *h = cJSON_CreateObject();
        cJSON_AddStringToObject(h, "status", n ? "ok" : "unavailable");
        cJSON *models = cJSON_AddObjectToObject(h, "models");
        for (int r = 0; r < g->cfg.n_routes; r++)
            cJSON_AddNumberToObject(models, g->cfg.routes[r].name, gw_route_available(g, r));
        api_buf_put_json(&b, h);
        return reply_json(cc, c, n ? 200 : 503, &b, n ? NULL : "1");
    }
    if (cc->ep == EP_METRICS) {
        gw_metrics_render(g, &b);
        return reply(cc, c, 200, "text/plain; version=0.0.4; charset=utf-8", &b, NULL);
    }
    /* /v1/models: the public names this key may call */
    int one = cc->model_id[0] != 0;
    cJSON *data = cJSON_CreateArray();
    for (int r = 0; r < g->cfg.n_routes; r++) {
        const char *name = g->cfg.routes[r].name;
        if (cc->have_key && !gw_key_allows_model(&cc->key, name)) continue;
        if (one && strcmp(name, cc->model_id)) continue;
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "id", name);
        cJSON_AddStringToObject(m, "object", "model");
        cJSON_AddNumberToObject(m, "created", (double)g->started);
        cJSON_AddStringToObject(m, "owned_by", "minitrain");
        cJSON_AddItemToArray(data, m);
    }
    if (one && cJSON_GetArraySize(data) == 0) {
        cJSON_Delete(data);
        return fail(cc, c, 404, "invalid_request_error", "model", "model_not_found", NULL,
                    "The model '%.64s' does not exist", cc->model_id);
    }
    if (one) {
        api_buf_put_json(&b, cJSON_DetachItemFromArray(data, 0));
        cJSON_Delete(data);
    } else {
        cJSON *list = cJSON_CreateObject();
        cJSON_AddStringToObject(list, "object", "list");
        cJSON_AddItemToObject(list, "data", data);
        api_buf_put_json(&b, list);
    }
    return reply_json(cc, c, 200, &b, NULL);
}

/* ---- POST /v1/completions and /v1/chat/completions ------------------------------------------------- */

/* bytes of prompt text: what a request reserves for its prompt (exact for byte-level tokenizers,
 * an over-estimate for BPE; the settle after the answer charges the real usage) */
static long prompt_size(const cJSON *req, int chat, int embeddings) {
    long n = 0;
    const cJSON *it;
    if (!chat) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(req, embeddings ? "input" : "prompt");
        if (cJSON_IsString(p)) return (long)strlen(p->valuestring);
        cJSON_ArrayForEach(it, p) {
            if (cJSON_IsString(it)) n += (long)strlen(it->valuestring);
            else if (cJSON_IsNumber(it)) n++;
            else if (cJSON_IsArray(it)) n += cJSON_GetArraySize(it);
        }
        return n;
    }
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(req, "messages")) {
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (cJSON_IsString(content)) n += (long)strlen(content->valuestring) + 16;
        cJSON_ArrayForEach(it, content) {
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(it, "text");
            if (cJSON_IsString(t)) n += (long)strlen(t->valuestring);
        }
    }
    return n;
}

/* max_tokens under the gateway's cap and the key's, whichever is smaller: *max_tokens is what
 * the request reserves. Returns 1 when it answered the request (400; *answered = MHD's result). */
static int cap_max_tokens(gw_gateway *g, conn *cc, struct MHD_Connection *c, cJSON *req, int chat,
                          long *max_tokens, enum MHD_Result *answered) {
    const char *mt_name = "max_tokens";
    cJSON *mt = cJSON_GetObjectItemCaseSensitive(req, "max_tokens");
    if (!mt && chat) {
        mt = cJSON_GetObjectItemCaseSensitive(req, "max_completion_tokens");
        if (mt) mt_name = "max_completion_tokens";
    }
    long cap = g->cfg.pol.max_tokens;
    if (cc->have_key && cc->key.max_tokens > 0 && (cap == 0 || cc->key.max_tokens < cap))
        cap = cc->key.max_tokens;
    *max_tokens = g->cfg.pol.default_max_tokens;
    if (mt && !cJSON_IsNull(mt)) {
        if (!cJSON_IsNumber(mt) || mt->valuedouble < 1 || mt->valuedouble != floor(mt->valuedouble)) {
            *answered = fail(cc, c, 400, "invalid_request_error", mt_name, "invalid_value", NULL,
                             "'%s' must be an integer >= 1", mt_name);
            return 1;
        }
        *max_tokens = (long)mt->valuedouble;
        if (cap > 0 && *max_tokens > cap) {
            *answered = fail(cc, c, 400, "invalid_request_error", mt_name, "max_tokens_too_large",
                             NULL, "'%s' = %ld is over this %s's cap of %ld", mt_name, *max_tokens,
                             cap == g->cfg.pol.max_tokens ? "gateway" : "key", cap);
            return 1;
        }
    } else if (cap > 0) { /* no max_tokens under a cap: send one, so the cap holds upstream */
        if (*max_tokens > cap) *max_tokens = cap;
        cJSON_AddNumberToObject(req, "max_tokens", (double)*max_tokens);
    }
    return 0;
}

static enum MHD_Result stream_reply(gw_gateway *g, conn *cc, struct MHD_Connection *c);

/* The client's Cache-Control says no-cache or no-store (RFC 9111 §5.2.1): the response cache is
 * neither read nor written for this request. */
static int client_no_cache(struct MHD_Connection *c) {
    const char *cc = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CACHE_CONTROL);
    return cc && (strcasestr(cc, "no-cache") || strcasestr(cc, "no-store"));
}

/* cc's exchange for the parsed body `req` (taken over): ids, clock, client socket, and every
 * "none yet" field set to -1. */
static gw_exchange *exchange_begin(gw_gateway *g, conn *cc, struct MHD_Connection *c,
                                   cJSON *req) {
    gw_exchange *x = &cc->x;
    memset(x, 0, sizeof(*x));
    x->req = req;
    cc->have_x = 1;
    x->g = g;
    x->chat = cc->ep == EP_CHAT;
    x->t0 = cc->t0;
    x->client_fd = conn_fd(c);
    /* "none yet", not index 0 / zero: a request refused before routing (403, 404) reached no
     * upstream and has no usage or first token; the access log and metrics read these */
    x->route = x->upstream = -1;
    x->ttft = -1;
    x->prompt_tokens = x->completion_tokens = -1;
    snprintf(x->req_id, sizeof(x->req_id), "%s", cc->req_id);
    if (cc->have_key) snprintf(x->key_id, sizeof(x->key_id), "%s", cc->key.id);
    return x;
}

/* The key's rate limits (gw_limit.h): reserves prompt + max_tokens tokens, one request and one
 * slot. Returns 0 when admitted (cc holds the reservation), else 1 with the 400/429/503 answered
 * into *answered. */
static int reserve_rate(gw_gateway *g, conn *cc, struct MHD_Connection *c, const cJSON *req,
                        int chat, long max_tokens, enum MHD_Result *answered) {
    long tokens = prompt_size(req, chat, cc->x.embeddings) + max_tokens;
    int lr = gw_limiter_reserve(g->lim, &cc->key, tokens, &cc->adm);
    if (lr == GW_LIMIT_TOO_LARGE) {
        *answered = fail(cc, c, 400, "invalid_request_error", "max_tokens", "request_too_large",
                         NULL, "this request reserves %ld tokens (prompt + max_tokens), more than "
                         "the key's limit of %ld tokens per minute", tokens, cc->adm.limit_tokens);
        return 1;
    }
    /* Redis down: with redis_fail = closed the limiter refuses (503); with open it decided
     * on this process's own buckets, and an empty one is an ordinary 429 */
    int fell_back = lr == GW_LIMIT_UNAVAILABLE && gw_limiter_fails_open(g->lim);
    if (lr == GW_LIMIT_UNAVAILABLE && !fell_back && !cc->adm.admitted) {
        *answered = fail(cc, c, 503, "server_error", NULL, "rate_limiter_unavailable", "1",
                         "the rate limiter is unavailable (Redis down, redis_fail = closed); "
                         "retry later");
        return 1;
    }
    if (!cc->adm.admitted) {
        gw_metrics_rate_limited(&g->mx, cc->key.id);
        char ra[32];
        snprintf(ra, sizeof(ra), "%d",
                 (int)ceil(cc->adm.retry_after_s > 0 ? cc->adm.retry_after_s : 1));
        *answered = fail(cc, c, 429, "rate_limit_error", NULL, "rate_limit_exceeded", ra,
                         "rate limit reached for this key (requests/min, tokens/min or concurrent "
                         "requests)%s; retry after %s s", fell_back ? " on this gateway's own "
                         "buckets (Redis down, redis_fail = open)" : "", ra);
        return 1;
    }
    cc->have_res = 1;
    cc->reserved = tokens;
    return 0;
}

/* A whole (not streamed) upstream answer to the client, as valid UTF-8, into the cache when
 * it may go there. */
static enum MHD_Result reply_upstream(gw_gateway *g, conn *cc, struct MHD_Connection *c) {
    gw_exchange *x = &cc->x;
    api_buf b = x->body;
    memset(&x->body, 0, sizeof(x->body));
    if (b.len && !utf8_valid((const uint8_t *)b.p, b.len)) { /* an upstream's bytes: as
                                                                    serve's own, valid UTF-8 */
        api_buf v = {0};
        api_buf_put_utf8(&v, (const uint8_t *)b.p, b.len);
        api_buf_free(&b);
        b = v;
    }
    if (cc->cacheable && x->status == 200) gw_cache_put(g->cache, cc->ckey, b.p, b.len);
    return reply_json(cc, c, x->status, &b, x->retry_after);
}

static enum MHD_Result handle_inference(gw_gateway *g, conn *cc, struct MHD_Connection *c) {
    int chat = cc->ep == EP_CHAT;
    cJSON *req = cJSON_ParseWithLength(cc->body.p ? cc->body.p : "", cc->body.len);
    api_buf_free(&cc->body);
    if (!cJSON_IsObject(req)) {
        cJSON_Delete(req);
        return fail(cc, c, 400, "invalid_request_error", NULL, "invalid_json", NULL,
                    "the request body is not a JSON object");
    }
    gw_exchange *x = exchange_begin(g, cc, c, req);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(req, "model");
    if (!cJSON_IsString(model))
        return fail(cc, c, 400, "invalid_request_error", "model", "missing_model", NULL,
                    "'model' (a string) is required");
    x->route = find_route(g, model->valuestring);
    if (x->route < 0 || (cc->have_key && !gw_key_allows_model(&cc->key, model->valuestring))) {
        int known = x->route >= 0;
        x->route = -1;
        if (known)
            return fail(cc, c, 403, "permission_error", "model", "model_not_allowed", NULL,
                        "this key may not use model '%.64s'", model->valuestring);
        return fail(cc, c, 404, "invalid_request_error", "model", "model_not_found", NULL,
                    "The model '%.64s' does not exist (GET /v1/models lists them)",
                    model->valuestring);
    }
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(req, "stream");
    x->embeddings = cc->ep == EP_EMBEDDINGS;
    x->stream = !x->embeddings && cJSON_IsTrue(st);
    const cJSON *inc = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(req, "stream_options"), "include_usage");
    x->client_usage = cJSON_IsTrue(inc);
    const char *idem = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Idempotent");
    x->no_hedge = idem && (!strcasecmp(idem, "false") || !strcmp(idem, "0"));
    long max_tokens = 0; /* an embedding generates nothing */
    enum MHD_Result answered;
    if (!x->embeddings && cap_max_tokens(g, cc, c, req, chat, &max_tokens, &answered))
        return answered;
    int changed;
    const char *rule;
    if (gw_guard_prompt(g->rules, req, x->embeddings ? 2 : chat, &changed, &rule)) {
        pthread_mutex_lock(&g->mx.mu);
        g->mx.blocked_prompts++;
        pthread_mutex_unlock(&g->mx.mu);
        gw_log(g, "req=%s prompt refused by content rule '%s'", cc->req_id, rule);
        return fail(cc, c, 400, "invalid_request_error", NULL, "content_policy_violation", NULL,
                    "the request was refused by the gateway's content policy (rule '%s')", rule);
    }
    if (g->lim && cc->have_key && reserve_rate(g, cc, c, req, chat, max_tokens, &answered))
        return answered;
    if (g->ledger && cc->have_key) {
        api_error e;
        char ra[32] = "";
        if (gw_spend_reserve(x, &cc->key, model->valuestring, prompt_size(req, chat, x->embeddings),
                             max_tokens, &e, ra, sizeof(ra))) {
            api_buf b = {0};
            api_error_json(&b, &e);
            return reply_json(cc, c, e.status, &b, ra);
        }
    }
    if (g->cache && gw_cache_eligible(req, x->embeddings) && !client_no_cache(c)) {
        api_buf hit = {0};
        gw_cache_key(g->cfg.routes[x->route].name, g->cfg.cache_shared ? "" : x->key_id,
                     x->embeddings ? 2 : chat, req, cc->ckey);
        if (gw_cache_get(g->cache, cc->ckey, &hit)) {
            x->cached = 1;
            x->ttft = -1;
            x->upstream = -1;
            x->prompt_tokens = x->completion_tokens = 0; /* nothing charged */
            return reply(cc, c, 200, x->stream ? "text/event-stream" : "application/json", &hit,
                         NULL);
        }
        cc->cacheable = 1;
        x->capture = x->stream;
    }
    int rc = gw_proxy_run(x);
    if (rc < 0) return MHD_NO; /* the client is gone: nobody to answer */
    if (rc == 1) return stream_reply(g, cc, c);
    return reply_upstream(g, cc, c);
}

static ssize_t stream_cb(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    conn *cc = cls;
    long n = gw_stream_read(&cc->x, buf, max);
    if (n > 0) return (ssize_t)n;
    return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void stream_free(void *cls) { conn_unref(cls); }

static enum MHD_Result stream_reply(gw_gateway *g, conn *cc, struct MHD_Connection *c) {
    (void)g;
    atomic_fetch_add(&cc->refs, 1);
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_cb, cc, stream_free);
    if (!r) {
        conn_unref(cc);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "x-request-id", cc->req_id);
    ratelimit_headers(cc, r);
    return api_queue(c, 200, r, &cc->status);
}

/* ---- /admin/keys ------------------------------------------------------------------------------------- */

/* MHD_KeyValueIterator: append "?k=v" / "&k=v" (MHD has already decoded them) */
static enum MHD_Result query_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value) {
    (void)kind;
    api_buf *url = cls;
    api_buf_printf(url, "%c%s=%s", strchr(url->p, '?') ? '&' : '?', key, value ? value : "");
    return MHD_YES;
}

static enum MHD_Result handle_admin(gw_gateway *g, conn *cc, struct MHD_Connection *c) {
    if (!g->keys)
        return fail(cc, c, 404, "invalid_request_error", NULL, "admin_disabled", NULL,
                    "the admin API needs a keys database (start the gateway with --keys-db)");
    char *json = NULL;
    /* MHD hands the path without its query: give gw_admin_handle the whole URL back, or
     * `?limit=-1` never reaches the check that refuses it */
    api_buf url = {0};
    api_buf_puts(&url, cc->path);
    MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, query_arg, &url);
    int status = gw_admin_handle(g->keys, &cc->key, cc->method, url.p,
                                 cc->body.p ? cc->body.p : "", cc->body.len, &json);
    api_buf_free(&url);
    api_buf b = {0};
    if (json) api_buf_puts(&b, json);
    free(json);
    return reply_json(cc, c, status, &b, NULL);
}

/* ---- MHD callbacks -------------------------------------------------------------------------------------- */

static enum MHD_Result first_call(gw_gateway *g, conn *cc, struct MHD_Connection *c,
                                  const char *url, const char *method) {
    cc->ep = route_of(url, cc->model_id, sizeof(cc->model_id));
    if (cc->ep == EP_OTHER)
        return fail(cc, c, 404, "invalid_request_error", NULL, "unknown_url", NULL,
                    "unknown path %.64s (endpoints: POST /v1/completions, POST "
                    "/v1/chat/completions, POST /v1/embeddings, GET /v1/models, GET /health, "
                    "GET /metrics, "
                    "/admin/...)", url);
    int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (cc->ep != EP_HEALTH && g->keys) {
        const char *auth =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
        int a = gw_keys_check(g->keys, auth, &cc->key);
        if (a == GW_AUTH_UNAVAILABLE)
            return fail(cc, c, 503, "server_error", NULL, "keys_unavailable", "1",
                        "the key database cannot be read right now; retry shortly");
        if (a != GW_AUTH_OK) {
            const char *why = a == GW_AUTH_MISSING   ? "no API key (send 'Authorization: Bearer KEY')"
                              : a == GW_AUTH_EXPIRED ? "this API key has expired"
                              : a == GW_AUTH_DISABLED ? "this API key is disabled"
                                                      : "incorrect API key";
            return fail(cc, c, 401, "invalid_request_error", NULL, "invalid_api_key", NULL, "%s",
                        why);
        }
        cc->have_key = 1;
    }
    if (cc->ep == EP_ADMIN) {
        /* the methods of each admin path are gw_admin_handle's to allow (PATCH /admin/keys/ID
         * was documented and handled there, and refused here by a second, shorter list) */
    } else if (is_model_call(cc->ep)) {
        if (strcmp(method, "POST"))
            return fail(cc, c, 405, "invalid_request_error", NULL, "method_not_allowed", NULL,
                        "method %.16s is not allowed on %s", method, url);
        if (cc->have_key && !gw_key_can_generate(&cc->key))
            return fail(cc, c, 403, "permission_error", NULL, "insufficient_role", NULL,
                        "a viewer key may not call models (needs role user or admin)");
    } else {
        if (!is_get)
            return fail(cc, c, 405, "invalid_request_error", NULL, "method_not_allowed", NULL,
                        "method %.16s is not allowed on %s", method, url);
        return handle_get(g, cc, c);
    }
    const char *cl =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > (unsigned long long)g->cfg.pol.max_body)
        return fail(cc, c, 413, "invalid_request_error", NULL, "request_too_large", NULL,
                    "the request body is %s bytes; the limit is %zu (max_body)", cl,
                    g->cfg.pol.max_body);
    return MHD_YES; /* MHD reads the body now */
}

enum MHD_Result gw_http_on_request(void *cls, struct MHD_Connection *c, const char *url,
                                   const char *method, const char *version,
                                   const char *upload_data, size_t *upload_data_size,
                                   void **con_cls) {
    (void)version;
    gw_gateway *g = cls;
    conn *cc = *con_cls;
    if (!cc) {
        cc = callocCheck(1, sizeof(conn));
        atomic_init(&cc->refs, 1);
        *con_cls = cc;
        cc->t0 = timer_now();
        snprintf(cc->method, sizeof(cc->method), "%s", method);
        snprintf(cc->path, sizeof(cc->path), "%s", url);
        request_id(g, c, cc->req_id, sizeof(cc->req_id));
        return first_call(g, cc, c, url, method);
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        return api_body_take(&cc->body, &cc->too_large, &cc->discarded, upload_data, n,
                            (size_t)g->cfg.pol.max_body) ? MHD_YES : MHD_NO;
    }
    if (cc->status) return MHD_YES;
    if (cc->too_large)
        return fail(cc, c, 413, "invalid_request_error", NULL, "request_too_large", NULL,
                    "the request body is over the limit of %zu bytes (max_body)",
                    g->cfg.pol.max_body);
    if (cc->ep == EP_ADMIN) return handle_admin(g, cc, c);
    return handle_inference(g, cc, c);
}

void gw_http_on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                          enum MHD_RequestTerminationCode toe) {
    (void)c;
    gw_gateway *g = cls;
    conn *cc = *con_cls;
    if (!cc) return;
    *con_cls = NULL;
    double now = timer_now();
    int ok = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK;
    int status = ok ? cc->status : 499; /* nginx's "client closed request" */
    gw_exchange *x = &cc->x;
    int route = cc->have_x ? x->route : -1;
    int upstream = cc->have_x ? x->upstream : -1;
    int complete = ok && status == 200 && (!x->committed || x->phase == GW_PH_END);
    if (cc->have_res) {
        if (complete) {
            long used = 0; /* the upstream's usage; without one, the whole reservation */
            if (x->prompt_tokens > 0) used += x->prompt_tokens;
            if (x->completion_tokens > 0) used += x->completion_tokens;
            if (x->prompt_tokens < 0 && x->completion_tokens < 0) used = cc->reserved;
            gw_limiter_settle(g->lim, cc->adm.reservation, used);
        } else {
            gw_limiter_release(g->lim, cc->adm.reservation);
        }
        pthread_mutex_lock(&g->mx.mu);
        if (complete) g->mx.settled++;
        else g->mx.released++;
        pthread_mutex_unlock(&g->mx.mu);
    }
    if (cc->have_x && x->spend_active) gw_spend_settle(x, complete);
    if (cc->cacheable && complete && x->committed && x->finished && x->capture)
        gw_cache_put(g->cache, cc->ckey, x->captured.p, x->captured.len);
    if (cc->have_x && x->committed && !ok) { /* the client left a stream: upstream cancelled below */
        pthread_mutex_lock(&g->mx.mu);
        g->mx.stream_cancelled++;
        pthread_mutex_unlock(&g->mx.mu);
    }
    if (status >= 100 && (is_model_call(cc->ep) || cc->ep == EP_ADMIN))
        gw_metrics_request(&g->mx, cc->have_key ? cc->key.id : "", route, upstream, status);
    if (route >= 0 && complete) {
        pthread_mutex_lock(&g->mx.mu);
        gw_metrics_observe(&g->mx.latency[route], now - cc->t0);
        if (x->ttft >= 0) gw_metrics_observe(&g->mx.ttft[route], x->ttft);
        if (x->prompt_tokens > 0) g->mx.tokens_in[route] += (uint64_t)x->prompt_tokens;
        if (x->completion_tokens > 0) g->mx.tokens_out[route] += (uint64_t)x->completion_tokens;
        if (!x->cached)
            gw_metrics_tokens(&g->mx, route, cc->have_key ? (int)cc->key.role : -1,
                              x->prompt_tokens, x->completion_tokens);
        pthread_mutex_unlock(&g->mx.mu);
    }
    if (!g->cfg.quiet && (is_model_call(cc->ep) || cc->ep == EP_ADMIN)) {
        char ttft[32] = "";
        if (cc->have_x && x->ttft >= 0) snprintf(ttft, sizeof(ttft), " ttft_ms=%.1f", 1e3 * x->ttft);
        fprintf(stderr, "minitrain: gateway: req=%s key=%s %s %s model=%s status=%d upstream=%s "
                        "attempts=%s stream=%d tokens=%ld/%ld ms=%.3f%s%s\n",
                cc->req_id, cc->have_key ? cc->key.id : "-", cc->method, cc->path,
                route >= 0 ? g->cfg.routes[route].name : "-", status,
                upstream >= 0 ? g->cfg.up[upstream].name : "-",
                cc->have_x && x->log.len ? x->log.p : "-", cc->have_x ? x->stream : 0,
                cc->have_x ? x->prompt_tokens : -1, cc->have_x ? x->completion_tokens : -1,
                1e3 * (now - cc->t0), ttft, cc->have_x && x->cached ? " cache=hit" : "");
    }
    if (cc->have_x) { /* give back the upstream call (a cut stream: cancelled upstream) now */
        gw_exchange_free(x);
        cc->have_x = 0;
    }
    conn_unref(cc);
}
