/*
 * serve/server.h — `minitrain serve`: an OpenAI-compatible HTTP inference API for a trained run.
 *
 * The module's one public header. Four parts, one file each:
 *   api.c      request parsing and validation (cJSON), the OpenAI response/error shapes, UTF-8 and
 *              stop-sequence helpers — pure functions, unit-tested without a socket;
 *   slots.c    generation slots: N KV caches (gpt_decode_state) decoded by one thread in one batched
 *              forward per step (continuous batching),
 *              fed by a bounded FIFO queue of jobs; a full queue is refused (the caller sends 503);
 *   metrics.c  counters, gauges and a latency histogram rendered as Prometheus text;
 *   server.c   libmicrohttpd glue: routing, API keys, body limits, streaming (SSE), disconnects.
 * cmd/serve.c holds the subcommand (flags, loading, signals).
 *
 * Threading: libmicrohttpd runs one thread per connection; a connection thread parses the request,
 * submits a job and waits on it (or, when streaming, turns each generated token into one SSE
 * event). Generation itself runs only in the decoder thread, so `--threads` bounds CPU use and
 * `--slots` the batch width whatever the number of connections. The model and tokenizer are read-only once loaded.
 */
#ifndef MT_SERVE_SERVER_H
#define MT_SERVE_SERVER_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/check.h"
#include "model/model.h"
#include "model/sample.h"
#include "text/tokenizer.h"

/* ---- a growable byte buffer (api.c) ---------------------------------------------------------- */

typedef struct {
    char *p;    /* NUL-terminated after every append (p may be NULL while len == 0) */
    size_t len; /* bytes, excluding the NUL */
    size_t cap;
} api_buf;

void api_buf_put(api_buf *b, const void *data, size_t n);
void api_buf_puts(api_buf *b, const char *s);
void api_buf_printf(api_buf *b, const char *fmt, ...) MT_PRINTF(2, 3);
/* Append bytes s[0..n) as a JSON string literal with its quotes: '"', '\\' and control bytes are
 * escaped; invalid UTF-8 becomes U+FFFD, one per maximal subpart (Unicode 15 §3.9 — the rule of
 * Python's decode(errors="replace") and of browsers), so the output is always valid UTF-8 JSON
 * whatever bytes the model generated. */
void api_buf_json_string(api_buf *b, const uint8_t *s, size_t n);
void api_buf_free(api_buf *b);
/* For a content reader that drains b, then refills it: copy up to max bytes of b from *off into
 * dst and advance *off. Returns the count copied while bytes were left (0 only when max is 0), or
 * -1 when none were: b is then emptied (len and *off back to 0, its memory kept) for the next
 * fill. */
long api_buf_drain(api_buf *b, size_t *off, char *dst, size_t max);
/* One piece of a request body as the HTTP server hands it over (data, n bytes), for serve and the
 * gateway alike: appended to body while the whole stays within max bytes. Past the limit the body
 * is dropped at once (never buffered) and *too_large set: the caller answers 413 when the upload
 * ends (libmicrohttpd cannot queue an answer mid-upload); what still comes is only counted in
 * *discarded. Returns 1 to read on, 0 once *discarded passes 16 x max: close the connection. */
int api_body_take(api_buf *body, int *too_large, size_t *discarded, const char *data, size_t n,
                 size_t max);

/* ---- UTF-8 (api.c) ----------------------------------------------------------------------------
 * Strict UTF-8 as RFC 3629 §4 defines it: no overlong forms, no surrogates (U+D800..DFFF), nothing
 * above U+10FFFF. */

/* Length (1..4) of the valid, complete UTF-8 sequence starting at s[0..n), or 0 if the bytes there
 * are invalid or incomplete (n == 0 gives 0). */
int api_utf8_seq_len(const uint8_t *s, size_t n);
/* 1 if s[0..n) is entirely valid UTF-8, else 0. */
int api_utf8_valid(const uint8_t *s, size_t n);
/* Number of bytes (0..3) at the end of s[0..n) that form the valid beginning of a UTF-8 sequence
 * still missing its last byte(s) — what a streamer holds back until the next token completes it. */
size_t api_utf8_incomplete_tail(const uint8_t *s, size_t n);

/* ---- OpenAI errors (api.c) ------------------------------------------------------------------- */

