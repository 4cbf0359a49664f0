/*
 * tests/test_gw_proxy.c — the gateway's pure parts without sockets: the config (INI and flags)
 * and its errors, the health state machine walked with a fake clock, retry backoff, Retry-After
 * and the budget, what counts as a failure, response checks (empty 200s), SSE framing, and the
 * content rules on whole texts and on streams cut at every possible place.
 *
 * Independent references: expected states and times come from the rules (5 failures,
 * base × times ejected, capped), written out by hand; Retry-After dates are formatted with
 * strftime and read back; SSE events are compared with the events the test itself joined; the
 * streaming filter's output is compared with strstr() (blocking) and with a hand-written scanner
 * (redaction) over the whole text, for every split of the text into two and three pieces.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "gateway/gw_proxy.h"

static char *write_tmp(const char *text) {
    static char path[64];
    snprintf(path, sizeof(path), "/tmp/mt_gwcfg_%d.ini", (int)getpid());
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

/* A new config (calloc'd) loaded from the INI text; the test fails on an error, printing it. */
static gw_config *load_ok(const char *ini) {
    gw_config *c = calloc(1, sizeof(gw_config));
    gw_config_init(c);
    char err[512];
    int rc = gw_config_load(c, write_tmp(ini), err, sizeof(err));
    if (rc) fprintf(stderr, "%s\n", err);
    assert_int_equal(rc, 0);
    return c;
}

/* ---- config ----------------------------------------------------------------------------------- */

static void test_config_file(void **state) {
    (void)state;
    const char *ini = "; a gateway\n"
                      "[gateway]\nport = 0\nall_ejected = refuse\n"
                      "[policy]\nconsecutive_failures = 3\nejection_base_s = 2\nmax_body = 64K\n"
                      "[upstream a]\nurl = http://127.0.0.1:8081/\nweight = 3\n"
                      "[upstream b]\nurl = http://127.0.0.1:8082\nmax_concurrent = 4\n"
                      "[model shakespeare]\ntargets = a | b, b/small\n"
                      "[rule cards]\npattern = \\d{4}-\\d{4}\naction = redact\non = completions\n";
    gw_config *c = load_ok(ini);
    char err[512];
    assert_int_equal(gw_config_validate(c, err, sizeof(err)), 0);
    assert_int_equal(c->port, 0);
    assert_int_equal(c->all_ejected, GW_EJECTED_REFUSE);
    assert_int_equal(c->pol.consecutive_failures, 3);
    assert_true(c->pol.ejection_base_s == 2.0);
    assert_int_equal(c->pol.max_body, 65536);
    assert_true(c->pol.ejection_max_s == 300.0); /* untouched default */
    assert_int_equal(c->n_up, 2);
    assert_string_equal(c->up[0].url, "http://127.0.0.1:8081"); /* trailing slash dropped */
    assert_int_equal(c->up[0].weight, 3);
    assert_int_equal(c->up[1].max_concurrent, 4);
    assert_int_equal(c->n_routes, 1);
    const gw_route_cfg *r = &c->routes[0];
    assert_int_equal(r->n_targets, 3);
    assert_int_equal(r->t[0].upstream, 0);
    assert_int_equal(r->t[0].level, 0);
    assert_int_equal(r->t[1].upstream, 1);
    assert_int_equal(r->t[1].level, 0);
    assert_int_equal(r->t[2].upstream, 1);
    assert_int_equal(r->t[2].level, 1);
    assert_string_equal(r->t[2].model, "small");
    assert_int_equal(c->n_rules, 1);
    assert_int_equal(c->rules[0].action, GW_ACT_REDACT);
    assert_int_equal(c->rules[0].on, GW_ON_COMPLETIONS);
    assert_string_equal(c->rules[0].pattern, "\\d{4}-\\d{4}");
    assert_string_equal(c->rules[0].replacement, "[REDACTED]"); /* the rule table's default */
    assert_int_equal(c->rules[0].window, 64);
    /* defaults the file leaves alone, from the key tables */
    assert_string_equal(c->host, "127.0.0.1");
    assert_int_equal(c->redis_fail_open, 1);
    assert_int_equal(c->pii, GW_PII_OFF);
    assert_int_equal(c->pii_on, GW_ON_BOTH);
    assert_int_equal(c->up[1].weight, 1);
    unlink(write_tmp(""));
    free(c);
    /* the word keys, each word once */
    c = load_ok("[gateway]\nredis_fail = closed\npii = mask\npii_on = prompts\n"
                "[rule r]\npattern = x\non = both\n");
    assert_int_equal(c->redis_fail_open, 0);
    assert_int_equal(c->pii, GW_PII_MASK);
    assert_int_equal(c->pii_on, GW_ON_PROMPTS);
    assert_int_equal(c->rules[0].action, GW_ACT_BLOCK);
    assert_int_equal(c->rules[0].on, GW_ON_BOTH);
    unlink(write_tmp(""));
    free(c);
}

