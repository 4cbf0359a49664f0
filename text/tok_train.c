/*
 * text/tok_train.c — training byte-level BPE: tok_train_bpe and tok_train_bpe_atomic (see
 * text/tokenizer.h).
 *
 * Training works on unique chunks: the text is cut by tok_next_chunk(), identical chunks are
 * counted once in a hash map (Shakespeare's 1.1 MB become ~30k unique chunks), and each merge
 * step only rewrites the chunks that contain the chosen pair, updating a pair -> count hash map
 * incrementally (subtract the chunk's pairs, merge, add them back, times the chunk's count).
 * Choosing the best pair scans that map; that is O(distinct pairs) per merge, cheap next to the
 * text size for vocabularies of a few thousand. Out of tokenizer.c, which encodes, decodes and
 * stores what this file learns (tok_build_tables turns the merges into its tables).
 */
#include "text/tokenizer_impl.h" /* (includes text/tokenizer.h) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/hash.h"
#include "core/rng.h" /* rng_mix64 */
#include "core/timer.h"

/* pair -> count map used during training; entries are never deleted (count may reach 0). */
typedef struct {
    uint64_t *keys;
    int64_t *vals;
    size_t cap, used;
} pair_map;

static void pm_init(pair_map *m, size_t expected) {
    m->cap = tok_pow2_at_least(2 * expected);
    m->used = 0;
    m->keys = mallocCheck(m->cap * sizeof(uint64_t));
    memset(m->keys, 0xff, m->cap * sizeof(uint64_t));
    m->vals = callocCheck(m->cap, sizeof(int64_t));
}

