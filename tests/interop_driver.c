/*
 * tests/interop_driver.c — the C side of the interop tests (tests/run_tokenizer_gpt2.sh and
 * tests/run_interop.sh build it against build/libminitrain.a). Each subcommand compares minitrain
 * with a reference written by an independent implementation and prints one figure line:
 *
 *   tok-parity TOKENIZER CORPUS_DIR   ids of every CORPUS_DIR/NN_name.txt equal NN_name.ids
 *                                     (js-tiktoken's), and decode(encode(text)) == text
 *   roundtrip TOKENIZER N             decode(encode(x)) == x for N seeded random byte strings
 *                                     (random bytes, broken and valid UTF-8, long runs)
 *   classes CLASSES.bin               the GPT-2 regex's character classes in PCRE2 vs JavaScript
 *                                     for every code point; fails if they differ anywhere except
 *                                     where one engine's Unicode tables are older (unassigned
 *                                     there) or in what \s means at U+0085, U+180E, U+FEFF
 *                                     (docs/interop.md: the engines' documented choices)
 *   same-ids TOK_A TOK_B CORPUS_DIR   two tokenizer files encode the corpus identically
 *   logits RUN REF.bin B T            minitrain's logits of the model in RUN equal the reference
 *                                     (float32 tokens then logits) to 1e-4 relative
 * Exit status 0 when the comparison holds, 1 when it does not, 2 for bad arguments.
 */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/rng.h"
#include "model/model.h"
#include "model/model_io.h"
#include "text/tokenizer.h"

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)sz + 1);
    if (fread(b, 1, (size_t)sz, f) != (size_t)sz) exit(2);
    fclose(f);
    b[sz] = 0;
    *n = (size_t)sz;
    return b;
}

