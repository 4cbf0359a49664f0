/*
 * tests/test_pii.c — the PII scrubber (safety/pii.c, safety/pii_recognizers.c).
 *
 * Per recognizer: hand-checked positives and near-miss negatives, in English and next to CJK
 * text ("手机13812345678号", "卡号4111111111111111谢谢"). Validators against independent
 * re-implementations here (Luhn, ISO 7064 MOD 11-2) and published examples (IBAN registry,
 * the card networks' test numbers). Modes: exact mask output, keyed hashes (same value → same
 * token, key matters, separators don't), drop-line incl. a line longer than PII_LINE_MAX.
 * Streaming: push scrubbers with small buffers and random piece sizes must give byte-for-byte
 * the in-memory output on a PII-dense text with NULs and invalid UTF-8 (every read boundary
 * lands inside some match). Last, the labelled corpus of tests/pii_corpus.py: precision and
 * recall per type, printed as a table, must reach 0.98 / 0.99.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "safety/pii.h"
#include "safety/pii_impl.h"
#include "text/tokenizer.h"

#include "tests/testutil.h"

static char *scrub(const char *s, pii_mode mode, unsigned types, pii_counts *c) {
    static const uint8_t key[] = "test-key-0123456789";
    size_t n = 0;
    char *o = pii_scrub_text(s, strlen(s), mode, types, key, sizeof(key) - 1, c, &n);
    assert_non_null(o);
    assert_int_equal(strlen(o), n);
    return o;
}

/* mask(in) == want, else print both */
static void expect(const char *in, const char *want) {
    char *o = scrub(in, PII_MASK, PII_ALL, NULL);
    if (strcmp(o, want) != 0) {
        print_error("in:   %s\nwant: %s\ngot:  %s\n", in, want, o);
        fail();
    }
    free(o);
}

/* nothing in `in` is found */
static void none(const char *in) { expect(in, in); }

/* independent Luhn: double every second digit from the right */
static int luhn_ref(const char *d) {
    int n = (int)strlen(d), s = 0;
    for (int i = 0; i < n; i++) {
        int x = d[n - 1 - i] - '0';
        s += (i % 2) ? (2 * x) / 10 + (2 * x) % 10 : x;
    }
    return s % 10 == 0;
}

/* complete prefix to n digits with the check digit (others from the RNG) */
static void luhn_complete(char *out, const char *prefix, int n) {
    int p = (int)strlen(prefix);
    memcpy(out, prefix, (size_t)p);
    for (int i = p; i < n - 1; i++)
        out[i] = (char)('0' + tu_rand() % 10);
    out[n] = '\0';
    for (int c = 0; c < 10; c++) {
        out[n - 1] = (char)('0' + c);
        if (luhn_ref(out))
            return;
    }
    fail();
}

/* ---- recognizers ---------------------------------------------------------------------------- */

static void test_cjk_boundaries(void **st) {
    (void)st;
    expect("手机13812345678号", "手机<PHONE>号");
    expect("卡号4111111111111111谢谢", "卡号<CARD>谢谢");
    expect("邮箱：li.wei@163.com，谢谢", "邮箱：<EMAIL>，谢谢");
    expect("身份证号11010519491231002X，", "身份证号<CNID>，");
    expect("服务器地址192.168.1.1，端口", "服务器地址<IPV4>，端口");
    /* ASCII neighbours do block: these are parts of longer tokens */
    none("x4111111111111111");
    none("4111111111111111x");
    none("A13812345678");
}

static void test_email(void **st) {
    (void)st;
    expect("mail john.doe+x@mail.example.co.uk.", "mail <EMAIL>.");
    expect("<a_b-c@example.org>", "<<EMAIL>>");
    expect("mailto:x@example.io?subject=hi", "mailto:<EMAIL>?subject=hi");
    expect("...bob@example.com", "...<EMAIL>");
    expect("user@xn--fiqs8s.xn--55qx5d", "<EMAIL>");
    expect("renée@example.com, josé.garcía@example.es", "<EMAIL>, <EMAIL>");
    expect("邮箱john@example.com谢谢", "邮箱<EMAIL>谢谢");
    none("user@localhost");
    none("a@b");
    none("x@y.c");
    none("foo@@bar.com");
    none("john..doe@example.com");
    none("john.@example.com");
    none("@handle and user@-bad.com");
    none("name@example.123");
}

