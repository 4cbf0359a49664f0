/*
 * tests/test_tokenizer.c — byte and BPE tokenizers: round trips, agreement with textbook
 * reference implementations, compression, file save/load and rejection of damaged files.
 *
 * The references here are deliberately naive and independent of text/tokenizer.c's data
 * structures: the trainer recounts every pair over every chunk OCCURRENCE each step (no unique
 * chunks, no incremental counts), and the encoder is GPT-2's loop "find the lowest-ranked pair,
 * merge all its occurrences left to right, repeat". Only the chunking rule (tok_next_chunk) is
 * shared, and it has its own test against hand-worked examples.
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

#include "text/tokenizer.h"

#define TU_PREFIX "test_tokenizer"
#include "tests/testutil.h"

/* ---- helpers ---------------------------------------------------------------------------- */

static uint64_t rs = 0x1234567;
static uint32_t rnd(void) { /* xorshift64* */
    rs ^= rs >> 12;
    rs ^= rs << 25;
    rs ^= rs >> 27;
    return (uint32_t)((rs * 2685821657736338717ull) >> 32);
}

static void random_bytes(uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)rnd();
    p[0] = 0; /* make sure of a NUL, an invalid UTF-8 lead and a stray continuation byte */
    if (n > 3)
        p[n / 2] = 0xff, p[n / 3] = 0x80;
}

/* a small English-like text: words of 1..3 syllables drawn with a skew (so some are frequent),
 * capitalized now and then, with punctuation, digits and newlines between them */
static uint8_t *make_text(size_t n) {
    static const char *syl[] = {"th", "e",  "king", "qu",  "een", "ou", "art", "my", "lo", "rd",
                                "go", "od", "ni",   "ght", "sw",  "ee", "t",   "pr", "in", "ce",
                                "an", "d",  "to",   "be",  "or",  "no", "ve",  "ea", "'",  "s"};
    static const char *seps[] = {" ", " ", " ", " ", ", ", ".\n", "!\n\n", "?  ", "\n", " 1599 "};
    uint8_t *t = malloc(n);
    size_t k = 0;
    while (k < n) {
        int nsyl = 1 + (int)(rnd() % 3);
        for (int q = 0; q < nsyl; q++) {
            uint32_t r = rnd() % 30;
            const char *w = syl[(r * r) / 30]; /* skewed towards the first syllables */
            for (int c = 0; w[c] && k < n; c++)
                t[k++] = (uint8_t)((q == 0 && c == 0 && rnd() % 8 == 0) ? w[c] - 32 * (w[c] >= 'a')
                                                                        : w[c]);
        }
        const char *s = seps[rnd() % (sizeof(seps) / sizeof(seps[0]))];
        for (; *s && k < n; s++)
            t[k++] = (uint8_t)*s;
    }
    return t;
}

static void assert_roundtrip(const tok_tokenizer *t, const uint8_t *p, size_t n) {
    uint32_t *ids = malloc((n + 1) * sizeof(uint32_t));
    uint8_t *back = malloc(n + 1);
    size_t m = tok_encode(t, p, n, ids);
    assert_true(m <= n);
    for (size_t i = 0; i < m; i++)
        assert_true(ids[i] < (uint32_t)tok_vocab_size(t));
    assert_int_equal(tok_decode(t, ids, m, back, n), n);
    assert_memory_equal(back, p, n);
    free(ids);
    free(back);
}

