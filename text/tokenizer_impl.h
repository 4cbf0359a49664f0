/*
 * text/tokenizer_impl.h — what the tokenizer's four files share; not a public header (other
 * modules use text/tokenizer.h).
 *
 *   text/tokenizer.c    minitrain's byte/bpe tokenizers, tokenizer.bin, the tok_ entry points
 *   text/tok_train.c    training byte-level BPE (tok_train_bpe, tok_train_bpe_atomic)
 *   text/tok_ranked.c   ranked (GPT-2 / tiktoken) BPE: tables, the pcre2 pre-tokenizer, encoding,
 *                        and version 2 of tokenizer.bin
 *   text/tok_formats.c  readers of other ecosystems' files (tiktoken, Hugging Face, llm.c) and
 *                        the by-content format detection
 *
 * A reader collects one tok_entry per id (its bytes live in a shared pool) and hands them to
 * tok_ranked_build, which checks them and builds every table.
 */
#ifndef MT_TOKENIZER_IMPL_H
#define MT_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "text/tokenizer.h"

#define TOK_MAGIC 0x4B4F544Du /* bytes "MTOK" */
#define TOK_HEADER_BYTES 32

typedef struct {
    uint32_t id;
    uint32_t rank; /* TOK_NO_RANK: not used for encoding (special, or unreachable) */
    uint32_t off, len; /* bytes in the pool */
    uint8_t special;
} tok_entry;

/* A growable byte pool + entry list that readers fill. */
typedef struct {
    tok_entry *e;
    size_t n, cap;
    uint8_t *pool;
    size_t pool_n, pool_cap;
} tok_entries;

void tok_entries_add(tok_entries *es, uint32_t id, uint32_t rank, const uint8_t *bytes,
                     size_t len, int special);
void tok_entries_free(tok_entries *es);

/* Build a TOK_KIND_RANKED or TOK_KIND_DECODE tokenizer from entries (ids need not be sorted;
 * vocab_size = max id + 1, ids absent decode to nothing). Checks: no id twice, no empty ranked
 * token, no two ranked ids with the same bytes, no two ids with the same rank and, for
 * TOK_KIND_RANKED, all 256 single bytes ranked (so every byte string encodes) and a pattern that
 * pcre2 compiles. source names the format for messages. Treats *t as uninitialized.
 * Returns 0, or -1 with a message (without the file name) in err; *t is then freed. */
int tok_ranked_build(tok_tokenizer *t, int kind, tok_entries *es, const char *pattern,
                     const char *source, char *err, size_t errlen);

/* Encode with a TOK_KIND_RANKED tokenizer (see tok_encode). */
size_t tok_ranked_encode(const tok_tokenizer *t, const uint8_t *bytes, size_t n, uint32_t *out);

/* Free the ranked fields (tok_free calls it). */
void tok_ranked_free(tok_tokenizer *t);

/* Version 2 of tokenizer.bin (kinds RANKED and DECODE): serialise into a malloc'd buffer
 * (*n bytes), or parse buf[0..n) (header already known to say MTOK, version 2). */
uint8_t *tok_ranked_serialize(const tok_tokenizer *t, size_t *n);
int tok_ranked_parse_v2(tok_tokenizer *t, const uint8_t *buf, size_t n, char *err, size_t errlen);

/* Detect and read a file that is not minitrain's (buf = its whole content, or NULL with n = 0 for
 * a directory), see tok_load. Messages name the path. */
int tok_formats_load(tok_tokenizer *t, const char *path, const uint8_t *buf, size_t n, char *err,
                     size_t errlen);

/* little-endian helpers, shared with tokenizer.c (the body checksum is hash_fnv1a32, core/hash.h) */
static inline void tok_put_u32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}
static inline uint32_t tok_get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* hashing helpers shared by the merge tables (tokenizer.c) and BPE training (tok_train.c); the
 * hash itself is rng_mix64 (core/rng.h) */
#define TOK_EMPTY_KEY UINT64_MAX /* an empty slot of the open-addressing tables */

static inline uint64_t tok_pair_key(uint32_t a, uint32_t b) { return ((uint64_t)a << 32) | b; }

static inline size_t tok_pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

/* Fill tok_off/tok_bytes and the rank map from t->merges (tokenizer.c). Validates that every
 * merge refers to earlier ids, that no pair repeats and that no token exceeds TOK_MAX_CHUNK
 * bytes. Returns 0, or -1 with a message (no file name) in err. */
int tok_build_tables(tok_tokenizer *t, char *err, size_t errlen);

/* The binary min-heap of both BPE encoders (tokenizer.c, tok_ranked.c): the keys are
 * (rank << shift | position), so the lowest rank pops first and, among equal ranks, the leftmost
 * pair — the merge order BPE defines. heap holds *nh keys; the caller sizes it. */
static inline void tok_heap_push(uint64_t *heap, size_t *nh, uint64_t v) {
    size_t c = (*nh)++;
    heap[c] = v;
    while (c > 0 && heap[(c - 1) / 2] > heap[c]) {
        uint64_t x = heap[c];
        heap[c] = heap[(c - 1) / 2];
        heap[(c - 1) / 2] = x;
        c = (c - 1) / 2;
    }
}
static inline uint64_t tok_heap_pop(uint64_t *heap, size_t *nh) {
    uint64_t top = heap[0];
    heap[0] = heap[--*nh];
    for (size_t c = 0;;) { /* sift down */
        size_t l = 2 * c + 1, s = c;
        if (l < *nh && heap[l] < heap[s]) s = l;
        if (l + 1 < *nh && heap[l + 1] < heap[s]) s = l + 1;
        if (s == c) break;
        uint64_t x = heap[c];
        heap[c] = heap[s];
        heap[s] = x;
        c = s;
    }
    return top;
}

#endif /* MT_TOKENIZER_IMPL_H */