typedef struct {
    int status;        /* HTTP status: 400, 401, 404, 405, 413, 503, ... */
    const char *type;  /* "invalid_request_error", "authentication_error", "server_error", ... */
    const char *code;  /* machine-readable code, or NULL (JSON null) */
    char param[32];    /* the offending request field, or "" (JSON null) */
    char message[384]; /* one clear sentence; never contains prompt text */
} api_error;

/* Fill *e (always returns -1, so `return api_fail(...)` reads naturally). param/code may be NULL. */
int api_fail(api_error *e, int status, const char *type, const char *param, const char *code,
            const char *fmt, ...) MT_PRINTF(6, 7);
/* api_fail with the message's arguments as a va_list (for callers that are variadic themselves). */
int api_vfail(api_error *e, int status, const char *type, const char *param, const char *code,
             const char *fmt, va_list ap);
/* {"error":{"message":...,"type":...,"param":...,"code":...}} into b (appended). */
void api_error_json(api_buf *b, const api_error *e);

/* ---- completion requests (api.c) ------------------------------------------------------------- */

#define API_MAX_STOP 4        /* OpenAI allows up to 4 stop sequences (the client's) */
#define API_CHAT_STOP "\nUser:" /* the chat template's own stop, added after the client's */
#define API_MAX_STOP_LEN 256  /* bytes per stop sequence */
#define API_DEFAULT_MAX_TOKENS 16

/* What the parser needs to know about the served model. */
typedef struct {
    const tok_tokenizer *tok;
    int n_vocab;            /* ids the sampler may return and a prompt may use: min(tokenizer, model) */
    int ctx;                /* the model's context (seq_len): prompt + completion positions */
    const char *model_name; /* the one id /v1/models lists */
} api_model_info;

/* A validated /v1/completions request. */
typedef struct {
    uint32_t *prompt;          /* (n_prompt) token ids, malloc'd */
    int n_prompt;              /* 1 .. ctx-1 */
    int max_tokens;            /* 1 .. ctx - n_prompt (a larger request is clamped) */
    sample_params sp;          /* temperature 0..2 (0 = greedy), top_k >= 0, top_p (0, 1] */
    uint64_t seed;             /* from the request, or drawn by the server (has_seed = 0) */
    int has_seed;
    int n_stop;                /* <= API_MAX_STOP from the client, + 1 for a chat template */
    char *stop[API_MAX_STOP + 1]; /* malloc'd, NUL-terminated, 1..API_MAX_STOP_LEN bytes each */
    size_t stop_len[API_MAX_STOP + 1];
    int stream;                /* 1: server-sent events */
    int include_usage;         /* stream_options.include_usage */
    char *prompt_text;         /* the prompt as sent (for --log-content only), malloc'd or NULL */
    size_t prompt_text_len;
    int chat;                  /* 1: a /v1/chat/completions request (chat response shapes) */
} api_request;

/* Parse and validate a /v1/completions JSON body (body[0..len), need not be NUL-terminated).
 * Fields: model (string, must name the served model if present), prompt (string, or an array of
 * token ids; required), max_tokens (integer >= 1, default 16, clamped to the context left after
 * the prompt), temperature (0..2, default 1), top_p ((0, 1], default 1), top_k (integer >= 0),
 * seed (integer), stop (string or array of <= 4 non-empty strings), stream (bool),
 * stream_options.include_usage (bool); n, best_of (1 only), echo (false only), logprobs, suffix,
 * logit_bias (null only), presence_penalty/frequency_penalty (0 only) and user are accepted for
 * compatibility. Anything else is refused by name.
 * Returns 0 with *req filled (free with api_request_free), or -1 with *err: 400 for a body that is
 * not valid UTF-8 or not JSON, wrong types, out-of-range values, an empty prompt or one that
 * leaves no room in the context; 404 for an unknown model. */
int api_parse_completion(const char *body, size_t len, const api_model_info *mi, api_request *req,
                        api_error *err);
void api_request_free(api_request *req);

/* The same for a /v1/chat/completions body (serve/api_chat.c). Fields: messages (required: a
 * non-empty array of {role: system|developer|user|assistant, content: string or array of text
 * parts, name?}), model, max_tokens or max_completion_tokens, temperature, top_p, top_k, seed,
 * stop, stream, stream_options, and at their neutral values n, presence_penalty,
 * frequency_penalty, logit_bias, user, logprobs (false), top_logprobs (null), response_format
 * ({"type":"text"}). Tools and function calls are refused by name (400). The messages become one
 * prompt by the plain-text chat template (api_chat_render); API_CHAT_STOP is added to the stops.
 * req->chat = 1. Errors as api_parse_completion. */