/* Reference trainer: every step recount all pairs over all chunk occurrences. */
static int ref_train(const uint8_t *text, size_t n, int vocab, uint32_t *merges) {
    uint32_t *sym = malloc(n * sizeof(uint32_t));
    size_t *cstart = malloc(n * sizeof(size_t)), *clen = malloc(n * sizeof(size_t)), nc = 0;
    for (size_t i = 0; i < n; i++)
        sym[i] = text[i];
    for (size_t pos = 0; pos < n;) {
        size_t L = tok_next_chunk(text + pos, n - pos);
        cstart[nc] = pos;
        clen[nc++] = L;
        pos += L;
    }
    int64_t *cnt = malloc((size_t)vocab * vocab * sizeof(int64_t));
    int m;
    for (m = 0; m < vocab - 256; m++) {
        memset(cnt, 0, (size_t)vocab * vocab * sizeof(int64_t));
        for (size_t c = 0; c < nc; c++)
            for (size_t i = 0; i + 1 < clen[c]; i++)
                cnt[(size_t)sym[cstart[c] + i] * vocab + sym[cstart[c] + i + 1]]++;
        int64_t best = 1;
        size_t bi = 0;
        for (size_t k = 0; k < (size_t)vocab * vocab; k++)
            if (cnt[k] > best)
                best = cnt[k], bi = k; /* ascending k = smallest (a, b) on ties */
        if (best < 2)
            break;
        uint32_t a = (uint32_t)(bi / vocab), b = (uint32_t)(bi % vocab);
        merges[2 * m] = a;
        merges[2 * m + 1] = b;
        for (size_t c = 0; c < nc; c++) {
            uint32_t *s = sym + cstart[c];
            size_t j = 0;
            for (size_t i = 0; i < clen[c];) {
                if (i + 1 < clen[c] && s[i] == a && s[i + 1] == b)
                    s[j++] = 256u + m, i += 2;
                else
                    s[j++] = s[i++];
            }
            clen[c] = j;
        }
    }
    free(sym), free(cstart), free(clen), free(cnt);
    return m;
}

/* Reference encoder (GPT-2's bpe() loop) on one chunk. */
static size_t ref_encode_chunk(const int *rank, int V, const uint8_t *p, size_t L, uint32_t *out) {
    for (size_t i = 0; i < L; i++)
        out[i] = p[i];
    for (;;) {
        int best = -1;
        for (size_t i = 0; i + 1 < L; i++) {
            int r = rank[(size_t)out[i] * V + out[i + 1]];
            if (r >= 0 && (best < 0 || r < best))
                best = r;
        }
        if (best < 0)
            return L;
        size_t j = 0;
        for (size_t i = 0; i < L;) {
            if (i + 1 < L && rank[(size_t)out[i] * V + out[i + 1]] == best)
                out[j++] = 256u + best, i += 2;
            else
                out[j++] = out[i++];
        }
        L = j;
    }
}

