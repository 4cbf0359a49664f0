/*
 * serve/api.c — the OpenAI completions API as data: request parsing and validation, response,
 * chunk and error bodies, and the UTF-8 and stop-sequence rules generation is held to.
 *
 * Why it is shaped so:
 *   - Everything here is a pure function of its arguments (no sockets, no threads), so every
 *     status code the server can answer for a bad body is unit-tested (tests/test_gateway.c).
 *   - cJSON parses; responses are written by hand through api_buf because model output is raw
 *     bytes: a byte-level model can emit half a UTF-8 character or a NUL, which cJSON strings
 *     cannot carry. api_buf_json_string escapes and turns invalid bytes into U+FFFD, so every body
 *     we send is valid UTF-8 JSON.
 *   - Input bodies must be valid UTF-8 (RFC 8259 §8.1); cJSON does not check, so we do, before
 *     parsing. A prompt that needs arbitrary bytes is sent as an array of token ids instead (for
 *     a byte-level tokenizer, id = byte value). "\u0000" is refused too: cJSON would silently cut
 *     the string there.
 */
#define _GNU_SOURCE /* memmem */
#include "serve/api.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t utf8_maximal_subpart(const uint8_t *s, size_t n);

/* ---- api_buf ----------------------------------------------------------------------------------- */

static void buf_reserve(api_buf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->p, cap);
    mtCheck(p != NULL, "out of memory growing a response buffer");
    b->p = p;
    b->cap = cap;
}

void api_buf_put(api_buf *b, const void *data, size_t n) {
    buf_reserve(b, n);
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = 0;
}

void api_buf_puts(api_buf *b, const char *s) { api_buf_put(b, s, strlen(s)); }

void api_buf_printf(api_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    mtCheck(n >= 0, "vsnprintf failed");
    buf_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void api_buf_json_string(api_buf *b, const uint8_t *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    buf_reserve(b, n + 2);
    api_buf_put(b, "\"", 1);
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c >= 0x80) {
            int L = api_utf8_seq_len(s + i, n - i);
            if (L > 0) {
                api_buf_put(b, s + i, (size_t)L);
                i += (size_t)L;
            } else { /* one U+FFFD per maximal subpart (Unicode §3.9, as Python/WHATWG do) */
                api_buf_put(b, "\xEF\xBF\xBD", 3);
                i += utf8_maximal_subpart(s + i, n - i);
            }
            continue;
        }
        char esc[7];
        switch (c) {
        case '"': api_buf_put(b, "\\\"", 2); break;
        case '\\': api_buf_put(b, "\\\\", 2); break;
        case '\n': api_buf_put(b, "\\n", 2); break;
        case '\r': api_buf_put(b, "\\r", 2); break;
        case '\t': api_buf_put(b, "\\t", 2); break;
        default:
            if (c < 0x20) {
                memcpy(esc, "\\u00", 4);
                esc[4] = hex[c >> 4];
                esc[5] = hex[c & 15];
                api_buf_put(b, esc, 6);
            } else {
                api_buf_put(b, &c, 1);
            }
        }
        i++;
    }
    api_buf_put(b, "\"", 1);
}

void api_buf_free(api_buf *b) {
    free(b->p);
    memset(b, 0, sizeof(*b));
}

int api_body_take(api_buf *body, int *too_large, size_t *discarded, const char *data, size_t n,
                 size_t max) {
    if (!*too_large && body->len + n <= max) {
        api_buf_put(body, data, n);
        return 1;
    }
    *too_large = 1; /* a (chunked) body past the limit: counted, not kept */
    api_buf_free(body);
    *discarded += n;
    return *discarded <= 16 * max;
}

void api_buf_put_json(api_buf *b, cJSON *o) {
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    mtCheck(text != NULL, "out of memory");
    api_buf_puts(b, text);
    cJSON_free(text);
}

