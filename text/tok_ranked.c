/*
 * text/tok_ranked.c — GPT-2's byte-level BPE as tiktoken runs it: a table of ranked token byte
 * strings, the pre-tokenizer regex on libpcre2, and tiktoken's merge rule.
 *
 * Encoding (tiktoken's `byte_pair_merge`, also js-tiktoken's `bytePairMerge`):
 *   1. The text is cut into pieces by the regex (TOK_GPT2_PATTERN: contractions, letters,
 *      numbers, other symbols, each with an optional leading space, and whitespace runs).
 *      PCRE2_UTF | PCRE2_UCP give \p{L}, \p{N} and \s their Unicode meaning from pcre2's own
 *      tables; PCRE2_MATCH_INVALID_UTF lets invalid UTF-8 through unmatched, and each run of
 *      bytes between two matches becomes a piece of its own, so every byte string encodes.
 *   2. A piece that is itself a token is that token (tiktoken's shortcut, which changes the
 *      result only for vocabularies that are not BPE-closed).
 *   3. Otherwise the piece starts as single bytes, and repeatedly the adjacent pair whose
 *      concatenated bytes have the lowest rank is merged (the leftmost among equal ranks), until
 *      no adjacent pair is a token.
 * Step 3 here uses a min-heap of (rank, start) with lazy invalidation instead of rescanning the
 * piece after every merge: O(L log L) instead of O(L^2) for long whitespace runs, with the same
 * result (the heap always holds every current pair, so its minimum is tiktoken's choice).
 *
 * Lookups map a byte span to its id through an open-addressing table keyed by FNV-1a 64 of the
 * bytes; spans longer than the longest token are never looked up.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/check.h"
#include "text/tokenizer_impl.h"

#define NO_ID UINT32_MAX
#define STACK_PIECE 256 /* pieces up to this length encode with stack scratch only */

static uint64_t fnv1a64(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* ---- entries ------------------------------------------------------------------------------- */

void tok_entries_add(tok_entries *es, uint32_t id, uint32_t rank, const uint8_t *bytes,
                     size_t len, int special) {
    if (es->n == es->cap) {
        es->cap = es->cap ? 2 * es->cap : 1024;
        es->e = realloc(es->e, es->cap * sizeof(tok_entry));
        mtCheck(es->e != NULL, "out of memory reading a tokenizer");
    }
    if (es->pool_n + len > es->pool_cap) {
        while (es->pool_n + len > es->pool_cap) es->pool_cap = es->pool_cap ? 2 * es->pool_cap : 65536;
        es->pool = realloc(es->pool, es->pool_cap);
        mtCheck(es->pool != NULL, "out of memory reading a tokenizer");
    }
    memcpy(es->pool + es->pool_n, bytes, len);
    es->e[es->n++] = (tok_entry){id, rank, (uint32_t)es->pool_n, (uint32_t)len, (uint8_t)special};
    es->pool_n += len;
}

void tok_entries_free(tok_entries *es) {
    free(es->e);
    free(es->pool);
    memset(es, 0, sizeof(*es));
}

/* ---- tables ------------------------------------------------------------------------------- */

static inline size_t span_slot(const tok_tokenizer *t, const uint8_t *p, size_t len) {
    return (size_t)fnv1a64(p, len) & (t->span_cap - 1);
}

/* Id whose bytes are p[0..len), among ranked ids; NO_ID when none. */
static uint32_t span_lookup(const tok_tokenizer *t, const uint8_t *p, size_t len) {
    if (len > t->max_token_len || t->span_cap == 0) return NO_ID;
    for (size_t i = span_slot(t, p, len);; i = (i + 1) & (t->span_cap - 1)) {
        uint32_t id = t->span_ids[i];
        if (id == NO_ID) return NO_ID;
        if (t->tok_off[id + 1] - t->tok_off[id] == len &&
            memcmp(t->tok_bytes + t->tok_off[id], p, len) == 0)
            return id;
    }
}

static int cmp_entry_id(const void *a, const void *b) {
    uint32_t x = ((const tok_entry *)a)->id, y = ((const tok_entry *)b)->id;
    return x < y ? -1 : x > y;
}
static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Compile the pre-tokenizer. 0, or -1 with pcre2's message in err. */
static int compile_pattern(tok_tokenizer *t, const char *pattern, char *err, size_t errlen) {
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &at,
                                   NULL);
    if (re == NULL) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof(msg));
        snprintf(err, errlen, "pre-tokenizer regex does not compile at offset %zu: %s",
                 (size_t)at, (const char *)msg);
        return -1;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: pcre2_match falls back if it fails */
    t->re = re;
    t->pattern = strdup(pattern);
    mtCheck(t->pattern != NULL, "out of memory");
    return 0;
}

