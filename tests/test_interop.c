/*
 * tests/test_interop.c — the GPT-2 tokenizer kinds and llm.c's model file, without the network
 * (tests/run_tokenizer_gpt2.sh and tests/run_interop.sh hold them to js-tiktoken and PyTorch).
 *
 * References here are written in the test, independently of text/tok_ranked.c and
 * model/interop_llmc.c: tiktoken's merge loop as js-tiktoken writes it (rescan all pairs after
 * every merge, O(L^2)), GPT-2's bytes_to_unicode() for Hugging Face files, and bf16 rounding by
 * comparing the two neighbouring bf16 values in double precision.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/rng.h"
#include "model/interop.h"
#include "model/model.h"
#include "text/tokenizer.h"

static char tmpdir[64];

static const char *tpath(const char *name) {
    static char p[8][256];
    static int k = 0;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof(p[k]), "%s/%s", tmpdir, name);
    return p[k];
}

/* text with words, numbers, punctuation, long space runs and some UTF-8 */
static size_t make_text(uint8_t *buf, size_t n, uint64_t seed) {
    static const char *w[] = {"the ", "The ", "quick ", "brown ", "fox's ", "jumped", " over",
                              "  ", "\n", "\n\n", "1234", " 56", "!!", "?", "caf\xc3\xa9 ",
                              "\xe4\xbd\xa0\xe5\xa5\xbd", "\xf0\x9f\x98\x80", "don't ", "      ",
                              "\t", "lazy dog. ", "\xff", "\x80\x80"};
    rng_state r;
    rng_seed(&r, seed);
    size_t at = 0;
    while (at < n) {
        const char *s = w[rng_u64(&r) % (sizeof(w) / sizeof(w[0]))];
        size_t L = strlen(s);
        if (at + L > n) break;
        memcpy(buf + at, s, L);
        at += L;
    }
    return at;
}

/* A GPT-2-like tokenizer file: minitrain's BPE trained on text, written as a tiktoken rank file
 * (rank = id; merge r's token = bytes of its pair). Returns the trained tokenizer. */
static void make_rank_file(tok_tokenizer *bpe, const char *path, int vocab) {
    uint8_t text[60000];
    size_t n = make_text(text, sizeof(text), 7);
    assert_int_equal(tok_train_bpe(bpe, text, n, vocab, 0), 0);
    FILE *f = fopen(path, "w");
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int id = 0; id < tok_vocab_size(bpe); id++) {
        size_t len;
        const uint8_t *b = tok_token_bytes(bpe, (uint32_t)id, &len);
        for (size_t i = 0; i < len; i += 3) {
            uint32_t x = (uint32_t)b[i] << 16 | (i + 1 < len ? (uint32_t)b[i + 1] << 8 : 0) |
                         (i + 2 < len ? b[i + 2] : 0);
            fputc(b64[x >> 18], f);
            fputc(b64[(x >> 12) & 63], f);
            fputc(i + 1 < len ? b64[(x >> 6) & 63] : '=', f);
            fputc(i + 2 < len ? b64[x & 63] : '=', f);
        }
        fprintf(f, " %d\n", id);
    }
    fclose(f);
}

/* js-tiktoken's bytePairEncode, with ids = ranks (rank_of: id of a byte span, or -1) */
static long rank_of(const tok_tokenizer *t, const uint8_t *p, size_t len) {
    for (int id = 0; id < tok_vocab_size(t); id++) { /* slow on purpose: no shared tables */
        size_t l;
        const uint8_t *b = tok_token_bytes(t, (uint32_t)id, &l);
        if (l == len && memcmp(b, p, len) == 0 && id != tok_eot(t)) return id;
    }
    return -1;
}

static size_t naive_piece(const tok_tokenizer *t, const uint8_t *p, size_t L, uint32_t *out) {
    long whole = rank_of(t, p, L);
    if (whole >= 0) {
        out[0] = (uint32_t)whole;
        return 1;
    }
    size_t start[4096], n = L;
    for (size_t i = 0; i <= L; i++) start[i] = i;
    for (;;) {
        long best = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            long r = rank_of(t, p + start[i], start[i + 2] - start[i]);
            if (r >= 0 && (best < 0 || r < best)) best = r, at = i;
        }
        if (best < 0) break;
        memmove(start + at + 1, start + at + 2, (n - at - 1) * sizeof(size_t));
        n--;
    }
    for (size_t i = 0; i < n; i++) out[i] = (uint32_t)rank_of(t, p + start[i], start[i + 1] - start[i]);
    return n;
}