static void test_phone(void **st) {
    (void)st;
    expect("+1 (415) 555-2671", "<PHONE>");
    expect("call (415) 555-2671.", "call <PHONE>.");
    expect("415-555-2671, 415.555.2671, 1-800-555-0199", "<PHONE>, <PHONE>, <PHONE>");
    expect("+44 20 7946 0958", "<PHONE>");
    expect("(+86)13812345678", "<PHONE>");
    expect("+86 138 1234 5678 / 138-1234-5678", "<PHONE> / <PHONE>");
    expect("+8613812345678", "<PHONE>");
    none("123-456-7890"); /* NANP area codes start 2-9 */
    none("415-155-2671"); /* nor exchanges */
    none("911-555-2671"); /* N11 is a service code */
    none("4155552671");   /* bare 10 digits: too many other things look like that */
    none("555-1234");
    none("+3.5%");
    none("llvm-toolchain-snapshot (1:14~++20220123085548+413684313d9d-1)");
    expect("tel:+14155552671", "tel:<PHONE>");
    none("+12345");
    none("12812345678"); /* PRC mobiles start 13-19 */
    none("138123456789");
}

static void test_card(void **st) {
    (void)st;
    /* the networks' published test numbers */
    static const char *ok[] = {"4111111111111111", "5555 5555 5555 4444", "2223003122003222",
                               "2720-9999-9999-9996", "378282246310005", "3782 822463 10005",
                               "6011111111111117", "3530111333300000", "6200000000000005",
                               "30569309025904", "4222222222222"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        char digits[32];
        size_t n = 0;
        for (const char *p = ok[i]; *p; p++)
            if (*p >= '0' && *p <= '9')
                digits[n++] = *p;
        digits[n] = '\0';
        assert_true(luhn_ref(digits));
        char in[64], want[64];
        snprintf(in, sizeof(in), "card %s.", ok[i]);
        snprintf(want, sizeof(want), "card <CARD>.");
        expect(in, want);
    }
    /* a 13-digit millisecond timestamp that passes Luhn is not a card */
    assert_true(luhn_ref("1748503543012"));
    none("at 1748503543012 ms");
    /* Mastercard's 2-series is 2221..2720: one below and one above, Luhn-valid */
    char d[32];
    luhn_complete(d, "2220", 16);
    none(d);
    luhn_complete(d, "2721", 16);
    none(d);
    luhn_complete(d, "2221", 16);
    char want[] = "<CARD>";
    expect(d, want);
    none("4111111111111112");           /* Luhn fails */
    none("4111-1111-1111-1111-0");
    expect("4111111111111111 2024", "<CARD> 2024");
    expect("4111 1111 1111 1111 123 12/27", "<CARD> 123 12/27"); /* CVV, expiry */
    expect("3782 822463 10005 5.3.1", "<CARD> 5.3.1");
    luhn_complete(d, "9", 16); /* no network issues 9... */
    none(d);
}

static void test_iban(void **st) {
    (void)st;
    expect("IBAN DE89 3704 0044 0532 0130 00.", "IBAN <IBAN>.");
    expect("GB82WEST12345698765432", "<IBAN>");
    expect("NL91ABNA0417164300 and FR1420041010050500013M02606", "<IBAN> and <IBAN>");
    none("DE89 3704 0044 0532 0130 01"); /* mod-97 fails */
    none("DE8937040044053201300");       /* 21 chars: Germany has 22 */
    none("ZZ89370400440532013000");      /* no such country */
    assert_true(pii_iban_ok((const uint8_t *)"GB82WEST12345698765432", 22));
    assert_false(pii_iban_ok((const uint8_t *)"GB82WEST12345698765433", 22));
}

static void test_ip(void **st) {
    (void)st;
    expect("from 192.168.1.254 and 10.0.0.1:8080", "from <IPV4> and <IPV4>:8080");
    expect("http://8.8.8.8/x 10.1.2.0/24", "http://<IPV4>/x <IPV4>/24");
    none("256.1.1.1");
    none("1.2.3.4.5");
    none("version 1.2.3.4");
    /* real Debian changelog phrasings (a check on real text found them) */
    none("  * Standards-Version to 4.5.1.0");
    none("  * bump to 3.7.2.0.");
    none("(Standards-Version): updated to 2.4.1.0.");
    none("  * Added 2.8.0.3 patch");
    none("dpkg (>= 1.15.7.2~), Policy 3.6.1.1, foo 1.2.3.4+dfsg");
    expect("ping 8.8.8.8 and point it to 10.0.0.5", "ping <IPV4> and point it to <IPV4>");
    none("v1.2.3.4");
    none("01.2.3.4");
    expect("2001:db8::8a2e:370:7334", "<IPV6>");
    expect("listen [::1]:443", "listen [<IPV6>]:443");
    expect("fe80::1%eth0", "<IPV6>%eth0");
    expect("::ffff:192.0.2.128", "<IPV6>");
    expect("2001:0db8:0000:0000:0000:ff00:0042:8329", "<IPV6>");
    none("::");
    none("std::vector<int> a::b");
    none("12:30:45");
    none("00:1A:2B:3C:4D:5E");
    none("1:2:3:4:5:6:7");
    none("2001:db8::1::2");
    none("fe80::/10");
    none("zip(sparse[::2], sparse[1::2])"); /* Python slices */
}

