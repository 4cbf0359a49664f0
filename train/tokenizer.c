/*
 * train/tokenizer.c — byte-level tokenizer, byte-level BPE training/encoding, tokenizer.bin I/O.
 *
 * Training works on unique chunks: the text is cut by tok_next_chunk(), identical chunks are
 * counted once in a hash map (Shakespeare's 1.1 MB become ~30k unique chunks), and each merge
 * step only rewrites the chunks that contain the chosen pair, updating a pair -> count hash map
 * incrementally (subtract the chunk's pairs, merge, add them back, times the chunk's count).
 * Choosing the best pair scans that map; that is O(distinct pairs) per merge, cheap next to the
 * text size for vocabularies of a few thousand.
 *
 * Encoding keeps each chunk as a linked list of tokens plus a min-heap of (rank, position)
 * candidates with lazy invalidation, so a chunk of L bytes costs O(L log L) rather than the
 * O(L^2) of the textbook "find the lowest-ranked pair, merge, rescan" loop, with the same result
 * (a merge only creates pairs of higher rank than itself, so rank order = GPT-2's order).
 * Chunks are at most TOK_MAX_CHUNK bytes, so encoding needs only stack scratch.
 */
#include "train/tokenizer_impl.h" /* (includes train/tokenizer.h) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/fs.h"
#include "core/rng.h" /* rng_mix64 */
#include "core/timer.h"

#define EMPTY_KEY UINT64_MAX
#define NO_RANK UINT32_MAX
#define TOK_VERSION 1u

/* ---------------------------------------------------------------------------------------------
 * hashing helpers */

static inline uint64_t pair_key(uint32_t a, uint32_t b) { return ((uint64_t)a << 32) | b; }

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

/* pair -> count map used during training; entries are never deleted (count may reach 0). */
typedef struct {
    uint64_t *keys;
    int64_t *vals;
    size_t cap, used;
} pair_map;

static void pm_init(pair_map *m, size_t expected) {
    m->cap = pow2_at_least(2 * expected);
    m->used = 0;
    m->keys = mallocCheck(m->cap * sizeof(uint64_t));
    memset(m->keys, 0xff, m->cap * sizeof(uint64_t));
    m->vals = callocCheck(m->cap, sizeof(int64_t));
}

static size_t pm_slot(const pair_map *m, uint64_t key) {
    size_t i = rng_mix64(key) & (m->cap - 1);
    while (m->keys[i] != EMPTY_KEY && m->keys[i] != key)
        i = (i + 1) & (m->cap - 1);
    return i;
}