int api_parse_chat(const char *body, size_t len, const api_model_info *mi, api_request *req,
                  api_error *err);

/* ---- shared by the two parsers (api.c) -------------------------------------------------------- */
struct cJSON;
/* Check that body[0..len) is strict JSON text (UTF-8, no raw control bytes in strings, no
 * \u0000, nothing after the value) holding an object, and parse it. NULL with *err (400). */
struct cJSON *api_json_body(const char *body, size_t len, api_error *err);
/* Fields both endpoints take: model (404 if not the served one), max_tokens (default 16),
 * temperature, top_p, top_k, seed, stop, stream, stream_options, and n, presence_penalty,
 * frequency_penalty, logit_bias, user at their neutral values. 0, or -1 with *err. */
int api_parse_sampling(const struct cJSON *root, const api_model_info *mi, api_request *r,
                      api_error *e);
/* 400 for an empty prompt or one that leaves no room for a completion token; then clamp
 * max_tokens to the room left. 0, or -1 with *err. */
int api_prompt_fits(const api_model_info *mi, api_request *r, api_error *e);
/* The field name of the first member of object root that is not in known[0..n), or NULL. */
const char *api_unknown_field(const struct cJSON *root, const char *const *known, size_t n);

/* Stop sequences on raw generated bytes. api_stop_find: the smallest position p >= from at which
 * one of the stop sequences occurs completely inside text[0..n), or -1. api_stop_holdback: the
 * length of the longest suffix of text[0..n) that is a proper prefix of a stop sequence (bytes
 * that must not be streamed yet, since the next token may complete the stop). */
long api_stop_find(const api_request *req, const uint8_t *text, size_t n, size_t from);
size_t api_stop_holdback(const api_request *req, const uint8_t *text, size_t n);

/* Response bodies, appended to b. text[0..n) is raw model output (sanitised to UTF-8 here);
 * finish is "stop", "length" or NULL (JSON null, for a streamed chunk mid-generation). */
void api_completion_json(api_buf *b, const char *id, long created, const char *model,
                        const uint8_t *text, size_t n, const char *finish, int prompt_tokens,
                        int completion_tokens);
/* One server-sent event "data: {...}\n\n" carrying a text_completion chunk. */
void api_chunk_sse(api_buf *b, const char *id, long created, const char *model, const uint8_t *text,
                  size_t n, const char *finish);
/* The usage-only chunk of stream_options.include_usage (choices: []). */
void api_usage_sse(api_buf *b, const char *id, long created, const char *model, int prompt_tokens,
                  int completion_tokens);

/* ---- chat completions (api_chat.c) -------------------------------------------------------------
 * The plain-text chat template (documented in api_chat.c and docs/serve.md): each message becomes
 * "System: ...\n" (system, developer), "User: ...\n" or "Assistant: ...\n", then "Assistant:".
 * api_chat_render appends that to out; 0, or -1 with *err (400) for a malformed messages array. */
int api_chat_render(const struct cJSON *messages, api_buf *out, api_error *err);
/* A chat.completion body: choices[0].message = {role: assistant, content: text}. */
void api_chat_json(api_buf *b, const char *id, long created, const char *model, const uint8_t *text,
                  size_t n, const char *finish, int prompt_tokens, int completion_tokens);
/* One chat.completion.chunk event. first = 1: delta {"role":"assistant","content":text}; else
 * delta {"content":text}, or {} when n == 0 (the closing chunk carrying the finish reason). */
void api_chat_chunk_sse(api_buf *b, const char *id, long created, const char *model, int first,
                       const uint8_t *text, size_t n, const char *finish);
/* The usage-only chat.completion.chunk of stream_options.include_usage (choices: []). */
void api_chat_usage_sse(api_buf *b, const char *id, long created, const char *model,
                       int prompt_tokens, int completion_tokens);

/* ---- metrics (metrics.c) --------------------------------------------------------------------- */

enum { SRV_EP_COMPLETIONS, SRV_EP_CHAT, SRV_EP_MODELS, SRV_EP_HEALTH, SRV_EP_METRICS, SRV_EP_OTHER,
       SRV_EP_COUNT };