static void test_ssn_cnid(void **st) {
    (void)st;
    expect("SSN 123-45-6789.", "SSN <SSN>.");
    none("000-12-3456");
    none("666-12-3456");
    none("900-12-3456");
    none("123-00-4567");
    none("123-45-0000");
    none("123-45-67890");
    /* GB 11643-1999 check digit, computed here independently */
    static const int W[17] = {7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2};
    char id[19] = "11010519491231002?";
    int s = 0;
    for (int i = 0; i < 17; i++)
        s += (id[i] - '0') * W[i];
    id[17] = "10X98765432"[s % 11];
    assert_int_equal(id[17], 'X');
    assert_true(pii_cnid_ok((const uint8_t *)id));
    expect(id, "<CNID>");
    id[17] = '5';
    none(id); /* wrong check digit */
    assert_false(pii_cnid_ok((const uint8_t *)"110105194902300029")); /* Feb 30 */
    assert_false(pii_cnid_ok((const uint8_t *)"990105194912310021")); /* no province 99 */
}

static void test_secrets(void **st) {
    (void)st;
    expect("key AKIAIOSFODNN7EXAMPLE.", "key <SECRET>.");
    expect("sk-proj-abc123DEF456ghi789JKL012", "<SECRET>");
    expect("password=hunter22 token=abcdef123456", "password=<SECRET> token=<SECRET>");
    expect("https://bob:s3cret@db.example.com/x", "https://<SECRET>@db.example.com/x");
    expect("DB_PASSWORD = \"correct horse\"", "DB_PASSWORD = \"<SECRET>\"");
    expect("{\"api_key\": \"zzzz1234zzzz\"}", "{\"api_key\": \"<SECRET>\"}");
    expect("GET /?user=bob&pwd=s3cr3t&lang=en", "GET /?user=bob&pwd=<SECRET>&lang=en");
    expect("Authorization: Bearer abcdef0123456789ABCDEF", "Authorization: Bearer <SECRET>");
    expect("ghp_abcdefghijklmnopqrstuvwxyz0123456789", "<SECRET>");
    expect("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\nabcd==\n"
           "-----END RSA PRIVATE KEY-----\nnext",
           "<SECRET>\nnext");
    none("pip install sk-learn");
    none("the pass: through the gate");
    none("password=${DB_PASSWORD} max_tokens=256 api_key=None pwd=/home/alice");
    none("password = getpass()");
    /* code, not secrets (a check on Python's standard library found them) */
    none("self.password = config['password']");
    none("password = auth[2]");
    none("password = self.distribution.password");
    none("- password: password to use with user");
    expect("password: sekrit", "password: <SECRET>");
    none("self.token = nextchar; cache_token = current_token");
    expect("password = hunter2 and password=swordfish", "password = <SECRET> and password=<SECRET>");
    none("-----BEGIN CERTIFICATE-----");
    none("http://example.com:8080/path");
}

/* ---- modes ------------------------------------------------------------------------------------ */

static void test_hash_mode(void **st) {
    (void)st;
    char *a = scrub("card 4111 1111 1111 1111, again 4111111111111111, mail A@Example.com "
                    "and a@example.com",
                    PII_HASH, PII_ALL, NULL);
    /* <CARD:xxxxxxxx> twice the same, <EMAIL:yyyyyyyy> twice the same */
    char c1[16], c2[16], e1[16], e2[16];
    assert_int_equal(sscanf(a, "card <CARD:%8[0-9a-f]>, again <CARD:%8[0-9a-f]>, mail "
                               "<EMAIL:%8[0-9a-f]> and <EMAIL:%8[0-9a-f]>",
                            c1, c2, e1, e2),
                     4);
    assert_string_equal(c1, c2);
    assert_string_equal(e1, e2);
    assert_string_not_equal(c1, e1);
    /* another key, another token */
    static const uint8_t k2[] = "another-key-0123456";
    char *b = pii_scrub_text("4111111111111111", 16, PII_HASH, PII_ALL, k2, sizeof(k2) - 1, NULL,
                             NULL);
    assert_non_null(b);
    assert_int_equal(strlen(b), strlen("<CARD:12345678>"));
    assert_true(strncmp(b + 6, c1, 8) != 0);
    free(a);
    free(b);
    /* the token is HMAC-SHA256(key, "card:" + digits), checked with Python's hmac module */
    FILE *py = popen("python3 -c \"import hmac,hashlib;print(hmac.new(b'test-key-0123456789',"
                     "b'card:4111111111111111',hashlib.sha256).hexdigest()[:8])\"",
                     "r");
    assert_non_null(py);
    char ref[64] = "";
    assert_non_null(fgets(ref, sizeof(ref), py));
    while (fgetc(py) != EOF) {
    }
    ref[8] = '\0';
    assert_int_equal(pclose(py), 0);
    assert_string_equal(c1, ref);
    /* no key, no hash */
    assert_null(pii_scrub_text("x", 1, PII_HASH, PII_ALL, NULL, 0, NULL, NULL));
}