/* each bad file must fail, and the message must name the line and the culprit */
static void test_config_errors(void **state) {
    (void)state;
    static const struct {
        const char *ini, *want;
    } cases[] = {
        {"[gateway]\nport = 80000\n", ":2: 'port' = 80000 is out of range [0, 65535]"},
        {"[gateway]\n\nbogus = 1\n", ":3: unknown key 'bogus' in [gateway]"},
        {"[policy]\nconsecutive_failures = 0\n", ":2: 'consecutive_failures' = 0 is out of range [1, 1000]"},
        {"[policy]\nejection_base_s = soon\n", ":2: 'ejection_base_s' needs a number, got 'soon'"},
        {"[policy]\nmax_body = 1.5\n", ":2: 'max_body' needs a byte count like 1048576 or 1M"},
        {"[upstream a]\nweight = 0\n", ":2: 'weight' = 0 is out of range [1, 1000]"},
        {"[rule r]\npattern = x\nwindow = many\n", ":3: rule r: 'window' needs a whole number, got 'many'"},
        {"[rule r]\npattern = x\ncaseless = maybe\n", ":3: rule r: 'caseless' needs true or false"},
        {"[rule r]\npattern = x\non = everything\n",
         ":3: rule r: 'on' must be prompts, completions or both, got 'everything'"},
        {"[gateway]\nredis_fail = maybe\n", ":2: 'redis_fail' must be closed or open, got 'maybe'"},
        {"[gateway]\npii = on\n", ":2: 'pii' must be off or mask, got 'on'"},
        {"[upstream a]\nurl = ftp://x\n", ":2: upstream a: url must start with http://"},
        {"[upstream a]\nurl = http://x\nurl = http://y\n", ":3: 'url' is set twice"},
        {"[upstreams a]\nurl = http://x\n", ":2: unknown section [upstreams a]"},
        {"[model]\ntargets = a\n", ":2: [model] needs a name"},
        {"[gateway]\nthis line is not ini\n", ":2: malformed line"},
        {"[rule r]\npattern = x\naction = shout\n", ":3: rule r: 'action' must be block or redact, got 'shout'"},
        {"[gateway]\nredis = nohostport\n", ":2: redis must be HOST:PORT"},
    };
    char err[512];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        gw_config *c = calloc(1, sizeof(gw_config));
        gw_config_init(c);
        err[0] = 0;
        assert_int_equal(gw_config_load(c, write_tmp(cases[i].ini), err, sizeof(err)), -1);
        if (!strstr(err, cases[i].want)) fprintf(stderr, "case %zu: got '%s'\n", i, err);
        assert_non_null(strstr(err, cases[i].want));
        free(c);
    }
    /* validation: whole-config mistakes */
    gw_config *c = calloc(1, sizeof(gw_config));
    gw_config_init(c);
    assert_int_equal(gw_config_validate(c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "no upstreams"));
    assert_int_equal(gw_config_add_upstream(c, "a=http://127.0.0.1:1", err, sizeof(err)), 0);
    assert_int_equal(gw_config_validate(c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "no models"));
    assert_int_equal(gw_config_add_route(c, "m=a,zz", err, sizeof(err)), 0);
    assert_int_equal(gw_config_validate(c, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "unknown upstream 'zz' (known: a)"));
    assert_int_equal(gw_config_add_route(c, "m=a", err, sizeof(err)), 0); /* replaces */
    assert_int_equal(gw_config_validate(c, err, sizeof(err)), 0);
    assert_int_equal(gw_config_add_upstream(c, "noequals", err, sizeof(err)), -1);
    assert_int_equal(gw_config_add_route(c, "m=", err, sizeof(err)), -1);
    assert_int_equal(gw_config_add_route(c, "m=a,,b", err, sizeof(err)), -1);
    assert_int_equal(gw_config_set(c, "consecutive-failures", "7", err, sizeof(err)), 0);
    assert_int_equal(c->pol.consecutive_failures, 7);
    assert_int_equal(gw_config_set(c, "no-such-flag", "7", err, sizeof(err)), 1);
    assert_int_equal(gw_config_set(c, "max-attempts", "2.5", err, sizeof(err)), -1);
    assert_int_equal(gw_config_set(c, "ejection_base_s", "400", err, sizeof(err)), 0);
    assert_int_equal(gw_config_validate(c, err, sizeof(err)), -1); /* base > max (300) */
    assert_non_null(strstr(err, "exceeds ejection_max_s"));
    free(c);
    unlink(write_tmp(""));
}