static void assert_matches_ref_encoder(const tok_tokenizer *t, const uint8_t *p, size_t n) {
    int V = tok_vocab_size(t);
    int *rank = malloc((size_t)V * V * sizeof(int));
    for (size_t k = 0; k < (size_t)V * V; k++)
        rank[k] = -1;
    for (int r = 0; r < t->n_merges; r++)
        rank[(size_t)t->merges[2 * r] * V + t->merges[2 * r + 1]] = r;
    uint32_t *ref = malloc(n * sizeof(uint32_t)), *got = malloc(n * sizeof(uint32_t));
    size_t nref = 0;
    for (size_t pos = 0; pos < n;) {
        size_t L = tok_next_chunk(p + pos, n - pos);
        nref += ref_encode_chunk(rank, V, p + pos, L, ref + nref);
        pos += L;
    }
    size_t ngot = tok_encode(t, p, n, got);
    assert_int_equal(ngot, nref);
    assert_memory_equal(got, ref, nref * sizeof(uint32_t));
    free(rank), free(ref), free(got);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_byte_roundtrip(void **state) {
    (void)state;
    tok_tokenizer t;
    assert_int_equal(tok_init_byte(&t), 0);
    assert_int_equal(tok_vocab_size(&t), 256);
    size_t n = 20000;
    uint8_t *p = malloc(n);
    uint32_t *ids = malloc(n * sizeof(uint32_t));
    random_bytes(p, n);
    assert_int_equal(tok_encode(&t, p, n, ids), n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ids[i], p[i]); /* id = byte value */
    assert_roundtrip(&t, p, n);
    size_t len;
    const uint8_t *b = tok_token_bytes(&t, 0, &len);
    assert_int_equal(len, 1);
    assert_int_equal(b[0], 0);
    assert_null(tok_token_bytes(&t, 256, &len));
    free(p), free(ids);
    tok_free(&t);
}

static size_t chunk_lens(const char *s, size_t *lens) {
    size_t n = strlen(s), k = 0;
    for (size_t pos = 0; pos < n;) {
        lens[k] = tok_next_chunk((const uint8_t *)s + pos, n - pos);
        pos += lens[k++];
    }
    return k;
}

static void test_chunk_rule(void **state) {
    (void)state;
    size_t l[64];
    /* "Hello" | " world" | "," | " 1599" | "!\n" → "!" is punctuation, "\n" whitespace */
    assert_int_equal(chunk_lens("Hello world, 1599!\n", l), 6);
    size_t want1[] = {5, 6, 1, 5, 1, 1};
    for (int i = 0; i < 6; i++)
        assert_int_equal(l[i], want1[i]);
    /* "a" | "  " -> the last space of a run goes to the next word: "a" | " " | " b" */
    assert_int_equal(chunk_lens("a  b", l), 3);
    assert_int_equal(l[0], 1), assert_int_equal(l[1], 1), assert_int_equal(l[2], 2);
    /* a mixed whitespace run keeps all but its last space, which starts the next word */
    assert_int_equal(chunk_lens("x\n\n  y", l), 3);
    assert_int_equal(l[0], 1), assert_int_equal(l[1], 3), assert_int_equal(l[2], 2);
    /* whitespace at the very end of the text stays together */
    assert_int_equal(chunk_lens("x  ", l), 2);
    assert_int_equal(l[1], 2);
    /* a long run is cut at TOK_MAX_CHUNK */
    size_t n = 3 * TOK_MAX_CHUNK + 5;
    uint8_t *run = malloc(n);
    memset(run, 'a', n);
    assert_int_equal(tok_next_chunk(run, n), TOK_MAX_CHUNK);
    memset(run, ' ', n);
    assert_int_equal(tok_next_chunk(run, n), TOK_MAX_CHUNK);
    /* chunks of random bytes partition the input */
    random_bytes(run, n);
    size_t pos = 0;
    while (pos < n) {
        size_t L = tok_next_chunk(run + pos, n - pos);
        assert_true(L >= 1 && L <= TOK_MAX_CHUNK);
        pos += L;
    }
    assert_int_equal(pos, n);
    free(run);
}

static void test_bpe_matches_reference_trainer(void **state) {
    (void)state;
    size_t n = 6000;
    uint8_t *text = make_text(n);
    int vocab = 256 + 120;
    tok_tokenizer t;
    assert_int_equal(tok_train_bpe(&t, text, n, vocab, 0), 0);
    uint32_t *ref = malloc((size_t)(vocab - 256) * 2 * sizeof(uint32_t));
    int nref = ref_train(text, n, vocab, ref);
    assert_int_equal(t.n_merges, nref);
    assert_int_equal(nref, vocab - 256);
    assert_int_equal(tok_vocab_size(&t), 256 + nref);
    assert_memory_equal(t.merges, ref, (size_t)nref * 2 * sizeof(uint32_t));
    /* each token's bytes are its two parts' bytes */
    for (int r = 0; r < t.n_merges; r++) {
        size_t la, lb, lm;
        const uint8_t *a = tok_token_bytes(&t, t.merges[2 * r], &la);
        const uint8_t *b = tok_token_bytes(&t, t.merges[2 * r + 1], &lb);
        const uint8_t *m = tok_token_bytes(&t, 256u + r, &lm);
        assert_int_equal(lm, la + lb);
        assert_memory_equal(m, a, la);
        assert_memory_equal(m + la, b, lb);
    }
    free(ref), free(text);
    tok_free(&t);
}

static void test_bpe_roundtrip_and_encoder(void **state) {
    (void)state;
    size_t n = 8000;
    uint8_t *text = make_text(n);
    tok_tokenizer t;
    assert_int_equal(tok_train_bpe(&t, text, n, 512, 0), 0);
    assert_int_equal(tok_vocab_size(&t), 512); /* the text has enough repeated pairs */
    /* training text: round trip, agreement with GPT-2's loop, compression */
    assert_roundtrip(&t, text, n);
    assert_matches_ref_encoder(&t, text, n);
    uint32_t *ids = malloc(n * sizeof(uint32_t));
    size_t m = tok_encode(&t, text, n, ids);
    assert_true(m < n / 2); /* a repetitive text compresses well below 2 bytes per token */
    /* random bytes (NULs, invalid UTF-8), a long run, and text with bytes flipped */
    size_t rn = 5000;
    uint8_t *r = malloc(rn);
    random_bytes(r, rn);
    assert_roundtrip(&t, r, rn);
    assert_matches_ref_encoder(&t, r, rn);
    memset(r, 't', rn);
    assert_roundtrip(&t, r, rn);
    assert_matches_ref_encoder(&t, r, rn);
    memcpy(r, text, rn);
    for (int k = 0; k < 200; k++)
        r[rnd() % rn] = (uint8_t)rnd();
    assert_roundtrip(&t, r, rn);
    assert_matches_ref_encoder(&t, r, rn);
    assert_roundtrip(&t, r, 1);
    assert_int_equal(tok_encode(&t, r, 0, ids), 0);
    free(r), free(ids), free(text);
    tok_free(&t);
}

static void test_decode_edges(void **state) {
    (void)state;
    tok_tokenizer t;
    tok_init_byte(&t);
    uint32_t ids[] = {'a', 'b', 999, 'c'}; /* 999 >= vocab: decodes to nothing */
    uint8_t out[4] = {0};
    assert_int_equal(tok_decode(&t, ids, 4, out, 4), 3);
    assert_memory_equal(out, "abc", 3);
    memset(out, 0, 4);
    assert_int_equal(tok_decode(&t, ids, 4, out, 2), 3); /* needed length, prefix written */
    assert_memory_equal(out, "ab\0", 3);
    tok_free(&t);
}

static void test_stops_when_no_pair_repeats(void **state) {
    (void)state;
    const char *s = "abababab cdcd";
    tok_tokenizer t;
    assert_int_equal(tok_train_bpe(&t, (const uint8_t *)s, strlen(s), 1000, 0), 0);
    /* by hand, chunks "abababab" and " cdcd": (a,b) x4 -> 256; (256,256) x3 (adjacent pairs
     * overlap, as in minbpe) -> 257; (c,d) x2 -> 258; then every pair occurs once: stop */
    assert_int_equal(tok_vocab_size(&t), 259);
    uint32_t want[] = {'a', 'b', 256, 256, 'c', 'd'};
    assert_memory_equal(t.merges, want, sizeof(want));
    assert_roundtrip(&t, (const uint8_t *)s, strlen(s));
    tok_free(&t);
    assert_int_equal(tok_train_bpe(&t, (const uint8_t *)s, strlen(s), 256, 0), -1);
    tok_free(&t);
}

/* ---- files ------------------------------------------------------------------------------ */


static void write_file(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    fclose(f);
}

static uint8_t *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*n + 64);
    assert_int_equal(fread(p, 1, *n, f), *n);
    fclose(f);
    return p;
}