static void test_drop_line(void **st) {
    (void)st;
    pii_counts c;
    char *o = scrub("keep me\nmail a@example.com here\nkeep too\n-----BEGIN PRIVATE KEY-----\n"
                    "AAAA\n-----END PRIVATE KEY-----\nlast 4111111111111111",
                    PII_DROP_LINE, PII_ALL, &c);
    assert_string_equal(o, "keep me\nkeep too\n");
    assert_int_equal(c.lines_dropped, 5);
    assert_int_equal(c.found[PII_EMAIL], 1);
    assert_int_equal(c.found[PII_SECRET], 1);
    assert_int_equal(c.found[PII_CARD], 1);
    free(o);
    /* types select recognizers: only email here */
    o = scrub("a@example.com 4111111111111111", PII_MASK, 1u << PII_EMAIL, &c);
    assert_string_equal(o, "<EMAIL> 4111111111111111");
    free(o);
}

/* a line longer than PII_LINE_MAX: a match in its first PII_LINE_MAX bytes drops it whole;
 * one after that is masked (the start has been written) and counted */
static void test_drop_line_long(void **st) {
    (void)st;
    size_t L = PII_LINE_MAX + PII_LINE_MAX / 2;
    char *t = malloc(2 * L + 64);
    memset(t, 'a', 2 * L + 2);
    for (size_t i = 7; i < 2 * L; i += 8)
        t[i] = ' ';
    memcpy(t + 1000, " a@example.com ", 15); /* line 1: early match */
    t[L] = '\n';
    memcpy(t + L + 1 + PII_LINE_MAX + 100, " b@example.com ", 15); /* line 2: late match */
    t[2 * L + 1] = '\n';
    strcpy(t + 2 * L + 2, "tail\n");
    size_t n = strlen(t), on = 0;
    pii_counts c;
    char *o = pii_scrub_text(t, n, PII_DROP_LINE, PII_ALL, NULL, 0, &c, &on);
    assert_non_null(o);
    assert_int_equal(c.lines_dropped, 1);
    assert_int_equal(c.long_lines_masked, 1);
    /* line 2 is L bytes + '\n', written with its email masked */
    assert_int_equal(on, L + 1 + strlen("<EMAIL>") - strlen("b@example.com") + strlen("tail\n"));
    assert_non_null(strstr(o, " <EMAIL> "));
    assert_string_equal(o + on - 5, "tail\n");
    free(o);
    free(t);
}

/* ---- streaming = in memory ------------------------------------------------------------------ */

typedef struct {
    char *p;
    size_t n, cap;
} sink;

static int sink_write(void *ctx, const char *p, size_t n) {
    sink *s = ctx;
    if (s->n + n > s->cap) {
        s->cap = (s->n + n) * 2;
        s->p = realloc(s->p, s->cap);
    }
    memcpy(s->p + s->n, p, n);
    s->n += n;
    return 0;
}

static const char *SAMPLES[] = {
    "john.doe@example.com", "+1 (415) 555-2671", "13812345678", "4111 1111 1111 1111",
    "378282246310005", "DE89 3704 0044 0532 0130 00", "192.168.1.254", "2001:db8::8a2e:370:7334",
    "123-45-6789", "11010519491231002X", "AKIAIOSFODNN7EXAMPLE", "password=hunter22",
    "https://bob:s3cret@db.example.com/x", "1748503543012", "1.2.3.4.5", "::",
    "-----BEGIN PRIVATE KEY-----\nQUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=\n-----END PRIVATE KEY-----",
};

