/*
 * tests/test_gateway.c — the serving module without sockets: UTF-8 rules, request validation,
 * the OpenAI JSON shapes, stop sequences, Prometheus text, and the generation slots.
 *
 * Independent references: glibc iconv decides what is valid UTF-8 (strict: it refuses overlongs,
 * surrogates and code points above U+10FFFF, and reports an incomplete tail separately); cJSON
 * reads back every body we write; the expected HTTP statuses come from the contract; the
 * slots' greedy output is compared with a hand-written decode loop (gpt_decode_step + argmax);
 * the histogram is re-counted from the raw observations.
 */
#include <errno.h>
#include <iconv.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>

#include "serve/server.h"

#define TU_PREFIX "test_gateway"
#include "tests/testutil.h"

/* iconv's verdict: 1 valid, 0 invalid, -1 valid except for an incomplete sequence at the end. */
static int iconv_utf8(const uint8_t *s, size_t n) {
    iconv_t cd = iconv_open("UTF-32LE", "UTF-8");
    assert_true(cd != (iconv_t)-1);
    char *in = (char *)s, *out = malloc(4 * n + 4), *o = out;
    size_t il = n, ol = 4 * n + 4;
    size_t r = iconv(cd, &in, &il, &o, &ol);
    int e = errno;
    iconv_close(cd);
    free(out);
    if (r != (size_t)-1) return 1;
    return e == EINVAL ? -1 : 0;
}

/* 1 if appending 1..3 continuation bytes to s[0..k) can make one valid character. */
static int completable(const uint8_t *s, size_t k) {
    static const uint8_t cont[] = {0x80, 0x8f, 0x90, 0x9f, 0xa0, 0xbf};
    uint8_t t[8];
    memcpy(t, s, k);
    for (size_t extra = 1; k + extra <= 4; extra++)
        for (size_t a = 0; a < sizeof(cont); a++) { /* first added byte varies, others 0x80 */
            t[k] = cont[a];
            for (size_t i = 1; i < extra; i++) t[k + i] = 0x80;
            if (iconv_utf8(t, k + extra) == 1) return 1;
        }
    return 0;
}

/* Random bytes biased towards UTF-8 structure (leads followed by continuation bytes). */
static void utf8ish(uint8_t *p, size_t n) {
    static const uint8_t pool[] = {0x41, 0x7f, 0x80, 0xbf, 0xc0, 0xc2, 0xdf, 0xe0, 0xa0, 0xed,
                                   0x9f, 0xef, 0xf0, 0x90, 0xf4, 0x8f, 0xf5, 0xff, 0x00, 0x20};
    for (size_t i = 0; i < n; i++)
        p[i] = tu_rand() % 3 ? pool[tu_rand() % sizeof(pool)]
                             : (uint8_t)(0x80 | (tu_rand() & 0x3f));
}

