/*
 * serve/server.c — the HTTP side of `minitrain serve`, on libmicrohttpd (MHD 0.9.7x).
 *
 * Why it is shaped so:
 *   - MHD runs one thread per connection (MHD_USE_THREAD_PER_CONNECTION): a connection thread may
 *     block while its job waits for a slot or generates, without stalling other clients, and MHD
 *     still enforces --timeout (MHD_OPTION_CONNECTION_TIMEOUT) on idle and stalled connections.
 *   - Every decision that needs no body is taken on the FIRST access-handler call, before MHD
 *     reads the body: authentication (401), unknown path (404), wrong method (405) and a
 *     Content-Length above --max-body (413). A chunked body is counted as it arrives; past the
 *     limit it is discarded (never buffered) and answered 413 when it ends (MHD cannot queue a
 *     response mid-upload), and the connection is dropped if it keeps going past 16× the limit.
 *   - Streaming (stream: true) is an MHD callback response: each call turns the next generated
 *     token into one server-sent event, waiting on the job in 100 ms steps.
 *   - A client that disconnects is noticed three ways: poll(POLLRDHUP) on its socket while we
 *     wait, a failed write (MHD stops calling the stream callback), and the request-completed
 *     callback with an error code. Each cancels the job, and the slot is free within one token.
 *   - Privacy: the access log carries counts and timings only; prompt and completion text appear
 *     in it only with --log-content. Error messages never quote the prompt.
 *   - /v1/chat/completions shares everything with /v1/completions but the parser (the chat
 *     template, api_chat.c) and the response shapes: a chat request is a completion request.
 *   - The test-only --fault-* flags act after a request parsed cleanly (a bad request is still a
 *     400: a gateway must never count the client's mistake against an upstream) and only on the
 *     two generation endpoints (/health stays truthful, so a gateway's active health checks see
 *     a healthy server that fails requests — the case passive outlier detection exists for).
 */
#define _GNU_SOURCE /* POLLRDHUP */
#include "serve/server.h"

#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <time.h>

#include "core/rng.h"

#define WAIT_STEP_S 0.1 /* how often a waiting connection re-checks its client */

struct srv_server {
    srv_opts o;
    struct MHD_Daemon *d;
    int port;
    atomic_int ready;
    const gpt_model *m;
    const tok_tokenizer *tok;
    int step;
    api_model_info mi;
    size_t max_token_bytes;
    srv_pool *pool;
    srv_metrics metrics;
    pthread_mutex_t id_mu;
    rng_state id_rng;
    long started;
    /* test-only faults (--fault-*): their own generator, so they repeat for a given seed */
    pthread_mutex_t fault_mu;
    rng_state fault_rng;
    unsigned long n_empty;
};

/* Per-request state (MHD's con_cls), freed in on_completed. */
typedef struct {
    int endpoint;
    char method[8];
    char path[96];
    api_buf body;
    int too_large;
    size_t discarded;
    double t0;
    int status;      /* status queued, 0 if none (connection dropped) */
    int stream;
    srv_job *job;     /* our reference, or NULL */
    char retry_after[16]; /* Retry-After of a 429/503 answer ("" = the default, 1 s) */
} conn_ctx;

/* State of one streamed response, owned by the MHD response (freed by stream_free). */
typedef struct {
    srv_server *s;
    srv_job *job; /* own reference */
    int fd;
    char id[40];
    long created;
    int next_tok;   /* tokens already turned into events */
    size_t emitted; /* raw bytes already sent */
    int phase;      /* see enum below */
    int chat;       /* chat.completion.chunk events (else text_completion) */
    int sent_role;  /* chat: the opening {"role":"assistant"} delta is out */
    api_buf out;
    size_t out_off;
} stream_state;

enum { PH_TOKENS, PH_USAGE, PH_DONE, PH_END, PH_ERROR };

/* ---- helpers ---------------------------------------------------------------------------------- */

static void new_id(srv_server *s, int chat, char *out, size_t cap) {
    pthread_mutex_lock(&s->id_mu);
    uint64_t a = rng_u64(&s->id_rng), b = rng_u64(&s->id_rng);
    pthread_mutex_unlock(&s->id_mu);
    snprintf(out, cap, "%s-%016llx%08llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)a,
             (unsigned long long)(b & 0xffffffffu));
}