/* ---- health ------------------------------------------------------------------------------------ */

static void test_health_ejection(void **state) {
    (void)state;
    gw_policy p;
    gw_policy_defaults(&p); /* 5 failures, 30 s base, 300 s cap */
    gw_health h;
    gw_health_init(&h, 0);
    int probe;
    double t = 100;
    for (int i = 1; i <= 4; i++) {
        assert_int_equal(gw_health_acquire(&h, t, &probe), 1);
        assert_int_equal(probe, 0);
        assert_int_equal(gw_health_result(&h, &p, 1, 0, t), 0);
        assert_int_equal(gw_health_state(&h, t), GW_UP_HEALTHY);
    }
    /* a success in between starts the count again */
    assert_int_equal(gw_health_result(&h, &p, 0, 0, t), 0);
    for (int i = 1; i <= 4; i++) assert_int_equal(gw_health_result(&h, &p, 1, 0, t), 0);
    assert_int_equal(gw_health_result(&h, &p, 1, 0, t), 1); /* the 5th in a row ejects */
    assert_int_equal(gw_health_state(&h, t), GW_UP_EJECTED);
    assert_true(fabs(gw_health_wait(&h, t) - 30) < 1e-9);
    assert_int_equal(gw_health_acquire(&h, t + 29.9, &probe), 0);
    /* late results of requests started before the ejection do not count again */
    assert_int_equal(gw_health_result(&h, &p, 1, 0, t + 1), 0);
    assert_int_equal((int)h.ejections, 1);
    /* after 30 s: half-open, exactly one probe */
    assert_int_equal(gw_health_state(&h, t + 30), GW_UP_PROBING);
    assert_int_equal(gw_health_acquire(&h, t + 30, &probe), 1);
    assert_int_equal(probe, 1);
    assert_int_equal(gw_health_acquire(&h, t + 30, &probe), 0); /* the second waits */
    /* the probe fails: ejected again, now 2 × 30 s */
    assert_int_equal(gw_health_result(&h, &p, 1, 1, t + 31), 1);
    assert_true(fabs(gw_health_wait(&h, t + 31) - 60) < 1e-9);
    assert_int_equal(gw_health_state(&h, t + 90), GW_UP_EJECTED);
    assert_int_equal(gw_health_acquire(&h, t + 91, &probe), 1);
    assert_int_equal(probe, 1);
    assert_int_equal(gw_health_result(&h, &p, 0, 1, t + 92), 0); /* success closes it */
    assert_int_equal(gw_health_state(&h, t + 92), GW_UP_HEALTHY);
    assert_int_equal(gw_health_acquire(&h, t + 92, &probe), 1);
    assert_int_equal(probe, 0);
    /* the multiplier stays (2) until it decays: a new ejection rests 3 × 30 = 90 s */
    for (int i = 0; i < 5; i++) gw_health_result(&h, &p, 1, 0, t + 93);
    assert_true(fabs(gw_health_wait(&h, t + 93) - 90) < 1e-9);
    /* the cap: many failed probes never rest more than 300 s */
    double now = t + 93;
    for (int k = 0; k < 20; k++) {
        now += gw_health_wait(&h, now);
        assert_int_equal(gw_health_acquire(&h, now, &probe), 1);
        gw_health_result(&h, &p, 1, 1, now);
        assert_true(gw_health_wait(&h, now) <= 300 + 1e-9);
    }
    assert_true(fabs(gw_health_wait(&h, now) - 300) < 1e-9);
}