/* PII-dense text with CJK, NULs and invalid UTF-8 between the samples */
static char *dense_text(size_t n, size_t *len) {
    char *t = malloc(n + 4096);
    size_t k = 0;
    static const char *seps[] = {" ", "\n", "号", "，", "\0", "\xff\xfe", "\x80", ". ", "x"};
    while (k < n) {
        const char *s = SAMPLES[tu_rand() % (sizeof(SAMPLES) / sizeof(SAMPLES[0]))];
        size_t L = strlen(s);
        memcpy(t + k, s, L);
        k += L;
        int r = (int)(tu_rand() % 9);
        size_t sl = r == 4 ? 1 : strlen(seps[r]);
        memcpy(t + k, seps[r], sl);
        k += sl;
        if (tu_rand() % 50 == 0) { /* now and then a long plain stretch */
            size_t m = tu_rand() % 3000;
            for (size_t i = 0; i < m; i++)
                t[k + i] = (char)(i % 7 ? 'a' + (char)(tu_rand() % 26) : ' ');
            k += m;
        }
    }
    *len = k;
    return t;
}

static void test_stream_equals_memory(void **st) {
    (void)st;
    size_t n;
    char *t = dense_text(400000, &n);
    static const uint8_t key[] = "stream-key-0123456";
    const size_t MIN = PII_MAX_SPAN + PII_LOOKBEHIND + 1;
    const size_t sizes[] = {MIN + 13, MIN + 4099, 3 * MIN, 1u << 20};
    for (int mode = PII_MASK; mode <= PII_DROP_LINE; mode++) {
        pii_counts ref_c;
        size_t ref_n;
        char *ref = pii_scrub_text(t, n, (pii_mode)mode, PII_ALL, key, sizeof(key) - 1, &ref_c,
                                   &ref_n);
        assert_non_null(ref);
        assert_true(ref_c.found[PII_EMAIL] > 100);
        for (size_t q = 0; q < sizeof(sizes) / sizeof(sizes[0]); q++) {
            size_t text_n = sizes[q] == MIN + 13 ? 150000 : n; /* tiny steps: a shorter text */
            char *ref2 = ref;
            size_t ref2_n = ref_n;
            pii_counts rc = ref_c;
            if (text_n != n) {
                ref2 = pii_scrub_text(t, text_n, (pii_mode)mode, PII_ALL, key, sizeof(key) - 1,
                                      &rc, &ref2_n);
                assert_non_null(ref2);
            }
            sink sk = {NULL, 0, 0};
            pii_scrubber *s = pii_scrubber_new_sized((pii_mode)mode, PII_ALL, key,
                                                     sizeof(key) - 1, sink_write, &sk, sizes[q]);
            assert_non_null(s);
            for (size_t k = 0; k < text_n;) {
                size_t piece = 1 + tu_rand() % (tu_rand() % 2 ? 7 : 20000);
                if (piece > text_n - k)
                    piece = text_n - k;
                assert_int_equal(pii_scrubber_push(s, t + k, piece), 0);
                k += piece;
            }
            assert_int_equal(pii_scrubber_finish(s), 0);
            const pii_counts *c = pii_scrubber_counts(s);
            assert_int_equal(sk.n, ref2_n);
            assert_memory_equal(sk.p, ref2, ref2_n);
            assert_memory_equal(c->found, rc.found, sizeof(rc.found));
            assert_int_equal(c->lines_dropped, rc.lines_dropped);
            assert_int_equal(c->bytes_in, text_n);
            assert_int_equal(c->bytes_out, ref2_n);
            pii_scrubber_free(s);
            free(sk.p);
            if (ref2 != ref)
                free(ref2);
        }
        free(ref);
    }
    free(t);
}

/* random bytes: never crash, and the output is the input where nothing matched */
static void test_random_bytes(void **st) {
    (void)st;
    for (int r = 0; r < 20; r++) {
        size_t n = 1 + tu_rand() % 100000;
        char *t = malloc(n);
        for (size_t i = 0; i < n; i++)
            t[i] = tu_rand() % 4 ? (char)tu_rand()
                                 : "0123456789.:-@+( =abcdefABCDEF\n"[tu_rand() % 32];
        pii_span sp[64];
        size_t ns = pii_find(t, n, PII_ALL, sp, 64);
        size_t on;
        char *o = pii_scrub_text(t, n, PII_MASK, PII_ALL, NULL, 0, NULL, &on);
        assert_non_null(o);
        if (ns == 0)
            assert_memory_equal(o, t, n);
        for (size_t k = 0; k < ns && k < 64; k++) {
            assert_true(sp[k].start < sp[k].end && sp[k].end <= n);
            if (k > 0)
                assert_true(sp[k].start >= sp[k - 1].end);
        }
        free(o);
        free(t);
    }
}