static void test_utf8_against_iconv(void **state) {
    (void)state;
    static const struct { const char *s; int valid; } cases[] = {
        {"plain ascii", 1},        {"\xe2\x82\xac", 1},     {"\xf0\x9f\x98\x80", 1},
        {"\xc0\xaf", 0},           {"\xe0\x80\xaf", 0},     {"\xed\xa0\x80", 0},
        {"\xf4\x90\x80\x80", 0},   {"\xff", 0},             {"\x80", 0},
        {"\xef\xbf\xbf", 1},       {"\xf4\x8f\xbf\xbf", 1}, {"\xed\x9f\xbf", 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const uint8_t *s = (const uint8_t *)cases[i].s;
        assert_int_equal(api_utf8_valid(s, strlen(cases[i].s)), cases[i].valid);
        assert_int_equal(iconv_utf8(s, strlen(cases[i].s)) == 1, cases[i].valid);
    }
    uint8_t buf[16];
    int n_valid = 0;
    for (int it = 0; it < 20000; it++) {
        size_t n = 1 + tu_rand() % 8;
        utf8ish(buf, n);
        int ref = iconv_utf8(buf, n);
        assert_int_equal(api_utf8_valid(buf, n), ref == 1);
        n_valid += ref == 1;
        /* the incomplete tail: the last lead byte within the last 3 starts bytes that are not
         * yet a character but become a valid one when continuation bytes are appended (iconv
         * judges the completed sequence; its own "incomplete" verdict is too lenient to use) */
        size_t want = 0;
        for (size_t k = 1; k <= 3 && k <= n; k++) {
            if ((buf[n - k] & 0xC0) == 0x80) continue;
            if (buf[n - k] >= 0x80 && iconv_utf8(buf + n - k, k) != 1 && completable(buf + n - k, k))
                want = k;
            break;
        }
        assert_int_equal(api_utf8_incomplete_tail(buf, n), want);
    }
    assert_true(n_valid > 500); /* the generator does produce valid strings */
}

/* The two helpers serve and the gateway share for bodies and streams (server.c, gw_http.c,
 * gw_stream.c): a body under a limit, and a buffer drained in pieces then refilled. */
static void test_body_limit_and_drain(void **state) {
    (void)state;
    api_buf body = {0};
    int too_large = 0;
    size_t discarded = 0;
    assert_int_equal(api_body_take(&body, &too_large, &discarded, "abcd", 4, 8), 1);
    assert_int_equal(api_body_take(&body, &too_large, &discarded, "efgh", 4, 8), 1); /* 8 <= 8 */
    assert_int_equal(body.len, 8);
    assert_memory_equal(body.p, "abcdefgh", 8);
    assert_int_equal(too_large, 0);
    assert_int_equal(api_body_take(&body, &too_large, &discarded, "i", 1, 8), 1); /* 9 > 8 */
    assert_int_equal(too_large, 1);
    assert_null(body.p); /* dropped, not kept */
    assert_int_equal(body.len, 0);
    char junk[127];
    memset(junk, 'x', sizeof junk);
    assert_int_equal(api_body_take(&body, &too_large, &discarded, junk, 127, 8), 1); /* 128 = 16x */
    assert_null(body.p);
    assert_int_equal(discarded, 128);
    assert_int_equal(api_body_take(&body, &too_large, &discarded, "z", 1, 8), 0); /* past 16x */

    api_buf b = {0};
    api_buf_puts(&b, "hello world");
    size_t off = 0;
    char out[16];
    assert_int_equal(api_buf_drain(&b, &off, out, 4), 4);
    assert_memory_equal(out, "hell", 4);
    assert_int_equal(api_buf_drain(&b, &off, out, 0), 0); /* bytes left, no room */
    assert_int_equal(api_buf_drain(&b, &off, out, sizeof out), 7);
    assert_memory_equal(out, "o world", 7);
    assert_int_equal(api_buf_drain(&b, &off, out, sizeof out), -1); /* empty: reset for refill */
    assert_int_equal(b.len, 0);
    assert_int_equal(off, 0);
    api_buf_puts(&b, "again");
    assert_int_equal(api_buf_drain(&b, &off, out, sizeof out), 5);
    assert_memory_equal(out, "again", 5);
    api_buf_free(&b);
}

static void test_json_string_roundtrip(void **state) {
    (void)state;
    uint8_t raw[64];
    for (int it = 0; it < 3000; it++) {
        size_t n = tu_rand() % 40;
        utf8ish(raw, n);
        for (size_t i = 0; i < n; i++)
            if (raw[i] == 0) raw[i] = 1; /* cJSON strings stop at NUL; NUL is tested below */
        api_buf b = {0};
        api_buf_puts(&b, "[");
        api_buf_json_string(&b, raw, n);
        api_buf_puts(&b, "]");
        assert_int_equal(iconv_utf8((const uint8_t *)b.p, b.len), 1); /* always valid UTF-8 */
        cJSON *j = cJSON_Parse(b.p);
        assert_non_null(j);
        const char *back = cJSON_GetArrayItem(j, 0)->valuestring;
        if (iconv_utf8(raw, n) == 1) { /* valid input survives byte for byte */
            assert_int_equal(strlen(back), n);
            assert_memory_equal(back, raw, n);
        }
        cJSON_Delete(j);
        api_buf_free(&b);
    }
    /* U+FFFD substitution of maximal subparts: the examples of Unicode 15 §3.9 (Table 3-8 and
     * the text around it), as Python's bytes.decode("utf-8", "replace") also gives them */
    static const struct { const char *in, *out; } subs[] = {
        {"\xe2\x82" "A", "\"\xEF\xBF\xBD" "A\""},                  /* truncated: one U+FFFD */
        {"\xc0\xaf", "\"\xEF\xBF\xBD\xEF\xBF\xBD\""},              /* C0 is never a lead */
        {"\xed\xa0\x80", "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\""}, /* surrogate: 3 */
        {"\xf0\x9f\x98" "A", "\"\xEF\xBF\xBD" "A\""},              /* truncated 4-byte */
        {"a\xf4\x90\x80\x80", "\"a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\""},
    };
    api_buf b = {0};
    for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
        api_buf_json_string(&b, (const uint8_t *)subs[i].in, strlen(subs[i].in));
        assert_string_equal(b.p, subs[i].out);
        b.len = 0;
    }
    api_buf_json_string(&b, (const uint8_t *)"a\0b\"\\\n\xff", 7);
    assert_string_equal(b.p, "\"a\\u0000b\\\"\\\\\\n\xEF\xBF\xBD\"");
    api_buf_free(&b);
}