int tok_ranked_build(tok_tokenizer *t, int kind, tok_entries *es, const char *pattern,
                     const char *source, char *err, size_t errlen) {
    memset(t, 0, sizeof(*t));
    t->eot = -1;
    snprintf(t->source, sizeof(t->source), "%s", source);
    if (es->n == 0) {
        snprintf(err, errlen, "no tokens");
        return -1;
    }
    qsort(es->e, es->n, sizeof(tok_entry), cmp_entry_id);
    uint32_t maxid = es->e[es->n - 1].id;
    if (maxid >= TOK_MAX_VOCAB) {
        snprintf(err, errlen, "token id %u exceeds the limit %d", maxid, TOK_MAX_VOCAB - 1);
        return -1;
    }
    for (size_t i = 1; i < es->n; i++)
        if (es->e[i].id == es->e[i - 1].id) {
            snprintf(err, errlen, "id %u is given twice", es->e[i].id);
            return -1;
        }
    if (maxid + 1 != es->n) { /* sorted and unique: the first id whose slot is not its own */
        size_t k = 0;
        while (k < es->n && es->e[k].id == k) k++;
        snprintf(err, errlen, "token ids are not contiguous: id %zu is missing, and %zu tokens "
                 "span ids 0..%u (a vocabulary of %u rows, %u of them empty)", k, es->n, maxid,
                 maxid + 1, maxid + 1 - (uint32_t)es->n);
        return -1;
    }
    int V = (int)maxid + 1;
    t->kind = kind;
    t->vocab_size = V;
    t->tok_off = callocCheck((size_t)V + 1, sizeof(uint32_t));
    t->id_rank = mallocCheck((size_t)V * sizeof(uint32_t));
    t->id_special = callocCheck((size_t)V, 1);
    for (int i = 0; i < V; i++) t->id_rank[i] = TOK_NO_RANK;
    size_t total = 0, nranked = 0;
    for (size_t i = 0, k = 0; i < (size_t)V; i++) {
        t->tok_off[i] = (uint32_t)total;
        if (k < es->n && es->e[k].id == i) total += es->e[k++].len;
    }
    t->tok_off[V] = (uint32_t)total;
    t->tok_bytes = mallocCheck(total ? total : 1);
    for (size_t k = 0; k < es->n; k++) {
        const tok_entry *e = &es->e[k];
        memcpy(t->tok_bytes + t->tok_off[e->id], es->pool + e->off, e->len);
        t->id_special[e->id] = e->special;
        if (e->special && e->len == 13 && memcmp(es->pool + e->off, "<|endoftext|>", 13) == 0)
            t->eot = (int)e->id;
        if (kind == TOK_KIND_RANKED && e->rank != TOK_NO_RANK && !e->special) {
            if (e->len == 0) {
                snprintf(err, errlen, "token %u is empty", e->id);
                goto fail;
            }
            t->id_rank[e->id] = e->rank;
            if (e->len > t->max_token_len) t->max_token_len = e->len;
            nranked++;
        }
    }
    if (kind == TOK_KIND_RANKED) {
        /* ranks must be distinct (they order the merges) */
        uint32_t *r = mallocCheck((nranked ? nranked : 1) * sizeof(uint32_t));
        size_t m = 0;
        for (int i = 0; i < V; i++)
            if (t->id_rank[i] != TOK_NO_RANK) r[m++] = t->id_rank[i];
        qsort(r, m, sizeof(uint32_t), cmp_u32);
        for (size_t i = 1; i < m; i++)
            if (r[i] == r[i - 1]) {
                snprintf(err, errlen, "rank %u is given to two tokens", r[i]);
                free(r);
                goto fail;
            }
        free(r);
        size_t cap = 16;
        while (cap < 2 * nranked) cap <<= 1;
        t->span_cap = cap;
        t->span_ids = mallocCheck(cap * sizeof(uint32_t));
        memset(t->span_ids, 0xff, cap * sizeof(uint32_t));
        for (int id = 0; id < V; id++) {
            if (t->id_rank[id] == TOK_NO_RANK) continue;
            const uint8_t *p = t->tok_bytes + t->tok_off[id];
            size_t len = t->tok_off[id + 1] - t->tok_off[id];
            uint32_t prev = span_lookup(t, p, len);
            if (prev != NO_ID) {
                snprintf(err, errlen, "ids %u and %d have the same bytes", prev, id);
                goto fail;
            }
            size_t i = span_slot(t, p, len);
            while (t->span_ids[i] != NO_ID) i = (i + 1) & (cap - 1);
            t->span_ids[i] = (uint32_t)id;
        }
        for (int b = 0; b < 256; b++) {
            uint8_t c = (uint8_t)b;
            if (span_lookup(t, &c, 1) == NO_ID) {
                snprintf(err, errlen, "the single byte 0x%02x is not a token (not a byte-level "
                         "BPE vocabulary: some text could not be encoded)", b);
                goto fail;
            }
        }
        if (compile_pattern(t, pattern, err, errlen) != 0) goto fail;
    } else if (pattern && pattern[0]) {
        t->pattern = strdup(pattern);
        mtCheck(t->pattern != NULL, "out of memory");
    }
    return 0;
fail:
    tok_free(t);
    return -1;
}