static void test_health_active_and_decay(void **state) {
    (void)state;
    gw_policy p;
    gw_policy_defaults(&p);
    gw_health h;
    gw_health_init(&h, 0);
    int probe;
    gw_health_active(&h, &p, 0, 10); /* /health is 503 (loading) */
    assert_int_equal(gw_health_state(&h, 10), GW_UP_EJECTED);
    assert_int_equal(gw_health_acquire(&h, 10, &probe), 0);
    assert_true(gw_health_out_since(&h, 50) == 10);
    gw_health_active(&h, &p, 1, 15);
    assert_int_equal(gw_health_state(&h, 15), GW_UP_HEALTHY);
    /* ejected twice → multiplier 2; healthy checks take one step off per base period */
    for (int i = 0; i < 5; i++) gw_health_result(&h, &p, 1, 0, 20);
    gw_health_acquire(&h, 50, &probe);
    gw_health_result(&h, &p, 1, 1, 50); /* probe fails: multiplier 2 */
    gw_health_acquire(&h, 110, &probe);
    gw_health_result(&h, &p, 0, 1, 110); /* probe ok at 110 */
    assert_int_equal(h.times_ejected, 2);
    gw_health_active(&h, &p, 1, 120);
    assert_int_equal(h.times_ejected, 2); /* 10 s healthy: not yet */
    gw_health_active(&h, &p, 1, 141);
    assert_int_equal(h.times_ejected, 1); /* 31 s */
    gw_health_active(&h, &p, 1, 172);
    assert_int_equal(h.times_ejected, 0);
    /* an active failure during a half-open period blocks the probe */
    for (int i = 0; i < 5; i++) gw_health_result(&h, &p, 1, 0, 200);
    gw_health_active(&h, &p, 0, 240);
    assert_int_equal(gw_health_acquire(&h, 240, &probe), 0);
    gw_health_active(&h, &p, 1, 245);
    assert_int_equal(gw_health_state(&h, 245), GW_UP_PROBING);
}

/* ---- retries ------------------------------------------------------------------------------------ */

static void test_backoff_and_retry_after(void **state) {
    (void)state;
    gw_policy p;
    gw_policy_defaults(&p);
    p.backoff_base_s = 0.1;
    p.backoff_max_s = 1.0;
    for (int n = 0; n < 8; n++) {
        double cap = fmin(1.0, 0.1 * pow(2, n));
        for (double u = 0; u < 1; u += 0.125) {
            double b = gw_backoff_s(&p, n, u);
            assert_true(b >= 0 && b < cap + 1e-12);
            assert_true(fabs(b - u * cap) < 1e-12);
        }
    }
    assert_true(gw_retry_after_s("3", 0) == 3);
    assert_true(gw_retry_after_s(" 0 ", 0) == 0);
    assert_true(gw_retry_after_s("-1", 0) == -1);
    assert_true(gw_retry_after_s("soon", 0) == -1);
    assert_true(gw_retry_after_s(NULL, 0) == -1);
    assert_true(gw_retry_after_s("", 0) == -1);
    time_t now = time(NULL);
    time_t later = now + 7;
    char date[64];
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", gmtime(&later));
    assert_true(fabs(gw_retry_after_s(date, (double)now) - 7) < 1e-9);
    time_t past = now - 100;
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", gmtime(&past));
    assert_true(gw_retry_after_s(date, (double)now) == 0);
}

static void test_retry_budget(void **state) {
    (void)state;
    gw_policy p;
    gw_policy_defaults(&p); /* 20 %, at least 3 */
    gw_budget b = {.in_flight = 10, .retrying = 0};
    int granted = 0;
    for (int i = 0; i < 10; i++) granted += gw_budget_try_retry(&b, &p);
    assert_int_equal(granted, 3); /* 20 % of 10 = 2 < the minimum 3 */
    gw_budget_end_retry(&b);
    assert_int_equal(gw_budget_try_retry(&b, &p), 1);
    b = (gw_budget){.in_flight = 100, .retrying = 0};
    granted = 0;
    for (int i = 0; i < 100; i++) granted += gw_budget_try_retry(&b, &p);
    assert_int_equal(granted, 20);
    p.retry_budget_min = 0;
    p.retry_budget_ratio = 0;
    b = (gw_budget){.in_flight = 100, .retrying = 0};
    assert_int_equal(gw_budget_try_retry(&b, &p), 0);
}