/* ---- request validation ------------------------------------------------------------------ */

static tok_tokenizer TOK;
static api_model_info MI;

static void setup_mi(void) {
    tok_init_byte(&TOK);
    MI.tok = &TOK;
    MI.n_vocab = 256;
    MI.ctx = 64;
    MI.model_name = "tiny";
}

static int parse(const char *body, api_request *r, api_error *e) {
    return api_parse_completion(body, strlen(body), &MI, r, e);
}

static void expect_error(const char *body, int status, const char *param) {
    api_request r;
    api_error e;
    if (parse(body, &r, &e) == 0) fail_msg("accepted: %s", body);
    if (e.status != status || strcmp(e.param, param ? param : ""))
        fail_msg("%s -> %d param '%s' (%s); wanted %d '%s'", body, e.status, e.param, e.message,
                 status, param ? param : "");
    assert_null(r.prompt); /* nothing leaks on error */
}

static void test_request_errors(void **state) {
    (void)state;
    setup_mi();
    { /* a raw NUL inside a string must not silently cut the prompt */
        static const char body[] = "{\"prompt\":\"ab\0cdef\"}";
        api_request r;
        api_error e;
        assert_int_equal(api_parse_completion(body, sizeof(body) - 1, &MI, &r, &e), -1);
        assert_int_equal(e.status, 400);
    }
    { /* whitespace after the object is fine, and escaped control characters are too */
        api_request r;
        api_error e;
        const char *ok_body = "{\"prompt\":\"a\\nb\"}  \n";
        assert_int_equal(api_parse_completion(ok_body, strlen(ok_body), &MI, &r, &e), 0);
        api_request_free(&r);
    }
    expect_error("{", 400, NULL);
    expect_error("", 400, NULL);
    expect_error("[]", 400, NULL);
    expect_error("{}", 400, "prompt");
    expect_error("{\"prompt\":\"a\",\"temperature\":NaN}", 400, NULL); /* JSON has no NaN */
    expect_error("{\"prompt\":\"a\",\"max_tokens\":3} xyz", 400, NULL); /* trailing text */
    expect_error("{\"prompt\":\"a\nb\"}", 400, NULL);                  /* raw newline in a string */
    expect_error("{\"prompt\":\"a\tb\"}", 400, NULL);                  /* raw tab in a string */
    expect_error("{\"prompt\":\"a\",\"temperature\":\"hot\"}", 400, "temperature");
    expect_error("{\"prompt\":\"a\",\"temperature\":2.5}", 400, "temperature");
    expect_error("{\"prompt\":\"a\",\"temperature\":1e999}", 400, "temperature");
    expect_error("{\"prompt\":\"a\",\"temperature\":-0.1}", 400, "temperature");
    expect_error("{\"prompt\":\"a\",\"max_tokens\":0}", 400, "max_tokens");
    expect_error("{\"prompt\":\"a\",\"max_tokens\":-1}", 400, "max_tokens");
    expect_error("{\"prompt\":\"a\",\"max_tokens\":1.5}", 400, "max_tokens");
    expect_error("{\"prompt\":\"a\",\"max_tokens\":\"16\"}", 400, "max_tokens");
    expect_error("{\"prompt\":\"a\",\"top_p\":0}", 400, "top_p");
    expect_error("{\"prompt\":\"a\",\"top_p\":1.01}", 400, "top_p");
    expect_error("{\"prompt\":\"a\",\"top_k\":-1}", 400, "top_k");
    expect_error("{\"prompt\":\"a\",\"seed\":1e300}", 400, "seed");
    expect_error("{\"prompt\":\"a\",\"stream\":1}", 400, "stream");
    expect_error("{\"prompt\":\"a\",\"stop\":\"\"}", 400, "stop");
    expect_error("{\"prompt\":\"a\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\"]}", 400, "stop");
    expect_error("{\"prompt\":\"a\",\"stop\":[1]}", 400, "stop");
    expect_error("{\"prompt\":\"a\",\"n\":2}", 400, "n");
    expect_error("{\"prompt\":\"a\",\"echo\":true}", 400, "echo");
    expect_error("{\"prompt\":\"a\",\"logprobs\":1}", 400, "logprobs");
    expect_error("{\"prompt\":\"a\",\"foo\":1}", 400, "foo");
    expect_error("{\"prompt\":\"a\",\"model\":\"gpt-4\"}", 404, "model");
    expect_error("{\"prompt\":\"a\",\"model\":7}", 400, "model");
    expect_error("{\"prompt\":\"\"}", 400, "prompt");
    expect_error("{\"prompt\":5}", 400, "prompt");
    expect_error("{\"prompt\":[]}", 400, "prompt");
    expect_error("{\"prompt\":[\"a\",\"b\"]}", 400, "prompt");
    expect_error("{\"prompt\":[256]}", 400, "prompt");
    expect_error("{\"prompt\":[-1]}", 400, "prompt");
    expect_error("{\"prompt\":[1.5]}", 400, "prompt");
    expect_error("{\"prompt\":\"a\\u0000b\"}", 400, NULL);
    expect_error("{\"prompt\":\"\xff\xfe\"}", 400, NULL); /* invalid UTF-8 in the body */
    expect_error("{\"prompt\":\"\xed\xa0\x80\"}", 400, NULL);  /* an encoded surrogate */
    char longp[128];
    memset(longp, 'x', 64);
    longp[64] = 0; /* 64 byte tokens = the whole context: no room for a completion */
    char body[256];
    snprintf(body, sizeof(body), "{\"prompt\":\"%s\"}", longp);
    expect_error(body, 400, "prompt");
    /* the error object has the OpenAI shape */
    api_request r;
    api_error e;
    assert_int_equal(parse("{\"prompt\":\"a\",\"foo\":1}", &r, &e), -1);
    api_buf b = {0};
    api_error_json(&b, &e);
    cJSON *j = cJSON_Parse(b.p), *o = cJSON_GetObjectItem(j, "error");
    assert_true(cJSON_IsString(cJSON_GetObjectItem(o, "message")));
    assert_string_equal(cJSON_GetObjectItem(o, "type")->valuestring, "invalid_request_error");
    assert_string_equal(cJSON_GetObjectItem(o, "param")->valuestring, "foo");
    assert_true(cJSON_IsString(cJSON_GetObjectItem(o, "code")));
    cJSON_Delete(j);
    api_buf_free(&b);
    assert_int_equal(parse("{", &r, &e), -1);
    api_error_json(&b, &e);
    j = cJSON_Parse(b.p);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "param")));
    cJSON_Delete(j);
    api_buf_free(&b);
    tok_free(&TOK);
}