/* The two generation endpoints (POST, with a body). */
static int is_generation(int endpoint) {
    return endpoint == SRV_EP_COMPLETIONS || endpoint == SRV_EP_CHAT;
}

static uint64_t new_seed(srv_server *s) {
    pthread_mutex_lock(&s->id_mu);
    uint64_t v = rng_u64(&s->id_rng);
    pthread_mutex_unlock(&s->id_mu);
    return v;
}

/* 1 if the peer closed its end (or the socket failed). Pending request bytes do not count. */
static int client_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd pf = {.fd = fd, .events = POLLRDHUP};
    if (poll(&pf, 1, 0) <= 0) return 0;
    return (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* Queue body (ownership taken) with status and up to one extra header. */
static enum MHD_Result reply(conn_ctx *cc, struct MHD_Connection *c, int status,
                             const char *ctype, api_buf *body, const char *hname,
                             const char *hval) {
    struct MHD_Response *r = api_response(body, ctype);
    if (r && hname) MHD_add_response_header(r, hname, hval);
    return api_queue(c, status, r, &cc->status);
}

static enum MHD_Result reply_error(conn_ctx *cc, struct MHD_Connection *c, const api_error *e) {
    api_buf b = {0};
    api_error_json(&b, e);
    const char *hn = NULL, *hv = NULL;
    if (e->status == 503 || e->status == 429)
        hn = MHD_HTTP_HEADER_RETRY_AFTER, hv = cc->retry_after[0] ? cc->retry_after : "1";
    if (e->status == 401) hn = MHD_HTTP_HEADER_WWW_AUTHENTICATE, hv = "Bearer";
    if (e->status == 405)
        hn = MHD_HTTP_HEADER_ALLOW, hv = is_generation(cc->endpoint) ? "POST" : "GET, HEAD";
    return reply(cc, c, e->status, "application/json", &b, hn, hv);
}

static enum MHD_Result reply_json(conn_ctx *cc, struct MHD_Connection *c, int status, api_buf *b) {
    return reply(cc, c, status, "application/json", b, NULL, NULL);
}

/* Constant-time comparison, so response timing does not reveal how much of a key matched. */
static int key_equal(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < la; i++) diff |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return diff == 0;
}

static int authorized(srv_server *s, struct MHD_Connection *c) {
    if (s->o.n_api_keys == 0) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (h == NULL || strncasecmp(h, "Bearer ", 7) != 0) return 0; /* scheme: RFC 7235 §2.1 */
    const char *key = h + 7;
    int ok = 0;
    for (int i = 0; i < s->o.n_api_keys; i++) ok |= key_equal(key, s->o.api_keys[i]);
    return ok;
}

static int route(const char *url, const char **model_id) {
    *model_id = NULL;
    if (!strcmp(url, "/v1/completions")) return SRV_EP_COMPLETIONS;
    if (!strcmp(url, "/v1/chat/completions")) return SRV_EP_CHAT;
    if (!strcmp(url, "/v1/models")) return SRV_EP_MODELS;
    if (!strncmp(url, "/v1/models/", 11) && url[11]) {
        *model_id = url + 11;
        return SRV_EP_MODELS;
    }
    if (!strcmp(url, "/health")) return SRV_EP_HEALTH;
    if (!strcmp(url, "/metrics")) return SRV_EP_METRICS;
    return SRV_EP_OTHER;
}

/* ---- GET endpoints ---------------------------------------------------------------------------- */

/* The /v1/models entry of the served model (OpenAI's model object plus its shape). */
static cJSON *model_object(srv_server *s) {
    const gpt_config *c = &s->m->cfg;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", s->o.model_name);
    cJSON_AddStringToObject(o, "object", "model");
    cJSON_AddNumberToObject(o, "created", (double)s->started);
    cJSON_AddStringToObject(o, "owned_by", "minitrain");
    cJSON_AddNumberToObject(o, "context_length", c->seq_len);
    cJSON_AddNumberToObject(o, "vocab_size", s->mi.n_vocab);
    cJSON_AddNumberToObject(o, "n_layer", c->n_layer);
    cJSON_AddNumberToObject(o, "n_head", c->n_head);
    cJSON_AddNumberToObject(o, "d_model", c->d_model);
    cJSON_AddNumberToObject(o, "step", s->step);
    return o;
}