/* all spans by the exact scan (every trigger tried, no anchor prefilter) */
static size_t find_exact(const char *t, size_t n, pii_span *sp, size_t max) {
    size_t pos = 0, k = 0;
    pii_span m;
    while (pos < n && pii_next_exact((const uint8_t *)t, n, pos, n, PII_ALL, &m)) {
        if (k < max)
            sp[k] = m;
        k++;
        pos = m.end;
    }
    return k;
}

static void same_spans(const char *t, size_t n) {
    size_t na = pii_find(t, n, PII_ALL, NULL, 0);
    pii_span *a = malloc((na + 1) * sizeof(*a)), *b = malloc((na + 1) * sizeof(*b));
    assert_int_equal(pii_find(t, n, PII_ALL, a, na), na);
    assert_int_equal(find_exact(t, n, b, na), na);
    for (size_t k = 0; k < na; k++) {
        assert_int_equal(a[k].start, b[k].start);
        assert_int_equal(a[k].end, b[k].end);
        assert_int_equal(a[k].type, b[k].type);
    }
    free(a);
    free(b);
}

/* the anchor prefilter of pii_next finds exactly what trying every trigger finds: on PII-dense
 * text, on bytes drawn from the trigger characters, and on emails whose local part is cut by
 * other matches (a digit anchor comes before the '@' that starts an earlier window) */
static void test_prefilter_equals_exact(void **st) {
    (void)st;
    size_t n;
    char *t = dense_text(300000, &n);
    same_spans(t, n);
    free(t);
    static const char alpha[] = "0123456789.:-@+(_=%abcdefxyzABCDEFKSAB \n,/";
    for (int r = 0; r < 30; r++) {
        n = 1000 + tu_rand() % 50000;
        t = malloc(n);
        for (size_t i = 0; i < n; i++)
            t[i] = tu_rand() % 8 ? alpha[tu_rand() % (sizeof(alpha) - 1)] : (char)tu_rand();
        same_spans(t, n);
        free(t);
    }
    const char *x = "a+4111111111111111@example.com x_13812345678@example.org AKIA-x Bearer 1";
    same_spans(x, strlen(x));
    expect("a+4111111111111111@example.com", "<EMAIL>");
}

static void test_parse_and_report(void **st) {
    (void)st;
    char err[200];
    assert_int_equal(pii_types_parse("all", err, sizeof(err)), PII_ALL);
    assert_int_equal(pii_types_parse("email, phone", err, sizeof(err)),
                     (1u << PII_EMAIL) | (1u << PII_PHONE));
    assert_int_equal(pii_types_parse("ip", err, sizeof(err)), (1u << PII_IPV4) | (1u << PII_IPV6));
    assert_int_equal(pii_types_parse("email,bogus", err, sizeof(err)), 0);
    assert_non_null(strstr(err, "bogus"));
    assert_int_equal(pii_types_parse("", err, sizeof(err)), 0);
    pii_mode m;
    assert_int_equal(pii_mode_parse("drop-line", &m), 0);
    assert_int_equal(m, PII_DROP_LINE);
    assert_int_equal(pii_mode_parse("nope", &m), -1);
    for (int t = 0; t < PII_NTYPES; t++)
        assert_int_equal(pii_types_parse(pii_type_name((pii_type)t), NULL, 0), 1u << t);
    pii_counts c;
    char *o = scrub("secret mail a@example.com, card 4111111111111111", PII_MASK, PII_ALL, &c);
    char *js = pii_report_json(&c, PII_MASK, PII_ALL, 0.5);
    assert_non_null(js);
    assert_non_null(strstr(js, "\"email\":\t1"));
    assert_non_null(strstr(js, "\"card\":\t1"));
    assert_null(strstr(js, "a@example.com")); /* counts only */
    assert_null(strstr(js, "4111"));
    free(js);
    free(o);
}

/* ---- placeholders and the tokenizer ----------------------------------------------------- */

/* 1 if every placeholder-shaped tag in text[0..n) ("<" ... ">" of the scrubber's shapes) is
 * exactly one token of ids[0..nt) */