static void test_request_accepted(void **state) {
    (void)state;
    setup_mi();
    api_request r;
    api_error e;
    /* defaults */
    assert_int_equal(parse("{\"model\":\"tiny\",\"prompt\":\"ROMEO:\"}", &r, &e), 0);
    assert_int_equal(r.n_prompt, 6);
    assert_int_equal(r.max_tokens, API_DEFAULT_MAX_TOKENS);
    assert_true(r.sp.temperature == 1.0f && r.sp.top_p == 1.0f && r.sp.top_k == 0);
    assert_int_equal(r.stream, 0);
    assert_int_equal(r.has_seed, 0);
    api_request_free(&r);
    /* max_tokens 10^9 is clamped to the context left: 64 - 6 */
    assert_int_equal(parse("{\"prompt\":\"ROMEO:\",\"max_tokens\":1000000000}", &r, &e), 0);
    assert_int_equal(r.max_tokens, 64 - 6);
    api_request_free(&r);
    /* a prompt of 63 tokens leaves exactly one */
    char body[256], p63[64];
    memset(p63, 'y', 63);
    p63[63] = 0;
    snprintf(body, sizeof(body), "{\"prompt\":\"%s\",\"max_tokens\":5}", p63);
    assert_int_equal(parse(body, &r, &e), 0);
    assert_int_equal(r.max_tokens, 1);
    api_request_free(&r);
    /* UTF-8 prompt: the byte tokenizer sees the UTF-8 bytes (é = C3 A9) */
    assert_int_equal(parse("{\"prompt\":\"h\\u00e9\xc3\xa9\"}", &r, &e), 0);
    assert_int_equal(r.n_prompt, 5);
    assert_int_equal(r.prompt[1], 0xC3);
    assert_int_equal(r.prompt[2], 0xA9);
    api_request_free(&r);
    /* token ids carry arbitrary bytes, invalid UTF-8 included */
    assert_int_equal(parse("{\"prompt\":[255,0,128],\"temperature\":0,\"top_k\":5,\"top_p\":0.5,"
                           "\"seed\":-7,\"stop\":[\"\\n\",\"END\"],\"stream\":true,"
                           "\"stream_options\":{\"include_usage\":true},\"n\":1,\"echo\":false,"
                           "\"logprobs\":null,\"user\":\"u\",\"presence_penalty\":0}",
                           &r, &e),
                     0);
    assert_int_equal(r.n_prompt, 3);
    assert_int_equal(r.prompt[0], 255);
    assert_true(r.sp.temperature == 0.0f && r.sp.top_k == 5 && r.sp.top_p == 0.5f);
    assert_int_equal(r.has_seed, 1);
    assert_true(r.seed == (uint64_t)(int64_t)-7);
    assert_int_equal(r.n_stop, 2);
    assert_string_equal(r.stop[0], "\n");
    assert_int_equal(r.stop_len[1], 3);
    assert_int_equal(r.stream, 1);
    assert_int_equal(r.include_usage, 1);
    assert_int_equal(r.prompt_text_len, 3);
    api_request_free(&r);
    assert_int_equal(parse("{\"prompt\":\"a\",\"stop\":\"x\",\"temperature\":2}", &r, &e), 0);
    assert_int_equal(r.n_stop, 1);
    api_request_free(&r);
    tok_free(&TOK);
}