static size_t pm_slot(const pair_map *m, uint64_t key) {
    size_t i = rng_mix64(key) & (m->cap - 1);
    while (m->keys[i] != TOK_EMPTY_KEY && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    return i;
}

static void pm_add(pair_map *m, uint64_t key, int64_t delta) {
    if ((m->used + 1) * 2 > m->cap) {
        pair_map big;
        pm_init(&big, m->cap);
        for (size_t i = 0; i < m->cap; i++) {
            if (m->keys[i] == TOK_EMPTY_KEY || m->vals[i] <= 0)
                continue; /* drop dead pairs */
            size_t j = pm_slot(&big, m->keys[i]);
            big.keys[j] = m->keys[i];
            big.vals[j] = m->vals[i];
            big.used++;
        }
        free(m->keys);
        free(m->vals);
        *m = big;
    }
    size_t i = pm_slot(m, key);
    if (m->keys[i] == TOK_EMPTY_KEY) {
        m->keys[i] = key;
        m->vals[i] = 0;
        m->used++;
    }
    m->vals[i] += delta;
}

static void pm_free(pair_map *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}

/* unique chunk table for training: chunk bytes live in the caller's text (offset, len) */
typedef struct {
    uint64_t hash;
    size_t off;
    uint32_t len;
    int64_t count; /* 0 = empty slot */
} chunk_ent;


/* Count unique chunks of text; returns the table (cap entries, *nunique used). */
static chunk_ent *count_chunks(const uint8_t *text, size_t n, size_t *cap_out, size_t *nunique) {
    size_t cap = 1 << 16, used = 0;
    chunk_ent *tab = callocCheck(cap, sizeof(chunk_ent));
    for (size_t pos = 0; pos < n;) {
        size_t L = tok_next_chunk(text + pos, n - pos);
        uint64_t h = hash_fnv1a64(text + pos, L);
        size_t i = h & (cap - 1);
        while (tab[i].count != 0 && !(tab[i].hash == h && tab[i].len == L &&
                                      memcmp(text + tab[i].off, text + pos, L) == 0))
            i = (i + 1) & (cap - 1);
        if (tab[i].count == 0) {
            tab[i] = (chunk_ent){h, pos, (uint32_t)L, 0};
            used++;
        }
        tab[i].count++;
        pos += L;
        if (used * 2 > cap) { /* grow */
            size_t ncap = cap * 2;
            chunk_ent *nt = callocCheck(ncap, sizeof(chunk_ent));
            for (size_t k = 0; k < cap; k++) {
                if (tab[k].count == 0)
                    continue;
                size_t j = tab[k].hash & (ncap - 1);
                while (nt[j].count != 0)
                    j = (j + 1) & (ncap - 1);
                nt[j] = tab[k];
            }
            free(tab);
            tab = nt;
            cap = ncap;
        }
    }
    *cap_out = cap;
    *nunique = used;
    return tab;
}

/* add (sign=+1) or remove (sign=-1) all adjacent pairs of a word, weighted by its count */
static void word_pairs(pair_map *pm, const uint32_t *w, uint32_t L, int64_t weight) {
    for (uint32_t i = 0; i + 1 < L; i++)
        pm_add(pm, tok_pair_key(w[i], w[i + 1]), weight);
}

int tok_train_bpe(tok_tokenizer *t, const uint8_t *text, size_t n, int vocab_size, int verbose) {
    return tok_train_bpe_atomic(t, text, n, vocab_size, NULL, 0, verbose);
}

/* The merges that build each atomic string left to right, sharing common prefixes: pairs
 * (forced[2f], forced[2f+1]) become ids 256 + f. Returns the count, or -1 if a string is empty
 * or longer than 64 bytes, or there are more than 4096 merges. */
static int forced_merges(const char *const *atomic, int n_atomic, uint32_t *forced) {
    int nf = 0;
    for (int a = 0; a < n_atomic; a++) {
        size_t L = strlen(atomic[a]);
        if (L == 0 || L > 64)
            return -1;
        uint32_t cur = (uint8_t)atomic[a][0];
        for (size_t j = 1; j < L; j++) {
            uint32_t nxt = (uint8_t)atomic[a][j];
            int f = 0;
            while (f < nf && !(forced[2 * f] == cur && forced[2 * f + 1] == nxt))
                f++;
            if (f == nf) {
                if (nf == 4096)
                    return -1;
                forced[2 * nf] = cur;
                forced[2 * nf + 1] = nxt;
                nf++;
            }
            cur = 256u + (uint32_t)f;
        }
    }
    return nf;
}

/* The words BPE trains on: the symbol sequences of the unique chunks (one per pre-token, with
 * its count), all in one pool; word w is pool[start[w] .. start[w] + len[w]). */
typedef struct {
    size_t *start;
    uint32_t *len;
    int64_t *count;
    uint32_t *pool;
    size_t total; /* symbols in the pool */
} bpe_words;

/* The words of the nw used entries of the chunk table tab[0..cap) over text, in table order. */
static void words_build(bpe_words *wd, const chunk_ent *tab, size_t cap, size_t nw,
                        const uint8_t *text) {
    size_t *wstart = mallocCheck(nw * sizeof(size_t));
    uint32_t *wlen = mallocCheck(nw * sizeof(uint32_t));
    int64_t *wcount = mallocCheck(nw * sizeof(int64_t));
    size_t total = 0, k = 0;
    for (size_t i = 0; i < cap; i++) {
        if (tab[i].count == 0)
            continue;
        wstart[k] = total;
        wlen[k] = tab[i].len;
        wcount[k] = tab[i].count;
        total += tab[i].len;
        k++;
    }
    uint32_t *pool = mallocCheck(total * sizeof(uint32_t));
    k = 0;
    for (size_t i = 0; i < cap; i++) {
        if (tab[i].count == 0)
            continue;
        for (uint32_t j = 0; j < tab[i].len; j++)
            pool[wstart[k] + j] = text[tab[i].off + j];
        k++;
    }
    wd->start = wstart;
    wd->len = wlen;
    wd->count = wcount;
    wd->pool = pool;
    wd->total = total;
}

static void words_free(bpe_words *wd) {
    free(wd->pool);
    free(wd->start);
    free(wd->len);
    free(wd->count);
}

/* The most frequent pair of pm (ties: the smallest key, so training is deterministic) and its
 * count in *best_count; TOK_EMPTY_KEY with count 0 when pm is empty. */
static uint64_t best_pair(const pair_map *pm, int64_t *best_count) {
    uint64_t best = TOK_EMPTY_KEY;
    for (size_t i = 0; i < pm->cap; i++) {
        if (pm->keys[i] == TOK_EMPTY_KEY)
            continue;
        int64_t c = pm->vals[i];
        if (c > *best_count || (c == *best_count && c > 0 && pm->keys[i] < best)) {
            best = pm->keys[i];
            *best_count = c;
        }
    }
    return best;
}

/* Merge pair (a, b) into symbol id in every active word (active[0..*nactive): words of >= 2
 * symbols), keeping pm's pair counts exact: a changed word's pairs are removed before and added
 * after. A word left with one symbol leaves the active set. */
static void merge_everywhere(pair_map *pm, bpe_words *wd, size_t *active, size_t *nactive,
                             uint32_t a, uint32_t b, uint32_t id) {
    for (size_t q = 0; q < *nactive;) {
        size_t w = active[q];
        uint32_t *s = wd->pool + wd->start[w], L = wd->len[w], i;
        for (i = 0; i + 1 < L && !(s[i] == a && s[i + 1] == b); i++) {
        }
        if (i + 1 >= L) {
            q++;
            continue;
        }
        word_pairs(pm, s, L, -wd->count[w]);
        uint32_t j = 0;
        for (i = 0; i < L;) {
            if (i + 1 < L && s[i] == a && s[i + 1] == b) {
                s[j++] = id;
                i += 2;
            } else {
                s[j++] = s[i++];
            }
        }
        wd->len[w] = j;
        word_pairs(pm, s, j, wd->count[w]);
        if (j < 2)
            active[q] = active[--*nactive]; /* fully merged: never scanned again */
        else
            q++;
    }
}

int tok_train_bpe_atomic(tok_tokenizer *t, const uint8_t *text, size_t n, int vocab_size,
                         const char *const *atomic, int n_atomic, int verbose) {
    memset(t, 0, sizeof(*t));
    if (vocab_size < 257 || vocab_size > TOK_MAX_VOCAB)
        return -1;
    uint32_t *forced = mallocCheck(2 * 4096 * sizeof(uint32_t));
    int nforced = forced_merges(atomic, n_atomic, forced);
    if (nforced < 0 || 256 + nforced > vocab_size) {
        free(forced);
        return -1;
    }
    double t0 = timer_now();

    size_t cap, nw;
    chunk_ent *tab = count_chunks(text, n, &cap, &nw);
    bpe_words wd;
    words_build(&wd, tab, cap, nw, text);
    free(tab);

    pair_map pm;
    pm_init(&pm, wd.total);
    size_t *active = mallocCheck(nw * sizeof(size_t)); /* words with >= 2 symbols */
    size_t nactive = 0;
    for (size_t w = 0; w < nw; w++) {
        if (wd.len[w] < 2)
            continue;
        active[nactive++] = w;
        word_pairs(&pm, wd.pool + wd.start[w], wd.len[w], wd.count[w]);
    }
    if (verbose)
        fprintf(stderr, "tokenizer: %zu bytes, %zu unique chunks; learning %d merges%s\n", n, nw,
                vocab_size - 256, nforced ? " (the first ones build the atomic strings)" : "");

    int want = vocab_size - 256;
    t->merges = mallocCheck((size_t)want * 2 * sizeof(uint32_t));
    int every = want / 10 > 0 ? want / 10 : 1;
    int m;
    for (m = 0; m < want; m++) {
        uint64_t best = TOK_EMPTY_KEY;
        int64_t best_count = 0;
        if (m < nforced) /* an atomic string's merges come first, whatever their counts */
            best = tok_pair_key(forced[2 * m], forced[2 * m + 1]), best_count = INT64_MAX;
        else
            best = best_pair(&pm, &best_count);
        if (best_count < 2)
            break;
        uint32_t a = (uint32_t)(best >> 32), b = (uint32_t)best, id = 256u + (uint32_t)m;
        t->merges[2 * m] = a;
        t->merges[2 * m + 1] = b;
        merge_everywhere(&pm, &wd, active, &nactive, a, b, id);
        if (verbose && ((m + 1) % every == 0 || m + 1 == want))
            fprintf(stderr, "tokenizer: merge %d/%d (vocab %d): (%u, %u) x %lld, %.1f s\n", m + 1,
                    want, 257 + m, a, b, m < nforced ? -1ll : (long long)best_count,
                    timer_now() - t0);
    }
    if (m < want)
        mt_warn("tokenizer: no pair occurs twice after %d merges; vocab is %d, not %d", m, 256 + m,
                vocab_size);
    free(forced);
    free(active);
    pm_free(&pm);
    words_free(&wd);

    t->kind = TOK_KIND_BPE;
    t->n_merges = m;
    t->vocab_size = 256 + m;
    char err[128];
    mtCheck(tok_build_tables(t, err, sizeof(err)) == 0, "trained merges are valid by construction");
    return 0;
}