/* pieces by the GPT-2 regex (gaps = invalid UTF-8 runs), each encoded naively */
static size_t naive_encode(const tok_tokenizer *t, const uint8_t *s, size_t n, uint32_t *out) {
    int e;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)TOK_GPT2_PATTERN, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &e, &at, NULL);
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    size_t pos = 0, cnt = 0;
    while (pos < n) {
        size_t ms = n, me = n;
        if (pcre2_match(re, s, n, pos, 0, md, NULL) >= 0) {
            ms = pcre2_get_ovector_pointer(md)[0];
            me = pcre2_get_ovector_pointer(md)[1];
        }
        if (ms > pos) cnt += naive_piece(t, s + pos, ms - pos, out + cnt);
        if (me > ms) cnt += naive_piece(t, s + ms, me - ms, out + cnt);
        if (me <= pos) break;
        pos = me;
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return cnt;
}

static void test_ranked_encoder_matches_naive(void **state) {
    (void)state;
    tok_tokenizer bpe, t;
    make_rank_file(&bpe, tpath("small.tiktoken"), 400);
    char err[512];
    assert_int_equal(tok_load(&t, tpath("small.tiktoken"), err, sizeof(err)), 0);
    assert_int_equal(t.kind, TOK_KIND_RANKED);
    assert_int_equal(tok_vocab_size(&t), tok_vocab_size(&bpe) + 1); /* + <|endoftext|> */
    assert_int_equal(tok_eot(&t), tok_vocab_size(&bpe));
    uint8_t text[3000];
    uint32_t a[3100], b[3100];
    uint8_t back[3100];
    for (int k = 0; k < 40; k++) {
        size_t n = make_text(text, 200 + (size_t)k * 60, 100 + (uint64_t)k);
        if (k == 39) { /* a 2000-byte space run: the heap path for pieces over 256 bytes */
            memset(text, ' ', 2000);
            text[2000] = 'x';
            n = 2001;
        }
        size_t na = tok_encode(&t, text, n, a), nb = naive_encode(&t, text, n, b);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na * sizeof(uint32_t));
        assert_int_equal(tok_decode(&t, a, na, back, sizeof(back)), n);
        assert_memory_equal(back, text, n);
    }
    /* "<|endoftext|>" in text is text, never the special id */
    size_t n = tok_encode(&t, (const uint8_t *)"a<|endoftext|>b", 15, a);
    for (size_t i = 0; i < n; i++) assert_int_not_equal(a[i], (uint32_t)tok_eot(&t));
    tok_free(&bpe);
    tok_free(&t);
}