/* ---- stop sequences and response shapes -------------------------------------------------- */

static void test_stop_sequences(void **state) {
    (void)state;
    api_request r;
    memset(&r, 0, sizeof(r));
    char s0[] = "END", s1[] = "\n\n";
    r.stop[0] = s0, r.stop_len[0] = 3;
    r.stop[1] = s1, r.stop_len[1] = 2;
    r.n_stop = 2;
    const uint8_t *t = (const uint8_t *)"ab\nEN\n\nxEND";
    assert_int_equal(api_stop_find(&r, t, 11, 0), 5);  /* "\n\n" at 5 before END at 8 */
    assert_int_equal(api_stop_find(&r, t, 11, 6), 8);
    assert_int_equal(api_stop_find(&r, t, 6, 0), -1);
    assert_int_equal(api_stop_holdback(&r, t, 5), 2);  /* "EN" may become END */
    assert_int_equal(api_stop_holdback(&r, t, 3), 1);  /* "\n" may become "\n\n" */
    assert_int_equal(api_stop_holdback(&r, t, 2), 0);
    assert_int_equal(api_stop_holdback(&r, (const uint8_t *)"E", 1), 1);
}

static void test_response_shapes(void **state) {
    (void)state;
    api_buf b = {0};
    api_completion_json(&b, "cmpl-x", 123, "tiny", (const uint8_t *)"hi \"you\"\n", 9, "length", 6,
                       9);
    cJSON *j = cJSON_Parse(b.p);
    assert_non_null(j);
    assert_string_equal(cJSON_GetObjectItem(j, "object")->valuestring, "text_completion");
    assert_string_equal(cJSON_GetObjectItem(j, "model")->valuestring, "tiny");
    assert_int_equal(cJSON_GetObjectItem(j, "created")->valueint, 123);
    cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    assert_string_equal(cJSON_GetObjectItem(c, "text")->valuestring, "hi \"you\"\n");
    assert_int_equal(cJSON_GetObjectItem(c, "index")->valueint, 0);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(c, "logprobs")));
    assert_string_equal(cJSON_GetObjectItem(c, "finish_reason")->valuestring, "length");
    cJSON *u = cJSON_GetObjectItem(j, "usage");
    assert_int_equal(cJSON_GetObjectItem(u, "total_tokens")->valueint, 15);
    cJSON_Delete(j);
    api_buf_free(&b);
    api_chunk_sse(&b, "cmpl-x", 1, "tiny", (const uint8_t *)"\xe2\x82", 2, NULL);
    assert_true(!strncmp(b.p, "data: {", 7) && !strcmp(b.p + b.len - 2, "\n\n"));
    b.p[b.len - 2] = 0;
    j = cJSON_Parse(b.p + 6);
    c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(c, "finish_reason")));
    /* half a character cannot travel in JSON: it became one U+FFFD (a maximal subpart) */
    assert_string_equal(cJSON_GetObjectItem(c, "text")->valuestring, "\xEF\xBF\xBD");
    cJSON_Delete(j);
    api_buf_free(&b);
}