#define API_LAT_NBUCKETS 12

/* Upper bounds (seconds) of the latency histogram buckets, ascending (+Inf is implicit). */
extern const double api_latency_bounds[API_LAT_NBUCKETS];

typedef struct {
    pthread_mutex_t mu;
    uint64_t requests[SRV_EP_COUNT][600]; /* by endpoint and HTTP status (100..599 used) */
    uint64_t prompt_tokens, completion_tokens;
    uint64_t lat_bucket[API_LAT_NBUCKETS + 1]; /* non-cumulative; last = above every bound */
    uint64_t lat_count;
    double lat_sum;
    uint64_t cancelled;   /* generations stopped early: client gone or server stopping */
    uint64_t queue_full;  /* requests refused with 503 because the queue was full */
    uint64_t faults;      /* answers changed by the test-only --fault-* flags */
} srv_metrics;

/* Prometheus text exposition (https://prometheus.io/docs/instrumenting/exposition_formats/):
 * the "# HELP" and "# TYPE" lines of one metric family. type: "counter" | "gauge" | "histogram". */
void api_prom_family(api_buf *b, const char *name, const char *type, const char *help);
/* A family of one unlabelled sample: its HELP and TYPE lines, then "name v". */
void api_prom_counter(api_buf *b, const char *name, const char *help, uint64_t v);
void api_prom_gauge(api_buf *b, const char *name, const char *help, long long v);
/* One histogram series over api_latency_bounds: cumulative name_bucket{labels,le=...} lines, +Inf,
 * name_sum and name_count. bucket (API_LAT_NBUCKETS+1) holds NON-cumulative counts, the last one
 * above every bound; labels is "" or e.g. model="m" (without braces); sum in seconds. */
void api_prom_histogram(api_buf *b, const char *name, const char *labels, const uint64_t *bucket,
                       double sum, uint64_t count);

/* Point-in-time values read from the slots when /metrics is rendered. */
typedef struct {
    int ready;  /* 1 once the model is loaded */
    int slots_total, slots_busy, queue_capacity, queue_depth;
} srv_gauges;

void srv_metrics_init(srv_metrics *m);
void srv_metrics_destroy(srv_metrics *m);
/* Count one answered request; status outside 100..599 is ignored. */
void srv_metrics_request(srv_metrics *m, int endpoint, int status);
/* Observe one successful completion's end-to-end latency in seconds (queueing included). */
void srv_metrics_latency(srv_metrics *m, double seconds);
void srv_metrics_tokens(srv_metrics *m, int prompt_tokens, int completion_tokens);
void srv_metrics_cancelled(srv_metrics *m);
void srv_metrics_queue_full(srv_metrics *m);
void srv_metrics_fault(srv_metrics *m);
/* Append the Prometheus text exposition format (version 0.0.4) to b. */
void srv_metrics_render(srv_metrics *m, const srv_gauges *g, api_buf *b);
/* Endpoint label value ("completions", "chat_completions", "models", "health", "metrics",
 * "other"). */
const char *srv_endpoint_name(int endpoint);

/* ---- generation slots (slots.c) -------------------------------------------------------------- */

enum { SRV_FINISH_NONE, SRV_FINISH_STOP, SRV_FINISH_LENGTH, SRV_FINISH_CANCELLED };

/* One generation. Created by a connection thread, run by a slot thread; reference-counted so that
 * whichever side lets go last frees it. Output fields are guarded by the pool's mutex; bytes below
 * a `len` read under the mutex never change afterwards (the buffer is allocated once, full size). */
typedef struct srv_job {
    api_request req; /* owned */
    /* output (guarded by the pool mutex) */
    uint8_t *text;  /* raw generated bytes, capacity max_tokens * longest token */
    size_t len;     /* bytes valid; a stop sequence truncates it to the stop's start */
    size_t *ends;   /* (max_tokens) text length after token i, before any stop truncation */
    int n_gen;      /* tokens generated */
    int done, finish; /* finish: SRV_FINISH_* once done */
    double t_submit, t_start, t_done; /* seconds, monotonic clock */
    /* control */
    atomic_int cancel;
    atomic_int refs;
    pthread_cond_t cv;
    struct srv_job *next; /* queue link */
} srv_job;

typedef struct srv_pool srv_pool;