static int placeholders_whole(const tok_tokenizer *tok, const char *text, size_t n,
                              const uint32_t *ids, size_t nt, size_t *nseen) {
    size_t off = 0, k = 0, seen = 0;
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        if (text[i] != '<')
            continue;
        size_t L = 0;
        for (int t = 0; t < PII_NTYPES && !L; t++) {
            const char *ph = pii_type_placeholder((pii_type)t);
            size_t pl = strlen(ph) - 1; /* "<EMAIL" */
            if (i + pl < n && !memcmp(text + i, ph, pl))
                L = text[i + pl] == '>' ? pl + 1 : text[i + pl] == ':' ? pl + 10 : 0;
        }
        if (!L)
            continue;
        seen++;
        while (k < nt && off < i) { /* advance to the token that starts at i */
            size_t bl;
            tok_token_bytes(tok, ids[k++], &bl);
            off += bl;
        }
        size_t bl = 0;
        if (off != i || k >= nt)
            ok = 0;
        else
            tok_token_bytes(tok, ids[k], &bl);
        if (text[i + L - 1] == '>' && L <= 10 && bl != L) /* <EMAIL>: the whole tag */
            ok = 0;
        if (L > 10 && bl != L - 9) /* <EMAIL:1a2b3c4d>: "<EMAIL:" is one token */
            ok = 0;
    }
    *nseen = seen;
    return ok;
}

static void test_placeholders_kept_whole(void **st) {
    (void)st;
    /* the chunk rule: a placeholder is a chunk of its own */
    const uint8_t *c = (const uint8_t *)"(<CARD>) <EMAIL> x<PHONE:0a1b2c3d>y <Not> <A>";
    assert_int_equal(tok_next_chunk(c, strlen((const char *)c)), 1);             /* ( */
    assert_int_equal(tok_next_chunk(c + 1, strlen((const char *)c) - 1), 6);     /* <CARD> */
    assert_int_equal(tok_next_chunk(c + 7, strlen((const char *)c) - 7), 1);     /* ) */
    assert_int_equal(tok_next_chunk(c + 8, strlen((const char *)c) - 8), 1);     /* ' ' */
    assert_int_equal(tok_next_chunk(c + 9, strlen((const char *)c) - 9), 7);     /* <EMAIL> */
    assert_int_equal(tok_next_chunk(c + 18, strlen((const char *)c) - 18), 16);  /* <PHONE:..> */
    assert_int_equal(tok_next_chunk(c + 35, strlen((const char *)c) - 35), 2);   /* " <" */

    size_t n;
    char *t = dense_text(200000, &n);
    for (int mode = PII_MASK; mode <= PII_HASH; mode++) {
        static const uint8_t key[] = "tok-key-0123456789";
        size_t sn;
        char *s = pii_scrub_text(t, n, (pii_mode)mode, PII_ALL, key, sizeof(key) - 1, NULL, &sn);
        assert_non_null(s);
        const char *atoms[PII_NTYPES];
        char buf[PII_NTYPES][24];
        for (int k = 0; k < PII_NTYPES; k++) {
            const char *ph = pii_type_placeholder((pii_type)k);
            snprintf(buf[k], sizeof(buf[k]), "%.*s%c", (int)strlen(ph) - 1, ph,
                     mode == PII_HASH ? ':' : '>');
            atoms[k] = buf[k];
        }
        uint32_t *ids = malloc(sn * sizeof(uint32_t));
        size_t seen;
        /* without the atomic merges a small vocabulary splits them ... */
        tok_tokenizer tk;
        assert_int_equal(tok_train_bpe(&tk, (const uint8_t *)s, sn, 280, 0), 0);
        size_t nt = tok_encode(&tk, (const uint8_t *)s, sn, ids);
        assert_false(placeholders_whole(&tk, s, sn, ids, nt, &seen));
        tok_free(&tk);
        /* ... with them each is one token, and the text still decodes exactly */
        assert_int_equal(tok_train_bpe_atomic(&tk, (const uint8_t *)s, sn, 320, atoms,
                                              PII_NTYPES, 0),
                         0);
        nt = tok_encode(&tk, (const uint8_t *)s, sn, ids);
        assert_true(placeholders_whole(&tk, s, sn, ids, nt, &seen));
        assert_true(seen > 1000);
        char *back = malloc(sn);
        assert_int_equal(tok_decode(&tk, ids, nt, (uint8_t *)back, sn), sn);
        assert_memory_equal(back, s, sn);
        /* too small a vocabulary for the atomic merges is refused */
        tok_tokenizer tk2;
        assert_int_equal(tok_train_bpe_atomic(&tk2, (const uint8_t *)s, sn, 260, atoms,
                                              PII_NTYPES, 0),
                         -1);
        tok_free(&tk);
        free(back);
        free(ids);
        free(s);
    }
    free(t);
}

/* ---- the labelled corpus ------------------------------------------------------------------- */