static enum MHD_Result handle_get(srv_server *s, conn_ctx *cc, struct MHD_Connection *c,
                                  const char *model_id) {
    api_buf b = {0};
    api_error e;
    int ready = atomic_load(&s->ready);
    switch (cc->endpoint) {
    case SRV_EP_HEALTH: {
        cJSON *h = cJSON_CreateObject();
        cJSON_AddStringToObject(h, "status", ready ? "ok" : "loading");
        api_buf_put_json(&b, h);
        return reply_json(cc, c, ready ? 200 : 503, &b);
    }
    case SRV_EP_METRICS: {
        srv_gauges g = {.ready = ready, .slots_total = s->o.slots, .queue_capacity = s->o.queue};
        if (ready) srv_pool_stats(s->pool, &g.queue_depth, &g.slots_busy);
        srv_metrics_render(&s->metrics, &g, &b);
        return reply(cc, c, 200, "text/plain; version=0.0.4; charset=utf-8", &b, NULL, NULL);
    }
    default: /* models */
        if (!ready) {
            api_fail(&e, 503, "server_error", NULL, "model_loading", "the model is still loading");
            return reply_error(cc, c, &e);
        }
        if (model_id) {
            if (strcmp(model_id, s->o.model_name)) {
                api_fail(&e, 404, "invalid_request_error", "model", "model_not_found",
                        "The model '%.64s' does not exist", model_id);
                return reply_error(cc, c, &e);
            }
            api_buf_put_json(&b, model_object(s));
        } else {
            cJSON *list = cJSON_CreateObject();
            cJSON_AddStringToObject(list, "object", "list");
            cJSON_AddItemToArray(cJSON_AddArrayToObject(list, "data"), model_object(s));
            api_buf_put_json(&b, list);
        }
        return reply_json(cc, c, 200, &b);
    }
}

/* ---- streaming -------------------------------------------------------------------------------- */

/* Fill ss->out with the next event(s), waiting up to WAIT_STEP_S for a token. */
static void stream_produce(stream_state *ss) {
    srv_server *s = ss->s;
    srv_job *j = ss->job;
    const char *model = s->o.model_name;
    if (ss->phase == PH_USAGE) {
        if (ss->chat) api_chat_usage_sse(&ss->out, ss->id, ss->created, model, j->req.n_prompt, j->n_gen);
        else api_usage_sse(&ss->out, ss->id, ss->created, model, j->req.n_prompt, j->n_gen);
        ss->phase = PH_DONE;
        return;
    }
    if (ss->chat && !ss->sent_role) { /* OpenAI opens a chat stream with the role alone */
        api_chat_chunk_sse(&ss->out, ss->id, ss->created, model, 1, (const uint8_t *)"", 0, NULL);
        ss->sent_role = 1;
        return;
    }
    if (ss->phase == PH_DONE) {
        api_buf_puts(&ss->out, "data: [DONE]\n\n");
        ss->phase = PH_END;
        return;
    }
    int n_gen, done, finish;
    size_t len;
    srv_job_wait(s->pool, j, ss->next_tok, WAIT_STEP_S, &n_gen, &len, &done, &finish);
    if (client_gone(ss->fd) || (done && finish == SRV_FINISH_CANCELLED)) {
        srv_job_cancel(j);
        ss->phase = PH_ERROR;
        return;
    }
    while (ss->next_tok < n_gen) {
        /* one event per token: the text up to this token's end, less what must be held back
         * (the start of a possible stop sequence, an incomplete UTF-8 character) */
        size_t target = j->ends[ss->next_tok++];
        if (target > len) target = len;
        size_t safe = target - api_stop_holdback(&j->req, j->text, target);
        if (safe < ss->emitted) safe = ss->emitted;
        safe -= api_utf8_incomplete_tail(j->text + ss->emitted, safe - ss->emitted);
        if (safe > ss->emitted) {
            if (ss->chat)
                api_chat_chunk_sse(&ss->out, ss->id, ss->created, model, 0, j->text + ss->emitted,
                                  safe - ss->emitted, NULL);
            else
                api_chunk_sse(&ss->out, ss->id, ss->created, model, j->text + ss->emitted,
                             safe - ss->emitted, NULL);
            ss->emitted = safe;
            return;
        }
    }
    if (done) { /* the rest (held-back bytes, if any) with the finish reason */
        const char *fin = finish == SRV_FINISH_STOP ? "stop" : "length";
        if (!ss->chat) {
            api_chunk_sse(&ss->out, ss->id, ss->created, model, j->text + ss->emitted,
                         len - ss->emitted, fin);
        } else { /* the text, then an empty delta with the finish reason, as OpenAI does */
            if (len > ss->emitted)
                api_chat_chunk_sse(&ss->out, ss->id, ss->created, model, 0, j->text + ss->emitted,
                                  len - ss->emitted, NULL);
            api_chat_chunk_sse(&ss->out, ss->id, ss->created, model, 0, NULL, 0, fin);
        }
        ss->emitted = len;
        ss->phase = j->req.include_usage ? PH_USAGE : PH_DONE;
    }
}