/* ---- metrics ------------------------------------------------------------------------------- */

static double metric(const char *text, const char *series) {
    const char *p = text;
    size_t n = strlen(series);
    while ((p = strstr(p, series)) != NULL) {
        if ((p == text || p[-1] == '\n') && p[n] == ' ') return atof(p + n + 1);
        p += n;
    }
    return -1;
}

static void test_metrics_text(void **state) {
    (void)state;
    srv_metrics m;
    srv_metrics_init(&m);
    double obs[200], sum = 0;
    for (int i = 0; i < 200; i++) {
        obs[i] = (tu_rand() % 100000) / 2500.0; /* 0 .. 40 s: every bucket and +Inf */
        if (i == 7) obs[i] = 0.5;           /* exactly on a bound: counts in le="0.5" */
        srv_metrics_latency(&m, obs[i]);
        sum += obs[i];
    }
    for (int i = 0; i < 5; i++) srv_metrics_request(&m, SRV_EP_COMPLETIONS, 200);
    srv_metrics_request(&m, SRV_EP_COMPLETIONS, 503);
    srv_metrics_request(&m, SRV_EP_OTHER, 404);
    srv_metrics_request(&m, SRV_EP_OTHER, 42); /* ignored */
    srv_metrics_tokens(&m, 10, 32);
    srv_metrics_tokens(&m, 5, 1);
    srv_gauges g = {.ready = 1, .slots_total = 4, .slots_busy = 3, .queue_capacity = 16,
                   .queue_depth = 2};
    api_buf b = {0};
    srv_metrics_render(&m, &g, &b);
    const char *t = b.p;
    assert_true(metric(t, "minitrain_http_requests_total{endpoint=\"completions\",code=\"200\"}") == 5);
    assert_true(metric(t, "minitrain_http_requests_total{endpoint=\"completions\",code=\"503\"}") == 1);
    assert_true(metric(t, "minitrain_http_requests_total{endpoint=\"other\",code=\"404\"}") == 1);
    assert_null(strstr(t, "code=\"42\""));
    assert_true(metric(t, "minitrain_prompt_tokens_total") == 15);
    assert_true(metric(t, "minitrain_completion_tokens_total") == 33);
    assert_true(metric(t, "minitrain_slots_busy") == 3);
    assert_true(metric(t, "minitrain_queue_depth") == 2);
    assert_true(metric(t, "minitrain_ready") == 1);
    for (int k = 0; k < API_LAT_NBUCKETS; k++) {
        int want = 0;
        for (int i = 0; i < 200; i++) want += obs[i] <= api_latency_bounds[k];
        char series[96];
        snprintf(series, sizeof(series), "minitrain_request_duration_seconds_bucket{le=\"%g\"}",
                 api_latency_bounds[k]);
        assert_true(metric(t, series) == want);
    }
    assert_true(metric(t, "minitrain_request_duration_seconds_bucket{le=\"+Inf\"}") == 200);
    assert_true(metric(t, "minitrain_request_duration_seconds_count") == 200);
    assert_true(fabs(metric(t, "minitrain_request_duration_seconds_sum") - sum) < 1e-6 * sum);
    /* every non-comment line is "name[{labels}] value" */
    for (const char *line = t; *line; line = strchr(line, '\n') + 1) {
        if (*line != '#') {
            const char *sp = strchr(line, ' ');
            assert_non_null(sp);
            char *end;
            strtod(sp + 1, &end);
            assert_true(*end == '\n');
        }
    }
    api_buf_free(&b);
    srv_metrics_destroy(&m);
}