long api_buf_drain(api_buf *b, size_t *off, char *dst, size_t max) {
    if (*off < b->len) {
        size_t n = b->len - *off;
        if (n > max) n = max;
        memcpy(dst, b->p + *off, n);
        *off += n;
        return (long)n;
    }
    b->len = 0;
    *off = 0;
    return -1;
}

/* ---- UTF-8 (Unicode 15, Table 3-7 "Well-Formed UTF-8 Byte Sequences") ----------------------- */

/* Sequence length announced by lead byte c (0 if c cannot start a sequence) and the allowed
 * range of the second byte. */
static int utf8_lead(uint8_t c, uint8_t *lo, uint8_t *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c == 0xE0) { *lo = 0xA0; return 3; }          /* no overlong 3-byte forms */
    if (c >= 0xE1 && c <= 0xEC) return 3;
    if (c == 0xED) { *hi = 0x9F; return 3; }          /* no surrogates U+D800..DFFF */
    if (c == 0xEE || c == 0xEF) return 3;
    if (c == 0xF0) { *lo = 0x90; return 4; }          /* no overlong 4-byte forms */
    if (c >= 0xF1 && c <= 0xF3) return 4;
    if (c == 0xF4) { *hi = 0x8F; return 4; }          /* nothing above U+10FFFF */
    return 0;                                         /* 80..C1, F5..FF */
}

/* 1 if s[0..k) (1 <= k < announced length) is a valid beginning of a sequence. */
static int utf8_prefix_ok(const uint8_t *s, size_t k, int L, uint8_t lo, uint8_t hi) {
    if (k >= 2 && (s[1] < lo || s[1] > hi)) return 0;
    for (size_t i = 2; i < k && i < (size_t)L; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return 1;
}

int api_utf8_seq_len(const uint8_t *s, size_t n) {
    if (n == 0) return 0;
    uint8_t lo, hi;
    int L = utf8_lead(s[0], &lo, &hi);
    if (L == 0 || (size_t)L > n) return 0;
    if (L == 1) return 1;
    return utf8_prefix_ok(s, (size_t)L, L, lo, hi) ? L : 0;
}

/* Length (>= 1) of the maximal subpart at an invalid position: the longest start of a
 * well-formed sequence there (Unicode 15 §3.9, "U+FFFD Substitution of Maximal Subparts"). */
static size_t utf8_maximal_subpart(const uint8_t *s, size_t n) {
    uint8_t lo, hi;
    int L = utf8_lead(s[0], &lo, &hi);
    size_t k = 1;
    while (L > 1 && k < (size_t)L && k < n &&
           (k == 1 ? s[1] >= lo && s[1] <= hi : (s[k] & 0xC0) == 0x80))
        k++;
    return k;
}

int api_utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) { i++; continue; }
        int L = api_utf8_seq_len(s + i, n - i);
        if (L == 0) return 0;
        i += (size_t)L;
    }
    return 1;
}

size_t api_utf8_incomplete_tail(const uint8_t *s, size_t n) {
    /* the last byte that is not a continuation byte, within the last 3 */
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        const uint8_t *p = s + n - k;
        if ((p[0] & 0xC0) == 0x80) continue;
        uint8_t lo, hi;
        int L = utf8_lead(p[0], &lo, &hi);
        if (L > (int)k && utf8_prefix_ok(p, k, L, lo, hi)) return k;
        return 0;
    }
    return 0;
}

/* ---- errors ----------------------------------------------------------------------------------- */

int api_vfail(api_error *e, int status, const char *type, const char *param, const char *code,
             const char *fmt, va_list ap) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    return -1;
}

int api_fail(api_error *e, int status, const char *type, const char *param, const char *code,
            const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    api_vfail(e, status, type, param, code, fmt, ap);
    va_end(ap);
    return -1;
}