void tok_ranked_free(tok_tokenizer *t) {
    free(t->id_rank);
    free(t->id_special);
    free(t->span_ids);
    free(t->pattern);
    if (t->re) pcre2_code_free((pcre2_code *)t->re);
    t->id_rank = t->span_ids = NULL;
    t->id_special = NULL;
    t->pattern = NULL;
    t->re = NULL;
}

/* ---- encoding ------------------------------------------------------------------------------ */

static inline uint32_t span_rank(const tok_tokenizer *t, const uint8_t *p, size_t len) {
    uint32_t id = span_lookup(t, p, len);
    return id == NO_ID ? TOK_NO_RANK : t->id_rank[id];
}

/* Push the pair starting at part s (if it has a right neighbour and is a token). */
static inline void push_pair(const tok_tokenizer *t, const uint8_t *p, size_t L,
                             const uint32_t *next, uint32_t s, uint64_t *heap, size_t *nh) {
    uint32_t nx = next[s];
    if (nx >= L) return;
    uint32_t r = span_rank(t, p + s, next[nx] - s);
    if (r != TOK_NO_RANK) tok_heap_push(heap, nh, ((uint64_t)r << 32) | s);
}

/* Encode one piece p[0..L), L >= 1: tiktoken's rule (file comment). Returns the token count. */
static size_t encode_piece(const tok_tokenizer *t, const uint8_t *p, size_t L, uint32_t *out) {
    uint32_t whole = span_lookup(t, p, L);
    if (whole != NO_ID) {
        out[0] = whole;
        return 1;
    }
    uint32_t next_s[STACK_PIECE + 1], prev_s[STACK_PIECE];
    uint64_t heap_s[3 * STACK_PIECE];
    uint32_t *next = next_s, *prev = prev_s;
    uint64_t *heap = heap_s;
    if (L > STACK_PIECE) {
        next = mallocCheck((L + 1) * sizeof(uint32_t));
        prev = mallocCheck(L * sizeof(uint32_t));
        heap = mallocCheck(3 * L * sizeof(uint64_t));
    }
    /* part s covers p[s .. next[s]); prev[s] = start of the part before (UINT32_MAX: none);
     * a merged-away part has next[s] = 0 */
    for (uint32_t i = 0; i < L; i++) {
        next[i] = i + 1;
        prev[i] = i ? i - 1 : UINT32_MAX;
    }
    size_t nh = 0;
    for (uint32_t i = 0; i + 1 < L; i++) push_pair(t, p, L, next, i, heap, &nh);
    while (nh > 0) {
        uint64_t top = tok_heap_pop(heap, &nh);
        uint32_t r = (uint32_t)(top >> 32), s = (uint32_t)top;
        uint32_t nx = next[s];
        if (nx == 0 || nx >= L) continue;                   /* merged away, or now the last */
        if (span_rank(t, p + s, next[nx] - s) != r) continue; /* stale: the pair changed */
        next[s] = next[nx]; /* merge parts s and nx */
        next[nx] = 0;
        if (next[s] < L) prev[next[s]] = s;
        push_pair(t, p, L, next, s, heap, &nh);
        if (prev[s] != UINT32_MAX) push_pair(t, p, L, next, prev[s], heap, &nh);
    }
    size_t cnt = 0;
    for (uint32_t s = 0; s < L; s = next[s]) {
        uint32_t id = span_lookup(t, p + s, next[s] - s);
        mtCheck(id != NO_ID, "every part is a single byte or a merged token");
        out[cnt++] = id;
    }
    if (L > STACK_PIECE) {
        free(next);
        free(prev);
        free(heap);
    }
    return cnt;
}