static ssize_t stream_cb(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    stream_state *ss = cls;
    for (;;) {
        long n = api_buf_drain(&ss->out, &ss->out_off, buf, max);
        if (n >= 0) return (ssize_t)n;
        if (ss->phase == PH_END) return MHD_CONTENT_READER_END_OF_STREAM;
        if (ss->phase == PH_ERROR) return MHD_CONTENT_READER_END_WITH_ERROR;
        stream_produce(ss);
    }
}

static void stream_free(void *cls) {
    stream_state *ss = cls;
    srv_job_release(ss->job);
    api_buf_free(&ss->out);
    free(ss);
}

/* ---- test-only faults (--fault-*) ------------------------------------------------------------ */

enum { FAULT_NONE, FAULT_STATUS, FAULT_EMPTY };

/* Draw this request's fault. Always two draws, so the sequence of outcomes for a seed does not
 * depend on which faults are enabled. *variant alternates the two empty shapes. */
static int fault_draw(srv_server *s, int *variant) {
    if (s->o.fault_rate <= 0 && s->o.fault_empty <= 0) return FAULT_NONE;
    pthread_mutex_lock(&s->fault_mu);
    double u1 = rng_uniform(&s->fault_rng), u2 = rng_uniform(&s->fault_rng);
    int f = u1 < s->o.fault_rate ? FAULT_STATUS : u2 < s->o.fault_empty ? FAULT_EMPTY : FAULT_NONE;
    if (f == FAULT_EMPTY) *variant = (int)(s->n_empty++ % 2);
    pthread_mutex_unlock(&s->fault_mu);
    return f;
}