void api_error_json(api_buf *b, const api_error *e) {
    api_buf_puts(b, "{\"error\":{\"message\":");
    api_buf_json_string(b, (const uint8_t *)e->message, strlen(e->message));
    api_buf_puts(b, ",\"type\":");
    api_buf_json_string(b, (const uint8_t *)e->type, strlen(e->type));
    api_buf_puts(b, ",\"param\":");
    if (e->param[0]) api_buf_json_string(b, (const uint8_t *)e->param, strlen(e->param));
    else api_buf_puts(b, "null");
    api_buf_puts(b, ",\"code\":");
    if (e->code) api_buf_json_string(b, (const uint8_t *)e->code, strlen(e->code));
    else api_buf_puts(b, "null");
    api_buf_puts(b, "}}");
}

/* ---- request parsing ---------------------------------------------------------------------------- */

#define BAD "invalid_request_error"

/* 1 if the JSON text contains the escape \u0000 (a backslash preceded by an even number of
 * backslashes, then u0000). Backslashes occur only inside JSON strings, so counting suffices. */
static int has_nul_escape(const char *s, size_t n) {
    for (size_t i = 0; i + 5 < n; i++) {
        if (s[i] != '\\') continue;
        size_t j = i + 1;
        if (s[j] == '\\') { i = j; continue; } /* an escaped backslash: skip both */
        if (s[j] == 'u' && !memcmp(s + j + 1, "0000", 4)) return 1;
    }
    return 0;
}

static int is_null(const cJSON *v) { return v == NULL || cJSON_IsNull(v); }

/* A JSON number that is an integer; *out is clamped to [-2^62, 2^62]. */
static int get_integer(const cJSON *v, const char *name, double *out, api_error *e) {
    if (!cJSON_IsNumber(v))
        return api_fail(e, 400, BAD, name, "invalid_type", "'%s' must be an integer", name);
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d))
        return api_fail(e, 400, BAD, name, "invalid_type", "'%s' must be an integer", name);
    *out = d;
    return 0;
}

static int get_number(const cJSON *v, const char *name, double lo, double hi, int lo_open,
                      double *out, api_error *e) {
    if (!cJSON_IsNumber(v))
        return api_fail(e, 400, BAD, name, "invalid_type", "'%s' must be a number", name);
    double d = v->valuedouble;
    if (!isfinite(d) || d > hi || d < lo || (lo_open && d == lo))
        return api_fail(e, 400, BAD, name, "invalid_value", "'%s' must be in %s%g, %g]", name,
                       lo_open ? "(" : "[", lo, hi);
    *out = d;
    return 0;
}

static int parse_prompt(const cJSON *v, const api_model_info *mi, api_request *r, api_error *e) {
    if (is_null(v))
        return api_fail(e, 400, BAD, "prompt", "missing_required_parameter",
                       "'prompt' is required (a string, or an array of token ids)");
    if (cJSON_IsString(v)) {
        size_t n = strlen(v->valuestring);
        r->prompt_text = mallocCheck(n + 1);
        memcpy(r->prompt_text, v->valuestring, n + 1);
        r->prompt_text_len = n;
        r->prompt = mallocCheck((n + 1) * sizeof(uint32_t));
        r->n_prompt = (int)(n > INT_MAX ? INT_MAX : tok_encode(mi->tok, (const uint8_t *)v->valuestring,
                                                               n, r->prompt));
    } else if (cJSON_IsArray(v)) {
        int n = cJSON_GetArraySize(v);
        const cJSON *it = v->child;
        if (n > 0 && cJSON_IsString(it))
            return api_fail(e, 400, BAD, "prompt", "invalid_type",
                           "a batch of prompts (array of strings) is not supported; send one "
                           "string per request");
        r->prompt = mallocCheck(((size_t)n + 1) * sizeof(uint32_t));
        api_buf text = {0};
        int i = 0;
        for (; it; it = it->next, i++) {
            double d;
            if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) ||
                it->valuedouble != floor(it->valuedouble)) {
                api_buf_free(&text);
                return api_fail(e, 400, BAD, "prompt", "invalid_type",
                               "'prompt' must be a string or an array of integer token ids "
                               "(element %d is not an integer)", i);
            }
            d = it->valuedouble;
            if (d < 0 || d >= mi->n_vocab) {
                api_buf_free(&text);
                return api_fail(e, 400, BAD, "prompt", "invalid_value",
                               "token id %.0f at prompt[%d] is outside the vocabulary [0, %d)", d,
                               i, mi->n_vocab);
            }
            r->prompt[i] = (uint32_t)d;
            size_t bl;
            const uint8_t *bytes = tok_token_bytes(mi->tok, r->prompt[i], &bl);
            api_buf_put(&text, bytes, bl);
        }
        r->n_prompt = i;
        r->prompt_text = text.p; /* the decoded bytes, for --log-content */
        r->prompt_text_len = text.len;
    } else {
        return api_fail(e, 400, BAD, "prompt", "invalid_type",
                       "'prompt' must be a string or an array of integer token ids");
    }
    return 0;
}