static void test_labelled_corpus(void **st) {
    (void)st;
    char dir[TU_DIR_MAX];
    assert_int_equal(tu_mkdtemp(dir, sizeof dir, "mt_pii_corpus"), 0);
    char cmd[512], path[600];
    snprintf(cmd, sizeof(cmd), "python3 tests/pii_corpus.py --out %s --seed 7 > /dev/null", dir);
    assert_int_equal(system(cmd), 0);
    size_t n;
    snprintf(path, sizeof(path), "%s/corpus.txt", dir);
    char *text = tu_slurp(path, &n);
    snprintf(path, sizeof(path), "%s/labels.tsv", dir);
    FILE *lf = fopen(path, "r");
    assert_non_null(lf);
    size_t nl = 0, capl = 1024;
    pii_span *lab = malloc(capl * sizeof(*lab));
    char tname[32];
    size_t s, e;
    while (fscanf(lf, "%zu\t%zu\t%31s\n", &s, &e, tname) == 3) {
        if (nl == capl)
            lab = realloc(lab, (capl *= 2) * sizeof(*lab));
        unsigned bit = pii_types_parse(tname, NULL, 0);
        assert_true(bit != 0);
        lab[nl++] = (pii_span){s, e, (pii_type)__builtin_ctz(bit)};
    }
    fclose(lf);
    size_t np = pii_find(text, n, PII_ALL, NULL, 0);
    pii_span *pred = malloc((np + 1) * sizeof(*pred));
    assert_int_equal(pii_find(text, n, PII_ALL, pred, np), np);
    /* exact matches (same start, end and type): both lists are sorted by start */
    uint64_t tp[PII_NTYPES] = {0}, npred[PII_NTYPES] = {0}, nlab[PII_NTYPES] = {0};
    int shown = 0;
    for (size_t i = 0, j = 0; i < nl || j < np;) {
        if (j >= np || (i < nl && lab[i].start < pred[j].start)) {
            nlab[lab[i].type]++;
            if (shown++ < 12)
                print_message("  missed %-6s %.*s\n", pii_type_name(lab[i].type),
                              (int)(lab[i].end - lab[i].start > 60 ? 60 : lab[i].end - lab[i].start),
                              text + lab[i].start);
            i++;
        } else if (i >= nl || pred[j].start < lab[i].start) {
            npred[pred[j].type]++;
            if (shown++ < 12)
                print_message("  false  %-6s %.*s\n", pii_type_name(pred[j].type),
                              (int)(pred[j].end - pred[j].start > 60 ? 60 : pred[j].end - pred[j].start),
                              text + pred[j].start);
            j++;
        } else {
            nlab[lab[i].type]++;
            npred[pred[j].type]++;
            if (lab[i].end == pred[j].end && lab[i].type == pred[j].type)
                tp[lab[i].type]++;
            else if (shown++ < 12)
                print_message("  wrong  %-6s as %-6s %.*s\n", pii_type_name(lab[i].type),
                              pii_type_name(pred[j].type), (int)(lab[i].end - lab[i].start),
                              text + lab[i].start);
            i++;
            j++;
        }
    }
    print_message("PII corpus (%zu bytes, %zu labelled spans, seed 7): exact-span match\n", n, nl);
    print_message("  %-7s %7s %7s %7s %9s %7s\n", "type", "labels", "found", "correct",
                  "precision", "recall");
    int ok = 1;
    for (int t = 0; t < PII_NTYPES; t++) {
        double P = npred[t] ? (double)tp[t] / (double)npred[t] : 1.0;
        double R = nlab[t] ? (double)tp[t] / (double)nlab[t] : 1.0;
        print_message("  %-7s %7llu %7llu %7llu %9.4f %7.4f%s\n", pii_type_name((pii_type)t),
                      (unsigned long long)nlab[t], (unsigned long long)npred[t],
                      (unsigned long long)tp[t], P, R, (P < 0.98 || R < 0.99) ? "  <- FAIL" : "");
        ok &= P >= 0.98 && R >= 0.99 && nlab[t] >= 100;
    }
    assert_true(ok);
    free(pred);
    free(lab);
    free(text);
    assert_int_equal(tu_rmtree(dir), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cjk_boundaries),  cmocka_unit_test(test_email),
        cmocka_unit_test(test_phone),           cmocka_unit_test(test_card),
        cmocka_unit_test(test_iban),            cmocka_unit_test(test_ip),
        cmocka_unit_test(test_ssn_cnid),        cmocka_unit_test(test_secrets),
        cmocka_unit_test(test_hash_mode),       cmocka_unit_test(test_drop_line),
        cmocka_unit_test(test_drop_line_long),  cmocka_unit_test(test_stream_equals_memory),
        cmocka_unit_test(test_random_bytes),    cmocka_unit_test(test_prefilter_equals_exact),
        cmocka_unit_test(test_parse_and_report), cmocka_unit_test(test_placeholders_kept_whole),
        cmocka_unit_test(test_labelled_corpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