/* ---- failures and responses --------------------------------------------------------------------- */

static void test_outcomes(void **state) {
    (void)state;
    assert_int_equal(gw_outcome_of_status(200), GW_OUT_OK);
    assert_int_equal(gw_outcome_of_status(429), GW_OUT_429);
    assert_int_equal(gw_outcome_of_status(500), GW_OUT_5XX);
    assert_int_equal(gw_outcome_of_status(503), GW_OUT_5XX);
    assert_int_equal(gw_outcome_of_status(400), GW_OUT_CLIENT_ERROR);
    assert_int_equal(gw_outcome_of_status(401), GW_OUT_CLIENT_ERROR);
    assert_int_equal(gw_outcome_of_status(404), GW_OUT_CLIENT_ERROR);
    assert_false(gw_outcome_is_failure(GW_OUT_OK));
    assert_false(gw_outcome_is_failure(GW_OUT_CLIENT_ERROR)); /* a client's 400/401 never ejects */
    for (int o = GW_OUT_CONNECT; o < GW_OUT_COUNT; o++) assert_true(gw_outcome_is_failure(o));
    long pt = -1, ct = -1;
    const char *ok = "{\"choices\":[{\"text\":\"hi\",\"finish_reason\":\"length\"}],"
                     "\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}";
    assert_int_equal(gw_check_response(ok, strlen(ok), 0, &pt, &ct), GW_OUT_OK);
    assert_int_equal(pt, 3);
    assert_int_equal(ct, 2);
    const char *stop_at_once = "{\"choices\":[{\"text\":\"\",\"finish_reason\":\"stop\"}]}";
    assert_int_equal(gw_check_response(stop_at_once, strlen(stop_at_once), 0, &pt, &ct),
                     GW_OUT_OK);
    static const char *empties[] = {
        "{\"choices\":[]}",
        "{\"choices\":[{\"text\":\"\",\"finish_reason\":null}]}",
        "{\"choices\":[{\"text\":\"\"}]}",
        "{\"choices\":[{\"index\":0}]}",
    };
    for (size_t i = 0; i < 4; i++)
        assert_int_equal(gw_check_response(empties[i], strlen(empties[i]), 0, &pt, &ct),
                         GW_OUT_EMPTY);
    static const char *bad[] = {"", "<html>oops</html>", "{\"choices\":3}", "[1,2]",
                                "{\"object\":\"text_completion\"}"};
    for (size_t i = 0; i < 5; i++)
        assert_int_equal(gw_check_response(bad[i], strlen(bad[i]), 0, &pt, &ct), GW_OUT_BAD_BODY);
    const char *chat = "{\"choices\":[{\"message\":{\"role\":\"assistant\",\"content\":\"x\"},"
                       "\"finish_reason\":null}]}";
    assert_int_equal(gw_check_response(chat, strlen(chat), 1, &pt, &ct), GW_OUT_OK);
    assert_int_equal(gw_check_response(chat, strlen(chat), 0, &pt, &ct), GW_OUT_EMPTY);
}

/* ---- SSE ---------------------------------------------------------------------------------------- */