int api_prompt_fits(const api_model_info *mi, api_request *r, api_error *e) {
    const char *param = r->chat ? "messages" : "prompt";
    if (r->n_prompt == 0)
        return api_fail(e, 400, BAD, param, "invalid_value", "'%s' is empty", param);
    if (r->n_prompt >= mi->ctx)
        return api_fail(e, 400, BAD, param, "context_length_exceeded",
                       "This model's maximum context length is %d tokens, however the %s is "
                       "%d tokens (it must leave room for at least one completion token)",
                       mi->ctx, r->chat ? "rendered conversation" : "prompt", r->n_prompt);
    int room = mi->ctx - r->n_prompt;
    if (r->max_tokens > room) r->max_tokens = room;
    return 0;
}

static int add_stop(api_request *r, const cJSON *s, api_error *e) {
    if (!cJSON_IsString(s))
        return api_fail(e, 400, BAD, "stop", "invalid_type",
                       "'stop' must be a string or an array of strings");
    size_t n = strlen(s->valuestring);
    if (n == 0 || n > API_MAX_STOP_LEN)
        return api_fail(e, 400, BAD, "stop", "invalid_value",
                       "each stop sequence must be 1..%d bytes long", API_MAX_STOP_LEN);
    if (r->n_stop == API_MAX_STOP)
        return api_fail(e, 400, BAD, "stop", "invalid_value", "at most %d stop sequences",
                       API_MAX_STOP);
    r->stop[r->n_stop] = mallocCheck(n + 1);
    memcpy(r->stop[r->n_stop], s->valuestring, n + 1);
    r->stop_len[r->n_stop++] = n;
    return 0;
}

/* Fields accepted only at their neutral value, for clients that always send them. */
static int check_neutral(const char *k, const cJSON *v, api_error *e) {
    if (is_null(v)) return 0;
    if (!strcmp(k, "n") || !strcmp(k, "best_of")) {
        if (cJSON_IsNumber(v) && v->valuedouble == 1) return 0;
        return api_fail(e, 400, BAD, k, "unsupported_value", "'%s' must be 1 (one choice per "
                       "request)", k);
    }
    if (!strcmp(k, "echo")) {
        if (cJSON_IsFalse(v)) return 0;
        return api_fail(e, 400, BAD, k, "unsupported_value", "'echo' is not supported");
    }
    if (!strcmp(k, "presence_penalty") || !strcmp(k, "frequency_penalty")) {
        if (cJSON_IsNumber(v) && v->valuedouble == 0) return 0;
        return api_fail(e, 400, BAD, k, "unsupported_value", "'%s' must be 0 (not supported)", k);
    }
    if (!strcmp(k, "logit_bias")) {
        if (cJSON_IsObject(v) && v->child == NULL) return 0;
        return api_fail(e, 400, BAD, k, "unsupported_value", "'logit_bias' is not supported");
    }
    if (!strcmp(k, "user")) {
        if (cJSON_IsString(v)) return 0;
        return api_fail(e, 400, BAD, k, "invalid_type", "'user' must be a string");
    }
    /* logprobs, suffix */
    return api_fail(e, 400, BAD, k, "unsupported_value", "'%s' is not supported (send null)", k);
}

