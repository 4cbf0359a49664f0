/*
 * text/tokenizer.c — byte-level tokenizer, byte-level BPE encoding, tokenizer.bin I/O.
 * (Training BPE is text/tok_train.c.)
 *
 * Encoding keeps each chunk as a linked list of tokens plus a min-heap of (rank, position)
 * candidates with lazy invalidation, so a chunk of L bytes costs O(L log L) rather than the
 * O(L^2) of the textbook "find the lowest-ranked pair, merge, rescan" loop, with the same result
 * (a merge only creates pairs of higher rank than itself, so rank order = GPT-2's order).
 * Chunks are at most TOK_MAX_CHUNK bytes, so encoding needs only stack scratch.
 */
#include "text/tokenizer_impl.h" /* (includes text/tokenizer.h) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/fs.h"
#include "core/rng.h" /* rng_mix64 */

#define NO_RANK UINT32_MAX
#define TOK_VERSION 1u

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

/* (text/tokenizer_impl.h) */
int tok_build_tables(tok_tokenizer *t, char *err, size_t errlen) {
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
    t->rank_cap = tok_pow2_at_least(2 * (size_t)t->n_merges);
    t->rank_key = mallocCheck(t->rank_cap * sizeof(uint64_t));
    memset(t->rank_key, 0xff, t->rank_cap * sizeof(uint64_t));
    t->rank_val = mallocCheck(t->rank_cap * sizeof(uint32_t));
    for (int r = 0; r < t->n_merges; r++) {
        uint64_t key = tok_pair_key(t->merges[2 * r], t->merges[2 * r + 1]);
        size_t i = rng_mix64(key) & (t->rank_cap - 1);
        while (t->rank_key[i] != TOK_EMPTY_KEY && t->rank_key[i] != key)
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
    uint64_t key = tok_pair_key(a, b);
    size_t i = rng_mix64(key) & (t->rank_cap - 1);
    while (t->rank_key[i] != TOK_EMPTY_KEY) {
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
    mtCheck(tok_build_tables(t, err, sizeof(err)) == 0, "byte tokenizer tables cannot fail");
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

int tok_check_vocab(const tok_tokenizer *t, const char *path, int model_vocab, int exact,
                    char *err, size_t errlen) {
    int v = tok_vocab_size(t);
    if (v > model_vocab || (exact && v != model_vocab)) {
        snprintf(err, errlen, "tokenizer '%s' has %d tokens but the model's vocabulary has %d "
                 "rows: %s", path, v, model_vocab, v > model_vocab ? "its ids run past the "
                 "embedding table" : "it is not this model's tokenizer");
        return -1;
    }
    return 0;
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
        /* not minitrain's own file: the other ecosystems' formats (text/tok_formats.c) */
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
        if (tok_build_tables(t, detail, sizeof(detail)) == 0)
            rc = 0;
    }
    if (rc != 0) {
        snprintf(err, errlen, "tokenizer file '%s': %s", path, what ? what : detail);
        tok_free(t);
    }
    free(buf);
    return rc;
}