static void test_sse_framing(void **state) {
    (void)state;
    const char *ev[] = {"data: {\"a\":1}\n\n", ": keep-alive\n\n", "data: {\"b\":2}\r\n\r\n",
                        "event: x\ndata: line1\ndata: line2\n\n", "data: [DONE]\n\n"};
    const char *want_data[] = {"{\"a\":1}", "", "{\"b\":2}", "line1\nline2", "[DONE]"};
    char all[256] = "";
    for (int i = 0; i < 5; i++) strcat(all, ev[i]);
    size_t n = strlen(all);
    /* every split into two pieces gives the same events */
    for (size_t cut = 0; cut <= n; cut++) {
        gw_sse s = {0};
        api_buf raw = {0}, data = {0};
        int got = 0;
        gw_sse_feed(&s, all, cut);
        while (gw_sse_next(&s, &raw, &data)) {
            assert_true(got < 5);
            assert_string_equal(data.p, want_data[got]);
            got++;
        }
        gw_sse_feed(&s, all + cut, n - cut);
        while (gw_sse_next(&s, &raw, &data)) {
            assert_true(got < 5);
            assert_string_equal(data.p, want_data[got]);
            got++;
        }
        assert_int_equal(got, 5);
        assert_int_equal(raw.len, n); /* raw bytes of all events, in order */
        assert_memory_equal(raw.p, all, n);
        gw_sse_free(&s);
        api_buf_free(&raw);
        api_buf_free(&data);
    }
    gw_event_info info;
    char *text;
    size_t tl;
    const char *chunk = "{\"choices\":[{\"delta\":{\"content\":\"h\\u00e9\"},\"finish_reason\":null}]}";
    assert_int_equal(gw_event_parse(chunk, strlen(chunk), 1, &info, &text, &tl), 0);
    assert_int_equal(info.has_choice, 1);
    assert_string_equal(text, "h\xc3\xa9");
    assert_int_equal(tl, 3);
    assert_string_equal(info.finish, "");
    free(text);
    const char *usage = "{\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":9}}";
    assert_int_equal(gw_event_parse(usage, strlen(usage), 0, &info, &text, &tl), 0);
    assert_int_equal(info.usage_only, 1);
    assert_int_equal(info.completion_tokens, 9);
    assert_int_equal(gw_event_parse("[DONE]", 6, 0, &info, &text, &tl), 0);
    assert_int_equal(info.done, 1);
    assert_int_equal(gw_event_parse("nope", 4, 0, &info, &text, &tl), -1);
}

/* ---- content rules -------------------------------------------------------------------------------- */

static gw_rules *rules_from(const char *ini) {
    gw_config *c = load_ok(ini);
    char err[512];
    gw_rules *r = gw_rules_new(c, err, sizeof(err));
    if (!r) fprintf(stderr, "%s\n", err);
    free(c);
    return r;
}

/* reference redaction of "dddd-dddd" (not preceded or followed by a digit) → "[CARD]" */
static void ref_redact(const char *s, char *out) {
    size_t n = strlen(s), o = 0;
    for (size_t i = 0; i < n;) {
        int m = i + 9 <= n && (i == 0 || !(s[i - 1] >= '0' && s[i - 1] <= '9'));
        for (int k = 0; m && k < 9; k++)
            m = k == 4 ? s[i + k] == '-' : (s[i + k] >= '0' && s[i + k] <= '9');
        if (m && i + 9 < n && s[i + 9] >= '0' && s[i + 9] <= '9') m = 0;
        if (m) {
            memcpy(out + o, "[CARD]", 6);
            o += 6;
            i += 9;
        } else {
            out[o++] = s[i++];
        }
    }
    out[o] = 0;
}