static const char *const KNOWN[] = {"model", "prompt", "max_tokens", "temperature", "top_p",
                                    "top_k", "seed", "stop", "stream", "stream_options", "n",
                                    "best_of", "echo", "logprobs", "suffix", "logit_bias",
                                    "presence_penalty", "frequency_penalty", "user"};

const char *api_unknown_field(const cJSON *root, const char *const *known, size_t n) {
    for (const cJSON *it = root->child; it; it = it->next) {
        int ok = 0;
        for (size_t i = 0; i < n; i++) ok |= !strcmp(it->string, known[i]);
        if (!ok) return it->string;
    }
    return NULL;
}

int api_parse_sampling(const cJSON *root, const api_model_info *mi, api_request *r, api_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!is_null(v)) {
        if (!cJSON_IsString(v))
            return api_fail(e, 400, BAD, "model", "invalid_type", "'model' must be a string");
        if (strcmp(v->valuestring, mi->model_name))
            return api_fail(e, 404, BAD, "model", "model_not_found",
                           "The model '%.64s' does not exist (this server serves '%s')",
                           v->valuestring, mi->model_name);
    }
    static const char *const neutral[] = {"n", "logit_bias", "presence_penalty",
                                          "frequency_penalty", "user"};
    for (size_t i = 0; i < sizeof(neutral) / sizeof(neutral[0]); i++)
        if (check_neutral(neutral[i], cJSON_GetObjectItemCaseSensitive(root, neutral[i]), e))
            return -1;
    double d = 0;
    r->max_tokens = API_DEFAULT_MAX_TOKENS;
    if (!is_null(v = cJSON_GetObjectItemCaseSensitive(root, "max_tokens"))) {
        if (get_integer(v, "max_tokens", &d, e)) return -1;
        if (d < 1)
            return api_fail(e, 400, BAD, "max_tokens", "invalid_value",
                           "'max_tokens' must be at least 1 (got %.0f)", d);
        r->max_tokens = d > INT_MAX ? INT_MAX : (int)d;
    }
    r->sp.temperature = 1.0f;
    r->sp.top_p = 1.0f;
    r->sp.top_k = 0;
    if (!is_null(v = cJSON_GetObjectItemCaseSensitive(root, "temperature"))) {
        if (get_number(v, "temperature", 0, 2, 0, &d, e)) return -1;
        r->sp.temperature = (float)d;
    }
    if (!is_null(v = cJSON_GetObjectItemCaseSensitive(root, "top_p"))) {
        if (get_number(v, "top_p", 0, 1, 1, &d, e)) return -1;
        r->sp.top_p = (float)d;
    }
    if (!is_null(v = cJSON_GetObjectItemCaseSensitive(root, "top_k"))) {
        if (get_integer(v, "top_k", &d, e)) return -1;
        if (d < 0)
            return api_fail(e, 400, BAD, "top_k", "invalid_value", "'top_k' must be >= 0 (0 = all)");
        r->sp.top_k = d > INT_MAX ? INT_MAX : (int)d;
    }
    if (!is_null(v = cJSON_GetObjectItemCaseSensitive(root, "seed"))) {
        if (get_integer(v, "seed", &d, e)) return -1;
        if (fabs(d) > 9007199254740992.0) /* 2^53: beyond it a JSON number is not exact */
            return api_fail(e, 400, BAD, "seed", "invalid_value", "'seed' must be within ±2^53");
        r->seed = (uint64_t)(int64_t)d;
        r->has_seed = 1;
    }
    if (!is_null(v = cJSON_GetObjectItemCaseSensitive(root, "stop"))) {
        if (cJSON_IsArray(v)) {
            for (const cJSON *s = v->child; s; s = s->next)
                if (add_stop(r, s, e)) return -1;
        } else if (add_stop(r, v, e)) {
            return -1;
        }
    }
    if (!is_null(v = cJSON_GetObjectItemCaseSensitive(root, "stream"))) {
        if (!cJSON_IsBool(v))
            return api_fail(e, 400, BAD, "stream", "invalid_type", "'stream' must be a boolean");
        r->stream = cJSON_IsTrue(v);
    }
    if (!is_null(v = cJSON_GetObjectItemCaseSensitive(root, "stream_options"))) {
        const cJSON *u = cJSON_GetObjectItemCaseSensitive(v, "include_usage");
        if (!cJSON_IsObject(v) || (!is_null(u) && !cJSON_IsBool(u)))
            return api_fail(e, 400, BAD, "stream_options", "invalid_type",
                           "'stream_options' must be an object {\"include_usage\": bool}");
        r->include_usage = cJSON_IsTrue(u);
    }
    return 0;
}

