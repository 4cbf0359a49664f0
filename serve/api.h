/*
 * serve/api.h — the OpenAI wire protocol both HTTP servers speak: `minitrain serve` (serve/server.h)
 * and `minitrain gateway` (gateway/gw_proxy.h).
 *
 * Pure functions, unit-tested without a socket, and free of model/ headers (the gateway proxies
 * requests, it runs no model):
 *   api.c       buffers, request bodies (size limit), strict UTF-8, OpenAI error objects, request
 *               parsing and validation (cJSON), stop sequences, completion JSON and SSE chunks;
 *   api_chat.c  chat completions: the plain-text chat template, chat JSON and SSE chunks;
 *   listen.c    opening the libmicrohttpd daemon, Prometheus text writers, the monotonic clock.
 */
#ifndef MT_SERVE_API_H
#define MT_SERVE_API_H

#include <microhttpd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "core/check.h"
#include "text/tokenizer.h"

struct cJSON;

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
/* Append o printed as compact JSON (cJSON) and cJSON_Delete it: the bodies that are plain objects
 * (health, model lists) are built with cJSON rather than by hand. */
void api_buf_put_json(api_buf *b, struct cJSON *o);
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

/* The sampling fields of a request (model/sample.h's sample_params, which the server fills from
 * these: the wire protocol stays free of model/ headers, so the gateway can include it). */
typedef struct {
    float temperature; /* 0 = greedy */
    int top_k;         /* 0 = all */
    float top_p;       /* 1 = all */
} api_sampling;

/* A validated /v1/completions request. */
typedef struct {
    uint32_t *prompt;          /* (n_prompt) token ids, malloc'd */
    int n_prompt;              /* 1 .. ctx-1 */
    int max_tokens;            /* 1 .. ctx - n_prompt (a larger request is clamped) */
    api_sampling sp;           /* temperature 0..2 (0 = greedy), top_k >= 0, top_p (0, 1] */
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


/* ---- Prometheus text and the clock (listen.c) ------------------------------------------------ */

#define API_LAT_NBUCKETS 12

/* Upper bounds (seconds) of the latency histogram buckets, ascending (+Inf is implicit). */
extern const double api_latency_bounds[API_LAT_NBUCKETS];

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

/* Seconds on a monotonic clock. */
double api_now(void);

/* ---- listening (listen.c) ----------------------------------------------------------------------
 * Both servers run libmicrohttpd with one thread per connection, on an address resolved with
 * getaddrinfo (so --host may be IPv4 or IPv6, and --port 0 lets the kernel choose), with MHD's log
 * lines prefixed by the subcommand's name. Only the handlers, the idle timeout and the connection
 * limit differ. */

typedef struct {
    const char *host;       /* address to bind, e.g. "127.0.0.1" or "::1" */
    int port;               /* 0 = any free port (read the chosen one from *bound_port) */
    const char *who;        /* "serve" or "gateway": prefixes libmicrohttpd's log lines */
    unsigned timeout_s;     /* idle connection timeout (MHD_OPTION_CONNECTION_TIMEOUT) */
    unsigned conn_limit;    /* most connections at once (MHD_OPTION_CONNECTION_LIMIT) */
    unsigned backlog;       /* listen(2) backlog; 0 = MHD's default */
    MHD_AccessHandlerCallback on_request;
    MHD_RequestCompletedCallback on_completed;
    void *cls;              /* passed to both callbacks */
} api_listen_opts;

/* The one way both servers answer: a response holding body (moved: libmicrohttpd frees it and
 * *body is emptied; an empty body is sent as zero bytes) with Content-Type ctype. NULL when MHD
 * cannot allocate it (body freed). The caller adds its own headers, then calls api_queue. */
struct MHD_Response *api_response(api_buf *body, const char *ctype);
/* Queue r (from api_response or MHD_create_response_from_callback) with HTTP status on c and drop
 * the caller's reference. *status_out (the access log's status) is set when MHD took it. Returns
 * MHD's answer; MHD_NO for r NULL. */
enum MHD_Result api_queue(struct MHD_Connection *c, int status, struct MHD_Response *r,
                          int *status_out);

/* Start the daemon. Returns it, with the port actually bound in *bound_port, or NULL with one line
 * in err ("cannot resolve host ...", "cannot listen on H:P (port in use, or no permission?)"). */
struct MHD_Daemon *api_listen(const api_listen_opts *o, int *bound_port, char *err, size_t errlen);

#endif /* MT_SERVE_API_H */