static void test_save_load(void **state) {
    (void)state;
    size_t n = 6000;
    uint8_t *text = make_text(n);
    tok_tokenizer t, u;
    char path[300], err[512];
    assert_int_equal(tok_train_bpe(&t, text, n, 400, 0), 0);
    snprintf(path, sizeof(path), "%s/tok.bin", tu_dir);
    assert_int_equal(tok_save(&t, path, err, sizeof(err)), 0);
    assert_int_equal(access(path, F_OK), 0);
    assert_int_equal(tok_load(&u, path, err, sizeof(err)), 0);
    assert_int_equal(u.kind, TOK_KIND_BPE);
    assert_int_equal(tok_vocab_size(&u), tok_vocab_size(&t));
    assert_memory_equal(u.merges, t.merges, (size_t)t.n_merges * 2 * sizeof(uint32_t));
    uint32_t *a = malloc(n * 4), *b = malloc(n * 4);
    size_t na = tok_encode(&t, text, n, a), nb = tok_encode(&u, text, n, b);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * 4);
    /* file size: 32-byte header + 8 bytes per merge (docs/tokenizer.md) */
    size_t fsz;
    free(read_file(path, &fsz));
    assert_int_equal(fsz, 32 + 8 * (size_t)t.n_merges);
    tok_free(&u);
    /* byte tokenizer round trip */
    tok_free(&t);
    tok_init_byte(&t);
    assert_int_equal(tok_save(&t, path, err, sizeof(err)), 0);
    assert_int_equal(tok_load(&u, path, err, sizeof(err)), 0);
    assert_int_equal(u.kind, TOK_KIND_BYTE);
    assert_int_equal(tok_vocab_size(&u), 256);
    tok_free(&u), tok_free(&t);
    free(a), free(b), free(text);
    unlink(path);
}