size_t tok_ranked_encode(const tok_tokenizer *t, const uint8_t *bytes, size_t n, uint32_t *out) {
    if (n == 0) return 0;
    const pcre2_code *re = t->re;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    mtCheck(md != NULL, "out of memory");
    size_t pos = 0, cnt = 0;
    while (pos < n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)bytes, n, pos, 0, md, NULL);
        size_t ms = n, me = n;
        if (rc >= 0) {
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
            ms = ov[0];
            me = ov[1];
        } else {
            mtCheck(rc == PCRE2_ERROR_NOMATCH, "pcre2_match failed on the pre-tokenizer (a match "
                                               "or JIT stack limit; the pattern needs neither)");
        }
        if (ms > pos) cnt += encode_piece(t, bytes + pos, ms - pos, out + cnt); /* invalid UTF-8 */
        if (me > ms) cnt += encode_piece(t, bytes + ms, me - ms, out + cnt);
        if (me <= pos) break; /* no match (the rest was encoded as one piece) */
        pos = me;
    }
    pcre2_match_data_free(md);
    return cnt;
}

/* ---- tokenizer.bin version 2 --------------------------------------------------------------- *
 * header (32 bytes, little-endian uint32): magic "MTOK", version 2, kind (2 ranked, 3 decode),
 * vocab_size, n_special, eot (UINT32_MAX = none), FNV-1a 32 of the body, 0.
 * body: pattern length P, P bytes of the regex; then per id 0..V-1: rank (UINT32_MAX = none),
 * length | special << 31, the bytes. */