/* ---- slots ----------------------------------------------------------------------------------- */

static void build_model(gpt_model *m, int seq_len) {
    gpt_config cfg = {.n_layer = 2, .n_head = 2, .d_model = 32, .seq_len = seq_len,
                      .vocab_size = 256};
    char err[256];
    assert_int_equal(gpt_build(m, &cfg, err, sizeof(err)), 0);
    gpt_init_weights(m, 7);
    /* make the byte distribution peaked enough that greedy decoding is not a flat tie */
    for (size_t i = 0; i < m->num_params; i++) m->params[i] *= 20.0f;
}

static srv_job *job_for(const char *prompt, int max_tokens, float temperature, const char *stop) {
    api_request r;
    memset(&r, 0, sizeof(r));
    size_t n = strlen(prompt);
    r.prompt = malloc(n * sizeof(uint32_t));
    for (size_t i = 0; i < n; i++) r.prompt[i] = (uint8_t)prompt[i];
    r.n_prompt = (int)n;
    r.max_tokens = max_tokens;
    r.sp.temperature = temperature;
    r.sp.top_p = 1.0f;
    r.seed = 5;
    if (stop) {
        r.stop[0] = strdup(stop);
        r.stop_len[0] = strlen(stop);
        r.n_stop = 1;
    }
    return srv_job_create(&r, 1);
}

static void wait_done(srv_pool *p, srv_job *j, int *finish, size_t *len) {
    int done = 0;
    while (!done) srv_job_wait(p, j, 1 << 30, 1.0, NULL, len, &done, finish);
}