/* Start n_slots slots (each a KV cache for m), one decoder thread that runs all active slots in
 * one batched forward per step with `threads` OpenMP/BLAS threads, and a queue of queue_cap
 * waiting jobs (0 = none wait: busy slots mean 503).
 * metrics may be NULL. The model and tokenizer must outlive the pool. */
srv_pool *srv_pool_create(const gpt_model *m, const tok_tokenizer *tok, int n_slots, int queue_cap,
                        int threads, srv_metrics *metrics);
/* Refuse new jobs and cancel queued and running ones: they finish promptly as
 * SRV_FINISH_CANCELLED, so threads waiting on them return. The pool stays usable for waits. */
void srv_pool_stop(srv_pool *p);
/* srv_pool_stop, join the slot threads and free the pool. Call it only when no other thread
 * uses the pool any more (jobs still referenced elsewhere may be released afterwards). */
void srv_pool_destroy(srv_pool *p);

/* A job for *req (moved in: *req is zeroed). refs = 1 (the caller's). */
srv_job *srv_job_create(api_request *req, size_t max_token_bytes);
/* Enqueue j; the pool takes its own reference. Returns 0, or -1 if the queue is full or the pool
 * is stopping (the caller answers 503 and still holds its reference). */
int srv_pool_submit(srv_pool *p, srv_job *j);
/* Take / drop one reference (the job is freed when the last one is dropped). */
void srv_job_retain(srv_job *j);
void srv_job_release(srv_job *j);
/* Ask the job to stop (client gone): a queued job is skipped, a running one stops at its next
 * token and frees its slot. */
void srv_job_cancel(srv_job *j);
/* Wait until j has more than have_tokens tokens or is done, at most timeout_s seconds. Copies a
 * consistent snapshot: *n_gen, *len, *done, *finish (any pointer may be NULL). */
void srv_job_wait(srv_pool *p, srv_job *j, int have_tokens, double timeout_s, int *n_gen,
                 size_t *len, int *done, int *finish);
/* Current queue depth and busy slots. */
void srv_pool_stats(srv_pool *p, int *queued, int *busy);

/* Seconds on a monotonic clock. */
double api_now(void);

/* ---- the HTTP server (server.c) -------------------------------------------------------------- */

typedef struct {
    const char *host;        /* bind address, numeric or a name (default 127.0.0.1) */
    int port;                /* 0 = any free port (see srv_port) */
    int slots, queue;        /* parallel generations; waiting requests beyond them */
    int threads;             /* OpenMP/BLAS threads of the batched decoder (>= 1) */
    size_t max_body;         /* bytes; larger bodies get 413 before they are buffered */
    unsigned timeout_s;      /* idle connections are closed after this (MHD connection timeout) */
    const char *model_name;  /* the id /v1/models lists and requests may name */
    char **api_keys;         /* NULL = no authentication */
    int n_api_keys;
    int log_content;         /* 1: the access log includes prompts and completions */
    int quiet;               /* 1: no access log */
    /* test-only fault injection (generation endpoints only; /health and /v1/models stay true),
     * drawn from one generator seeded with fault_seed, in the order requests arrive */
    double fault_rate;       /* probability of answering fault_status instead (0..1) */
    int fault_status;        /* 400..599 (default 500); 429 and 503 carry Retry-After */
    int fault_retry_after_s; /* the Retry-After of a 429/503 fault (default 1) */
    double fault_empty;      /* probability of a 200 with no choices / empty content and no
                                finish_reason (alternating between the two shapes) */
    int fault_latency_ms;    /* added before every generation answer (and before a fault) */
    unsigned long long fault_seed;
} srv_opts;

typedef struct srv_server srv_server;

/* Listen on host:port. Until srv_set_model, /health answers 503 {"status":"loading"} and
 * generation requests 503. Returns NULL with err if the address cannot be bound. */
srv_server *srv_start(const srv_opts *o, char *err, size_t errlen);
/* The bound port (useful with port 0). */
int srv_port(const srv_server *s);
/* Serve m/tok from now on (both must outlive the server); step is reported by /v1/models. */
void srv_set_model(srv_server *s, const gpt_model *m, const tok_tokenizer *tok, int step);
/* Stop generations, close every connection, join all threads and free s. */
void srv_stop(srv_server *s);

#endif /* MT_SERVE_SERVER_H */