uint8_t *tok_ranked_serialize(const tok_tokenizer *t, size_t *n) {
    size_t plen = t->pattern ? strlen(t->pattern) : 0;
    size_t V = (size_t)t->vocab_size;
    size_t total = TOK_HEADER_BYTES + 4 + plen + 8 * V + t->tok_off[V];
    uint8_t *buf = callocCheck(total, 1), *w = buf + TOK_HEADER_BYTES;
    tok_put_u32(w, (uint32_t)plen);
    memcpy(w + 4, t->pattern ? t->pattern : "", plen);
    w += 4 + plen;
    uint32_t nspecial = 0;
    for (size_t id = 0; id < V; id++) {
        uint32_t len = t->tok_off[id + 1] - t->tok_off[id];
        tok_put_u32(w, t->id_rank[id]);
        tok_put_u32(w + 4, len | (uint32_t)t->id_special[id] << 31);
        memcpy(w + 8, t->tok_bytes + t->tok_off[id], len);
        w += 8 + len;
        nspecial += t->id_special[id];
    }
    tok_put_u32(buf + 0, TOK_MAGIC);
    tok_put_u32(buf + 4, 2);
    tok_put_u32(buf + 8, (uint32_t)t->kind);
    tok_put_u32(buf + 12, (uint32_t)V);
    tok_put_u32(buf + 16, nspecial);
    tok_put_u32(buf + 20, t->eot < 0 ? UINT32_MAX : (uint32_t)t->eot);
    tok_put_u32(buf + 24, tok_fnv1a32(buf + TOK_HEADER_BYTES, total - TOK_HEADER_BYTES));
    *n = total;
    return buf;
}

int tok_ranked_parse_v2(tok_tokenizer *t, const uint8_t *buf, size_t n, char *err,
                        size_t errlen) {
    memset(t, 0, sizeof(*t));
    if (n < TOK_HEADER_BYTES + 4) {
        snprintf(err, errlen, "truncated (%zu bytes; a version 2 file has at least %d)", n,
                 TOK_HEADER_BYTES + 4);
        return -1;
    }
    uint32_t kind = tok_get_u32(buf + 8), V = tok_get_u32(buf + 12);
    if (kind != TOK_KIND_RANKED && kind != TOK_KIND_DECODE) {
        snprintf(err, errlen, "unknown kind %u for version 2 (2 = ranked, 3 = decode only)", kind);
        return -1;
    }
    if (V == 0 || V > TOK_MAX_VOCAB) {
        snprintf(err, errlen, "vocab_size %u out of range", V);
        return -1;
    }
    if (tok_fnv1a32(buf + TOK_HEADER_BYTES, n - TOK_HEADER_BYTES) != tok_get_u32(buf + 24)) {
        snprintf(err, errlen, "checksum mismatch (file corrupted or truncated)");
        return -1;
    }
    const uint8_t *r = buf + TOK_HEADER_BYTES, *end = buf + n;
    uint32_t plen = tok_get_u32(r);
    if ((size_t)(end - r - 4) < plen) goto truncated;
    char *pattern = mallocCheck((size_t)plen + 1);
    memcpy(pattern, r + 4, plen);
    pattern[plen] = 0;
    r += 4 + plen;
    tok_entries es = {0};
    for (uint32_t id = 0; id < V; id++) {
        if (end - r < 8) goto truncated_free;
        uint32_t rank = tok_get_u32(r), lf = tok_get_u32(r + 4), len = lf & 0x7fffffffu;
        if ((size_t)(end - r - 8) < len) goto truncated_free;
        tok_entries_add(&es, id, rank, r + 8, len, (int)(lf >> 31));
        r += 8 + len;
    }
    if (r != end) {
        snprintf(err, errlen, "trailing bytes after %u tokens", V);
        free(pattern);
        tok_entries_free(&es);
        return -1;
    }
    int rc = tok_ranked_build(t, (int)kind, &es, pattern, "minitrain tokenizer.bin", err, errlen);
    free(pattern);
    tok_entries_free(&es);
    return rc;
truncated_free:
    free(pattern);
    tok_entries_free(&es);
truncated:
    snprintf(err, errlen, "truncated (the token table ends early)");
    return -1;
}