static void test_slots_generate(void **state) {
    (void)state;
    gpt_model m;
    build_model(&m, 64);
    tok_tokenizer tok;
    tok_init_byte(&tok);
    /* reference: the greedy continuation by hand */
    const char *prompt = "To be";
    int n = (int)strlen(prompt), want_n = 20;
    uint8_t want[64];
    gpt_decode_state st;
    gpt_decode_init(&st, &m);
    const float *logits = NULL;
    for (int i = 0; i < n; i++) logits = gpt_decode_step(&m, &st, (uint8_t)prompt[i]);
    for (int i = 0; i < want_n; i++) {
        int best = 0;
        for (int v = 1; v < 256; v++)
            if (logits[v] > logits[best]) best = v;
        want[i] = (uint8_t)best;
        if (i + 1 < want_n) logits = gpt_decode_step(&m, &st, best);
    }
    gpt_decode_free(&st);

    srv_metrics met;
    srv_metrics_init(&met);
    srv_pool *p = srv_pool_create(&m, &tok, 2, 4, 1, &met);
    srv_job *a = job_for(prompt, want_n, 0.0f, NULL), *b = job_for(prompt, want_n, 0.0f, NULL);
    assert_int_equal(srv_pool_submit(p, a), 0);
    assert_int_equal(srv_pool_submit(p, b), 0); /* two slots decode concurrently */
    int fa, fb;
    size_t la, lb;
    wait_done(p, a, &fa, &la);
    wait_done(p, b, &fb, &lb);
    assert_int_equal(fa, SRV_FINISH_LENGTH);
    assert_int_equal(la, (size_t)want_n);
    assert_memory_equal(a->text, want, want_n);
    assert_memory_equal(b->text, want, want_n);
    for (int i = 0; i < want_n; i++) assert_int_equal(a->ends[i], (size_t)i + 1);
    /* a stop sequence taken from the middle of the known output truncates right before it */
    char stop[3] = {(char)want[7], (char)want[8], 0};
    size_t first = 0;
    while (first + 1 < (size_t)want_n && !(want[first] == want[7] && want[first + 1] == want[8]))
        first++;
    assert_true(want[7] != 0 && want[8] != 0); /* a NUL would end the C string */
    srv_job *c = job_for(prompt, want_n, 0.0f, stop);
    assert_int_equal(srv_pool_submit(p, c), 0);
    int fc;
    size_t lc;
    wait_done(p, c, &fc, &lc);
    assert_int_equal(fc, SRV_FINISH_STOP);
    assert_int_equal(lc, first);
    assert_int_equal(c->n_gen, (int)first + 2); /* generation stopped at the stop's end */
    srv_job_release(c);
    /* sampling with the same seed is reproducible */
    srv_job *d = job_for(prompt, want_n, 1.0f, NULL), *e = job_for(prompt, want_n, 1.0f, NULL);
    assert_int_equal(srv_pool_submit(p, d), 0);
    assert_int_equal(srv_pool_submit(p, e), 0);
    wait_done(p, d, &fa, &la);
    wait_done(p, e, &fb, &lb);
    assert_int_equal(la, lb);
    assert_memory_equal(d->text, e->text, la);
    srv_job_release(a);
    srv_job_release(b);
    srv_job_release(d);
    srv_job_release(e);
    int queued, busy;
    srv_pool_stats(p, &queued, &busy);
    assert_int_equal(queued + busy, 0);
    srv_pool_destroy(p);
    assert_true(met.completion_tokens >= (uint64_t)4 * want_n);
    srv_metrics_destroy(&met);
    tok_free(&tok);
    gpt_free(&m);
}

static void test_slots_queue_full_and_cancel(void **state) {
    (void)state;
    gpt_model m;
    build_model(&m, 4096);
    tok_tokenizer tok;
    tok_init_byte(&tok);
    srv_pool *p = srv_pool_create(&m, &tok, 1, 1, 1, NULL);
    srv_job *a = job_for("x", 4000, 1.0f, NULL), *b = job_for("y", 4000, 1.0f, NULL),
           *c = job_for("z", 10, 1.0f, NULL);
    assert_int_equal(srv_pool_submit(p, a), 0);  /* takes the slot */
    assert_int_equal(srv_pool_submit(p, b), 0);  /* waits in the queue (capacity 1) */
    assert_int_equal(srv_pool_submit(p, c), -1); /* refused: slot busy, queue full */
    srv_job_cancel(b);
    srv_job_cancel(a);
    int fa, fb;
    size_t la, lb;
    wait_done(p, a, &fa, &la);
    wait_done(p, b, &fb, &lb);
    assert_int_equal(fa, SRV_FINISH_CANCELLED);
    assert_int_equal(fb, SRV_FINISH_CANCELLED);
    assert_true(a->n_gen < 4000);
    assert_int_equal(b->n_gen, 0);
    assert_int_equal(srv_pool_submit(p, c), 0); /* room again */
    int fc;
    size_t lc;
    wait_done(p, c, &fc, &lc);
    assert_int_equal(fc, SRV_FINISH_LENGTH);
    assert_int_equal(c->n_gen, 10);
    srv_job_release(a);
    srv_job_release(b);
    srv_job_release(c);
    srv_pool_destroy(p);
    tok_free(&tok);
    gpt_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_utf8_against_iconv),
        cmocka_unit_test(test_body_limit_and_drain),
        cmocka_unit_test(test_json_string_roundtrip),
        cmocka_unit_test(test_request_errors),
        cmocka_unit_test(test_request_accepted),
        cmocka_unit_test(test_stop_sequences),
        cmocka_unit_test(test_response_shapes),
        cmocka_unit_test(test_metrics_text),
        cmocka_unit_test(test_slots_generate),
        cmocka_unit_test(test_slots_queue_full_and_cancel),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