static int parse_fields(const cJSON *root, const api_model_info *mi, api_request *r, api_error *e) {
    const char *unknown = api_unknown_field(root, KNOWN, sizeof(KNOWN) / sizeof(KNOWN[0]));
    if (unknown)
        return api_fail(e, 400, BAD, unknown, "unknown_parameter",
                       "Unrecognized request argument supplied: %.64s", unknown);
    static const char *const neutral[] = {"best_of", "echo", "logprobs", "suffix"};
    for (size_t i = 0; i < sizeof(neutral) / sizeof(neutral[0]); i++)
        if (check_neutral(neutral[i], cJSON_GetObjectItemCaseSensitive(root, neutral[i]), e))
            return -1;
    if (api_parse_sampling(root, mi, r, e)) return -1;
    if (parse_prompt(cJSON_GetObjectItemCaseSensitive(root, "prompt"), mi, r, e)) return -1;
    return api_prompt_fits(mi, r, e);
}

/* RFC 8259 is stricter than cJSON: no raw NUL anywhere and no unescaped control character
 * (U+0000..U+001F) inside a string. Returns 1 when the body passes. */
static int json_controls_ok(const char *body, size_t len) {
    int in_str = 0, esc = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)body[i];
        if (c == 0) return 0;
        if (!in_str) {
            if (c == '"') in_str = 1;
        } else if (esc) {
            esc = 0;
        } else if (c == '\\') {
            esc = 1;
        } else if (c == '"') {
            in_str = 0;
        } else if (c < 0x20) {
            return 0;
        }
    }
    return 1;
}

/* api_fail as a NULL pointer, for the cJSON-returning function below */
#define FAIL_NULL(...) (api_fail(__VA_ARGS__), (cJSON *)NULL)

cJSON *api_json_body(const char *body, size_t len, api_error *err) {
    if (!api_utf8_valid((const uint8_t *)body, len))
        return FAIL_NULL(err, 400, BAD, NULL, "invalid_utf8",
                         "the request body is not valid UTF-8 (JSON text must be UTF-8, RFC "
                         "8259); send arbitrary bytes as a prompt of token ids");
    if (has_nul_escape(body, len))
        return FAIL_NULL(err, 400, BAD, NULL, "invalid_value",
                         "strings must not contain \\u0000 (NUL)");
    if (!json_controls_ok(body, len))
        return FAIL_NULL(err, 400, BAD, NULL, "invalid_json",
                         "We could not parse the JSON body of your request (a raw NUL or an "
                         "unescaped control character inside a string; escape it, e.g. \\n)");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (root != NULL) { /* nothing but whitespace may follow the value */
        for (const char *q = end; q && q < body + len; q++)
            if (*q != ' ' && *q != '\t' && *q != '\r' && *q != '\n') {
                cJSON_Delete(root);
                return FAIL_NULL(err, 400, BAD, NULL, "invalid_json",
                                 "We could not parse the JSON body of your request (unexpected "
                                 "text after the JSON object)");
            }
    }
    if (root == NULL)
        return FAIL_NULL(err, 400, BAD, NULL, "invalid_json",
                         "We could not parse the JSON body of your request (expected a JSON "
                         "object; note that JSON has no NaN or Infinity)");
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return FAIL_NULL(err, 400, BAD, NULL, "invalid_json",
                         "the request body must be a JSON object");
    }
    return root;
}