/* GPT-2's bytes_to_unicode(), written out: the UTF-8 of byte b's stand-in code point */
static void b2u(uint8_t b, char *out) {
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    int cp = b;
    if (!printable) {
        int k = 0;
        for (int x = 0; x < b; x++)
            k += !((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
        cp = 256 + k;
    }
    if (cp < 0x80) out[0] = (char)cp, out[1] = 0;
    else out[0] = (char)(0xC0 | cp >> 6), out[1] = (char)(0x80 | (cp & 63)), out[2] = 0;
}

static void hf_string(const tok_tokenizer *t, uint32_t id, char *out) {
    size_t len;
    const uint8_t *b = tok_token_bytes(t, id, &len);
    out[0] = 0;
    for (size_t i = 0; i < len; i++) {
        char u[4];
        b2u(b[i], u);
        if (u[0] == '"' || u[0] == '\\') strcat(out, "\\");
        strcat(out, u);
    }
}

static void test_hf_and_llmc_files_agree(void **state) {
    (void)state;
    tok_tokenizer bpe, rk, hf, tj, lc, saved;
    make_rank_file(&bpe, tpath("r.tiktoken"), 350);
    char err[512], s[2048], l[1024], r[1024];
    FILE *v = fopen(tpath("vocab.json"), "w"), *m = fopen(tpath("merges.txt"), "w");
    FILE *j = fopen(tpath("tokenizer.json"), "w");
    fprintf(v, "{");
    fprintf(j, "{\"added_tokens\":[{\"id\":%d,\"content\":\"<|endoftext|>\",\"special\":true}],"
               "\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":"
               "false},\"model\":{\"type\":\"BPE\",\"vocab\":{", tok_vocab_size(&bpe));
    for (int id = 0; id < tok_vocab_size(&bpe); id++) {
        hf_string(&bpe, (uint32_t)id, s);
        fprintf(v, "\"%s\":%d,", s, id);
        fprintf(j, "%s\"%s\":%d", id ? "," : "", s, id);
    }
    fprintf(v, "\"<|endoftext|>\":%d}", tok_vocab_size(&bpe));
    fprintf(j, "},\"merges\":[");
    fprintf(m, "#version: 0.2\n");
    for (int k = 0; k < bpe.n_merges; k++) {
        hf_string(&bpe, bpe.merges[2 * k], l);
        hf_string(&bpe, bpe.merges[2 * k + 1], r);
        fprintf(m, "%s %s\n", l, r);
        fprintf(j, "%s[\"%s\",\"%s\"]", k ? "," : "", l, r);
    }
    fprintf(j, "]}}");
    fclose(v), fclose(m), fclose(j);
    /* llm.c's gpt2_tokenizer.bin, version 2 */
    FILE *f = fopen(tpath("gpt2_tokenizer.bin"), "wb");
    uint32_t h[256] = {20240328, 2, (uint32_t)tok_vocab_size(&bpe) + 1, (uint32_t)tok_vocab_size(&bpe)};
    fwrite(h, 4, 256, f);
    for (int id = 0; id <= tok_vocab_size(&bpe); id++) {
        size_t len;
        const uint8_t *b = id < tok_vocab_size(&bpe) ? tok_token_bytes(&bpe, (uint32_t)id, &len)
                                                     : (len = 13, (const uint8_t *)"<|endoftext|>");
        uint8_t L = (uint8_t)len;
        fwrite(&L, 1, 1, f);
        fwrite(b, 1, len, f);
    }
    fclose(f);
    assert_int_equal(tok_load(&rk, tpath("r.tiktoken"), err, sizeof(err)), 0);
    if (tok_load(&hf, tpath("merges.txt"), err, sizeof(err)) != 0) fail_msg("%s", err);
    if (tok_load(&tj, tpath("tokenizer.json"), err, sizeof(err)) != 0) fail_msg("%s", err);
    if (tok_load(&lc, tpath("gpt2_tokenizer.bin"), err, sizeof(err)) != 0) fail_msg("%s", err);
    assert_int_equal(tok_save(&tj, tpath("saved.bin"), err, sizeof(err)), 0);
    assert_int_equal(tok_load(&saved, tpath("saved.bin"), err, sizeof(err)), 0);
    assert_int_equal(lc.kind, TOK_KIND_DECODE);
    assert_false(tok_can_encode(&lc));
    assert_int_equal(tok_eot(&lc), tok_eot(&rk));
    uint8_t text[4000];
    uint32_t a[4100], b[4100];
    size_t n = make_text(text, sizeof(text), 555);
    size_t na = tok_encode(&rk, text, n, a);
    const tok_tokenizer *others[3] = {&hf, &tj, &saved};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(tok_vocab_size(others[k]), tok_vocab_size(&rk));
        assert_int_equal(tok_eot(others[k]), tok_eot(&rk));
        assert_int_equal(tok_encode(others[k], text, n, b), na);
        assert_memory_equal(a, b, na * sizeof(uint32_t));
    }
    for (int id = 0; id < tok_vocab_size(&rk); id++) {
        size_t x, y;
        const uint8_t *p = tok_token_bytes(&rk, (uint32_t)id, &x), *q = tok_token_bytes(&lc, (uint32_t)id, &y);
        assert_int_equal(x, y);
        assert_memory_equal(p, q, x);
    }
    assert_int_equal(tok_encode(&lc, text, n, b), 0);
    /* a bit flip in the saved file is caught */
    f = fopen(tpath("saved.bin"), "r+b");
    fseek(f, 100, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 100, SEEK_SET);
    fputc(c ^ 1, f);
    fclose(f);
    tok_tokenizer bad;
    assert_int_equal(tok_load(&bad, tpath("saved.bin"), err, sizeof(err)), -1);
    assert_non_null(strstr(err, "checksum"));
    tok_free(&bpe), tok_free(&rk), tok_free(&hf), tok_free(&tj), tok_free(&lc), tok_free(&saved);
}

/* bf16 nearest to x, ties to even, by comparing the two candidates in double precision */
static float bf16_reference(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint32_t lo = u & 0xffff0000u, hi = lo + 0x10000u;
    float flo, fhi;
    memcpy(&flo, &lo, 4);
    memcpy(&fhi, &hi, 4);
    double dl = fabs((double)x - flo), dh = fabs((double)fhi - x);
    if (dl < dh) return flo;
    if (dh < dl) return fhi;
    return (lo >> 16) % 2 == 0 ? flo : fhi;
}

static void test_llmc_file_roundtrip(void **state) {
    (void)state;
    gpt_config cfg = {.n_layer = 2, .n_head = 2, .d_model = 16, .seq_len = 8, .vocab_size = 130};
    gpt_model m, back, half;
    char err[512];
    assert_int_equal(gpt_build(&m, &cfg, err, sizeof(err)), 0);
    gpt_init_weights(&m, 3);
    for (size_t i = 0; i < m.num_params; i++) m.params[i] += 1e-3f * (float)(i % 97); /* no zeros */
    m.params[5] = 1.00390625f; /* exactly halfway between two bf16 values: ties to even (down) */
    m.params[6] = 1.01171875f; /* halfway, odd below: rounds up */
    assert_int_equal(interop_llmc_write(&m, tpath("m.bin"), INTEROP_LLMC_FP32, err, sizeof(err)), 0);
    assert_int_equal(interop_llmc_write(&m, tpath("m16.bin"), INTEROP_LLMC_BF16, err, sizeof(err)), 0);
    int version = 0;
    assert_int_equal(interop_llmc_read(&back, tpath("m.bin"), &version, err, sizeof(err)), 0);
    assert_int_equal(version, 3);
    assert_int_equal(back.num_params, m.num_params);
    assert_memory_equal(back.params, m.params, m.num_params * sizeof(float));
    assert_int_equal(interop_llmc_read(&half, tpath("m16.bin"), &version, err, sizeof(err)), 0);
    assert_int_equal(version, 5);
    for (size_t i = 0; i < m.num_params; i++)
        if (half.params[i] != bf16_reference(m.params[i]))
            fail_msg("param %zu: %.9g rounds to %.9g, want %.9g", i, m.params[i], half.params[i],
                     bf16_reference(m.params[i]));
    /* header: V 130 padded to 256 rows of zeros; the file is exactly header + params */
    FILE *f = fopen(tpath("m.bin"), "rb");
    int32_t h[256];
    assert_int_equal(fread(h, 4, 256, f), 256);
    assert_int_equal(h[0], 20240326);
    assert_int_equal(h[3], 130);
    assert_int_equal(h[7], 256);
    float row[16];
    fseek(f, 1024 + 4L * 130 * 16, SEEK_SET);
    assert_int_equal(fread(row, 4, 16, f), 16);
    for (int i = 0; i < 16; i++) assert_true(row[i] == 0.0f);
    fclose(f);
    gpt_free(&m), gpt_free(&back), gpt_free(&half);
}

int main(void) {
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/test_interop_XXXXXX");
    if (mkdtemp(tmpdir) == NULL) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranked_encoder_matches_naive),
        cmocka_unit_test(test_hf_and_llmc_files_agree),
        cmocka_unit_test(test_llmc_file_roundtrip),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpdir);
    if (system(cmd) != 0) rc = rc ? rc : 1;
    return rc;
}