/* Sleep --fault-latency, watching the client. Returns 0, or -1 if the client left. */
static int fault_sleep(srv_server *s, int fd) {
    double until = api_now() + s->o.fault_latency_ms / 1000.0;
    for (double now = api_now(); now < until; now = api_now()) {
        if (client_gone(fd)) return -1;
        double left = until - now;
        struct timespec ts = {0, (long)(1e9 * (left < 0.01 ? left : 0.01))};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* A 200 that carries nothing: choices [] (variant 0) or one choice with empty content and no
 * finish_reason (variant 1); streamed, [DONE] alone or one such chunk then [DONE]. */
static enum MHD_Result reply_empty(srv_server *s, conn_ctx *cc, struct MHD_Connection *c,
                                   const api_request *req, int variant) {
    char id[40];
    new_id(s, req->chat, id, sizeof(id));
    long now = (long)time(NULL);
    const char *model = s->o.model_name;
    api_buf b = {0};
    if (req->stream) {
        if (variant == 1) {
            if (req->chat) api_chat_chunk_sse(&b, id, now, model, 1, (const uint8_t *)"", 0, NULL);
            else api_chunk_sse(&b, id, now, model, (const uint8_t *)"", 0, NULL);
        }
        api_buf_puts(&b, "data: [DONE]\n\n");
        return reply(cc, c, 200, "text/event-stream", &b, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    }
    if (variant == 1) {
        if (req->chat) api_chat_json(&b, id, now, model, (const uint8_t *)"", 0, NULL, req->n_prompt, 0);
        else api_completion_json(&b, id, now, model, (const uint8_t *)"", 0, NULL, req->n_prompt, 0);
    } else {
        cJSON *o = cJSON_CreateObject(); /* a completion with no choices at all */
        cJSON_AddStringToObject(o, "id", id);
        cJSON_AddStringToObject(o, "object", req->chat ? "chat.completion" : "text_completion");
        cJSON_AddNumberToObject(o, "created", (double)now);
        cJSON_AddStringToObject(o, "model", model);
        cJSON_AddArrayToObject(o, "choices");
        cJSON *u = cJSON_AddObjectToObject(o, "usage");
        cJSON_AddNumberToObject(u, "prompt_tokens", req->n_prompt);
        cJSON_AddNumberToObject(u, "completion_tokens", 0);
        cJSON_AddNumberToObject(u, "total_tokens", req->n_prompt);
        api_buf_put_json(&b, o);
    }
    return reply_json(cc, c, 200, &b);
}

/* Apply --fault-* to a valid request: MHD_YES/NO if it was answered (or dropped), -1 if it goes
 * on to be generated. */
static int apply_faults(srv_server *s, conn_ctx *cc, struct MHD_Connection *c, api_request *req) {
    if (s->o.fault_latency_ms > 0 && fault_sleep(s, conn_fd(c)) != 0) {
        api_request_free(req);
        return MHD_NO; /* the client left while we stalled */
    }
    int variant = 0;
    int f = fault_draw(s, &variant);
    if (f == FAULT_NONE) return -1;
    srv_metrics_fault(&s->metrics);
    enum MHD_Result q;
    if (f == FAULT_STATUS) {
        int st = s->o.fault_status;
        api_error e;
        snprintf(cc->retry_after, sizeof(cc->retry_after), "%d", s->o.fault_retry_after_s);
        api_fail(&e, st, st == 429 ? "rate_limit_error" : st >= 500 ? "server_error" : "invalid_request_error",
                NULL, "injected_fault", "injected fault: status %d (serve --fault-status, test only)", st);
        q = reply_error(cc, c, &e);
    } else {
        q = reply_empty(s, cc, c, req, variant);
    }
    api_request_free(req);
    return q;
}

/* ---- POST /v1/completions and /v1/chat/completions ------------------------------------------- */

static enum MHD_Result handle_completion(srv_server *s, conn_ctx *cc, struct MHD_Connection *c) {
    api_error e;
    if (!atomic_load(&s->ready)) {
        api_fail(&e, 503, "server_error", NULL, "model_loading", "the model is still loading");
        return reply_error(cc, c, &e);
    }
    api_request req;
    const char *body = cc->body.p ? cc->body.p : "";
    int bad = cc->endpoint == SRV_EP_CHAT ? api_parse_chat(body, cc->body.len, &s->mi, &req, &e)
                                         : api_parse_completion(body, cc->body.len, &s->mi, &req, &e);
    if (bad) return reply_error(cc, c, &e);
    api_buf_free(&cc->body);
    int fq = apply_faults(s, cc, c, &req);
    if (fq >= 0) return (enum MHD_Result)fq;
    if (!req.has_seed) req.seed = new_seed(s);
    srv_job *j = srv_job_create(&req, s->max_token_bytes);
    if (srv_pool_submit(s->pool, j) != 0) {
        srv_job_release(j);
        srv_metrics_queue_full(&s->metrics);
        api_fail(&e, 503, "server_error", NULL, "server_overloaded",
                "all %d generation slots are busy and the queue (%d) is full; retry later",
                s->o.slots, s->o.queue);
        return reply_error(cc, c, &e);
    }
    cc->job = j;
    cc->stream = j->req.stream;
    int chat = j->req.chat;
    int fd = conn_fd(c);
    if (j->req.stream) {
        stream_state *ss = callocCheck(1, sizeof(stream_state));
        ss->s = s;
        ss->job = j;
        srv_job_retain(j);
        ss->fd = fd;
        ss->chat = chat;
        new_id(s, chat, ss->id, sizeof(ss->id));
        ss->created = (long)time(NULL);
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_cb, ss, stream_free);
        if (r == NULL) {
            stream_free(ss);
            return MHD_NO;
        }
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        return api_queue(c, 200, r, &cc->status);
    }
    int done = 0, finish = 0, n_gen = 0;
    size_t len = 0;
    while (!done) {
        srv_job_wait(s->pool, j, 1 << 30, WAIT_STEP_S, &n_gen, &len, &done, &finish);
        if (!done && client_gone(fd)) {
            srv_job_cancel(j);
            return MHD_NO; /* nobody to answer; on_completed counts it as 499 */
        }
    }
    if (finish == SRV_FINISH_CANCELLED) {
        api_fail(&e, 503, "server_error", NULL, "server_stopping", "the server is shutting down");
        return reply_error(cc, c, &e);
    }
    char id[40];
    new_id(s, chat, id, sizeof(id));
    api_buf b = {0};
    const char *fin = finish == SRV_FINISH_STOP ? "stop" : "length";
    if (chat)
        api_chat_json(&b, id, (long)time(NULL), s->o.model_name, j->text, len, fin, j->req.n_prompt, n_gen);
    else
        api_completion_json(&b, id, (long)time(NULL), s->o.model_name, j->text, len, fin,
                           j->req.n_prompt, n_gen);
    return reply_json(cc, c, 200, &b);
}

/* ---- MHD callbacks ---------------------------------------------------------------------------- */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    (void)version;
    srv_server *s = cls;
    conn_ctx *cc = *con_cls;
    api_error e;
    if (cc == NULL) { /* first call: headers only */
        cc = callocCheck(1, sizeof(conn_ctx));
        *con_cls = cc;
        cc->t0 = api_now();
        snprintf(cc->method, sizeof(cc->method), "%s", method);
        snprintf(cc->path, sizeof(cc->path), "%s", url);
        const char *model_id;
        cc->endpoint = route(url, &model_id);
        int is_get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
        if (cc->endpoint != SRV_EP_HEALTH && !authorized(s, c)) {
            api_fail(&e, 401, "invalid_request_error", NULL, "invalid_api_key",
                    "missing or incorrect API key (send 'Authorization: Bearer KEY')");
            return reply_error(cc, c, &e);
        }
        if (cc->endpoint == SRV_EP_OTHER) {
            api_fail(&e, 404, "invalid_request_error", NULL, "unknown_url",
                    "unknown path %.64s (endpoints: POST /v1/completions, POST "
                    "/v1/chat/completions, GET /v1/models, GET /health, GET /metrics)", url);
            return reply_error(cc, c, &e);
        }
        if (is_generation(cc->endpoint) ? strcmp(method, "POST") != 0 : !is_get) {
            api_fail(&e, 405, "invalid_request_error", NULL, "method_not_allowed",
                    "method %.16s is not allowed on %s", method, url);
            return reply_error(cc, c, &e);
        }
        if (!is_generation(cc->endpoint)) return handle_get(s, cc, c, model_id);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body) {
            api_fail(&e, 413, "invalid_request_error", NULL, "request_too_large",
                    "the request body is %s bytes; the limit is %zu (--max-body)", cl,
                    s->o.max_body);
            return reply_error(cc, c, &e);
        }
        return MHD_YES; /* MHD now reads the body (sending 100 Continue if asked) */
    }
    if (*upload_data_size > 0) { /* a piece of the body */
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        return api_body_take(&cc->body, &cc->too_large, &cc->discarded, upload_data, n,
                            s->o.max_body) ? MHD_YES : MHD_NO;
    }
    if (cc->status) return MHD_YES; /* already answered */
    if (cc->too_large) {
        api_fail(&e, 413, "invalid_request_error", NULL, "request_too_large",
                "the request body is over the limit of %zu bytes (--max-body)", s->o.max_body);
        return reply_error(cc, c, &e);
    }
    return handle_completion(s, cc, c);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)c;
    srv_server *s = cls;
    conn_ctx *cc = *con_cls;
    if (cc == NULL) return;
    *con_cls = NULL;
    double now = api_now();
    int ok = toe == MHD_REQUEST_TERMINATED_COMPLETED_OK;
    /* 499 (nginx's "client closed request"): the connection ended before the answer did */
    int status = ok ? cc->status : 499;
    if (cc->status || cc->job) srv_metrics_request(&s->metrics, cc->endpoint, status);
    srv_job *j = cc->job;
    if (j) {
        if (!ok) srv_job_cancel(j);
        int n_gen, done, finish;
        size_t len;
        srv_job_wait(s->pool, j, 0, 0, &n_gen, &len, &done, &finish);
        if (ok && status == 200) srv_metrics_latency(&s->metrics, now - cc->t0);
        if (!s->o.quiet) {
            double queue_ms = j->t_start > 0 ? 1e3 * (j->t_start - j->t_submit) : -1;
            api_buf line = {0};
            api_buf_printf(&line, "minitrain: serve: %s %s %d stream=%d prompt_tokens=%d "
                                 "completion_tokens=%d queue_ms=%.1f ms=%.1f",
                          cc->method, cc->path, status, cc->stream, j->req.n_prompt, n_gen,
                          queue_ms, 1e3 * (now - cc->t0));
            if (s->o.log_content) {
                api_buf_puts(&line, " prompt=");
                api_buf_json_string(&line, (const uint8_t *)j->req.prompt_text,
                                   j->req.prompt_text_len);
                api_buf_puts(&line, " completion=");
                api_buf_json_string(&line, j->text, len);
            }
            fprintf(stderr, "%s\n", line.p);
            api_buf_free(&line);
        }
        srv_job_release(j);
    } else if (!s->o.quiet && is_generation(cc->endpoint)) {
        fprintf(stderr, "minitrain: serve: %s %s %d ms=%.1f\n", cc->method, cc->path, status,
                1e3 * (now - cc->t0));
    }
    api_buf_free(&cc->body);
    free(cc);
}