int api_parse_completion(const char *body, size_t len, const api_model_info *mi, api_request *req,
                        api_error *err) {
    memset(req, 0, sizeof(*req));
    cJSON *root = api_json_body(body, len, err);
    if (!root) return -1;
    int rc = parse_fields(root, mi, req, err);
    cJSON_Delete(root);
    if (rc) api_request_free(req);
    return rc;
}

void api_request_free(api_request *req) {
    free(req->prompt);
    free(req->prompt_text);
    for (int i = 0; i < req->n_stop; i++) free(req->stop[i]);
    memset(req, 0, sizeof(*req));
}

/* ---- stop sequences ------------------------------------------------------------------------------ */

long api_stop_find(const api_request *req, const uint8_t *text, size_t n, size_t from) {
    long best = -1;
    if (from > n) return -1;
    for (int i = 0; i < req->n_stop; i++) {
        const uint8_t *p = memmem(text + from, n - from, req->stop[i], req->stop_len[i]);
        if (p && (best < 0 || p - text < best)) best = p - text;
    }
    return best;
}

size_t api_stop_holdback(const api_request *req, const uint8_t *text, size_t n) {
    size_t hold = 0;
    for (int i = 0; i < req->n_stop; i++) {
        size_t k = req->stop_len[i] - 1;
        if (k > n) k = n;
        for (; k > hold; k--)
            if (!memcmp(text + n - k, req->stop[i], k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

/* ---- response bodies ------------------------------------------------------------------------------ */

static void head(api_buf *b, const char *id, long created, const char *model) {
    api_buf_puts(b, "{\"id\":");
    api_buf_json_string(b, (const uint8_t *)id, strlen(id));
    api_buf_printf(b, ",\"object\":\"text_completion\",\"created\":%ld,\"model\":", created);
    api_buf_json_string(b, (const uint8_t *)model, strlen(model));
}

static void choice(api_buf *b, const uint8_t *text, size_t n, const char *finish) {
    api_buf_puts(b, ",\"choices\":[{\"text\":");
    api_buf_json_string(b, text, n);
    api_buf_puts(b, ",\"index\":0,\"logprobs\":null,\"finish_reason\":");
    if (finish) api_buf_printf(b, "\"%s\"}]", finish);
    else api_buf_puts(b, "null}]");
}

static void usage(api_buf *b, int prompt_tokens, int completion_tokens) {
    api_buf_printf(b, ",\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}",
                  prompt_tokens, completion_tokens, prompt_tokens + completion_tokens);
}

void api_completion_json(api_buf *b, const char *id, long created, const char *model,
                        const uint8_t *text, size_t n, const char *finish, int prompt_tokens,
                        int completion_tokens) {
    head(b, id, created, model);
    choice(b, text, n, finish);
    usage(b, prompt_tokens, completion_tokens);
    api_buf_puts(b, "}");
}

void api_chunk_sse(api_buf *b, const char *id, long created, const char *model, const uint8_t *text,
                  size_t n, const char *finish) {
    api_buf_puts(b, "data: ");
    head(b, id, created, model);
    choice(b, text, n, finish);
    api_buf_puts(b, "}\n\n");
}

void api_usage_sse(api_buf *b, const char *id, long created, const char *model, int prompt_tokens,
                  int completion_tokens) {
    api_buf_puts(b, "data: ");
    head(b, id, created, model);
    api_buf_puts(b, ",\"choices\":[]");
    usage(b, prompt_tokens, completion_tokens);
    api_buf_puts(b, "}\n\n");
}