static void load_tok(tok_tokenizer *t, const char *path) {
    char err[1024];
    if (tok_load(t, path, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
}

/* 1 if decode(encode(x)) == x */
static int roundtrips(const tok_tokenizer *t, const uint8_t *x, size_t n) {
    uint32_t *ids = malloc((n + 1) * sizeof(uint32_t));
    size_t k = tok_encode(t, x, n, ids);
    uint8_t *back = malloc(n + 1);
    size_t m = tok_decode(t, ids, k, back, n + 1);
    int ok = m == n && memcmp(back, x, n) == 0;
    free(ids);
    free(back);
    return ok;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* sorted NN_name.txt files of a corpus directory */
static int corpus_files(const char *dir, char ***names) {
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "cannot open %s\n", dir);
        exit(2);
    }
    int n = 0;
    *names = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t L = strlen(e->d_name);
        if (L < 5 || strcmp(e->d_name + L - 4, ".txt")) continue;
        *names = realloc(*names, sizeof(char *) * (size_t)(n + 1));
        (*names)[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(*names, (size_t)n, sizeof(char *), cmp_names);
    return n;
}

static int tok_parity(const char *tokpath, const char *dir) {
    tok_tokenizer t;
    load_tok(&t, tokpath);
    char **names;
    int nf = corpus_files(dir, &names), bad = 0;
    size_t total_ids = 0, total_bytes = 0;
    for (int f = 0; f < nf; f++) {
        char p[4096];
        size_t n, ni;
        snprintf(p, sizeof(p), "%s/%s", dir, names[f]);
        uint8_t *text = slurp(p, &n);
        snprintf(p + strlen(p) - 4, 5, ".ids");
        char *ref = (char *)slurp(p, &ni);
        size_t nref = 0, cap = 1024;
        uint32_t *want = malloc(cap * sizeof(uint32_t));
        for (char *s = ref; *s;) {
            char *end;
            unsigned long v = strtoul(s, &end, 10);
            if (end == s) break;
            if (nref == cap) want = realloc(want, (cap *= 2) * sizeof(uint32_t));
            want[nref++] = (uint32_t)v;
            s = end;
            while (*s == '\n') s++;
        }
        uint32_t *got = malloc((n + 1) * sizeof(uint32_t));
        size_t ng = tok_encode(&t, text, n, got);
        size_t same = 0;
        while (same < ng && same < nref && got[same] == want[same]) same++;
        int ok = ng == nref && same == ng;
        int rt = roundtrips(&t, text, n);
        printf("  %-28s %7zu bytes %7zu ids  %s%s\n", names[f], n, nref,
               ok ? "identical to js-tiktoken" : "DIFFERENT", rt ? ", round-trips" : ", NO ROUND TRIP");
        if (!ok) {
            size_t lo = same > 3 ? same - 3 : 0;
            printf("    first difference at id %zu (ours %zu ids):", same, ng);
            for (size_t i = lo; i < same + 4; i++)
                printf(" [%u|%u]", i < ng ? got[i] : 0, i < nref ? want[i] : 0);
            printf("  (ours|js)\n");
        }
        bad += !ok || !rt;
        total_ids += nref;
        total_bytes += n;
        free(text), free(ref), free(want), free(got), free(names[f]);
    }
    free(names);
    printf("tokenizer parity: %d/%d corpus files identical (%zu ids, %zu bytes)\n", nf - bad, nf,
           total_ids, total_bytes);
    tok_free(&t);
    return bad ? 1 : 0;
}

static int same_ids(const char *a, const char *b, const char *dir) {
    tok_tokenizer ta, tb;
    load_tok(&ta, a);
    load_tok(&tb, b);
    char **names;
    int nf = corpus_files(dir, &names), bad = 0;
    for (int f = 0; f < nf; f++) {
        char p[4096];
        size_t n;
        snprintf(p, sizeof(p), "%s/%s", dir, names[f]);
        uint8_t *text = slurp(p, &n);
        if (!tok_can_encode(&ta) || !tok_can_encode(&tb)) { /* decode only: tables below */
            free(text), free(names[f]);
            continue;
        }
        uint32_t *x = malloc((n + 1) * 4), *y = malloc((n + 1) * 4);
        size_t nx = tok_encode(&ta, text, n, x), ny = tok_encode(&tb, text, n, y);
        if (nx != ny || memcmp(x, y, nx * 4) != 0) {
            printf("  %s: DIFFERENT (%zu vs %zu ids)\n", names[f], nx, ny);
            bad++;
        }
        free(text), free(x), free(y), free(names[f]);
    }
    free(names);
    int same_vocab = tok_vocab_size(&ta) == tok_vocab_size(&tb);
    for (int id = 0; same_vocab && id < tok_vocab_size(&ta); id++) {
        size_t la, lb;
        const uint8_t *pa = tok_token_bytes(&ta, (uint32_t)id, &la), *pb = tok_token_bytes(&tb, (uint32_t)id, &lb);
        if (la != lb || (la && memcmp(pa, pb, la) != 0)) same_vocab = 0;
    }
    int ea = tok_eot(&ta), eb = tok_eot(&tb);
    if (tok_can_encode(&ta) && tok_can_encode(&tb))
        printf("same ids: %d/%d corpus files, ", nf - bad, nf);
    else
        printf("decode only (corpus not encoded): ");
    printf("%s decode table (%d ids), eot %d vs %d\n", same_vocab ? "same" : "DIFFERENT",
           tok_vocab_size(&ta), ea, eb);
    tok_free(&ta);
    tok_free(&tb);
    return bad || !same_vocab || ea != eb ? 1 : 0;
}

static int roundtrip(const char *tokpath, int count) {
    tok_tokenizer t;
    load_tok(&t, tokpath);
    rng_state r;
    rng_seed(&r, 12345);
    uint8_t buf[4096];
    int bad = 0;
    static const char *frag[] = {"\xe4\xbd\xa0", "\xf0\x9f\x98\x80", "\xc3\xa9", " ", "  ", "\n",
                                 "'s", "a", "Z", "7", "\xe4\xbd", "\xf0\x9f", "\x80", "\xff",
                                 "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\0", "<|endoftext|>"};
    for (int i = 0; i < count; i++) {
        size_t n = (uint32_t)rng_u64(&r) % 600;
        if (i % 50 == 0) n = 1000 + (uint32_t)rng_u64(&r) % 3000;
        size_t w = 0;
        int mode = i % 3;
        while (w < n) {
            if (mode == 0) buf[w++] = (uint8_t)(uint32_t)rng_u64(&r); /* random bytes */
            else {                                           /* fragments: broken + valid UTF-8 */
                const char *f = frag[(uint32_t)rng_u64(&r) % (sizeof(frag) / sizeof(frag[0]))];
                size_t L = f[0] ? strlen(f) : 1;
                int reps = mode == 2 ? 1 + (int)((uint32_t)rng_u64(&r) % 40) : 1;
                for (int k = 0; k < reps && w + L <= n; k++, w += L) memcpy(buf + w, f, L);
                if (w + L > n) break;
            }
        }
        if (!roundtrips(&t, buf, w)) {
            if (bad < 5) printf("  string %d (%zu bytes) does not round-trip\n", i, w);
            bad++;
        }
    }
    printf("round trip: %d/%d random byte strings decode(encode(x)) == x\n", count - bad, count);
    tok_free(&t);
    return bad ? 1 : 0;
}

/* class of one code point under the GPT-2 regex's items, in PCRE2 with Unicode properties */
static int pcre_class(pcre2_code *const re[4], pcre2_match_data *md, uint32_t cp) {
    uint8_t u[4];
    size_t n;
    if (cp < 0x80) u[0] = (uint8_t)cp, n = 1;
    else if (cp < 0x800) u[0] = (uint8_t)(0xC0 | cp >> 6), u[1] = (uint8_t)(0x80 | (cp & 63)), n = 2;
    else if (cp < 0x10000)
        u[0] = (uint8_t)(0xE0 | cp >> 12), u[1] = (uint8_t)(0x80 | ((cp >> 6) & 63)),
        u[2] = (uint8_t)(0x80 | (cp & 63)), n = 3;
    else
        u[0] = (uint8_t)(0xF0 | cp >> 18), u[1] = (uint8_t)(0x80 | ((cp >> 12) & 63)),
        u[2] = (uint8_t)(0x80 | ((cp >> 6) & 63)), u[3] = (uint8_t)(0x80 | (cp & 63)), n = 4;
    int c = 0;
    for (int k = 0; k < 3 && !c; k++)
        if (pcre2_match(re[k], u, n, 0, 0, md, NULL) >= 0) c = k + 1;
    if (pcre2_match(re[3], u, n, 0, 0, md, NULL) >= 0) c += 16;
    return c;
}

static int classes(const char *path) {
    size_t n;
    uint8_t *js = slurp(path, &n);
    if (n != 0x110000) {
        fprintf(stderr, "%s: expected 0x110000 bytes\n", path);
        return 2;
    }
    const char *pat[4] = {"^\\p{L}$", "^\\p{N}$", "^\\s$", "^\\p{Cn}$"};
    pcre2_code *re[4];
    for (int k = 0; k < 4; k++) {
        int e;
        PCRE2_SIZE at;
        re[k] = pcre2_compile((PCRE2_SPTR)pat[k], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &e,
                              &at, NULL);
        pcre2_jit_compile(re[k], PCRE2_JIT_COMPLETE);
    }
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    long differ = 0, newer_js = 0, newer_pcre = 0, other = 0, scalars = 0, space = 0;
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (js[cp] == 255) continue;
        scalars++;
        int pc = pcre_class(re, md, cp);
        if ((pc & 15) == (js[cp] & 15)) continue;
        differ++;
        if (pc & 16) newer_js++; /* unassigned in PCRE2's tables: new in JavaScript's Unicode */
        else if (js[cp] & 16) newer_pcre++;
        else if (cp == 0x85 || cp == 0x180E || cp == 0xFEFF) {
            printf("  U+%04X: \\s in %s only\n", cp, (pc & 15) == 3 ? "PCRE2" : "JavaScript");
            space++;
        } else {
            if (other < 10) printf("  U+%04X: pcre2 class %d, javascript %d\n", cp, pc & 15, js[cp] & 15);
            other++;
        }
    }
    printf("regex classes: %ld of %ld code points differ between PCRE2 %d.%d and JavaScript: %ld "
           "unassigned in PCRE2's Unicode tables, %ld in JavaScript's, %ld in the meaning of \\s, "
           "%ld other\n", differ, scalars, PCRE2_MAJOR, PCRE2_MINOR, newer_js, newer_pcre, space,
           other);
    for (int k = 0; k < 4; k++) pcre2_code_free(re[k]);
    pcre2_match_data_free(md);
    free(js);
    return other ? 1 : 0;
}

/* REF.bin: int32 B, T, V, then B*T int32 tokens, then B*T*V float32 logits */
static int logits(const char *run, const char *ref) {
    size_t n;
    uint8_t *b = slurp(ref, &n);
    int32_t hdr[3];
    memcpy(hdr, b, 12);
    int B = hdr[0], T = hdr[1], V = hdr[2];
    const int32_t *tok = (const int32_t *)(b + 12);
    const float *want = (const float *)(b + 12 + 4 * (size_t)B * T);
    if (n != 12 + 4 * (size_t)B * T + 4 * (size_t)B * T * V) {
        fprintf(stderr, "%s: bad size\n", ref);
        return 2;
    }
    gpt_model m;
    char err[1024];
    int step;
    if (model_io_load(&m, run, &step, err, sizeof(err)) != 0) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (m.cfg.vocab_size != V) {
        printf("logits: vocab %d, reference %d\n", m.cfg.vocab_size, V);
        return 1;
    }
    gpt_alloc_training(&m, B, T);
    int *inp = malloc(sizeof(int) * (size_t)B * T);
    for (int i = 0; i < B * T; i++) inp[i] = tok[i];
    gpt_forward(&m, inp, NULL, B, T, 0.0f);
    double max_rel = 0, max_abs = 0, ref_max = 0;
    for (size_t i = 0; i < (size_t)B * T * V; i++) {
        double d = fabs((double)m.logits[i] - want[i]);
        if (d > max_abs) max_abs = d;
        if (fabs(want[i]) > ref_max) ref_max = fabs(want[i]);
    }
    /* relative to the logits' scale: elementwise relative error is meaningless at logits near 0 */
    max_rel = max_abs / (ref_max > 0 ? ref_max : 1);
    printf("logits: %d x %d x %d, step %d, max |ours - pytorch| = %.3g, relative to max |logit| "
           "%.3g: %.3g (limit 1e-4)\n", B, T, V, step, max_abs, ref_max, max_rel);
    free(inp);
    free(b);
    gpt_free(&m);
    return max_rel <= 1e-4 ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc >= 4 && !strcmp(argv[1], "tok-parity")) return tok_parity(argv[2], argv[3]);
    if (argc >= 4 && !strcmp(argv[1], "roundtrip")) return roundtrip(argv[2], atoi(argv[3]));
    if (argc >= 3 && !strcmp(argv[1], "classes")) return classes(argv[2]);
    if (argc >= 5 && !strcmp(argv[1], "same-ids")) return same_ids(argv[2], argv[3], argv[4]);
    if (argc >= 4 && !strcmp(argv[1], "logits")) return logits(argv[2], argv[3]);
    fprintf(stderr, "usage: interop_driver tok-parity|roundtrip|classes|same-ids|logits ...\n");
    return 2;
}