/* ---- lifecycle -------------------------------------------------------------------------------- */

srv_server *srv_start(const srv_opts *o, char *err, size_t errlen) {
    srv_server *s = callocCheck(1, sizeof(srv_server));
    s->o = *o;
    atomic_init(&s->ready, 0);
    srv_metrics_init(&s->metrics);
    pthread_mutex_init(&s->id_mu, NULL);
    rng_seed(&s->id_rng, (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(size_t)s);
    pthread_mutex_init(&s->fault_mu, NULL);
    rng_seed(&s->fault_rng, o->fault_seed);
    if (s->o.fault_status == 0) s->o.fault_status = 500;
    if (s->o.fault_retry_after_s <= 0) s->o.fault_retry_after_s = 1;
    s->started = (long)time(NULL);
    api_listen_opts lo = {.host = o->host, .port = o->port, .who = "serve",
                         .timeout_s = (unsigned)o->timeout_s,
                         .conn_limit = (unsigned)(4 * (o->slots + o->queue) + 64),
                         .on_request = on_request, .on_completed = on_completed, .cls = s};
    s->d = api_listen(&lo, &s->port, err, errlen);
    if (s->d == NULL) {
        srv_metrics_destroy(&s->metrics);
        pthread_mutex_destroy(&s->id_mu);
        pthread_mutex_destroy(&s->fault_mu);
        free(s);
        return NULL;
    }
    return s;
}

int srv_port(const srv_server *s) { return s->port; }

void srv_set_model(srv_server *s, const gpt_model *m, const tok_tokenizer *tok, int step) {
    s->m = m;
    s->tok = tok;
    s->step = step;
    int tv = tok_vocab_size(tok);
    s->mi.tok = tok;
    s->mi.n_vocab = tv < m->cfg.vocab_size ? tv : m->cfg.vocab_size;
    s->mi.ctx = m->cfg.seq_len;
    s->mi.model_name = s->o.model_name;
    s->max_token_bytes = 1;
    for (int i = 0; i < tv; i++) {
        size_t bl;
        tok_token_bytes(tok, (uint32_t)i, &bl);
        if (bl > s->max_token_bytes) s->max_token_bytes = bl;
    }
    s->pool = srv_pool_create(m, tok, s->o.slots, s->o.queue, s->o.threads, &s->metrics);
    atomic_store(&s->ready, 1);
}

void srv_stop(srv_server *s) {
    if (s == NULL) return;
    if (s->pool) srv_pool_stop(s->pool); /* waiting connections see their jobs end */
    MHD_stop_daemon(s->d);              /* joins every connection thread */
    srv_pool_destroy(s->pool);
    srv_metrics_destroy(&s->metrics);
    pthread_mutex_destroy(&s->id_mu);
    pthread_mutex_destroy(&s->fault_mu);
    free(s);
}