static uint32_t fnv32(const uint8_t *p, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); } /* little-endian host */

/* write a damaged copy, expect tok_load to fail with the path in the message */
static void expect_reject(const uint8_t *p, size_t n, const char *name, const char *needle) {
    char path[300], err[512] = "";
    snprintf(path, sizeof(path), "%s/%s", tu_dir, name);
    write_file(path, p, n);
    tok_tokenizer t;
    assert_int_equal(tok_load(&t, path, err, sizeof(err)), -1);
    if (strstr(err, path) == NULL || strstr(err, needle) == NULL)
        fail_msg("message for %s lacks '%s' or the path: %s", name, needle, err);
    assert_int_equal(t.vocab_size, 0);
    tok_free(&t);
    unlink(path);
}

static void test_corrupt_rejected(void **state) {
    (void)state;
    size_t n = 4000, sz;
    uint8_t *text = make_text(n);
    tok_tokenizer t;
    char path[300], err[512];
    assert_int_equal(tok_train_bpe(&t, text, n, 300, 0), 0);
    snprintf(path, sizeof(path), "%s/good.bin", tu_dir);
    assert_int_equal(tok_save(&t, path, err, sizeof(err)), 0);
    uint8_t *good = read_file(path, &sz), *bad = malloc(sz + 64);
    unlink(path);

    expect_reject(good, 10, "short_header.bin", "truncated");
    expect_reject(good, sz - 8, "short_merges.bin", "truncated");
    memcpy(bad, good, sz), bad[sz] = 0;
    expect_reject(bad, sz + 1, "trailing.bin", "trailing");
    memcpy(bad, good, sz), bad[0] = 'X';
    expect_reject(bad, sz, "magic.bin", "magic");
    memcpy(bad, good, sz), put32(bad + 4, 7);
    expect_reject(bad, sz, "version.bin", "version");
    memcpy(bad, good, sz), put32(bad + 8, 5);
    expect_reject(bad, sz, "kind.bin", "kind");
    memcpy(bad, good, sz), put32(bad + 12, 5000);
    expect_reject(bad, sz, "vocab.bin", "vocab");
    memcpy(bad, good, sz), bad[40] ^= 1;
    expect_reject(bad, sz, "bitflip.bin", "checksum");
    /* structurally bad merges behind a valid checksum */
    memcpy(bad, good, sz), put32(bad + 32, 256); /* merge 0 uses id 256, defined by itself */
    put32(bad + 24, fnv32(bad + 32, sz - 32));
    expect_reject(bad, sz, "forward_ref.bin", "merge 0");
    memcpy(bad, good, sz), memcpy(bad + 40, bad + 32, 8); /* merge 1 repeats merge 0 */
    put32(bad + 24, fnv32(bad + 32, sz - 32));
    expect_reject(bad, sz, "duplicate.bin", "repeats");

    tok_tokenizer u;
    snprintf(path, sizeof(path), "%s/missing.bin", tu_dir);
    assert_int_equal(tok_load(&u, path, err, sizeof(err)), -1);
    assert_non_null(strstr(err, path));
    free(good), free(bad), free(text);
    tok_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_byte_roundtrip),
        cmocka_unit_test(test_chunk_rule),
        cmocka_unit_test(test_bpe_matches_reference_trainer),
        cmocka_unit_test(test_bpe_roundtrip_and_encoder),
        cmocka_unit_test(test_decode_edges),
        cmocka_unit_test(test_stops_when_no_pair_repeats),
        cmocka_unit_test(test_save_load),
        cmocka_unit_test(test_corrupt_rejected),
    };
    return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