static void test_rules_whole_and_stream(void **state) {
    (void)state;
    gw_rules *r = rules_from("[rule words]\npattern = forbidden\naction = block\nwindow = 16\n"
                             "[rule cards]\npattern = (?<!\\d)\\d{4}-\\d{4}(?!\\d)\n"
                             "action = redact\nreplacement = [CARD]\nwindow = 9\n");
    assert_non_null(r);
    assert_true(gw_rules_active(r, GW_ON_PROMPTS));
    assert_int_equal(gw_rules_window(r, GW_ON_COMPLETIONS), 16);
    const char *texts[] = {
        "call 1234-5678 now, or 12345-6789 or 1234-56789; then 4321-8765",
        "all is well here, ünïcödé too: 1111-2222",
        "this is forbidden text with 1234-5678 before? no: after",
        "1234-5678 starts and forbidden ends forbidden",
    };
    for (size_t ti = 0; ti < 4; ti++) {
        const char *t = texts[ti];
        size_t n = strlen(t);
        const char *hit = strstr(t, "forbidden");
        char prefix[256], want[512];
        size_t plen = hit ? (size_t)(hit - t) : n;
        memcpy(prefix, t, plen);
        prefix[plen] = 0;
        ref_redact(prefix, want); /* what may go out: the redacted text before any block */
        api_buf whole = {0};
        const char *rule;
        size_t at;
        int blocked = gw_rules_apply(r, GW_ON_COMPLETIONS, t, n, &whole, &rule, &at);
        assert_int_equal(blocked, hit != NULL);
        if (hit) {
            assert_string_equal(rule, "words");
            assert_int_equal(at, plen);
        } else {
            assert_string_equal(whole.p, want);
        }
        api_buf_free(&whole);
        /* streams: every split into two and (coarser) three pieces */
        for (size_t a = 0; a <= n; a++)
            for (size_t b = a; b <= n; b += (b < n && a % 3) ? 7 : 1) {
                gw_filter f;
                gw_filter_init(&f, r);
                api_buf out = {0};
                int bl = gw_filter_push(&f, t, a, 0, &out);
                /* held back: window - 1, plus a redaction crossing the release point */
                if (!bl) assert_true(f.pend.len <= 15 + 9);
                if (!bl) bl = gw_filter_push(&f, t + a, b - a, 0, &out);
                if (!bl) bl = gw_filter_push(&f, t + b, n - b, 1, &out);
                assert_int_equal(bl, hit != NULL);
                api_buf_put(&out, "", 0);
                assert_string_equal(out.p, want);
                api_buf_free(&out);
                gw_filter_free(&f);
                if (b == n) break;
            }
    }
    gw_rules_free(r);
    /* bad rules are refused by name */
    gw_config *c = calloc(1, sizeof(gw_config));
    char err[512];
    gw_config_init(c);
    assert_int_equal(gw_config_load(c, write_tmp("[rule e]\npattern = a*\n"), err, sizeof(err)), 0);
    assert_null(gw_rules_new(c, err, sizeof(err)));
    assert_non_null(strstr(err, "rule e: the pattern matches the empty string"));
    gw_config_init(c);
    assert_int_equal(gw_config_load(c, write_tmp("[rule p]\npattern = (unclosed\n"), err,
                                    sizeof(err)), 0);
    assert_null(gw_rules_new(c, err, sizeof(err)));
    assert_non_null(strstr(err, "rule p: bad pattern at offset"));
    free(c);
    unlink(write_tmp(""));
}

#ifdef MT_HAVE_PII
#include "safety/pii.h"
/* PII masking on a stream: every split into two pieces gives what safety/pii's own whole-text
 * scrubber gives (an independent path: no hold-back, no context) */
static void test_pii_stream(void **state) {
    (void)state;
    gw_rules *r = rules_from("[gateway]\npii = mask\npii_on = completions\n");
    assert_non_null(r);
    assert_false(gw_rules_active(r, GW_ON_PROMPTS));
    assert_true(gw_rules_active(r, GW_ON_COMPLETIONS));
    const char *t = "write to bob.smith@example.org, or call +1 415 555 2671; card 4111 1111 1111 "
                    "1111 and ip 10.1.2.3 end";
    size_t n = strlen(t), want_len;
    char *want = pii_scrub_text(t, n, PII_MASK, PII_ALL, NULL, 0, NULL, &want_len);
    assert_non_null(want);
    assert_non_null(strstr(want, "<EMAIL>"));
    assert_null(strstr(want, "example.org"));
    for (size_t a = 0; a <= n; a++) {
        gw_filter f;
        gw_filter_init(&f, r);
        api_buf out = {0};
        assert_int_equal(gw_filter_push(&f, t, a, 0, &out), 0);
        assert_int_equal(gw_filter_push(&f, t + a, n - a, 1, &out), 0);
        api_buf_put(&out, "", 0);
        assert_string_equal(out.p, want);
        api_buf_free(&out);
        gw_filter_free(&f);
    }
    free(want);
    gw_rules_free(r);
}
#endif

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_file),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_health_ejection),
        cmocka_unit_test(test_health_active_and_decay),
        cmocka_unit_test(test_backoff_and_retry_after),
        cmocka_unit_test(test_retry_budget),
        cmocka_unit_test(test_outcomes),
        cmocka_unit_test(test_sse_framing),
        cmocka_unit_test(test_rules_whole_and_stream),
#ifdef MT_HAVE_PII
        cmocka_unit_test(test_pii_stream),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