static void pm_add(pair_map *m, uint64_t key, int64_t delta) {
    if ((m->used + 1) * 2 > m->cap) {
        pair_map big;
        pm_init(&big, m->cap);
        for (size_t i = 0; i < m->cap; i++) {
            if (m->keys[i] == EMPTY_KEY || m->vals[i] <= 0)
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
    if (m->keys[i] == EMPTY_KEY) {
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

/* ---------------------------------------------------------------------------------------------
 * chunking */

enum { CL_SPACE = 0, CL_LETTER, CL_DIGIT, CL_OTHER };

static inline int byte_class(uint8_t c) {
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\v' || c == '\f')
        return CL_SPACE;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80)
        return CL_LETTER;
    if (c >= '0' && c <= '9')
        return CL_DIGIT;
    return CL_OTHER;
}

/* A placeholder such as the PII scrubber's (safety/pii.h: "<EMAIL>", "<CARD:1a2b3c4d>"), or any
 * tag of that shape: '<', an upper-case letter, 1..15 more of [A-Z0-9_], optionally ':' and 8
 * lower-case hex digits, '>'. Returns its length (<= 27), or 0. Such a tag is one chunk of its
 * own, so merges never join it to its neighbours and a trained tokenizer can hold it whole. */
static size_t placeholder_len(const uint8_t *p, size_t n) {
    if (n < 4 || p[0] != '<' || !(p[1] >= 'A' && p[1] <= 'Z'))
        return 0;
    size_t i = 2;
    while (i < n && i < 17 && ((p[i] >= 'A' && p[i] <= 'Z') || (p[i] >= '0' && p[i] <= '9') ||
                               p[i] == '_'))
        i++;
    if (i < 3)
        return 0;
    if (i < n && p[i] == ':') {
        size_t h = i + 1;
        while (h < n && h < i + 9 && ((p[h] >= '0' && p[h] <= '9') || (p[h] >= 'a' && p[h] <= 'f')))
            h++;
        if (h != i + 9)
            return 0;
        i = h;
    }
    return i < n && p[i] == '>' ? i + 1 : 0;
}

/* end of a run of class c from i (a run of "other" bytes stops before a placeholder) */
static size_t class_run(const uint8_t *p, size_t i, size_t cap, size_t n, int c) {
    for (; i < cap && byte_class(p[i]) == c; i++)
        if (c == CL_OTHER && p[i] == '<' && placeholder_len(p + i, n - i))
            break;
    return i;
}

size_t tok_next_chunk(const uint8_t *p, size_t n) {
    if (n == 0)
        return 0;
    size_t cap = n < TOK_MAX_CHUNK ? n : TOK_MAX_CHUNK;
    int c0 = byte_class(p[0]);
    size_t i = placeholder_len(p, n);
    if (i > 0)
        return i;
    if (p[0] == ' ' && cap > 1 && byte_class(p[1]) != CL_SPACE) {
        /* a single space attaches to the word / number / punctuation run after it (not to a
         * placeholder: that stays alone) */
        if (placeholder_len(p + 1, n - 1))
            return 1;
        return class_run(p, 2, cap, n, byte_class(p[1]));
    }
    if (c0 == CL_SPACE) {
        /* a whitespace run; if it ends in a space before a non-space, leave that space for the
         * next chunk (GPT-2's \s+(?!\S)) */
        size_t lim = n < cap + 1 ? n : cap + 1;
        for (i = 1; i < lim && byte_class(p[i]) == CL_SPACE; i++) {
        }
        if (i > cap)
            return cap;
        if (i < n && i >= 2 && p[i - 1] == ' ')
            i--;
        return i;
    }
    return class_run(p, 1, cap, n, c0);
}

/* ---------------------------------------------------------------------------------------------
 * token tables (bytes of each id) and the rank map, built from the merge list */

/* Fill tok_off/tok_bytes and the rank map from t->merges. Validates that every merge refers to
 * earlier ids, that no pair repeats and that no token exceeds TOK_MAX_CHUNK bytes.
 * Returns 0, or -1 with a message (no file name) in err. */
static int build_tables(tok_tokenizer *t, char *err, size_t errlen) {
    int V = t->vocab_size;
    t->tok_off = mallocCheck((size_t)(V + 1) * sizeof(uint32_t));
    uint32_t *len = mallocCheck((size_t)V * sizeof(uint32_t));
    for (int i = 0; i < 256; i++)
        len[i] = 1;
    for (int r = 0; r < t->n_merges; r++) {
        uint32_t a = t->merges[2 * r], b = t->merges[2 * r + 1];
        if (a >= (uint32_t)(256 + r) || b >= (uint32_t)(256 + r)) {
            snprintf(err, errlen, "merge %d (%u, %u) refers to an id not defined before it", r, a,
                     b);
            free(len);
            return -1;
        }
        len[256 + r] = len[a] + len[b];
        if (len[256 + r] > TOK_MAX_CHUNK) {
            snprintf(err, errlen, "merge %d makes a token of %u bytes (limit %d)", r, len[256 + r],
                     TOK_MAX_CHUNK);
            free(len);
            return -1;
        }
    }
    size_t total = 0;
    for (int i = 0; i < V; i++) {
        t->tok_off[i] = (uint32_t)total;
        total += len[i];
    }
    t->tok_off[V] = (uint32_t)total;
    t->tok_bytes = mallocCheck(total);
    for (int i = 0; i < 256; i++)
        t->tok_bytes[i] = (uint8_t)i;
    for (int r = 0; r < t->n_merges; r++) {
        uint32_t a = t->merges[2 * r], b = t->merges[2 * r + 1];
        uint8_t *dst = t->tok_bytes + t->tok_off[256 + r];
        memcpy(dst, t->tok_bytes + t->tok_off[a], len[a]);
        memcpy(dst + len[a], t->tok_bytes + t->tok_off[b], len[b]);
    }
    free(len);

    if (t->n_merges == 0)
        return 0;
    t->rank_cap = pow2_at_least(2 * (size_t)t->n_merges);
    t->rank_key = mallocCheck(t->rank_cap * sizeof(uint64_t));
    memset(t->rank_key, 0xff, t->rank_cap * sizeof(uint64_t));
    t->rank_val = mallocCheck(t->rank_cap * sizeof(uint32_t));
    for (int r = 0; r < t->n_merges; r++) {
        uint64_t key = pair_key(t->merges[2 * r], t->merges[2 * r + 1]);
        size_t i = rng_mix64(key) & (t->rank_cap - 1);
        while (t->rank_key[i] != EMPTY_KEY && t->rank_key[i] != key)
            i = (i + 1) & (t->rank_cap - 1);
        if (t->rank_key[i] == key) {
            snprintf(err, errlen, "merge %d repeats the pair of merge %u", r, t->rank_val[i]);
            return -1;
        }
        t->rank_key[i] = key;
        t->rank_val[i] = (uint32_t)r;
    }
    return 0;
}

static inline uint32_t rank_of(const tok_tokenizer *t, uint32_t a, uint32_t b) {
    uint64_t key = pair_key(a, b);
    size_t i = rng_mix64(key) & (t->rank_cap - 1);
    while (t->rank_key[i] != EMPTY_KEY) {
        if (t->rank_key[i] == key)
            return t->rank_val[i];
        i = (i + 1) & (t->rank_cap - 1);
    }
    return NO_RANK;
}

/* ---------------------------------------------------------------------------------------------
 * construction */

int tok_init_byte(tok_tokenizer *t) {
    char err[64];
    memset(t, 0, sizeof(*t));
    t->kind = TOK_KIND_BYTE;
    t->vocab_size = 256;
    mtCheck(build_tables(t, err, sizeof(err)) == 0, "byte tokenizer tables cannot fail");
    return 0;
}

/* unique chunk table for training: chunk bytes live in the caller's text (offset, len) */
typedef struct {
    uint64_t hash;
    size_t off;
    uint32_t len;
    int64_t count; /* 0 = empty slot */
} chunk_ent;

static uint64_t fnv1a64(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* Count unique chunks of text; returns the table (cap entries, *nunique used). */
static chunk_ent *count_chunks(const uint8_t *text, size_t n, size_t *cap_out, size_t *nunique) {
    size_t cap = 1 << 16, used = 0;
    chunk_ent *tab = callocCheck(cap, sizeof(chunk_ent));
    for (size_t pos = 0; pos < n;) {
        size_t L = tok_next_chunk(text + pos, n - pos);
        uint64_t h = fnv1a64(text + pos, L);
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
        pm_add(pm, pair_key(w[i], w[i + 1]), weight);
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
    /* words: symbol sequences of the unique chunks, in one pool */
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
    free(tab);

    pair_map pm;
    pm_init(&pm, total);
    size_t *active = mallocCheck(nw * sizeof(size_t)); /* words with >= 2 symbols */
    size_t nactive = 0;
    for (size_t w = 0; w < nw; w++) {
        if (wlen[w] < 2)
            continue;
        active[nactive++] = w;
        word_pairs(&pm, pool + wstart[w], wlen[w], wcount[w]);
    }
    if (verbose)
        fprintf(stderr, "tokenizer: %zu bytes, %zu unique chunks; learning %d merges%s\n", n, nw,
                vocab_size - 256, nforced ? " (the first ones build the atomic strings)" : "");

    int want = vocab_size - 256;
    t->merges = mallocCheck((size_t)want * 2 * sizeof(uint32_t));
    int every = want / 10 > 0 ? want / 10 : 1;
    int m;
    for (m = 0; m < want; m++) {
        uint64_t best = EMPTY_KEY;
        int64_t best_count = 0;
        if (m < nforced) /* an atomic string's merges come first, whatever their counts */
            best = pair_key(forced[2 * m], forced[2 * m + 1]), best_count = INT64_MAX;
        for (size_t i = 0; i < pm.cap && m >= nforced; i++) {
            if (pm.keys[i] == EMPTY_KEY)
                continue;
            int64_t c = pm.vals[i];
            if (c > best_count || (c == best_count && c > 0 && pm.keys[i] < best)) {
                best = pm.keys[i];
                best_count = c;
            }
        }
        if (best_count < 2)
            break;
        uint32_t a = (uint32_t)(best >> 32), b = (uint32_t)best, id = 256u + (uint32_t)m;
        t->merges[2 * m] = a;
        t->merges[2 * m + 1] = b;
        for (size_t q = 0; q < nactive;) {
            size_t w = active[q];
            uint32_t *s = pool + wstart[w], L = wlen[w], i;
            for (i = 0; i + 1 < L && !(s[i] == a && s[i + 1] == b); i++) {
            }
            if (i + 1 >= L) {
                q++;
                continue;
            }
            word_pairs(&pm, s, L, -wcount[w]);
            uint32_t j = 0;
            for (i = 0; i < L;) {
                if (i + 1 < L && s[i] == a && s[i + 1] == b) {
                    s[j++] = id;
                    i += 2;
                } else {
                    s[j++] = s[i++];
                }
            }
            wlen[w] = j;
            word_pairs(&pm, s, j, wcount[w]);
            if (j < 2)
                active[q] = active[--nactive]; /* fully merged: never scanned again */
            else
                q++;
        }
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
    free(pool);
    free(wstart);
    free(wlen);
    free(wcount);

    t->kind = TOK_KIND_BPE;
    t->n_merges = m;
    t->vocab_size = 256 + m;
    char err[128];
    mtCheck(build_tables(t, err, sizeof(err)) == 0, "trained merges are valid by construction");
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * encode / decode */

/* Encode one chunk p[0..L), 1 <= L <= TOK_MAX_CHUNK, into out; returns the token count. */
static size_t encode_chunk(const tok_tokenizer *t, const uint8_t *p, size_t L, uint32_t *out) {
    if (L == 1 || t->n_merges == 0) {
        for (size_t i = 0; i < L; i++)
            out[i] = p[i];
        return L;
    }
    uint32_t tok[TOK_MAX_CHUNK];
    int16_t prev[TOK_MAX_CHUNK], next[TOK_MAX_CHUNK]; /* next == L: end of list */
    uint64_t heap[3 * TOK_MAX_CHUNK];                 /* (rank << 16 | pos), min-heap */
    size_t nh = 0;
    const int n = (int)L;
    for (int i = 0; i < n; i++) {
        tok[i] = p[i];
        prev[i] = (int16_t)(i - 1);
        next[i] = (int16_t)(i + 1);
    }
    for (int i = 0; i + 1 < n; i++) {
        uint32_t r = rank_of(t, tok[i], tok[i + 1]);
        if (r != NO_RANK)
            tok_heap_push(heap, &nh, ((uint64_t)r << 16) | (uint64_t)i);
    }
    while (nh > 0) {
        uint64_t top = tok_heap_pop(heap, &nh);
        uint32_t r = (uint32_t)(top >> 16);
        int pos = (int)(top & 0xffff);
        if (tok[pos] == NO_RANK)
            continue; /* node was merged away */
        int nx = next[pos];
        if (nx >= n || tok[pos] != t->merges[2 * r] || tok[nx] != t->merges[2 * r + 1])
            continue;
        tok[pos] = 256u + r;
        tok[nx] = NO_RANK;
        next[pos] = next[nx];
        if (next[nx] < n)
            prev[next[nx]] = (int16_t)pos;
        if (prev[pos] >= 0) {
            uint32_t r2 = rank_of(t, tok[prev[pos]], tok[pos]);
            if (r2 != NO_RANK)
                tok_heap_push(heap, &nh, ((uint64_t)r2 << 16) | (uint64_t)prev[pos]);
        }
        if (next[pos] < n) {
            uint32_t r2 = rank_of(t, tok[pos], tok[next[pos]]);
            if (r2 != NO_RANK)
                tok_heap_push(heap, &nh, ((uint64_t)r2 << 16) | (uint64_t)pos);
        }
    }
    size_t cnt = 0;
    for (int i = 0; i < n; i = next[i])
        out[cnt++] = tok[i];
    return cnt;
}

size_t tok_encode(const tok_tokenizer *t, const uint8_t *bytes, size_t n, uint32_t *out) {
    if (t->kind == TOK_KIND_RANKED) return tok_ranked_encode(t, bytes, n, out);
    if (t->kind == TOK_KIND_DECODE) return 0;
    if (t->kind == TOK_KIND_BYTE || t->n_merges == 0) {
        for (size_t i = 0; i < n; i++)
            out[i] = bytes[i];
        return n;
    }
    size_t cnt = 0;
    for (size_t pos = 0; pos < n;) {
        size_t L = tok_next_chunk(bytes + pos, n - pos);
        cnt += encode_chunk(t, bytes + pos, L, out + cnt);
        pos += L;
    }
    return cnt;
}

/* End of the document starting at start: just past the next separator, or n (the separator
 * stays with the document before it, as llm.c keeps "\n\n"). */
static size_t doc_end(const uint8_t *text, size_t n, size_t start, const uint8_t *sep,
                      size_t seplen) {
    if (seplen == 0) return n;
    for (size_t i = start; i + seplen <= n; i++)
        if (memcmp(text + i, sep, seplen) == 0) return i + seplen;
    return n;
}

uint32_t *tok_encode_documents(const tok_tokenizer *t, const uint8_t *text, size_t n,
                               const uint8_t *sep, size_t seplen, size_t *count) {
    int eot = tok_eot(t);
    size_t ndocs = 1;
    for (size_t s = 0; eot >= 0 && s < n; ndocs++) s = doc_end(text, n, s, sep, seplen);
    uint32_t *out = mallocCheck((n + ndocs + 1) * sizeof(uint32_t));
    if (eot < 0) {
        *count = tok_encode(t, text, n, out);
        return out;
    }
    size_t w = 0, start = 0;
    do {
        size_t end = doc_end(text, n, start, sep, seplen);
        out[w++] = (uint32_t)eot;
        w += tok_encode(t, text + start, end - start, out + w);
        start = end;
    } while (start < n);
    *count = w;
    return out;
}

int tok_vocab_size(const tok_tokenizer *t) { return t->vocab_size; }

int tok_can_encode(const tok_tokenizer *t) { return t->kind != TOK_KIND_DECODE; }

int tok_eot(const tok_tokenizer *t) {
    return t->kind == TOK_KIND_RANKED || t->kind == TOK_KIND_DECODE ? t->eot : -1;
}

const char *tok_describe(const tok_tokenizer *t, char *buf, size_t len) {
    if (t->kind == TOK_KIND_BYTE) snprintf(buf, len, "byte");
    else if (t->kind == TOK_KIND_BPE) snprintf(buf, len, "bpe");
    else if (t->kind == TOK_KIND_RANKED) snprintf(buf, len, "GPT-2 byte-level BPE (%s)", t->source);
    else snprintf(buf, len, "decode only (%s)", t->source);
    return buf;
}

const uint8_t *tok_token_bytes(const tok_tokenizer *t, uint32_t id, size_t *len) {
    if (id >= (uint32_t)t->vocab_size) {
        *len = 0;
        return NULL;
    }
    *len = t->tok_off[id + 1] - t->tok_off[id];
    return t->tok_bytes + t->tok_off[id];
}

size_t tok_decode(const tok_tokenizer *t, const uint32_t *ids, size_t n, uint8_t *out, size_t cap) {
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const uint8_t *b = tok_token_bytes(t, ids[i], &len);
        for (size_t j = 0; j < len; j++, w++)
            if (w < cap)
                out[w] = b[j];
    }
    return w;
}

void tok_free(tok_tokenizer *t) {
    tok_ranked_free(t);
    free(t->merges);
    free(t->tok_off);
    free(t->tok_bytes);
    free(t->rank_key);
    free(t->rank_val);
    memset(t, 0, sizeof(*t));
}

/* ---------------------------------------------------------------------------------------------
 * file format (docs/tokenizer.md): 32-byte header of little-endian uint32, then the merges */

/* The bytes of tokenizer.bin: version 1 for byte/bpe, version 2 for ranked/decode. */
static uint8_t *serialize(const tok_tokenizer *t, size_t *n) {
    if (t->kind == TOK_KIND_RANKED || t->kind == TOK_KIND_DECODE) return tok_ranked_serialize(t, n);
    size_t nbytes = TOK_HEADER_BYTES + (size_t)t->n_merges * 8;
    uint8_t *buf = callocCheck(nbytes, 1);
    for (int r = 0; r < t->n_merges; r++) {
        tok_put_u32(buf + TOK_HEADER_BYTES + 8 * (size_t)r, t->merges[2 * r]);
        tok_put_u32(buf + TOK_HEADER_BYTES + 8 * (size_t)r + 4, t->merges[2 * r + 1]);
    }
    tok_put_u32(buf + 0, TOK_MAGIC);
    tok_put_u32(buf + 4, TOK_VERSION);
    tok_put_u32(buf + 8, (uint32_t)t->kind);
    tok_put_u32(buf + 12, (uint32_t)t->vocab_size);
    tok_put_u32(buf + 16, (uint32_t)t->n_merges);
    tok_put_u32(buf + 20, TOK_MAX_CHUNK);
    tok_put_u32(buf + 24, tok_fnv1a32(buf + TOK_HEADER_BYTES, nbytes - TOK_HEADER_BYTES));
    tok_put_u32(buf + 28, 0);
    *n = nbytes;
    return buf;
}

int tok_save(const tok_tokenizer *t, const char *path, char *err, size_t errlen) {
    size_t nbytes;
    uint8_t *buf = serialize(t, &nbytes);
    /* partial file + fsync + rename (core/fs.h): a crash never leaves a torn tokenizer */
    int rc = fs_write_atomic(path, buf, nbytes, err, errlen);
    free(buf);
    return rc;
}

int tok_load(tok_tokenizer *t, const char *path, char *err, size_t errlen) {
    memset(t, 0, sizeof(*t));
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) return tok_formats_load(t, path, NULL, 0, err, errlen);
    FILE *f = fopen(path, "rb");
    if (f == NULL || fstat(fileno(f), &st) != 0) {
        snprintf(err, errlen, "cannot open tokenizer file '%s': %s", path, strerror(errno));
        if (f)
            fclose(f);
        return -1;
    }
    const size_t max_bytes = (size_t)1 << 29; /* a GPT-2 tokenizer.json is 1.4 MB */
    if ((uint64_t)st.st_size > max_bytes) {
        snprintf(err, errlen, "tokenizer file '%s': too large (%lld bytes)", path,
                 (long long)st.st_size);
        fclose(f);
        return -1;
    }
    size_t nbytes = (size_t)st.st_size;
    uint8_t *buf = mallocCheck(nbytes + 1);
    size_t got = fread(buf, 1, nbytes, f);
    fclose(f);
    if (got == nbytes && (nbytes < 4 || tok_get_u32(buf) != TOK_MAGIC)) {
        /* not minitrain's own file: the other ecosystems' formats (train/tok_formats.c) */
        int rc = tok_formats_load(t, path, buf, nbytes, err, errlen);
        free(buf);
        return rc;
    }
    if (got == nbytes && nbytes >= 8 && tok_get_u32(buf + 4) == 2) {
        char msg[300];
        int rc = tok_ranked_parse_v2(t, buf, nbytes, msg, sizeof(msg));
        if (rc != 0) snprintf(err, errlen, "tokenizer file '%s': %s", path, msg);
        free(buf);
        return rc;
    }
    if (nbytes < TOK_HEADER_BYTES) {
        snprintf(err, errlen, "tokenizer file '%s': truncated (%zu bytes; header is %d)", path,
                 nbytes, TOK_HEADER_BYTES);
        free(buf);
        return -1;
    }
    int rc = -1;
    const char *what = NULL;
    char detail[160];
    detail[0] = '\0';
    uint32_t kind = tok_get_u32(buf + 8), V = tok_get_u32(buf + 12), nm = tok_get_u32(buf + 16);
    if (got != nbytes) {
        what = "short read";
    } else if (tok_get_u32(buf) != TOK_MAGIC) {
        what = "bad magic (not a minitrain tokenizer file)";
    } else if (tok_get_u32(buf + 4) != TOK_VERSION) {
        snprintf(detail, sizeof(detail), "unsupported version %u (this build reads 1 and 2)",
                 tok_get_u32(buf + 4));
    } else if (kind != TOK_KIND_BYTE && kind != TOK_KIND_BPE) {
        snprintf(detail, sizeof(detail), "unknown kind %u (0 = byte, 1 = bpe)", kind);
    } else if (nm > (uint32_t)TOK_MAX_VOCAB - 256 || V != 256 + nm ||
               (kind == TOK_KIND_BYTE && nm != 0)) {
        snprintf(detail, sizeof(detail), "vocab_size %u does not fit %u merges for kind %u", V, nm,
                 kind);
    } else if (tok_get_u32(buf + 20) != TOK_MAX_CHUNK) {
        snprintf(detail, sizeof(detail), "chunk limit %u differs from this build's %d",
                 tok_get_u32(buf + 20), TOK_MAX_CHUNK);
    } else if (nbytes != TOK_HEADER_BYTES + (size_t)8 * nm) {
        snprintf(detail, sizeof(detail), "%s: header says %u merges (%zu bytes) but file has %zu",
                 nbytes < TOK_HEADER_BYTES + (size_t)8 * nm ? "truncated" : "trailing bytes", nm,
                 TOK_HEADER_BYTES + (size_t)8 * nm, nbytes);
    } else if (tok_fnv1a32(buf + TOK_HEADER_BYTES, nbytes - TOK_HEADER_BYTES) != tok_get_u32(buf + 24)) {
        what = "checksum mismatch (file corrupted)";
    } else {
        t->kind = (int)kind;
        t->vocab_size = (int)V;
        t->n_merges = (int)nm;
        t->merges = mallocCheck((size_t)nm * 2 * sizeof(uint32_t) + 1);
        for (size_t i = 0; i < 2 * (size_t)nm; i++)
            t->merges[i] = tok_get_u32(buf + TOK_HEADER_BYTES + 4 * i);
        if (build_tables(t, detail, sizeof(detail)) == 0)
            rc = 0;
    }
    if (rc != 0) {
        snprintf(err, errlen, "tokenizer file '%s': %s", path, what ? what : detail);
        tok_free(t);
    }
    free(buf);
    return rc;
}
